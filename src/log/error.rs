//! One error type per operation, plus an umbrella [`Error`] (as redb does). Each says what was
//! wrong and where.

use std::path::PathBuf;
use std::sync::Arc;

use super::config::{ConfigError, RecoveryMode};
use crate::format::BatchError;
use crate::io::IoError;
use crate::log::metadata_file::BadMetadataFile;
use crate::producer::ProducerError;
use crate::segment::{BatchProblem, CorruptSegment, SegmentReadError};

/// What is wrong with the files of a log: damaged bytes, or files that disagree with what the
/// checkpoint vouches for. Recovery judges each by where it is (docs/design.md "Recovery on
/// open"): it is cut, or the open is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// The file ends inside a batch: the tail a crash during a write leaves.
    #[error("torn batch: {needed} bytes declared, {available} present")]
    Torn {
        /// Bytes the batch declares (or the header bytes needed to read its size).
        needed: usize,
        /// Bytes the file holds from the batch's start.
        available: usize,
    },
    /// Bytes that are not a valid batch, or a batch whose offsets do not fit the segment.
    #[error("{0}")]
    Invalid(BatchProblem),
    /// The segment's batches end at `next_offset`, but the next segment starts later.
    #[error(
        "batches end at offset {next_offset}, but the next segment starts at {next_segment_base}"
    )]
    MissingOffsets {
        /// The last offset + 1 of the segment's batches.
        next_offset: i64,
        /// The base offset of the segment after it.
        next_segment_base: i64,
    },
    /// A segment the checkpoint vouches for has no `.log` file.
    #[error("segment missing: the checkpoint vouches for offsets {base_offset}..{next_offset} in {size} bytes")]
    SegmentMissing {
        /// The missing segment's base offset.
        base_offset: i64,
        /// The last offset + 1 it held, by the checkpoint.
        next_offset: i64,
        /// Its size in bytes, by the checkpoint.
        size: u64,
    },
    /// A segment's `.log` is not the size the checkpoint vouches for.
    #[error("{found} bytes, but the checkpoint vouches for {expected}")]
    SizeMismatch {
        /// The size in the checkpoint.
        expected: u64,
        /// The file's size.
        found: u64,
    },
    /// A segment file where the checkpoint says there is none.
    #[error("segment not in the checkpoint's record of the log (offsets up to {record_end})")]
    UnrecordedSegment {
        /// Where the checkpoint's record of the segments ends (last offset + 1).
        record_end: i64,
    },
    /// The batches of a vouched-for segment do not end where the checkpoint says.
    #[error("batches end at offset {found_next}, but the checkpoint vouches for {expected_next}")]
    EndDisagrees {
        /// The last offset + 1 in the checkpoint.
        expected_next: i64,
        /// The last offset + 1 of the batches found.
        found_next: i64,
    },
    /// After recovery the log would end below the offsets the checkpoint says were durable.
    #[error("the log ends at offset {log_end}, but the checkpoint says offsets up to {recovery_point} were durable")]
    DurableEndMissing {
        /// Where the log would end.
        log_end: i64,
        /// The checkpoint's recovery point: every offset below it was durable.
        recovery_point: i64,
    },
    /// A file named like a segment that is not a regular file (never opened: a FIFO would block).
    #[error("a {kind}, not a regular file")]
    NotAFile {
        /// What it is: `"directory"`, `"FIFO"`, ...
        kind: &'static str,
    },
    /// A `.log` larger than any segment can be (positions are int32).
    #[error("{len} bytes, larger than any segment ({max})")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The largest a segment can be.
        max: u64,
    },
    /// The segment's batch headers (the bytes no batch CRC covers: base offset, length, leader
    /// epoch, magic, CRC) are not those the checkpoint recorded when it was sealed; which batch
    /// changed cannot be told, so none of the segment is believed.
    #[error("batch headers do not match the digest recorded when the segment was sealed (recorded {expected:08x}, found {found:08x})")]
    DigestMismatch {
        /// The header digest in the checkpoint.
        expected: u32,
        /// The header digest of the batches found.
        found: u32,
    },
}

impl Damage {
    /// A stable snake_case name for the kind of damage (the CLI's JSON `damage_kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Damage::Torn { .. } => "torn_batch",
            Damage::Invalid(p) => p.kind(),
            Damage::MissingOffsets { .. } => "missing_offsets",
            Damage::SegmentMissing { .. } => "segment_missing",
            Damage::SizeMismatch { .. } => "size_mismatch",
            Damage::UnrecordedSegment { .. } => "unrecorded_segment",
            Damage::EndDisagrees { .. } => "end_disagrees",
            Damage::DurableEndMissing { .. } => "durable_end_missing",
            Damage::NotAFile { .. } => "not_a_file",
            Damage::TooLarge { .. } => "too_large",
            Damage::DigestMismatch { .. } => "digest_mismatch",
        }
    }
}

/// Why a log could not be opened. A refused open changes nothing on disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The configuration breaks a rule ([`crate::LogConfig::validate`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Another `Log` has the directory open, in this process or another.
    #[error("{} is in use by another log ({holder})", dir.display())]
    Locked {
        /// The partition directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says (`process <pid>`).
        holder: String,
    },
    /// The directory lies in a log dir that a [`crate::LogManager`] holds (its `.lock`), in
    /// this process or another: only the manager may open its partitions.
    #[error("{} is a partition of log dir {}, which a log manager holds ({holder})", dir.display(), log_dir.display())]
    LogDirLocked {
        /// The partition directory.
        dir: PathBuf,
        /// The log dir it lies in.
        log_dir: PathBuf,
        /// Who holds the log dir, as its `.lock` says (`process <pid>`).
        holder: String,
    },
    /// The `oncelog.checkpoint` is unreadable or contradicts itself (kind `bad_checkpoint`, or
    /// `damaged_checkpoint` when its bytes were damaged), or the `leader-epoch-checkpoint` is
    /// unreadable or holds what no epoch cache can (`bad_epoch_checkpoint`): the error's
    /// `file` says which.
    #[error(transparent)]
    BadMetadataFile(#[from] BadMetadataFile),
    /// [`crate::Log::open_existing`] (or a recovery preview) was given a directory that holds
    /// no partition: nothing was created in it.
    #[error("not a partition directory: {}: {reason}", dir.display())]
    NotAPartition {
        /// The directory given.
        dir: PathBuf,
        /// Why it is not one.
        reason: super::NotAPartitionReason,
    },
    /// The recovery mode does not allow what recovery would have to cut.
    #[error("{}{}: {damage} (refused by recovery mode {})", path.display(), position.map(|p| format!(": byte {p}")).unwrap_or_default(), mode.name())]
    Refused {
        /// The file where the damage is.
        path: PathBuf,
        /// Byte position in the file, where the damage has one.
        position: Option<usize>,
        /// What is wrong.
        damage: Damage,
        /// The mode that refused it.
        mode: RecoveryMode,
    },
}

impl OpenError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            OpenError::Config(_) => "config",
            OpenError::Io(_) => "io",
            OpenError::Locked { .. } => "locked",
            OpenError::LogDirLocked { .. } => "log_dir_locked",
            OpenError::BadMetadataFile(b) => b.kind(),
            OpenError::Refused { .. } => "refused",
            OpenError::NotAPartition { .. } => "not_a_partition",
        }
    }
}

/// Why a batch was not appended. Nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The batch is malformed or breaks a client rule (CORRUPT_MESSAGE / INVALID_RECORD).
    #[error("invalid batch: {0}")]
    Batch(#[from] BatchError),
    /// The batch breaks its producer's rules: stale epoch, out-of-order sequence, too many
    /// producers, ... (docs/design.md, "Producer state").
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// The batch cannot fit in any segment (RECORD_LIST_TOO_LARGE).
    #[error("batch of {size} bytes is larger than segment_bytes {segment_bytes}")]
    RecordListTooLarge {
        /// The batch's size in bytes.
        size: usize,
        /// The configured `segment_bytes`.
        segment_bytes: usize,
    },
    /// A transaction marker that names no producer (a negative producer id or epoch) or no
    /// transaction version (a negative one): nothing was written.
    #[error("invalid transaction marker: {field} is {value}")]
    InvalidMarker {
        /// `"producer_id"`, `"producer_epoch"` or `"transaction_version"`.
        field: &'static str,
        /// The value given.
        value: i64,
    },
    /// A replicated batch does not start at or after the log end (Kafka's UnexpectedAppendOffset).
    #[error("replicated batch starts at offset {got}, but the log ends at {log_end_offset}")]
    UnexpectedAppendOffset {
        /// The log end offset.
        log_end_offset: i64,
        /// The batch's base offset.
        got: i64,
    },
    /// A record without a key, appended to a log whose cleanup policy compacts (Kafka's
    /// INVALID_RECORD, "Compacted topic cannot accept message without key"): nothing was written.
    #[error("record {index} has no key, and the log is compacted")]
    KeylessRecord {
        /// The record's index in the batch.
        index: i32,
    },
    /// A file operation failed; the log is unchanged and appends may be retried.
    #[error(transparent)]
    Io(#[from] IoError),
    /// An earlier failure (a failed fsync) left the log read-only until it is reopened: after a
    /// failed fsync the kernel may have dropped the dirty pages, so writing on could lose
    /// acknowledged data silently.
    #[error("log is read-only after an earlier failure: {cause}")]
    ReadOnly {
        /// The failure that made it so.
        cause: Arc<IoError>,
    },
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    /// A replicated append wrote its first batches and then failed: the log holds them (up to
    /// `written.last_offset`), and none of the rest.
    #[error("replicated append stopped after offset {}: {cause}", written.last_offset)]
    PartiallyWritten {
        /// The batches written, from the first one's first offset to the last one's last.
        written: super::AppendInfo,
        /// Why the next batch was not.
        cause: Box<AppendError>,
    },
}

impl AppendError {
    /// A stable snake_case name for the kind of error (the CLI's JSON `error` field): the
    /// batch's or the producer rule's own kind where there is one.
    pub fn kind(&self) -> &'static str {
        match self {
            AppendError::Batch(e) => e.kind(),
            AppendError::Producer(e) => e.kind(),
            AppendError::RecordListTooLarge { .. } => "record_list_too_large",
            AppendError::InvalidMarker { .. } => "invalid_marker",
            AppendError::KeylessRecord { .. } => "keyless_record",
            AppendError::UnexpectedAppendOffset { .. } => "unexpected_append_offset",
            AppendError::Io(_) => "io",
            AppendError::ReadOnly { .. } => "read_only",
            AppendError::Closed => "closed",
            AppendError::PartiallyWritten { .. } => "partially_written",
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The offset is below the log start or above the log end (Kafka's OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: i64,
        /// The first offset that can be read.
        log_start_offset: i64,
        /// The next offset to be assigned.
        log_end_offset: i64,
    },
    /// The segment holds bytes that are not a batch where one should be.
    #[error(transparent)]
    Corrupt(#[from] CorruptSegment),
    /// A sealed segment could not be mapped to be read (its files are opened only then).
    #[error(transparent)]
    Io(IoError),
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    /// Batches read for a [`LogReader`](super::LogReader) did not decode into records (a CRC,
    /// a record or a codec failed).
    #[error("the batches read at offset {offset} do not decode: {source}")]
    BadRecords {
        /// The reader's position when they were read.
        offset: i64,
        /// What failed, and at which byte of the fetched batches.
        source: crate::format::BatchErrorAt,
    },
}

impl ReadError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            ReadError::OffsetOutOfRange { .. } => "offset_out_of_range",
            ReadError::Corrupt(_) => "corrupt_segment",
            ReadError::Io(_) => "io",
            ReadError::Closed => "closed",
            ReadError::BadRecords { .. } => "bad_records",
        }
    }
}

impl From<SegmentReadError> for ReadError {
    fn from(e: SegmentReadError) -> Self {
        match e {
            SegmentReadError::Io(e) => ReadError::Io(e),
            SegmentReadError::Corrupt(c) => ReadError::Corrupt(c),
        }
    }
}

/// Why a flush (or close) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// A file operation failed around the sync (at close: sealing the active segment, writing
    /// the producer snapshot or the checkpoint).
    #[error(transparent)]
    Io(#[from] IoError),
    /// A sync failed, in this flush or an earlier one: the log is read-only until it is
    /// reopened (see [`AppendError::ReadOnly`]).
    #[error("log is read-only after an earlier failure: {cause}")]
    ReadOnly {
        /// The failure that made it so.
        cause: Arc<IoError>,
    },
    /// The log was closed.
    #[error("log is closed")]
    Closed,
}

impl FlushError {
    /// A stable snake_case name for the kind of error (the same names as [`AppendError::kind`]).
    pub fn kind(&self) -> &'static str {
        match self {
            FlushError::Io(_) => "io",
            FlushError::ReadOnly { .. } => "read_only",
            FlushError::Closed => "closed",
        }
    }
}

/// Why a rewrite of the log (truncation, retention, DeleteRecords, a leader-epoch or
/// high-watermark change) was refused or failed. A refusal changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// An offset below the first offset of the log (to start over there, use
    /// [`super::ReplicaLog::truncate_fully_and_start_at`]).
    #[error("offset {offset} is below the log start offset {log_start_offset}")]
    BelowLogStart {
        /// The offset asked for.
        offset: i64,
        /// The log's first offset.
        log_start_offset: i64,
    },
    /// An offset past the end of the log.
    #[error("offset {offset} is above the log end offset {log_end_offset}")]
    AboveLogEnd {
        /// The offset asked for.
        offset: i64,
        /// The offset the next append gets.
        log_end_offset: i64,
    },
    /// DeleteRecords may not remove records above the high watermark (Kafka's
    /// OFFSET_OUT_OF_RANGE): they are not committed yet.
    #[error("offset {offset} is above the high watermark {high_watermark}")]
    AboveHighWatermark {
        /// The offset asked for.
        offset: i64,
        /// The log's high watermark.
        high_watermark: i64,
    },
    /// A leader epoch older than the one the log already has.
    #[error("leader epoch {got} is older than the current {current}")]
    StaleLeaderEpoch {
        /// The log's leader epoch.
        current: i32,
        /// The epoch asked for.
        got: i32,
    },
    /// The high watermark follows the durable end under this log's policy.
    #[error("the high watermark is set by the caller only under HighWatermarkPolicy::SetByCaller")]
    HighWatermarkNotSettable,
    /// Producer state could not be rebuilt: a batch the log trusted is damaged.
    #[error(transparent)]
    Corrupt(#[from] CorruptSegment),
    /// A file operation failed. What was already made durable stays; the log is read-only if
    /// it could be left inconsistent.
    #[error(transparent)]
    Io(#[from] IoError),
    /// An earlier write failed and left the log read-only.
    #[error("log is read-only after an earlier failure: {cause}")]
    ReadOnly {
        /// The failure that made it read-only.
        cause: Arc<IoError>,
    },
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    /// [`super::Maintenance::compact`] on a log whose `cleanup_policy` does not contain `compact`.
    #[error("cleanup_policy is {policy}: the log is not compacted")]
    NotCompacted {
        /// The log's policy.
        policy: &'static str,
    },
    /// The cleaner met a batch it cannot read (a payload that does not decompress, a record
    /// that does not decode, a CRC that does not match): the round stopped and changed
    /// nothing.
    #[error("{} at byte {position}: compaction stopped: {error}", path.display())]
    CompactionCorrupt {
        /// The segment's `.log`.
        path: std::path::PathBuf,
        /// The batch's byte position in it.
        position: usize,
        /// What is wrong with it.
        error: crate::format::BatchError,
    },
    /// [`super::ReplicaLog::producer_snapshot_at`] of an offset inside a batch: the state is only
    /// defined between batches.
    #[error("offset {offset} is inside the batch that starts at {batch_start}")]
    NotABatchBoundary {
        /// The offset asked for.
        offset: i64,
        /// The first offset of the batch holding it (or the next batch's, in a gap).
        batch_start: i64,
    },
    /// The producer snapshot handed to [`super::ReplicaLog::truncate_fully_and_start_with`] does not
    /// decode, or is of another offset.
    #[error("producer snapshot refused: {0}")]
    BadProducerSnapshot(String),
    /// Not even the keys of the first dirty batch fit the configured key map.
    #[error("the keys of the batch at offset {offset} do not fit key_map_bytes = {key_map_bytes}")]
    KeyMapTooSmall {
        /// The configured bound.
        key_map_bytes: usize,
        /// The first dirty offset.
        offset: i64,
    },
}

impl RewriteError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            RewriteError::BelowLogStart { .. } => "below_log_start",
            RewriteError::AboveLogEnd { .. } => "above_log_end",
            RewriteError::AboveHighWatermark { .. } => "above_high_watermark",
            RewriteError::StaleLeaderEpoch { .. } => "stale_leader_epoch",
            RewriteError::HighWatermarkNotSettable => "high_watermark_not_settable",
            RewriteError::NotABatchBoundary { .. } => "not_a_batch_boundary",
            RewriteError::BadProducerSnapshot(_) => "bad_producer_snapshot",
            RewriteError::Corrupt(_) => "corrupt_segment",
            RewriteError::Io(_) => "io",
            RewriteError::ReadOnly { .. } => "read_only",
            RewriteError::Closed => "closed",
            RewriteError::NotCompacted { .. } => "not_compacted",
            RewriteError::CompactionCorrupt { .. } => "compaction_corrupt",
            RewriteError::KeyMapTooSmall { .. } => "key_map_too_small",
        }
    }
}

impl From<FlushError> for RewriteError {
    fn from(e: FlushError) -> Self {
        match e {
            FlushError::Io(e) => RewriteError::Io(e),
            FlushError::ReadOnly { cause } => RewriteError::ReadOnly { cause },
            FlushError::Closed => RewriteError::Closed,
        }
    }
}

/// Any oncelog error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From [`crate::Log::open`].
    #[error(transparent)]
    Open(#[from] OpenError),
    /// From an append.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// From a read or fetch.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// From a flush or close.
    #[error(transparent)]
    Flush(#[from] FlushError),
    /// From a truncation, a retention pass, or a leader-epoch or high-watermark change.
    #[error(transparent)]
    Rewrite(#[from] RewriteError),
}

impl Error {
    /// The `kind()` of the error inside: one name per failure, whichever operation met it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Open(e) => e.kind(),
            Error::Append(e) => e.kind(),
            Error::Read(e) => e.kind(),
            Error::Flush(e) => e.kind(),
            Error::Rewrite(e) => e.kind(),
        }
    }
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
    fn read_and_flush_kinds_are_stable_names() {
        let out_of_range = ReadError::OffsetOutOfRange {
            offset: 9,
            log_start_offset: 0,
            log_end_offset: 3,
        };
        assert_eq!(out_of_range.kind(), "offset_out_of_range");
        assert_eq!(ReadError::Closed.kind(), "closed");
        let io = || {
            IoError::new(
                "fdatasync",
                "/x",
                std::io::Error::from_raw_os_error(libc::EIO),
            )
        };
        assert_eq!(FlushError::Io(io()).kind(), "io");
        let read_only = FlushError::ReadOnly {
            cause: Arc::new(io()),
        };
        assert_eq!(read_only.kind(), "read_only");
        assert_eq!(FlushError::Closed.kind(), AppendError::Closed.kind());
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
    fn the_umbrella_error_and_a_bad_checkpoint_keep_their_kind() {
        let bad = BadMetadataFile::new(
            crate::log::MetadataFile::Checkpoint,
            PathBuf::from("/x/oncelog.checkpoint"),
            Some(2),
            "not a number",
        );
        assert_eq!(bad.kind(), "bad_checkpoint");
        assert_eq!(Error::from(OpenError::from(bad)).kind(), "bad_checkpoint");
        assert_eq!(Error::from(AppendError::Closed).kind(), "closed");
        let out_of_range = ReadError::OffsetOutOfRange {
            offset: 9,
            log_start_offset: 0,
            log_end_offset: 3,
        };
        assert_eq!(Error::from(out_of_range).kind(), "offset_out_of_range");
        assert_eq!(
            Error::from(AppendError::Batch(BatchError::EmptyBatch)).kind(),
            "invalid_record"
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
