//! Bringing the manifest and the local log back into agreement (docs/design.md, "Tiered
//! storage": DeleteRecords across tiers; a log truncated below what is uploaded). Two things
//! can leave them apart:
//!
//! - a crash (or a failed local step) between the manifest generation a
//!   [`super::delete_records`] wrote and the log's own `delete_records`: the manifest's log
//!   start is above the local one, and the local log start is raised to it;
//! - a truncation of the local log below the remote end (`Log::truncate_to`, a replica cut by
//!   its leader, a full truncation): remote segments at or above the cut describe offsets the
//!   log no longer holds, or holds with other bytes. The next generation drops the first remote
//!   segment the local log does not hold byte for byte and every segment after it, then their
//!   objects go; the uploads that follow start again from there.

use std::collections::BTreeMap;

use super::error::TierError;
use super::generation::{delete_objects, next_of, write_next};
use super::keys::{SegmentObject, UploadId};
use super::manifest::{Manifest, RemoteSegment};
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::log::{Log, RewriteError};

/// A local sealed segment as the manifest is compared with it: its end, `.log` size and `.log`
/// CRC-32C; `None` when the log has no sealed segment at that base.
type LocalDigest = Option<(i64, u64, u32)>;

/// What [`reconcile`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reconciled {
    /// The local log start raised to the manifest's, `(from, to)`: a DeleteRecords whose local
    /// step a crash or a failure cut.
    pub local_start_raised: Option<(i64, i64)>,
    /// Remote segments dropped because the local log no longer holds their bytes, `(base,
    /// end)`, oldest first.
    pub dropped: Vec<(i64, i64)>,
    /// The manifest generation written without them, if any were dropped.
    pub generation: Option<u64>,
    /// Their objects that could not be deleted (named by no manifest now).
    pub orphans_left: usize,
}

/// The local segments [`reconcile_with`] found to hold their remote segment's bytes, by base
/// and upload id, with the identity they had then (end, `.log` size, header digest): while a
/// segment keeps that identity, its `.log` is not read again. Kept in memory by the caller (the
/// manager keeps one per partition).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    held: BTreeMap<(i64, UploadId), (i64, u64, u32)>,
}

impl Verified {
    /// Segments it vouches for.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether it vouches for none.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Brings `log` and the manifest of `partition` into agreement: raises the local log start to
/// the manifest's log start when it is below it, then drops from the manifest every remote
/// segment from the first one that reaches above the local log start and that the local log
/// does not hold with the same offsets and the same `.log` bytes (size and CRC-32C). Segments
/// wholly below the local log start are remote only, and stay. Reads every local `.log` that
/// is also remote (its CRC-32C); [`reconcile_with`] reads only those it has not checked before.
pub fn reconcile(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
) -> Result<Reconciled, TierError> {
    reconcile_with(log, store, partition, &mut Verified::default())
}

/// [`reconcile`], reading the `.log` of a local segment only when `verified` does not say it
/// held its remote segment's bytes with the identity it has now (end, size and header digest,
/// which covers every batch's CRC: a truncated and rewritten segment has another). The tiering
/// job runs it before each partition's uploads.
pub fn reconcile_with(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    verified: &mut Verified,
) -> Result<Reconciled, TierError> {
    let mut done = Reconciled::default();
    let Some(manifest) = read_manifest(store, partition)? else {
        return Ok(done);
    };
    done.local_start_raised = raise_local_start(log, &manifest)?;
    let local_start = log.log_start_offset();
    let mut local = Vec::new();
    let mut checked = BTreeMap::new();
    for s in manifest
        .segments
        .iter()
        .filter(|s| s.end_offset > local_start)
    {
        let key = (s.base_offset, s.upload_id);
        let identity = log.sealed_log_identity(s.base_offset);
        if let Some(id) = identity.filter(|id| verified.held.get(&key) == Some(id)) {
            let remote = s.object(SegmentObject::Log);
            local.push((
                s.base_offset,
                Some((s.end_offset, remote.size, remote.crc32c)),
            ));
            checked.insert(key, id);
            continue;
        }
        let digest =
            log.sealed_log_digest(s.base_offset)
                .map_err(|error| TierError::LocalFile {
                    segment: s.base_offset,
                    error,
                })?;
        local.push((s.base_offset, digest));
        // Only the first disagreement matters: everything after it goes with it.
        if !holds(s, digest) {
            break;
        }
        if let Some(id) = identity {
            checked.insert(key, id);
        }
    }
    verified.held = checked;
    let keep = agreeing(&manifest.segments, local_start, &local);
    if keep == manifest.segments.len() {
        return Ok(done);
    }
    let gone: Vec<RemoteSegment> = manifest.segments[keep..].to_vec();
    let next = next_of(
        &manifest,
        manifest.segments[..keep].to_vec(),
        manifest.log_start_offset,
    );
    write_next(store, &next, gone[0].base_offset)?;
    done.orphans_left = delete_objects(store, partition, &gone);
    done.dropped = gone.iter().map(|s| (s.base_offset, s.end_offset)).collect();
    done.generation = Some(next.generation);
    Ok(done)
}

/// Raises the local log start to the manifest's log start when it is below it: the local step
/// of a DeleteRecords, which the manifest recorded first.
pub(super) fn raise_local_start(
    log: &Log,
    manifest: &Manifest,
) -> Result<Option<(i64, i64)>, TierError> {
    let (from, to) = (log.log_start_offset(), manifest.log_start_offset);
    if to <= from {
        return Ok(None);
    }
    log.delete_records(to)
        .map_err(|error| local_failure(to, error))?;
    Ok(Some((from, to)))
}

/// The local DeleteRecords to `offset` failed.
pub(super) fn local_failure(offset: i64, error: RewriteError) -> TierError {
    match error {
        RewriteError::AboveHighWatermark {
            offset,
            high_watermark,
        } => TierError::DeleteRecordsOutOfRange {
            offset,
            high_watermark,
        },
        error => TierError::LocalDeleteRecords { offset, error },
    }
}

/// Whether the local sealed segment `local` (`(end, .log size, .log CRC-32C)`) is the remote
/// segment `s`.
fn holds(s: &RemoteSegment, local: LocalDigest) -> bool {
    let log = s.object(SegmentObject::Log);
    local == Some((s.end_offset, log.size, log.crc32c))
}

/// How many of the leading remote `segments` still describe the log: every one wholly below
/// `local_start` (remote only), then every one the local log holds as it was uploaded
/// (`local`: base and the local digest, for those reaching above the local start), up to the
/// first that it does not.
pub(crate) fn agreeing(
    segments: &[RemoteSegment],
    local_start: i64,
    local: &[(i64, LocalDigest)],
) -> usize {
    segments
        .iter()
        .take_while(|s| {
            s.end_offset <= local_start
                || local
                    .iter()
                    .find(|(base, _)| *base == s.base_offset)
                    .is_some_and(|(_, d)| holds(s, *d))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::manifest::ObjectDigest;

    fn remote(base: i64, end: i64, size: u64, crc: u32) -> RemoteSegment {
        let mut objects = [ObjectDigest::default(); 6];
        objects[0] = ObjectDigest { size, crc32c: crc };
        RemoteSegment {
            base_offset: base,
            end_offset: end,
            upload_id: UploadId(1),
            max_timestamp: 0,
            objects,
        }
    }

    #[test]
    fn the_first_remote_segment_the_local_log_does_not_hold_and_all_after_it_go() {
        let segs = [
            remote(0, 10, 100, 1),
            remote(10, 20, 100, 2),
            remote(20, 30, 100, 3),
        ];
        let same = |b: i64, e: i64, c: u32| (b, Some((e, 100, c)));
        // All local and the same: all stay.
        assert_eq!(
            agreeing(
                &segs,
                0,
                &[same(0, 10, 1), same(10, 20, 2), same(20, 30, 3)]
            ),
            3
        );
        // Wholly below the local start: remote only, kept without a look.
        assert_eq!(agreeing(&segs, 20, &[same(20, 30, 3)]), 3);
        // Truncated at 15 and written again: the segment at 10 ends elsewhere now.
        assert_eq!(agreeing(&segs, 0, &[same(0, 10, 1), same(10, 17, 2)]), 1);
        // The same offsets with other bytes.
        assert_eq!(agreeing(&segs, 0, &[same(0, 10, 1), same(10, 20, 9)]), 1);
        // No sealed segment there any more (cut into the active one).
        assert_eq!(agreeing(&segs, 0, &[same(0, 10, 1), (10, None)]), 1);
        // A full truncation to 5: nothing local holds [0, 10).
        assert_eq!(agreeing(&segs, 5, &[(0, None)]), 0);
    }
}
