//! The background jobs, each on a thread of its own that runs it every interval until the
//! manager stops it, and the checkpoint writes the jobs share with `close`.
//!
//! Cleaning is scheduled here like the others ([`Job::Cleaning`]); what cleans is the
//! manager's [`super::Cleaner`] (by default [`super::Compactor`]): the job, its throttle and
//! the cleaner checkpoint it moves are in `cleaning`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::log_dir;
use super::offsets::{self, Offsets};
use super::partitions;
use super::cleaning::{CleanRequest, Throttle};
use super::{CleanupPolicy, Inner, ManagerError, SlotState};
use crate::log::Log;

/// A background job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Job {
    /// Flushes partitions past their `flush.ms` or `flush.messages`.
    Flush,
    /// Writes every log dir's recovery points and log start offsets.
    Checkpoints,
    /// Writes every log dir's high watermarks (and the cleaner's offsets).
    HighWatermarks,
    /// Applies retention to every partition.
    Retention,
    /// Forgets expired producers.
    ProducerExpiry,
    /// Snapshots producer state whose replay is over the budget.
    Snapshots,
    /// Removes `.deleted` files and deleted partitions whose delay is over.
    Deletion,
    /// Cleans compacted partitions with the manager's [`super::Cleaner`], if it has one.
    Cleaning,
    /// Uploads sealed segments to the manager's object store and applies local retention, if
    /// it has one ([`super::LogManager::set_tiering`]).
    Tiering,
}

impl Job {
    /// Every job.
    pub const ALL: [Job; 9] = [
        Job::Flush,
        Job::Checkpoints,
        Job::HighWatermarks,
        Job::Retention,
        Job::ProducerExpiry,
        Job::Snapshots,
        Job::Deletion,
        Job::Cleaning,
        Job::Tiering,
    ];

    /// Its name: `flush`, `checkpoints`, `high_watermarks`, `retention`, `producer_expiry`,
    /// `snapshots`, `deletion`, `cleaning`, `tiering`.
    pub fn name(self) -> &'static str {
        match self {
            Job::Flush => "flush",
            Job::Checkpoints => "checkpoints",
            Job::HighWatermarks => "high_watermarks",
            Job::Retention => "retention",
            Job::ProducerExpiry => "producer_expiry",
            Job::Snapshots => "snapshots",
            Job::Deletion => "deletion",
            Job::Cleaning => "cleaning",
            Job::Tiering => "tiering",
        }
    }

    fn interval(self, inner: &Inner) -> Option<Duration> {
        let i = &inner.config.jobs;
        match self {
            Job::Flush => i.flush,
            Job::Checkpoints => i.checkpoints,
            Job::HighWatermarks => i.high_watermarks,
            Job::Retention => i.retention,
            Job::ProducerExpiry => i.producer_expiry,
            Job::Snapshots => i.snapshots,
            Job::Deletion => i.deletion,
            Job::Cleaning => i.cleaning,
            Job::Tiering => i.tiering,
        }
    }
}

/// What one run of a job did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobReport {
    /// Partitions (or log dirs, for the checkpoint jobs) it looked at.
    pub visited: usize,
    /// What it did: partitions flushed, segments deleted, producers expired, snapshots taken,
    /// checkpoint files written, directories removed.
    pub acted: usize,
    /// What failed, named (a partition or a file) with why; the job goes on with the others.
    pub failures: Vec<String>,
}

/// How a job has done since the manager opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStats {
    /// Runs, by its thread or by [`super::LogManager::run_job`].
    pub runs: u64,
    /// The sum of their [`JobReport::acted`].
    pub acted: u64,
    /// Failures over all runs.
    pub failures: u64,
    /// The last failure.
    pub last_failure: Option<String>,
}

/// The running job threads.
pub(crate) struct Running {
    stop: Arc<Stop>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Running {
    /// Stops every job thread and waits for them (a run in progress ends first).
    pub fn stop(self) {
        *self.stop.stopped.lock() = true;
        self.stop.wake.notify_all();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Starts a thread for each job with an interval.
pub(crate) fn start(inner: &Arc<Inner>) -> Running {
    let stop = Arc::new(Stop::default());
    let mut threads = Vec::new();
    for job in Job::ALL {
        let Some(every) = job.interval(inner) else {
            continue;
        };
        let (shared, stop) = (Arc::clone(inner), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name(format!("oncelog-{}", job.name()))
            .spawn(move || loop {
                let deadline = Instant::now() + every;
                let mut stopped = stop.stopped.lock();
                while !*stopped && Instant::now() < deadline {
                    stop.wake.wait_until(&mut stopped, deadline);
                }
                if *stopped {
                    return;
                }
                drop(stopped);
                run(&shared, job);
            });
        match spawned {
            Ok(t) => threads.push(t),
            // A job that cannot get a thread is recorded as failing; run_job still runs it.
            Err(e) => {
                let report = JobReport {
                    failures: vec![format!("no thread: {e}")],
                    ..JobReport::default()
                };
                record(&inner.stats, job, &report)
            }
        }
    }
    Running { stop, threads }
}

fn record(stats: &Mutex<BTreeMap<Job, JobStats>>, job: Job, report: &JobReport) {
    let mut stats = stats.lock();
    let s = stats.entry(job).or_default();
    s.runs += 1;
    s.acted += report.acted as u64;
    s.failures += report.failures.len() as u64;
    if let Some(f) = report.failures.last() {
        s.last_failure = Some(f.clone());
    }
}

/// Runs one job now.
pub(crate) fn run(inner: &Inner, job: Job) -> JobReport {
    let report = match job {
        Job::Flush => flush(inner),
        Job::Checkpoints => checkpoints(inner, Files::RecoveryAndStart),
        Job::HighWatermarks => checkpoints(inner, Files::HighWatermarksAndCleaner),
        Job::Retention => each_log(inner, |log, now| match log.maintenance().enforce_retention(now) {
            Ok(r) => Ok(r.deleted.len()),
            Err(e) => Err(e.to_string()),
        }),
        Job::ProducerExpiry => each_log(inner, |log, now| Ok(log.maintenance().expire_producers(now))),
        Job::Snapshots => {
            let budget = inner.config.replay_budget_bytes;
            each_log(inner, |log, _| match log.maintenance().snapshot_if_behind(budget) {
                Ok(took) => Ok(took as usize),
                Err(e) => Err(e.to_string()),
            })
        }
        Job::Deletion => deletion(inner),
        Job::Cleaning => cleaning(inner),
        Job::Tiering => super::tiering::run(inner),
    };
    record(&inner.stats, job, &report);
    report
}

/// Runs `work` on every online log; a closed one (deleted meanwhile) is skipped.
fn each_log(inner: &Inner, work: impl Fn(&Log, i64) -> Result<usize, String>) -> JobReport {
    let mut report = JobReport::default();
    for slot in inner.slots() {
        let Some((log, _)) = slot.online() else {
            continue;
        };
        report.visited += 1;
        match work(log, inner.now_ms()) {
            Ok(n) => report.acted += n,
            Err(_) if log.is_closed() => {}
            Err(e) => report.failures.push(format!("{}: {e}", slot.tp)),
        }
    }
    report
}

/// `flush.messages` and `flush.ms`: the appender never waits for these flushes. The partitions
/// due are flushed together, their syncs issued in parallel ([`super::flush_many`]). Also
/// closes the write descriptors of partitions that appended nothing since the last run.
fn flush(inner: &Inner) -> JobReport {
    release_idle_descriptors(inner);
    let mut report = JobReport::default();
    let mut due = Vec::new();
    for slot in inner.slots() {
        let Some((log, config)) = slot.online() else {
            continue;
        };
        if config.flush_messages.is_none() && config.flush_ms.is_none() {
            continue;
        }
        report.visited += 1;
        let now = inner.now_ms();
        let unflushed = (log.log_end_offset() - log.recovery_point()).max(0) as u64;
        let mut since = slot.dirty_since.lock();
        if unflushed == 0 {
            *since = None;
            continue;
        }
        let dirty_since = *since.get_or_insert(now);
        let by_count = config.flush_messages.is_some_and(|n| unflushed >= n);
        let by_time = config
            .flush_ms
            .is_some_and(|ms| now.saturating_sub(dirty_since) >= ms as i64);
        if !(by_count || by_time) {
            continue;
        }
        drop(since);
        due.push(slot);
    }
    let targets: Vec<_> = due.iter().map(|s| (s.tp.clone(), i64::MAX)).collect();
    for (slot, flushed) in due.iter().zip(super::flush_many(inner, &targets)) {
        match flushed {
            Ok(()) => {
                *slot.dirty_since.lock() = None;
                report.acted += 1;
            }
            // Closed or deleted since it was seen due.
            Err(ManagerError::UnknownPartition { .. }) => {}
            Err(ManagerError::Flush { error, .. }) => {
                if !slot.online().is_some_and(|(log, _)| log.is_closed()) {
                    report.failures.push(format!("{}: {error}", slot.tp));
                }
            }
            Err(e) => report.failures.push(format!("{}: {e}", slot.tp)),
        }
    }
    report
}

/// Closes the descriptor of every partition whose writer holds one and appended nothing
/// since the last call ([`ManagerConfig::write_descriptors`](super::ManagerConfig)).
fn release_idle_descriptors(inner: &Inner) {
    if inner.descriptors.held() == 0 {
        return;
    }
    for slot in inner.slots() {
        if let Some((log, _)) = slot.online() {
            log.release_idle_descriptor();
        }
    }
}

fn checkpoints(inner: &Inner, files: Files) -> JobReport {
    let mut report = JobReport::default();
    for i in 0..inner.dirs.len() {
        report.visited += 1;
        match write_checkpoints(inner, i, files) {
            Ok(n) => report.acted += n,
            Err(e) => report.failures.push(e.to_string()),
        }
    }
    report
}

fn deletion(inner: &Inner) -> JobReport {
    let mut report = each_log(inner, |log, now| {
        log.maintenance().remove_deleted_files(now).map(|()| 0).map_err(|e| e.to_string())
    });
    let (removed, failed) = partitions::remove_due(inner, inner.now_ms());
    report.acted += removed;
    report
        .failures
        .extend(failed.into_iter().map(|(p, e)| format!("{}: {e}", p.display())));
    report
}

/// Runs the manager's cleaner on every online partition whose policy includes `compact`, from
/// its cleaner offset, and moves the offset to what the cleaner answers (in the log's own
/// `cleaner-offset-checkpoint`, the one source of truth: `log::cleaner_offset`).
fn cleaning(inner: &Inner) -> JobReport {
    let mut report = JobReport::default();
    let Some(cleaner) = inner.cleaner.read().clone() else {
        return report;
    };
    let throttle = Throttle::new(inner.config.cleaner_bytes_per_second, &inner.closed);
    for slot in inner.slots() {
        let Some((log, config)) = slot.online() else {
            continue;
        };
        if config.cleanup_policy == CleanupPolicy::Delete {
            continue;
        }
        if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        report.visited += 1;
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let from = slot.cleaner_offset(log).map_or(start, |c| c.clamp(start, end.max(start)));
        let request = CleanRequest {
            partition: &slot.tp,
            policy: config.cleanup_policy,
            from,
            now_ms: inner.now_ms(),
            throttle: &throttle,
        };
        match cleaner.clean(log, &request) {
            Ok(done) if (from..=log.log_end_offset()).contains(&done.clean_to) => {
                if let Err(e) = log.store_cleaner_offset(done.clean_to) {
                    report.failures.push(format!("{}: {e}", slot.tp));
                } else if done.bytes_read > 0 {
                    report.acted += 1;
                }
            }
            Ok(done) => report.failures.push(format!(
                "{}: the cleaner answered clean to {}, outside {from}..={}; the cleaner \
                 checkpoint stays at {from}",
                slot.tp,
                done.clean_to,
                log.log_end_offset()
            )),
            Err(_) if log.is_closed() => {}
            Err(e) => report.failures.push(format!("{}: {e}", slot.tp)),
        }
    }
    report
}

/// Which of a log dir's checkpoint files to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Files {
    /// Recovery points and log start offsets (Kafka writes them together, every 60 s).
    RecoveryAndStart,
    /// High watermarks, and the cleaner's offsets.
    HighWatermarksAndCleaner,
    All,
}

/// Writes the checkpoint files of log dir `i` from its partitions: an online one's offsets
/// now, an offline one's as they were read at open. Returns the files written.
pub(crate) fn write_checkpoints(inner: &Inner, i: usize, files: Files) -> Result<usize, ManagerError> {
    let dir = &inner.dirs[i];
    let _one_writer = dir.checkpoint_writes.lock();
    let (mut rp, mut start, mut hw, mut cleaner) =
        (Offsets::new(), Offsets::new(), Offsets::new(), Offsets::new());
    for slot in inner.slots().into_iter().filter(|s| s.dir == i) {
        let tp = slot.tp.clone();
        let k = slot.kept;
        match &slot.state {
            SlotState::Online { log, .. } => {
                let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
                rp.insert(tp.clone(), log.recovery_point());
                // Kafka lists a log start only above the first segment's base.
                if log.first_segment_base().is_some_and(|b| log_start > b) {
                    start.insert(tp.clone(), log_start);
                }
                hw.insert(tp.clone(), log.high_watermark());
                if let Some(c) = slot.cleaner_offset(log) {
                    cleaner.insert(tp, c.clamp(log_start, log_end.max(log_start)));
                }
            }
            SlotState::Offline(_) => {
                let keep = |m: &mut Offsets, v: Option<i64>| {
                    if let Some(v) = v {
                        m.insert(tp.clone(), v);
                    }
                };
                keep(&mut rp, k.recovery_point);
                keep(&mut start, k.log_start_offset);
                keep(&mut hw, k.high_watermark);
                keep(&mut cleaner, k.cleaner_offset);
            }
        }
    }
    let fs = inner.env.fs.as_ref();
    let mut written = 0;
    let mut write = |name: &str, offsets: &Offsets| -> Result<(), ManagerError> {
        offsets::write(fs, &dir.path, name, offsets)?;
        written += 1;
        Ok(())
    };
    if files != Files::HighWatermarksAndCleaner {
        write(offsets::RECOVERY_POINTS, &rp)?;
        write(offsets::LOG_START_OFFSETS, &start)?;
    }
    if files != Files::RecoveryAndStart {
        write(offsets::HIGH_WATERMARKS, &hw)?;
        write(offsets::CLEANER_OFFSETS, &cleaner)?;
    }
    Ok(written)
}

/// The clean close, once the jobs are stopped: every log closed (in parallel), every
/// checkpoint written, the marker in every dir whose partitions all closed, the locks released.
pub(crate) fn close(inner: &Inner) -> Result<(), ManagerError> {
    let slots = inner.slots();
    let threads = inner.config.recovery_threads.clamp(1, slots.len().max(1));
    let closed = super::open::parallel(threads, &slots, |slot| match &slot.state {
        SlotState::Online { log, .. } => log.close().err(),
        SlotState::Offline(_) => None,
    });
    let mut failed = Vec::new();
    let mut unclean = vec![false; inner.dirs.len()];
    for (slot, error) in slots.iter().zip(closed) {
        if matches!(slot.state, SlotState::Offline(_)) {
            unclean[slot.dir] = true;
        }
        if let Some(e) = error {
            unclean[slot.dir] = true;
            failed.push((slot.tp.clone(), e));
        }
    }
    let mut first_error = None;
    for (i, d) in inner.dirs.iter().enumerate() {
        let marked = write_checkpoints(inner, i, Files::All).and_then(|_| {
            // An offline partition was not recovered: the next open must not take its log dir
            // for cleanly shut down, or it would trust what it could not check.
            if !unclean[i] {
                log_dir::write_clean_shutdown(inner.env.fs.as_ref(), &d.path, d.broker_epoch)?;
            }
            Ok(())
        });
        if let Err(e) = marked {
            first_error.get_or_insert(e);
        }
        d.lock.lock().take();
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if !failed.is_empty() {
        return Err(ManagerError::Close { failed });
    }
    Ok(())
}

