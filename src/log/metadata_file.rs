//! The small text files beside the data (docs/format.md): a partition's `oncelog.checkpoint`,
//! `leader-epoch-checkpoint` and `oncelog.properties`, a log dir's offset checkpoints and
//! `meta.properties`. Each is read the same way, here: whole, bounded in size (a file larger
//! than any this engine or Kafka writes is refused before it is read), as UTF-8 text, then
//! parsed by the file's own decoder. Whatever makes one unusable is one error,
//! [`BadMetadataFile`], naming the file, the line where there is one, and the reason.
//!
//! A missing file is no error: each caller says what its absence means (no checkpoint, no
//! epochs, no offsets). An I/O error is never taken for a missing or a bad file: a transient
//! failure must not be mistaken for a missing checkpoint, which would forget the recovery
//! point.

use std::path::{Path, PathBuf};

use crate::io::{self, FileSystem, IoError};

/// Which of the small metadata files an error is about: it decides the error's
/// [`kind`](BadMetadataFile::kind), the advice in its message, and the largest file read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetadataFile {
    /// A partition's `oncelog.checkpoint` (what a log vouches for and recovers from).
    Checkpoint,
    /// A partition's `leader-epoch-checkpoint`.
    LeaderEpochs,
    /// A partition's `oncelog.properties` (its settings, written by the manager).
    PartitionConfig,
    /// One of a log dir's offset checkpoints (`recovery-point-offset-checkpoint`, ...).
    OffsetCheckpoint,
    /// A log dir's `meta.properties`.
    MetaProperties,
}

impl MetadataFile {
    /// The largest file read: anything larger is not a file of this kind that this engine or
    /// Kafka wrote, and is refused before it is read.
    fn max_bytes(self) -> u64 {
        match self {
            // 1M segments of a segment line and a digest line, each of up to 60 characters.
            MetadataFile::Checkpoint => 128 << 20,
            // One line per epoch, and epochs are int32.
            MetadataFile::LeaderEpochs => 64 << 20,
            // A million partitions of long names.
            MetadataFile::OffsetCheckpoint => 256 << 20,
            MetadataFile::PartitionConfig | MetadataFile::MetaProperties => 64 << 10,
        }
    }

    /// What the file is, in a refusal of its size.
    fn what(self) -> &'static str {
        match self {
            MetadataFile::Checkpoint | MetadataFile::OffsetCheckpoint => "checkpoint",
            MetadataFile::LeaderEpochs => "epoch checkpoint",
            MetadataFile::PartitionConfig => "settings file",
            MetadataFile::MetaProperties => "meta.properties",
        }
    }

    /// What the operator can do about a bad file, where there is a safe answer: without either
    /// partition file the log is validated or rebuilt from its batches.
    fn advice(self) -> &'static str {
        match self {
            MetadataFile::Checkpoint => " (remove the file to validate the whole log instead)",
            MetadataFile::LeaderEpochs => {
                " (remove the file to rebuild the leader epochs from the log)"
            }
            _ => "",
        }
    }
}

/// A small metadata file that cannot be used: unreadable (a directory, too large, not UTF-8),
/// malformed, or contradicting itself. Whoever reads it refuses to go on with it and changes
/// nothing (the log does not open, the manager does not open the log dir or the partition):
/// its numbers decide what is deleted and what is trusted, so a wrong one must never be acted
/// on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{reason}{}", path.display(), line.map(|l| format!("line {l}: ")).unwrap_or_default(), file.advice())]
pub struct BadMetadataFile {
    /// Which file it is.
    pub file: MetadataFile,
    /// The file's path.
    pub path: PathBuf,
    /// The 1-based line at fault, where there is one.
    pub line: Option<usize>,
    /// What is wrong with it.
    pub reason: String,
    /// Only for an `oncelog.checkpoint`: the file fails its checksum, or a version-2 file lacks
    /// it, or it is not UTF-8: its bytes were damaged (this engine writes it whole, by rename),
    /// so none of its numbers can be believed, not even as a refusal's reason. Recovery then
    /// validates the log as if it had no checkpoint, except under `AbsoluteConsistency`, which
    /// refuses. `false`: a file that is whole but contradicts itself (edited by hand, or a
    /// version this engine does not know), refused in every mode.
    pub damaged: bool,
}

impl BadMetadataFile {
    /// A stable snake_case name for the kind of error: `damaged_checkpoint`, `bad_checkpoint`,
    /// `bad_epoch_checkpoint`, `bad_partition_config`, `bad_offset_checkpoint` or
    /// `bad_meta_properties`.
    pub fn kind(&self) -> &'static str {
        match self.file {
            MetadataFile::Checkpoint if self.damaged => "damaged_checkpoint",
            MetadataFile::Checkpoint => "bad_checkpoint",
            MetadataFile::LeaderEpochs => "bad_epoch_checkpoint",
            MetadataFile::PartitionConfig => "bad_partition_config",
            MetadataFile::OffsetCheckpoint => "bad_offset_checkpoint",
            MetadataFile::MetaProperties => "bad_meta_properties",
        }
    }

    /// A refusal of `path`, a file of kind `file`, for `reason` (at `line`, where there is one).
    pub fn new(
        file: MetadataFile,
        path: impl Into<PathBuf>,
        line: Option<usize>,
        reason: impl Into<String>,
    ) -> BadMetadataFile {
        BadMetadataFile {
            file,
            path: path.into(),
            line,
            reason: reason.into(),
            damaged: false,
        }
    }
}

/// What a file's decoder found wrong with its text, before the file is named: the line where
/// there is one, and whether the bytes were damaged rather than written so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The 1-based line at fault, where there is one.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
    /// See [`BadMetadataFile::damaged`].
    pub damaged: bool,
}

impl Invalid {
    /// A fault on `line`.
    pub fn at(line: usize, reason: impl Into<String>) -> Invalid {
        Invalid::on(Some(line), reason)
    }

    /// A fault on `line`, where there is one.
    pub fn on(line: Option<usize>, reason: impl Into<String>) -> Invalid {
        Invalid {
            line,
            reason: reason.into(),
            damaged: false,
        }
    }

    /// Damaged bytes: see [`BadMetadataFile::damaged`].
    pub fn damaged(reason: impl Into<String>) -> Invalid {
        Invalid {
            damaged: true,
            ..Invalid::on(None, reason)
        }
    }

    /// The error for this fault in `path`, a file of kind `file`.
    pub fn in_file(self, file: MetadataFile, path: &Path) -> BadMetadataFile {
        BadMetadataFile {
            damaged: self.damaged,
            ..BadMetadataFile::new(file, path, self.line, self.reason)
        }
    }
}

/// Reads `path`, a file of kind `file`, and parses it with `decode`: `Ok(Ok(None))` when there
/// is no file, `Ok(Err(..))` when it cannot be used, and `Err` when it could not be read at all.
pub fn read<T>(
    fs: &dyn FileSystem,
    path: &Path,
    file: MetadataFile,
    decode: impl FnOnce(&str) -> Result<T, Invalid>,
) -> Result<Result<Option<T>, BadMetadataFile>, IoError> {
    let max = file.max_bytes();
    let bytes = match io::read_small_file(fs, path, max)? {
        io::SmallFile::Missing => return Ok(Ok(None)),
        io::SmallFile::NotAFile(kind) => {
            return Ok(Err(BadMetadataFile::new(file, path, None, format!("is a {kind}"))))
        }
        io::SmallFile::TooLarge(len) => {
            let reason = format!("{len} bytes, more than any {} ({max})", file.what());
            return Ok(Err(BadMetadataFile::new(file, path, None, reason)));
        }
        io::SmallFile::Bytes(b) => b,
    };
    Ok(decode_bytes(path, &bytes, file, decode).map(Some))
}

/// Parses `bytes`, read from `path` (which errors name), a file of kind `file`, with `decode`.
pub fn decode_bytes<T>(
    path: &Path,
    bytes: &[u8],
    file: MetadataFile,
    decode: impl FnOnce(&str) -> Result<T, Invalid>,
) -> Result<T, BadMetadataFile> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        // What this engine writes is ASCII, and its checkpoint is written whole: a byte
        // outside UTF-8 there is damage. Kafka's files and the properties may have been
        // edited by hand.
        let invalid = match file {
            MetadataFile::Checkpoint => Invalid::damaged("not UTF-8 text: the file was damaged"),
            _ => Invalid::on(None, "not UTF-8 text"),
        };
        return Err(invalid.in_file(file, path));
    };
    decode(text).map_err(|e| e.in_file(file, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    #[test]
    fn each_file_keeps_its_kind_and_advice() {
        let bad = |file| BadMetadataFile::new(file, "/d/f", Some(3), "no");
        assert_eq!(bad(MetadataFile::Checkpoint).kind(), "bad_checkpoint");
        let damaged = Invalid::damaged("crc").in_file(MetadataFile::Checkpoint, Path::new("/d/f"));
        assert_eq!(damaged.kind(), "damaged_checkpoint");
        assert_eq!(bad(MetadataFile::LeaderEpochs).kind(), "bad_epoch_checkpoint");
        assert_eq!(bad(MetadataFile::OffsetCheckpoint).kind(), "bad_offset_checkpoint");
        assert_eq!(bad(MetadataFile::MetaProperties).kind(), "bad_meta_properties");
        assert_eq!(bad(MetadataFile::PartitionConfig).kind(), "bad_partition_config");
        assert_eq!(
            bad(MetadataFile::Checkpoint).to_string(),
            "/d/f: line 3: no (remove the file to validate the whole log instead)"
        );
        assert_eq!(bad(MetadataFile::OffsetCheckpoint).to_string(), "/d/f: line 3: no");
    }

    #[test]
    fn a_missing_file_is_none_and_an_unreadable_one_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let decode = |t: &str| t.trim().parse::<i64>().map_err(|_| Invalid::at(1, "not a number"));
        let read = |file| read(&RealFs, &path, file, decode).unwrap();
        assert_eq!(read(MetadataFile::OffsetCheckpoint), Ok(None));
        std::fs::write(&path, "42\n").unwrap();
        assert_eq!(read(MetadataFile::OffsetCheckpoint), Ok(Some(42)));
        std::fs::write(&path, "x\n").unwrap();
        let e = read(MetadataFile::LeaderEpochs).unwrap_err();
        assert_eq!((e.line, e.file, e.damaged), (Some(1), MetadataFile::LeaderEpochs, false));
        std::fs::write(&path, [0xff, b'\n']).unwrap();
        assert!(!read(MetadataFile::MetaProperties).unwrap_err().damaged);
        assert!(read(MetadataFile::Checkpoint).unwrap_err().damaged, "the checkpoint is ASCII");
        std::fs::write(&path, vec![b'1'; (64 << 10) + 1]).unwrap();
        let e = read(MetadataFile::MetaProperties).unwrap_err();
        assert!(e.reason.contains("more than any meta.properties"), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(read(MetadataFile::Checkpoint).unwrap_err().reason, "is a directory");
    }
}
