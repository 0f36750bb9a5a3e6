//! What a partition directory holds, before anything is opened: every name classified, every
//! segment file's kind and length taken with `stat` (a FIFO named like a segment is never
//! opened, and a huge sparse file is never read).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::io::{FileKind, FileSystem, IoError, IoResultExt};
use crate::producer::snapshot_files;
use crate::segment::names;

/// A file the recovery plan may read.
#[derive(Debug, Clone)]
pub(super) struct FileEntry {
    pub path: PathBuf,
    pub kind: FileKind,
    pub len: u64,
}

/// An interrupted swap's `.log.swap` (docs/kafka-format.md §8.2 step 4).
#[derive(Debug, Clone)]
pub(super) struct SwapEntry {
    pub base: i64,
    pub file: FileEntry,
}

/// The classified contents of a partition directory.
#[derive(Debug, Default)]
pub(super) struct Inventory {
    /// `<base>.log` files.
    pub logs: BTreeMap<i64, FileEntry>,
    /// `<base>.log.swap` files that are to be completed (not abandoned by a `.cleaned`).
    pub swaps: Vec<SwapEntry>,
    /// Every other `.swap` file to be completed (the indexes of a swapped segment), by base.
    pub index_swaps: Vec<(i64, PathBuf)>,
    /// Files of interrupted operations that are only removed: `.tmp`, `.deleted`, `.cleaned`,
    /// `.recycle` (a closed log's pool of recycled files), and `.swap` files of an unfinished clean (§8.2 step 3).
    pub garbage: Vec<PathBuf>,
    /// Index files (`.index`, `.timeindex`, `.txnindex`) by base, to find orphans.
    pub indexes: Vec<(i64, PathBuf)>,
    /// Producer snapshots, oldest first.
    pub snapshots: Vec<(i64, PathBuf)>,
    /// The directory has a standalone log's lock file.
    pub lock_file: bool,
    /// Every name in the directory, sorted: what recovery compares with the directory it
    /// leaves, to tell whether the directory itself needs a sync.
    pub names: Vec<String>,
}

impl Inventory {
    pub fn take(fs: &dyn FileSystem, dir: &Path) -> Result<Inventory, IoError> {
        let mut names_in_dir = fs.list(dir).ctx("list", dir)?;
        names_in_dir.sort();
        let mut inv = Inventory::default();
        let min_cleaned = names_in_dir
            .iter()
            .filter_map(|n| names::parse(n))
            .filter(|p| p.suffix == Some(names::CLEANED_SUFFIX))
            .map(|p| p.offset)
            .min();
        for name in &names_in_dir {
            if name == crate::log::LOCK_FILE_NAME {
                inv.lock_file = true;
                continue;
            }
            let path = dir.join(name);
            if name.ends_with(".tmp") {
                inv.garbage.push(path);
                continue;
            }
            if let Some(offset) = snapshot_files::parse_file_name(name) {
                inv.snapshots.push((offset, path));
                continue;
            }
            let Some(p) = names::parse(name) else {
                continue;
            };
            match (p.suffix, p.ext) {
                // A recycled file is kept only while the log that pooled it is open: its old
                // batches are safe to reuse only under that log's invariant (every offset
                // below the log start), which an open does not re-establish.
                (
                    Some(names::DELETED_SUFFIX | names::CLEANED_SUFFIX | names::RECYCLE_SUFFIX),
                    _,
                ) => inv.garbage.push(path),
                (Some(names::SWAP_SUFFIX), _) if min_cleaned.is_some_and(|m| p.offset >= m) => {
                    inv.garbage.push(path)
                }
                (Some(names::SWAP_SUFFIX), names::LOG_EXT) => inv.swaps.push(SwapEntry {
                    base: p.offset,
                    file: entry(fs, path)?,
                }),
                (Some(names::SWAP_SUFFIX), _) => inv.index_swaps.push((p.offset, path)),
                (Some(_), _) => {}
                (None, names::LOG_EXT) => {
                    inv.logs.insert(p.offset, entry(fs, path)?);
                }
                (None, names::INDEX_EXT | names::TIME_INDEX_EXT | names::TXN_INDEX_EXT) => {
                    inv.indexes.push((p.offset, path))
                }
                (None, _) => {}
            }
        }
        inv.names = names_in_dir;
        Ok(inv)
    }

    /// Whether `dir` now holds other names than when this inventory was taken.
    pub fn names_changed(&self, fs: &dyn FileSystem, dir: &Path) -> Result<bool, IoError> {
        let mut now = fs.list(dir).ctx("list", dir)?;
        now.sort();
        Ok(now != self.names)
    }
}

fn entry(fs: &dyn FileSystem, path: PathBuf) -> Result<FileEntry, IoError> {
    let meta = fs.stat(&path).ctx("stat", &path)?;
    Ok(FileEntry {
        path,
        kind: meta.kind,
        len: meta.len,
    })
}
