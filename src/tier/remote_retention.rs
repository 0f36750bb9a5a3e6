//! Total retention over the segments only the object store holds (docs/design.md, "Tiered
//! storage"): the partition's `retention_ms` and `retention_bytes` apply to its whole log, the
//! remote segments below the local log start included. The next manifest generation without
//! the expired segments is written first (with a put-if-absent, as every manifest), then their
//! objects are deleted: a crash between leaves objects no manifest names, never a manifest
//! naming a missing object.

use super::error::TierError;
use super::generation::{delete_objects, next_of, write_next};
use super::keys::SegmentObject;
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::log::{Log, RetentionReason};

/// What [`enforce_remote_retention`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteRetentionReport {
    /// The remote segments removed, oldest first: base, end, and the rule they broke.
    pub removed: Vec<(i64, i64, RetentionReason)>,
    /// The manifest generation written without them, if any were.
    pub generation: Option<u64>,
    /// Their objects that could not be deleted (named by no manifest now).
    pub orphans_left: usize,
}

/// Removes from the store the remote segments of `log` that its `retention_ms` and
/// `retention_bytes` (the size counting the remote and the local segments) no longer keep,
/// among those wholly below the local log start, oldest first. Only when the cleanup policy
/// contains `delete`.
pub fn enforce_remote_retention(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    now_ms: i64,
) -> Result<RemoteRetentionReport, TierError> {
    let mut report = RemoteRetentionReport::default();
    let Some(manifest) = read_manifest(store, partition)? else {
        return Ok(report);
    };
    let local_start = log.log_start_offset();
    let remote_only: Vec<(i64, i64, u64, i64)> = manifest
        .segments
        .iter()
        .take_while(|s| s.end_offset <= local_start)
        .map(|s| {
            let bytes = s.object(SegmentObject::Log).size;
            (s.base_offset, s.end_offset, bytes, s.max_timestamp)
        })
        .collect();
    let reasons = log.remote_retention(&remote_only, now_ms);
    if reasons.is_empty() {
        return Ok(report);
    }
    let kept = manifest.segments[reasons.len()..].to_vec();
    // The partition's start moves up with its first segment, never down.
    let log_start = kept
        .first()
        .map_or(manifest.segments[reasons.len() - 1].end_offset, |f| {
            f.base_offset
        })
        .max(manifest.log_start_offset);
    let next = next_of(&manifest, kept, log_start);
    write_next(store, &next, manifest.segments[0].base_offset)?;
    let gone = &manifest.segments[..reasons.len()];
    report.orphans_left = delete_objects(store, partition, gone);
    for (s, reason) in gone.iter().zip(&reasons) {
        report.removed.push((s.base_offset, s.end_offset, *reason));
    }
    let generation = next.generation;
    report.generation = Some(generation);
    Ok(report)
}
