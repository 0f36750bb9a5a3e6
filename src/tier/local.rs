//! Local retention shorter than total retention (docs/design.md, "Tiered storage"): local
//! copies past `local_retention_ms` / `local_retention_bytes` (Kafka's `local.retention.ms`
//! and `local.retention.bytes`) are deleted, but only those the object store's current
//! manifest, read back at that moment, names.

use super::error::{NotUploadable, TierError};
use super::keys::SegmentObject;
use super::manifest::Manifest;
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::log::{Log, RetentionReport};

/// The local retention limits of a tiered partition (Kafka's names). `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalRetention {
    /// Local copies whose newest timestamp is older than this (ms) go (`local.retention.ms`).
    pub local_retention_ms: Option<i64>,
    /// Local copies go, oldest first, while the local segments hold more than this
    /// (`local.retention.bytes`).
    pub local_retention_bytes: Option<u64>,
}

impl LocalRetention {
    /// Limits by time and size.
    pub const fn new(local_retention_ms: Option<i64>, local_retention_bytes: Option<u64>) -> Self {
        LocalRetention {
            local_retention_ms,
            local_retention_bytes,
        }
    }
}

/// The end of the leading local segments `m` names (same base, same end, same `.log` size), or
/// the log start when it names none of them: local retention may delete nothing above it.
pub(crate) fn confirmed_end(extents: &[(i64, i64, u64)], log_start: i64, m: &Manifest) -> i64 {
    let mut end = log_start;
    for &(base, next, size) in extents {
        let same = m
            .segment(base)
            .is_some_and(|r| r.end_offset == next && r.object(SegmentObject::Log).size == size);
        if !same {
            break;
        }
        end = next;
    }
    end
}

/// Deletes the local copies of `log`'s segments past `limits`, oldest first, among those the
/// current manifest of `partition` names: the log start moves up to the first segment kept,
/// as retention moves it (a read below it is then [`super::read`]'s, from the store).
/// Nothing goes without a manifest, or from a log that compacts (its segments are rewritten
/// after upload). The manifest is read from the store now, never from memory. Producer state
/// is kept, as by retention.
pub fn enforce_local_retention(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    limits: LocalRetention,
    now_ms: i64,
) -> Result<RetentionReport, TierError> {
    if log.config().cleanup_policy.compacts() {
        return Err(TierError::NotUploadable {
            segment: log.log_start_offset(),
            reason: NotUploadable::Compacted,
        });
    }
    let Some(manifest) = read_manifest(store, partition)? else {
        return Ok(RetentionReport::default());
    };
    let end = confirmed_end(&log.sealed_extents(), log.log_start_offset(), &manifest);
    log.enforce_local_retention(
        now_ms,
        limits.local_retention_bytes,
        limits.local_retention_ms,
        end,
    )
    .map_err(|error| TierError::LocalRetention { error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::keys::UploadId;
    use crate::tier::manifest::{ObjectDigest, RemoteSegment};

    fn remote(base: i64, end: i64, size: u64) -> RemoteSegment {
        let mut objects = [ObjectDigest::default(); 6];
        objects[0].size = size;
        RemoteSegment {
            base_offset: base,
            end_offset: end,
            upload_id: UploadId(1),
            max_timestamp: 0,
            objects,
        }
    }

    #[test]
    fn only_the_leading_segments_the_manifest_names_as_they_are_are_confirmed() {
        let m = Manifest {
            partition: "p".into(),
            generation: 3,
            log_start_offset: 0,
            segments: vec![remote(0, 10, 100), remote(10, 20, 100), remote(20, 30, 100)],
        };
        let local = [(0, 10, 100), (10, 20, 100), (20, 30, 100), (30, 40, 100)];
        assert_eq!(confirmed_end(&local, 0, &m), 30);
        // Gone locally already: the walk starts at the first local segment.
        assert_eq!(confirmed_end(&local[1..], 10, &m), 30);
        // A segment whose end or size differs stops the walk there.
        assert_eq!(confirmed_end(&[(0, 10, 100), (10, 19, 100)], 0, &m), 10);
        assert_eq!(confirmed_end(&[(0, 10, 99)], 0, &m), 0);
        // A local segment the manifest does not name.
        assert_eq!(confirmed_end(&[(5, 10, 100)], 5, &m), 5);
    }
}
