//! The checks a batch must pass before it is stored (kafka-format.md §2.1, DESIGN.md §3).

use super::batch::{Compression, RecordBatch, TimestampType, ATTR_COMPRESSION_MASK, HEADER_SIZE};
use super::error::{BatchError, RecordError};

/// What the append path needs to know of a validated client batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    /// Total bytes, 12 + batchLength.
    pub size: usize,
    pub last_offset_delta: i32,
    pub records_count: i32,
    /// The largest record timestamp. For uncompressed batches it is computed from the records;
    /// for compressed ones it is the header's maxTimestamp.
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
/// batch, a sequence when there is a producer id; for uncompressed batches every record
/// (offset deltas 0..n-1, varint bounds, lengths consumed exactly) and no bytes left over.
///
/// Bytes after the batch are refused ([`BatchError::TrailingBytes`]) right after the size check:
/// a v2 produce request carries one batch per partition (§2.1). Compressed batches are stored
/// as they are, so their records are not read here and the header's maxTimestamp is trusted.
///
/// This is the append hot path: one pass over the records, no allocation.
pub fn validate_client_batch(
    buf: &[u8],
    max_batch_bytes: usize,
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
        Compression::None => max_record_timestamp(&batch)?,
        _ => batch.max_timestamp(),
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

/// Walks the raw records once: every record must be well formed and carry offsetDelta equal to
/// its index. Kafka's uncompressed in-place path skips the delta check; oncelog does not, since
/// a gap would make the offsets it assigns disagree with what readers compute (DESIGN.md).
fn max_record_timestamp(batch: &RecordBatch<'_>) -> Result<i64, BatchError> {
    let mut max_timestamp = i64::MIN;
    let mut position = HEADER_SIZE;
    for (index, record) in (0i32..).zip(batch.iter_records(batch.records_data())) {
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
/// CRC, a known codec and a non-negative lastOffsetDelta. Control batches are allowed.
///
/// `buf` may hold more bytes after the batch (a scanner passes the rest of a segment); the
/// returned view is exactly the batch, and its size says where the next one starts. A negative
/// recordsCount is refused too; a count of 0 is legal (compaction leaves empty batches).
/// Records are not decoded: recovery reads headers only (DESIGN.md §7).
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
    Ok(batch)
}
