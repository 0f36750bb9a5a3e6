//! Total retention over the segments only the object store holds (docs/design.md, "Tiered
//! storage"): the partition's `retention_ms` and `retention_bytes` apply to its whole log, the
//! remote segments below the local log start included. The next manifest generation without
//! the expired segments is written first (with a put-if-absent, as every manifest), then their
//! objects are deleted: a crash between leaves objects no manifest names, never a manifest
//! naming a missing object.

use super::error::TierError;
use super::keys::{self, SegmentObject};
use super::manifest::Manifest;
use super::store::{Created, RemoteStore};
use super::upload::{newest_generation, prune, read_manifest};
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
    let generation = manifest.generation + 1;
    let next = Manifest {
        partition: partition.to_string(),
        generation,
        segments: manifest.segments[reasons.len()..].to_vec(),
    };
    let key = keys::manifest_key(partition, generation);
    let conflict = || TierError::ManifestConflict {
        partition: partition.to_string(),
        generation,
        segment: manifest.segments[0].base_offset,
        orphans_left: 0,
    };
    match store.put_if_absent(&key, &next.encode()) {
        Ok(Created::Created) => {}
        Ok(Created::AlreadyExists) => return Err(conflict()),
        // It may have been written all the same: what the store holds decides.
        Err(error) => match store.get(&key) {
            Ok(found) if found == next.encode() => {}
            Ok(_) => return Err(conflict()),
            Err(_) => {
                return Err(TierError::Remote {
                    step: format!("put_if_absent manifest generation {generation}"),
                    error,
                })
            }
        },
    }
    // A writer that lagged behind pruned generations could create one nobody reads: then the
    // current manifest may still name these segments, and their objects stay.
    if newest_generation(store, partition)? != Some(generation) {
        return Err(conflict());
    }
    prune(store, partition, generation);
    for (s, reason) in manifest.segments.iter().zip(&reasons) {
        for o in SegmentObject::ALL {
            let key = o.key(partition, s.base_offset, s.end_offset, s.upload_id);
            if store.delete(&key).is_err() {
                report.orphans_left += 1;
            }
        }
        report.removed.push((s.base_offset, s.end_offset, *reason));
    }
    report.generation = Some(generation);
    Ok(report)
}
