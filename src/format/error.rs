//! Why a batch was refused. Every variant carries what was found, so a broker can answer the
//! client precisely and an operator can find the byte.

use super::batch::Compression;

/// A batch that is not a valid Kafka RecordBatch v2, or that breaks a rule for its origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("declared batchLength {batch_length} is below the 49 bytes of a v2 header")]
    SizeTooSmall { batch_length: i32 },
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("magic {magic} is not supported: only RecordBatch v2 (magic 2) is stored")]
    UnsupportedMagic { magic: i8 },
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("{extra} bytes follow the {batch_size}-byte batch: one batch per append")]
    TrailingBytes { batch_size: usize, extra: usize },
    #[error("unknown compression codec {codec}")]
    UnknownCompression { codec: u8 },
    #[error("a client batch must have baseOffset 0, got {base_offset}")]
    NonZeroBaseOffset { base_offset: i64 },
    #[error("a client batch must hold at least one record")]
    EmptyBatch,
    #[error("lastOffsetDelta {last_offset_delta} + 1 != recordsCount {records_count}")]
    CountMismatch { last_offset_delta: i32, records_count: i32 },
    #[error("negative lastOffsetDelta {last_offset_delta}")]
    NegativeLastOffsetDelta { last_offset_delta: i32 },
    #[error("clients may not produce control batches")]
    ControlBatchFromClient,
    #[error("producer id {producer_id} requires a base sequence >= 0, got {base_sequence}")]
    MissingSequence { producer_id: i64, base_sequence: i32 },
    #[error("record {index} at batch byte {position}: {reason}")]
    InvalidRecord { index: i32, position: usize, reason: RecordError },
    #[error("{extra} bytes left after the {records_count} declared records")]
    RecordsTrailing { records_count: i32, extra: usize },
    #[error("cannot decompress {codec:?} records: {message}")]
    Decompression { codec: Compression, message: String },
}

/// What is wrong inside one record (kafka-format.md §1.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the record runs past the end of the batch")]
    Truncated,
    #[error("{field} varint is longer than {max_bytes} bytes")]
    VarintTooLong { field: &'static str, max_bytes: usize },
    #[error("{field} is negative ({value})")]
    NegativeLength { field: &'static str, value: i64 },
    #[error("offsetDelta {got}, expected {expected}: offsets must be dense")]
    OffsetDelta { expected: i32, got: i32 },
    #[error("record body declared {declared} bytes but its fields use {consumed}")]
    LengthMismatch { declared: usize, consumed: usize },
    #[error("header key must not be null")]
    NullHeaderKey,
}
