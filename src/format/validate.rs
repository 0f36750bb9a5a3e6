//! The checks a batch must pass before it is stored (kafka-format.md §2.1, DESIGN.md §3).

use super::batch::{Compression, RecordBatch, TimestampType};
use super::error::BatchError;

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
pub fn validate_client_batch(
    buf: &[u8],
    max_batch_bytes: usize,
) -> Result<BatchSummary, BatchError> {
    let _ = (buf, max_batch_bytes);
    todo!("format helper implements this")
}

/// Validates a batch that already carries its offsets (replication, recovery): the frame, the
/// CRC, a known codec and a non-negative lastOffsetDelta. Control batches are allowed.
pub fn validate_stored_batch(buf: &[u8]) -> Result<RecordBatch<'_>, BatchError> {
    let _ = buf;
    todo!("format helper implements this")
}
