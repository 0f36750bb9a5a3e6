//! oncelog: the storage engine of one partition of a message broker, kept as Kafka keeps it,
//! with exactly-once idempotent appends that survive restarts and crashes.
//!
//! A [`Log`] is one partition directory: memory-mapped segment files of Kafka RecordBatch v2
//! batches with their sparse `.index`, `.timeindex` and `.txnindex` files, and a
//! producer-state table (producer id, epoch, the last batches' sequences) snapshotted beside
//! them. A broker or queue that links it in hands it the batches its clients produce and gets
//! back offsets, or, for a retry of one of a producer's recent batches, the original offsets
//! with nothing written, even when the acknowledgement was lost in a crash. Reads hand out
//! whole batches zero-copy. Truncation, retention and key compaction rewrite the log and keep
//! the dedup state right. A [`LogManager`] runs many partitions in Kafka log dirs.
//!
//! **It is not** a broker (the workspace's `oncelog-broker` is an example of one), a network
//! server, a client, a consensus engine (replication lives in the `oncelog-raft` crate), or an
//! async library: calls block, and [`Log::wait_for_async`] is the one future, for any runtime.
//! It runs on Linux only.
//!
//! ```
//! use oncelog::format::BatchBuilder;
//! use oncelog::{AppendOutcome, Log, LogConfig};
//!
//! let dir = tempfile::tempdir()?;
//! let log = Log::open(dir.path(), LogConfig::default())?;
//!
//! // Producer 42, epoch 0, sends its first batch (sequences 0 and 1)...
//! let mut builder = BatchBuilder::new().producer(42, 0, 0);
//! builder.append(1_700_000_000_000, Some(b"key"), Some(b"one"), &[]);
//! builder.append(1_700_000_000_001, Some(b"key"), Some(b"two"), &[]);
//! let batch = builder.build()?;
//! assert!(matches!(log.append(&batch)?, AppendOutcome::Appended(info) if info.last_offset == 1));
//!
//! // ...loses the acknowledgement and sends it again: nothing is written.
//! assert!(matches!(log.append(&batch)?, AppendOutcome::Duplicate(original) if original.first_offset == 0));
//!
//! log.flush()?;
//! let fetched = log.fetch(0, 1 << 20)?;
//! assert_eq!(fetched.records().count(), 2);
//! log.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Where to go next:
//! - [`Log`] and [`LogConfig`]: appends, fetches, flush policies, recovery modes, rewrites;
//!   every error has a stable `kind()`.
//! - [`format`](mod@format): RecordBatch v2 without I/O (build, validate, iterate records).
//! - [`LogManager`]: many partitions, Kafka's checkpoint files, background jobs.
//! - [`processed`]: the consumer side of exactly-once, a store of handled ids.
//! - [`verify`] and [`files`]: reading a partition directory offline.
//! - The repository's `docs/embedding.md` (the library guide: transactions, the processed-id
//!   store, disk use, many partitions, the public API), `docs/design.md` (why it is built this
//!   way), `docs/format.md` (every byte layout), and its README (set-up, and the map to the
//!   command line, the example broker and replication).

// The public API is what this file lists (docs/embedding.md, "Public API", says what each part is
// for). Everything else is the engine's inside: crate-private, or public under the `internals`
// feature for this crate's own tests, benches and fuzz targets, and for nothing else.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// A library call fails with a typed error, never a panic: no `unwrap` or `expect` outside the
// unit tests (an invariant that cannot fail says so in a `match` or an `unreachable!` naming it).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

// The engine calls Linux's file and memory interfaces directly (`fallocate`, `sync_file_range`,
// `MADV_POPULATE_*`, `mincore`, `off64_t` offsets), and its crash model is ext4/xfs on Linux.
// Other systems are refused here rather than built with a silent fallback that the tests never
// exercised.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "oncelog supports Linux only: it relies on fallocate, sync_file_range and MADV_POPULATE_*, \
     and its crash tests model Linux file systems"
);

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

/// Writes `with_*` setters for a configuration type whose fields are public for reading: each
/// sets one field and returns the value, so a configuration reads as one chain from its
/// default and stays buildable when a field is added (the types are `#[non_exhaustive]`).
/// `Some(field)` sets an override that is `None` by default to `Some(value)`.
macro_rules! with_setters {
    (@one $ty:ident, $with:ident, $field:ident, $vt:ty, $value:ident => $set:expr) => {
        #[doc = concat!("Sets [`", stringify!($ty), "::", stringify!($field), "`].")]
        #[must_use]
        pub fn $with(mut self, $value: $vt) -> Self {
            self.$field = $set;
            self
        }
    };
    ($ty:ident { $($with:ident => $field:ident: $vt:ty),* $(,)? }) => {
        impl $ty {
            $(with_setters!(@one $ty, $with, $field, $vt, value => value);)*
        }
    };
    ($ty:ident { $($with:ident => Some($field:ident): $vt:ty),* $(,)? }) => {
        impl $ty {
            $(with_setters!(@one $ty, $with, $field, $vt, value => Some(value));)*
        }
    };
}

pub mod format;
pub mod io;
pub mod processed;
pub mod producer;
pub mod tier;
pub mod verify;

internal_mod!(log);
internal_mod!(manager);
internal_mod!(segment);

pub use log::{
    partition_evidence, NotAPartitionReason, PartitionEvidence, RecoveryPreview, RemovedData,
    RemovedTotals,
};
pub use log::{
    AppendError, AppendInfo, AppendOutcome, AppendWrites, BadMetadataFile, Cleanable,
    CleanupPolicy, Clock, CompactionConfig, CompactionReport, ConfigError, Damage, DeletedSegment,
    DuplicateInfo, Environment, EpochEndOffset, EpochEntry, Error, FetchResult, FlushError,
    FlushPolicy, HighWatermarkPolicy, IsolationLevel, LatencyHistogram, Log, LogConfig,
    LogConfigBuilder, LogMetrics, LogReader, Maintenance, MetadataFile, OpenError, Preallocation,
    ProducerLoadReport, ReadError, RecoveryMetrics, RecoveryMode, RecoveryReport, Refusals,
    ReplicaLog, RetentionReason, RetentionReport, RewriteError, SystemClock, TruncateReport,
    Truncation, TxnMarker, TxnResult, WaitFor, WaitOutcome, WrittenBack, CLEANER_OFFSET_FILE,
};
pub use manager::{
    CleanRequest, Cleaned, Cleaner, Compactor, DirCheckpoints, DirEntry, FoundDir, Job,
    JobIntervals, JobReport, JobStats, LogDirContents, LogDirReport, LogManager, ManagerConfig,
    ManagerError, ManagerOpenReport, MetaProperties, PartitionConfig, PartitionFailure,
    PartitionInfo, PartitionOpened, PartitionReport, ResolvedConfig, Throttle, TierStatus, Tiering,
    TopicError, TopicPartition,
};
pub use segment::{BatchProblem, CorruptSegment};

/// The files of a Kafka log dir, for tools that read one without opening a [`LogManager`], as
/// `oncelog dump`, `verify` and `recover` of a whole log dir do: the names of partition
/// directories (Kafka's topic rules), the offset checkpoint files and `meta.properties`
/// (byte layouts in docs/format.md). [`LogDirContents::read`] reads them all.
pub mod log_dir {
    pub use crate::manager::log_dir::{CLEAN_SHUTDOWN_FILE, LOCK_FILE};
    pub use crate::manager::meta::{
        decode_file as decode_meta_properties, FILE_NAME as META_PROPERTIES,
    };
    pub use crate::manager::offsets::{
        decode_file as decode_offset_checkpoint, CLEANER_OFFSETS, HIGH_WATERMARKS,
        LOG_START_OFFSETS, RECOVERY_POINTS,
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
        decode_file as decode_checkpoint, Checkpoint, SegmentRecord, FILE_NAME as CHECKPOINT_FILE,
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

/// The library guide's examples, compiled and run as doctests so the guide stays true.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingGuideDoctests;
