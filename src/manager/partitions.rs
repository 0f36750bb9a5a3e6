//! Creating and deleting partitions.
//!
//! Deletion follows Kafka's protocol: the log is closed, the directory renamed to
//! `<topic>-<n>.<id>-delete` and the rename made durable (the log dir is synced) before
//! `delete` returns, so no later open, after a crash or not, brings the partition back; the
//! checkpoint files are rewritten without it; the directory's files are removed by the
//! deletion job once `file.delete.delay.ms` is over (or at a later open, which schedules every
//! `-delete` directory it finds).

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

pub(super) fn create(
    inner: &Inner,
    topic: &str,
    partition: i32,
    config: PartitionConfig,
) -> Result<Arc<Log>, ManagerError> {
    validate_topic(topic).map_err(|error| ManagerError::InvalidTopic {
        topic: topic.to_string(),
        error,
    })?;
    if partition < 0 {
        return Err(ManagerError::InvalidPartition {
            topic: topic.to_string(),
            partition,
        });
    }
    let tp = TopicPartition::new(topic, partition);
    let topic_config = inner.config.topics.get(topic).cloned().unwrap_or_default();
    let resolved = config.over(&topic_config).resolve(&inner.config);
    resolved.log.validate()?;

    let _changes = inner.changes.lock();
    let (dir, path) = place(inner, &tp)?;
    let fs = inner.env.fs.as_ref();
    if fs.exists(&path).ctx("stat", &path)? {
        return Err(ManagerError::PartitionExists {
            partition: tp,
            dir: path,
        });
    }
    let opened = create_log(inner, dir, &path, &tp, &config, &resolved);
    let log = match opened {
        Ok(log) => Arc::new(log),
        Err(e) => {
            // Nothing of a partition that never opened stays behind.
            let _ = remove_tree(fs, &path);
            return Err(e);
        }
    };
    inner.partitions.write().insert(
        tp.clone(),
        Arc::new(Slot {
            tp,
            dir,
            path,
            state: SlotState::Online {
                log: Arc::clone(&log),
                config: Box::new(resolved),
            },
            kept: Kept::default(),
            dirty_since: Mutex::new(None),
        }),
    );
    Ok(log)
}

/// The log dir a new partition goes to, and its directory there; refused if the partition
/// exists or its topic collides with another's.
fn place(inner: &Inner, tp: &TopicPartition) -> Result<(usize, PathBuf), ManagerError> {
    let topic = tp.topic.as_str();
    let table = inner.partitions.read();
    if let Some(existing) = table.get(tp) {
        return Err(ManagerError::PartitionExists {
            partition: tp.clone(),
            dir: existing.path.clone(),
        });
    }
    if let Some(other) = table.keys().find(|o| collides(&o.topic, topic)) {
        return Err(ManagerError::TopicCollision {
            topic: topic.to_string(),
            existing: other.topic.clone(),
        });
    }
    // Kafka's choice: the log dir with the fewest partitions.
    let counts = (0..inner.dirs.len()).map(|i| table.values().filter(|s| s.dir == i).count());
    let dir = counts
        .enumerate()
        .min_by_key(|(_, n)| *n)
        .map_or(0, |(i, _)| i);
    Ok((dir, inner.dirs[dir].path.join(tp.dir_name())))
}

/// Creates the partition's directory (durably in its log dir) and its config file, and opens
/// its log there.
fn create_log(
    inner: &Inner,
    dir: usize,
    path: &Path,
    tp: &TopicPartition,
    config: &PartitionConfig,
    resolved: &ResolvedConfig,
) -> Result<Log, ManagerError> {
    let fs = inner.env.fs.as_ref();
    fs.create_dir_all(path).ctx("create directory", path)?;
    let parent = &inner.dirs[dir].path;
    fs.sync_dir(parent).ctx("fsync directory", parent)?;
    if *config != PartitionConfig::default() {
        config.write(fs, path)?;
    }
    Log::open_in_log_dir(
        inner.env.clone(),
        path,
        resolved.log.clone(),
        None,
        Exclusion::LogDir,
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
