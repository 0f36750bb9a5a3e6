//! DeleteRecords across tiers (Kafka's KIP-405 semantics; docs/design.md, "Tiered storage"):
//! the log start offset is the partition's, remote segments included. The new log start is
//! recorded first in the next manifest generation, without the remote segments wholly below
//! it; then the local log start is raised if it is below; then the dropped segments' objects
//! are deleted.
//!
//! Why in that order: the manifest generation is the commit point. It is the only durable
//! record of a start below the local log start, and it is written with a put-if-absent, so a
//! DeleteRecords racing an upload or retention either wins whole or retries on the new
//! generation. A crash after it and before the log's own `delete_records` leaves the
//! manifest's start above the local one: every reader of the partition's start takes the
//! higher ([`super::Manifest::partition_log_start`]), and [`super::settle_log_start`] (when a
//! tiered partition opens) or [`super::reconcile`] (the tiering job) moves the log up to it. So
//! once a DeleteRecords is answered no restart reports a lower start, and a crash before the
//! manifest changes nothing. The objects go last: a crash before leaves orphans
//! ([`super::remove_orphans`]), never a manifest naming a missing object.

use super::error::TierError;
use super::generation::{delete_objects, write_next};
use super::manifest::{Manifest, RemoteSegment};
use super::reconcile::{local_failure, raise_local_start};
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::log::Log;

/// Tries of a DeleteRecords that loses the race for a manifest generation (to an upload or to
/// retention): each reads the manifest again. DeleteRecords is idempotent.
const TRIES: usize = 3;

/// What [`delete_records`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordsDeleted {
    /// The partition's log start offset after: Kafka's low watermark.
    pub log_start_offset: i64,
    /// Remote segments removed (wholly below the new start), `(base, end)`, oldest first.
    pub removed: Vec<(i64, i64)>,
    /// The manifest generation written, if the start moved.
    pub generation: Option<u64>,
    /// Objects of the removed segments that could not be deleted (named by no manifest now).
    pub orphans_left: usize,
}

/// Kafka's DeleteRecords on a tiered partition: raises the partition's log start offset to
/// `offset`, which may be below the local log start (into the remote segments) or at or above
/// it. Records below it are no longer readable from either tier ([`super::read`] answers
/// [`TierError::BelowLogStart`]); remote segments wholly below it leave the manifest, and their
/// objects are deleted; the local log start is raised when it is below `offset`. Never above
/// the high watermark ([`TierError::DeleteRecordsOutOfRange`]); an offset at or below the
/// partition's start changes nothing (but finishes a DeleteRecords a crash cut). Durable before
/// it returns. The log is flushed to `offset` first.
pub fn delete_records(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    offset: i64,
) -> Result<RecordsDeleted, TierError> {
    // A manifest may name the new start only once the local log durably holds everything
    // below it: a restart then finds a log whose start can follow the manifest's.
    if offset > log.recovery_point() && offset <= log.log_end_offset() {
        log.flush()
            .map_err(|error| local_failure(offset, error.into()))?;
    }
    let high_watermark = log.high_watermark();
    if offset < 0 || offset > high_watermark {
        return Err(TierError::DeleteRecordsOutOfRange {
            offset,
            high_watermark,
        });
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let current = read_manifest(store, partition)?;
        match once(log, store, partition, offset, current) {
            Err(TierError::ManifestConflict { .. }) if tries < TRIES => continue,
            other => return other,
        }
    }
}

fn once(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    offset: i64,
    current: Option<Manifest>,
) -> Result<RecordsDeleted, TierError> {
    let local = log.log_start_offset();
    let start = current
        .as_ref()
        .map_or(local, |m| m.partition_log_start(local));
    if offset <= start {
        if let Some(m) = &current {
            raise_local_start(log, m)?;
        }
        return Ok(RecordsDeleted {
            log_start_offset: start,
            ..RecordsDeleted::default()
        });
    }
    let (gone, kept): (Vec<RemoteSegment>, Vec<RemoteSegment>) = current
        .as_ref()
        .map_or(&[][..], |m| &m.segments[..])
        .iter()
        .cloned()
        .partition(|s| s.end_offset <= offset);
    // A partition with nothing uploaded gets a manifest too: an upload that read no manifest
    // before this one then loses its race, rather than recording the old start.
    let next = Manifest {
        partition: partition.to_string(),
        generation: current.as_ref().map_or(1, |m| m.generation + 1),
        log_start_offset: offset,
        segments: kept,
    };
    write_next(store, &next, gone.first().map_or(offset, |s| s.base_offset))?;
    if offset > log.log_start_offset() {
        log.delete_records(offset)
            .map_err(|error| local_failure(offset, error))?;
    }
    let orphans_left = delete_objects(store, partition, &gone);
    Ok(RecordsDeleted {
        log_start_offset: offset,
        removed: gone.iter().map(|s| (s.base_offset, s.end_offset)).collect(),
        generation: Some(next.generation),
        orphans_left,
    })
}
