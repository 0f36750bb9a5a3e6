//! Records as a consumer sees them: every data record of a buffer of whole batches (what
//! `Log::read` and `Log::fetch` return), from a starting offset, without hand-parsing.
//!
//! The iterator does what Kafka's consumer does with a fetch response:
//! - batches wholly below the starting offset are stepped over by their header; in the batch
//!   that holds it, the records before it are skipped (a fetch returns whole batches, so the
//!   first one usually starts earlier than asked);
//! - each batch it reads is checked against its CRC-32C first (the consumer's `check.crcs`,
//!   on by default), so a damaged byte is an error, never a wrong record;
//! - compressed batches are decompressed (at most
//!   [`DEFAULT_MAX_DECOMPRESSED_BYTES`](super::DEFAULT_MAX_DECOMPRESSED_BYTES) each);
//! - control batches (transaction markers) are not records of the application and are skipped;
//! - under read_committed ([`ConsumerRecordIter::read_committed`]) the records of aborted
//!   transactions are skipped too: given the aborted transactions a read_committed fetch returns
//!   (`(producer id, first offset)`, docs/kafka-format.md §7.4), a producer's transactional batches
//!   are skipped from the first offset of one of them to its ABORT marker, as Kafka's consumer
//!   does;
//! - timestamps follow the batch's type: under LogAppendTime every record carries the batch's
//!   maxTimestamp.
//!
//! Keys, values and headers are [`Bytes`]: slices of the fetched buffer for an uncompressed
//! batch (no copy, and they keep the segment's map alive as the fetched `Bytes` does), or of
//! the one decompressed buffer of a compressed batch.

use std::borrow::Cow;
use std::collections::HashSet;

use bytes::Bytes;

use super::batch::{RecordBatch, TimestampType, HEADER_SIZE};
use super::control::decode_txn_marker;
use super::error::{BatchError, BatchErrorAt};
use super::record::{HeaderIter, RecordContext, RecordIter};

/// One record of a fetch, owning its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The record's offset in the log.
    pub offset: i64,
    /// CreateTime: the producer's timestamp; LogAppendTime: the batch's append time.
    pub timestamp: i64,
    /// Which of the two `timestamp` is.
    pub timestamp_type: TimestampType,
    /// `None` for a null key.
    pub key: Option<Bytes>,
    /// `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    headers: Bytes,
    header_count: usize,
}

impl ConsumerRecord {
    /// The record's headers in order (keys are never null, values may be).
    pub fn headers(&self) -> HeaderIter<'_> {
        HeaderIter::validated(&self.headers, self.header_count)
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.header_count
    }
}

/// A transaction a read_committed fetch says was aborted (Kafka's
/// `FetchResponse.AbortedTransaction`): its producer's transactional records from
/// `first_offset` up to the producer's next ABORT marker are not the application's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbortedTransaction {
    /// The producer whose transaction was aborted.
    pub producer_id: i64,
    /// The transaction's first offset.
    pub first_offset: i64,
}

/// Iterates over the data records at or after an offset in a buffer of whole batches. Yields
/// each record, or one [`BatchErrorAt`] (the byte position of the batch in the buffer and what
/// is wrong with it) and then ends.
#[derive(Debug, Clone)]
pub struct ConsumerRecordIter {
    data: Bytes,
    from_offset: i64,
    /// Byte position of the next batch to look at.
    next_batch: usize,
    current: Option<OpenBatch>,
    done: bool,
    /// Under read_committed, the aborted transactions to skip.
    aborted: Option<Aborted>,
}

/// Kafka's consumer-side bookkeeping of aborted transactions (`CompletedFetch`): the aborted
/// transactions not reached yet, and the producers whose transactional batches are being
/// skipped until their ABORT marker.
#[derive(Debug, Clone, Default)]
struct Aborted {
    /// Sorted by first offset, latest first, so the next to reach is at the end.
    pending: Vec<AbortedTransaction>,
    skipping: HashSet<i64>,
}

impl Aborted {
    fn new(aborted: impl IntoIterator<Item = AbortedTransaction>) -> Aborted {
        let mut pending: Vec<AbortedTransaction> = aborted.into_iter().collect();
        pending.sort_by_key(|a| std::cmp::Reverse((a.first_offset, a.producer_id)));
        Aborted {
            pending,
            skipping: HashSet::new(),
        }
    }

    /// Whether `batch`, a producer's batch, is to be skipped. The aborted transactions that
    /// began at or before its last offset start being skipped (Kafka's
    /// `consumeAbortedTransactionsUpTo`); its ABORT marker ends its producer's.
    fn skips(&mut self, batch: &RecordBatch<'_>) -> Result<bool, BatchError> {
        while let Some(next) = self.pending.last() {
            if next.first_offset > batch.last_offset() {
                break;
            }
            self.skipping.insert(next.producer_id);
            self.pending.pop();
        }
        if batch.is_control() {
            batch.verify_crc()?;
            if decode_txn_marker(batch)?.is_some_and(|m| m.is_abort()) {
                self.skipping.remove(&batch.producer_id());
            }
            return Ok(true);
        }
        Ok(batch.is_transactional() && self.skipping.contains(&batch.producer_id()))
    }
}

/// The batch whose records are being read.
#[derive(Debug, Clone)]
struct OpenBatch {
    /// Byte position of the batch in the buffer (for errors).
    position: usize,
    /// Its records: a slice of the buffer, or the decompressed stream.
    records: Bytes,
    ctx: RecordContext,
    /// Where the next record starts in `records`, and its index.
    resume: (usize, i32),
}

impl ConsumerRecordIter {
    /// The records of `data` whose offset is at least `from_offset` (read_uncommitted: the
    /// records of open and aborted transactions included).
    pub fn new(data: Bytes, from_offset: i64) -> ConsumerRecordIter {
        ConsumerRecordIter {
            data,
            from_offset,
            next_batch: 0,
            current: None,
            done: false,
            aborted: None,
        }
    }

    /// The committed records of `data` whose offset is at least `from_offset`: `data` read
    /// under read_committed, and `aborted` the aborted transactions that fetch returned. The
    /// records of those transactions are skipped, each producer's from the transaction's first
    /// offset to its ABORT marker; every control batch read is checked against its CRC.
    pub fn read_committed(
        data: Bytes,
        from_offset: i64,
        aborted: impl IntoIterator<Item = AbortedTransaction>,
    ) -> ConsumerRecordIter {
        ConsumerRecordIter {
            aborted: Some(Aborted::new(aborted)),
            ..ConsumerRecordIter::new(data, from_offset)
        }
    }

    fn fail(
        &mut self,
        position: usize,
        error: BatchError,
    ) -> Option<Result<ConsumerRecord, BatchErrorAt>> {
        self.done = true;
        Some(Err(BatchErrorAt { position, error }))
    }

    /// Opens the next batch that holds records at or after the starting offset.
    fn open_next_batch(&mut self) -> Result<Option<OpenBatch>, BatchErrorAt> {
        while self.next_batch < self.data.len() {
            let position = self.next_batch;
            let at = |error| BatchErrorAt { position, error };
            let batch = RecordBatch::parse(&self.data[position..]).map_err(at)?;
            let size = batch.size();
            self.next_batch += size;
            if let Some(aborted) = self.aborted.as_mut().filter(|_| batch.has_producer_id()) {
                if aborted.skips(&batch).map_err(at)? {
                    continue;
                }
            }
            if batch.last_offset() < self.from_offset || batch.is_control() {
                continue;
            }
            batch.verify_crc().map_err(at)?;
            let records = match batch.records_buf().map_err(at)? {
                Cow::Borrowed(_) => self.data.slice(position + HEADER_SIZE..position + size),
                Cow::Owned(stream) => Bytes::from(stream),
            };
            return Ok(Some(OpenBatch {
                position,
                records,
                ctx: batch.record_context(),
                resume: (0, 0),
            }));
        }
        Ok(None)
    }
}

impl Iterator for ConsumerRecordIter {
    type Item = Result<ConsumerRecord, BatchErrorAt>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(open) = self.current.as_mut() else {
                match self.open_next_batch() {
                    Ok(Some(open)) => self.current = Some(open),
                    Ok(None) => return None,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
                continue;
            };
            let mut records = RecordIter::resume(&open.records, open.ctx, open.resume);
            let record = match records.next() {
                None => {
                    self.current = None;
                    continue;
                }
                Some(Err(error)) => {
                    let position = open.position;
                    return self.fail(position, error);
                }
                Some(Ok(record)) => record,
            };
            open.resume = records.resume_point();
            if record.offset < self.from_offset {
                continue;
            }
            let owned = |part: &[u8]| open.records.slice_ref(part);
            return Some(Ok(ConsumerRecord {
                offset: record.offset,
                timestamp: record.timestamp,
                timestamp_type: open.ctx.timestamp_type,
                key: record.key.map(owned),
                value: record.value.map(owned),
                headers: owned(record.header_bytes()),
                header_count: record.header_count(),
            }));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BatchBuilder, Compression, Header};

    /// Batches of `counts[i]` records each, with offsets assigned as the log would.
    fn batches(counts: &[usize], compression: Compression) -> Vec<u8> {
        let mut out = Vec::new();
        let mut offset = 0i64;
        for &n in counts {
            let mut b = BatchBuilder::new()
                .base_offset(offset)
                .compression(compression);
            for i in 0..n {
                let value = format!("v{}", offset + i as i64);
                b.append(
                    1_000 + offset + i as i64,
                    Some(b"k"),
                    Some(value.as_bytes()),
                    &[Header {
                        key: b"h",
                        value: Some(b"x"),
                    }],
                );
            }
            b.build_into(&mut out).expect("build");
            offset += n as i64;
        }
        out
    }

    fn offsets(data: &[u8], from: i64) -> Vec<i64> {
        ConsumerRecordIter::new(Bytes::copy_from_slice(data), from)
            .map(|r| r.expect("record").offset)
            .collect()
    }

    #[test]
    fn starts_at_the_offset_inside_the_first_batch() {
        let data = batches(&[3, 4, 2], Compression::None);
        assert_eq!(offsets(&data, 0), (0..9).collect::<Vec<_>>());
        assert_eq!(offsets(&data, 5), (5..9).collect::<Vec<_>>());
        assert_eq!(offsets(&data, 9), Vec::<i64>::new());
    }

    #[test]
    fn yields_key_value_headers_and_timestamp_of_each_record() {
        let data = batches(&[2, 2], Compression::None);
        let r: Vec<ConsumerRecord> = ConsumerRecordIter::new(Bytes::from(data), 3)
            .collect::<Result<_, _>>()
            .expect("records");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].offset, 3);
        assert_eq!(r[0].timestamp, 1_003);
        assert_eq!(r[0].timestamp_type, TimestampType::CreateTime);
        assert_eq!(r[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r[0].value.as_deref(), Some(&b"v3"[..]));
        let headers: Vec<_> = r[0].headers().map(|h| (h.key, h.value)).collect();
        assert_eq!(headers, [(&b"h"[..], Some(&b"x"[..]))]);
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn decompresses_every_codec() {
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let data = batches(&[5, 5], codec);
            assert_eq!(offsets(&data, 2), (2..10).collect::<Vec<_>>(), "{codec:?}");
        }
    }

    #[test]
    fn log_append_time_gives_every_record_the_batch_time() {
        let mut b = BatchBuilder::new()
            .timestamp_type(TimestampType::LogAppendTime)
            .max_timestamp(77_000);
        b.append(1, None, Some(b"a"), &[]);
        b.append(2, None, Some(b"b"), &[]);
        let data = b.build().expect("build");
        let r: Vec<_> = ConsumerRecordIter::new(Bytes::from(data), 0)
            .map(|r| r.expect("record"))
            .map(|r| (r.timestamp, r.timestamp_type))
            .collect();
        assert_eq!(r, [(77_000, TimestampType::LogAppendTime); 2]);
    }

    #[test]
    fn control_batches_are_not_records() {
        let mut data = batches(&[2], Compression::None);
        data.extend_from_slice(&crate::format::end_txn_marker(
            2,
            0,
            9,
            0,
            1_000,
            crate::format::ControlType::Commit,
            5,
        ));
        assert_eq!(offsets(&data, 0), [0, 1]);
    }

    /// A batch of `n` records of producer `pid` at `offset`, transactional.
    fn txn_batch(offset: i64, pid: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new()
            .base_offset(offset)
            .producer(pid, 0, 0)
            .transactional(true);
        for i in 0..n {
            b.append(1_000, None, Some(format!("{pid}/{}", offset + i as i64).as_bytes()), &[]);
        }
        b.build().expect("build")
    }

    fn marker(offset: i64, pid: i64, control_type: crate::format::ControlType) -> Vec<u8> {
        crate::format::end_txn_marker(offset, 0, pid, 0, 1_000, control_type, 0)
    }

    fn committed(data: &[u8], from: i64, aborted: &[(i64, i64)]) -> Vec<i64> {
        let aborted = aborted.iter().map(|&(producer_id, first_offset)| AbortedTransaction {
            producer_id,
            first_offset,
        });
        ConsumerRecordIter::read_committed(Bytes::copy_from_slice(data), from, aborted)
            .map(|r| r.expect("record").offset)
            .collect()
    }

    #[test]
    fn read_committed_skips_aborted_transactions_up_to_their_marker() {
        use crate::format::ControlType::{Abort, Commit};
        // Producer 1 aborts [0, 2), producer 2 commits [2, 3) and [5, 6), then producer 1's
        // next transaction [6, 8) commits: the abort marker at 4 ends the skipping.
        let mut data = txn_batch(0, 1, 2);
        data.extend(txn_batch(2, 2, 1));
        data.extend(marker(3, 2, Commit));
        data.extend(marker(4, 1, Abort));
        data.extend(txn_batch(5, 2, 1));
        data.extend(txn_batch(6, 1, 2));
        data.extend(marker(8, 1, Commit));
        data.extend(marker(9, 2, Commit));
        assert_eq!(committed(&data, 0, &[(1, 0)]), [2, 5, 6, 7]);
        assert_eq!(committed(&data, 0, &[]), [0, 1, 2, 5, 6, 7]);
        assert_eq!(offsets(&data, 0), [0, 1, 2, 5, 6, 7], "read_uncommitted");
        assert_eq!(committed(&data, 6, &[(1, 0)]), [6, 7]);
    }

    #[test]
    fn an_aborted_transaction_is_skipped_only_from_its_first_offset() {
        use crate::format::ControlType::Abort;
        // Producer 1's batch at 0 belongs to an earlier, committed transaction; the aborted one
        // starts at 3.
        let mut data = txn_batch(0, 1, 2);
        data.extend(txn_batch(2, 3, 1));
        data.extend(txn_batch(3, 1, 2));
        data.extend(marker(5, 1, Abort));
        assert_eq!(committed(&data, 0, &[(1, 3)]), [0, 1, 2]);
    }

    #[test]
    fn non_transactional_batches_of_a_skipped_producer_are_kept() {
        use crate::format::ControlType::Abort;
        let mut data = txn_batch(0, 1, 1);
        let mut idempotent = BatchBuilder::new().base_offset(1).producer(1, 0, 1);
        idempotent.append(1_000, None, Some(b"plain"), &[]);
        data.extend(idempotent.build().expect("build"));
        data.extend(marker(2, 1, Abort));
        assert_eq!(committed(&data, 0, &[(1, 0)]), [1]);
    }

    #[test]
    fn a_damaged_control_batch_under_read_committed_is_an_error() {
        use crate::format::ControlType::Abort;
        let mut data = txn_batch(0, 1, 1);
        let at = data.len();
        data.extend(marker(1, 1, Abort));
        let last = data.len() - 1;
        data[last] ^= 1;
        let items: Vec<_> =
            ConsumerRecordIter::read_committed(Bytes::from(data), 0, []).collect();
        assert_eq!(items.len(), 2);
        let err = items[1].as_ref().expect_err("the marker");
        assert_eq!(err.position, at);
        assert!(matches!(err.error, BatchError::CrcMismatch { .. }), "{err}");
    }

    #[test]
    fn a_damaged_byte_is_an_error_at_its_batch_never_a_record() {
        let mut data = batches(&[2, 2], Compression::None);
        let second = RecordBatch::parse(&data).expect("first").size();
        let last = data.len() - 1;
        data[last] ^= 0x40;
        let items: Vec<_> = ConsumerRecordIter::new(Bytes::from(data), 0).collect();
        assert_eq!(items.len(), 3, "two records, then the error, then the end");
        let err = items[2].as_ref().expect_err("the damaged batch");
        assert_eq!(err.position, second);
        assert!(matches!(err.error, BatchError::CrcMismatch { .. }), "{err}");
    }

    #[test]
    fn a_torn_batch_is_an_error() {
        let data = batches(&[2], Compression::None);
        let torn = &data[..data.len() - 3];
        let items: Vec<_> = ConsumerRecordIter::new(Bytes::copy_from_slice(torn), 0).collect();
        assert!(matches!(
            items[..],
            [Err(BatchErrorAt {
                position: 0,
                error: BatchError::Truncated { .. }
            })]
        ));
    }

    #[test]
    fn uncompressed_values_are_slices_of_the_fetched_bytes() {
        let data = Bytes::from(batches(&[1], Compression::None));
        let record = ConsumerRecordIter::new(data.clone(), 0)
            .next()
            .expect("one")
            .expect("valid");
        let value = record.value.expect("a value");
        let range = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
        assert!(range.contains(&(value.as_ptr() as usize)), "no copy");
    }
}
