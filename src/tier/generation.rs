//! Writing the next manifest generation (docs/design.md, "Tiered storage": the manifest, and
//! why two writers cannot both win), and deleting the objects of the segments it no longer
//! names. Every change but an upload (retention, DeleteRecords, reconciliation with a truncated
//! log) goes this way: the manifest first, the objects after, so a crash between leaves
//! objects no manifest names (orphans, [`super::remove_orphans`]'s), never a manifest naming a
//! missing object.

use super::error::TierError;
use super::keys::{self, SegmentObject};
use super::manifest::{Manifest, RemoteSegment};
use super::store::{Created, RemoteStore};
use super::upload::{newest_generation, prune};

/// Creates `next`, the generation after the one it was built from, with a put-if-absent, and
/// checks it is the newest after (a writer that lagged behind pruned generations could create
/// one nobody reads). A generation created by another writer, or a newer one, is
/// [`TierError::ManifestConflict`] naming `segment` (the first segment the change is about):
/// nothing the caller meant to do is confirmed. Prunes old generations on success.
pub(super) fn write_next(
    store: &dyn RemoteStore,
    next: &Manifest,
    segment: i64,
) -> Result<(), TierError> {
    let (partition, generation) = (next.partition.as_str(), next.generation);
    let key = keys::manifest_key(partition, generation);
    let conflict = || TierError::ManifestConflict {
        partition: partition.to_string(),
        generation,
        segment,
        orphans_left: 0,
    };
    let bytes = next.encode();
    match store.put_if_absent(&key, &bytes) {
        Ok(Created::Created) => {}
        Ok(Created::AlreadyExists) => return Err(conflict()),
        // It may have been written all the same: what the store holds decides.
        Err(error) => match store.get(&key) {
            Ok(found) if found == bytes => {}
            Ok(_) => return Err(conflict()),
            Err(_) => {
                return Err(TierError::Remote {
                    step: format!("put_if_absent manifest generation {generation}"),
                    error,
                })
            }
        },
    }
    if newest_generation(store, partition)? != Some(generation) {
        return Err(conflict());
    }
    prune(store, partition, generation);
    Ok(())
}

/// The generation after `current` with `segments` and `log_start_offset`.
pub(super) fn next_of(
    current: &Manifest,
    segments: Vec<RemoteSegment>,
    log_start_offset: i64,
) -> Manifest {
    Manifest {
        partition: current.partition.clone(),
        generation: current.generation + 1,
        log_start_offset,
        segments,
    }
}

/// Deletes the objects of `segments` (named by no manifest any more), returning how many could
/// not be deleted: orphans left for [`super::remove_orphans`].
pub(super) fn delete_objects(
    store: &dyn RemoteStore,
    partition: &str,
    segments: &[RemoteSegment],
) -> usize {
    segments
        .iter()
        .flat_map(|s| {
            SegmentObject::ALL.map(|o| o.key(partition, s.base_offset, s.end_offset, s.upload_id))
        })
        .filter(|key| store.delete(key).is_err())
        .count()
}
