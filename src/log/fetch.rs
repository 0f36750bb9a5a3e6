//! Reads as a broker's Fetch answers them: whole batches from an offset, with the offsets a
//! fetcher needs to go on (where the next fetch starts, how far the log is readable).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::{Log, ReadError};
use crate::format::ConsumerRecordIter;
use crate::segment::Segment;

/// The answer to [`Log::fetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The first offset of the log when the fetch was served.
    pub log_start_offset: i64,
}

impl FetchResult {
    /// The records at or after the offset asked for: each batch's CRC checked, compressed
    /// batches decompressed, control batches skipped.
    pub fn records(&self) -> ConsumerRecordIter {
        ConsumerRecordIter::new(self.bytes.clone(), self.offset)
    }
}

impl Log {
    /// Whole batches from the one holding `offset`, below the high watermark, up to
    /// `max_bytes` (at least one whole batch), with the offsets to go on from. An offset at or
    /// past the high watermark but not past the log end gets an empty answer (Kafka's long
    /// poll waits there; see [`Log::wait_for`]); one outside the log is
    /// [`ReadError::OffsetOutOfRange`].
    pub fn fetch(&self, offset: i64, max_bytes: usize) -> Result<FetchResult, ReadError> {
        let log_start_offset = self.log_start_offset();
        let high_watermark = self.high_watermark();
        let (bytes, next_offset) = self.read_below(offset, max_bytes, high_watermark)?;
        Ok(FetchResult {
            offset,
            bytes,
            next_offset,
            high_watermark,
            log_start_offset,
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
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset < start || offset > end {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: start,
                log_end_offset: end,
            });
        }
        let below = below.min(end);
        if offset >= below {
            return Ok((Bytes::new(), offset));
        }
        let floor = segments.range(..=offset).next_back().map(|(_, s)| s);
        let mut mapped = false;
        let mut found = None;
        for segment in floor
            .into_iter()
            .chain(segments.range(offset + 1..).map(|(_, s)| s))
        {
            let read = segment.read(offset, max_bytes, below);
            mapped |= segment.take_newly_mapped();
            if let Some(read) = read? {
                found = Some(read);
                break;
            }
        }
        drop(segments);
        if mapped {
            self.unmap_least_read();
        }
        Ok(found.unwrap_or((Bytes::new(), offset)))
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
        let limit = self.config.max_mapped_segments;
        if mapped.len() <= limit {
            return;
        }
        mapped.sort_by_key(|s| s.last_read());
        for s in &mapped[..mapped.len() - limit] {
            s.unmap();
        }
    }
}
