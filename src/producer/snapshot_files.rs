//! Snapshot files in a partition directory (docs/format.md, "Producer snapshot"; docs/design.md,
//! "Producer state"), all through the [`FileSystem`] seam.
//!
//! Safety of the set of files rests on two rules:
//! - A snapshot appears under its real name `<20-digit offset>.snapshot` only once its bytes
//!   are durable (temp file, fsync, rename, directory fsync). Temp files end in `.tmp`, which
//!   [`list`] never reports, so a half-written snapshot can never be loaded nor counted as
//!   "newer" by a removal helper.
//! - Removal helpers never remove the newest listed snapshot ([`delete_below`],
//!   [`remove_strays`]); only truncation ([`delete_above`]) may, because state beyond a new
//!   log end is wrong. So the last good snapshot is never removed before a newer one is durable.
//!
//! A snapshot that fails its checks is renamed aside to `<name>.corrupt`, never deleted, and
//! the next older one is used.

use std::path::{Path, PathBuf};

use super::snapshot::{self, Snapshot, SnapshotError};
use crate::io::{self, FileSystem, IoError, IoResultExt, OpenMode};

const SUFFIX: &str = ".snapshot";
/// Appended to the name of a snapshot that failed its checks.
pub const QUARANTINE_SUFFIX: &str = ".corrupt";

/// `<20-digit zero-padded offset>.snapshot`.
pub fn file_name(offset: i64) -> String {
    format!("{offset:020}{SUFFIX}")
}

/// The path of the snapshot at `offset` in `dir`.
pub fn path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(file_name(offset))
}

/// The offset named by a snapshot file name, or `None` for any other file.
pub fn parse_file_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The snapshots of `dir`, oldest first.
pub fn list(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(i64, PathBuf)>, IoError> {
    let mut found: Vec<(i64, PathBuf)> = fs
        .list(dir)
        .ctx("list", dir)?
        .into_iter()
        .filter_map(|name| parse_file_name(&name).map(|o| (o, dir.join(name))))
        .collect();
    found.sort_unstable_by_key(|(o, _)| *o);
    Ok(found)
}

/// Writes the snapshot at `offset` durably, in one go (at close, where waiting is fine).
pub fn write(
    fs: &dyn FileSystem,
    dir: &Path,
    offset: i64,
    bytes: &[u8],
) -> Result<PathBuf, IoError> {
    let target = path(dir, offset);
    io::write_file_atomically(fs, &target, bytes)?;
    Ok(target)
}

/// A snapshot written to its temp file but not yet fsynced nor visible under its real name.
/// Created on the append path by [`prepare`]; [`PendingSnapshot::finish`] does the slow part
/// (fsync, rename, directory fsync) elsewhere, as Kafka does since KAFKA-15046. It holds no
/// file descriptor in between (the file is opened again to be synced), so any number of rolls
/// between two flushes each keep their snapshot.
#[derive(Debug)]
pub struct PendingSnapshot {
    offset: i64,
    temp: PathBuf,
    target: PathBuf,
}

/// Writes `bytes` to the temp file of the snapshot at `offset`, without fsync.
pub fn prepare(
    fs: &dyn FileSystem,
    dir: &Path,
    offset: i64,
    bytes: &[u8],
) -> Result<PendingSnapshot, IoError> {
    let target = path(dir, offset);
    let temp = io::temp_path(&target);
    let file = fs
        .open(&temp, OpenMode::CreateTruncate)
        .ctx("create", &temp)?;
    file.write_all_at(bytes, 0).ctx("write", &temp)?;
    Ok(PendingSnapshot {
        offset,
        temp,
        target,
    })
}

impl PendingSnapshot {
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// Makes the snapshot durable and visible. Returns its path.
    pub fn finish(self, fs: &dyn FileSystem) -> Result<PathBuf, IoError> {
        let file = fs
            .open(&self.temp, OpenMode::ReadWrite)
            .ctx("open", &self.temp)?;
        file.sync_data().ctx("fsync", &self.temp)?;
        drop(file);
        io::publish_file(fs, &self.temp, &self.target)?;
        Ok(self.target)
    }

    /// Gives up: removes the temp file.
    pub fn abandon(self, fs: &dyn FileSystem) -> Result<(), IoError> {
        fs.remove_file(&self.temp).ctx("remove", &self.temp)
    }
}

/// A snapshot that failed its checks and was renamed aside.
#[derive(Debug)]
pub struct Quarantined {
    pub offset: i64,
    pub moved_to: PathBuf,
    pub error: SnapshotError,
}

/// What [`load_newest`] found.
#[derive(Debug)]
pub struct LoadedSnapshot {
    /// The newest valid snapshot at or below the limit, with its offset.
    pub newest: Option<(i64, Snapshot)>,
    /// Newer snapshots that failed their checks, newest first.
    pub quarantined: Vec<Quarantined>,
}

/// The largest snapshot file read: 16 million producers with a full default window. A larger
/// file (a damaged or sparse one) is set aside without being read.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// What [`choose_newest`] decided, without changing anything.
#[derive(Debug)]
pub struct Choice {
    /// The newest valid snapshot at or below the limit, with its offset.
    pub newest: Option<(i64, Snapshot)>,
    /// Newer snapshots that failed their checks, newest first: to be set aside.
    pub bad: Vec<(i64, PathBuf, SnapshotError)>,
}

/// Finds the newest snapshot at or below `at_or_below` that passes its checks: decodes, and
/// agrees with the offset it is named after ([`Snapshot::check_at`]). Reads only. An I/O error
/// (as opposed to bad content) stops the search: a file that cannot be read is not known to be
/// bad.
pub fn choose_newest(
    fs: &dyn FileSystem,
    snapshots: &[(i64, PathBuf)],
    at_or_below: i64,
) -> Result<Choice, IoError> {
    let mut bad = Vec::new();
    for (offset, file) in snapshots.iter().rev().filter(|(o, _)| *o <= at_or_below) {
        let checked = match io::read_small_file(fs, file, MAX_FILE_BYTES)? {
            io::SmallFile::Missing => continue,
            io::SmallFile::NotAFile(kind) => Err(SnapshotError::NotAFile { kind }),
            io::SmallFile::TooLarge(len) => Err(SnapshotError::TooLarge {
                len,
                max: MAX_FILE_BYTES,
            }),
            io::SmallFile::Bytes(bytes) => {
                snapshot::decode(&bytes).and_then(|s| s.check_at(*offset).map(|()| s))
            }
        };
        match checked {
            Ok(s) => {
                return Ok(Choice {
                    newest: Some((*offset, s)),
                    bad,
                })
            }
            Err(error) => bad.push((*offset, file.clone(), error)),
        }
    }
    Ok(Choice { newest: None, bad })
}

/// Renames snapshots that failed their checks aside (`<name>.corrupt`), never deleting them.
pub fn quarantine(
    fs: &dyn FileSystem,
    dir: &Path,
    bad: Vec<(i64, PathBuf, SnapshotError)>,
) -> Result<Vec<Quarantined>, IoError> {
    let mut out = Vec::new();
    for (offset, file, error) in bad {
        let moved_to = quarantine_path(&file);
        fs.rename(&file, &moved_to).ctx("rename", &file)?;
        out.push(Quarantined {
            offset,
            moved_to,
            error,
        });
    }
    if !out.is_empty() {
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
    }
    Ok(out)
}

/// Loads the newest valid snapshot at or below `at_or_below`, newest first; each one that
/// fails its checks is renamed aside and the next older one is tried.
pub fn load_newest(
    fs: &dyn FileSystem,
    dir: &Path,
    at_or_below: i64,
) -> Result<LoadedSnapshot, IoError> {
    let choice = choose_newest(fs, &list(fs, dir)?, at_or_below)?;
    Ok(LoadedSnapshot {
        newest: choice.newest,
        quarantined: quarantine(fs, dir, choice.bad)?,
    })
}

fn quarantine_path(file: &Path) -> PathBuf {
    let mut name = file
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(QUARANTINE_SUFFIX);
    file.with_file_name(name)
}

/// Removes the snapshots above `offset` (truncation: their state covers removed offsets).
/// Returns the removed offsets.
pub fn delete_above(fs: &dyn FileSystem, dir: &Path, offset: i64) -> Result<Vec<i64>, IoError> {
    let doomed: Vec<i64> = list(fs, dir)?
        .into_iter()
        .map(|(o, _)| o)
        .filter(|o| *o > offset)
        .collect();
    remove(fs, dir, &doomed)
}

/// Removes the snapshots below `offset` (their segments are gone), except the newest snapshot
/// of the directory, which is always kept. Returns the removed offsets.
pub fn delete_below(fs: &dyn FileSystem, dir: &Path, offset: i64) -> Result<Vec<i64>, IoError> {
    let offsets: Vec<i64> = list(fs, dir)?.into_iter().map(|(o, _)| o).collect();
    let newest = offsets.last().copied();
    let doomed: Vec<i64> = offsets
        .into_iter()
        .filter(|o| *o < offset && Some(*o) != newest)
        .collect();
    remove(fs, dir, &doomed)
}

/// Kafka's `removeStraySnapshots` (one per segment base, plus the newest) as a pure decision: the
/// snapshots (ascending) that are not at a segment base offset, except the newest one if it is at
/// or above the largest base offset (the end-of-log snapshot of a clean close, or the latest
/// interval snapshot).
pub fn stray_snapshots(snapshots: &[i64], segment_bases: &[i64]) -> Vec<i64> {
    // Sorted for binary search: a partition can have tens of thousands of segments.
    let mut bases = segment_bases.to_vec();
    bases.sort_unstable();
    let largest_base = bases.last().copied();
    let newest = snapshots.iter().copied().max();
    snapshots
        .iter()
        .copied()
        .filter(|o| bases.binary_search(o).is_err())
        .filter(|o| {
            let newest_at_end = match largest_base {
                Some(b) => *o >= b,
                None => true,
            };
            !(Some(*o) == newest && newest_at_end)
        })
        .collect()
}

/// Removes the stray snapshots of `dir` (see [`stray_snapshots`]). Returns the removed offsets.
pub fn remove_strays(
    fs: &dyn FileSystem,
    dir: &Path,
    segment_bases: &[i64],
) -> Result<Vec<i64>, IoError> {
    let offsets: Vec<i64> = list(fs, dir)?.into_iter().map(|(o, _)| o).collect();
    let doomed: Vec<i64> = stray_snapshots(&offsets, segment_bases)
        .into_iter()
        .filter(|o| Some(*o) != offsets.last().copied())
        .collect();
    remove(fs, dir, &doomed)
}

fn remove(fs: &dyn FileSystem, dir: &Path, offsets: &[i64]) -> Result<Vec<i64>, IoError> {
    for &o in offsets {
        let p = path(dir, o);
        fs.remove_file(&p).ctx("remove", &p)?;
    }
    if !offsets.is_empty() {
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
    }
    Ok(offsets.to_vec())
}

#[cfg(test)]
#[path = "snapshot_files_tests.rs"]
mod tests;
