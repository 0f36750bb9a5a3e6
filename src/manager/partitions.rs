//! Creating and deleting partitions.
//!
//! Deletion follows Kafka's protocol: the log is closed, the directory renamed to
//! `<topic>-<n>.<id>-delete` and the rename made durable (the log dir is synced) before
//! `delete` returns, so no later open, after a crash or not, brings the partition back; the
//! checkpoint files are rewritten without it; the directory's files are removed by the
//! deletion job once `file.delete.delay.ms` is over (or at a later open, which schedules every
//! `-delete` directory it finds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::config::{PartitionConfig, ResolvedConfig};
use super::error::ManagerError;
use super::jobs::{self, Files};
use super::topic::{collides, validate_topic, TopicPartition};
use super::{Inner, Kept, Slot, SlotState};
use crate::io::{FileKind, FileSystem, IoError, IoResultExt};
use crate::log::{Exclusion, Log};

/// A deleted partition's directory, removed once due.
#[derive(Debug, Clone)]
pub(crate) struct DoomedDir {
    pub dir: usize,
    pub path: PathBuf,
    pub due_ms: i64,
}

/// One partition of a batch, checked and resolved before anything is written.
struct Planned {
    tp: TopicPartition,
    config: PartitionConfig,
    resolved: ResolvedConfig,
}

/// A partition of a batch whose directory has been made.
struct Made {
    tp: TopicPartition,
    dir: usize,
    path: PathBuf,
    resolved: ResolvedConfig,
    log: Arc<Log>,
}

/// Creates the partitions `requests`, all or none: each directory (and config file) is made and
/// its log opened with no sync of its own, then each log dir that received one is synced
/// once, and only then are they listed and returned. A crash before that sync may keep any of
/// them, each whole (an empty partition directory opens as an empty log); a crash after it
/// keeps them all (docs/design.md, "Many partitions").
pub(super) fn create_many(
    inner: &Inner,
    requests: &[(TopicPartition, PartitionConfig)],
) -> Result<Vec<Arc<Log>>, ManagerError> {
    let planned = requests
        .iter()
        .map(|(tp, config)| plan(inner, tp, config))
        .collect::<Result<Vec<_>, _>>()?;
    let _changes = inner.changes.lock();
    let places = place(inner, &planned)?;
    let fs = inner.env.fs.as_ref();
    let mut made: Vec<Made> = Vec::with_capacity(planned.len());
    let built = (|| -> Result<(), ManagerError> {
        for (p, (dir, path)) in planned.into_iter().zip(places) {
            if fs.exists(&path).ctx("stat", &path)? {
                return Err(ManagerError::PartitionExists {
                    partition: p.tp,
                    dir: path,
                });
            }
            let log = create_log(inner, &path, &p.tp, &p.config, &p.resolved).inspect_err(|_| {
                // Nothing of a partition that never opened stays behind.
                let _ = remove_tree(fs, &path);
            })?;
            made.push(Made {
                tp: p.tp,
                dir,
                path,
                resolved: p.resolved,
                log: Arc::new(log),
            });
        }
        // The one sync per log dir that makes every directory of the batch durable.
        let mut touched: Vec<usize> = made.iter().map(|m| m.dir).collect();
        touched.sort_unstable();
        touched.dedup();
        for dir in touched {
            let parent = &inner.dirs[dir].path;
            fs.sync_dir(parent).ctx("fsync directory", parent)?;
        }
        Ok(())
    })();
    if let Err(e) = built {
        // None of the batch was returned: none is kept (best effort; a crash may still keep
        // any of them, each whole, as it may for a create that has not returned).
        for m in made {
            m.log.close_for_deletion();
            let _ = remove_tree(fs, &m.path);
        }
        return Err(e);
    }
    let mut table = inner.partitions.write();
    Ok(made
        .into_iter()
        .map(|m| {
            table.insert(
                m.tp.clone(),
                Arc::new(Slot {
                    tp: m.tp,
                    dir: m.dir,
                    path: m.path,
                    state: SlotState::Online {
                        log: Arc::clone(&m.log),
                        config: Box::new(m.resolved),
                    },
                    kept: Kept::default(),
                    dirty_since: Mutex::new(None),
                }),
            );
            m.log
        })
        .collect())
}

/// Checks one request (Kafka's name rules, the partition number, the settings) and resolves
/// its settings.
fn plan(inner: &Inner, tp: &TopicPartition, config: &PartitionConfig) -> Result<Planned, ManagerError> {
    let topic = tp.topic.as_str();
    validate_topic(topic).map_err(|error| ManagerError::InvalidTopic {
        topic: topic.to_string(),
        error,
    })?;
    if tp.partition < 0 {
        return Err(ManagerError::InvalidPartition {
            topic: topic.to_string(),
            partition: tp.partition,
        });
    }
    let topic_config = inner.config.topics.get(topic).cloned().unwrap_or_default();
    let resolved = config.over(&topic_config).resolve(&inner.config);
    resolved.log.validate()?;
    Ok(Planned {
        tp: tp.clone(),
        config: config.clone(),
        resolved,
    })
}

/// The log dir each new partition goes to, and its directory there; refused if a partition
/// exists (or comes twice) or its topic collides with another's (listed or in the batch).
fn place(inner: &Inner, planned: &[Planned]) -> Result<Vec<(usize, PathBuf)>, ManagerError> {
    let table = inner.partitions.read();
    let mut counts = vec![0usize; inner.dirs.len()];
    for slot in table.values() {
        counts[slot.dir] += 1;
    }
    // Each distinct topic is checked against the listed ones once, not once per partition.
    let mut topics: BTreeMap<&str, ()> = BTreeMap::new();
    let mut seen: BTreeMap<&TopicPartition, ()> = BTreeMap::new();
    let mut out = Vec::with_capacity(planned.len());
    for p in planned {
        let (tp, topic) = (&p.tp, p.tp.topic.as_str());
        if let Some(existing) = table.get(tp) {
            return Err(ManagerError::PartitionExists {
                partition: tp.clone(),
                dir: existing.path.clone(),
            });
        }
        if seen.insert(tp, ()).is_some() {
            return Err(ManagerError::PartitionExists {
                partition: tp.clone(),
                dir: inner.dirs[0].path.join(tp.dir_name()),
            });
        }
        if topics.insert(topic, ()).is_none() {
            let listed = table.keys().map(|o| o.topic.as_str());
            let others = listed.chain(topics.keys().copied());
            if let Some(other) = others.into_iter().find(|o| collides(o, topic)) {
                return Err(ManagerError::TopicCollision {
                    topic: topic.to_string(),
                    existing: other.to_string(),
                });
            }
        }
        // Kafka's choice: the log dir with the fewest partitions.
        let dir = counts
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| **n)
            .map_or(0, |(i, _)| i);
        counts[dir] += 1;
        out.push((dir, inner.dirs[dir].path.join(tp.dir_name())));
    }
    Ok(out)
}

/// Creates the partition's directory and its config file, and opens its log there. Nothing
/// is synced but the config file (and the directory holding it, before it is renamed into
/// place): the log of an empty directory opens without a write to sync, and the caller syncs
/// the log dir once for the batch.
fn create_log(
    inner: &Inner,
    path: &Path,
    tp: &TopicPartition,
    config: &PartitionConfig,
    resolved: &ResolvedConfig,
) -> Result<Log, ManagerError> {
    let fs = inner.env.fs.as_ref();
    if *config == PartitionConfig::default() {
        fs.create_dir_all(path).ctx("create directory", path)?;
    } else {
        // The settings must come with the directory or not at all: a partition that a crash
        // kept without them would open with the defaults. So the directory is made under a
        // deleted partition's name (an open that finds it removes it), the settings written
        // and synced there, and only then renamed into place.
        let parent = path.parent().unwrap_or(Path::new("."));
        let staging = parent.join(tp.delete_dir_name(&hex(&super::random_bytes())));
        fs.create_dir_all(&staging).ctx("create directory", &staging)?;
        let staged = config
            .write(fs, &staging)
            .and_then(|()| fs.rename(&staging, path).ctx("rename", &staging));
        if let Err(e) = staged {
            let _ = remove_tree(fs, &staging);
            return Err(e.into());
        }
    }
    Log::open_in_log_dir(
        inner.env.clone(),
        path,
        resolved.log.clone(),
        None,
        Exclusion::LogDir,
        Some(Arc::clone(&inner.descriptors)),
    )
    .map_err(|error| ManagerError::Create {
        partition: tp.clone(),
        error: Box::new(error),
    })
}

pub(super) fn delete(inner: &Inner, tp: &TopicPartition) -> Result<(), ManagerError> {
    let _changes = inner.changes.lock();
    let slot = inner
        .partitions
        .read()
        .get(tp)
        .cloned()
        .ok_or_else(|| ManagerError::UnknownPartition {
            partition: tp.clone(),
        })?;
    let fs = inner.env.fs.as_ref();
    let parent = &inner.dirs[slot.dir].path;
    let id = hex(&super::random_bytes());
    let doomed_path = parent.join(tp.delete_dir_name(&id));
    let delay = match &slot.state {
        SlotState::Online { log, config } => {
            log.close_for_deletion();
            config.log.file_delete_delay_ms
        }
        SlotState::Offline(_) => inner.config.log.file_delete_delay_ms,
    };
    if let Err(e) = fs
        .rename(&slot.path, &doomed_path)
        .ctx("rename", &slot.path)
        .and_then(|()| fs.sync_dir(parent).ctx("fsync directory", parent))
    {
        // The log is closed: the partition stays listed as offline, nothing is lost, and
        // a later delete (or open) tries again.
        let failure = Arc::new(super::PartitionFailure::Io(e));
        let offline = Slot {
            tp: slot.tp.clone(),
            dir: slot.dir,
            path: slot.path.clone(),
            state: SlotState::Offline(Arc::clone(&failure)),
            kept: slot.kept,
            dirty_since: Mutex::new(None),
        };
        inner.partitions.write().insert(tp.clone(), Arc::new(offline));
        return Err(ManagerError::PartitionOffline {
            partition: tp.clone(),
            failure,
        });
    }
    inner.partitions.write().remove(tp);
    inner.doomed.lock().push(DoomedDir {
        dir: slot.dir,
        path: doomed_path,
        due_ms: inner.now_ms() + delay,
    });
    // Kafka rewrites the checkpoints at once: no entry may outlive the partition.
    jobs::write_checkpoints(inner, slot.dir, Files::All)?;
    Ok(())
}

/// Removes the deleted partitions' directories that are due; returns how many went, and the
/// failures (kept for the next run).
pub(super) fn remove_due(inner: &Inner, now_ms: i64) -> (usize, Vec<(PathBuf, IoError)>) {
    let due: Vec<DoomedDir> = {
        let mut doomed = inner.doomed.lock();
        let (due, later) = doomed.drain(..).partition(|d| d.due_ms <= now_ms);
        *doomed = later;
        due
    };
    let fs = inner.env.fs.as_ref();
    let mut removed = 0;
    let mut failures = Vec::new();
    for d in due {
        let parent = &inner.dirs[d.dir].path;
        match remove_tree(fs, &d.path).and_then(|()| fs.sync_dir(parent).ctx("fsync directory", parent)) {
            Ok(()) => removed += 1,
            Err(e) => {
                failures.push((d.path.clone(), e));
                inner.doomed.lock().push(d);
            }
        }
    }
    (removed, failures)
}

/// Removes a partition directory: its files, then the directory (a partition directory holds
/// no subdirectory; one found is an error, and nothing under it is touched).
fn remove_tree(fs: &dyn FileSystem, dir: &Path) -> Result<(), IoError> {
    let names = match fs.list(dir) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(IoError::new("list", dir, e)),
    };
    for name in names {
        let path = dir.join(name);
        if fs.stat(&path).ctx("stat", &path)?.kind == FileKind::Dir {
            return Err(IoError::new(
                "remove",
                &path,
                std::io::Error::other("a directory inside a partition directory"),
            ));
        }
        fs.remove_file(&path).ctx("remove", &path)?;
    }
    fs.remove_dir(dir).ctx("remove directory", dir)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
