//! Removal of orphaned objects (docs/design.md, "Tiered storage": orphans): objects under a
//! partition's `segments/` folder that no manifest names, left by an upload that crashed after
//! its puts and before its manifest, by a lost race whose cleanup failed, or by segments a
//! manifest dropped whose deletes failed.
//!
//! An object not named now may still be named soon: an upload in flight puts its objects
//! before it creates its manifest. So an object is deleted only on a later pass than the one
//! that first saw it unnamed, and only when a manifest generation newer than the one current at
//! that first sighting exists (the upload that put it read its manifest before its puts, so
//! it could only create a generation that now exists and does not name it: it lost), or once
//! the grace period has passed since that sighting (an upload slower than the grace period
//! could lose its objects: choose it well above the longest upload). The sightings are kept in
//! memory by the caller ([`OrphanSightings`]); a restart starts them over, which only delays.

use std::collections::{BTreeMap, BTreeSet};

use super::error::TierError;
use super::keys::{self, UploadId, SEGMENTS_FOLDER};
use super::store::RemoteStore;
use super::upload::{newest_generation, prune, read_generation};

/// Objects seen unnamed by a manifest, by key: when first seen (ms) and the manifest generation
/// current then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrphanSightings {
    seen: BTreeMap<String, (i64, u64)>,
}

impl OrphanSightings {
    /// Objects seen unnamed and not deleted yet.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// What [`remove_orphans`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrphansRemoved {
    /// Objects deleted.
    pub deleted: usize,
    /// Objects seen unnamed and kept for a later pass (first seen now, or not due yet).
    pub waiting: usize,
    /// Deletes that failed (tried again on the next pass).
    pub failed: usize,
}

/// Deletes the objects under `<partition>/segments/` that the current manifest does not name
/// and that are due (see the module doc): seen unnamed on an earlier pass recorded in
/// `sightings`, and either a newer manifest generation exists now or `grace_ms` has passed
/// since. Never an object the current manifest names. Prunes old manifest generations too.
/// With no manifest, nothing is deleted (an upload may be creating the first one).
pub fn remove_orphans(
    store: &dyn RemoteStore,
    partition: &str,
    sightings: &mut OrphanSightings,
    now_ms: i64,
    grace_ms: i64,
) -> Result<OrphansRemoved, TierError> {
    let mut done = OrphansRemoved::default();
    if let Some(reason) = keys::check_partition_prefix(partition) {
        return Err(TierError::BadPartitionPrefix {
            prefix: partition.to_string(),
            reason,
        });
    }
    // The objects first, then the manifest: an upload whose object the list found read its
    // manifest before that put, so the generation read next is at least the one it read.
    let folder = format!("{partition}/{SEGMENTS_FOLDER}");
    let objects = store.list(&folder).map_err(|error| TierError::Remote {
        step: "list segments".into(),
        error,
    })?;
    let Some(generation) = newest_generation(store, partition)? else {
        return Ok(done);
    };
    let manifest = read_generation(store, partition, generation)?;
    let named: BTreeSet<(i64, UploadId)> = manifest
        .segments
        .iter()
        .map(|s| (s.base_offset, s.upload_id))
        .collect();
    let mut still: BTreeMap<String, (i64, u64)> = BTreeMap::new();
    for o in objects {
        if upload_of(&folder, &o.key).is_some_and(|u| named.contains(&u)) {
            continue;
        }
        match sightings.seen.get(&o.key).copied() {
            Some((first_ms, first_generation))
                if generation > first_generation || now_ms.saturating_sub(first_ms) >= grace_ms =>
            {
                if store.delete(&o.key).is_ok() {
                    done.deleted += 1;
                } else {
                    done.failed += 1;
                    still.insert(o.key, (first_ms, first_generation));
                }
            }
            Some(first) => {
                done.waiting += 1;
                still.insert(o.key, first);
            }
            None => {
                done.waiting += 1;
                still.insert(o.key, (now_ms, generation));
            }
        }
    }
    sightings.seen = still;
    prune(store, partition, generation);
    Ok(done)
}

/// The upload `(base, id)` whose folder holds `key` (`<folder>/<base>-<id>/<name>`), `None`
/// for a key not laid out so (never named by a manifest).
fn upload_of(folder: &str, key: &str) -> Option<(i64, UploadId)> {
    let rest = key.strip_prefix(folder)?.strip_prefix('/')?;
    let (upload, name) = rest.split_once('/')?;
    let (base, id) = upload.split_once('-')?;
    if name.is_empty() || name.contains('/') || base.len() != 20 {
        return None;
    }
    Some((base.parse().ok()?, UploadId::parse(id)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objects_upload_is_read_from_its_folder() {
        let id = UploadId(0x8c1f_03a9_5e2b_7d40);
        let key = keys::SegmentObject::Log.key("p/orders-0", 860, 1720, id);
        assert_eq!(upload_of("p/orders-0/segments", &key), Some((860, id)));
        for bad in [
            "p/orders-0/segments/00000000000000000860-8c1f03a95e2b7d40",
            "p/orders-0/segments/860-8c1f03a95e2b7d40/x.log",
            "p/orders-0/segments/00000000000000000860-8C1F03A95E2B7D40/x.log",
            "p/orders-0/segments/00000000000000000860-8c1f03a95e2b7d40/a/b",
            "p/orders-1/segments/00000000000000000860-8c1f03a95e2b7d40/x.log",
        ] {
            assert_eq!(upload_of("p/orders-0/segments", bad), None, "{bad}");
        }
    }
}
