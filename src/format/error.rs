//! Why a batch was refused. Every variant carries what was found, so a broker can answer the
//! client precisely and an operator can find the byte.

use super::batch::Compression;

/// A batch that is not a valid Kafka RecordBatch v2, or that breaks a rule for its origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The buffer ends before the batch does.
    #[error("batch truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the batch needs (its header, or the whole batch once the length is known).
        needed: usize,
        /// Bytes the buffer holds from the batch's start.
        available: usize,
    },
    /// The batchLength field is too small for a v2 header.
    #[error("declared batchLength {batch_length} is below the 49 bytes of a v2 header")]
    SizeTooSmall {
        /// The declared batchLength.
        batch_length: i32,
    },
    /// The batch is larger than the limit it was checked against (`max_message_bytes`).
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The batch's size in bytes, log overhead included.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Not a RecordBatch v2: older message formats are not stored.
    #[error("magic {magic} is not supported: only RecordBatch v2 (magic 2) is stored")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// The CRC-32C over the batch from its attributes on does not match the stored one.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// More bytes follow the batch where exactly one batch was expected.
    #[error("{extra} bytes follow the {batch_size}-byte batch: one batch per append")]
    TrailingBytes {
        /// The size of the batch.
        batch_size: usize,
        /// The bytes after it.
        extra: usize,
    },
    /// The attributes name a codec Kafka does not define.
    #[error("unknown compression codec {codec}")]
    UnknownCompression {
        /// The codec id of the attributes (their low three bits).
        codec: u8,
    },
    /// The batch is compressed with a codec Kafka defines but this build of oncelog does not
    /// have (its cargo feature is off): its records cannot be checked or read.
    #[error("compression codec {codec:?} is not compiled into this build (cargo feature)")]
    UnsupportedCompression {
        /// The codec of the batch.
        codec: Compression,
    },
    /// A client batch must leave its offsets to the log.
    #[error("a client batch must have baseOffset 0, got {base_offset}")]
    NonZeroBaseOffset {
        /// The baseOffset found.
        base_offset: i64,
    },
    /// A client batch with no records.
    #[error("a client batch must hold at least one record")]
    EmptyBatch,
    /// The header's offset span and its record count disagree.
    #[error("lastOffsetDelta {last_offset_delta} + 1 != recordsCount {records_count}")]
    CountMismatch {
        /// The header's lastOffsetDelta.
        last_offset_delta: i32,
        /// The header's recordsCount.
        records_count: i32,
    },
    /// The header's lastOffsetDelta is negative.
    #[error("negative lastOffsetDelta {last_offset_delta}")]
    NegativeLastOffsetDelta {
        /// The header's lastOffsetDelta.
        last_offset_delta: i32,
    },
    /// Control batches (transaction markers) are written by the broker, never by a client.
    #[error("clients may not produce control batches")]
    ControlBatchFromClient,
    /// An idempotent producer's batch without a sequence.
    #[error("producer id {producer_id} requires a base sequence >= 0, got {base_sequence}")]
    MissingSequence {
        /// The batch's producer id.
        producer_id: i64,
        /// The batch's baseSequence.
        base_sequence: i32,
    },
    /// A record inside the batch is malformed.
    #[error("record {index} at batch byte {position}: {reason}")]
    InvalidRecord {
        /// The record's index in the batch, from 0.
        index: i32,
        /// Where the record starts, in bytes from the start of the batch (for a compressed
        /// batch, counted as if its records were stored uncompressed).
        position: usize,
        /// What is wrong with it.
        reason: RecordError,
    },
    /// Bytes are left after the records the header declares.
    #[error("{extra} bytes left after the {records_count} declared records")]
    RecordsTrailing {
        /// The header's recordsCount.
        records_count: i32,
        /// The bytes left over.
        extra: usize,
    },
    /// The records of a compressed batch do not decompress.
    #[error("cannot decompress {codec:?} records: {message}")]
    Decompression {
        /// The batch's codec.
        codec: Compression,
        /// The codec's complaint.
        message: String,
    },
    /// The header's recordsCount is negative.
    #[error("negative recordsCount {records_count}")]
    NegativeRecordsCount {
        /// The header's recordsCount.
        records_count: i32,
    },
    /// The records of a compressed batch decompress to more than the limit
    /// (`max_decompressed_bytes`).
    #[error("{codec:?} records decompress to more than the limit of {limit} bytes")]
    DecompressedTooLarge {
        /// The batch's codec.
        codec: Compression,
        /// The limit in bytes.
        limit: usize,
    },
    /// A control batch of a producer (producer id ≥ 0) whose first record is not a valid
    /// COMMIT or ABORT marker: Kafka reads every such batch as the end of a transaction.
    #[error("control batch of producer {producer_id}: {reason}")]
    InvalidMarker {
        /// The batch's producer id.
        producer_id: i64,
        /// What is wrong with its control record.
        reason: ControlRecordError,
    },
    /// The builder could not compress the records.
    #[error("cannot compress records with {codec:?}: {message}")]
    CompressionFailed {
        /// The codec asked for.
        codec: Compression,
        /// The codec's complaint.
        message: String,
    },
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
            | BatchError::UnknownCompression { .. }
            // Kafka's EndTransactionMarker refuses such a record (InvalidRecordException).
            | BatchError::InvalidMarker { .. } => "invalid_record",
            // A limit, not damage: the same records split into smaller batches would be accepted.
            // Kafka answers MESSAGE_TOO_LARGE, on which its producer splits the batch and
            // retries; a decompression bomb of one record cannot be split, and fails on the
            // client.
            BatchError::TooLarge { .. } | BatchError::DecompressedTooLarge { .. } => {
                "batch_too_large"
            }
            // Kafka's UNSUPPORTED_COMPRESSION_TYPE: not damage, and not the client's fault.
            BatchError::UnsupportedCompression { .. } => "unsupported_compression",
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
#[non_exhaustive]
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
#[non_exhaustive]
pub enum RecordError {
    /// The record runs past the end of the batch's records.
    #[error("the record runs past the end of the batch")]
    Truncated,
    /// A varint field has more bytes than its type allows.
    #[error("{field} varint is longer than {max_bytes} bytes")]
    VarintTooLong {
        /// The field's name.
        field: &'static str,
        /// The most bytes its type allows.
        max_bytes: usize,
    },
    /// A length or count is negative where only -1 (null) or more is allowed.
    #[error("{field} is negative ({value})")]
    NegativeLength {
        /// The field's name.
        field: &'static str,
        /// The value found.
        value: i64,
    },
    /// The record's offsetDelta is not its index: offsets within a batch must be dense.
    #[error("offsetDelta {got}, expected {expected}: offsets must be dense")]
    OffsetDelta {
        /// The record's index, the only valid offsetDelta.
        expected: i32,
        /// The offsetDelta found.
        got: i32,
    },
    /// The record's declared length and the bytes its fields take disagree.
    #[error("record body declared {declared} bytes but its fields use {consumed}")]
    LengthMismatch {
        /// The record's length field.
        declared: usize,
        /// The bytes its fields take.
        consumed: usize,
    },
    /// A header with a null key.
    #[error("header key must not be null")]
    NullHeaderKey,
    /// More headers declared than the record's remaining bytes could hold.
    #[error("headerCount {count} is larger than the {remaining} bytes left in the record")]
    HeaderCountTooLarge {
        /// The declared headerCount.
        count: i32,
        /// The bytes left in the record.
        remaining: usize,
    },
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
#[non_exhaustive]
pub enum ControlRecordError {
    /// The key is shorter than its version and type.
    #[error("control record key is {len} bytes, at least 4 needed")]
    KeyTooShort {
        /// The key's length.
        len: usize,
    },
    /// The key's version is negative.
    #[error("control record key has negative version {version}")]
    NegativeKeyVersion {
        /// The version found.
        version: i16,
    },
    /// The end-transaction marker's value is shorter than its version and coordinator epoch.
    #[error("end-txn marker value is {len} bytes, at least 6 needed")]
    ValueTooShort {
        /// The value's length.
        len: usize,
    },
    /// The end-transaction marker's version is negative.
    #[error("end-txn marker value has negative version {version}")]
    NegativeValueVersion {
        /// The version found.
        version: i16,
    },
    /// The key or the value is null.
    #[error("control record has a null {field}")]
    Null {
        /// `"key"` or `"value"`.
        field: &'static str,
    },
    /// A producer's control record whose type is neither ABORT (0) nor COMMIT (1).
    #[error("control record type {control_type} is not a transaction marker (0 ABORT, 1 COMMIT)")]
    NotEndTxnMarker {
        /// The type id in the key.
        control_type: i16,
    },
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
            ControlRecordError::NotEndTxnMarker { .. } => "not_end_txn_marker",
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
            ControlRecordError::NotEndTxnMarker { control_type: 2 },
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
