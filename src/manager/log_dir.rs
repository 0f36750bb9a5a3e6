//! One log dir: its lock, `meta.properties`, clean-shutdown marker, offset checkpoints and the
//! partition directories in it (docs/kafka-format.md §8).
//!
//! | file | content |
//! |---|---|
//! | `.lock` | held with `flock` by the open manager; names it (`process <pid>`) |
//! | `meta.properties` | cluster, node and directory ids ([`super::meta`]) |
//! | `.kafka_cleanshutdown` | present only between a clean close and the next open: `{"version":0,"brokerEpoch":N}` |
//! | `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`, `replication-offset-checkpoint`, `cleaner-offset-checkpoint` | one offset per partition ([`super::offsets`]) |
//! | `<topic>-<n>/` | a partition ([`crate::Log`]'s directory) |
//! | `<topic>-<n>.<id>-delete/` | a deleted partition, removed in the background |

use std::path::{Path, PathBuf};

use super::error::ManagerError;
use super::meta::{self, MetaProperties};
use super::offsets::{self, Offsets};
use super::topic::{parse_dir_name, DirEntry, TopicPartition};
use crate::io::{self, FileKind, FileLock, FileSystem, IoError, IoResultExt};

/// Kafka's lock file of a log dir.
pub const LOCK_FILE: &str = ".lock";
/// Kafka's clean-shutdown marker.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// The four offset checkpoint files of a log dir, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirCheckpoints {
    /// `recovery-point-offset-checkpoint`.
    pub recovery_points: Offsets,
    /// `log-start-offset-checkpoint`.
    pub log_start_offsets: Offsets,
    /// `replication-offset-checkpoint`.
    pub high_watermarks: Offsets,
    /// `cleaner-offset-checkpoint`.
    pub cleaner_offsets: Offsets,
}

impl DirCheckpoints {
    /// Reads the four files; a malformed one is refused, naming its line.
    pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<DirCheckpoints, ManagerError> {
        let one = |name| -> Result<Offsets, ManagerError> { Ok(offsets::read(fs, dir, name)??) };
        Ok(DirCheckpoints {
            recovery_points: one(offsets::RECOVERY_POINTS)?,
            log_start_offsets: one(offsets::LOG_START_OFFSETS)?,
            high_watermarks: one(offsets::HIGH_WATERMARKS)?,
            cleaner_offsets: one(offsets::CLEANER_OFFSETS)?,
        })
    }

    /// Whether any entry names a partition not in `present`.
    pub fn names_others(&self, present: &[TopicPartition]) -> bool {
        [
            &self.recovery_points,
            &self.log_start_offsets,
            &self.high_watermarks,
            &self.cleaner_offsets,
        ]
        .iter()
        .any(|m| m.keys().any(|tp| !present.contains(tp)))
    }
}

/// A directory found in a log dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundDir {
    /// Its path.
    pub path: PathBuf,
    /// What its name says it is.
    pub entry: DirEntry,
}

/// What a log dir holds, read without changing anything (`oncelog dump`, `verify` and
/// `recover` of a whole log dir use it; the manager's open starts with it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogDirContents {
    /// The log dir.
    pub path: PathBuf,
    /// Its `meta.properties`, if it has one.
    pub meta: Option<MetaProperties>,
    /// Whether `.kafka_cleanshutdown` is there.
    pub clean_shutdown: bool,
    /// The broker epoch the marker records, if it can be read.
    pub broker_epoch: Option<i64>,
    /// Its offset checkpoint files.
    pub checkpoints: DirCheckpoints,
    /// Its directories, in name order: partitions, deleted partitions, and others.
    pub dirs: Vec<FoundDir>,
}

impl LogDirContents {
    /// Reads a log dir: refuses a malformed `meta.properties` or offset checkpoint, naming
    /// the file and the line.
    pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<LogDirContents, ManagerError> {
        let meta = meta::read(fs, dir)??;
        let checkpoints = DirCheckpoints::read(fs, dir)?;
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let (clean_shutdown, broker_epoch) = match io::read_small_file(fs, &marker, 4096)? {
            io::SmallFile::Missing => (false, None),
            io::SmallFile::Bytes(b) => (true, broker_epoch(&String::from_utf8_lossy(&b))),
            // Only its existence matters to Kafka, whatever it holds.
            _ => (true, None),
        };
        let mut names = fs.list(dir).ctx("list", dir)?;
        names.sort();
        let mut dirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            if fs.stat(&path).ctx("stat", &path)?.kind != FileKind::Dir {
                continue;
            }
            dirs.push(FoundDir {
                entry: parse_dir_name(&name),
                path,
            });
        }
        Ok(LogDirContents {
            path: dir.to_path_buf(),
            meta,
            clean_shutdown,
            broker_epoch,
            checkpoints,
            dirs,
        })
    }

    /// The partitions, with their directories.
    pub fn partitions(&self) -> impl Iterator<Item = (&TopicPartition, &Path)> {
        self.dirs.iter().filter_map(|d| match &d.entry {
            DirEntry::Partition(tp) => Some((tp, d.path.as_path())),
            _ => None,
        })
    }
}

/// `brokerEpoch` of a marker's JSON (`{"version":0,"brokerEpoch":14}`), if it has one.
fn broker_epoch(text: &str) -> Option<i64> {
    let rest = &text[text.find("\"brokerEpoch\"")? + "\"brokerEpoch\"".len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Writes the clean-shutdown marker, durably (its existence is what the next open reads).
pub fn write_clean_shutdown(
    fs: &dyn FileSystem,
    dir: &Path,
    broker_epoch: i64,
) -> Result<(), IoError> {
    let text = format!("{{\"version\":0,\"brokerEpoch\":{broker_epoch}}}");
    io::write_file_atomically(fs, &dir.join(CLEAN_SHUTDOWN_FILE), text.as_bytes())
}

/// Removes the marker, durably, at open: a crash while the manager runs must not pass for a
/// clean shutdown (KAFKA-10471).
pub fn remove_clean_shutdown(fs: &dyn FileSystem, dir: &Path) -> Result<(), IoError> {
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    match fs.remove_file(&marker) {
        Ok(()) => fs.sync_dir(dir).ctx("fsync directory", dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(IoError::new("remove", &marker, e)),
    }
}

/// Takes the log dir's lock, or says who holds it.
pub fn lock(fs: &dyn FileSystem, dir: &Path) -> Result<FileLock, ManagerError> {
    let path = dir.join(LOCK_FILE);
    let holder = format!("process {}", std::process::id());
    match fs.try_lock(&path, &holder) {
        Ok(lock) => Ok(lock),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            let named = match io::read_small_file(fs, &path, 256) {
                Ok(io::SmallFile::Bytes(b)) => String::from_utf8(b).ok(),
                _ => None,
            }
            .filter(|h| !h.is_empty());
            let holder = match named {
                Some(h) if h == holder => format!("{h}: this process has it open"),
                Some(h) => h,
                None => e
                    .get_ref()
                    .map_or("unknown holder".to_string(), |m| m.to_string()),
            };
            Err(ManagerError::Locked {
                dir: dir.to_path_buf(),
                holder,
            })
        }
        Err(e) => Err(ManagerError::Io(IoError::new("lock", &path, e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_s_broker_epoch_is_read_when_there_is_one() {
        assert_eq!(broker_epoch("{\"version\":0,\"brokerEpoch\":14}"), Some(14));
        assert_eq!(broker_epoch("{\"brokerEpoch\" : -1, \"version\":0}"), Some(-1));
        assert_eq!(broker_epoch(""), None);
        assert_eq!(broker_epoch("{\"version\":0}"), None);
    }
}
