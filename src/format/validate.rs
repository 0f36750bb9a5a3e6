//! The checks a batch must pass before it is stored (docs/design.md, "Append" and "Layers").

use std::cell::Cell;

use super::batch::{Compression, RecordBatch, TimestampType, ATTR_COMPRESSION_MASK, HEADER_SIZE};
use super::compression::decompress_into;
use super::error::{BatchError, RecordError};

/// What the append path needs to know of a validated client batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    /// Total bytes, 12 + batchLength.
    pub size: usize,
    pub last_offset_delta: i32,
    pub records_count: i32,
    /// The largest record timestamp, computed from the records (decompressed if need be), as
    /// Kafka's validation does; the header's maxTimestamp is not trusted. Under LogAppendTime
    /// (a client should not send it) every record's timestamp is the header's maxTimestamp.
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub is_transactional: bool,
    pub is_control: bool,
    pub timestamp_type: TimestampType,
    pub compression: Compression,
}

/// Validates `buf` as exactly one batch from a client (origin CLIENT).
///
/// Checks, in Kafka's order: the frame (size ≥ 61, magic 2, complete), size ≤ `max_batch_bytes`,
/// the CRC, baseOffset 0, a known codec, `lastOffsetDelta + 1 == recordsCount > 0`, not a control
/// batch, a sequence when there is a producer id; then every record (offset deltas 0..n-1,
/// varint bounds, lengths consumed exactly) and no bytes left over.
///
/// Bytes after the batch are refused ([`BatchError::TrailingBytes`]) right after the size check:
/// a v2 produce request carries one batch per partition (docs/design.md, "Append").
///
/// A compressed batch is decompressed, at most `max_decompressed_bytes` of it
/// ([`BatchError::DecompressedTooLarge`] beyond), and its records are held to the same rules:
/// Kafka's broker decompresses every compressed client batch too, and a batch stored without
/// that check could be garbage behind a valid CRC that every reader and `verify` then trips on.
/// The batch itself is stored compressed, as the client sent it.
///
/// This is the append hot path. Uncompressed: one pass over the records, no allocation.
/// Compressed: the decompressor's own state plus a per-thread output buffer that is reused.
pub fn validate_client_batch(
    buf: &[u8],
    max_batch_bytes: usize,
    max_decompressed_bytes: usize,
) -> Result<BatchSummary, BatchError> {
    let batch = RecordBatch::parse(buf)?;
    let size = batch.size();
    if size > max_batch_bytes {
        return Err(BatchError::TooLarge {
            size,
            max: max_batch_bytes,
        });
    }
    if buf.len() > size {
        return Err(BatchError::TrailingBytes {
            batch_size: size,
            extra: buf.len() - size,
        });
    }
    batch.verify_crc()?;
    if batch.base_offset() != 0 {
        return Err(BatchError::NonZeroBaseOffset {
            base_offset: batch.base_offset(),
        });
    }
    let compression = known_compression(&batch)?;
    let (records_count, last_offset_delta) = (batch.records_count(), batch.last_offset_delta());
    if records_count <= 0 {
        return Err(BatchError::EmptyBatch);
    }
    if i64::from(last_offset_delta) + 1 != i64::from(records_count) {
        return Err(BatchError::CountMismatch {
            last_offset_delta,
            records_count,
        });
    }
    if batch.is_control() {
        return Err(BatchError::ControlBatchFromClient);
    }
    if batch.producer_id() >= 0 && batch.base_sequence() < 0 {
        return Err(BatchError::MissingSequence {
            producer_id: batch.producer_id(),
            base_sequence: batch.base_sequence(),
        });
    }
    let max_timestamp = match compression {
        Compression::None => checked_max_timestamp(&batch, batch.records_data())?,
        codec => compressed_max_timestamp(&batch, codec, max_decompressed_bytes)?,
    };
    Ok(BatchSummary {
        size,
        last_offset_delta,
        records_count,
        max_timestamp,
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        base_sequence: batch.base_sequence(),
        is_transactional: batch.is_transactional(),
        is_control: false,
        timestamp_type: batch.timestamp_type(),
        compression,
    })
}

/// The records of `data` (the batch's raw records, or its decompressed stream) checked by the
/// lean walk, and by the thorough one only when the lean one says no, to name the problem.
#[inline(always)]
fn checked_max_timestamp(batch: &RecordBatch<'_>, data: &[u8]) -> Result<i64, BatchError> {
    match fast_max_record_timestamp(batch, data) {
        Some(max) => Ok(max),
        None => max_record_timestamp(batch, data),
    }
}

/// Largest decompression buffer a thread keeps between appends. Client batches are at most
/// `max_message_bytes` (1 MiB by default) and compress a few times at most, so this covers
/// ordinary batches; the buffer of a rare larger one (a bomb up to the limit included) is
/// freed instead of pinning its memory to the thread.
const SCRATCH_RETAIN_BYTES: usize = 4 << 20;

thread_local! {
    /// The decompressed records of the last compressed batch this thread validated: reusing
    /// it spares an allocation and its growth per batch.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Decompresses a compressed batch's records (bounded) and checks them as raw records are.
/// Kept out of line so the uncompressed path does not carry it.
#[inline(never)]
fn compressed_max_timestamp(
    batch: &RecordBatch<'_>,
    codec: Compression,
    max_decompressed_bytes: usize,
) -> Result<i64, BatchError> {
    SCRATCH.with(|cell| {
        // Taken, not borrowed: nothing can observe the cell while we hold the buffer.
        let mut records = cell.take();
        let result = decompress_into(
            codec,
            batch.records_data(),
            max_decompressed_bytes,
            &mut records,
        )
        .and_then(|()| checked_max_timestamp(batch, &records));
        if records.capacity() <= SCRATCH_RETAIN_BYTES {
            cell.set(records);
        }
        result
    })
}

/// The append hot path's record walk: the same rules as [`max_record_timestamp`] (every record
/// well formed, offsetDelta equal to its index, nothing left over), but only a yes or no,
/// without building records or errors. `Some(max timestamp)` only when every rule holds; on
/// `None` the thorough walk runs to name the problem. A property test pins that the two agree.
fn fast_max_record_timestamp(batch: &RecordBatch<'_>, data: &[u8]) -> Option<i64> {
    if batch.timestamp_type() != crate::format::TimestampType::CreateTime {
        return None;
    }
    let base_timestamp = batch.base_timestamp();
    let mut pos = 0usize;
    let mut max_timestamp = i64::MIN;
    for index in 0..batch.records_count() {
        let length = zigzag32(uvarint(data, &mut pos, 5)?);
        let body_start = pos;
        let body_end = body_start.checked_add(usize::try_from(length).ok()?)?;
        if body_end > data.len() {
            return None;
        }
        pos += 1; // attributes
        let timestamp_delta = zigzag64(uvarint(data, &mut pos, 10)?);
        if zigzag32(uvarint(data, &mut pos, 5)?) != index {
            return None;
        }
        skip_nullable(data, &mut pos)?; // key
        skip_nullable(data, &mut pos)?; // value
        let headers = zigzag32(uvarint(data, &mut pos, 5)?);
        if headers < 0 || headers as usize > body_end.saturating_sub(pos) {
            return None;
        }
        for _ in 0..headers {
            let key = zigzag32(uvarint(data, &mut pos, 5)?);
            if key < 0 {
                return None;
            }
            pos = pos.checked_add(key as usize).filter(|&p| p <= data.len())?;
            skip_nullable(data, &mut pos)?;
        }
        if pos != body_end {
            return None;
        }
        max_timestamp = max_timestamp.max(base_timestamp.wrapping_add(timestamp_delta));
    }
    (pos == data.len()).then_some(max_timestamp)
}

/// An unsigned LEB128 of at most `max_bytes` (≥ 2) at `*pos`, with one- and two-byte fast
/// paths (record lengths, deltas and value lengths under 8 KiB are one or two bytes).
#[inline(always)]
fn uvarint(data: &[u8], pos: &mut usize, max_bytes: usize) -> Option<u64> {
    let first = *data.get(*pos)?;
    if first < 0x80 {
        *pos += 1;
        return Some(u64::from(first));
    }
    let second = *data.get(*pos + 1)?;
    if second < 0x80 {
        *pos += 2;
        return Some(u64::from(first & 0x7f) | u64::from(second) << 7);
    }
    let mut value = u64::from(first & 0x7f) | u64::from(second & 0x7f) << 7;
    for i in 2..max_bytes {
        let b = *data.get(*pos + i)?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *pos += i + 1;
            return Some(value);
        }
    }
    None
}

#[inline(always)]
fn zigzag32(raw: u64) -> i32 {
    let raw = raw as u32;
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

#[inline(always)]
fn zigzag64(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// Skips a nullable byte string (length -1 is null; below -1 is invalid).
#[inline(always)]
fn skip_nullable(data: &[u8], pos: &mut usize) -> Option<()> {
    let len = zigzag32(uvarint(data, pos, 5)?);
    if len >= 0 {
        *pos = pos.checked_add(len as usize).filter(|&p| p <= data.len())?;
    } else if len < -1 {
        return None;
    }
    Some(())
}

/// Walks the records of `data` (raw, or decompressed) once: every record must be well formed and
/// carry offsetDelta equal to its index. Kafka's uncompressed in-place path skips the delta
/// check (its compressed path rebuilds the batch instead); oncelog refuses, since a gap would
/// make the offsets it assigns disagree with what readers compute (docs/design.md, "Where
/// oncelog departs from Kafka").
pub(crate) fn max_record_timestamp(
    batch: &RecordBatch<'_>,
    data: &[u8],
) -> Result<i64, BatchError> {
    let mut max_timestamp = i64::MIN;
    let mut position = HEADER_SIZE;
    for (index, record) in (0i32..).zip(batch.iter_records(data)) {
        let record = record?;
        if record.offset_delta != index {
            return Err(BatchError::InvalidRecord {
                index,
                position,
                reason: RecordError::OffsetDelta {
                    expected: index,
                    got: record.offset_delta,
                },
            });
        }
        max_timestamp = max_timestamp.max(record.timestamp);
        position += record.encoded_size;
    }
    Ok(max_timestamp)
}

fn known_compression(batch: &RecordBatch<'_>) -> Result<Compression, BatchError> {
    batch.compression().ok_or(BatchError::UnknownCompression {
        codec: (batch.attributes() & ATTR_COMPRESSION_MASK) as u8,
    })
}

/// Validates a batch that already carries its offsets (replication, recovery): the frame, the
/// CRC, a known codec and a non-negative lastOffsetDelta. Control batches are allowed; one of a
/// producer (a transaction marker) must hold a valid COMMIT or ABORT marker, since producer
/// state reads it ([`super::decode_txn_marker`]).
///
/// `buf` may hold more bytes after the batch (a scanner passes the rest of a segment); the
/// returned view is exactly the batch, and its size says where the next one starts. A negative
/// recordsCount is refused too; a count of 0 is legal (compaction leaves empty batches).
/// Records of data batches are not decoded: recovery reads headers only (docs/design.md,
/// "Recovery on open"); a marker's one record is a few bytes.
pub fn validate_stored_batch(buf: &[u8]) -> Result<RecordBatch<'_>, BatchError> {
    let batch = RecordBatch::parse(buf)?;
    batch.verify_crc()?;
    known_compression(&batch)?;
    if batch.last_offset_delta() < 0 {
        return Err(BatchError::NegativeLastOffsetDelta {
            last_offset_delta: batch.last_offset_delta(),
        });
    }
    if batch.records_count() < 0 {
        return Err(BatchError::NegativeRecordsCount {
            records_count: batch.records_count(),
        });
    }
    super::control::decode_txn_marker(&batch)?;
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::batch::{
        rewrite_crc, set_base_offset, OFF_ATTRIBUTES, OFF_BATCH_LENGTH, OFF_LAST_OFFSET_DELTA,
        OFF_MAGIC, OFF_PRODUCER_ID, OFF_RECORDS_COUNT,
    };
    use crate::format::builder::BatchBuilder;
    use crate::format::control::{end_txn_marker, ControlType};
    use crate::format::varint::{encode_varint, encode_varlong};

    const LIMIT: usize = 1 << 20;
    const UNPACK_LIMIT: usize = 4 << 20;

    fn three_records() -> Vec<u8> {
        let mut b = BatchBuilder::new().producer(7, 1, 0);
        b.append(100, Some(b"a"), Some(b"1"), &[]);
        b.append(300, Some(b"b"), Some(b"2"), &[]);
        b.append(200, Some(b"c"), None, &[]);
        b.build().unwrap()
    }

    fn put_i32(buf: &mut [u8], off: usize, v: i32) {
        buf[off..off + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// A batch whose raw records are given as-is, with a correct header and CRC.
    fn batch_with_records(count: i32, records: &[u8]) -> Vec<u8> {
        let mut buf = BatchBuilder::new().build().unwrap();
        buf.extend_from_slice(records);
        let batch_length = (buf.len() - 12) as i32;
        put_i32(&mut buf, OFF_BATCH_LENGTH, batch_length);
        put_i32(&mut buf, OFF_LAST_OFFSET_DELTA, count - 1);
        put_i32(&mut buf, OFF_RECORDS_COUNT, count);
        rewrite_crc(&mut buf);
        buf
    }

    fn raw_record(offset_delta: i32, header_count: i32) -> Vec<u8> {
        let mut body = vec![0];
        encode_varlong(0, &mut body);
        encode_varint(offset_delta, &mut body);
        body.extend_from_slice(&[1, 1]); // null key, null value
        encode_varint(header_count, &mut body);
        let mut out = Vec::new();
        encode_varint(body.len() as i32, &mut out);
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn valid_client_batch_is_summarised() {
        let buf = three_records();
        let s = validate_client_batch(&buf, LIMIT, UNPACK_LIMIT).unwrap();
        assert_eq!(s.size, buf.len());
        assert_eq!((s.records_count, s.last_offset_delta), (3, 2));
        assert_eq!(s.max_timestamp, 300);
        assert_eq!(
            (s.producer_id, s.producer_epoch, s.base_sequence),
            (7, 1, 0)
        );
        assert_eq!(s.compression, Compression::None);
    }

    /// With a codec compiled out (`cargo test -p oncelog --lib --no-default-features`), a batch
    /// in it is refused as unsupported: never accepted unchecked, never called corrupt.
    #[test]
    fn a_batch_in_a_compiled_out_codec_is_refused_as_unsupported() {
        let records = raw_record(0, 0);
        for codec in CODECS {
            let mut buf = batch_with_records(1, &records);
            buf[OFF_ATTRIBUTES + 1] |= codec.id();
            rewrite_crc(&mut buf);
            let got = validate_client_batch(&buf, LIMIT, UNPACK_LIMIT);
            if crate::format::compression::is_supported(codec) {
                assert!(
                    matches!(got, Err(BatchError::Decompression { codec: c, .. }) if c == codec),
                    "{codec:?}: {got:?}"
                );
            } else {
                assert_eq!(got, Err(BatchError::UnsupportedCompression { codec }));
            }
        }
    }

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// A `codec` batch whose compressed stream holds `records` as given, with a valid CRC.
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    fn compressed_with_records(codec: Compression, count: i32, records: &[u8]) -> Vec<u8> {
        let packed = crate::format::compression::compress(codec, records).unwrap();
        let mut buf = batch_with_records(count, &packed);
        buf[OFF_ATTRIBUTES + 1] |= codec.id();
        rewrite_crc(&mut buf);
        buf
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_client_batch_reports_the_records_max_timestamp_not_the_header() {
        for codec in CODECS {
            let mut b = BatchBuilder::new().compression(codec).max_timestamp(999);
            b.append(5, None, Some(b"x"), &[]);
            b.append(70, None, Some(b"y"), &[]);
            b.append(40, None, Some(b"z"), &[]);
            let s = validate_client_batch(&b.build().unwrap(), LIMIT, UNPACK_LIMIT).unwrap();
            assert_eq!((s.max_timestamp, s.compression), (70, codec), "{codec:?}");
            assert_eq!((s.records_count, s.last_offset_delta), (3, 2), "{codec:?}");
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_garbage_behind_a_valid_crc_is_refused() {
        let garbage: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
        for codec in CODECS {
            let mut buf = batch_with_records(1, &garbage);
            buf[OFF_ATTRIBUTES + 1] |= codec.id();
            rewrite_crc(&mut buf);
            assert!(
                matches!(
                    validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                    Err(BatchError::Decompression { codec: c, .. }) if c == codec
                ),
                "{codec:?}: {:?}",
                validate_client_batch(&buf, LIMIT, UNPACK_LIMIT)
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_garbage_records_are_refused() {
        for codec in CODECS {
            let buf = compressed_with_records(codec, 1, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
            assert!(
                matches!(
                    validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                    Err(BatchError::InvalidRecord {
                        index: 0,
                        position: HEADER_SIZE,
                        reason: RecordError::VarintTooLong {
                            field: "length",
                            ..
                        },
                    })
                ),
                "{codec:?}"
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_count_beyond_the_records_is_refused() {
        let mut records = raw_record(0, 0);
        records.extend_from_slice(&raw_record(1, 0));
        for codec in CODECS {
            let buf = compressed_with_records(codec, 3, &records);
            assert!(
                matches!(
                    validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                    Err(BatchError::InvalidRecord {
                        index: 2,
                        reason: RecordError::Truncated,
                        ..
                    })
                ),
                "{codec:?}"
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_records_beyond_the_count_are_refused() {
        let mut records = raw_record(0, 0);
        let extra = records.len();
        records.extend_from_slice(&raw_record(1, 0));
        for codec in CODECS {
            let buf = compressed_with_records(codec, 1, &records);
            assert_eq!(
                validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                Err(BatchError::RecordsTrailing {
                    records_count: 1,
                    extra
                }),
                "{codec:?}"
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_non_dense_offset_deltas_are_refused() {
        let mut records = raw_record(0, 0);
        let second_at = HEADER_SIZE + records.len();
        records.extend_from_slice(&raw_record(5, 0));
        for codec in CODECS {
            let buf = compressed_with_records(codec, 2, &records);
            assert_eq!(
                validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                Err(BatchError::InvalidRecord {
                    index: 1,
                    position: second_at,
                    reason: RecordError::OffsetDelta {
                        expected: 1,
                        got: 5
                    },
                }),
                "{codec:?}"
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn compressed_records_beyond_the_decompression_limit_are_refused() {
        // 100 records of 1000 zero bytes: about 100 KB of records, a few hundred compressed.
        let build = |codec| {
            let mut b = BatchBuilder::new().compression(codec);
            for _ in 0..100 {
                b.append(1, None, Some(&[0; 1000]), &[]);
            }
            b.build().unwrap()
        };
        let records = build(Compression::None).len() - HEADER_SIZE;
        for codec in CODECS {
            let buf = build(codec);
            assert!(buf.len() < records / 10, "{codec:?} compresses");
            assert!(
                validate_client_batch(&buf, LIMIT, records).is_ok(),
                "{codec:?}: the limit itself is allowed"
            );
            assert_eq!(
                validate_client_batch(&buf, LIMIT, records - 1),
                Err(BatchError::DecompressedTooLarge {
                    codec,
                    limit: records - 1
                }),
                "{codec:?}"
            );
        }
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn a_buffer_left_by_a_failed_batch_does_not_leak_into_the_next() {
        // The per-thread buffer is reused: a valid batch after a refused one of a larger
        // stream must be judged on its own bytes only.
        let mut records = raw_record(0, 0);
        records.extend_from_slice(&raw_record(1, 0));
        let long = compressed_with_records(Compression::Gzip, 3, &records);
        assert!(validate_client_batch(&long, LIMIT, UNPACK_LIMIT).is_err());
        let short = compressed_with_records(Compression::Gzip, 1, &raw_record(0, 0));
        assert!(validate_client_batch(&short, LIMIT, UNPACK_LIMIT).is_ok());
    }

    #[test]
    fn truncated_batch_is_refused() {
        let buf = three_records();
        assert_eq!(
            validate_client_batch(&buf[..buf.len() - 1], LIMIT, UNPACK_LIMIT),
            Err(BatchError::Truncated {
                needed: buf.len(),
                available: buf.len() - 1
            })
        );
        assert!(matches!(
            validate_client_batch(&buf[..10], LIMIT, UNPACK_LIMIT),
            Err(BatchError::Truncated { .. })
        ));
    }

    #[test]
    fn declared_size_below_the_header_is_refused() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_BATCH_LENGTH, 48);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::SizeTooSmall { batch_length: 48 })
        );
    }

    #[test]
    fn negative_batch_length_is_refused() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_BATCH_LENGTH, -5);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::SizeTooSmall { batch_length: -5 })
        );
        assert_eq!(
            validate_stored_batch(&buf).unwrap_err(),
            BatchError::SizeTooSmall { batch_length: -5 }
        );
    }

    #[test]
    fn legacy_magics_are_unsupported() {
        for magic in [0u8, 1, 3, 0xff] {
            let mut buf = three_records();
            buf[OFF_MAGIC] = magic;
            let expected = BatchError::UnsupportedMagic { magic: magic as i8 };
            assert_eq!(
                validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
                Err(expected.clone())
            );
            assert_eq!(validate_stored_batch(&buf).unwrap_err(), expected);
        }
    }

    #[test]
    fn batch_beyond_the_size_limit_is_refused() {
        let buf = three_records();
        assert_eq!(
            validate_client_batch(&buf, buf.len() - 1, UNPACK_LIMIT),
            Err(BatchError::TooLarge {
                size: buf.len(),
                max: buf.len() - 1
            })
        );
        assert!(validate_client_batch(&buf, buf.len(), UNPACK_LIMIT).is_ok());
    }

    #[test]
    fn bytes_after_the_batch_are_refused() {
        let mut buf = three_records();
        let size = buf.len();
        buf.extend_from_slice(&three_records());
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::TrailingBytes {
                batch_size: size,
                extra: size
            })
        );
    }

    #[test]
    fn wrong_crc_is_refused() {
        let mut buf = three_records();
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        assert!(matches!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::CrcMismatch { .. })
        ));
        assert!(matches!(
            validate_stored_batch(&buf),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn client_batch_with_a_base_offset_is_refused() {
        let mut buf = three_records();
        set_base_offset(&mut buf, 42);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::NonZeroBaseOffset { base_offset: 42 })
        );
        assert!(
            validate_stored_batch(&buf).is_ok(),
            "stored batches carry offsets"
        );
    }

    #[test]
    fn unassigned_codec_is_refused() {
        let mut buf = three_records();
        buf[OFF_ATTRIBUTES + 1] |= 0x05;
        rewrite_crc(&mut buf);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::UnknownCompression { codec: 5 })
        );
        assert_eq!(
            validate_stored_batch(&buf).unwrap_err(),
            BatchError::UnknownCompression { codec: 5 }
        );
    }

    #[test]
    fn client_batch_without_records_is_refused() {
        let buf = BatchBuilder::new().build().unwrap();
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::EmptyBatch)
        );
        assert!(
            validate_stored_batch(&buf).is_ok(),
            "compaction leaves empty batches"
        );
    }

    #[test]
    fn count_disagreeing_with_last_offset_delta_is_refused() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_LAST_OFFSET_DELTA, 5);
        rewrite_crc(&mut buf);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::CountMismatch {
                last_offset_delta: 5,
                records_count: 3
            })
        );
    }

    #[test]
    fn last_offset_delta_at_i32_max_does_not_overflow() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_LAST_OFFSET_DELTA, i32::MAX);
        rewrite_crc(&mut buf);
        assert!(matches!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::CountMismatch { .. })
        ));
    }

    #[test]
    fn control_batch_from_a_client_is_refused() {
        let mut buf = end_txn_marker(0, 0, 5, 0, 1, ControlType::Commit, 0);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::ControlBatchFromClient)
        );
        set_base_offset(&mut buf, 10);
        assert!(validate_stored_batch(&buf).is_ok(), "markers are stored");
    }

    #[test]
    fn a_stored_marker_of_an_unknown_type_is_refused() {
        // After the header: one byte each of record length, attributes, timestamp delta, offset
        // delta and key length, then the key's int16 version and int16 type (low byte here).
        let mut buf = end_txn_marker(0, 0, 5, 0, 1, ControlType::Commit, 0);
        let type_at = HEADER_SIZE + 5 + 3;
        assert_eq!(buf[type_at], 1);
        buf[type_at] = 7;
        rewrite_crc(&mut buf);
        assert_eq!(
            validate_stored_batch(&buf).unwrap_err(),
            BatchError::InvalidMarker {
                producer_id: 5,
                reason: crate::format::ControlRecordError::NotEndTxnMarker { control_type: 7 }
            }
        );
        assert_eq!(validate_stored_batch(&buf).unwrap_err().kind(), "invalid_record");
    }

    #[test]
    fn producer_id_without_a_sequence_is_refused() {
        let mut b = BatchBuilder::new().producer(9, 0, -1);
        b.append(1, None, None, &[]);
        assert_eq!(
            validate_client_batch(&b.build().unwrap(), LIMIT, UNPACK_LIMIT),
            Err(BatchError::MissingSequence {
                producer_id: 9,
                base_sequence: -1
            })
        );
    }

    #[test]
    fn non_dense_offset_deltas_are_refused() {
        let mut records = raw_record(0, 0);
        let second_at = HEADER_SIZE + records.len();
        records.extend_from_slice(&raw_record(2, 0));
        let buf = batch_with_records(2, &records);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::InvalidRecord {
                index: 1,
                position: second_at,
                reason: RecordError::OffsetDelta {
                    expected: 1,
                    got: 2
                },
            })
        );
    }

    #[test]
    fn negative_header_count_in_a_client_batch_is_refused() {
        let buf = batch_with_records(1, &raw_record(0, -1));
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::InvalidRecord {
                index: 0,
                position: HEADER_SIZE,
                reason: RecordError::NegativeLength {
                    field: "headerCount",
                    value: -1
                },
            })
        );
    }

    #[test]
    fn bytes_after_the_last_record_are_refused() {
        let mut records = raw_record(0, 0);
        records.extend_from_slice(&[0, 0]);
        let buf = batch_with_records(1, &records);
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::RecordsTrailing {
                records_count: 1,
                extra: 2
            })
        );
    }

    #[test]
    fn overlong_varint_in_a_record_is_refused() {
        let buf = batch_with_records(1, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(matches!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::InvalidRecord {
                reason: RecordError::VarintTooLong {
                    field: "length",
                    max_bytes: 5
                },
                ..
            })
        ));
    }

    #[test]
    fn stored_batch_with_negative_last_offset_delta_is_refused() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_LAST_OFFSET_DELTA, -1);
        rewrite_crc(&mut buf);
        assert_eq!(
            validate_stored_batch(&buf).unwrap_err(),
            BatchError::NegativeLastOffsetDelta {
                last_offset_delta: -1
            }
        );
    }

    #[test]
    fn stored_batch_with_negative_records_count_is_refused() {
        let mut buf = three_records();
        put_i32(&mut buf, OFF_RECORDS_COUNT, -3);
        rewrite_crc(&mut buf);
        assert_eq!(
            validate_stored_batch(&buf).unwrap_err(),
            BatchError::NegativeRecordsCount { records_count: -3 }
        );
        assert_eq!(
            validate_client_batch(&buf, LIMIT, UNPACK_LIMIT),
            Err(BatchError::EmptyBatch)
        );
    }

    #[test]
    fn stored_batch_is_returned_without_the_bytes_after_it() {
        let first = three_records();
        let mut buf = first.clone();
        buf.extend_from_slice(&[0; 30]);
        assert_eq!(validate_stored_batch(&buf).unwrap().as_bytes(), &first[..]);
    }

    #[test]
    fn producer_id_field_is_covered_by_the_crc() {
        let mut buf = three_records();
        buf[OFF_PRODUCER_ID + 7] ^= 1;
        assert!(matches!(
            validate_stored_batch(&buf),
            Err(BatchError::CrcMismatch { .. })
        ));
    }
}

#[cfg(test)]
mod fast_walk_tests {
    use super::*;
    use crate::format::BatchBuilder;
    use proptest::prelude::*;

    /// (timestamp, key, value, header count) of each record.
    type Spec = (i64, Option<Vec<u8>>, Option<Vec<u8>>, usize);

    fn batch(values: &[Spec]) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for (ts, k, v, headers) in values {
            let hs: Vec<crate::format::Header<'_>> = (0..*headers)
                .map(|_| crate::format::Header {
                    key: b"h",
                    value: Some(b"v"),
                })
                .collect();
            b.append(*ts, k.as_deref(), v.as_deref(), &hs);
        }
        b.build().unwrap()
    }

    proptest! {
        /// The fast walk accepts exactly what the thorough walk accepts, with the same maximum,
        /// on valid batches and on any single-byte change of their records (CRC aside).
        #[test]
        fn fast_and_thorough_walks_agree(
            records in proptest::collection::vec(
                (0i64..1 << 40,
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                 0usize..3),
                1..20),
            flip in any::<(usize, u8)>(),
        ) {
            let mut bytes = batch(&records);
            for mutate in [false, true] {
                if mutate {
                    let at = HEADER_SIZE + flip.0 % (bytes.len() - HEADER_SIZE);
                    bytes[at] ^= flip.1 | 1;
                }
                let b = RecordBatch::parse(&bytes).unwrap();
                let thorough = max_record_timestamp(&b, b.records_data()).ok();
                match fast_max_record_timestamp(&b, b.records_data()) {
                    Some(max) => prop_assert_eq!(Some(max), thorough),
                    None => prop_assert!(mutate || thorough.is_none(), "fast walk refused a valid batch"),
                }
            }
        }
    }
}
