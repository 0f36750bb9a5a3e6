//! What a tool that repairs or inspects an existing partition needs beyond [`Log::open`]: an
//! open that never creates a log where none was ([`Log::open_existing`]), and a recovery
//! planned and reported without being carried out ([`Log::preview_recovery`]).
//!
//! [`Log::open`] creates the directory and a new empty log when it finds none: right for a
//! broker creating a partition, wrong for an operator who typed the wrong path, who would get
//! six new files in a directory that held something else and a report that "nothing was
//! changed".

use std::path::{Path, PathBuf};

use super::{recovery, Environment, Log, LogConfig, OpenError};
use crate::io::{FileKind, FileSystem, IoError};
use crate::segment::names;

/// What shows that a directory holds a partition ([`partition_evidence`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionEvidence {
    /// A segment file (`<20 digits>.log`, or one of its `.swap`/`.deleted`/`.cleaned` forms).
    SegmentFile(String),
    /// The engine's own `oncelog.checkpoint`.
    Checkpoint,
    /// The directory is named as Kafka names a partition's, `<topic>-<partition>`.
    KafkaName,
}

/// Why a directory is not a partition's ([`OpenError::NotAPartition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotAPartitionReason {
    /// Nothing is at the path.
    #[error("no such directory")]
    Missing,
    /// The path names something other than a directory.
    #[error("not a directory")]
    NotADirectory,
    /// It holds no segment file and no `oncelog.checkpoint`, and is not named
    /// `<topic>-<partition>`.
    #[error("it holds no .log file and no oncelog.checkpoint, and is not named <topic>-<partition>")]
    NoLog,
}

/// What shows that `dir` holds a partition, or why it does not. Reads names only.
pub fn partition_evidence(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Result<PartitionEvidence, NotAPartitionReason>, IoError> {
    match fs.stat(dir) {
        Ok(m) if m.kind == FileKind::Dir => {}
        Ok(_) => return Ok(Err(NotAPartitionReason::NotADirectory)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(NotAPartitionReason::Missing))
        }
        Err(e) => return Err(IoError::new("stat", dir, e)),
    }
    let mut listed = fs.list(dir).map_err(|e| IoError::new("list", dir, e))?;
    listed.sort();
    let segment = listed
        .iter()
        .find(|n| names::parse(n).is_some_and(|p| p.ext == names::LOG_EXT));
    if let Some(name) = segment {
        return Ok(Ok(PartitionEvidence::SegmentFile(name.clone())));
    }
    if listed.iter().any(|n| n == super::checkpoint::FILE_NAME) {
        return Ok(Ok(PartitionEvidence::Checkpoint));
    }
    let kafka_name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| {
            matches!(
                crate::manager::topic::parse_dir_name(n),
                crate::manager::topic::DirEntry::Partition(_)
            )
        });
    Ok(match kafka_name {
        true => Ok(PartitionEvidence::KafkaName),
        false => Err(NotAPartitionReason::NoLog),
    })
}

/// `Err(NotAPartition)` unless `dir` holds a partition.
fn require_partition(fs: &dyn FileSystem, dir: &Path) -> Result<(), OpenError> {
    match partition_evidence(fs, dir)? {
        Ok(_) => Ok(()),
        Err(reason) => Err(OpenError::NotAPartition {
            dir: PathBuf::from(dir),
            reason,
        }),
    }
}

impl Log {
    /// Opens the log of an existing partition as [`Log::open`] does, but never creates one: a
    /// path that is missing, not a directory, or a directory that holds no partition
    /// ([`partition_evidence`]) is refused with [`OpenError::NotAPartition`], and nothing is
    /// created in it (not even the lock file).
    pub fn open_existing(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log, OpenError> {
        Log::open_existing_in(Environment::default(), dir, config)
    }

    /// [`Log::open_existing`] with an explicit file system and clock.
    pub fn open_existing_in(
        env: Environment,
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<Log, OpenError> {
        let dir = dir.as_ref();
        config.validate()?;
        require_partition(env.fs.as_ref(), dir)?;
        Log::open_in_log_dir(env, dir, config, None, super::Exclusion::Own, None)
    }

    /// What [`Log::open_existing`] with `config` would do to recover the log in `dir`, decided
    /// and reported without changing a file: the cuts, the segments deleted, the indexes
    /// rebuilt, the leftovers removed, the data removed, and the log's bounds after. A mode
    /// that would refuse is refused here too, with the same error. A directory a live log
    /// holds is refused ([`OpenError::Locked`]); nothing is created, the lock file included.
    pub fn preview_recovery(
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<recovery::RecoveryPreview, OpenError> {
        Log::preview_recovery_in(Environment::default(), dir, config)
    }

    /// [`Log::preview_recovery`] with an explicit file system and clock.
    pub fn preview_recovery_in(
        env: Environment,
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<recovery::RecoveryPreview, OpenError> {
        let dir = dir.as_ref();
        config.validate()?;
        require_partition(env.fs.as_ref(), dir)?;
        recovery::preview(env.fs.as_ref(), dir, &config, env.clock.now_ms())
    }
}
