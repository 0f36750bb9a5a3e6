//! The broker's storage: topics and their partitions, each an `oncelog::Log` in its own
//! directory `<data>/<topic>-<partition>/`, as Kafka lays out a log dir.
//!
//! The partitions are an `oncelog::LogManager` over the data directory (one Kafka log dir: its
//! lock, `meta.properties`, Kafka's offset checkpoint files, the clean-shutdown marker, parallel
//! recovery and the background jobs: retention, checkpoints, producer expiry, snapshots,
//! cleaning); this module adds the topics (Kafka's topic ids, partitions 0..n) over it.
//! Everything the protocol layer needs comes out of here as the broker's own types:
//! [`Appended`], [`AppendRefused`] (with the engine's stable error kind), [`ReadRefused`].
//!
//! With tiered storage (`--tier-dir` or `--tier-url`) the manager's tiering job uploads sealed segments to an
//! `oncelog_tier::ObjectStoreRemote` and applies local retention, and each [`Partition`]
//! serves reads below its local log start from the store ([`Remote`]).
//!
//! Files of the data directory besides the partitions:
//!
//! | file | content |
//! |---|---|
//! | `<topic>-<n>/partition.metadata` | Kafka's: `version: 0\ntopic_id: <uuid, base64url>` |
//! | `<topic>-<n>/oncelog.properties` | the engine's: the topic's own settings (CreateTopics, IncrementalAlterConfigs), the same in every partition |
//! | `meta.properties` | Kafka's: `version`, `cluster.id`, `node.id` (the cluster id answered in Metadata) |
//! | `producer-ids` | the producer ids reserved so far ([`crate::producer_ids`]) |

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use oncelog::format::BatchIter;
use oncelog::producer::ProducerStateConfig;
use oncelog::tier::{self, RemoteStore, TierError};
use oncelog::{
    AppendOutcome, Log, LogConfig, LogManager, ManagerConfig, PartitionConfig, ReadError,
    TopicPartition,
};
use uuid::Uuid;

use crate::config::{self, LogSettings};
use crate::files;
use crate::wait::{AppendListener, AppendSignal};

/// Kafka's name for the file holding a partition's topic id.
const PARTITION_METADATA: &str = "partition.metadata";

/// The engine's file of a partition's own settings (`oncelog::PartitionConfig::encode`).
const PARTITION_CONFIG: &str = "oncelog.properties";

/// Why the store could not open or create something.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("partition log {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: oncelog::OpenError,
    },
    #[error("{}: {reason}", path.display())]
    Layout { path: PathBuf, reason: String },
    #[error("invalid topic name {name:?}: {rule}")]
    InvalidTopicName { name: String, rule: &'static str },
    #[error("invalid log settings: {0}")]
    Config(#[from] oncelog::ConfigError),
    #[error("{0}")]
    Manager(#[from] oncelog::ManagerError),
    #[error("partition {}: {reason}", path.display())]
    Offline { path: PathBuf, reason: String },
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    #[error("tiered storage: {0}")]
    TierSetup(#[from] oncelog_tier::SetupError),
    #[error("tiered storage: {0}")]
    Tier(#[from] oncelog::tier::TierError),
    #[error("topic {topic} has {current} partitions; a new count must be higher, not {requested}")]
    PartitionCount {
        topic: String,
        current: i32,
        requested: i32,
    },
}

/// The object store of `--tier-dir` or `--tier-url`. A URL's store is checked first: one
/// that overwrites where a conditional put must refuse stops the broker; one that cannot be
/// reached now is only warned of (the tiering job reports each failed upload, and local data
/// is served meanwhile).
fn open_tier_store(
    location: &config::TierLocation,
) -> Result<oncelog_tier::ObjectStoreRemote, StoreError> {
    match location {
        config::TierLocation::Dir(dir) => Ok(oncelog_tier::ObjectStoreRemote::local(dir)?),
        config::TierLocation::Url { url, options } => {
            let store = oncelog_tier::ObjectStoreRemote::from_url(url, options)?;
            match store.check_conditional_put() {
                Ok(()) => {}
                Err(e @ oncelog_tier::SetupError::Check { .. }) => {
                    tracing::warn!(url = %url, error = %e, "object store not checked at start");
                }
                Err(e) => return Err(e.into()),
            }
            Ok(store)
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written at these offsets; `append_time_ms` is the broker's clock at the append.
    Written {
        first_offset: i64,
        last_offset: i64,
        append_time_ms: i64,
    },
    /// A retry of a batch still in its producer's dedup window: nothing was written, and these
    /// are the offsets the original got.
    Duplicate { first_offset: i64, last_offset: i64 },
}

impl Appended {
    pub fn last_offset(&self) -> i64 {
        match *self {
            Appended::Written { last_offset, .. } | Appended::Duplicate { last_offset, .. } => {
                last_offset
            }
        }
    }
}

/// A batch the log refused; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AppendRefused {
    /// The engine's stable name for the error (`AppendError::kind`), which
    /// [`crate::errors::append_error`] maps to a Kafka error code.
    pub kind: &'static str,
    pub message: String,
}

/// Why a read (fetch, offset lookup) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadRefused {
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error("stored data could not be read: {0}")]
    Storage(String),
    /// The partition was taken offline (a batch it was about to serve failed its check); it
    /// serves nothing until the broker reopens it after recovery.
    #[error("the partition is offline: {0}")]
    Offline(String),
    #[error("the partition is closed")]
    Closed,
}

impl From<ReadError> for ReadRefused {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => ReadRefused::OutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            },
            ReadError::Closed => ReadRefused::Closed,
            // Damage, I/O, and whatever kinds later versions add.
            other => ReadRefused::Storage(other.to_string()),
        }
    }
}

/// Why a DeleteRecords of a partition was refused; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteRecordsRefused {
    /// Negative, or above the high watermark (the log end on this broker): Kafka's
    /// OFFSET_OUT_OF_RANGE.
    #[error("offset {offset} is not in [0, {high_watermark}] (the high watermark)")]
    OutOfRange { offset: i64, high_watermark: i64 },
    /// The partition's `cleanup.policy` has no `delete` (Kafka's POLICY_VIOLATION).
    #[error("records of a partition whose cleanup.policy has no delete cannot be deleted")]
    Policy,
    /// The engine failed (the rewrite's `kind()` and message); KAFKA_STORAGE_ERROR.
    #[error("{kind}: {message}")]
    Storage { kind: &'static str, message: String },
    #[error("the partition is offline: {0}")]
    Offline(String),
    #[error("the partition is closed")]
    Closed,
}

/// Why making appends durable failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("flush failed: {0}")]
pub struct FlushRefused(pub String);

/// A record found by timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// The producer fields of a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchProducer {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

/// Reads the producer fields of the batch at the front of `records` (header only, no checks
/// beyond its frame: for logging).
pub fn batch_producer(records: &[u8]) -> Option<BatchProducer> {
    let batch = oncelog::format::RecordBatch::parse(records).ok()?;
    Some(BatchProducer {
        producer_id: batch.producer_id(),
        epoch: batch.producer_epoch(),
        base_sequence: batch.base_sequence(),
    })
}

/// A read_committed read: the batches, the last stable offset, and the aborted transactions
/// (producer id, first offset) among them.
pub type CommittedRead = (Bytes, i64, Vec<(i64, i64)>);

/// Where a tiered partition's remote segments are: the broker's object store and the
/// partition's key prefix in it (`<--tier-prefix>/<topic>-<n>`, as the tiering job uploads).
#[derive(Debug, Clone)]
pub struct Remote {
    store: Arc<dyn RemoteStore>,
    prefix: String,
}

/// The broker's object store, when `--tier-dir` or `--tier-url` turned tiered storage on.
#[derive(Debug, Clone)]
struct TierStore {
    store: Arc<dyn RemoteStore>,
    root: String,
    /// The broker's local retention (topics may set their own).
    local_retention: tier::LocalRetention,
}

impl TierStore {
    fn remote(&self, topic: &str, index: i32) -> Remote {
        Remote {
            store: Arc::clone(&self.store),
            prefix: format!(
                "{}/{}",
                self.root,
                TopicPartition::new(topic, index).dir_name()
            ),
        }
    }
}

/// One partition: its log, and the signal that wakes its long-polling fetchers.
pub struct Partition {
    topic: String,
    index: i32,
    log: Arc<Log>,
    /// The remote segments, when the broker tiers (reads below the local log start).
    remote: Option<Remote>,
    /// The manifest as this partition last read it (at open, by ListOffsets, after its own
    /// DeleteRecords, and each second after the tiering job moved the start: see
    /// [`Store::new_tier_failures`]): the partition's log start across tiers is computed from
    /// it against the local log start, without a store call per fetch. Until that second has
    /// passed, fetches report the start before the job's remote retention (a read below the
    /// new one still answers OFFSET_OUT_OF_RANGE with it).
    manifest: Mutex<Option<tier::Manifest>>,
    appended: AppendSignal,
    /// Why the partition is offline, once a batch read from it failed its check.
    offline: OnceLock<String>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.index)
    }
}

impl Partition {
    fn new(topic: &str, index: i32, log: Arc<Log>, remote: Option<Remote>) -> Partition {
        Partition {
            topic: topic.to_string(),
            index,
            log,
            remote,
            manifest: Mutex::new(None),
            appended: AppendSignal::default(),
            offline: OnceLock::new(),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn index(&self) -> i32 {
        self.index
    }
    /// The partition's log start offset (Kafka's `logStartOffset`, the low watermark Fetch,
    /// Produce and share groups report): with tiered storage, the start across tiers, from the
    /// manifest this partition last read ([`Partition::earliest_offset`] reads it afresh).
    pub fn log_start_offset(&self) -> i64 {
        // No store call here: this runs on the reactor (Fetch and Produce answers), where
        // the store's blocking calls must not. The ticker reads the manifest again when the
        // tiering job's status names another start (`Store::new_tier_failures`).
        let local = self.log.log_start_offset();
        self.manifest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(local, |m| m.partition_log_start(local))
    }

    /// The local log start offset (Kafka's `localLogStartOffset`, ListOffsets EARLIEST_LOCAL).
    pub fn local_log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// Remembers the manifest just read.
    fn remember(&self, manifest: Option<&tier::Manifest>) {
        if let Some(m) = manifest {
            *self.manifest.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
        }
    }

    /// Finishes a DeleteRecords a crash cut between its manifest and the local log
    /// (`oncelog::tier::settle_log_start`) and reads the manifest, before the partition serves.
    /// A store that fails leaves the local start until the next read of the manifest (the
    /// tiering job reconciles the log at its next run).
    fn settle(&self) {
        let Some(remote) = &self.remote else {
            return;
        };
        let settled = tier::settle_log_start(&self.log, remote.store.as_ref(), &remote.prefix)
            .and_then(|_| tier::read_manifest(remote.store.as_ref(), &remote.prefix));
        match settled {
            Ok(m) => self.remember(m.as_ref()),
            Err(e) => {
                tracing::warn!(partition = ?self, error = %e, "tiered log start not settled at open")
            }
        }
    }
    /// The next offset to be assigned; everything below it can be fetched (Kafka's high
    /// watermark on a single broker).
    pub fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// Whether [`Partition::append`] may wait for an fsync (the `always` and `every:N`
    /// policies flush inside the append). Under `manual` an append is a validation and a copy
    /// into the mapped segment, with a file created and allocated at a roll.
    pub fn append_may_sync(&self) -> bool {
        self.log.config().flush_policy != oncelog::FlushPolicy::Manual
    }

    /// Appends one batch as the client sent it. Under the `always` flush policy it returns
    /// once the batch is durable; when [`Partition::append_may_sync`], run it off the reactor.
    /// An offline partition refuses every append.
    pub fn append(&self, batch: &[u8]) -> Result<Appended, AppendRefused> {
        self.refuse_if_offline()?;
        let outcome = self.log.append(batch).map_err(|e| AppendRefused {
            kind: e.kind(),
            message: e.to_string(),
        })?;
        Ok(match outcome {
            AppendOutcome::Appended(info) => {
                self.appended.appended();
                Appended::Written {
                    first_offset: info.first_offset,
                    last_offset: info.last_offset,
                    append_time_ms: info.append_time_ms,
                }
            }
            AppendOutcome::Duplicate(original) => Appended::Duplicate {
                first_offset: original.first_offset,
                last_offset: original.last_offset,
            },
            other => {
                return Err(AppendRefused {
                    kind: "unknown_append_outcome",
                    message: format!("an append outcome this broker does not know: {other:?}"),
                })
            }
        })
    }

    /// Whether every offset below `end_offset` is durable already.
    pub fn is_durable_to(&self, end_offset: i64) -> bool {
        self.log.recovery_point() >= end_offset
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes` but at least one batch,
    /// as `Bytes` over the log's mapped segment (no copy). Empty at the log end. Every batch
    /// is checked before it is handed out (`Partition::check_served`).
    ///
    /// Below the local log start of a tiered partition the batches come from the remote
    /// segment that holds `offset` (`oncelog::tier::read`: whole batches of that one segment,
    /// each CRC-checked, the bytes the local read returned before local retention).
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, ReadRefused> {
        self.read_if_online()?;
        if let Some(remote) = self.below_local(offset) {
            return tier::read(
                &self.log,
                remote.store.as_ref(),
                &remote.prefix,
                offset,
                max_bytes,
            )
            .map_err(|e| self.remote_read_failed(e));
        }
        let bytes = self
            .log
            .read(offset, max_bytes)
            .map_err(|e| self.read_failed(e))?;
        self.check_served(offset, &bytes)?;
        Ok(bytes)
    }

    /// The remote segments, if the partition is tiered and `offset` is below its local log
    /// start.
    pub fn below_local(&self, offset: i64) -> Option<&Remote> {
        self.remote
            .as_ref()
            .filter(|_| offset < self.log.log_start_offset())
    }

    /// A failed read through tiered storage. An offset no remote segment holds is out of
    /// range, as below the log start of an untiered log. Damage found in the store is a
    /// storage error of this read only: the local log is intact, so the partition stays
    /// online.
    fn remote_read_failed(&self, error: TierError) -> ReadRefused {
        match error {
            TierError::NotRemote {
                offset,
                log_start_offset,
                remote,
            } => ReadRefused::OutOfRange {
                offset,
                log_start_offset: remote
                    .filter(|&(_, end)| end >= log_start_offset)
                    .map_or(log_start_offset, |(start, _)| start)
                    .max(self.log_start_offset()),
                log_end_offset: self.log.log_end_offset(),
            },
            // Below the partition's start: DeleteRecords raised it past what is asked.
            TierError::BelowLogStart {
                offset,
                log_start_offset,
            } => ReadRefused::OutOfRange {
                offset,
                log_start_offset,
                log_end_offset: self.log.log_end_offset(),
            },
            // The local log start moved up between the check and the read.
            TierError::LocalRead { error, .. } => self.read_failed(error),
            other => {
                tracing::warn!(partition = ?self, error = %other, "remote read failed");
                ReadRefused::Storage(format!("{}: {other}", other.kind()))
            }
        }
    }

    /// A failed read; one that found damage (the engine's own checks of what it reads) takes
    /// the partition offline as a failed CRC does.
    fn read_failed(&self, error: ReadError) -> ReadRefused {
        match error {
            ReadError::Corrupt(e) => self.take_offline(e.to_string()),
            other => other.into(),
        }
    }

    /// Why the partition is offline, if it is.
    pub fn offline(&self) -> Option<&str> {
        self.offline.get().map(String::as_str)
    }

    fn read_if_online(&self) -> Result<(), ReadRefused> {
        match self.offline() {
            Some(reason) => Err(ReadRefused::Offline(reason.to_string())),
            None => Ok(()),
        }
    }

    fn refuse_if_offline(&self) -> Result<(), AppendRefused> {
        match self.offline() {
            Some(reason) => Err(AppendRefused {
                kind: "offline",
                message: format!("the partition is offline: {reason}"),
            }),
            None => Ok(()),
        }
    }

    /// Checks what a read is about to serve: whole batches, each with the CRC-32C it stores
    /// (Kafka's consumers check it too, but a client must never be handed damage as data). A
    /// batch that fails takes the partition offline: this read and every later produce and
    /// fetch are refused (KAFKA_STORAGE_ERROR) until the broker reopens the partition, after
    /// `oncelog recover --deep` (or `verify`) of its directory has cut or confirmed the damage.
    fn check_served(&self, offset: i64, bytes: &[u8]) -> Result<(), ReadRefused> {
        for item in BatchIter::new(bytes) {
            let problem = match item {
                Ok((_, batch)) => match batch.verify_crc() {
                    Ok(()) => continue,
                    Err(e) => format!("the batch at offset {}: {e}", batch.base_offset()),
                },
                Err(e) => format!(
                    "byte {} of the read from offset {offset}: {}",
                    e.position, e.error
                ),
            };
            return Err(self.take_offline(problem));
        }
        Ok(())
    }

    /// Takes the partition offline for `problem`, once, and says so.
    fn take_offline(&self, problem: String) -> ReadRefused {
        if self.offline.set(problem.clone()).is_ok() {
            tracing::error!(
                partition = ?self,
                dir = %self.log.dir().display(),
                problem,
                "stored data failed its check: partition taken offline; run `oncelog recover --deep` on its directory, then restart the broker"
            );
        }
        ReadRefused::Offline(self.offline().unwrap_or(&problem).to_string())
    }

    /// Appends a COMMIT or ABORT marker for the producer's open transaction and makes it
    /// durable (a decided transaction must not come undone). Blocking.
    pub fn append_marker(&self, marker: &oncelog::TxnMarker) -> Result<i64, AppendRefused> {
        self.refuse_if_offline()?;
        let refused = |kind: &'static str, message: String| AppendRefused { kind, message };
        let info = self
            .log
            .append_marker(marker)
            .map_err(|e| refused(e.kind(), e.to_string()))?;
        self.log.flush().map_err(|e| refused("io", e.to_string()))?;
        self.appended.appended();
        Ok(info.first_offset)
    }

    /// The open transactions, `(first offset, producer id)`.
    pub fn ongoing_transactions(&self) -> Vec<(i64, i64)> {
        self.log.ongoing_transactions()
    }

    /// The producer's epoch as this partition knows it.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producer_epoch(producer_id)
    }

    /// Every producer the partition's log tracks, by producer id (DescribeProducers).
    pub fn producers(&self) -> Vec<oncelog::producer::ProducerEntry> {
        self.log.producers()
    }

    /// A read_committed read: whole batches below the last stable offset, the last stable
    /// offset, and the aborted transactions (producer id, first offset) that overlap them.
    pub fn read_committed(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<CommittedRead, ReadRefused> {
        // The engine bounds the last stable offset by its high watermark, the durable end;
        // this broker serves read_uncommitted up to the log end (acks=1 writes included), so a
        // read_committed fetch first makes the log durable to its end (a no-op when acks=all
        // producers already did).
        self.read_if_online()?;
        if self.log.recovery_point() < self.log.log_end_offset() {
            self.log.flush().map_err(|e| {
                ReadRefused::Storage(format!("flush before a read_committed read: {e}"))
            })?;
        }
        let f = match self.below_local(offset) {
            // Every batch of a remote segment is CRC-checked as it is read.
            Some(remote) => tier::fetch_committed(
                &self.log,
                remote.store.as_ref(),
                &remote.prefix,
                offset,
                max_bytes,
            )
            .map_err(|e| self.remote_read_failed(e))?,
            None => {
                let f = self
                    .log
                    .fetch_isolated(offset, max_bytes, oncelog::IsolationLevel::ReadCommitted)
                    .map_err(|e| self.read_failed(e))?;
                self.check_served(offset, &f.bytes)?;
                f
            }
        };
        let aborted = f
            .aborted_transactions
            .unwrap_or_default()
            .iter()
            .map(|a| (a.producer_id, a.first_offset))
            .collect();
        Ok((f.bytes, f.last_stable_offset, aborted))
    }

    /// The last stable offset (the high watermark when no transaction is open).
    pub fn last_stable_offset(&self) -> i64 {
        self.log.last_stable_offset()
    }

    /// Registers for the next append (see [`crate::wait`]).
    pub fn listen(&self) -> AppendListener {
        self.appended.listen()
    }

    /// The first record with a timestamp at or after `timestamp`, if any.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<TimestampOffset>, ReadRefused> {
        self.read_if_online()?;
        let found = match &self.remote {
            // The remote segments below the local log start first, then the log.
            Some(remote) => tier::offset_for_timestamp(
                &self.log,
                remote.store.as_ref(),
                &remote.prefix,
                timestamp,
            )
            .map_err(|e| self.remote_read_failed(e))?,
            None => self.log.offset_for_timestamp(timestamp)?,
        };
        Ok(found.map(|t| TimestampOffset {
            timestamp: t.timestamp,
            offset: t.offset,
        }))
    }

    /// Kafka's log start offset of the partition (ListOffsets EARLIEST): with tiered storage,
    /// where the remote segments start when they reach the local log start (Kafka's
    /// `logStartOffset` against its `localLogStartOffset`), else the local log start. Reads the
    /// manifest from the store.
    pub fn earliest_offset(&self) -> Result<i64, ReadRefused> {
        let local = self.log.log_start_offset();
        Ok(self
            .manifest()?
            .map_or(local, |m| m.partition_log_start(local)))
    }

    /// The last offset the remote segments hold (ListOffsets LATEST_TIERED), `None` when the
    /// partition is not tiered or nothing is uploaded yet.
    pub fn last_tiered_offset(&self) -> Result<Option<i64>, ReadRefused> {
        Ok(self
            .manifest()?
            .and_then(|m| m.remote_end())
            .map(|end| end - 1))
    }

    /// The partition's current manifest, read from the store; `None` when it is not tiered.
    fn manifest(&self) -> Result<Option<oncelog::tier::Manifest>, ReadRefused> {
        match &self.remote {
            None => Ok(None),
            Some(remote) => {
                let m = tier::read_manifest(remote.store.as_ref(), &remote.prefix)
                    .map_err(|e| self.remote_read_failed(e))?;
                self.remember(m.as_ref());
                Ok(m)
            }
        }
    }

    /// The first record with the largest timestamp in the log (ListOffsets' MAX_TIMESTAMP).
    /// Walks the batch headers of the whole log: meant for the rare request that asks.
    pub fn max_timestamp(&self) -> Result<Option<TimestampOffset>, ReadRefused> {
        const CHUNK: usize = 1 << 20;
        self.read_if_online()?;
        let mut offset = self.log.log_start_offset();
        let mut max: Option<i64> = None;
        loop {
            let bytes = self.log.read(offset, CHUNK)?;
            if bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&bytes) {
                let (_, batch) = item.map_err(|e| {
                    ReadRefused::Storage(format!(
                        "batch at byte {} of a read: {}",
                        e.position, e.error
                    ))
                })?;
                if max.is_none_or(|m| batch.max_timestamp() > m) {
                    max = Some(batch.max_timestamp());
                }
                offset = batch.last_offset() + 1;
            }
        }
        match max {
            Some(timestamp) => self.offset_for_timestamp(timestamp),
            None => Ok(None),
        }
    }

    /// Kafka's DeleteRecords on one partition (`Partition.deleteRecordsOnLeader`): raises the
    /// log start offset to `offset` through the engine's `Log::delete_records` (durable before
    /// it returns; the segments below go at the manager's next retention run). `-1` means the
    /// high watermark, which on this single broker is the log end (every offset below it is
    /// served); an offset at or below the start changes nothing. The log is made durable up to
    /// `offset` first, as the engine only deletes below its durable end. Answers the new log
    /// start offset (the low watermark). Blocking.
    pub fn delete_records(&self, offset: i64) -> Result<i64, DeleteRecordsRefused> {
        if let Some(reason) = self.offline() {
            return Err(DeleteRecordsRefused::Offline(reason.to_string()));
        }
        if !matches!(
            self.log.config().cleanup_policy,
            oncelog::CleanupPolicy::Delete | oncelog::CleanupPolicy::CompactDelete
        ) {
            return Err(DeleteRecordsRefused::Policy);
        }
        let high_watermark = self.log.log_end_offset();
        let offset = if offset == -1 { high_watermark } else { offset };
        if !(0..=high_watermark).contains(&offset) {
            return Err(DeleteRecordsRefused::OutOfRange {
                offset,
                high_watermark,
            });
        }
        let failed = |e: oncelog::RewriteError| match e {
            oncelog::RewriteError::Closed => DeleteRecordsRefused::Closed,
            oncelog::RewriteError::AboveHighWatermark {
                offset,
                high_watermark,
            } => DeleteRecordsRefused::OutOfRange {
                offset,
                high_watermark,
            },
            other => DeleteRecordsRefused::Storage {
                kind: other.kind(),
                message: other.to_string(),
            },
        };
        if self.log.recovery_point() < offset {
            self.log.flush().map_err(|e| failed(e.into()))?;
        }
        let Some(remote) = &self.remote else {
            return self.log.delete_records(offset).map_err(failed);
        };
        // Across tiers: the manifest records the new start first, then the local log follows.
        let store = remote.store.as_ref();
        let done =
            tier::delete_records(&self.log, store, &remote.prefix, offset).map_err(
                |e| match e {
                    TierError::DeleteRecordsOutOfRange {
                        offset,
                        high_watermark,
                    } => DeleteRecordsRefused::OutOfRange {
                        offset,
                        high_watermark,
                    },
                    TierError::LocalDeleteRecords { error, .. } => failed(error),
                    other => DeleteRecordsRefused::Storage {
                        kind: other.kind(),
                        message: other.to_string(),
                    },
                },
            )?;
        // The start answered is the start every later fetch reports, even if the store then
        // fails to answer this read.
        if let Ok(m) = tier::read_manifest(store, &remote.prefix) {
            self.remember(m.as_ref());
        }
        Ok(done.log_start_offset.max(self.log_start_offset()))
    }

    /// Kafka's OffsetsForLeaderEpoch answer from the partition's leader-epoch cache (the
    /// engine's `end_offset_for_epoch`): the largest epoch at or below `epoch` and the offset
    /// it ended at, `(-1, -1)` when the cache cannot tell.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let e = self.log.replica().end_offset_for_epoch(epoch);
        (e.leader_epoch, e.end_offset)
    }

    /// The bytes of the partition's batches on disk (Kafka's `log.size`, DescribeLogDirs).
    pub fn size_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// The epoch this partition last saw from `producer_id`, if it knows the producer.
    fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.log.producer(producer_id).map(|p| p.epoch())
    }
}

/// A topic and its partitions, numbered from 0.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

#[derive(Default)]
struct Topics {
    by_name: HashMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, Arc<Topic>>,
}

/// Every topic of the data directory.
pub struct Store {
    dir: PathBuf,
    /// The partitions; `None` once closed.
    manager: RwLock<Option<LogManager>>,
    topics: RwLock<Topics>,
    /// Serialises topic creation, so two Metadata requests for a new topic create it once.
    creating: Mutex<()>,
    cluster_id: String,
    /// The object store of tiered storage, if on.
    tier: Option<TierStore>,
    /// Each partition's failures in a row the broker last logged (`new_tier_failures`).
    tier_failures_told: Mutex<HashMap<(String, i32), u32>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("topics", &self.read_topics().by_name.len())
            .finish()
    }
}

impl Store {
    /// Opens every partition under `dir` (creating `dir` if needed) through a `LogManager`,
    /// recovering those that were not closed cleanly. Blocking. A partition that does not open
    /// fails the whole open, naming it.
    pub fn open(dir: &Path, settings: &LogSettings, node_id: i32) -> Result<Store, StoreError> {
        let log_config = log_config(settings)?;
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let cluster_id = load_cluster_id(dir, node_id)?;
        let tier = match &settings.tier {
            None => None,
            Some(t) => Some(TierStore {
                // One read cache for every partition's reads below its local log start;
                // the tiering job's writes go through it too, so what it holds stays true.
                store: Arc::new(tier::CachedStore::new(
                    open_tier_store(&t.location)?,
                    t.cache_bytes,
                )),
                root: t.prefix.clone(),
                local_retention: tier::LocalRetention::new(
                    t.local_retention_ms,
                    t.local_retention_bytes,
                ),
            }),
        };
        let jobs = oncelog::JobIntervals::default()
            .with_retention(Some(settings.retention_check))
            .with_tiering(settings.tier.as_ref().map(|t| t.interval));
        let manager = LogManager::open(
            &[dir],
            ManagerConfig::default()
                .with_log(log_config)
                .with_jobs(jobs)
                .with_cluster_id(Some(cluster_id.clone()))
                .with_node_id(Some(node_id)),
        )?;
        if let (Some(t), Some(store)) = (&settings.tier, &tier) {
            // The tiering job uploads every partition whose policy does not compact, then
            // applies local retention to what the manifest confirms (docs/design.md, "Tiered
            // storage", "In the manager").
            manager.set_tiering(
                oncelog::Tiering::new(Arc::clone(&store.store), t.prefix.clone())
                    .with_bytes_per_second(t.bytes_per_second)
                    .with_local_retention(store.local_retention),
            )?;
        }
        let mut found: HashMap<String, Vec<(i32, PathBuf)>> = HashMap::new();
        for info in manager.list() {
            if let Some(failure) = &info.offline {
                return Err(StoreError::Offline {
                    path: info.dir.clone(),
                    reason: failure.to_string(),
                });
            }
            // Kafka's own internal topics in a Kafka log dir: the broker keeps its offsets and
            // transactions in logs of its own (`oncelog-broker-state/`), and serves neither.
            if RESERVED_TOPICS.contains(&info.partition.topic.as_str()) {
                continue;
            }
            found
                .entry(info.partition.topic.clone())
                .or_default()
                .push((info.partition.partition, info.dir.clone()));
        }
        let mut topics = Topics::default();
        for (name, mut dirs) in found {
            dirs.sort();
            for (expected, (index, path)) in dirs.iter().enumerate() {
                if *index != expected as i32 {
                    return Err(StoreError::Layout {
                        path: path.clone(),
                        reason: format!("topic {name} has no partition {expected}"),
                    });
                }
            }
            let logs = dirs
                .iter()
                .map(|(index, path)| {
                    let log = manager.get(&name, *index)?;
                    report_recovery(path, &log);
                    Ok((*index, path.clone(), log))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let topic = open_topic(&name, logs, tier.as_ref())?;
            topics.by_id.insert(topic.id, Arc::clone(&topic));
            topics.by_name.insert(name, topic);
        }
        Ok(Store {
            dir: dir.to_path_buf(),
            manager: RwLock::new(Some(manager)),
            topics: RwLock::new(topics),
            creating: Mutex::new(()),
            cluster_id,
            tier,
            tier_failures_told: Mutex::new(HashMap::new()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The id of the cluster this data directory belongs to (kept in `meta.properties`).
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.read_topics().by_name.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.read_topics().by_id.get(&id).cloned()
    }

    /// Every topic, by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut all: Vec<_> = self.read_topics().by_name.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.topic(topic)?.partition(index).cloned()
    }

    /// Returns the topic, creating it with `partitions` partitions if it does not exist.
    /// Blocking. Each partition is created by the manager, then gets its
    /// `partition.metadata`; a crash in between leaves a partition without an id, which the
    /// next open gives the topic's id (partition 0's, or a new one).
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<Arc<Topic>, StoreError> {
        validate_topic_name(name)?;
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(topic) = self.topic(name) {
            return Ok(topic);
        }
        self.create_locked(name, partitions, &PartitionConfig::default())
    }

    /// Creates a new topic (CreateTopics) with `partitions` partitions, each with `config`
    /// over the broker's defaults (kept in its `oncelog.properties`); refuses a topic that
    /// exists. Blocking.
    pub fn create_new_topic(
        &self,
        name: &str,
        partitions: i32,
        config: &PartitionConfig,
    ) -> Result<Arc<Topic>, StoreError> {
        validate_topic_name(name)?;
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if self.topic(name).is_some() {
            return Err(StoreError::TopicExists(name.to_string()));
        }
        self.create_locked(name, partitions, config)
    }

    fn create_locked(
        &self,
        name: &str,
        partitions: i32,
        config: &PartitionConfig,
    ) -> Result<Arc<Topic>, StoreError> {
        let id = new_topic_id(|id| self.topic_by_id(id).is_some());
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let manager = manager.as_ref().ok_or(oncelog::ManagerError::Closed)?;
        let logs = self.create_partitions(manager, name, 0..partitions, config, id)?;
        let topic = open_topic(name, logs, self.tier.as_ref())?;
        self.publish(&topic);
        Ok(topic)
    }

    fn publish(&self, topic: &Arc<Topic>) {
        let mut topics = self.topics.write().unwrap_or_else(|e| e.into_inner());
        topics.by_id.insert(topic.id, Arc::clone(topic));
        topics.by_name.insert(topic.name.clone(), Arc::clone(topic));
    }

    /// Makes every offset below each partition's `end_offset` durable (acks=all), one answer
    /// per entry: the partitions' syncs are issued together by the log manager
    /// (`LogManager::flush_many`), never one partition after another, and concurrent callers
    /// waiting on one partition share its syncs (the log's group commit). Blocking.
    pub fn make_durable(&self, targets: &[(Arc<Partition>, i64)]) -> Vec<Result<(), FlushRefused>> {
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let Some(manager) = manager.as_ref() else {
            return targets
                .iter()
                .map(|_| Err(FlushRefused("the store is closed".to_string())))
                .collect();
        };
        let asked: Vec<(TopicPartition, i64)> = targets
            .iter()
            .map(|(p, end)| (TopicPartition::new(p.topic(), p.index()), *end))
            .collect();
        manager
            .flush_many(&asked)
            .into_iter()
            .map(|answer| answer.map_err(|e| FlushRefused(e.to_string())))
            .collect()
    }

    /// Deletes a topic (DeleteTopics): it leaves the topic table, then the manager deletes
    /// its partitions, the highest first, so a crash part way leaves partitions 0..k, a topic
    /// the next open accepts (and a retried delete removes). Handles to its partitions answer
    /// `closed` from then on. Blocking.
    pub fn delete_topic(&self, name: &str) -> Result<Arc<Topic>, StoreError> {
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        let topic = self
            .topic(name)
            .ok_or_else(|| StoreError::UnknownTopic(name.to_string()))?;
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let manager = manager.as_ref().ok_or(oncelog::ManagerError::Closed)?;
        {
            let mut topics = self.topics.write().unwrap_or_else(|e| e.into_inner());
            topics.by_name.remove(name);
            topics.by_id.remove(&topic.id);
        }
        for partition in topic.partitions.iter().rev() {
            manager.delete(name, partition.index)?;
        }
        Ok(topic)
    }

    /// Grows a topic to `count` partitions (CreatePartitions); the new ones get partition 0's
    /// settings and the topic's id. A crash part way leaves a prefix of the new partitions,
    /// which the next open accepts. Blocking.
    pub fn add_partitions(&self, name: &str, count: i32) -> Result<Arc<Topic>, StoreError> {
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        let topic = self
            .topic(name)
            .ok_or_else(|| StoreError::UnknownTopic(name.to_string()))?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(StoreError::PartitionCount {
                topic: name.to_string(),
                current,
                requested: count,
            });
        }
        let config = self.topic_settings(name)?;
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let manager = manager.as_ref().ok_or(oncelog::ManagerError::Closed)?;
        let mut partitions = topic.partitions.clone();
        for (index, _, log) in
            self.create_partitions(manager, name, current..count, &config, topic.id)?
        {
            let remote = self.tier.as_ref().map(|t| t.remote(name, index));
            partitions.push(Arc::new(Partition::new(name, index, log, remote)));
        }
        let grown = Arc::new(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions,
        });
        self.publish(&grown);
        Ok(grown)
    }

    /// Creates partitions `indexes` of topic `name` with one `LogManager::create_many` (no
    /// sync of their own, one of the log dir), then writes each one's `partition.metadata`
    /// with the topic's id and records the leader epoch it is led in (`lead`), those writes
    /// (each synced with its directory) issued in parallel; `create_many` made the partitions'
    /// directories durable. A crash part way leaves partitions without the file or the epoch,
    /// which the next open writes (`open_topic`).
    fn create_partitions(
        &self,
        manager: &LogManager,
        name: &str,
        indexes: std::ops::Range<i32>,
        config: &PartitionConfig,
        id: Uuid,
    ) -> Result<Vec<(i32, PathBuf, Arc<Log>)>, StoreError> {
        let requests: Vec<(TopicPartition, PartitionConfig)> = indexes
            .clone()
            .map(|index| (TopicPartition::new(name, index), config.clone()))
            .collect();
        let logs = manager.create_many(&requests)?;
        let paths: Vec<PathBuf> = indexes
            .clone()
            .map(|index| self.dir.join(format!("{name}-{index}")))
            .collect();
        // Each new partition's files of its own, `partition.metadata` and the leader epoch this
        // broker leads it in (`lead`, written before it returns): a few syncs each, issued from
        // 16 threads rather than one partition after another.
        const WRITERS: usize = 16;
        let chunk = paths.len().div_ceil(WRITERS).max(1);
        std::thread::scope(|s| {
            let writers: Vec<_> = paths
                .chunks(chunk)
                .zip(logs.chunks(chunk))
                .map(|(mine, their_logs)| {
                    s.spawn(move || {
                        mine.iter().zip(their_logs).try_for_each(|(path, log)| {
                            write_partition_metadata(path, id)?;
                            lead(log, path)
                        })
                    })
                })
                .collect();
            writers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(StoreError::Layout {
                        path: self.dir.clone(),
                        reason: "a new partition's writer panicked".to_string(),
                    })
                })
            })
        })?;
        Ok(indexes
            .zip(paths)
            .zip(logs)
            .map(|((i, p), l)| (i, p, l))
            .collect())
    }

    /// The broker's defaults for every partition (the manager's configuration).
    pub fn defaults(&self) -> Result<oncelog::ManagerConfig, StoreError> {
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let manager = manager.as_ref().ok_or(oncelog::ManagerError::Closed)?;
        Ok(manager.config().clone())
    }

    /// Whether `--tier-dir` turned tiered storage on.
    pub fn tiering(&self) -> bool {
        self.tier.is_some()
    }

    /// The broker's tiered-storage local retention, which topics' `local.retention.ms` /
    /// `.bytes` override (no limit without `--tier-dir`).
    pub fn local_retention_defaults(&self) -> tier::LocalRetention {
        self.tier
            .as_ref()
            .map_or_else(tier::LocalRetention::default, |t| t.local_retention)
    }

    /// A topic's own settings over the broker's defaults: partition 0's `oncelog.properties`
    /// (every partition of a topic has the same; none for a partition Kafka wrote).
    pub fn topic_settings(&self, name: &str) -> Result<PartitionConfig, StoreError> {
        let path = self.dir.join(format!("{name}-0")).join(PARTITION_CONFIG);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(PartitionConfig::default()),
            Err(e) => return Err(io_error(&path)(e)),
        };
        PartitionConfig::decode(&text).map_err(|(line, reason)| StoreError::Layout {
            path,
            reason: format!("line {line}: {reason}"),
        })
    }

    /// Replaces a topic's own settings (IncrementalAlterConfigs), live: each partition's
    /// log takes them at once through the manager (`LogManager::alter_config`, which writes
    /// its `oncelog.properties` first); an offline partition's file is written, and it takes
    /// them when it next opens. Blocking.
    pub fn set_topic_settings(
        &self,
        name: &str,
        config: &PartitionConfig,
    ) -> Result<(), StoreError> {
        let _creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        let topic = self
            .topic(name)
            .ok_or_else(|| StoreError::UnknownTopic(name.to_string()))?;
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let manager = manager.as_ref().ok_or(oncelog::ManagerError::Closed)?;
        for partition in &topic.partitions {
            match manager.alter_config(name, partition.index, config.clone()) {
                Ok(_) => {}
                Err(oncelog::ManagerError::PartitionOffline { .. }) => {
                    let path = self
                        .dir
                        .join(format!("{name}-{}", partition.index))
                        .join(PARTITION_CONFIG);
                    files::replace_atomically(&path, config.encode().as_bytes())
                        .map_err(io_error(&path))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The newest epoch any partition saw from `producer_id`.
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.topics()
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.producer_epoch(producer_id))
            .max()
    }

    /// Closes the manager: its jobs stop, every partition is flushed and closed cleanly
    /// (clean checkpoint, producer snapshot), the log dir's offset checkpoints and its
    /// clean-shutdown marker are written. Blocking. Returns what failed, with why.
    pub fn close(&self) -> Vec<(String, String)> {
        let manager = self
            .manager
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match manager.map(LogManager::close) {
            Some(Err(e)) => vec![(self.dir.display().to_string(), e.to_string())],
            _ => Vec::new(),
        }
    }

    fn read_topics(&self) -> std::sync::RwLockReadGuard<'_, Topics> {
        self.topics.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The tiering job's failures since the last call, one per partition that failed again
    /// (its topic, partition and [`oncelog::TierStatus`]): the broker logs each, so a failing
    /// upload is never silent. A partition is named again only once its count of failures
    /// in a row has grown (a recovery resets it). Empty without tiered storage. On the way,
    /// a partition whose start the job moved up (remote retention) reads its manifest again,
    /// so Fetch reports the new start within a tick (also a partition created since the
    /// broker opened, which has not read its manifest yet and reports its local start until
    /// then).
    pub fn new_tier_failures(&self) -> Vec<(String, i32, oncelog::TierStatus)> {
        let manager = self.manager.read().unwrap_or_else(|e| e.into_inner());
        let Some(manager) = manager.as_ref().filter(|_| self.tier.is_some()) else {
            return Vec::new();
        };
        let mut told = self
            .tier_failures_told
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for topic in self.topics() {
            for p in &topic.partitions {
                let Some(status) = manager.tier_status(&topic.name, p.index) else {
                    continue;
                };
                // The tiering job found another start than this partition knows (its first
                // upload, remote retention): read the manifest again, so fetches report it.
                if status
                    .log_start_offset
                    .is_some_and(|s| s != p.log_start_offset())
                {
                    let _ = p.manifest();
                }
                let key = (topic.name.clone(), p.index);
                let before = told.insert(key, status.consecutive_failures).unwrap_or(0);
                if status.consecutive_failures > before {
                    out.push((topic.name.clone(), p.index, status));
                }
            }
        }
        out
    }
}

/// The engine's configuration for every partition.
fn log_config(settings: &LogSettings) -> Result<LogConfig, oncelog::ConfigError> {
    LogConfig::builder()
        .segment_bytes(settings.segment_bytes)
        .prefault_bytes(settings.prefault_bytes)
        .max_message_bytes(settings.max_message_bytes)
        .message_timestamp_type(match settings.message_timestamp_type {
            config::TimestampType::CreateTime => oncelog::format::TimestampType::CreateTime,
            config::TimestampType::LogAppendTime => oncelog::format::TimestampType::LogAppendTime,
        })
        .flush_policy(match settings.flush {
            config::FlushPolicy::Manual | config::FlushPolicy::Never => {
                oncelog::FlushPolicy::Manual
            }
            config::FlushPolicy::Always => oncelog::FlushPolicy::Always,
            config::FlushPolicy::EveryMessages(n) => oncelog::FlushPolicy::EveryMessages(n),
        })
        // acks=all (what clients send by default) syncs the partition before its answer
        // unless `--flush never`: written through the file, a sync has no page tables to
        // write-protect (docs/design.md, "Append writes"). A partition holds the descriptor
        // only while it takes produce requests.
        .append_writes(match settings.flush {
            config::FlushPolicy::Never => oncelog::AppendWrites::Auto,
            _ => oncelog::AppendWrites::File,
        })
        .recovery_mode(match settings.recovery_mode {
            config::RecoveryMode::TolerateTail => oncelog::RecoveryMode::TolerateTailCorruption,
            config::RecoveryMode::TolerateAny => oncelog::RecoveryMode::TolerateAnyCorruption,
            config::RecoveryMode::Absolute => oncelog::RecoveryMode::AbsoluteConsistency,
        })
        .producer_state(
            ProducerStateConfig::default()
                .with_window(settings.dedup_window)
                .with_max_producers(settings.max_producers)
                .with_expiration_ms(settings.producer_expiration_ms),
        )
        .build()
}

/// A topic of partitions the manager opened or created: their topic id (from
/// `partition.metadata`, the same in every partition) and their wake-up signals.
fn open_topic(
    name: &str,
    logs: Vec<(i32, PathBuf, Arc<Log>)>,
    tier: Option<&TierStore>,
) -> Result<Arc<Topic>, StoreError> {
    let mut id = None;
    for (_, path, _) in &logs {
        match (read_partition_metadata(path)?, id) {
            (Some(found), None) => id = Some(found),
            (Some(found), Some(known)) if found != known => {
                return Err(StoreError::Layout {
                    path: path.join(PARTITION_METADATA),
                    reason: format!(
                        "topic id {} differs from {} in partition 0",
                        encode_topic_id(found),
                        encode_topic_id(known)
                    ),
                })
            }
            _ => {}
        }
    }
    // A directory written by something that keeps no topic ids gets one now, in every
    // partition, so the next start answers with the same id.
    let id = id.unwrap_or_else(Uuid::new_v4);
    let mut partitions = Vec::with_capacity(logs.len());
    for (index, path, log) in logs {
        if read_partition_metadata(&path)?.is_none() {
            write_partition_metadata(&path, id)?;
        }
        lead(&log, &path)?;
        let remote = tier.map(|t| t.remote(name, index));
        let partition = Partition::new(name, index, log, remote);
        partition.settle();
        partitions.push(Arc::new(partition));
    }
    Ok(Arc::new(Topic {
        name: name.to_string(),
        id,
        partitions,
    }))
}

fn report_recovery(path: &Path, log: &Log) {
    let report = log.recovery_report();
    let producers = log.producer_load_report();
    // A new partition has no checkpoint and nothing to validate: nothing was recovered.
    let created = !report.checkpoint_found && report.segments_validated == 0;
    if report.clean_shutdown || created {
        tracing::debug!(dir = %path.display(), log_end_offset = log.log_end_offset(), "opened partition");
    } else {
        tracing::info!(
            dir = %path.display(),
            log_end_offset = log.log_end_offset(),
            segments_validated = report.segments_validated,
            bytes_validated = report.bytes_validated,
            truncations = report.truncations.len(),
            producers = producers.producers,
            batches_replayed = producers.batches_replayed,
            "recovered partition after an unclean shutdown"
        );
    }
    for cut in &report.truncations {
        tracing::warn!(file = %cut.path.display(), position = cut.position, "recovery cut a damaged tail");
    }
}

/// Internal topics: the broker's offsets log (`crate::offsets_log`) and transaction log
/// (`crate::txn_coordinator`), never partitions of the store.
pub const RESERVED_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

/// Kafka's topic name rules (`Topic.validate`), and no internal topic.
pub fn validate_topic_name(name: &str) -> Result<(), StoreError> {
    let bad = |rule| StoreError::InvalidTopicName {
        name: name.to_string(),
        rule,
    };
    if name.is_empty() {
        return Err(bad("must not be empty"));
    }
    if name == "." || name == ".." {
        return Err(bad("must not be '.' or '..'"));
    }
    if RESERVED_TOPICS.contains(&name) {
        return Err(bad("is an internal topic of the broker"));
    }
    if name.len() > 249 {
        return Err(bad("must be at most 249 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(bad(
            "may only contain ASCII letters, digits, '.', '_' and '-'",
        ));
    }
    Ok(())
}

/// A fresh random topic id, never the null id nor one in use.
fn new_topic_id(in_use: impl Fn(Uuid) -> bool) -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if !id.is_nil() && !in_use(id) {
            return id;
        }
    }
}

/// Kafka writes a `Uuid` as URL-safe base64 without padding (22 characters).
pub fn encode_topic_id(id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

fn decode_topic_id(text: &str) -> Option<Uuid> {
    let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
    Uuid::from_slice(&bytes).ok()
}

fn write_partition_metadata(dir: &Path, id: Uuid) -> Result<(), StoreError> {
    let path = dir.join(PARTITION_METADATA);
    let text = format!("version: 0\ntopic_id: {}", encode_topic_id(id));
    files::replace_atomically(&path, text.as_bytes()).map_err(io_error(&path))
}

/// This broker leads every partition in the log's current epoch: the epoch starts at the log
/// end if the leader-epoch cache does not have it yet (Kafka's makeLeader,
/// `maybeAssignEpochStartOffset`), so OffsetsForLeaderEpoch answers it even for an empty
/// partition. A cache that has it is left alone.
fn lead(log: &Log, path: &Path) -> Result<(), StoreError> {
    log.replica()
        .set_leader_epoch(log.replica().leader_epoch())
        .map_err(|e| StoreError::Offline {
            path: path.to_path_buf(),
            reason: format!("cannot record its leader epoch: {e}"),
        })
}

fn read_partition_metadata(dir: &Path) -> Result<Option<Uuid>, StoreError> {
    let path = dir.join(PARTITION_METADATA);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path)(e)),
    };
    parse_partition_metadata(&text)
        .map(Some)
        .ok_or_else(|| StoreError::Layout {
            path,
            reason: format!("not a version-0 partition.metadata: {text:?}"),
        })
}

fn parse_partition_metadata(text: &str) -> Option<Uuid> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "version: 0" {
        return None;
    }
    decode_topic_id(lines.next()?.trim().strip_prefix("topic_id:")?.trim())
}

/// The cluster id from Kafka's `meta.properties`, written on first start.
fn load_cluster_id(dir: &Path, node_id: i32) -> Result<String, StoreError> {
    let path = dir.join("meta.properties");
    match fs::read_to_string(&path) {
        Ok(text) => {
            let id = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("cluster.id="))
                .map(str::trim)
                .filter(|id| !id.is_empty());
            match id {
                Some(id) => Ok(id.to_string()),
                None => Err(StoreError::Layout {
                    path,
                    reason: "no cluster.id".to_string(),
                }),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = encode_topic_id(Uuid::new_v4());
            let text = format!("version=1\ncluster.id={id}\nnode.id={node_id}\n");
            files::replace_atomically(&path, text.as_bytes()).map_err(io_error(&path))?;
            Ok(id)
        }
        Err(e) => Err(io_error(&path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelog::format::BatchBuilder;

    fn batch(producer_id: i64, sequence: i32, records: usize) -> Vec<u8> {
        let mut builder = BatchBuilder::new().producer(producer_id, 0, sequence);
        for i in 0..records {
            builder.append(1_700_000_000_000 + i as i64, None, Some(b"v"), &[]);
        }
        builder.build().unwrap()
    }

    #[test]
    fn topic_ids_are_written_as_kafka_writes_them() {
        // The id of the `idem` topic in tests/fixtures/kafka-broker, written by Kafka 4.4.
        let text = "version: 0\ntopic_id: IM2DM_xxRv21CyKjxgmXyQ";
        let id = parse_partition_metadata(text).unwrap();
        assert_eq!(encode_topic_id(id), "IM2DM_xxRv21CyKjxgmXyQ");
        assert_eq!(parse_partition_metadata("version: 1\ntopic_id: x"), None);
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert!(validate_topic_name("orders.v2_x-1").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_reopened_store_has_the_same_topics_ids_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let settings = LogSettings::default();
        let (id, cluster) = {
            let store = Store::open(dir.path(), &settings, 1).unwrap();
            let topic = store.create_topic("orders", 3).unwrap();
            let again = store.create_topic("orders", 5).unwrap();
            assert_eq!(
                again.partitions.len(),
                3,
                "an existing topic is returned as it is"
            );
            let appended = topic.partitions[2].append(&batch(7, 0, 4)).unwrap();
            assert_eq!(
                appended,
                Appended::Written {
                    first_offset: 0,
                    last_offset: 3,
                    append_time_ms: match appended {
                        Appended::Written { append_time_ms, .. } => append_time_ms,
                        Appended::Duplicate { .. } => unreachable!("a first append"),
                    }
                }
            );
            assert!(store.close().is_empty());
            (topic.id, store.cluster_id().to_string())
        };
        let store = Store::open(dir.path(), &settings, 1).unwrap();
        let topic = store.topic("orders").unwrap();
        assert_eq!((topic.id, topic.partitions.len()), (id, 3));
        assert_eq!(store.cluster_id(), cluster);
        assert_eq!(store.topic_by_id(id).unwrap().name, "orders");
        let partition = store.partition("orders", 2).unwrap();
        assert_eq!(partition.log_end_offset(), 4);
        assert_eq!(
            partition.append(&batch(7, 0, 4)).unwrap(),
            Appended::Duplicate {
                first_offset: 0,
                last_offset: 3
            },
            "the retry after a restart is still a duplicate"
        );
        assert_eq!(store.producer_epoch(7), Some(0));
        assert_eq!(store.producer_epoch(8), None);
        store.close();
    }

    #[test]
    fn a_gap_in_the_partitions_of_a_topic_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("orders-0")).unwrap();
        fs::create_dir_all(dir.path().join("orders-2")).unwrap();
        let err = Store::open(dir.path(), &LogSettings::default(), 1).expect_err("a gap");
        assert!(err.to_string().contains("has no partition 1"), "{err}");
    }

    #[test]
    fn refused_appends_carry_the_engines_kind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &LogSettings::default(), 1).unwrap();
        let partition = store.create_topic("t", 1).unwrap().partitions[0].clone();
        let mut damaged = batch(1, 0, 1);
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        assert_eq!(
            partition.append(&damaged).unwrap_err().kind,
            "corrupt_batch"
        );
        partition.append(&batch(1, 0, 1)).unwrap();
        assert_eq!(
            partition.append(&batch(1, 5, 1)).unwrap_err().kind,
            "out_of_order_sequence"
        );
        store.close();
    }

    #[test]
    fn every_kind_a_client_append_can_get_has_a_kafka_code() {
        use oncelog::format::BatchError;
        use oncelog::producer::ProducerError;
        use oncelog::AppendError;
        let io = || oncelog::io::IoError::new("write", "/x", io::Error::other("boom"));
        let errors = [
            AppendError::Batch(BatchError::CrcMismatch {
                stored: 1,
                computed: 2,
            }),
            AppendError::Batch(BatchError::EmptyBatch),
            AppendError::Batch(BatchError::TooLarge { size: 2, max: 1 }),
            AppendError::Producer(ProducerError::OutOfOrderSequence {
                producer_id: 1,
                expected: 1,
                got: 3,
            }),
            AppendError::Producer(ProducerError::InvalidProducerEpoch {
                producer_id: 1,
                current: 2,
                got: 1,
            }),
            AppendError::Producer(ProducerError::InvalidTxnState {
                producer_id: 1,
                txn_first_offset: 0,
            }),
            AppendError::Producer(ProducerError::CoordinatorFenced {
                producer_id: 1,
                current: 2,
                got: 1,
            }),
            AppendError::Producer(ProducerError::TooManyProducers {
                producer_id: 1,
                limit: 1,
            }),
            AppendError::RecordListTooLarge {
                size: 2,
                segment_bytes: 1,
            },
            AppendError::Io(io()),
            AppendError::ReadOnly {
                cause: Arc::new(io()),
            },
            AppendError::Closed,
        ];
        for e in errors {
            assert!(
                crate::errors::APPEND_ERRORS
                    .iter()
                    .any(|(kind, _)| *kind == e.kind()),
                "{} ({e}) has no Kafka code",
                e.kind()
            );
        }
    }

    #[test]
    fn max_timestamp_finds_the_first_record_with_the_largest_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &LogSettings::default(), 1).unwrap();
        let partition = store.create_topic("t", 1).unwrap().partitions[0].clone();
        assert_eq!(partition.max_timestamp().unwrap(), None);
        for (sequence, timestamps) in [(0, [10, 50]), (2, [30, 20])] {
            let mut builder = BatchBuilder::new().producer(1, 0, sequence);
            for ts in timestamps {
                builder.append(ts, None, Some(b"v"), &[]);
            }
            partition.append(&builder.build().unwrap()).unwrap();
        }
        assert_eq!(
            partition.max_timestamp().unwrap(),
            Some(TimestampOffset {
                timestamp: 50,
                offset: 1
            })
        );
        store.close();
    }
}
