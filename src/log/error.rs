//! One error type per operation, plus an umbrella [`Error`] (as redb does). Each says what was
//! wrong and where.

use std::path::PathBuf;
use std::sync::Arc;

use super::config::{ConfigError, RecoveryMode};
use crate::format::BatchError;
use crate::io::IoError;
use crate::producer::ProducerError;
use crate::segment::{BatchProblem, CorruptSegment, OpenSegmentError};

/// Bytes in a segment that are not whole, valid batches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("torn batch: {needed} bytes declared, {available} present")]
    Torn { needed: usize, available: usize },
    #[error("{0}")]
    Invalid(BatchProblem),
    /// The segment's batches end at `next_offset`, but the next segment starts later.
    #[error(
        "batches end at offset {next_offset}, but the next segment starts at {next_segment_base}"
    )]
    MissingOffsets {
        next_offset: i64,
        next_segment_base: i64,
    },
}

/// Why a log could not be opened. A refused open changes nothing on disk.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("{}: byte {position}: {damage} (refused by recovery mode {})", path.display(), mode.name())]
    Corrupt {
        path: PathBuf,
        position: usize,
        damage: Damage,
        mode: RecoveryMode,
    },
    #[error(transparent)]
    Segment(#[from] OpenSegmentError),
    #[error(transparent)]
    CorruptSegment(#[from] CorruptSegment),
    #[error("segment {}: {reason}", path.display())]
    Layout { path: PathBuf, reason: String },
}

/// Why a batch was not appended. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The batch is malformed or breaks a client rule (CORRUPT_MESSAGE / INVALID_RECORD).
    #[error("invalid batch: {0}")]
    Batch(#[from] BatchError),
    /// The batch breaks its producer's rules: stale epoch, out-of-order sequence, too many
    /// producers, ... (kafka-format.md §5.2).
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// The batch cannot fit in any segment (RECORD_LIST_TOO_LARGE).
    #[error("batch of {size} bytes is larger than segment_bytes {segment_bytes}")]
    RecordListTooLarge { size: usize, segment_bytes: usize },
    /// A replicated batch does not start at or after the log end (Kafka's UnexpectedAppendOffset).
    #[error("replicated batch starts at offset {got}, but the log ends at {log_end_offset}")]
    UnexpectedAppendOffset { log_end_offset: i64, got: i64 },
    /// A file operation failed; the log is unchanged and appends may be retried.
    #[error(transparent)]
    Io(#[from] IoError),
    /// An earlier failure (a failed fsync) left the log read-only until it is reopened: after a
    /// failed fsync the kernel may have dropped the dirty pages, so writing on could lose
    /// acknowledged data silently.
    #[error("log is read-only after an earlier failure: {cause}")]
    ReadOnly { cause: Arc<IoError> },
    #[error("log is closed")]
    Closed,
}

impl AppendError {
    /// A stable snake_case name for the kind of error (the CLI's JSON `error` field).
    pub fn kind(&self) -> &'static str {
        match self {
            AppendError::Batch(e) => batch_error_kind(e),
            AppendError::Producer(ProducerError::InvalidProducerEpoch { .. }) => {
                "invalid_producer_epoch"
            }
            AppendError::Producer(ProducerError::OutOfOrderSequence { .. }) => {
                "out_of_order_sequence"
            }
            AppendError::Producer(ProducerError::InvalidTxnState { .. }) => "invalid_txn_state",
            AppendError::Producer(ProducerError::CoordinatorFenced { .. }) => "coordinator_fenced",
            AppendError::Producer(ProducerError::TooManyProducers { .. }) => "too_many_producers",
            AppendError::RecordListTooLarge { .. } => "record_list_too_large",
            AppendError::UnexpectedAppendOffset { .. } => "unexpected_append_offset",
            AppendError::Io(_) => "io",
            AppendError::ReadOnly { .. } => "read_only",
            AppendError::Closed => "closed",
        }
    }
}

/// Kafka's split between CORRUPT_MESSAGE (the bytes are damaged: the frame, the CRC, or the
/// records inside cannot be what any encoder wrote) and INVALID_RECORD (a well-formed batch that
/// breaks a rule for what a client may send). A broker answers a retriable error for the first
/// (the bytes may have been damaged in transit) and a fatal one for the second (resending the
/// same batch cannot help). Every variant is listed so a new one must be classified here.
fn batch_error_kind(e: &BatchError) -> &'static str {
    match e {
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
        // Kafka answers MESSAGE_TOO_LARGE, on which its producer splits the batch and retries;
        // a decompression bomb of one record cannot be split, and fails on the client.
        BatchError::TooLarge { .. } | BatchError::DecompressedTooLarge { .. } => {
            "batch_too_large"
        }
        // Raised only when oncelog itself compresses (the builder), never by a batch's bytes.
        BatchError::CompressionFailed { .. } => "compression_failed",
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error(transparent)]
    Corrupt(#[from] CorruptSegment),
    #[error("log is closed")]
    Closed,
}

/// Why a flush (or close) failed.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("log is read-only after an earlier failure: {cause}")]
    ReadOnly { cause: Arc<IoError> },
    #[error("log is closed")]
    Closed,
}

/// Any oncelog error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Flush(#[from] FlushError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::RecordError;

    fn kind(e: BatchError) -> &'static str {
        AppendError::Batch(e).kind()
    }

    #[test]
    fn damaged_bytes_are_corrupt_batch() {
        assert_eq!(
            kind(BatchError::CrcMismatch {
                stored: 1,
                computed: 2
            }),
            "corrupt_batch"
        );
        assert_eq!(
            kind(BatchError::Truncated {
                needed: 70,
                available: 61
            }),
            "corrupt_batch"
        );
        assert_eq!(
            kind(BatchError::InvalidRecord {
                index: 0,
                position: 61,
                reason: RecordError::Truncated
            }),
            "corrupt_batch"
        );
    }

    #[test]
    fn client_rule_violations_are_invalid_record() {
        assert_eq!(
            kind(BatchError::NonZeroBaseOffset { base_offset: 5 }),
            "invalid_record"
        );
        assert_eq!(kind(BatchError::EmptyBatch), "invalid_record");
        assert_eq!(kind(BatchError::ControlBatchFromClient), "invalid_record");
        assert_eq!(
            kind(BatchError::MissingSequence {
                producer_id: 1,
                base_sequence: -1
            }),
            "invalid_record"
        );
        assert_eq!(
            kind(BatchError::TrailingBytes {
                batch_size: 70,
                extra: 1
            }),
            "invalid_record"
        );
        assert_eq!(
            kind(BatchError::UnknownCompression { codec: 7 }),
            "invalid_record"
        );
    }

    #[test]
    fn limits_are_batch_too_large() {
        assert_eq!(
            kind(BatchError::TooLarge { size: 2, max: 1 }),
            "batch_too_large"
        );
        assert_eq!(
            kind(BatchError::DecompressedTooLarge {
                codec: crate::format::Compression::Gzip,
                limit: 1 << 20
            }),
            "batch_too_large"
        );
    }

    #[test]
    fn undecodable_compressed_records_are_corrupt_batch() {
        assert_eq!(
            kind(BatchError::Decompression {
                codec: crate::format::Compression::Lz4,
                message: "bad block".into()
            }),
            "corrupt_batch"
        );
    }
}
