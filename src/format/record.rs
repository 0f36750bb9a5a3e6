//! The records inside a batch (docs/format.md, "Record"), read zero-copy.
//!
//! | field          | type    | notes                                           |
//! |----------------|---------|-------------------------------------------------|
//! | length         | varint  | bytes of the body that follows, ≥ 0             |
//! | attributes     | int8    | unused, written 0                               |
//! | timestampDelta | varlong | relative to baseTimestamp as stored             |
//! | offsetDelta    | varint  | offset = baseOffset + offsetDelta               |
//! | keyLength      | varint  | −1 = null key                                   |
//! | key            | bytes   |                                                 |
//! | valueLength    | varint  | −1 = null value (tombstone)                     |
//! | value          | bytes   |                                                 |
//! | headerCount    | varint  | ≥ 0 and ≤ bytes left in the body                |
//! | headers        | …       | keyLen varint (≥ 0), key, valueLen (−1 = null), value |
//!
//! Every length is a signed zigzag varint. A record is refused when its body does not consume
//! exactly `length` bytes, when a length is below −1 (or below 0 where null is not allowed), or
//! when a varint is longer than its maximum; this is what keeps a hostile batch from making a
//! reader run past the batch or loop on a huge header count.

use std::borrow::Cow;

use super::batch::{Compression, RecordBatch, TimestampType, HEADER_SIZE};
use super::compression::{decompress, DEFAULT_MAX_DECOMPRESSED_BYTES};
use super::error::{BatchError, RecordError};
use super::varint::MAX_VARLONG_BYTES;
use super::varint::{decode_varint, decode_varlong, VarintError, MAX_VARINT_BYTES};

/// The batch header values that turn a record's deltas into absolute offsets and timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordContext {
    /// The batch's baseOffset.
    pub base_offset: i64,
    /// baseTimestamp as stored: the first record's timestamp, or the delete horizon when that
    /// attribute is set (deltas are then relative to the horizon, docs/format.md, attributes).
    pub base_timestamp: i64,
    /// The batch's maxTimestamp: every record's timestamp under `LogAppendTime`.
    pub max_timestamp: i64,
    /// How the records' timestamps are read.
    pub timestamp_type: TimestampType,
    /// The records the batch declares.
    pub records_count: i32,
}

impl RecordContext {
    /// The context of `batch`'s records.
    pub fn of(batch: &RecordBatch<'_>) -> RecordContext {
        RecordContext {
            base_offset: batch.base_offset(),
            base_timestamp: batch.base_timestamp(),
            max_timestamp: batch.max_timestamp(),
            timestamp_type: batch.timestamp_type(),
            records_count: batch.records_count(),
        }
    }
}

/// One record, borrowing its key, value and headers from the records buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record's attributes (unused by Kafka so far: 0).
    pub attributes: i8,
    /// The timestamp as stored, relative to the batch's baseTimestamp.
    pub timestamp_delta: i64,
    /// The offset as stored, relative to the batch's baseOffset: the record's index.
    pub offset_delta: i32,
    /// The record's timestamp: baseTimestamp + delta for CreateTime, the batch's maxTimestamp
    /// for LogAppendTime (Kafka ignores the deltas then, docs/format.md, attributes).
    pub timestamp: i64,
    /// baseOffset + offsetDelta.
    pub offset: i64,
    /// The key; `None` when null.
    pub key: Option<&'a [u8]>,
    /// The value; `None` when null (a tombstone in a compacted topic).
    pub value: Option<&'a [u8]>,
    /// Bytes the record occupies, its length prefix included.
    pub encoded_size: usize,
    header_count: usize,
    headers: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record's headers in order. Already validated when the record was read.
    pub fn headers(&self) -> HeaderIter<'a> {
        HeaderIter::validated(self.headers, self.header_count)
    }
    /// How many headers the record has.
    pub fn header_count(&self) -> usize {
        self.header_count
    }
    /// The encoded headers, already validated: `header_count` of them.
    pub(super) fn header_bytes(&self) -> &'a [u8] {
        self.headers
    }
}

/// One record header. Keys are never null (docs/format.md, "Record"); values may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// The header's key (UTF-8 by Kafka's convention; not checked).
    pub key: &'a [u8],
    /// The header's value; `None` when null.
    pub value: Option<&'a [u8]>,
}

/// Iterates over headers that were checked when their record was read, so it needs no errors and
/// allocates nothing.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    buf: &'a [u8],
    remaining: usize,
}

impl<'a> HeaderIter<'a> {
    /// Headers of `buf`, which [`decode_record`] checked holds `count` of them.
    pub(super) fn validated(buf: &'a [u8], count: usize) -> HeaderIter<'a> {
        HeaderIter {
            buf,
            remaining: count,
        }
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let mut c = Cursor {
            buf: self.buf,
            pos: 0,
        };
        // The headers were validated when the record was decoded; a failure here would mean the
        // bytes changed under us, and ending the iteration is the safe answer.
        let key = match c.nullable_bytes("headerKeyLength") {
            Ok(Some(key)) => key,
            _ => {
                self.remaining = 0;
                return None;
            }
        };
        let Ok(value) = c.nullable_bytes("headerValueLength") else {
            self.remaining = 0;
            return None;
        };
        self.buf = self.buf.get(c.pos..).unwrap_or(&[]);
        Some(Header { key, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// A bounds-checked reader over a records buffer.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    fn varint(&mut self, field: &'static str) -> Result<i32, RecordError> {
        let (value, used) = decode_varint(self.rest()).map_err(|e| varint_error(e, field))?;
        self.pos += used;
        Ok(value)
    }

    fn varlong(&mut self, field: &'static str) -> Result<i64, RecordError> {
        let (value, used) = decode_varlong(self.rest()).map_err(|e| varint_error(e, field))?;
        self.pos += used;
        Ok(value)
    }

    fn byte(&mut self) -> Result<u8, RecordError> {
        let b = *self.rest().first().ok_or(RecordError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        let out = self.rest().get(..len).ok_or(RecordError::Truncated)?;
        self.pos += len;
        Ok(out)
    }

    /// A length-prefixed byte string where −1 means null. Kafka treats every negative length as
    /// null; we refuse anything below −1 because no writer produces it.
    fn nullable_bytes(&mut self, field: &'static str) -> Result<Option<&'a [u8]>, RecordError> {
        match self.varint(field)? {
            -1 => Ok(None),
            len if len < 0 => Err(RecordError::NegativeLength {
                field,
                value: i64::from(len),
            }),
            len => self.bytes(len as usize).map(Some),
        }
    }
}

fn varint_error(e: VarintError, field: &'static str) -> RecordError {
    match e {
        VarintError::Truncated => RecordError::Truncated,
        VarintError::TooLong { max_bytes } => RecordError::VarintTooLong { field, max_bytes },
    }
}

// Compile-time reminder that the varint bounds in the errors are the format's (docs/format.md,
// "Record").
const _: () = assert!(MAX_VARINT_BYTES == 5 && MAX_VARLONG_BYTES == 10);

/// Decodes the record at the start of `buf`, checking every rule of docs/format.md, "Record". The
/// record's [`Record::encoded_size`] says where the next one starts.
pub fn decode_record<'a>(buf: &'a [u8], ctx: &RecordContext) -> Result<Record<'a>, RecordError> {
    let mut c = Cursor { buf, pos: 0 };
    let length = c.varint("length")?;
    if length < 0 {
        return Err(RecordError::NegativeLength {
            field: "length",
            value: i64::from(length),
        });
    }
    let declared = length as usize;
    let body_start = c.pos;
    // Kafka checks the declared body against the bytes left before reading it.
    let body_end = body_start
        .checked_add(declared)
        .ok_or(RecordError::Truncated)?;
    if body_end > buf.len() {
        return Err(RecordError::Truncated);
    }
    let attributes = c.byte()? as i8;
    let timestamp_delta = c.varlong("timestampDelta")?;
    let offset_delta = c.varint("offsetDelta")?;
    let key = c.nullable_bytes("keyLength")?;
    let value = c.nullable_bytes("valueLength")?;
    let header_count = c.varint("headerCount")?;
    if header_count < 0 {
        return Err(RecordError::NegativeLength {
            field: "headerCount",
            value: i64::from(header_count),
        });
    }
    // Every header takes at least one byte, so a count above the bytes left is a lie that would
    // otherwise cost a long loop before failing.
    let remaining = body_end.saturating_sub(c.pos);
    if header_count as usize > remaining {
        return Err(RecordError::HeaderCountTooLarge {
            count: header_count,
            remaining,
        });
    }
    let headers_start = c.pos;
    for _ in 0..header_count {
        match c.varint("headerKeyLength")? {
            -1 => return Err(RecordError::NullHeaderKey),
            len if len < 0 => {
                return Err(RecordError::NegativeLength {
                    field: "headerKeyLength",
                    value: i64::from(len),
                })
            }
            len => c.bytes(len as usize)?,
        };
        c.nullable_bytes("headerValueLength")?;
    }
    let consumed = c.pos - body_start;
    if consumed != declared {
        return Err(RecordError::LengthMismatch { declared, consumed });
    }
    let timestamp = match ctx.timestamp_type {
        TimestampType::LogAppendTime => ctx.max_timestamp,
        TimestampType::CreateTime => ctx.base_timestamp.wrapping_add(timestamp_delta),
    };
    Ok(Record {
        attributes,
        timestamp_delta,
        offset_delta,
        timestamp,
        offset: ctx.base_offset.wrapping_add(i64::from(offset_delta)),
        key,
        value,
        encoded_size: c.pos,
        header_count: header_count as usize,
        headers: buf.get(headers_start..c.pos).unwrap_or(&[]),
    })
}

/// Iterates over the `records_count` records of a records buffer (the raw bytes after the
/// header, or the decompressed stream). Yields each record, or one error and then ends. After
/// the declared count, any byte left is [`BatchError::RecordsTrailing`].
///
/// Offset deltas are not required to be dense here: compaction legitimately leaves gaps in
/// stored batches. Client validation checks density itself.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    index: i32,
    ctx: RecordContext,
    position_base: usize,
    done: bool,
}

impl<'a> RecordIter<'a> {
    /// Records of `buf`, whose first byte is batch byte 61 (error positions count from the
    /// batch start; for a compressed batch they count as if the stream were stored raw).
    pub fn new(buf: &'a [u8], ctx: RecordContext) -> RecordIter<'a> {
        RecordIter {
            buf,
            pos: 0,
            index: 0,
            ctx,
            position_base: HEADER_SIZE,
            done: false,
        }
    }

    /// Index of the next record.
    pub fn index(&self) -> i32 {
        self.index
    }

    /// Continues where an earlier iterator over the same `buf` stood (see
    /// [`Self::resume_point`]): for an owner of the buffer that cannot hold a borrow of it.
    pub(super) fn resume(buf: &'a [u8], ctx: RecordContext, (pos, index): (usize, i32)) -> Self {
        RecordIter {
            pos,
            index,
            ..RecordIter::new(buf, ctx)
        }
    }

    /// Where the next record starts in the buffer, and its index.
    pub(super) fn resume_point(&self) -> (usize, i32) {
        (self.pos, self.index)
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let count = self.ctx.records_count;
        if count < 0 {
            self.done = true;
            return Some(Err(BatchError::NegativeRecordsCount {
                records_count: count,
            }));
        }
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        if self.index >= count {
            self.done = true;
            return (!rest.is_empty()).then_some(Err(BatchError::RecordsTrailing {
                records_count: count,
                extra: rest.len(),
            }));
        }
        match decode_record(rest, &self.ctx) {
            Ok(record) => {
                self.pos += record.encoded_size;
                self.index += 1;
                Some(Ok(record))
            }
            Err(reason) => {
                self.done = true;
                Some(Err(BatchError::InvalidRecord {
                    index: self.index,
                    position: self.position_base + self.pos,
                    reason,
                }))
            }
        }
    }
}

impl<'a> RecordBatch<'a> {
    /// The header values records are read against.
    pub fn record_context(&self) -> RecordContext {
        RecordContext::of(self)
    }

    /// The concatenated records: borrowed when the batch is uncompressed, decompressed (at most
    /// [`DEFAULT_MAX_DECOMPRESSED_BYTES`]) otherwise.
    pub fn records_buf(&self) -> Result<Cow<'a, [u8]>, BatchError> {
        self.records_buf_limited(DEFAULT_MAX_DECOMPRESSED_BYTES)
    }

    /// As [`Self::records_buf`], refusing to decompress beyond `max_bytes`.
    pub fn records_buf_limited(&self, max_bytes: usize) -> Result<Cow<'a, [u8]>, BatchError> {
        let codec_id = (self.attributes() & super::batch::ATTR_COMPRESSION_MASK) as u8;
        match Compression::from_id(codec_id) {
            None => Err(BatchError::UnknownCompression { codec: codec_id }),
            Some(Compression::None) => Ok(Cow::Borrowed(self.records_data())),
            Some(codec) => decompress(codec, self.records_data(), max_bytes).map(Cow::Owned),
        }
    }

    /// Iterates over the records in `buf`, which is what [`Self::records_buf`] returned.
    pub fn iter_records<'b>(&self, buf: &'b [u8]) -> RecordIter<'b> {
        RecordIter::new(buf, self.record_context())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::varint::{encode_varint, encode_varlong};

    fn ctx(count: i32) -> RecordContext {
        RecordContext {
            base_offset: 100,
            base_timestamp: 1_000,
            max_timestamp: 5_000,
            timestamp_type: TimestampType::CreateTime,
            records_count: count,
        }
    }

    /// A record body from raw parts, with a correct length prefix.
    fn record(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varint(body.len() as i32, &mut out);
        out.extend_from_slice(body);
        out
    }

    /// attr 0, tsDelta, offsetDelta, key "k", value "v", then `tail` (header count + headers).
    fn body(ts_delta: i64, offset_delta: i32, tail: &[u8]) -> Vec<u8> {
        let mut b = vec![0];
        encode_varlong(ts_delta, &mut b);
        encode_varint(offset_delta, &mut b);
        b.extend_from_slice(&[2, b'k', 2, b'v']);
        b.extend_from_slice(tail);
        b
    }

    fn first_error(buf: &[u8], count: i32) -> BatchError {
        RecordIter::new(buf, ctx(count))
            .find_map(Result::err)
            .expect("an error was expected")
    }

    fn reason(buf: &[u8]) -> RecordError {
        match first_error(buf, 1) {
            BatchError::InvalidRecord { reason, .. } => reason,
            other => panic!("expected InvalidRecord, got {other:?}"),
        }
    }

    #[test]
    fn record_fields_and_absolute_values_are_decoded() {
        // header "h" -> "x", header "n" -> null
        let buf = record(&body(-7, 3, &[4, 2, b'h', 2, b'x', 2, b'n', 1]));
        let r = decode_record(&buf, &ctx(1)).unwrap();
        assert_eq!((r.timestamp_delta, r.timestamp), (-7, 993));
        assert_eq!((r.offset_delta, r.offset), (3, 103));
        assert_eq!((r.key, r.value), (Some(&b"k"[..]), Some(&b"v"[..])));
        assert_eq!(r.encoded_size, buf.len());
        let headers: Vec<_> = r.headers().collect();
        assert_eq!(
            headers,
            [
                Header {
                    key: b"h",
                    value: Some(b"x")
                },
                Header {
                    key: b"n",
                    value: None
                }
            ]
        );
    }

    #[test]
    fn log_append_time_records_report_the_batch_max_timestamp() {
        let buf = record(&body(-7, 0, &[0]));
        let c = RecordContext {
            timestamp_type: TimestampType::LogAppendTime,
            ..ctx(1)
        };
        assert_eq!(decode_record(&buf, &c).unwrap().timestamp, 5_000);
    }

    #[test]
    fn delete_horizon_deltas_are_relative_to_the_stored_base_timestamp() {
        // With the delete-horizon flag, baseTimestamp holds the horizon and deltas go negative.
        let buf = record(&body(-900, 0, &[0]));
        let c = RecordContext {
            base_timestamp: 10_000,
            ..ctx(1)
        };
        assert_eq!(decode_record(&buf, &c).unwrap().timestamp, 9_100);
    }

    #[test]
    fn null_key_and_value_decode_as_none() {
        let buf = record(&[0, 0, 0, 1, 1, 0]);
        let r = decode_record(&buf, &ctx(1)).unwrap();
        assert_eq!((r.key, r.value), (None, None));
    }

    #[test]
    fn negative_header_count_is_refused() {
        let buf = record(&body(0, 0, &[1]));
        assert_eq!(
            reason(&buf),
            RecordError::NegativeLength {
                field: "headerCount",
                value: -1
            }
        );
    }

    #[test]
    fn header_count_beyond_remaining_bytes_is_refused() {
        // headerCount 50 with 2 bytes left in the body
        let buf = record(&body(0, 0, &[100, 0, 1]));
        assert_eq!(
            reason(&buf),
            RecordError::HeaderCountTooLarge {
                count: 50,
                remaining: 2
            }
        );
    }

    #[test]
    fn null_header_key_is_refused() {
        let buf = record(&body(0, 0, &[2, 1, 1]));
        assert_eq!(reason(&buf), RecordError::NullHeaderKey);
    }

    #[test]
    fn key_length_below_minus_one_is_refused() {
        let buf = record(&[0, 0, 0, 3, 1, 0]);
        assert_eq!(
            reason(&buf),
            RecordError::NegativeLength {
                field: "keyLength",
                value: -2
            }
        );
    }

    #[test]
    fn negative_record_length_is_refused() {
        assert_eq!(
            reason(&[1]),
            RecordError::NegativeLength {
                field: "length",
                value: -1
            }
        );
    }

    #[test]
    fn body_shorter_than_its_fields_is_a_length_mismatch() {
        let mut buf = record(&body(0, 0, &[0]));
        buf[0] -= 2; // declare one byte less
        buf.push(0); // and keep the buffer long enough for the fields
        assert_eq!(
            reason(&buf),
            RecordError::LengthMismatch {
                declared: 7,
                consumed: 8
            }
        );
    }

    #[test]
    fn body_longer_than_its_fields_is_a_length_mismatch() {
        let mut b = body(0, 0, &[0]);
        b.push(0xaa);
        assert_eq!(
            reason(&record(&b)),
            RecordError::LengthMismatch {
                declared: 9,
                consumed: 8
            }
        );
    }

    #[test]
    fn record_running_past_the_buffer_is_truncated() {
        let buf = record(&body(0, 0, &[0]));
        assert_eq!(reason(&buf[..buf.len() - 1]), RecordError::Truncated);
    }

    #[test]
    fn value_length_past_the_buffer_is_truncated() {
        // valueLength 1_000_000 inside a short body: must not allocate or read out of bounds.
        let mut b = vec![0, 0, 0, 1];
        encode_varint(1_000_000, &mut b);
        assert_eq!(reason(&record(&b)), RecordError::Truncated);
    }

    #[test]
    fn overlong_timestamp_delta_varlong_is_refused() {
        let mut b = vec![0];
        b.extend_from_slice(&[0xff; 11]);
        assert_eq!(
            reason(&record(&b)),
            RecordError::VarintTooLong {
                field: "timestampDelta",
                max_bytes: 10
            }
        );
    }

    #[test]
    fn overlong_offset_delta_varint_is_refused() {
        let mut b = vec![0, 0];
        b.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
        assert_eq!(
            reason(&record(&b)),
            RecordError::VarintTooLong {
                field: "offsetDelta",
                max_bytes: 5
            }
        );
    }

    #[test]
    fn bytes_after_the_declared_records_are_trailing() {
        let mut buf = record(&body(0, 0, &[0]));
        buf.extend_from_slice(&[0, 0, 0]);
        assert_eq!(
            first_error(&buf, 1),
            BatchError::RecordsTrailing {
                records_count: 1,
                extra: 3
            }
        );
    }

    #[test]
    fn errors_carry_the_record_index_and_batch_position() {
        let mut buf = record(&body(0, 0, &[0]));
        let second_at = buf.len();
        buf.extend_from_slice(&record(&body(0, 1, &[1])));
        assert_eq!(
            first_error(&buf, 2),
            BatchError::InvalidRecord {
                index: 1,
                position: HEADER_SIZE + second_at,
                reason: RecordError::NegativeLength {
                    field: "headerCount",
                    value: -1
                },
            }
        );
    }

    #[test]
    fn fewer_records_than_declared_is_truncated() {
        let buf = record(&body(0, 0, &[0]));
        assert!(matches!(
            first_error(&buf, 2),
            BatchError::InvalidRecord {
                index: 1,
                reason: RecordError::Truncated,
                ..
            }
        ));
    }

    #[test]
    fn negative_records_count_is_refused_by_the_iterator() {
        assert_eq!(
            first_error(&[], -1),
            BatchError::NegativeRecordsCount { records_count: -1 }
        );
    }

    #[test]
    fn iteration_ends_after_an_error() {
        let mut it = RecordIter::new(&[1], ctx(3));
        assert!(matches!(it.next(), Some(Err(_))));
        assert!(it.next().is_none());
    }
}
