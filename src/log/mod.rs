//! One partition log: the ordered segments, offsets, append / read / flush / roll, recovery on
//! open (docs/design.md, "Layers").
//!
//! Concurrency: one mutex serialises appends (validation of the batch bytes happens before it
//! is taken); readers never take it. They find a segment under a read lock held for the length
//! of one index lookup and a short scan, and get back `Bytes` that own the segment's map.

pub mod checkpoint;
mod cleaner_offset;
mod config;
pub mod epochs;
mod error;
mod faces;
mod fetch;
mod flush;
mod group;
mod managed;
pub mod metadata_file;
#[cfg(any(test, feature = "internals"))]
pub mod fuzz;
mod metrics;
mod operator;
mod prefault;
mod producers;
mod reader;
mod reconfigure;
mod recovery;
mod rewrite;
mod sealed_files;
pub(crate) mod text_checkpoint;
mod txn;
mod wait;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::format::{self, batch, TimestampType};
use crate::io::{FileLock, IoError, IoResultExt};
use crate::producer::{Decision, Logged, ProducerEntry};
use crate::segment::{
    self, offset_index::relative_offset, Segment, SegmentWriter, WriteDescriptors,
};
use epochs::LeaderEpochCache;

pub use checkpoint::{Checkpoint, SegmentRecord, FILE_NAME as CHECKPOINT_FILE_NAME};
pub use config::{
    AppendWrites, CleanupPolicy, Clock, CompactionConfig, ConfigError, Environment, FlushPolicy,
    HighWatermarkPolicy, LogConfig, LogConfigBuilder, Preallocation, RecoveryMode, SystemClock,
};
pub use epochs::{EpochEndOffset, EpochEntry};
pub use error::{AppendError, Damage, Error, FlushError, OpenError, ReadError, RewriteError};
pub use flush::WrittenBack;
pub use faces::{Maintenance, ReplicaLog};
pub use fetch::FetchResult;
pub use reader::{LogReader, DEFAULT_READER_FETCH_BYTES};
pub use sealed_files::SealedSegmentFiles;
pub use metadata_file::{BadMetadataFile, MetadataFile};
pub use metrics::{LatencyHistogram, LogMetrics, RecoveryMetrics, Refusals};
pub use producers::ProducerLoadReport;
pub use operator::{partition_evidence, NotAPartitionReason, PartitionEvidence};
pub use recovery::{
    LogDirOffsets, RecoveryPreview, RecoveryReport, RemovedData, RemovedTotals, Truncation,
};
pub use rewrite::{
    Cleanable, CompactionReport, DeletedSegment, RetentionReason, RetentionReport, TruncateReport,
    CLEANER_OFFSET_FILE,
};
pub use txn::{IsolationLevel, TxnMarker, TxnResult};
pub use wait::{WaitFor, WaitOutcome};

/// The answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppendOutcome {
    /// The batch was written at these offsets.
    Appended(AppendInfo),
    /// A retry of a batch still in its producer's dedup window: nothing was written, and these
    /// are the offsets the original got.
    Duplicate(DuplicateInfo),
}

impl AppendOutcome {
    /// The batch's first and last offsets: where it was written, or, for a duplicate, where
    /// the original was (what a broker answers the producer either way).
    pub fn offsets(&self) -> (i64, i64) {
        match self {
            AppendOutcome::Appended(i) => (i.first_offset, i.last_offset),
            AppendOutcome::Duplicate(d) => (d.first_offset, d.last_offset),
        }
    }

    /// Whether nothing was written: the batch was a retry of one already in the log.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, AppendOutcome::Duplicate(_))
    }
}

/// Where an appended batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppendInfo {
    /// The offset of the batch's first record.
    pub first_offset: i64,
    /// The offset of its last record.
    pub last_offset: i64,
    /// Base offset of the segment that holds the batch.
    pub segment_base_offset: i64,
    /// Byte position of the batch in that segment's `.log`.
    pub position: u32,
    /// The append wall clock in ms (the batch's timestamp under LogAppendTime).
    pub append_time_ms: i64,
}

/// The original offsets of a duplicate batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DuplicateInfo {
    /// The offset the original batch's first record got.
    pub first_offset: i64,
    /// The offset its last record got.
    pub last_offset: i64,
}

/// What only the appender touches.
struct AppendState {
    /// The configuration, as `Log::config` holds it: the append path reads it here, under the
    /// lock it holds anyway; [`Log::reconfigure`] replaces both under this lock.
    config: Arc<LogConfig>,
    /// The jitter taken off `segment_ms` for this log (Kafka's `segment.jitter.ms`), drawn at
    /// open and at each [`Log::reconfigure`].
    roll_jitter_ms: i64,
    /// `None` once closed.
    active: Option<SegmentWriter>,
    /// Segments rolled away from but not yet flushed (with their indexes).
    unflushed_sealed: Vec<Arc<Segment>>,
    /// Set by a failed fsync: the log is read-only until reopened.
    failure: Option<Arc<IoError>>,
    /// Records appended since the last flush (for `FlushPolicy::EveryMessages`).
    unflushed_messages: u64,
    /// A segment file was created since the directory was last synced.
    dir_dirty: bool,
    /// The idempotent-producer table and its snapshots.
    producers: producers::ProducerState,
    /// How far ahead of the active segment's writer pages were faulted in.
    prefault: prefault::Prefault,
    /// Which leader epoch wrote which offsets (`leader-epoch-checkpoint`).
    epochs: LeaderEpochCache,
    /// `epochs` holds entries the file does not: noted from the batches appended, each at or
    /// above the recovery point the checkpoint on disk records. The file is written before the
    /// next checkpoint (see [`Log::store_checkpoint`]).
    epochs_unwritten: bool,
    /// The epoch stamped on client batches: the latest set by [`ReplicaLog::set_leader_epoch`] (or
    /// found in the log), 0 for a log that never had one.
    leader_epoch: i32,
    /// From this offset on the log has no gap (the checkpoint's `dense_from`).
    dense_from: i64,
    /// The checkpoint on disk is still the clean one the log was opened with: opening changed
    /// nothing it vouches for, so it was not rewritten. The first change writes the unclean
    /// checkpoint first ([`Log::mark_unclean`]).
    clean_on_disk: bool,
    /// Opened in a directory that held none of its files, and nothing written since: no
    /// checkpoint is on disk and the segment files' directory entries may not be durable. The
    /// first change writes the checkpoint first, durably ([`Log::mark_unclean`]); a client's
    /// append only marks the directory for the next flush ([`Log::mark_unclean_for_append`]).
    fresh: bool,
    /// A fresh log took an append without its checkpoint, and marked its directory for the
    /// next flush's sync.
    fresh_appended: bool,
    /// The first offset of the earliest open transaction as [`Log::txn`] last heard of it.
    first_ongoing: Option<i64>,
}

/// What the flusher remembers.
struct FlushState {
    /// Where the last sync of the active segment ended.
    segment_base: i64,
    position: usize,
    /// A leader is syncing (or a rewrite holds the turn); others wait.
    in_progress: bool,
    /// Threads waiting for a sync, in the order they came.
    waiters: Vec<flush::Waiter>,
    /// Rewrites waiting for the turn (on `Log::flushed`): a leader then hands it to none.
    exclusive_waiting: usize,
}

/// Kafka's `validateKey`: on a compacted log every record of a data batch has a key.
fn refuse_keyless(batch: &[u8], max_decompressed: usize) -> Result<(), AppendError> {
    let b = format::RecordBatch::parse(batch)?;
    if b.is_control() {
        return Ok(());
    }
    let records = b.records_buf_limited(max_decompressed)?;
    for (index, r) in b.iter_records(&records).enumerate() {
        if r?.key.is_none() {
            return Err(AppendError::KeylessRecord {
                index: index as i32,
            });
        }
    }
    Ok(())
}

/// The lock file of a partition directory: held (`flock`) for the life of a standalone [`Log`],
/// so a second open of the directory, in this process or another, is refused instead of two
/// writers assigning the same offsets and trimming each other's mapped files.
///
/// A log that a [`crate::LogManager`] opens holds no lock of its own (a descriptor per
/// partition would keep 10,000 partitions from opening under `ulimit -n` 1024): the manager's
/// exclusive lock on the log dir's `.lock` keeps other managers out, and a standalone log
/// whose parent directory has a `.lock` (a log dir) holds a shared lock on it besides its
/// own, so it is refused while a manager holds the log dir, and a manager is refused while it
/// is open. A manager opening a partition whose `oncelog.lock` is there checks that no
/// standalone log holds it (one opened before the log dir had a `.lock`).
pub const LOCK_FILE_NAME: &str = "oncelog.lock";

/// The log manager's lock file in a log dir (`crate::manager::log_dir::LOCK_FILE`).
const LOG_DIR_LOCK_FILE: &str = ".lock";

/// How an open log keeps other writers out of its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exclusion {
    /// A standalone log: holds the directory's [`LOCK_FILE_NAME`], and a shared lock on its
    /// parent's `.lock` if the parent has one.
    Own,
    /// A log of a manager that holds the log dir's `.lock`: holds no descriptor.
    LogDir,
}

/// One partition log. `Send + Sync`: share it with `Arc`; any number of threads may read while
/// one appends at a time.
pub struct Log {
    env: Environment,
    dir: PathBuf,
    /// The directory's lock: held until the log is closed or dropped.
    lock: Mutex<Option<FileLock>>,
    /// A managed log's bound on the descriptors its writers write through
    /// ([`WriteDescriptors`]); `None` for a standalone log.
    write_descriptors: Option<Arc<WriteDescriptors>>,
    /// The configuration: replaced whole by [`Log::reconfigure`] under the append lock, so
    /// whatever holds that lock sees one configuration throughout.
    config: RwLock<Arc<LogConfig>>,
    segments: RwLock<BTreeMap<i64, Arc<Segment>>>,
    append: Mutex<AppendState>,
    flush: Mutex<FlushState>,
    /// Signalled when the flush turn is free (a rewrite waits for it).
    flushed: Condvar,
    /// Client appends between entry and the end of their write, or their joining the write
    /// group (group commit and a group's leader wait for them).
    appends_in_flight: AtomicUsize,
    /// Appenders under `FlushPolicy::Always` waiting to be written by the group's leader.
    group: Mutex<group::WriteGroup>,
    log_end_offset: AtomicI64,
    /// Readers waiting for the log end to move ([`Log::wait_for`]).
    end_signal: wait::EndSignal,
    log_start_offset: AtomicI64,
    recovery_point: AtomicI64,
    /// The high watermark under [`HighWatermarkPolicy::SetByCaller`].
    high_watermark: AtomicI64,
    /// What the first unstable offset is made of, for readers.
    txn: txn::StableOffsets,
    /// Segment files renamed `.deleted`, to remove once their delay is over.
    deletions: Mutex<Vec<rewrite::Deletion>>,
    /// Retired `.log` files kept for reuse as new active segments' files
    /// ([`LogConfig::recycled_segments`]). Every offset in them is below the log start.
    pool: Mutex<Vec<PathBuf>>,
    closed: AtomicBool,
    abandoned: AtomicBool,
    report: RecoveryReport,
    producer_report: ProducerLoadReport,
    metrics: metrics::Metrics,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset())
            .field("log_end_offset", &self.log_end_offset())
            .finish()
    }
}

impl Log {
    /// Opens (or creates) the log in `dir` on the real file system, recovering it if the last
    /// close was not clean.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log, OpenError> {
        Log::open_in(Environment::default(), dir, config)
    }

    /// Opens the log with an explicit file system and clock (tests use simulated ones).
    pub fn open_in(
        env: Environment,
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<Log, OpenError> {
        let dir = dir.as_ref();
        // A refused configuration creates nothing.
        config.validate()?;
        env.fs.create_dir_all(dir).ctx("create directory", dir)?;
        Log::open_in_log_dir(env, dir, config, None, Exclusion::Own, None)
    }

    /// Opens the log of a partition: `log_dir` is what the log dir's Kafka checkpoints say of
    /// it, which vouches for its segments when it has no checkpoint of its own (the log
    /// manager's open); `exclusion` says how other writers are kept out; `descriptors` is a
    /// managed log's bound on the descriptors its writers write through. The directory exists.
    pub(crate) fn open_in_log_dir(
        env: Environment,
        dir: impl AsRef<Path>,
        config: LogConfig,
        log_dir: Option<&LogDirOffsets>,
        exclusion: Exclusion,
        descriptors: Option<Arc<WriteDescriptors>>,
    ) -> Result<Log, OpenError> {
        let opening = Instant::now();
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let now = env.clock.now_ms();
        let fs = env.fs.as_ref();
        let lock = match exclusion {
            Exclusion::Own => Some(lock_dir(fs, &dir)?),
            Exclusion::LogDir => None,
        };
        let loaded = recovery::open(&env.fs, &dir, &config, now, log_dir, exclusion)?;
        let mut segments = BTreeMap::new();
        for s in loaded.sealed {
            segments.insert(s.base_offset(), s);
        }
        let mut active = loaded.active;
        active.set_descriptors(descriptors.clone());
        segments.insert(active.base_offset(), Arc::clone(active.segment()));
        let log_end_offset = active.segment().next_offset();
        let roll_jitter_ms = jitter(config.segment_jitter_ms.min(config.segment_ms), now);
        let (producers, producer_report) = (loaded.producers, loaded.producer_report);
        let first_ongoing = producers.table().first_ongoing_offset();
        let unstable = txn::Unstable::new(first_ongoing, &loaded.completed);
        let leader_epoch = leader_epoch_at_open(&loaded.epochs, loaded.clean_on_disk, &segments);
        let metrics = metrics::Metrics::new(opening.elapsed(), &loaded.report, &producer_report);
        let config = Arc::new(config);
        Ok(Log {
            dir,
            lock: Mutex::new(lock),
            write_descriptors: descriptors,
            segments: RwLock::new(segments),
            flush: Mutex::new(FlushState {
                segment_base: active.base_offset(),
                position: active.size(),
                in_progress: false,
                waiters: Vec::new(),
                exclusive_waiting: 0,
            }),
            flushed: Condvar::new(),
            appends_in_flight: AtomicUsize::new(0),
            group: Mutex::new(group::WriteGroup::default()),
            append: Mutex::new(AppendState {
                config: Arc::clone(&config),
                roll_jitter_ms,
                active: Some(active),
                unflushed_sealed: Vec::new(),
                failure: None,
                unflushed_messages: 0,
                dir_dirty: false,
                producers,
                prefault: prefault::Prefault::default(),
                epochs: loaded.epochs,
                epochs_unwritten: loaded.epochs_unwritten,
                leader_epoch,
                dense_from: loaded.dense_from,
                clean_on_disk: loaded.clean_on_disk,
                fresh: loaded.fresh,
                fresh_appended: false,
                first_ongoing,
            }),
            log_end_offset: AtomicI64::new(log_end_offset),
            end_signal: wait::EndSignal::default(),
            log_start_offset: AtomicI64::new(loaded.log_start_offset),
            recovery_point: AtomicI64::new(loaded.recovery_point),
            high_watermark: AtomicI64::new(loaded.high_watermark),
            txn: txn::StableOffsets::new(unstable),
            deletions: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            report: loaded.report,
            producer_report,
            metrics,
            config: RwLock::new(config),
            env,
        })
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The configuration: the one the log was opened with, or the last
    /// [`Log::reconfigure`] set.
    pub fn config(&self) -> Arc<LogConfig> {
        Arc::clone(&self.config.read())
    }
    /// What opening the log found and did.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }
    /// How the producer state was rebuilt on open: snapshot used, snapshots set aside, batches
    /// replayed.
    pub fn producer_load_report(&self) -> &ProducerLoadReport {
        &self.producer_report
    }
    /// The producer-state entry of `producer_id` (its epoch and retained batches), if known.
    pub fn producer(&self, producer_id: i64) -> Option<ProducerEntry> {
        self.append.lock().producers.producer(producer_id)
    }
    /// The open transactions, `(first offset, producer id)`, earliest first: what a broker's
    /// transaction coordinator aborts or completes when it recovers.
    pub fn ongoing_transactions(&self) -> Vec<(i64, i64)> {
        self.append.lock().producers.table().ongoing().collect()
    }
    /// Every producer-state entry, ordered by producer id: what Kafka's DescribeProducers
    /// (KIP-664) answers for a partition (epoch, last sequence, last timestamp, coordinator
    /// epoch, open transaction's first offset). A copy taken under the append lock: one
    /// consistent view of the table.
    pub fn producers(&self) -> Vec<ProducerEntry> {
        let mut entries: Vec<ProducerEntry> = self
            .append
            .lock()
            .producers
            .table()
            .iter()
            .cloned()
            .collect();
        entries.sort_by_key(ProducerEntry::producer_id);
        entries
    }
    /// Number of producers in the table.
    pub fn producer_count(&self) -> usize {
        self.append.lock().producers.table().len()
    }
    /// The work of [`Maintenance::expire_producers`].
    pub(crate) fn expire_producers(&self, now_ms: i64) -> usize {
        self.append.lock().producers.expire(now_ms)
    }
    /// The first offset that can be read.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }
    /// The next offset to be assigned; every offset below it is readable.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    /// Every offset below this is durable.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::Acquire)
    }
    /// The work of [`Maintenance::segment_count`].
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.read().len()
    }
    /// The work of [`Maintenance::segment_base_offsets`].
    pub(crate) fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.read().keys().copied().collect()
    }
    /// Total bytes of batches in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.read().values().map(|s| s.size() as u64).sum()
    }

    /// Appends one batch as a client sends it (baseOffset 0): validates it, assigns the next
    /// offsets by rewriting baseOffset in place, stamps the leader epoch (and LogAppendTime when
    /// configured), and writes it to the active segment, rolling first if needed.
    pub fn append(&self, batch: &[u8]) -> Result<AppendOutcome, AppendError> {
        let outcome = self.append_client(batch);
        self.metrics.refused_if(&outcome);
        outcome
    }

    fn append_client(&self, batch: &[u8]) -> Result<AppendOutcome, AppendError> {
        let in_flight = InFlight::enter(&self.appends_in_flight);
        let summary = self.validate_client_batch(batch)?;
        let now = self.env.clock.now_ms();
        if self.config.read().flush_policy == FlushPolicy::Always {
            // Appenders that each wait for durability append in groups (docs/design.md,
            // "The write group").
            let joined = Instant::now();
            let outcome = self.append_in_group(batch, summary, now, in_flight);
            // The acknowledgement latency: from joining the group to the answer.
            self.metrics.durable_wait(joined.elapsed());
            return outcome;
        }
        let mut st = self.append.lock();
        let outcome = self.append_locked(&mut st, batch, &summary, now)?;
        let flush = self.flush_due(&st);
        drop(st);
        drop(in_flight);
        match outcome {
            AppendOutcome::Duplicate(d) => self.answer_duplicate(d.first_offset, d.last_offset),
            AppendOutcome::Appended(info) => {
                if flush {
                    self.flush_to(info.last_offset + 1)
                        .map_err(flush_to_append_error)?;
                }
                Ok(AppendOutcome::Appended(info))
            }
        }
    }

    /// The part of a client append made under the append lock: the producer check, the
    /// offsets, the write and the state update, so two racing retries of one batch can never
    /// both be written. A duplicate is answered with its original's offsets, nothing written;
    /// neither is durable yet.
    fn append_locked(
        &self,
        st: &mut AppendState,
        batch: &[u8],
        summary: &format::BatchSummary,
        now: i64,
    ) -> Result<AppendOutcome, AppendError> {
        let header_max_timestamp = batch::be_i64(batch, 35);
        let incoming = producers::incoming(summary);
        self.check_writable(st)?;
        let log_append_time = st.config.message_timestamp_type == TimestampType::LogAppendTime;
        let max_timestamp = if log_append_time {
            now
        } else {
            summary.max_timestamp
        };
        if let Some(b) = &incoming {
            if let Decision::Duplicate(original) = st.producers.check(b)? {
                self.metrics.duplicate();
                return Ok(AppendOutcome::Duplicate(DuplicateInfo {
                    first_offset: original.first_offset(),
                    last_offset: original.last_offset,
                }));
            }
        }
        self.mark_unclean_for_append(st)?;
        let first_offset = self.log_end_offset.load(Ordering::Relaxed);
        let last_offset = first_offset + summary.last_offset_delta as i64;
        self.maybe_roll(st, summary.size, max_timestamp, last_offset, now)?;
        self.make_room(st, summary.size)?;
        self.maybe_snapshot(st, first_offset)?;
        let leader_epoch = st.leader_epoch;
        self.note_batch_epoch(st, leader_epoch, first_offset);
        let writer = st.active.as_mut().ok_or(AppendError::Closed)?;
        let segment_base_offset = writer.base_offset();
        let position = writer
            .append(batch, last_offset, max_timestamp, |dst| {
                batch::set_base_offset(dst, first_offset);
                batch::set_partition_leader_epoch(dst, leader_epoch);
                if log_append_time {
                    batch::stamp_log_append_time(dst, now);
                } else if header_max_timestamp != summary.max_timestamp {
                    // Kafka's in-place path sets maxTimestamp to the largest record timestamp
                    // (docs/design.md, "Append" step 4), compressed batches included: their
                    // records were read in validation.
                    batch::set_max_timestamp(dst, summary.max_timestamp);
                }
            })
            .map_err(|error| AppendError::Io(write_error(writer.segment(), error)))?;
        // Producer state (a transaction it opens included) is recorded before the new end is
        // published: a reader must never see an offset whose transaction it does not know of.
        st.producers
            .record(incoming.as_ref(), first_offset, summary.size, now);
        if summary.is_transactional {
            self.note_transactions(st, None);
        }
        self.publish_log_end(last_offset + 1);
        self.metrics
            .appended(summary.records_count as u64, summary.size);
        self.prefault_ahead(st);
        st.unflushed_messages += summary.records_count as u64;
        Ok(AppendOutcome::Appended(AppendInfo {
            first_offset,
            last_offset,
            segment_base_offset,
            position,
            append_time_ms: now,
        }))
    }

    /// The checks of a client batch made before the append lock is taken: its frame, CRC and
    /// records, keys under compaction, and its size against the segment's.
    fn validate_client_batch(&self, batch: &[u8]) -> Result<format::BatchSummary, AppendError> {
        let config = self.config.read();
        let summary = format::validate_client_batch(
            batch,
            config.max_message_bytes,
            config.max_decompressed_bytes,
        )?;
        if config.cleanup_policy.compacts() {
            refuse_keyless(batch, config.max_decompressed_bytes)?;
        }
        if summary.size > config.segment_bytes {
            return Err(AppendError::RecordListTooLarge {
                size: summary.size,
                segment_bytes: config.segment_bytes,
            });
        }
        Ok(summary)
    }

    /// The work of [`ReplicaLog::append`].
    pub(crate) fn append_replicated(&self, batches: &[u8]) -> Result<Option<AppendInfo>, AppendError> {
        let outcome = self.append_replicated_batches(batches);
        self.metrics.refused_if(&outcome);
        outcome
    }

    fn append_replicated_batches(&self, batches: &[u8]) -> Result<Option<AppendInfo>, AppendError> {
        let mut parsed = Vec::new();
        let mut pos = 0;
        while pos < batches.len() {
            let b = format::validate_stored_batch(&batches[pos..])?;
            pos += b.size();
            if b.size() > self.config().segment_bytes {
                return Err(AppendError::RecordListTooLarge {
                    size: b.size(),
                    segment_bytes: self.config().segment_bytes,
                });
            }
            parsed.push(b);
        }
        let now = self.env.clock.now_ms();
        let mut st = self.append.lock();
        self.check_writable(&st)?;
        self.mark_unclean(&mut st)?;
        let mut end = self.log_end_offset.load(Ordering::Relaxed);
        let mut last_gap = None;
        for b in &parsed {
            if b.base_offset() < end {
                return Err(AppendError::UnexpectedAppendOffset {
                    log_end_offset: end,
                    got: b.base_offset(),
                });
            }
            if b.base_offset() > end {
                last_gap = Some(b.base_offset());
            }
            end = b.last_offset() + 1;
        }
        if let Some(gap) = last_gap {
            // Batches that start past the log end (a compacted leader's): the log is dense only
            // from the last of them on, and the checkpoint says so before any is written, or
            // recovery would take the gaps for damaged base offsets. Once per call that has gaps.
            self.record_dense_from(&mut st, gap)?;
        }
        let mut info: Option<AppendInfo> = None;
        for b in &parsed {
            let written = self.write_replicated(&mut st, b, now);
            let (segment_base_offset, position) = match (written, info) {
                (Ok(at), _) => at,
                (Err(e), None) => return Err(e),
                // The batches before this one are in the log: say so, or a caller retrying
                // "nothing was written" would meet UnexpectedAppendOffset on a log it believes
                // is unchanged.
                (Err(e), Some(written)) => {
                    return Err(AppendError::PartiallyWritten {
                        written,
                        cause: Box::new(e),
                    })
                }
            };
            let (first, last) = (b.base_offset(), b.last_offset());
            info = Some(match info {
                None => AppendInfo {
                    first_offset: first,
                    last_offset: last,
                    segment_base_offset,
                    position,
                    append_time_ms: now,
                },
                Some(i) => AppendInfo {
                    last_offset: last,
                    ..i
                },
            });
        }
        let flush = self.flush_due(&st);
        drop(st);
        if let (true, Some(i)) = (flush, info) {
            self.flush_to(i.last_offset + 1)
                .map_err(flush_to_append_error)?;
        }
        Ok(info)
    }

    /// Writes one replicated batch (already checked); returns its segment and position.
    fn write_replicated(
        &self,
        st: &mut AppendState,
        b: &format::RecordBatch<'_>,
        now: i64,
    ) -> Result<(i64, u32), AppendError> {
        let (first, last) = (b.base_offset(), b.last_offset());
        self.maybe_roll(st, b.size(), b.max_timestamp(), last, now)?;
        self.make_room(st, b.size())?;
        let log_end = self.log_end_offset.load(Ordering::Relaxed);
        self.maybe_snapshot(st, log_end)?;
        // A follower's cache follows the leader's epochs as its batches carry them (§2.2).
        let epoch = b.partition_leader_epoch();
        if epoch >= 0 && st.epochs.latest_epoch().is_none_or(|l| epoch > l) {
            self.note_batch_epoch(st, epoch, first);
        }
        // Producer state follows the leader's batches without checks (Kafka's REPLICATION
        // origin); a marker that aborts a transaction gets its index entry before it is written.
        let logged = crate::producer::txn::classify(b)?;
        let completed = match &logged {
            Some(Logged::Marker(m)) => st.producers.completion(m),
            _ => None,
        };
        let wrote_entry = self.write_aborted_entry(st, completed.as_ref())?;
        let writer = st.active.as_mut().ok_or(AppendError::Closed)?;
        let segment_base_offset = writer.base_offset();
        let position = match writer.append(b.as_bytes(), last, b.max_timestamp(), |_| {}) {
            Ok(p) => p,
            Err(error) => {
                let error = write_error(writer.segment(), error);
                if !wrote_entry {
                    return Err(AppendError::Io(error));
                }
                let cause = Arc::new(error);
                st.failure = Some(Arc::clone(&cause));
                return Err(AppendError::ReadOnly { cause });
            }
        };
        let completed = match &logged {
            Some(l) => st.producers.apply(l, first, b.size(), now),
            None => {
                st.producers.record(None, first, b.size(), now);
                None
            }
        };
        if b.is_transactional() || completed.is_some() {
            self.note_transactions(st, completed.as_ref());
        }
        self.publish_log_end(last + 1);
        self.metrics
            .appended(b.records_count().max(0) as u64, b.size());
        self.metrics.replicated();
        self.prefault_ahead(st);
        st.unflushed_messages += b.records_count().max(0) as u64;
        Ok((segment_base_offset, position))
    }

    /// Whether the flush policy wants a flush after what was just appended.
    fn flush_due(&self, st: &AppendState) -> bool {
        match st.config.flush_policy {
            FlushPolicy::Manual => false,
            FlushPolicy::Always => true,
            FlushPolicy::EveryMessages(n) => st.unflushed_messages >= n,
        }
    }

    /// A retry of a retained batch: nothing is written. Under `FlushPolicy::Always` the answer
    /// waits until the original is durable, as its first answer would have.
    fn answer_duplicate(
        &self,
        first_offset: i64,
        last_offset: i64,
    ) -> Result<AppendOutcome, AppendError> {
        if self.config().flush_policy == FlushPolicy::Always {
            self.flush_to(last_offset + 1)
                .map_err(flush_to_append_error)?;
        }
        Ok(AppendOutcome::Duplicate(DuplicateInfo {
            first_offset,
            last_offset,
        }))
    }

    /// Takes the interval snapshot before the next batch when enough bytes went by since the
    /// last one. A failure (a full disk) refuses the append with nothing written.
    fn maybe_snapshot(&self, st: &mut AppendState, log_end: i64) -> Result<(), AppendError> {
        if st.producers.snapshot_due() {
            // A fresh log's checkpoint comes before any file besides its segment's.
            self.mark_unclean(st)?;
            st.producers
                .prepare_snapshot(self.env.fs.as_ref(), &self.dir, log_end, false)?;
            self.metrics.snapshot_written();
        }
        Ok(())
    }

    /// Makes room in the active segment for a batch of `size` bytes (its files allocated that
    /// far). A full disk fails here, with nothing written and the log still writable.
    fn make_room(&self, st: &mut AppendState, size: usize) -> Result<(), AppendError> {
        let writer = st.active.as_mut().ok_or(AppendError::Closed)?;
        writer.make_room(size).map_err(AppendError::Io)
    }

    /// Keeps the active segment allocated `allocation_step_bytes` ahead of its writer and
    /// `prefault_bytes` of it faulted in, by the background thread (where the file system
    /// allows one; otherwise the appender allocates when it needs to). Pages of zeroed steps,
    /// and all pages under `FlushPolicy::Always`, are faulted in readable only: writable ones
    /// would be dirty, and a sync would write them back as zeros ahead of the data.
    fn prefault_ahead(&self, st: &mut AppendState) {
        let AppendState {
            active: Some(w),
            prefault,
            ..
        } = st
        else {
            return;
        };
        if !self.env.fs.allows_background_io() {
            return;
        }
        // Reserved space is grown a step at a time, and for a writer whose lookahead grew
        // past the first also twice the lookahead past it (at most a step): pages are faulted
        // in only up to the allocated end, so a fast writer would otherwise catch the faulting
        // up at every growth (docs/performance.md, "Pages faulted in ahead of the writer").
        let lookahead = prefault.lookahead(w.size(), st.config.prefault_bytes);
        let for_pages = (2 * lookahead)
            .min(st.config.allocation_step_bytes)
            .saturating_add(w.size())
            .min(w.capacity());
        let for_pages = (!st.config.zeroes_ahead()
            && prefault::past_first_lookahead(lookahead)
            && w.space().ready() < for_pages)
            .then_some(for_pages);
        if let Some(target) = w.growth_wanted().max(for_pages) {
            prefault.grow(w.space(), target);
        }
        if st.config.writes_through_file() && !w.space().recycled() {
            // The writer never touches the map, and the pages it writes are in the page cache
            // already (zeros written ahead) or need no read (reserved space). A recycled
            // file's old pages may have left the cache: they are faulted in ahead, readable,
            // or each `pwrite` that ends inside a page would read that page from the disk
            // (docs/performance.md, "Writes through the file").
            return;
        }
        let write = st.config.flush_policy != FlushPolicy::Always
            && !st.config.zeroes_ahead()
            && !w.space().recycled();
        prefault.advance(
            w.log_mapping(),
            w.size(),
            w.space().ready(),
            st.config.prefault_bytes,
            write,
            !st.config.writes_through_file(),
        );
    }

    fn check_writable(&self, st: &AppendState) -> Result<(), AppendError> {
        if let Some(cause) = &st.failure {
            return Err(AppendError::ReadOnly {
                cause: Arc::clone(cause),
            });
        }
        if st.active.is_none() {
            return Err(AppendError::Closed);
        }
        Ok(())
    }

    /// Kafka's roll conditions (docs/design.md, "Append" step 3), checked before every append.
    fn maybe_roll(
        &self,
        st: &mut AppendState,
        size: usize,
        max_timestamp: i64,
        last_offset: i64,
        now: i64,
    ) -> Result<(), AppendError> {
        let w = st.active.as_ref().ok_or(AppendError::Closed)?;
        let seg_size = w.size();
        let waited = if w.first_batch_timestamp() >= 0 {
            max_timestamp - w.first_batch_timestamp()
        } else {
            now - w.created_ms()
        };
        let roll = seg_size > st.config.segment_bytes - size
            || (seg_size > 0 && waited > st.config.segment_ms - st.roll_jitter_ms)
            || w.indexes_full()
            || relative_offset(w.base_offset(), last_offset).is_none()
            || !w.fits(size);
        if !roll {
            return Ok(());
        }
        // The lowest base that still indexes this batch in int32 (Kafka takes the batch's first
        // offset; the log end is also valid and keeps segments contiguous across a replicated
        // gap, so recovery can tell a lost tail from a gap: only a gap wider than int32 leaves
        // offsets out between segments; docs/design.md, "Append" step 3).
        let new_base = self
            .log_end_offset
            .load(Ordering::Relaxed)
            .max(last_offset.saturating_sub(i32::MAX as i64));
        if seg_size == 0 && new_base == w.base_offset() {
            return Ok(());
        }
        self.roll_at(st, new_base, size, now)
    }

    /// Starts a new active segment at `new_base` and seals the old one. The new segment is
    /// created first, with room for the `size`-byte batch that rolled, so a full disk fails
    /// here with the old segment still active and nothing changed. The rest of its space is
    /// allocated ahead of the writer later, off the append path.
    fn roll_at(
        &self,
        st: &mut AppendState,
        new_base: i64,
        size: usize,
        now: i64,
    ) -> Result<(), AppendError> {
        // A fresh log's checkpoint comes before its second segment (a no-op for any other).
        self.mark_unclean(st)?;
        // The snapshot at the new base offset comes first: if it cannot be written (a full
        // disk) nothing has changed yet.
        st.producers
            .prepare_snapshot(self.env.fs.as_ref(), &self.dir, new_base, true)?;
        self.metrics.snapshot_written();
        let cfg = self.segment_config();
        // A recycled file when the pool has one (its old offsets are all below the log start,
        // so below `new_base`); a fresh one if there is none or it cannot be used.
        let recycled = self.take_pooled().and_then(|path| {
            segment::create_recycled(&self.dir, new_base, &cfg, now, size, &path).ok()
        });
        let made = match recycled {
            Some(w) => {
                self.metrics.recycled();
                Ok(w)
            }
            None => segment::create_with_room(&self.dir, new_base, &cfg, now, size),
        };
        let new = made.map_err(|e| {
                let e = match e {
                    segment::OpenSegmentError::Io(e) => e,
                    other => IoError::new(
                        "create segment",
                        &self.dir,
                        std::io::Error::other(other.to_string()),
                    ),
                };
                // `create` removes what it made when it fails. If even that failed, the old
                // segment must not take the offsets the leftover is named after (a clean open
                // would trust the leftover): read-only, so the next open is unclean and cuts it.
                let log = segment::names::file_path(&self.dir, new_base, segment::names::LOG_EXT);
                if self.env.fs.exists(&log).unwrap_or(true) {
                    let cause = Arc::new(e);
                    st.failure = Some(Arc::clone(&cause));
                    return AppendError::ReadOnly { cause };
                }
                AppendError::Io(e)
            })?;
        let new_segment = Arc::clone(new.segment());
        let old = st.active.replace(new).ok_or(AppendError::Closed)?;
        st.prefault = st.prefault.for_next_segment();
        // The background thread starts on the new segment's space before its next append.
        self.prefault_ahead(st);
        self.segments.write().insert(new_base, new_segment);
        st.dir_dirty = true;
        self.metrics.rolled();
        match old.seal() {
            Ok(sealed) => st.unflushed_sealed.push(sealed),
            Err(e) => {
                let e = Arc::new(e);
                st.failure = Some(Arc::clone(&e));
                return Err(AppendError::ReadOnly { cause: e });
            }
        }
        Ok(())
    }

    /// Whole batches from the one containing `offset`, zero-copy, up to `max_bytes` (at least
    /// one whole batch). Empty at the log end. [`Log::fetch`] says also where to go on from.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, ReadError> {
        let end = self.log_end_offset();
        self.read_below(offset, max_bytes, end)
            .map(|(bytes, _)| bytes)
    }

    /// The first record whose timestamp is ≥ `timestamp`: its offset and timestamp (Kafka's
    /// ListOffsets by time), or `None` if every record is older. The time index and offset
    /// index find the batch; its records are then read (decompressed if need be).
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<segment::TimestampOffset>, ReadError> {
        // The indexes are looked up under the segments' read lock: a truncation shrinks them
        // under the write lock (the batch's bytes, once found, stay mapped whatever happens).
        let found = {
            let segments = self.segments.read();
            let mut found = None;
            for segment in segments.values().filter(|s| s.max_timestamp() >= timestamp) {
                let view = segment.view().map_err(ReadError::Io)?;
                if let Some(position) = segment.find_timestamp(&view, timestamp)? {
                    found = Some((Arc::clone(segment), view, position));
                    break;
                }
            }
            found
        };
        self.unmap_least_read();
        let Some((segment, view, position)) = found else {
            return Ok(None);
        };
        let corrupt = |error: format::BatchError| segment::CorruptSegment {
            path: segment.log_path().to_path_buf(),
            position,
            problem: error.into(),
        };
        let batch = format::RecordBatch::parse(&view.data()[position..]).map_err(corrupt)?;
        // Kafka answers with the first record at or after the target, not its batch.
        let records = batch.records_buf().map_err(corrupt)?;
        let start = self.log_start_offset();
        for record in batch.iter_records(&records) {
            let record = record.map_err(corrupt)?;
            if record.timestamp >= timestamp && record.offset >= start {
                return Ok(Some(segment::TimestampOffset {
                    timestamp: record.timestamp,
                    offset: record.offset,
                }));
            }
        }
        // maxTimestamp said a record qualifies; if none did (a header that lies, or
        // every such record below the log start), answer with the batch like Kafka's
        // shallow fallback.
        Ok(Some(segment::TimestampOffset {
            timestamp: batch.max_timestamp(),
            offset: batch.base_offset().max(start),
        }))
    }

    /// Drops the log without closing it, as a crash of the process would leave it (tests).
    #[cfg(feature = "internals")]
    pub fn abandon(self) {
        self.abandon_on_drop();
    }

}

impl Drop for Log {
    fn drop(&mut self) {
        if !self.abandoned.load(Ordering::Acquire) {
            // Best effort, like a File's close: callers who care call `close` and see errors.
            let _ = self.close();
        }
    }
}

/// Takes the directory's lock, and a shared lock on its parent's `.lock` if the parent is a
/// log dir (see [`LOCK_FILE_NAME`]), or says who holds them.
fn lock_dir(fs: &dyn crate::io::FileSystem, dir: &Path) -> Result<FileLock, OpenError> {
    let path = dir.join(LOCK_FILE_NAME);
    let holder = format!("process {}", std::process::id());
    let own = match fs.try_lock(&path, &holder) {
        Ok(lock) => lock,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(OpenError::Locked {
                dir: dir.to_path_buf(),
                holder: lock_holder(fs, &path),
            })
        }
        Err(e) => return Err(OpenError::Io(IoError::new("lock", &path, e))),
    };
    let log_dir = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let manager_lock = log_dir.join(LOG_DIR_LOCK_FILE);
    match fs.try_lock_shared(&manager_lock) {
        Ok(shared) => Ok(FileLock::new(Box::new((own, shared)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(own),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(OpenError::LogDirLocked {
            dir: dir.to_path_buf(),
            log_dir: log_dir.to_path_buf(),
            holder: lock_holder(fs, &manager_lock),
        }),
        Err(e) => Err(OpenError::Io(IoError::new("lock", &manager_lock, e))),
    }
}

/// Checks, for a log its manager opens, that no standalone log holds the directory's
/// [`LOCK_FILE_NAME`] (nothing is created or held).
pub(super) fn check_unlocked(fs: &dyn crate::io::FileSystem, dir: &Path) -> Result<(), OpenError> {
    let path = dir.join(LOCK_FILE_NAME);
    match fs.try_lock_shared(&path) {
        Ok(_released) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(OpenError::Locked {
            dir: dir.to_path_buf(),
            holder: lock_holder(fs, &path),
        }),
        Err(e) => Err(OpenError::Io(IoError::new("lock", &path, e))),
    }
}

/// Who holds a lock, as its file says (`process <pid>`).
fn lock_holder(fs: &dyn crate::io::FileSystem, path: &Path) -> String {
    let me = format!("process {}", std::process::id());
    let named = crate::io::read_small_file(fs, path, 256)
        .ok()
        .and_then(|f| match f {
            crate::io::SmallFile::Bytes(b) => String::from_utf8(b).ok(),
            _ => None,
        })
        .filter(|h| !h.is_empty());
    match named {
        Some(h) if h == me => format!("{h}: this process has it open"),
        Some(h) => h,
        None => "unknown holder".to_string(),
    }
}

/// The leader epoch a log opens with: the latest of its epoch cache, or of the newest batch the
/// segments hold if that is later (a truncation or a raised log start can leave the cache
/// without it): the epochs stamped on a log never go back. Every append notes its batch's epoch
/// in the cache before writing the batch; a truncation drops only entries whose batches it
/// drops, and a raised log start keeps the latest entry unless nothing is left above it. So a
/// cache that is not empty is never behind the batches, and a clean open with one reads no
/// batch for it.
fn leader_epoch_at_open(
    epochs: &epochs::LeaderEpochCache,
    clean_on_disk: bool,
    segments: &BTreeMap<i64, Arc<Segment>>,
) -> i32 {
    let newest_batch_epoch = if clean_on_disk && epochs.latest_epoch().is_some() {
        None
    } else {
        segments
            .values()
            .rev()
            .find(|s| !s.is_empty())
            .and_then(|s| s.read(s.next_offset() - 1, 1, s.next_offset()).ok().flatten())
            .and_then(|r| {
                format::RecordBatch::parse(&r.bytes)
                    .ok()
                    .map(|b| b.partition_leader_epoch())
            })
    };
    epochs
        .latest_epoch()
        .max(newest_batch_epoch)
        .unwrap_or(0)
        .max(0)
}

/// Counts an append as in flight until dropped (on every path out of `append`).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(counter: &'a AtomicUsize) -> InFlight<'a> {
        counter.fetch_add(1, Ordering::AcqRel);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a segment writer wrote nothing, as an I/O error naming the file. Index appends cannot
/// fail when the roll rules hold (full indexes and offset overflow roll first, offsets and
/// running maxima only grow): such a failure is a bug, reported as an error. A write through
/// the file can fail as any write can.
fn write_error(segment: &Segment, error: segment::WriteError) -> IoError {
    match error {
        segment::WriteError::Index(error) => IoError::new(
            "index append",
            segment.index_path(),
            std::io::Error::other(error.to_string()),
        ),
        segment::WriteError::Io(error) => {
            IoError::new("pwrite", segment.log_path().to_path_buf(), error)
        }
    }
}

fn flush_to_append_error(e: FlushError) -> AppendError {
    match e {
        FlushError::Io(e) => AppendError::Io(e),
        FlushError::ReadOnly { cause } => AppendError::ReadOnly { cause },
        FlushError::Closed => AppendError::Closed,
    }
}

/// A per-log random roll jitter in `[0, max)` (Kafka's `rollJitterMs`), from the clock.
fn jitter(max: i64, seed: i64) -> i64 {
    if max <= 0 {
        return 0;
    }
    let mut x = seed as u64 ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % max as u64) as i64
}
