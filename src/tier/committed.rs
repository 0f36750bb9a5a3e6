//! read_committed below the local log start (docs/design.md, "Tiered storage"): the batches
//! as [`super::read`] returns them, with the aborted transactions that overlap them collected
//! as a local fetch collects them (Kafka's `addAbortedTransactions`): from the remote
//! `.txnindex` of the segment read and of the segments after it, remote then local, up to the
//! first entry whose last stable offset reaches the fetch's upper bound.

use super::error::TierError;
use super::keys::SegmentObject;
use super::manifest::RemoteSegment;
use super::read::{get_checked, holding, read_segment, readable};
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::format::AbortedTransaction;
use crate::log::{FetchResult, IsolationLevel, Log};
use crate::segment::{offset_index, txn_index, AbortedTxn};

/// A read_committed fetch of `log` at `offset`: [`Log::fetch_isolated`] at and above the local
/// log start; below it, whole batches of the remote segment holding the offset (all of them
/// below the last stable offset: only stable segments are uploaded) with the aborted
/// transactions that overlap them, as the local fetch answered before the local copy went.
pub fn fetch_committed(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    offset: i64,
    max_bytes: usize,
) -> Result<FetchResult, TierError> {
    let log_start_offset = log.log_start_offset();
    if offset >= log_start_offset {
        return log
            .fetch_isolated(offset, max_bytes, IsolationLevel::ReadCommitted)
            .map_err(|error| TierError::LocalRead { offset, error });
    }
    let manifest = read_manifest(store, partition)?;
    let segments = readable(manifest.as_ref(), offset, log_start_offset)?;
    let at = holding(segments, offset, log_start_offset)?;
    let segment = &segments[at];
    let read = read_segment(store, partition, segment, offset, max_bytes)?;
    // Kafka's fetchUpperBoundOffset: the first index entry at or past the end of the bytes
    // returned, else the segment's end.
    let fetch_end = read.position + read.bytes.len() as u64;
    let upper_bound = offset_index::decode(&read.index, segment.base_offset)
        .find(|e| u64::from(e.position) >= fetch_end)
        .map_or(segment.end_offset, |e| e.offset);
    let mut found: Vec<AbortedTxn> = Vec::new();
    let mut complete = false;
    for s in &segments[at..] {
        if collect_remote(store, partition, s, offset, upper_bound, &mut found)? {
            complete = true;
            break;
        }
    }
    if !complete {
        log.collect_aborted_from_start(offset, upper_bound, &mut found);
    }
    let high_watermark = log.high_watermark();
    Ok(FetchResult {
        offset,
        bytes: read.bytes,
        next_offset: read.next_offset,
        high_watermark,
        last_stable_offset: log.last_stable_offset().min(high_watermark),
        log_start_offset: manifest.as_ref().map_or(log_start_offset, |m| {
            m.partition_log_start(log_start_offset)
        }),
        aborted_transactions: Some(
            found
                .iter()
                .map(|a| AbortedTransaction {
                    producer_id: a.producer_id,
                    first_offset: a.first_offset,
                })
                .collect(),
        ),
    })
}

/// Adds the aborted transactions of the remote segment `s` that overlap `[fetch_offset,
/// upper_bound)`; `true` once no later entry can (see `txn_index::collect_aborted`).
fn collect_remote(
    store: &dyn RemoteStore,
    partition: &str,
    s: &RemoteSegment,
    fetch_offset: i64,
    upper_bound: i64,
    out: &mut Vec<AbortedTxn>,
) -> Result<bool, TierError> {
    let want = s.object(SegmentObject::TxnIndex);
    if want.size == 0 {
        return Ok(false);
    }
    let bytes = get_checked(store, partition, s, SegmentObject::TxnIndex)?;
    let key = SegmentObject::TxnIndex.key(partition, s.base_offset, s.end_offset, s.upload_id);
    let corrupt = |reason: String| TierError::RemoteCorrupt {
        key: key.clone(),
        position: None,
        reason,
    };
    let entries: Vec<AbortedTxn> = txn_index::decode(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|p| corrupt(p.to_string()))?;
    Ok(txn_index::collect_aborted(
        &entries,
        fetch_offset,
        upper_bound,
        out,
    ))
}
