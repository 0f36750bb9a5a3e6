//! The upload of one sealed segment and the manifest that confirms it (docs/design.md,
//! "Tiered storage"): take the segment's files, check them, put its six objects under a fresh
//! upload id, then create the next manifest generation with a put-if-absent.

use super::error::{NotUploadable, TierError};
use super::keys::{self, SegmentObject, UploadId};
use super::manifest::{Manifest, ObjectDigest, RemoteSegment};
use super::store::{Created, RemoteStore};
use crate::log::epochs;
use crate::log::{Log, SealedSegmentFiles};
use crate::verify::{self, SealedSegmentBytes};

/// Manifest generations kept below the newest one: older ones are deleted after a write.
const GENERATIONS_KEPT_BELOW: u64 = 2;

/// What [`upload_segment`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Uploaded {
    /// The segment was uploaded and the manifest generation `generation` names it.
    Uploaded {
        /// The segment as the manifest records it.
        segment: RemoteSegment,
        /// The manifest generation written.
        generation: u64,
    },
    /// The current manifest already names a segment with that base offset: nothing was done.
    AlreadyRemote {
        /// The current manifest's generation.
        generation: u64,
    },
}

/// Reads the current manifest of `partition` (its highest generation), `None` if it has none.
pub fn read_manifest(
    store: &dyn RemoteStore,
    partition: &str,
) -> Result<Option<Manifest>, TierError> {
    check_prefix(partition)?;
    let Some(generation) = newest_generation(store, partition)? else {
        return Ok(None);
    };
    read_generation(store, partition, generation).map(Some)
}

/// The segments of `log` that may be uploaded now, oldest first, as `(base, end)` offsets:
/// sealed, wholly durable, committed and stable (docs/design.md, "Tiered storage").
pub fn uploadable_segments(log: &Log) -> Vec<(i64, i64)> {
    log.uploadable_segments()
}

/// Uploads the sealed segment of `log` at `base` under the prefix `partition`, and writes the
/// manifest generation that names it. The segment must be uploadable
/// ([`uploadable_segments`]) and start where the remote segments end (any segment, for the
/// first). Its bytes are checked first (`verify::check_sealed_segment`): damage is
/// [`TierError::Damaged`], and nothing is put. No local file is changed, whatever happens.
pub fn upload_segment(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    base: i64,
) -> Result<Uploaded, TierError> {
    check_prefix(partition)?;
    let current = read_manifest(store, partition)?;
    if let Some((m, r)) = current
        .as_ref()
        .and_then(|m| m.segment(base).map(|r| (m, r)))
    {
        // Named already: by this log's bytes, unless the log was cut below and written again
        // (then `reconcile` drops it first; a second copy of its offsets never goes up).
        let local = log
            .sealed_log_digest(base)
            .map_err(|error| TierError::LocalFile {
                segment: base,
                error,
            })?;
        let remote = r.object(SegmentObject::Log);
        if local != Some((r.end_offset, remote.size, remote.crc32c)) {
            return Err(TierError::RemoteDiverged {
                segment: base,
                remote_end: r.end_offset,
                remote_size: remote.size,
                local: local.map(|(end, size, _)| (end, size)),
            });
        }
        return Ok(Uploaded::AlreadyRemote {
            generation: m.generation,
        });
    }
    if let Some(remote_end) = current
        .as_ref()
        .and_then(Manifest::remote_end)
        .filter(|&end| end != base)
    {
        return Err(TierError::NotContiguous {
            segment: base,
            remote_end,
        });
    }
    let files = log.sealed_segment_files(base)?;
    let (generation, mut segments, log_start) = match current {
        Some(m) => (m.generation + 1, m.segments, m.log_start_offset),
        None => (1, Vec::new(), 0),
    };
    // The first segment of a manifest holds the partition's start: the log's, or the one a
    // DeleteRecords recorded, whichever is higher; later uploads leave it.
    let log_start = if segments.is_empty() {
        log_start.max(base).max(log.log_start_offset())
    } else {
        log_start
    };
    if log_start >= files.end_offset {
        return Err(TierError::NotUploadable {
            segment: base,
            reason: NotUploadable::BelowLogStart {
                log_start_offset: log_start,
            },
        });
    }
    check_files(&files)?;
    let epochs = epochs::encode(&files.leader_epochs).into_bytes();
    let bodies: [&[u8]; 6] = [
        files.log(),
        &files.offset_index,
        &files.time_index,
        &files.txn_index,
        &files.producer_snapshot,
        &epochs,
    ];
    let id = UploadId::fresh();
    let (end, keys) = (files.end_offset, object_keys(partition, &files, id));
    for (i, which) in SegmentObject::ALL.into_iter().enumerate() {
        if let Err(error) = store.put(&keys[i], bodies[i]) {
            // No manifest names them: what this attempt put goes, the failed put's object too
            // (a put that fails may still have happened).
            delete_all(store, &keys[..=i]);
            return Err(TierError::Remote {
                step: format!("put {} of segment {base}", which.name()),
                error,
            });
        }
    }
    let segment = RemoteSegment {
        base_offset: base,
        end_offset: end,
        upload_id: id,
        max_timestamp: files.max_timestamp,
        objects: bodies.map(ObjectDigest::of),
    };
    segments.push(segment.clone());
    let next = Manifest {
        partition: partition.to_string(),
        generation,
        log_start_offset: log_start,
        segments,
    };
    commit(store, &next, &segment, &keys)?;
    prune(store, partition, generation);
    Ok(Uploaded::Uploaded {
        segment,
        generation,
    })
}

/// Runs the engine's per-segment checks on the bytes about to leave; any problem refuses the
/// upload.
fn check_files(files: &SealedSegmentFiles) -> Result<(), TierError> {
    let report = verify::check_sealed_segment(&SealedSegmentBytes {
        dir: &files.dir,
        base_offset: files.base_offset,
        end_offset: files.end_offset,
        log: files.log(),
        offset_index: &files.offset_index,
        time_index: &files.time_index,
        header_digest: files.header_digest,
    });
    let mut problems = report.problems;
    if let Err(e) = crate::producer::snapshot::decode(&files.producer_snapshot)
        .and_then(|s| s.check_at(files.end_offset))
    {
        problems.push(verify::Problem {
            file: crate::producer::snapshot_files::path(&files.dir, files.end_offset),
            position: None,
            kind: "bad_snapshot",
            reason: e.to_string(),
        });
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(TierError::Damaged {
            segment: files.base_offset,
            problems,
        })
    }
}

fn object_keys(partition: &str, files: &SealedSegmentFiles, id: UploadId) -> [String; 6] {
    SegmentObject::ALL.map(|o| o.key(partition, files.base_offset, files.end_offset, id))
}

/// Creates `next` with a put-if-absent, and makes sure the current manifest names the
/// segment. The upload's objects are deleted only when no manifest can name them: when the
/// generation was created by another writer. Once a manifest naming them may exist (this one,
/// even superseded, or one whose put failed without saying whether it happened), they stay.
fn commit(
    store: &dyn RemoteStore,
    next: &Manifest,
    segment: &RemoteSegment,
    keys: &[String; 6],
) -> Result<(), TierError> {
    let (partition, generation) = (next.partition.as_str(), next.generation);
    let key = keys::manifest_key(partition, generation);
    let conflict = |orphans_left: usize| TierError::ManifestConflict {
        partition: partition.to_string(),
        generation,
        segment: segment.base_offset,
        orphans_left,
    };
    match store.put_if_absent(&key, &next.encode()) {
        Ok(Created::Created) => {}
        Ok(Created::AlreadyExists) => return Err(conflict(delete_all(store, keys))),
        // It may have been written all the same: what the store holds decides.
        Err(error) => match read_generation(store, partition, generation) {
            Ok(found) if names(&found, segment) => {}
            Ok(_) => return Err(conflict(delete_all(store, keys))),
            Err(_) => {
                return Err(TierError::Remote {
                    step: format!("put_if_absent manifest generation {generation}"),
                    error,
                })
            }
        },
    }
    // A writer that lagged behind pruned generations could create one nobody reads; a newer
    // generation that another writer built on this one still names the segment.
    match newest_generation(store, partition)? {
        Some(newest) if newest > generation => {
            if names(&read_generation(store, partition, newest)?, segment) {
                Ok(())
            } else {
                Err(conflict(keys.len()))
            }
        }
        _ => Ok(()),
    }
}

/// Whether `m` names `segment` as this upload wrote it.
fn names(m: &Manifest, segment: &RemoteSegment) -> bool {
    m.segment(segment.base_offset) == Some(segment)
}

/// Deletes `keys`, returning how many could not be.
fn delete_all(store: &dyn RemoteStore, keys: &[String]) -> usize {
    keys.iter().filter(|k| store.delete(k).is_err()).count()
}

/// Deletes manifest generations more than [`GENERATIONS_KEPT_BELOW`] below `newest`; a failure
/// leaves them for the next write.
pub(super) fn prune(store: &dyn RemoteStore, partition: &str, newest: u64) {
    let Ok(objects) = store.list(&keys::manifest_folder(partition)) else {
        return;
    };
    for o in objects {
        if keys::parse_manifest_key(partition, &o.key)
            .is_some_and(|g| g + GENERATIONS_KEPT_BELOW < newest)
        {
            let _ = store.delete(&o.key);
        }
    }
}

fn check_prefix(partition: &str) -> Result<(), TierError> {
    match keys::check_partition_prefix(partition) {
        None => Ok(()),
        Some(reason) => Err(TierError::BadPartitionPrefix {
            prefix: partition.to_string(),
            reason,
        }),
    }
}

/// The highest manifest generation stored, `None` without one. A key in the manifest folder
/// that names no generation is refused: the folder holds manifests only.
pub(super) fn newest_generation(
    store: &dyn RemoteStore,
    partition: &str,
) -> Result<Option<u64>, TierError> {
    let folder = keys::manifest_folder(partition);
    let objects = store.list(&folder).map_err(|error| TierError::Remote {
        step: "list manifests".into(),
        error,
    })?;
    let mut newest = None;
    for o in objects {
        let Some(g) = keys::parse_manifest_key(partition, &o.key) else {
            return Err(TierError::BadManifest {
                key: o.key,
                line: None,
                reason: format!("in {folder}/ but not named as a manifest generation (20 digits)"),
            });
        };
        newest = newest.max(Some(g));
    }
    Ok(newest)
}

pub(super) fn read_generation(
    store: &dyn RemoteStore,
    partition: &str,
    generation: u64,
) -> Result<Manifest, TierError> {
    let key = keys::manifest_key(partition, generation);
    let bytes = store.get(&key).map_err(|error| TierError::Remote {
        step: format!("get manifest generation {generation}"),
        error,
    })?;
    Manifest::decode(&bytes, partition, generation).map_err(|p| TierError::BadManifest {
        key,
        line: p.line,
        reason: p.reason,
    })
}
