//! The manager's errors: what was refused, and where.

use std::path::PathBuf;
use std::sync::Arc;

use super::topic::{TopicError, TopicPartition};
use crate::io::IoError;
use crate::log::{BadMetadataFile, ConfigError, FlushError, OpenError};

/// Why a partition did not open: it is reported, and left closed, while the others open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionFailure {
    /// Its log refused to open (damage its recovery mode does not allow, a bad checkpoint, a
    /// lock held by another process, an I/O error, ...).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Its `oncelog.properties` cannot be read (a [`BadMetadataFile`] of
    /// [`MetadataFile::PartitionConfig`](crate::log::MetadataFile::PartitionConfig)).
    #[error(transparent)]
    BadConfig(#[from] BadMetadataFile),
    /// Its settings resolve to a configuration that breaks a rule.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file operation failed before its log could be opened.
    #[error(transparent)]
    Io(#[from] IoError),
}

impl PartitionFailure {
    /// A stable snake_case name for the kind of failure: the log's [`OpenError::kind`]
    /// (`refused`, `bad_checkpoint`, `locked`, `io`, ...), or `bad_partition_config`,
    /// `config`, `io`.
    pub fn kind(&self) -> &'static str {
        match self {
            PartitionFailure::Open(e) => e.kind(),
            PartitionFailure::BadConfig(_) => "bad_partition_config",
            PartitionFailure::Config(_) => "config",
            PartitionFailure::Io(e) => e.kind(),
        }
    }
}

/// Why the manager refused something. A refused operation changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// [`super::LogManager::open`] was given no log dir.
    #[error("no log dir given")]
    NoLogDirs,
    /// [`super::ManagerConfig::cleaner_bytes_per_second`] is 0: the cleaner could never read
    /// a byte (`None` is no bound).
    #[error("cleaner_bytes_per_second is 0: the cleaner could never read (None for no bound)")]
    ZeroCleanerRate,
    /// [`ManagerConfig::sync_threads`](super::ManagerConfig::sync_threads) is 0.
    #[error("sync_threads is 0: a log dir needs at least one thread to sync its partitions")]
    ZeroSyncThreads,
    /// The same log dir was given twice.
    #[error("log dir {} is given twice", dir.display())]
    DuplicateLogDir {
        /// The dir.
        dir: PathBuf,
    },
    /// Another manager holds the log dir, in this process or another.
    #[error("log dir {} is in use by another log manager ({holder})", dir.display())]
    Locked {
        /// The log dir.
        dir: PathBuf,
        /// Who holds it: what its `.lock` says (`process <pid>`), or the process holding a
        /// POSIX lock on it as a Kafka broker does.
        holder: String,
    },
    /// A log dir's file is unusable: its `meta.properties` is malformed, or does not match the
    /// others or the configuration; or one of its offset checkpoint files is malformed. The
    /// error's `file` says which, its `kind()` is `bad_meta_properties` or
    /// `bad_offset_checkpoint`.
    #[error(transparent)]
    BadMetadataFile(#[from] BadMetadataFile),
    /// The same partition has a directory in two log dirs (Kafka refuses to start too).
    #[error("{partition} is in two log dirs: {} and {}", first.display(), second.display())]
    DuplicatePartition {
        /// The partition.
        partition: TopicPartition,
        /// Its first directory.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// The manager's or a partition's settings break a rule.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A topic name Kafka would refuse.
    #[error("invalid topic name {topic:?}: {error}")]
    InvalidTopic {
        /// The name.
        topic: String,
        /// Which rule it breaks.
        error: TopicError,
    },
    /// A negative partition number.
    #[error("invalid partition {partition} of {topic:?}: partitions are numbered from 0")]
    InvalidPartition {
        /// The topic.
        topic: String,
        /// The number.
        partition: i32,
    },
    /// The topic differs from an existing one only by `.` against `_` (Kafka refuses it: the
    /// two would share their metric names).
    #[error("topic {topic:?} collides with the existing topic {existing:?}")]
    TopicCollision {
        /// The topic refused.
        topic: String,
        /// The topic it collides with.
        existing: String,
    },
    /// The partition exists already.
    #[error("{partition} exists in {}", dir.display())]
    PartitionExists {
        /// The partition.
        partition: TopicPartition,
        /// Its directory.
        dir: PathBuf,
    },
    /// No such partition.
    #[error("no partition {partition}")]
    UnknownPartition {
        /// The partition asked for.
        partition: TopicPartition,
    },
    /// The partition did not open (see the open report): it stays closed until the manager
    /// is opened again with the cause gone.
    #[error("{partition} is offline: {failure}")]
    PartitionOffline {
        /// The partition.
        partition: TopicPartition,
        /// Why it did not open.
        failure: Arc<PartitionFailure>,
    },
    /// A new partition's log could not be opened; nothing was left behind.
    #[error("{partition}: {error}")]
    Create {
        /// The partition.
        partition: TopicPartition,
        /// Why.
        error: Box<OpenError>,
    },
    /// Closing left partitions that could not be flushed; everything else was closed, and the
    /// log dirs holding them were not marked as cleanly shut down.
    #[error("{} partition(s) failed to close, the first {}: {}", failed.len(), failed[0].0, failed[0].1)]
    Close {
        /// The partitions, with why.
        failed: Vec<(TopicPartition, FlushError)>,
    },
    /// A partition could not be made durable ([`super::LogManager::flush_many`]): its log's
    /// flush failed, and what it holds above its recovery point is not promised.
    #[error("{partition}: {error}")]
    Flush {
        /// The partition.
        partition: TopicPartition,
        /// Why.
        error: Box<FlushError>,
    },
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The manager is closed.
    #[error("the log manager is closed")]
    Closed,
}

impl ManagerError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            ManagerError::NoLogDirs => "no_log_dirs",
            ManagerError::ZeroCleanerRate => "zero_cleaner_rate",
            ManagerError::ZeroSyncThreads => "zero_sync_threads",
            ManagerError::DuplicateLogDir { .. } => "duplicate_log_dir",
            ManagerError::Locked { .. } => "locked",
            ManagerError::BadMetadataFile(e) => e.kind(),
            ManagerError::DuplicatePartition { .. } => "duplicate_partition",
            ManagerError::Config(e) => e.kind(),
            ManagerError::InvalidTopic { .. } => "invalid_topic",
            ManagerError::InvalidPartition { .. } => "invalid_partition",
            ManagerError::TopicCollision { .. } => "topic_collision",
            ManagerError::PartitionExists { .. } => "partition_exists",
            ManagerError::UnknownPartition { .. } => "unknown_partition",
            ManagerError::PartitionOffline { .. } => "partition_offline",
            ManagerError::Create { .. } => "create",
            ManagerError::Close { .. } => "close",
            ManagerError::Flush { .. } => "flush",
            ManagerError::Io(e) => e.kind(),
            ManagerError::Closed => "closed",
        }
    }
}
