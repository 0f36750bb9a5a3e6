//! Reads as a broker's Fetch answers them: whole batches from an offset, with the offsets a
//! fetcher needs to go on (where the next fetch starts, how far the log is readable), under
//! either isolation level: read_uncommitted up to the high watermark, read_committed up to the
//! last stable offset with the aborted transactions the returned batches overlap, collected as
//! Kafka's fetch collects them (docs/kafka-format.md §7.4).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::txn::IsolationLevel;
use super::{Log, ReadError};
use crate::format::{AbortedTransaction, ConsumerRecordIter};
use crate::segment::{AbortedTxn, Segment};

/// The answer to [`Log::fetch`] and [`Log::fetch_isolated`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchResult {
    /// The offset that was asked for.
    pub offset: i64,
    /// Whole batches, zero-copy over the segment's map: the batch holding `offset` first (it
    /// may start before `offset`), up to the byte limit (at least one whole batch). Empty when
    /// nothing at or after `offset` is readable yet.
    pub bytes: Bytes,
    /// Where the next fetch starts: one past the last batch in `bytes`, or `offset` when
    /// `bytes` is empty.
    pub next_offset: i64,
    /// The high watermark when the fetch was served (see [`Log::high_watermark`]).
    pub high_watermark: i64,
    /// The last stable offset when the fetch was served (see [`Log::last_stable_offset`]):
    /// what a read_committed fetch is bounded by, answered under both isolation levels, as
    /// Kafka's fetch response does.
    pub last_stable_offset: i64,
    /// The first offset of the log when the fetch was served.
    pub log_start_offset: i64,
    /// Under read_committed, the aborted transactions that overlap `bytes`, earliest first
    /// (possibly none); `None` under read_uncommitted.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
}

impl FetchResult {
    /// The records at or after the offset asked for, as an application receives them: each
    /// batch's CRC checked, compressed batches decompressed, control batches skipped, and under
    /// read_committed the records of the aborted transactions skipped.
    pub fn records(&self) -> ConsumerRecordIter {
        match &self.aborted_transactions {
            None => ConsumerRecordIter::new(self.bytes.clone(), self.offset),
            Some(aborted) => ConsumerRecordIter::read_committed(
                self.bytes.clone(),
                self.offset,
                aborted.iter().copied(),
            ),
        }
    }
}

/// Batches read from one segment.
struct ReadFrom {
    bytes: Bytes,
    next_offset: i64,
    /// Its segment and where the batches start in it.
    at: Option<(Arc<Segment>, usize)>,
    /// The read mapped a sealed segment: once the segments' lock is released, the log unmaps
    /// what exceeds its limit.
    mapped: bool,
}

impl Log {
    /// Whole batches from the one holding `offset`, below the high watermark, up to
    /// `max_bytes` (at least one whole batch), with the offsets to go on from (read_uncommitted).
    /// An offset at or past the high watermark but not past the log end gets an empty answer
    /// (Kafka's long poll waits there; see [`LogReader::wait`](super::LogReader::wait)); one
    /// outside the log is [`ReadError::OffsetOutOfRange`].
    ///
    /// **The high watermark rule.** A fetch returns only committed records, as Kafka's does.
    /// By default ([`HighWatermarkPolicy::DurableEnd`](super::HighWatermarkPolicy)) a record is
    /// committed once it is durable: records just appended are not returned until a flush
    /// covers them (an explicit [`Log::flush`], or the [`FlushPolicy`](super::FlushPolicy)'s:
    /// under `FlushPolicy::Always` every acknowledged append already is). Under
    /// `HighWatermarkPolicy::SetByCaller` a replication layer moves it
    /// ([`ReplicaLog::set_high_watermark`](super::ReplicaLog::set_high_watermark)).
    /// [`Log::read`] reads below the log end, committed or not.
    pub fn fetch(&self, offset: i64, max_bytes: usize) -> Result<FetchResult, ReadError> {
        self.fetch_isolated(offset, max_bytes, IsolationLevel::ReadUncommitted)
    }

    /// [`Log::fetch`] under an isolation level. Under read_committed the batches end below the
    /// last stable offset (a batch starting at or after it is not returned), and the answer
    /// lists the aborted transactions that overlap them, as Kafka's fetch collects them from the
    /// `.txnindex` of the segment read and the segments after it: every one whose marker is at
    /// or after `offset` and whose first offset is below the fetch's upper bound (the offset of
    /// the first offset-index entry at or past the end of the returned bytes, else the next
    /// segment's base or the log end), up to the first entry whose last stable offset reaches
    /// that bound. [`FetchResult::records`] applies them.
    pub fn fetch_isolated(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult, ReadError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(ReadError::Closed);
        }
        // One view of the segments for the offsets, the batches and the aborted transactions:
        // a rewrite moves them all under the write lock.
        let segments = self.segments.read();
        let log_start_offset = self.log_start_offset();
        // The last stable offset is taken with a high watermark of its own: bounded by the
        // one answered, so the answer never has it above its high watermark.
        let last_stable_offset = self.last_stable_offset();
        let high_watermark = self.high_watermark();
        let last_stable_offset = last_stable_offset.min(high_watermark);
        let below = match isolation {
            IsolationLevel::ReadUncommitted => high_watermark,
            IsolationLevel::ReadCommitted => last_stable_offset,
        };
        let read = self.read_from(&segments, offset, max_bytes, below);
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                drop(segments);
                self.unmap_least_read();
                return Err(e);
            }
        };
        let aborted = if isolation == IsolationLevel::ReadCommitted {
            let mut found = Vec::new();
            if let Some((segment, position)) = &read.at {
                let end = self.log_end_offset();
                let len = read.bytes.len();
                let collected =
                    collect_aborted(&segments, segment, *position, len, offset, end, &mut found);
                if let Err(e) = collected {
                    drop(segments);
                    self.unmap_least_read();
                    return Err(ReadError::Io(e));
                }
            }
            let found: Vec<AbortedTransaction> = found
                .iter()
                .map(|a| AbortedTransaction {
                    producer_id: a.producer_id,
                    first_offset: a.first_offset,
                })
                .collect();
            Some(found)
        } else {
            None
        };
        drop(segments);
        if read.mapped {
            self.unmap_least_read();
        }
        let aborted_transactions = aborted;
        Ok(FetchResult {
            offset,
            bytes: read.bytes,
            next_offset: read.next_offset,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted_transactions,
        })
    }

    /// Whole batches from the one holding `offset`, of those starting below `below` (at most the
    /// log end), and the offset after the last one; `offset` itself when there are none.
    pub(super) fn read_below(
        &self,
        offset: i64,
        max_bytes: usize,
        below: i64,
    ) -> Result<(Bytes, i64), ReadError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(ReadError::Closed);
        }
        // The offsets are read under the segments' lock, which a rewrite holds while it moves
        // them: a read never mixes the segments of one state with the offsets of another.
        let segments = self.segments.read();
        let read = self.read_from(&segments, offset, max_bytes, below);
        drop(segments);
        match read {
            Ok(read) => {
                if read.mapped {
                    self.unmap_least_read();
                }
                Ok((read.bytes, read.next_offset))
            }
            Err(e) => {
                // The read may have mapped segments before it failed.
                self.unmap_least_read();
                Err(e)
            }
        }
    }

    fn read_from(
        &self,
        segments: &std::collections::BTreeMap<i64, Arc<Segment>>,
        offset: i64,
        max_bytes: usize,
        below: i64,
    ) -> Result<ReadFrom, ReadError> {
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset < start || offset > end {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: start,
                log_end_offset: end,
            });
        }
        let nothing = ReadFrom {
            bytes: Bytes::new(),
            next_offset: offset,
            at: None,
            mapped: false,
        };
        let below = below.min(end);
        if offset >= below {
            return Ok(nothing);
        }
        let floor = segments.range(..=offset).next_back().map(|(_, s)| s);
        let mut mapped = false;
        for segment in floor
            .into_iter()
            .chain(segments.range(offset + 1..).map(|(_, s)| s))
        {
            let read = segment.read(offset, max_bytes, below);
            mapped |= segment.take_newly_mapped();
            if let Some(read) = read? {
                return Ok(ReadFrom {
                    bytes: read.bytes,
                    next_offset: read.next_offset,
                    at: Some((Arc::clone(segment), read.position)),
                    mapped,
                });
            }
        }
        Ok(ReadFrom { mapped, ..nothing })
    }

    /// Unmaps the sealed segments read longest ago while more than
    /// [`LogConfig::max_mapped_segments`](super::LogConfig) are mapped (their readers keep the
    /// bytes they hold). A scan of the segments, run only after a read mapped one.
    pub(super) fn unmap_least_read(&self) {
        let segments = self.segments.read();
        let mut mapped: Vec<&Arc<Segment>> = segments
            .values()
            .filter(|s| s.is_unpinned() && s.is_mapped())
            .collect();
        let limit = self.config().max_mapped_segments;
        if mapped.len() <= limit {
            return;
        }
        mapped.sort_by_key(|s| s.last_read());
        for s in &mapped[..mapped.len() - limit] {
            s.unmap();
        }
    }
}

/// Kafka's `addAbortedTransactions`: the upper bound of a fetch of `len` bytes from `position`
/// of `segment`, then the aborted transactions of that segment and the later ones that overlap
/// `[fetch_offset, upper bound)`.
fn collect_aborted(
    segments: &std::collections::BTreeMap<i64, Arc<Segment>>,
    segment: &Segment,
    position: usize,
    len: usize,
    fetch_offset: i64,
    log_end: i64,
    out: &mut Vec<AbortedTxn>,
) -> Result<(), crate::io::IoError> {
    let base = segment.base_offset();
    let next_base = segments.range(base + 1..).next().map(|(b, _)| *b);
    let upper_bound = segment
        .view()?
        .offset_index()
        .fetch_upper_bound(position + len)
        .map(|e| e.offset)
        .unwrap_or_else(|| next_base.unwrap_or(log_end));
    for (_, s) in segments.range(base..) {
        if s.txn_index().collect(fetch_offset, upper_bound, out) {
            return Ok(());
        }
    }
    Ok(())
}
