//! Opening the log dirs: read everything first and refuse what is malformed (changing
//! nothing but the lock files), then remove the clean-shutdown markers (a crash from here on
//! is unclean, KAFKA-10471), then open the partitions on `recovery_threads` threads. A
//! partition that fails is reported and left offline; the others open.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::config::PartitionConfig;
use super::error::{ManagerError, PartitionFailure};
use super::log_dir::{self, LogDirContents};
use super::meta::{self, MetaProperties};
use super::partitions::DoomedDir;
use super::topic::{validate_topic, DirEntry, TopicPartition};
use super::{Dir, Inner, Kept, ManagerConfig, Slot, SlotState};
use crate::io::FileLock;
use crate::segment::WriteDescriptors;
use crate::io::IoResultExt;
use crate::log::{
    Environment, Exclusion, Log, LogDirOffsets, ProducerLoadReport, RecoveryReport,
};

/// What opening a partition found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionOpened {
    /// The log's recovery: what was validated, vouched for, cut, rebuilt.
    pub recovery: RecoveryReport,
    /// How its producer state was loaded.
    pub producers: ProducerLoadReport,
    /// Its log start offset.
    pub log_start_offset: i64,
    /// Its log end offset.
    pub log_end_offset: i64,
    /// Its segments.
    pub segments: usize,
}

/// One partition's open.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionReport {
    /// The partition.
    pub partition: TopicPartition,
    /// Its directory.
    pub dir: PathBuf,
    /// How long its open took.
    pub duration: Duration,
    /// What it found, or why it failed (the partition is then offline).
    pub outcome: Result<PartitionOpened, Arc<PartitionFailure>>,
}

/// One log dir's open.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LogDirReport {
    /// The log dir.
    pub path: PathBuf,
    /// Whether `.kafka_cleanshutdown` was there (it is removed at open).
    pub clean_shutdown: bool,
    /// Whether it had no `meta.properties` and one was written.
    pub meta_written: bool,
    /// Deleted partitions' directories found, to be removed by the deletion job.
    pub deleted: Vec<PathBuf>,
    /// Directories that are not partitions this manager opens, and why.
    pub ignored: Vec<(PathBuf, String)>,
}

/// What [`super::LogManager::open`] found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ManagerOpenReport {
    /// Every partition, in order.
    pub partitions: Vec<PartitionReport>,
    /// Every log dir, in the order given.
    pub log_dirs: Vec<LogDirReport>,
    /// The threads partitions were opened on.
    pub threads: usize,
    /// How long the whole open took.
    pub duration: Duration,
}

impl ManagerOpenReport {
    /// Partitions that opened.
    pub fn opened(&self) -> usize {
        self.partitions.iter().filter(|p| p.outcome.is_ok()).count()
    }

    /// Partitions that did not open, with why.
    pub fn failures(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionFailure)> {
        self.partitions
            .iter()
            .filter_map(|p| p.outcome.as_ref().err().map(|f| (&p.partition, f.as_ref())))
    }

    /// Partitions whose own checkpoint or whose log dir's said they were closed cleanly.
    pub fn clean(&self) -> usize {
        self.recoveries().filter(|r| r.clean_shutdown).count()
    }

    /// Segments validated batch by batch, over all partitions.
    pub fn segments_validated(&self) -> usize {
        self.recoveries().map(|r| r.segments_validated).sum()
    }

    /// Bytes validated, over all partitions.
    pub fn bytes_validated(&self) -> u64 {
        self.recoveries().map(|r| r.bytes_validated).sum()
    }

    /// Segments trusted on the log dir's Kafka checkpoints, over all partitions.
    pub fn segments_vouched(&self) -> usize {
        self.recoveries().map(|r| r.segments_vouched).sum()
    }

    fn recoveries(&self) -> impl Iterator<Item = &RecoveryReport> {
        self.partitions
            .iter()
            .filter_map(|p| p.outcome.as_ref().ok().map(|o| &o.recovery))
    }
}

/// A partition to open, and what its log dir knows of it.
struct Pending {
    dir: usize,
    tp: TopicPartition,
    path: PathBuf,
    offsets: LogDirOffsets,
    kept: Kept,
}

pub(super) fn open(
    env: Environment,
    paths: &[PathBuf],
    config: ManagerConfig,
    on_partition: &(dyn Fn(&PartitionReport) + Sync),
) -> Result<(Inner, ManagerOpenReport), ManagerError> {
    let started = Instant::now();
    check_config(&config, paths)?;
    let fs = env.fs.as_ref();

    // 1. Read every log dir; refuse what is malformed before changing anything.
    let (read, metas) = read_log_dirs(fs, paths, &config)?;

    // 2. From here on a crash is an unclean shutdown; new dirs get their meta.properties.
    let now = env.clock.now_ms();
    let mut found = Found {
        sync_threads: config.sync_threads,
        ..Found::default()
    };
    for (i, ((lock, contents), meta)) in read.into_iter().zip(metas).enumerate() {
        let delete_due_ms = now + config.log.file_delete_delay_ms;
        found.add_dir(fs, i, lock, contents, &meta, delete_due_ms)?;
    }
    let Found {
        dirs,
        dir_reports,
        pending,
        doomed,
        stale,
        ..
    } = found;

    // 3. The partitions, in parallel.
    let threads = config.recovery_threads.clamp(1, pending.len().max(1));
    let descriptors = WriteDescriptors::new(config.write_descriptors);
    let (table, reports) =
        open_partitions(&env, &config, &descriptors, pending, threads, on_partition);
    let inner = Inner {
        env,
        config,
        descriptors,
        dirs,
        partitions: RwLock::new(table),
        changes: Mutex::new(()),
        doomed: Mutex::new(doomed),
        closed: AtomicBool::new(false),
        stats: Mutex::new(BTreeMap::new()),
        cleaner: RwLock::new(Some(Arc::new(super::cleaning::Compactor))),
        tiering: RwLock::new(None),
        tier_status: Mutex::new(BTreeMap::new()),
    };
    // Entries of partitions that are gone (a deletion a crash interrupted before the files
    // were rewritten) must not vouch for a partition created under the same name later.
    for i in stale {
        super::jobs::write_checkpoints(&inner, i, super::jobs::Files::All)?;
    }
    let report = ManagerOpenReport {
        partitions: reports,
        log_dirs: dir_reports,
        threads,
        duration: started.elapsed(),
    };
    Ok((inner, report))
}


/// Reads every log dir (locking it) and checks their `meta.properties` and that no partition
/// is in two of them, before anything is changed.
#[allow(clippy::type_complexity)]
fn read_log_dirs(
    fs: &dyn crate::io::FileSystem,
    paths: &[PathBuf],
    config: &ManagerConfig,
) -> Result<(Vec<(FileLock, LogDirContents)>, Vec<MetaProperties>), ManagerError> {
    let mut read = Vec::new();
    for path in paths {
        fs.create_dir_all(path).ctx("create directory", path)?;
        let lock = log_dir::lock(fs, path)?;
        let contents = LogDirContents::read(fs, path)?;
        read.push((lock, contents));
    }
    let metas = check_meta(config, read.iter().map(|(_, c)| c))?;
    let mut seen: BTreeMap<&TopicPartition, &Path> = BTreeMap::new();
    for (_, c) in &read {
        for (tp, path) in c.partitions() {
            if let Some(first) = seen.insert(tp, path) {
                return Err(ManagerError::DuplicatePartition {
                    partition: tp.clone(),
                    first: first.to_path_buf(),
                    second: path.to_path_buf(),
                });
            }
        }
    }

    Ok((read, metas))
}

/// What the log dirs hold, as the manager will keep it.
#[derive(Default)]
struct Found {
    dirs: Vec<Dir>,
    dir_reports: Vec<LogDirReport>,
    pending: Vec<Pending>,
    doomed: Vec<DoomedDir>,
    /// Log dirs whose checkpoint files name partitions that are gone.
    stale: Vec<usize>,
    /// Each dir's bound on its sync threads.
    sync_threads: usize,
}

impl Found {
    /// Takes in log dir `i`: removes its clean-shutdown marker, writes its `meta.properties`
    /// if it had none, and lists its partitions and deleted ones (due for removal at
    /// `delete_due_ms`).
    fn add_dir(
        &mut self,
        fs: &dyn crate::io::FileSystem,
        i: usize,
        lock: FileLock,
        contents: LogDirContents,
        meta: &MetaProperties,
        delete_due_ms: i64,
    ) -> Result<(), ManagerError> {
        let path = contents.path.clone();
        if contents.clean_shutdown {
            log_dir::remove_clean_shutdown(fs, &path)?;
        }
        let meta_written = contents.meta.is_none();
        if meta_written {
            meta::write(fs, &path, meta)?;
        }
        let mut report = LogDirReport {
            path: path.clone(),
            clean_shutdown: contents.clean_shutdown,
            meta_written,
            deleted: Vec::new(),
            ignored: Vec::new(),
        };
        let cps = &contents.checkpoints;
        let mut present = Vec::new();
        for found in &contents.dirs {
            match &found.entry {
                DirEntry::Partition(tp) => {
                    present.push(tp.clone());
                    let kept = Kept {
                        recovery_point: cps.recovery_points.get(tp).copied(),
                        log_start_offset: cps.log_start_offsets.get(tp).copied(),
                        high_watermark: cps.high_watermarks.get(tp).copied(),
                        cleaner_offset: cps.cleaner_offsets.get(tp).copied(),
                    };
                    self.pending.push(Pending {
                        dir: i,
                        tp: tp.clone(),
                        path: found.path.clone(),
                        offsets: LogDirOffsets {
                            clean_shutdown: contents.clean_shutdown,
                            recovery_point: kept.recovery_point,
                            log_start_offset: kept.log_start_offset,
                            high_watermark: kept.high_watermark,
                            cleaner_offset: kept.cleaner_offset,
                        },
                        kept,
                    });
                }
                DirEntry::Deleted(_) => {
                    report.deleted.push(found.path.clone());
                    self.doomed.push(DoomedDir {
                        dir: i,
                        path: found.path.clone(),
                        due_ms: delete_due_ms,
                    });
                }
                DirEntry::Other(why) => report.ignored.push((found.path.clone(), why.clone())),
            }
        }
        if cps.names_others(&present) {
            self.stale.push(i);
        }
        self.dirs.push(Dir {
            path,
            lock: Mutex::new(Some(lock)),
            broker_epoch: contents.broker_epoch.unwrap_or(-1),
            checkpoint_writes: Mutex::new(()),
            syncs: super::sync::SyncPool::new(self.sync_threads),
        });
        self.dir_reports.push(report);
        Ok(())
    }
}

/// Opens the pending partitions on `threads` threads: the manager's table of them, and the
/// reports in partition order.
fn open_partitions(
    env: &Environment,
    config: &ManagerConfig,
    descriptors: &Arc<WriteDescriptors>,
    pending: Vec<Pending>,
    threads: usize,
    on_partition: &(dyn Fn(&PartitionReport) + Sync),
) -> (BTreeMap<TopicPartition, Arc<Slot>>, Vec<PartitionReport>) {
    let results = parallel(threads, &pending, |p| {
        let began = Instant::now();
        let opened = open_partition(env, config, descriptors, p);
        let report = PartitionReport {
            partition: p.tp.clone(),
            dir: p.path.clone(),
            duration: began.elapsed(),
            outcome: opened.as_ref().map(|(log, _)| opened_report(log)).map_err(Arc::clone),
        };
        on_partition(&report);
        (opened, report)
    });
    let mut table = BTreeMap::new();
    let mut reports = Vec::new();
    for (p, (opened, report)) in pending.into_iter().zip(results) {
        let state = match opened {
            Ok((log, config)) => SlotState::Online {
                log,
                config: Box::new(config),
            },
            Err(f) => SlotState::Offline(f),
        };
        table.insert(
            p.tp.clone(),
            Arc::new(Slot {
                tp: p.tp,
                dir: p.dir,
                path: p.path,
                state,
                kept: p.kept,
                dirty_since: Mutex::new(None),
            }),
        );
        reports.push(report);
    }
    reports.sort_by(|a, b| a.partition.cmp(&b.partition));
    (table, reports)
}

/// The defaults and every topic's settings must make valid logs, and each dir appear once.
fn check_config(config: &ManagerConfig, paths: &[PathBuf]) -> Result<(), ManagerError> {
    if paths.is_empty() {
        return Err(ManagerError::NoLogDirs);
    }
    for (i, p) in paths.iter().enumerate() {
        if paths[..i].iter().any(|q| same_dir(p, q)) {
            return Err(ManagerError::DuplicateLogDir { dir: p.clone() });
        }
    }
    config.log.validate()?;
    if config.cleaner_bytes_per_second == Some(0) {
        return Err(ManagerError::ZeroCleanerRate);
    }
    if config.sync_threads == 0 {
        return Err(ManagerError::ZeroSyncThreads);
    }
    for (topic, c) in &config.topics {
        validate_topic(topic).map_err(|error| ManagerError::InvalidTopic {
            topic: topic.clone(),
            error,
        })?;
        c.resolve(config).log.validate()?;
    }
    Ok(())
}

/// Whether two paths name the same dir, lexically (`a/./b/../c` is `a/c`). One reached
/// through a symbolic link is caught by its lock instead.
fn same_dir(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        out
    };
    norm(a) == norm(b)
}

/// Kafka's rules for a node's log dirs: one cluster, one node id, a distinct directory id
/// each (`MetaPropertiesEnsemble.verify`), and the configuration's ids if it gives them.
/// Returns each dir's properties, new ones for dirs without.
fn check_meta<'a>(
    config: &ManagerConfig,
    dirs: impl Iterator<Item = &'a LogDirContents> + Clone,
) -> Result<Vec<MetaProperties>, ManagerError> {
    let bad = |c: &LogDirContents, reason: String| meta::mismatch(&c.path, reason);
    let mut cluster = config.cluster_id.clone().map(|id| (id, "the configuration".to_string()));
    let mut node = config.node_id.map(|id| (id, "the configuration".to_string()));
    let mut directory_ids: BTreeMap<String, PathBuf> = BTreeMap::new();
    for c in dirs.clone() {
        let Some(m) = &c.meta else { continue };
        let whose = c.path.display().to_string();
        if let Some(id) = &m.cluster_id {
            match &cluster {
                Some((expected, from)) if expected != id => {
                    return Err(bad(c, format!("cluster.id {id} is not {expected}, from {from}")).into())
                }
                Some(_) => {}
                None => cluster = Some((id.clone(), whose.clone())),
            }
        }
        if let Some(id) = m.node_id {
            match &node {
                Some((expected, from)) if *expected != id => {
                    return Err(bad(c, format!("node id {id} is not {expected}, from {from}")).into())
                }
                Some(_) => {}
                None => node = Some((id, whose.clone())),
            }
        }
        if let Some(id) = &m.directory_id {
            if let Some(other) = directory_ids.insert(id.clone(), c.path.clone()) {
                return Err(bad(
                    c,
                    format!("directory.id {id} is also the id of {}", other.display()),
                )
                .into());
            }
        }
    }
    let cluster_id = cluster.map_or_else(meta::new_uuid, |(id, _)| id);
    let node_id = node.map_or(0, |(id, _)| id);
    Ok(dirs
        .map(|c| {
            c.meta.clone().unwrap_or_else(|| MetaProperties {
                version: 1,
                cluster_id: Some(cluster_id.clone()),
                node_id: Some(node_id),
                directory_id: Some(meta::new_uuid()),
            })
        })
        .collect())
}

fn open_partition(
    env: &Environment,
    config: &ManagerConfig,
    descriptors: &Arc<WriteDescriptors>,
    p: &Pending,
) -> Result<(Arc<Log>, super::ResolvedConfig), Arc<PartitionFailure>> {
    let fs = env.fs.as_ref();
    let fail = |f: PartitionFailure| Arc::new(f);
    let own = PartitionConfig::read(fs, &p.path)
        .map_err(|e| fail(e.into()))?
        .map_err(|e| fail(e.into()))?;
    let topic = config.topics.get(&p.tp.topic).cloned().unwrap_or_default();
    let resolved = own.unwrap_or_default().over(&topic).resolve(config);
    resolved.log.validate().map_err(|e| fail(e.into()))?;
    let log = Log::open_in_log_dir(
        env.clone(),
        &p.path,
        resolved.log.clone(),
        Some(&p.offsets),
        Exclusion::LogDir,
        Some(Arc::clone(descriptors)),
    )
    .map_err(|e| fail(e.into()))?;
    Ok((Arc::new(log), resolved))
}

fn opened_report(log: &Log) -> PartitionOpened {
    PartitionOpened {
        recovery: log.recovery_report().clone(),
        producers: log.producer_load_report().clone(),
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        segments: log.maintenance().segment_count(),
    }
}

/// Runs `work` over `items` on `threads` threads; the results in the items' order.
pub(super) fn parallel<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, work(item)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}
