//! Many partitions in one or more Kafka log dirs (docs/design.md, "Many partitions"): a lock per log dir,
//! `meta.properties`, Kafka's offset checkpoint files and clean-shutdown marker, partitions
//! opened in parallel, created and deleted as Kafka names them, and background jobs.
//!
//! The layers: [`topic`] (names), [`offsets`] and [`meta`] (the log dir's files, pure
//! encode/decode beside their I/O), [`log_dir`] (one log dir), `open` (the parallel open and
//! its report), `partitions` (create and delete), `jobs` (the background threads, and the
//! checkpoint writes close shares with them).

mod cleaning;
mod alter;
mod config;
mod error;
mod jobs;
pub mod log_dir;
pub mod meta;
pub mod offsets;
mod open;
mod partitions;
mod sync;
mod tiering;
pub mod topic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::io::FileLock;
use crate::log::{CleanupPolicy, Environment, Log};
use crate::segment::WriteDescriptors;

pub use cleaning::{CleanRequest, Cleaned, Cleaner, Compactor, Throttle};
pub use config::{
    JobIntervals, ManagerConfig, PartitionConfig, ResolvedConfig, PARTITION_CONFIG_FILE,
};
pub use error::{ManagerError, PartitionFailure};
pub use jobs::{Job, JobReport, JobStats};
pub use log_dir::{DirCheckpoints, FoundDir, LogDirContents};
pub use meta::MetaProperties;
pub use open::{LogDirReport, ManagerOpenReport, PartitionOpened, PartitionReport};
pub use tiering::{TierStatus, Tiering};
pub use topic::{parse_dir_name, validate_topic, DirEntry, TopicError, TopicPartition};

/// The partitions of one or more Kafka log dirs, opened together, with background flush,
/// checkpoints, retention, producer expiry, snapshots and file deletion on threads it owns.
/// `Send + Sync`; each partition is an [`Arc<Log>`] to use as a standalone log is used.
///
/// [`LogManager::close`] stops the jobs, closes every log, writes every checkpoint file and
/// the clean-shutdown marker. Dropped without `close`, it leaves the disk as a crash would:
/// the jobs stop, nothing more is flushed, and no marker is written.
pub struct LogManager {
    inner: Arc<Inner>,
    jobs: Mutex<Option<jobs::Running>>,
    report: ManagerOpenReport,
}

/// What the manager and its job threads share.
pub(crate) struct Inner {
    env: Environment,
    config: ManagerConfig,
    /// The descriptors the partitions' writers may hold ([`ManagerConfig::write_descriptors`]).
    descriptors: Arc<WriteDescriptors>,
    dirs: Vec<Dir>,
    partitions: RwLock<BTreeMap<TopicPartition, Arc<Slot>>>,
    /// Serialises creations and deletions with each other (reads go on).
    changes: Mutex<()>,
    /// Deleted partitions' directories, waiting for their removal.
    doomed: Mutex<Vec<partitions::DoomedDir>>,
    closed: AtomicBool,
    stats: Mutex<BTreeMap<Job, JobStats>>,
    /// What the cleaning job runs: [`Compactor`] or what [`LogManager::set_cleaner`] gave.
    cleaner: RwLock<Option<Arc<dyn Cleaner>>>,
    /// Where the tiering job uploads: what [`LogManager::set_tiering`] gave.
    tiering: RwLock<Option<Arc<Tiering>>>,
    /// Each partition's tiering, as the tiering job last left it.
    tier_status: Mutex<BTreeMap<TopicPartition, TierStatus>>,
}

/// An open log dir.
pub(crate) struct Dir {
    path: PathBuf,
    /// Held until the manager is closed or dropped.
    lock: Mutex<Option<FileLock>>,
    /// The broker epoch to write into the clean-shutdown marker (the one found at open, or
    /// Kafka's -1 for none).
    broker_epoch: i64,
    /// Serialises the writes of its checkpoint files.
    checkpoint_writes: Mutex<()>,
    /// Its partitions' syncs, issued in parallel ([`LogManager::flush_many`], the flush job).
    syncs: sync::SyncPool,
}

/// One partition.
pub(crate) struct Slot {
    tp: TopicPartition,
    dir: usize,
    path: PathBuf,
    state: SlotState,
    /// What the log dir's checkpoint files held for it at open: written back as they were
    /// while it is offline, so nothing they know (a raised log start) is lost.
    kept: Kept,
    /// When the flush job first saw it with unflushed appends (clock ms), for `flush.ms`.
    dirty_since: Mutex<Option<i64>>,
}

impl Slot {
    /// Where the next cleaning of its (online) `log` starts: the cleaner offset the log keeps
    /// in its directory, or, for a partition directory without one (a Kafka log dir, or one
    /// an older manager wrote), the log dir's `cleaner-offset-checkpoint` entry read at open.
    fn cleaner_offset(&self, log: &Log) -> Option<i64> {
        log.stored_cleaner_offset().or(self.kept.cleaner_offset)
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kept {
    recovery_point: Option<i64>,
    log_start_offset: Option<i64>,
    high_watermark: Option<i64>,
    cleaner_offset: Option<i64>,
}

pub(crate) enum SlotState {
    Online {
        log: Arc<Log>,
        config: Box<ResolvedConfig>,
    },
    Offline(Arc<PartitionFailure>),
}

/// A partition as [`LogManager::list`] shows it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionInfo {
    /// The partition.
    pub partition: TopicPartition,
    /// Its directory.
    pub dir: PathBuf,
    /// Why it is offline, if it is: it did not open.
    pub offline: Option<Arc<PartitionFailure>>,
}

impl LogManager {
    /// Opens the log dirs `dirs` (created if missing) on the real file system: locks each,
    /// checks its `meta.properties` (writing one into a dir without), reads its offset
    /// checkpoints, and opens every partition in parallel. A partition that does not open is
    /// reported in [`LogManager::open_report`] and left offline; the others open.
    pub fn open(
        dirs: &[impl AsRef<Path>],
        config: ManagerConfig,
    ) -> Result<LogManager, ManagerError> {
        LogManager::open_in(Environment::default(), dirs, config)
    }

    /// [`LogManager::open`] with an explicit file system and clock.
    pub fn open_in(
        env: Environment,
        dirs: &[impl AsRef<Path>],
        config: ManagerConfig,
    ) -> Result<LogManager, ManagerError> {
        LogManager::open_reporting(env, dirs, config, &|_| {})
    }

    /// [`LogManager::open_in`], calling `on_partition` (from the opening threads) as each
    /// partition has been opened or has failed: a progress report.
    pub fn open_reporting(
        env: Environment,
        dirs: &[impl AsRef<Path>],
        config: ManagerConfig,
        on_partition: &(dyn Fn(&PartitionReport) + Sync),
    ) -> Result<LogManager, ManagerError> {
        let dirs: Vec<PathBuf> = dirs.iter().map(|d| d.as_ref().to_path_buf()).collect();
        let (inner, report) = open::open(env, &dirs, config, on_partition)?;
        let inner = Arc::new(inner);
        let running = jobs::start(&inner);
        Ok(LogManager {
            inner,
            jobs: Mutex::new(Some(running)),
            report,
        })
    }

    /// What opening found: each partition's recovery, or why it did not open.
    pub fn open_report(&self) -> &ManagerOpenReport {
        &self.report
    }

    /// The log dirs, in the order given.
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        self.inner.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// The manager's configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// The log of a partition.
    pub fn get(&self, topic: &str, partition: i32) -> Result<Arc<Log>, ManagerError> {
        self.inner.check_open()?;
        let tp = TopicPartition::new(topic, partition);
        let slot = self.inner.partitions.read().get(&tp).cloned();
        match slot {
            None => Err(ManagerError::UnknownPartition { partition: tp }),
            Some(slot) => slot.log(),
        }
    }

    /// Every partition, in order, online or not.
    pub fn list(&self) -> Vec<PartitionInfo> {
        self.inner
            .partitions
            .read()
            .values()
            .map(|s| PartitionInfo {
                partition: s.tp.clone(),
                dir: s.path.clone(),
                offline: match &s.state {
                    SlotState::Online { .. } => None,
                    SlotState::Offline(f) => Some(Arc::clone(f)),
                },
            })
            .collect()
    }

    /// The resolved settings of an online partition.
    pub fn partition_config(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<ResolvedConfig, ManagerError> {
        let tp = TopicPartition::new(topic, partition);
        let slot = self.inner.partitions.read().get(&tp).cloned();
        match slot.as_deref().map(|s| &s.state) {
            None => Err(ManagerError::UnknownPartition { partition: tp }),
            Some(SlotState::Online { config, .. }) => Ok((**config).clone()),
            Some(SlotState::Offline(f)) => Err(ManagerError::PartitionOffline {
                partition: tp,
                failure: Arc::clone(f),
            }),
        }
    }

    /// Creates partition `partition` of `topic` in the log dir with the fewest partitions,
    /// with `config` over the manager's defaults (kept in its `oncelog.properties`). Refuses a
    /// topic name Kafka would refuse, one colliding with an existing topic, and a partition
    /// that exists.
    pub fn create(
        &self,
        topic: &str,
        partition: i32,
        config: PartitionConfig,
    ) -> Result<Arc<Log>, ManagerError> {
        self.inner.check_open()?;
        let request = [(TopicPartition::new(topic, partition), config)];
        let mut logs = partitions::create_many(&self.inner, &request)?;
        // One log per request: never empty (an error rather than a panic all the same).
        logs.pop().ok_or(ManagerError::Closed)
    }

    /// Creates the partitions `partitions`, all or none, as [`LogManager::create`] creates one,
    /// for the cost of one: no partition's files are synced, and each log dir that receives
    /// some is synced once for the batch. When it returns, every one of them is durable; a
    /// crash before it returns keeps any of them (each whole, an empty log with its settings)
    /// or none. The logs are returned in the order asked.
    pub fn create_many(
        &self,
        partitions: &[(TopicPartition, PartitionConfig)],
    ) -> Result<Vec<Arc<Log>>, ManagerError> {
        self.inner.check_open()?;
        partitions::create_many(&self.inner, partitions)
    }

    /// Makes each partition of `partitions` durable below its offset (`i64::MAX`: everything
    /// appended so far) and returns when all of them are, with one answer per entry, in the
    /// order given: what a broker needs to answer an `acks=all` produce request that wrote to
    /// many partitions. Each partition is its own files and gets its own sync (its
    /// `Log::flush_to`, whose group commit other callers share), but the syncs are issued
    /// together, from this thread and its log dir's sync threads (up to
    /// [`ManagerConfig::sync_threads`]), so the device serves them at once instead of one after
    /// another. A partition's recovery point moves only after its own sync, as with any flush.
    pub fn flush_many(&self, partitions: &[(TopicPartition, i64)]) -> Vec<Result<(), ManagerError>> {
        if self.inner.check_open().is_err() {
            return partitions.iter().map(|_| Err(ManagerError::Closed)).collect();
        }
        flush_many(&self.inner, partitions)
    }

    /// Deletes a partition (online or offline): its log is closed, its directory renamed to
    /// Kafka's `<topic>-<n>.<id>-delete` (durably: from then on no open brings it back) and
    /// removed by the deletion job once `file.delete.delay.ms` is over. Handles to its log
    /// answer `closed` from then on.
    pub fn delete(&self, topic: &str, partition: i32) -> Result<(), ManagerError> {
        self.inner.check_open()?;
        partitions::delete(&self.inner, &TopicPartition::new(topic, partition))
    }

    /// Runs one background job now, on this thread, whatever its interval.
    pub fn run_job(&self, job: Job) -> Result<JobReport, ManagerError> {
        self.inner.check_open()?;
        Ok(jobs::run(&self.inner, job))
    }

    /// Gives the cleaning job ([`Job::Cleaning`]) its cleaner, replacing any earlier one: from
    /// the next run on, each partition whose `cleanup.policy` includes `compact` is cleaned
    /// from its cleaner checkpoint entry. A manager starts with [`Compactor`], the log's own
    /// compaction.
    pub fn set_cleaner(&self, cleaner: Arc<dyn Cleaner>) {
        *self.inner.cleaner.write() = Some(cleaner);
    }

    /// Gives the tiering job ([`Job::Tiering`]) its object store and settings, replacing any
    /// earlier ones: from the next run on, each online partition whose `cleanup.policy` does
    /// not compact has its uploadable segments uploaded under `<root>/<topic>-<n>`, then its
    /// local retention applied (docs/design.md, "Tiered storage"). A root that keys cannot
    /// hold is refused.
    pub fn set_tiering(&self, tiering: Tiering) -> Result<(), crate::tier::TierError> {
        if let Some(reason) = tiering::check_root(&tiering.root) {
            return Err(crate::tier::TierError::BadPartitionPrefix {
                prefix: tiering.root,
                reason,
            });
        }
        *self.inner.tiering.write() = Some(Arc::new(tiering));
        Ok(())
    }

    /// A partition's tiering as the tiering job last left it (`None` before its first run
    /// over the partition).
    pub fn tier_status(&self, topic: &str, partition: i32) -> Option<TierStatus> {
        self.inner
            .tier_status
            .lock()
            .get(&TopicPartition::new(topic, partition))
            .cloned()
    }

    /// How each background job has done so far.
    pub fn job_stats(&self) -> BTreeMap<Job, JobStats> {
        self.inner.stats.lock().clone()
    }

    /// Stops the background jobs (waiting for a run in progress to end), closes every log
    /// (flush, trim, snapshot, clean checkpoint), writes the four offset checkpoints of each
    /// log dir and, in each dir whose partitions all closed cleanly, the clean-shutdown
    /// marker; then releases the locks. A partition that fails to close is reported, and the
    /// others are closed all the same.
    pub fn close(self) -> Result<(), ManagerError> {
        self.shut(true)
    }

    fn shut(&self, clean: bool) -> Result<(), ManagerError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(running) = self.jobs.lock().take() {
            running.stop();
        }
        for d in &self.inner.dirs {
            d.syncs.stop();
        }
        if !clean {
            // A crash, as far as the disk is concerned.
            for slot in self.inner.partitions.read().values() {
                if let SlotState::Online { log, .. } = &slot.state {
                    log.abandon_on_drop();
                }
            }
            for d in &self.inner.dirs {
                d.lock.lock().take();
            }
            return Ok(());
        }
        jobs::close(&self.inner)
    }
}

impl Drop for LogManager {
    fn drop(&mut self) {
        let _ = self.shut(false);
    }
}

impl std::fmt::Debug for LogManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogManager")
            .field("log_dirs", &self.log_dirs())
            .field("partitions", &self.inner.partitions.read().len())
            .finish()
    }
}

impl Inner {
    fn check_open(&self) -> Result<(), ManagerError> {
        match self.closed.load(Ordering::Acquire) {
            true => Err(ManagerError::Closed),
            false => Ok(()),
        }
    }

    /// Every partition, for a job to walk without holding the table's lock.
    fn slots(&self) -> Vec<Arc<Slot>> {
        self.partitions.read().values().cloned().collect()
    }

    fn now_ms(&self) -> i64 {
        self.env.clock.now_ms()
    }
}

impl Slot {
    fn log(&self) -> Result<Arc<Log>, ManagerError> {
        match &self.state {
            SlotState::Online { log, .. } => Ok(Arc::clone(log)),
            SlotState::Offline(f) => Err(ManagerError::PartitionOffline {
                partition: self.tp.clone(),
                failure: Arc::clone(f),
            }),
        }
    }

    fn online(&self) -> Option<(&Arc<Log>, &ResolvedConfig)> {
        match &self.state {
            SlotState::Online { log, config } => Some((log, config.as_ref())),
            SlotState::Offline(_) => None,
        }
    }
}

/// 16 bytes no two calls in any process return alike (ids of new directories): a
/// randomly keyed hash of the time, the process and a counter.
pub(crate) fn random_bytes() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u64(n);
        h.write_u32(std::process::id());
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// [`LogManager::flush_many`] on an open manager; the flush job's path too.
pub(crate) fn flush_many(
    inner: &Inner,
    partitions: &[(TopicPartition, i64)],
) -> Vec<Result<(), ManagerError>> {
    let batch = sync::Batch::new(partitions.len());
    let mut refused: Vec<Option<ManagerError>> = partitions.iter().map(|_| None).collect();
    let mut jobs = Vec::new();
    {
        let table = inner.partitions.read();
        for (i, (tp, to)) in partitions.iter().enumerate() {
            let found = table
                .get(tp)
                .ok_or_else(|| ManagerError::UnknownPartition {
                    partition: tp.clone(),
                })
                .and_then(|slot| Ok((slot.dir, slot.log()?)));
            match found {
                Ok((dir, log)) => jobs.push((i, dir, log, *to)),
                Err(e) => {
                    refused[i] = Some(e);
                    batch.answer(i, Ok(()));
                }
            }
        }
    }
    // The first sync is issued from this thread, the others from the pools.
    let mut jobs = jobs.into_iter();
    let first = jobs.next();
    for (i, dir, log, to) in jobs {
        inner.dirs[dir].syncs.submit(log, to, i, &batch);
    }
    if let Some((i, _, log, to)) = first {
        batch.answer(i, log.flush_to(to));
    }
    batch
        .wait()
        .into_iter()
        .zip(refused)
        .zip(partitions)
        .map(|((flushed, refused), (tp, _))| match refused {
            Some(e) => Err(e),
            None => flushed.map_err(|error| ManagerError::Flush {
                partition: tp.clone(),
                error: Box::new(error),
            }),
        })
        .collect()
}
