//! oncelog: an embeddable Kafka-format partition log with exactly-once idempotent appends.

// The public API is what this file lists (the README's "Public API" says what each part is
// for). Everything else is the engine's inside: crate-private, or public under the `internals`
// feature for this crate's own tests, benches and fuzz targets, and for nothing else.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

/// Declares a module of the engine's inside: `pub(crate)`, or public under the `internals`
/// feature, hidden from the docs, exempt from `missing_docs`, with no stability promise. With
/// it the crate's module tree is public as it is in the source, so a test names an internal
/// item by the path the engine itself uses.
///
/// Without it, the module's `pub` items that only tests use would read as dead code; the
/// internals build, which every test, bench and `cargo clippy --all-targets` uses, lints them
/// as it always did.
macro_rules! internal_mod {
    ($(#[$attr:meta])* $name:ident) => {
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        #[allow(missing_docs)]
        $(#[$attr])*
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        $(#[$attr])*
        pub(crate) mod $name;
    };
}

pub mod format;
pub mod io;
pub mod processed;
pub mod producer;
pub mod verify;

internal_mod!(log);
internal_mod!(manager);
internal_mod!(segment);

pub use log::{
    AppendError, AppendInfo, AppendOutcome, AppendWrites, BadCheckpoint, BadEpochCheckpoint,
    Cleanable, CleanupPolicy, Clock, CompactionConfig, CompactionReport, ConfigError, Damage,
    DeletedSegment, DuplicateInfo, Environment, EpochEndOffset, EpochEntry, Error, FetchResult,
    FlushError, FlushPolicy, HighWatermarkPolicy, IsolationLevel, LatencyHistogram, Log, LogConfig,
    LogMetrics, OpenError, Preallocation, ProducerLoadReport, ReadError, RecoveryMetrics,
    RecoveryMode, RecoveryReport, Refusals, RetentionReason, RetentionReport, RewriteError,
    SystemClock, TruncateReport, Truncation, TxnMarker, TxnResult, WaitFor, WaitOutcome,
    CLEANER_OFFSET_FILE,
};
pub use manager::{
    BadMetaProperties, BadOffsetCheckpoint, BadPartitionConfig, CleanRequest, Cleaned, Cleaner,
    Compactor, DirCheckpoints, DirEntry, FoundDir, Job, JobIntervals, JobReport, JobStats,
    LogDirContents, LogDirReport, LogManager, ManagerConfig, ManagerError, MetaProperties,
    OpenReport, PartitionConfig, PartitionFailure, PartitionInfo, PartitionOpened, PartitionReport,
    ResolvedConfig, Throttle, TopicError, TopicPartition,
};
pub use segment::{BatchProblem, CorruptSegment};

/// The files of a Kafka log dir, for tools that read one without opening a [`LogManager`], as
/// `oncelog dump`, `verify` and `recover` of a whole log dir do: the names of partition
/// directories (Kafka's topic rules), the offset checkpoint files and `meta.properties`
/// (byte layouts in docs/format.md). [`LogDirContents::read`] reads them all.
pub mod log_dir {
    pub use crate::manager::log_dir::{CLEAN_SHUTDOWN_FILE, LOCK_FILE};
    pub use crate::manager::meta::{
        decode as decode_meta_properties, FILE_NAME as META_PROPERTIES,
    };
    pub use crate::manager::offsets::{
        decode as decode_offset_checkpoint, CLEANER_OFFSETS, HIGH_WATERMARKS, LOG_START_OFFSETS,
        RECOVERY_POINTS,
    };
    pub use crate::manager::topic::{
        collides, parse_dir_name, validate_topic, DELETE_SUFFIX, MAX_TOPIC_LENGTH,
    };
}

/// The files of a partition directory, for tools that read one without opening a [`Log`], as
/// `oncelog dump` does: file names, and the entries of `.index`, `.timeindex`, `.txnindex` and
/// `.snapshot` files (byte tables in docs/format.md). Reading `.log` files is
/// [`format::BatchIter`]'s job.
pub mod files {
    pub use crate::log::checkpoint::{
        decode as decode_checkpoint, Checkpoint, SegmentRecord, FILE_NAME as CHECKPOINT_FILE,
    };
    pub use crate::log::epochs::{
        decode_file as decode_leader_epochs, FILE_NAME as LEADER_EPOCH_CHECKPOINT,
    };
    pub use crate::producer::snapshot::{decode as decode_snapshot, Snapshot};
    pub use crate::segment::names::{
        file_name, parse as parse_file_name, ParsedName, INDEX_EXT, LOG_EXT, SNAPSHOT_EXT,
        TIME_INDEX_EXT, TXN_INDEX_EXT,
    };
    pub use crate::segment::offset_index::{
        decode as decode_offset_index, OffsetPosition, ENTRY_SIZE as OFFSET_INDEX_ENTRY_SIZE,
    };
    pub use crate::segment::time_index::{
        decode as decode_time_index, TimestampOffset, ENTRY_SIZE as TIME_INDEX_ENTRY_SIZE,
    };
    pub use crate::segment::txn_index::{
        decode as decode_txn_index, AbortedTxn, TxnIndexProblem, ENTRY_SIZE as TXN_INDEX_ENTRY_SIZE,
    };
}
