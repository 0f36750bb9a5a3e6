//! Kafka's ListOffsets by time below the local log start (docs/design.md, "Tiered storage"):
//! the first record at or after a timestamp, searched in the remote segments first, through
//! their time and offset indexes as a local segment is searched, then in the log.

use super::error::TierError;
use super::keys::SegmentObject;
use super::manifest::RemoteSegment;
use super::read::{get_checked, RangeReader};
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::format::RecordBatch;
use crate::log::Log;
use crate::segment::{offset_index, time_index, TimestampOffset};

/// The first record whose timestamp is at or after `timestamp` (its offset and timestamp), as
/// [`Log::offset_for_timestamp`] answered before local retention: in the remote segments wholly
/// below the local log start, oldest first, then in the log. `None` if every record is older.
pub fn offset_for_timestamp(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    timestamp: i64,
) -> Result<Option<TimestampOffset>, TierError> {
    let local_start = log.log_start_offset();
    if let Some(manifest) = read_manifest(store, partition)? {
        // Nothing below the partition's log start is an answer (a DeleteRecords raised it).
        let from = manifest.log_start_offset;
        for s in manifest.segments.iter().filter(|s| {
            s.end_offset <= local_start && s.end_offset > from && s.max_timestamp >= timestamp
        }) {
            if let Some(found) = search_remote(store, partition, s, timestamp, from)? {
                return Ok(Some(found));
            }
        }
    }
    log.offset_for_timestamp(timestamp)
        .map_err(|error| TierError::LocalRead {
            offset: local_start,
            error,
        })
}

/// The first record at or after `timestamp` in the remote segment `s`, at or above the offset
/// `from`, as `Segment::find_timestamp` and the log find it in a local one.
fn search_remote(
    store: &dyn RemoteStore,
    partition: &str,
    s: &RemoteSegment,
    timestamp: i64,
    from_offset: i64,
) -> Result<Option<TimestampOffset>, TierError> {
    let base = s.base_offset;
    let time = get_checked(store, partition, s, SegmentObject::TimeIndex)?;
    let index = get_checked(store, partition, s, SegmentObject::OffsetIndex)?;
    // The greatest time-index entry at or below the timestamp, and the offset-index entry at
    // or below its offset: where the scan starts (time-index entries are strictly increasing).
    let from = time_index::decode(&time, base)
        .take_while(|e| e.timestamp <= timestamp)
        .last()
        .map_or(base, |e| e.offset);
    let entry = offset_index::decode(&index, base)
        .take_while(|e| e.offset <= from)
        .last();
    let size = s.object(SegmentObject::Log).size;
    let key = SegmentObject::Log.key(partition, base, s.end_offset, s.upload_id);
    let mut reader = RangeReader::new(store, key.clone(), size, 0);
    // An entry that does not name the batch ending at its offset is not trusted: scan from
    // the segment's first batch, as a local lookup does.
    let mut at = match entry {
        Some(e) => {
            let (_, last) = reader.batch(u64::from(e.position), base, s.end_offset)?;
            if last == e.offset {
                u64::from(e.position)
            } else {
                0
            }
        }
        None => 0,
    };
    while at < size {
        let (bytes, _) = reader.batch(at, base, s.end_offset)?;
        let len = bytes.len() as u64;
        let corrupt = |reason: String| TierError::RemoteCorrupt {
            key: key.clone(),
            position: Some(at),
            reason,
        };
        let batch = RecordBatch::parse(bytes).map_err(|e| corrupt(e.to_string()))?;
        if batch.max_timestamp() >= timestamp && batch.last_offset() >= from_offset {
            // Kafka answers with the first record at or after the target, not its batch.
            let records = batch.records_buf().map_err(|e| corrupt(e.to_string()))?;
            for record in batch.iter_records(&records) {
                let record = record.map_err(|e| corrupt(e.to_string()))?;
                if record.timestamp >= timestamp && record.offset >= from_offset {
                    return Ok(Some(TimestampOffset {
                        timestamp: record.timestamp,
                        offset: record.offset,
                    }));
                }
            }
            // A header whose maxTimestamp no record has: the batch, as Kafka's shallow answer
            // (unless the batch straddles the log start: then the scan goes on).
            if batch.base_offset() >= from_offset {
                return Ok(Some(TimestampOffset {
                    timestamp: batch.max_timestamp(),
                    offset: batch.base_offset(),
                }));
            }
        }
        at += len;
    }
    Ok(None)
}
