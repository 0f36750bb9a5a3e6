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
    CountMismatch {
        last_offset_delta: i32,
        records_count: i32,
    },
    #[error("negative lastOffsetDelta {last_offset_delta}")]
    NegativeLastOffsetDelta { last_offset_delta: i32 },
    #[error("clients may not produce control batches")]
    ControlBatchFromClient,
    #[error("producer id {producer_id} requires a base sequence >= 0, got {base_sequence}")]
    MissingSequence {
        producer_id: i64,
        base_sequence: i32,
    },
    #[error("record {index} at batch byte {position}: {reason}")]
    InvalidRecord {
        index: i32,
        position: usize,
        reason: RecordError,
    },
    #[error("{extra} bytes left after the {records_count} declared records")]
    RecordsTrailing { records_count: i32, extra: usize },
    #[error("cannot decompress {codec:?} records: {message}")]
    Decompression { codec: Compression, message: String },
    #[error("negative recordsCount {records_count}")]
    NegativeRecordsCount { records_count: i32 },
    #[error("{codec:?} records decompress to more than the limit of {limit} bytes")]
    DecompressedTooLarge { codec: Compression, limit: usize },
    #[error("cannot compress records with {codec:?}: {message}")]
    CompressionFailed { codec: Compression, message: String },
}

impl BatchError {
    /// A stable snake_case name for the kind of error, in Kafka's classes (the CLI's JSON
    /// `error` field and [`crate::AppendError::kind`]).
    ///
    /// Kafka splits CORRUPT_MESSAGE (the bytes are damaged: the frame, the CRC, or the records
    /// inside cannot be what any encoder wrote) from INVALID_RECORD (a well-formed batch that
    /// breaks a rule for what a client may send). A broker answers a retriable error for the
    /// first (the bytes may have been damaged in transit) and a fatal one for the second
    /// (resending the same batch cannot help). Every variant is listed so a new one must be
    /// classified here.
    pub fn kind(&self) -> &'static str {
        match self {
            BatchError::Truncated { .. }
            | BatchError::SizeTooSmall { .. }
            | BatchError::UnsupportedMagic { .. }
            | BatchError::CrcMismatch { .. }
            | BatchError::InvalidRecord { .. }
            | BatchError::RecordsTrailing { .. }
            | BatchError::Decompression { .. } => "corrupt_batch",
            BatchError::NonZeroBaseOffset { .. }
            | BatchError::EmptyBatch
            | BatchError::CountMismatch { .. }
            // Header counts that describe no records: the same family as CountMismatch (Kafka's
            // validateBatch and record iterator raise InvalidRecordException for both).
            | BatchError::NegativeLastOffsetDelta { .. }
            | BatchError::NegativeRecordsCount { .. }
            | BatchError::ControlBatchFromClient
            | BatchError::MissingSequence { .. }
            | BatchError::TrailingBytes { .. }
            | BatchError::UnknownCompression { .. } => "invalid_record",
            // A limit, not damage: the same records split into smaller batches would be accepted.
            // Kafka answers MESSAGE_TOO_LARGE, on which its producer splits the batch and
            // retries; a decompression bomb of one record cannot be split, and fails on the
            // client.
            BatchError::TooLarge { .. } | BatchError::DecompressedTooLarge { .. } => {
                "batch_too_large"
            }
            // Raised only when oncelog itself compresses (the builder), never by a batch's bytes.
            BatchError::CompressionFailed { .. } => "compression_failed",
        }
    }
}

/// A batch that could not be read from a buffer of batches, with the byte position in that
/// buffer where it starts: what [`super::BatchIter`] and [`super::ConsumerRecordIter`] yield
/// when they stop. Works with `?` into any `Box<dyn Error>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("batch at byte {position}: {error}")]
pub struct BatchErrorAt {
    /// Byte position of the batch in the buffer being iterated.
    pub position: usize,
    /// What is wrong with it.
    pub error: BatchError,
}

impl BatchErrorAt {
    /// The kind of the underlying [`BatchError`].
    pub fn kind(&self) -> &'static str {
        self.error.kind()
    }
}

/// What is wrong inside one record (docs/format.md, "Record").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the record runs past the end of the batch")]
    Truncated,
    #[error("{field} varint is longer than {max_bytes} bytes")]
    VarintTooLong {
        field: &'static str,
        max_bytes: usize,
    },
    #[error("{field} is negative ({value})")]
    NegativeLength { field: &'static str, value: i64 },
    #[error("offsetDelta {got}, expected {expected}: offsets must be dense")]
    OffsetDelta { expected: i32, got: i32 },
    #[error("record body declared {declared} bytes but its fields use {consumed}")]
    LengthMismatch { declared: usize, consumed: usize },
    #[error("header key must not be null")]
    NullHeaderKey,
    #[error("headerCount {count} is larger than the {remaining} bytes left in the record")]
    HeaderCountTooLarge { count: i32, remaining: usize },
}

impl RecordError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            RecordError::Truncated => "truncated",
            RecordError::VarintTooLong { .. } => "varint_too_long",
            RecordError::NegativeLength { .. } => "negative_length",
            RecordError::OffsetDelta { .. } => "offset_delta",
            RecordError::LengthMismatch { .. } => "length_mismatch",
            RecordError::NullHeaderKey => "null_header_key",
            RecordError::HeaderCountTooLarge { .. } => "header_count_too_large",
        }
    }
}

/// A control record whose key or value is corrupt (docs/format.md, "Control batches and transaction
/// markers").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlRecordError {
    #[error("control record key is {len} bytes, at least 4 needed")]
    KeyTooShort { len: usize },
    #[error("control record key has negative version {version}")]
    NegativeKeyVersion { version: i16 },
    #[error("end-txn marker value is {len} bytes, at least 6 needed")]
    ValueTooShort { len: usize },
    #[error("end-txn marker value has negative version {version}")]
    NegativeValueVersion { version: i16 },
    #[error("control record has a null {field}")]
    Null { field: &'static str },
}

impl ControlRecordError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            ControlRecordError::KeyTooShort { .. } => "key_too_short",
            ControlRecordError::NegativeKeyVersion { .. } => "negative_key_version",
            ControlRecordError::ValueTooShort { .. } => "value_too_short",
            ControlRecordError::NegativeValueVersion { .. } => "negative_value_version",
            ControlRecordError::Null { .. } => "null_field",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_snake_case(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    }

    #[test]
    fn record_and_control_kinds_are_distinct_snake_case_names() {
        let record = [
            RecordError::Truncated,
            RecordError::VarintTooLong {
                field: "length",
                max_bytes: 5,
            },
            RecordError::NegativeLength {
                field: "keyLength",
                value: -2,
            },
            RecordError::OffsetDelta {
                expected: 0,
                got: 1,
            },
            RecordError::LengthMismatch {
                declared: 3,
                consumed: 2,
            },
            RecordError::NullHeaderKey,
            RecordError::HeaderCountTooLarge {
                count: 9,
                remaining: 1,
            },
        ]
        .map(|e| e.kind());
        let control = [
            ControlRecordError::KeyTooShort { len: 1 },
            ControlRecordError::NegativeKeyVersion { version: -1 },
            ControlRecordError::ValueTooShort { len: 1 },
            ControlRecordError::NegativeValueVersion { version: -1 },
            ControlRecordError::Null { field: "key" },
        ]
        .map(|e| e.kind());
        for names in [&record[..], &control[..]] {
            let mut seen = std::collections::BTreeSet::new();
            for name in names {
                assert!(is_snake_case(name), "{name}");
                assert!(seen.insert(name), "{name} names two variants");
            }
        }
    }

    #[test]
    fn a_positioned_batch_error_keeps_the_kind_and_names_the_byte() {
        let e = BatchErrorAt {
            position: 122,
            error: BatchError::CrcMismatch {
                stored: 1,
                computed: 2,
            },
        };
        assert_eq!(e.kind(), "corrupt_batch");
        assert!(
            e.to_string().starts_with("batch at byte 122: CRC mismatch"),
            "{e}"
        );
        // It is a std error, so `?` carries it into a `Box<dyn Error>`.
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
        assert!(boxed.to_string().contains("122"));
    }
}
