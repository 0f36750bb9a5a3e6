//! Recovery of a partition whose local disk was lost (docs/design.md, "Tiered storage"): the
//! log starts over, empty, where the remote segments end, with the producer state uploaded
//! with the last of them, so every producer's dedup window is intact and a retry of a batch
//! that now exists only remotely is still answered as a duplicate.

use super::error::TierError;
use super::keys::SegmentObject;
use super::manifest::RemoteSegment;
use super::read::get_checked;
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::log::epochs;
use crate::log::Log;

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restored {
    /// The first offset the remote segments hold: the partition's earliest offset.
    pub remote_start: i64,
    /// Where the remote segments end: the restored log's start and end.
    pub log_end_offset: i64,
    /// Producers the restored state knows.
    pub producers: usize,
    /// The leader epoch the log was left in, if the remote history has one.
    pub leader_epoch: Option<i32>,
}

/// Restores `log`, empty (a partition recreated after its disk was lost), from the manifest of
/// `partition`: the log starts over at the end of the last remote segment with the producer
/// state uploaded at that end (checked against the manifest), in the latest leader epoch of the
/// remote history. What the lost disk held past the remote segments is gone; what they hold is
/// read with [`super::read`]. A log that holds anything is refused, as is a partition with no
/// remote segment. A crash during the restore leaves the empty log, or the restored one: run
/// it again.
pub fn restore(log: &Log, store: &dyn RemoteStore, partition: &str) -> Result<Restored, TierError> {
    if log.log_end_offset() != 0 || log.size_bytes() != 0 {
        return Err(TierError::RestoreNotEmpty {
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
        });
    }
    let manifest = read_manifest(store, partition)?;
    let (Some(first), Some(last)) = (
        manifest.as_ref().and_then(|m| m.segments.first()),
        manifest.as_ref().and_then(|m| m.segments.last()),
    ) else {
        return Err(TierError::NothingRemote {
            partition: partition.to_string(),
        });
    };
    let end = last.end_offset;
    let snapshot = get_checked(store, partition, last, SegmentObject::ProducerSnapshot)?;
    let epochs_key = object_key(partition, last, SegmentObject::LeaderEpochs);
    let epoch_bytes = get_checked(store, partition, last, SegmentObject::LeaderEpochs)?;
    let entries =
        epochs::decode_file(std::path::Path::new(&epochs_key), &epoch_bytes).map_err(|e| {
            TierError::RemoteCorrupt {
                key: epochs_key.clone(),
                position: None,
                reason: e.to_string(),
            }
        })?;
    let report = log
        .replica()
        .truncate_fully_and_start_with(end, &snapshot)
        .map_err(|error| TierError::Restore { error })?;
    let leader_epoch = entries.last().map(|e| e.epoch);
    if let Some(epoch) = leader_epoch {
        log.replica()
            .set_leader_epoch(epoch)
            .map_err(|error| TierError::Restore { error })?;
    }
    Ok(Restored {
        remote_start: first.base_offset,
        log_end_offset: end,
        producers: report.producers.producers,
        leader_epoch,
    })
}

fn object_key(partition: &str, s: &RemoteSegment, which: SegmentObject) -> String {
    which.key(partition, s.base_offset, s.end_offset, s.upload_id)
}
