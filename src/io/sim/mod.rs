//! A simulated file system for crash tests (docs/design.md, "How the guarantees are tested"): every
//! file has a *live* image (what the running process sees) and a *durable* image (what survives a
//! power cut), every directory a live and a durable set of entries. [`SimFs::crash`] builds the
//! state after a power cut from the durable images plus an arbitrary, seeded mix of what was not
//! synced.
//!
//! The model, and why it is at least as strict as Linux:
//!
//! * `write_all_at`, `set_len`, `allocate` and `write_zeros` change the live image. `sync_data`
//!   copies the file's live content and length to the durable image; a durable msync
//!   (`MS_SYNC`, a ranged fdatasync) copies the synced range and the length.
//! * `write_back_for_flush` copies a range of the live image aside, as the device holds it in
//!   its volatile cache: the next data sync of *any* file (a cache flush of the one device)
//!   copies it to the durable image, within the durable length; a crash before that loses
//!   it or not, like any unsynced change. A range past the durable length is an error: it
//!   would need the length committed, which no write-back does.
//! * A writable map is a [`SharedBuffer`] over the file's first bytes (and zeros past its end,
//!   for a map that reserves room for the file to grow into); the engine writes it
//!   through a `MapWriter`. Those writes reach the file's live image only through `msync`
//!   ([`Mapping::flush`](super::Mapping::flush), which only accepts published ranges) — or
//!   when the last map of the buffer is gone, as the page cache would keep them. So
//!   `sync_data` without `msync` does not make mapped writes durable (POSIX does not promise
//!   it; Linux happens to do it).
//!   At a crash, though, unsynced mapped writes may have been written back and are treated as
//!   live content.
//! * Shrinking a mapped file (the engine trims a segment at roll) keeps the buffer for readers
//!   but shortens the part of it that is file content; bytes past the shortest length the file
//!   had while mapped are never file content again (a write there would be a SIGBUS).
//! * Creations, renames and removals are pending on their directory until `sync_dir`; a crash
//!   keeps a random *prefix* of each directory's pending operations (a journalling file system
//!   commits them in order). Directories themselves are durable once created: the engine never
//!   relies on an unsynced `mkdir`. Renaming a directory (within its parent) and removing an
//!   empty one are pending on the parent like a file's rename and removal: a crash that loses
//!   them brings the directory back under its old name, with what it durably held.
//! * A crash, for every 4096-byte page where the live and durable images differ, keeps the old
//!   page, the new one, the new one torn at a random byte (new prefix, old rest), or zeroes the
//!   bytes that changed — chosen per page (writeback in any order) or as a whole (all, none,
//!   in-order prefix). The length is the durable or the live one. All from a `u64` seed.
//! * Faults: the Nth operation of a kind fails with an errno, once ([`SimFs::fail_next`]) or
//!   from then on ([`SimFs::fail_from`], a dead disk or a power cut in the middle of an
//!   operation); a capacity in bytes makes allocations fail with ENOSPC until it is raised.
//!
//! [`SimFs::crash`] must only be called when no log (no writable map) is alive: it reads every
//! mapped buffer, and it panics if one still has a writer.

mod crash;
mod faults;
mod file;
mod rng;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::map::SharedBuffer;
use super::{File, FileKind, FileLock, FileMeta, FileSystem, OpenMode};

pub use crash::{CrashReport, PAGE};
use faults::Fault;
use file::SimFile;
pub use rng::SplitMix64;

/// The kinds of operation counted and failed by the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// Matches every kind (for [`SimFs::fail_next`] / [`SimFs::fail_from`]).
    Any,
    CreateDir,
    List,
    Exists,
    Stat,
    Lock,
    Open,
    Rename,
    Remove,
    SyncDir,
    Len,
    SetLen,
    Allocate,
    Read,
    Write,
    SyncData,
    Map,
    /// `Mapping::flush` of a simulated map.
    Msync,
}

/// What the simulator has counted since it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Every operation, of every kind.
    pub ops: u64,
    /// The same by kind (a crash sweep's sample checks it performs every kind the full sweep
    /// does).
    pub by_kind: std::collections::BTreeMap<OpKind, u64>,
    pub data_syncs: u64,
    pub dir_syncs: u64,
    pub msyncs: u64,
    /// Maps made (`File::map`), and reads (`File::read_at`) by kind of file, as the last
    /// extension of the file's name (`log`, `index`, `snapshot`, ...).
    pub maps: std::collections::BTreeMap<String, u64>,
    pub reads: std::collections::BTreeMap<String, u64>,
    /// Operations that failed by injection.
    pub injected_failures: u64,
    pub crashes: u64,
}

/// The simulated file system. Cheap to clone: clones share the same files.
#[derive(Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for SimFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("SimFs")
            .field("dirs", &st.dirs.len())
            .field("inodes", &st.inodes.len())
            .field("counters", &st.counters)
            .finish()
    }
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(String, u64),
    Unlink(String),
    Rename(String, String, u64),
    /// A subdirectory renamed; the number orders it among every directory operation.
    RenameDir(String, String, u64),
    /// A subdirectory removed: what it held is in `State::removed_dirs` under the number.
    RemoveDir(String, u64),
}

#[derive(Debug, Default)]
struct Dir {
    live: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
    pending: Vec<DirOp>,
    /// How many of `pending` the crash being built keeps.
    kept: usize,
}

#[derive(Debug)]
struct Attached {
    buffer: Arc<SharedBuffer>,
    /// Distinguishes buffers of one inode, so a stale map's msync is refused.
    id: u64,
    /// `[0, valid)` of the buffer is file content; past it the file was shrunk while mapped.
    valid: usize,
}

#[derive(Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    attached: Option<Attached>,
    handles: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Bumped by every crash: handles from before it are dead.
    epoch: u64,
    next_id: u64,
    inodes: HashMap<u64, Inode>,
    dirs: BTreeMap<PathBuf, Dir>,
    counters: Counters,
    faults: Vec<Fault>,
    capacity: Option<u64>,
    /// Held locks by path, with the id of the guard holding each (a crash drops them all, as
    /// the death of the process releases `flock` locks).
    locks: HashMap<PathBuf, u64>,
    /// Held shared locks by path, with the ids of their guards.
    shared_locks: HashMap<PathBuf, Vec<u64>>,
    /// Numbers directory renames and removals, so a crash undoes those it loses newest first.
    dir_ops: u64,
    /// Directories removed while their parent's removal entry is not durable: their path and
    /// entries, by the number of the removal, to bring back if a crash loses it.
    removed_dirs: BTreeMap<u64, (PathBuf, Dir)>,
    /// Ranges written back to the device by `write_back_for_flush` and not yet flushed: the
    /// inode, the offset, and the bytes as they were written back. The next data sync (of any
    /// file: the device's cache flush) makes them durable.
    written_back: Vec<(u64, usize, Vec<u8>)>,
}

impl State {
    /// A device cache flush: what was written back before it becomes durable, within each
    /// file's durable length (a write-back commits no length).
    fn flush_device(&mut self) {
        for (id, offset, bytes) in std::mem::take(&mut self.written_back) {
            let Some(inode) = self.inodes.get_mut(&id) else {
                continue;
            };
            let end = (offset + bytes.len()).min(inode.durable.len());
            if offset < end {
                inode.durable[offset..end].copy_from_slice(&bytes[..end - offset]);
            }
        }
    }
}

fn sim_error(msg: impl Into<String>) -> io::Error {
    io::Error::other(format!("simfs: {}", msg.into()))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("simfs: {} not found", path.display()),
    )
}

/// `a/./b/../c` → `a/c`, so paths compare as the same entry.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let path = normalize(path);
    let name = path
        .file_name()
        .ok_or_else(|| sim_error(format!("{} has no file name", path.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok((parent, name))
}

impl State {
    fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.live.len() as u64).sum()
    }

    fn dir(&self, dir: &Path) -> io::Result<&Dir> {
        self.dirs.get(dir).ok_or_else(|| not_found(dir))
    }
    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| not_found(dir))
    }

    fn inode(&mut self, id: u64) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&id)
            .ok_or_else(|| sim_error(format!("inode {id} is gone")))
    }

    /// Removes inodes nothing refers to any more (no entry, live or durable, no handle).
    fn collect_garbage(&mut self) {
        let mut referenced: Vec<u64> = Vec::new();
        let removed = self.removed_dirs.values().map(|(_, d)| d);
        for d in self.dirs.values().chain(removed) {
            referenced.extend(d.live.values());
            referenced.extend(d.durable.values());
            for op in &d.pending {
                match op {
                    DirOp::Link(_, id) | DirOp::Rename(_, _, id) => referenced.push(*id),
                    DirOp::Unlink(_) | DirOp::RenameDir(..) | DirOp::RemoveDir(..) => {}
                }
            }
        }
        referenced.sort_unstable();
        self.inodes
            .retain(|id, i| i.handles > 0 || referenced.binary_search(id).is_ok());
    }
}

impl State {
    /// Renames the directory `from_name` of `parent` to `to_name` (only within its parent, as
    /// the engine does), its subdirectories with it; pending on the parent until it is synced.
    fn rename_dir(
        &mut self,
        parent: &Path,
        from_name: &str,
        to_parent: &Path,
        to_name: &str,
    ) -> io::Result<()> {
        if parent != to_parent {
            return Err(sim_error("a directory is renamed only within its parent"));
        }
        let (from, to) = (parent.join(from_name), parent.join(to_name));
        if self.dirs.contains_key(&to) || self.dir(parent)?.live.contains_key(to_name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("simfs: {} exists", to.display()),
            ));
        }
        self.move_dir_tree(&from, &to);
        self.dir_ops += 1;
        let n = self.dir_ops;
        self.dir_mut(parent)?
            .pending
            .push(DirOp::RenameDir(from_name.to_string(), to_name.to_string(), n));
        Ok(())
    }

    /// Moves the directory `from` and everything under it to `to`.
    fn move_dir_tree(&mut self, from: &Path, to: &Path) {
        let moved: Vec<PathBuf> = self
            .dirs
            .keys()
            .filter(|k| k.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            if let (Some(d), Ok(rest)) = (self.dirs.remove(&old), old.strip_prefix(from)) {
                self.dirs.insert(to.join(rest), d);
            }
        }
    }
}

impl Inode {
    /// Folds the attached buffer back into the live image once no writer can change it (the
    /// page cache keeps what was written through a map after munmap). Read-only maps of it may
    /// live on: their bytes never change, and a later msync of them is checked against the live
    /// image ([`MsyncSink`](file::MsyncSink)). Fails while a writer lives.
    fn detach(&mut self) -> io::Result<()> {
        let Some(a) = &self.attached else {
            return Ok(());
        };
        let n = a.valid.min(self.live.len());
        a.buffer
            .read_unwritten(0, &mut self.live[..n])
            .map_err(|e| sim_error(e.to_string()))?;
        self.attached = None;
        Ok(())
    }

    /// The live image including bytes written through a map and not yet msynced. Fails if a
    /// writable map is alive.
    fn live_view(&self) -> io::Result<Vec<u8>> {
        let mut view = self.live.clone();
        if let Some(a) = &self.attached {
            let n = a.valid.min(view.len());
            a.buffer
                .read_unwritten(0, &mut view[..n])
                .map_err(|e| sim_error(format!("cannot read a mapped file: {e}")))?;
        }
        Ok(view)
    }

    fn shrink_attached(&mut self, len: usize) {
        if let Some(a) = &mut self.attached {
            a.valid = a.valid.min(len);
        }
    }
}

impl Default for SimFs {
    fn default() -> Self {
        SimFs::new()
    }
}

impl SimFs {
    pub fn new() -> SimFs {
        let mut st = State::default();
        st.dirs.insert(PathBuf::from("/"), Dir::default());
        SimFs {
            state: Arc::new(Mutex::new(st)),
        }
    }

    /// This file system as the engine's seam.
    pub fn as_dyn(&self) -> Arc<dyn FileSystem> {
        Arc::new(self.clone())
    }

    pub fn counters(&self) -> Counters {
        self.state.lock().counters.clone()
    }

    /// Fails the `nth` (1 = the next) operation of `kind` from now with `errno`, once.
    /// Bytes all files hold now (their live lengths).
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used_bytes()
    }

    /// The live content of a file, as the process would read it (tests).
    pub fn read_live(&self, path: &Path) -> io::Result<Vec<u8>> {
        let (dir, name) = split(path)?;
        let st = self.state.lock();
        let id = *st
            .dir(&dir)?
            .live
            .get(&name)
            .ok_or_else(|| not_found(path))?;
        st.inodes
            .get(&id)
            .ok_or_else(|| not_found(path))?
            .live_view()
    }

    /// The durable content of a file under its durable name, if it has one (tests).
    pub fn read_durable(&self, path: &Path) -> Option<Vec<u8>> {
        let (dir, name) = split(path).ok()?;
        let st = self.state.lock();
        let id = st.dirs.get(&dir)?.durable.get(&name)?;
        Some(st.inodes.get(id)?.durable.clone())
    }
}

impl FileSystem for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut st = self.state.lock();
        st.op(OpKind::CreateDir)?;
        let mut p = PathBuf::new();
        for c in dir.components() {
            p.push(c);
            st.dirs.entry(p.clone()).or_default();
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let dir = normalize(dir);
        let mut st = self.state.lock();
        st.op(OpKind::List)?;
        let mut names: Vec<String> = st.dir(&dir)?.live.keys().cloned().collect();
        for sub in st.dirs.keys() {
            if sub.parent() == Some(dir.as_path()) {
                if let Some(n) = sub.file_name() {
                    names.push(n.to_string_lossy().into_owned());
                }
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let path = normalize(path);
        let mut st = self.state.lock();
        st.op(OpKind::Exists)?;
        if st.dirs.contains_key(&path) {
            return Ok(true);
        }
        let (dir, name) = split(&path)?;
        Ok(st
            .dirs
            .get(&dir)
            .is_some_and(|d| d.live.contains_key(&name)))
    }

    fn stat(&self, path: &Path) -> io::Result<FileMeta> {
        let path = normalize(path);
        let mut st = self.state.lock();
        st.op(OpKind::Stat)?;
        if st.dirs.contains_key(&path) {
            return Ok(FileMeta {
                kind: FileKind::Dir,
                len: 0,
            });
        }
        let (dir, name) = split(&path)?;
        let id = *st
            .dirs
            .get(&dir)
            .and_then(|d| d.live.get(&name))
            .ok_or_else(|| not_found(&path))?;
        let len = st.inode(id)?.live.len() as u64;
        Ok(FileMeta {
            kind: FileKind::File,
            len,
        })
    }

    fn try_lock(&self, path: &Path, holder: &str) -> io::Result<FileLock> {
        let file = self.open(path, OpenMode::Create)?;
        let key = normalize(path);
        let id = {
            let mut st = self.state.lock();
            st.op(OpKind::Lock)?;
            if st.locks.contains_key(&key) || st.shared_locks.contains_key(&key) {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            st.next_id += 1;
            let id = st.next_id;
            st.locks.insert(key.clone(), id);
            id
        };
        let guard = SimLock {
            state: Arc::clone(&self.state),
            key,
            id,
            shared: false,
        };
        file.set_len(0)?;
        file.write_all_at(holder.as_bytes(), 0)?;
        Ok(FileLock::new(Box::new(guard)))
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<FileLock> {
        let _file = self.open(path, OpenMode::Read)?;
        let key = normalize(path);
        let mut st = self.state.lock();
        st.op(OpKind::Lock)?;
        if st.locks.contains_key(&key) {
            return Err(io::Error::from(io::ErrorKind::WouldBlock));
        }
        st.next_id += 1;
        let id = st.next_id;
        st.shared_locks.entry(key.clone()).or_default().push(id);
        drop(st);
        Ok(FileLock::new(Box::new(SimLock {
            state: Arc::clone(&self.state),
            key,
            id,
            shared: true,
        })))
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        let (dir, name) = split(path)?;
        let mut st = self.state.lock();
        st.op(OpKind::Open)?;
        let existing = st.dir(&dir)?.live.get(&name).copied();
        let id = match (existing, mode) {
            (Some(id), OpenMode::CreateTruncate) => {
                let inode = st.inode(id)?;
                inode.detach()?;
                inode.live.clear();
                id
            }
            (Some(id), _) => id,
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(not_found(path)),
            (None, OpenMode::Create | OpenMode::CreateTruncate) => {
                st.next_id += 1;
                let id = st.next_id;
                st.inodes.insert(id, Inode::default());
                let d = st.dir_mut(&dir)?;
                d.live.insert(name.clone(), id);
                d.pending.push(DirOp::Link(name, id));
                id
            }
        };
        st.inode(id)?.handles += 1;
        Ok(Box::new(SimFile {
            state: Arc::clone(&self.state),
            id,
            epoch: st.epoch,
            writable: mode != OpenMode::Read,
            path: normalize(path),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        let mut st = self.state.lock();
        st.op(OpKind::Rename)?;
        if st.dirs.contains_key(&normalize(from)) {
            return st.rename_dir(&from_dir, &from_name, &to_dir, &to_name);
        }
        let id = *st
            .dir(&from_dir)?
            .live
            .get(&from_name)
            .ok_or_else(|| not_found(from))?;
        st.dir(&to_dir)?;
        if from_dir == to_dir {
            let d = st.dir_mut(&from_dir)?;
            d.live.remove(&from_name);
            d.live.insert(to_name.clone(), id);
            d.pending.push(DirOp::Rename(from_name, to_name, id));
        } else {
            // Across directories the two halves become durable independently.
            let d = st.dir_mut(&from_dir)?;
            d.live.remove(&from_name);
            d.pending.push(DirOp::Unlink(from_name));
            let d = st.dir_mut(&to_dir)?;
            d.live.insert(to_name.clone(), id);
            d.pending.push(DirOp::Link(to_name, id));
        }
        st.collect_garbage();
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (dir, name) = split(path)?;
        let mut st = self.state.lock();
        st.op(OpKind::Remove)?;
        let d = st.dir_mut(&dir)?;
        if d.live.remove(&name).is_none() {
            return Err(not_found(path));
        }
        d.pending.push(DirOp::Unlink(name));
        st.collect_garbage();
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        let path = normalize(dir);
        let (parent, name) = split(&path)?;
        let mut st = self.state.lock();
        st.op(OpKind::Remove)?;
        let d = st.dir(&path)?;
        let has_subdir = st.dirs.keys().any(|k| k.parent() == Some(path.as_path()));
        if !d.live.is_empty() || has_subdir {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!("simfs: {} is not empty", path.display()),
            ));
        }
        st.dir(&parent)?;
        let removed = st.dirs.remove(&path).unwrap_or_default();
        st.dir_ops += 1;
        let n = st.dir_ops;
        st.removed_dirs.insert(n, (path, removed));
        st.dir_mut(&parent)?.pending.push(DirOp::RemoveDir(name, n));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut st = self.state.lock();
        st.op(OpKind::SyncDir)?;
        st.counters.dir_syncs += 1;
        let d = st.dir_mut(&dir)?;
        d.durable = d.live.clone();
        let removals: Vec<u64> = d
            .pending
            .drain(..)
            .filter_map(|op| match op {
                DirOp::RemoveDir(_, n) => Some(n),
                _ => None,
            })
            .collect();
        for n in removals {
            st.removed_dirs.remove(&n);
        }
        st.collect_garbage();
        Ok(())
    }

    /// No: a background thread would make the order of operations, and so which one a fault
    /// or a crash hits, depend on scheduling rather than on the seed.
    fn allows_background_io(&self) -> bool {
        false
    }
}

/// A held simulated lock; dropping it releases the lock unless a crash already did.
struct SimLock {
    state: Arc<Mutex<State>>,
    key: PathBuf,
    id: u64,
    shared: bool,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if self.shared {
            if let Some(ids) = st.shared_locks.get_mut(&self.key) {
                ids.retain(|&i| i != self.id);
                if ids.is_empty() {
                    st.shared_locks.remove(&self.key);
                }
            }
        } else if st.locks.get(&self.key) == Some(&self.id) {
            st.locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests;
