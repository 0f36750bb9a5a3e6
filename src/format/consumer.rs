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
//! - timestamps follow the batch's type: under LogAppendTime every record carries the batch's
//!   maxTimestamp.
//!
//! Keys, values and headers are [`Bytes`]: slices of the fetched buffer for an uncompressed
//! batch (no copy, and they keep the segment's map alive as the fetched `Bytes` does), or of
//! the one decompressed buffer of a compressed batch.

use std::borrow::Cow;

use bytes::Bytes;

use super::batch::{RecordBatch, TimestampType, HEADER_SIZE};
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
    /// The records of `data` whose offset is at least `from_offset`.
    pub fn new(data: Bytes, from_offset: i64) -> ConsumerRecordIter {
        ConsumerRecordIter {
            data,
            from_offset,
            next_batch: 0,
            current: None,
            done: false,
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
