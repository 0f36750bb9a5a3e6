//! A simulated file system for crash tests (DESIGN.md §9): every file has a *live* image (what
//! the running process sees) and a *durable* image (what survives a power cut), every directory
//! a live and a durable set of entries. [`SimFs::crash`] builds the state after a power cut from
//! the durable images plus an arbitrary, seeded mix of what was not synced.
//!
//! The model, and why it is at least as strict as Linux:
//!
//! * `write_all_at`, `set_len` and `allocate` change the live image. `sync_data` copies the
//!   file's live content and length to the durable image.
//! * A writable map is a [`SharedBuffer`] over the file's first bytes; the engine writes it
//!   through a `MapWriter`. Those writes reach the file's live image only through `msync`
//!   ([`Mapping::flush`], which only accepts published ranges) — or when the last map of the
//!   buffer is gone, as the page cache would keep them. So `sync_data` without `msync` does not
//!   make mapped writes durable (POSIX does not promise it; Linux happens to do it).
//!   At a crash, though, unsynced mapped writes may have been written back and are treated as
//!   live content.
//! * Shrinking a mapped file (the engine trims a segment at roll) keeps the buffer for readers
//!   but shortens the part of it that is file content; bytes past the shortest length the file
//!   had while mapped are never file content again (a write there would be a SIGBUS).
//! * Creations, renames and removals are pending on their directory until `sync_dir`; a crash
//!   keeps a random *prefix* of each directory's pending operations (a journalling file system
//!   commits them in order). Directories themselves are durable once created: the engine never
//!   relies on an unsynced `mkdir`.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::map::{SharedBuffer, SharedFlush};
use super::{File, FileSystem, MapMode, Mapping, OpenMode};

/// Page size of the crash model.
pub const PAGE: usize = 4096;

/// The kinds of operation counted and failed by the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Matches every kind (for [`SimFs::fail_next`] / [`SimFs::fail_from`]).
    Any,
    CreateDir,
    List,
    Exists,
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
    pub data_syncs: u64,
    pub dir_syncs: u64,
    pub msyncs: u64,
    /// Operations that failed by injection.
    pub injected_failures: u64,
    pub crashes: u64,
}

/// What a crash did (for failure messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashReport {
    pub pages_lost: usize,
    pub pages_kept: usize,
    pub pages_torn: usize,
    pub pages_zeroed: usize,
    /// Files whose length became the live one (rather than the durable one).
    pub live_lengths: usize,
    pub dir_ops_kept: usize,
    pub dir_ops_lost: usize,
}

/// A small deterministic PRNG (splitmix64): no dependency, same seed → same sequence.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
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
}

#[derive(Debug, Default)]
struct Dir {
    live: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
    pending: Vec<DirOp>,
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

#[derive(Debug)]
struct Fault {
    kind: OpKind,
    remaining: u64,
    errno: i32,
    sticky: bool,
    firing: bool,
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
    /// Counts an operation and fires an injected fault if one is due.
    fn op(&mut self, kind: OpKind) -> io::Result<()> {
        self.counters.ops += 1;
        let mut errno = None;
        for f in &mut self.faults {
            if f.kind != OpKind::Any && f.kind != kind {
                continue;
            }
            if f.firing {
                errno.get_or_insert(f.errno);
                continue;
            }
            f.remaining = f.remaining.saturating_sub(1);
            if f.remaining == 0 {
                f.firing = true;
                errno.get_or_insert(f.errno);
            }
        }
        self.faults.retain(|f| !f.firing || f.sticky);
        match errno {
            Some(e) => {
                self.counters.injected_failures += 1;
                Err(io::Error::from_raw_os_error(e))
            }
            None => Ok(()),
        }
    }

    fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.live.len() as u64).sum()
    }

    /// Fails with ENOSPC unless `more` bytes fit.
    fn reserve(&self, more: u64) -> io::Result<()> {
        match self.capacity {
            Some(cap) if self.used_bytes() + more > cap => {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => Ok(()),
        }
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
        for d in self.dirs.values() {
            referenced.extend(d.live.values());
            referenced.extend(d.durable.values());
            for op in &d.pending {
                match op {
                    DirOp::Link(_, id) | DirOp::Rename(_, _, id) => referenced.push(*id),
                    DirOp::Unlink(_) => {}
                }
            }
        }
        referenced.sort_unstable();
        self.inodes
            .retain(|id, i| i.handles > 0 || referenced.binary_search(id).is_ok());
    }
}

impl Inode {
    /// Folds the attached buffer back into the live image once no writer can change it (the
    /// page cache keeps what was written through a map after munmap). Read-only maps of it may
    /// live on: their bytes never change, and a later msync of them is checked against the live
    /// image ([`MsyncSink`]). Fails while a writer lives.
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
    pub fn fail_next(&self, kind: OpKind, nth: u64, errno: i32) {
        self.add_fault(kind, nth, errno, false);
    }

    /// Fails the `nth` operation of `kind` from now and every one after it, until
    /// [`Self::clear_faults`]: a disk that died, or a power cut in the middle of an operation.
    pub fn fail_from(&self, kind: OpKind, nth: u64, errno: i32) {
        self.add_fault(kind, nth, errno, true);
    }

    fn add_fault(&self, kind: OpKind, nth: u64, errno: i32, sticky: bool) {
        self.state.lock().faults.push(Fault {
            kind,
            remaining: nth.max(1),
            errno,
            sticky,
            firing: false,
        });
    }

    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Limits the bytes all files may hold (`None`: unlimited). Growth past it fails with
    /// ENOSPC; raising it later frees the disk again.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

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

    /// Power cut: replaces the state by what a machine would find after rebooting, from the
    /// durable images plus a seeded choice of the unsynced changes (see the module docs). Every
    /// handle and map from before becomes dead. Panics if a writable map is still alive: call it
    /// only after the log using this file system was abandoned or closed.
    pub fn crash(&self, seed: u64) -> CrashReport {
        let mut rng = SplitMix64::new(seed ^ 0xC4A5_4C4A_5C4A_5000);
        let mut report = CrashReport::default();
        let mut st = self.state.lock();
        st.counters.crashes += 1;
        // Directory entries: the durable set plus a prefix of the pending operations.
        for dir in st.dirs.values_mut() {
            let keep = rng.below(dir.pending.len() as u64 + 1) as usize;
            report.dir_ops_kept += keep;
            report.dir_ops_lost += dir.pending.len() - keep;
            let mut entries = std::mem::take(&mut dir.durable);
            for op in dir.pending.drain(..).take(keep) {
                match op {
                    DirOp::Link(name, id) => {
                        entries.insert(name, id);
                    }
                    DirOp::Unlink(name) => {
                        entries.remove(&name);
                    }
                    DirOp::Rename(from, to, id) => {
                        entries.remove(&from);
                        entries.insert(to, id);
                    }
                }
            }
            dir.live = entries.clone();
            dir.durable = entries;
        }
        let mut survivors: Vec<u64> = st
            .dirs
            .values()
            .flat_map(|d| d.durable.values().copied())
            .collect();
        survivors.sort_unstable();
        survivors.dedup();
        // File contents. One writeback style per crash: per page at random, or all / none /
        // an in-order prefix of the changed pages.
        let style = rng.below(4);
        let mut inodes = HashMap::new();
        for id in survivors {
            let Some(inode) = st.inodes.get(&id) else {
                continue;
            };
            let live = match inode.live_view() {
                Ok(v) => v,
                Err(e) => panic!("SimFs::crash with a live writable map: {e}"),
            };
            let image = crash_image(&live, &inode.durable, style, &mut rng, &mut report);
            inodes.insert(
                id,
                Inode {
                    live: image.clone(),
                    durable: image,
                    attached: None,
                    handles: 0,
                },
            );
        }
        st.inodes = inodes;
        st.epoch += 1;
        report
    }
}

/// The content of one file after a crash.
fn crash_image(
    live: &[u8],
    durable: &[u8],
    style: u64,
    rng: &mut SplitMix64,
    report: &mut CrashReport,
) -> Vec<u8> {
    let span = live.len().max(durable.len());
    let mut out = durable.to_vec();
    out.resize(span, 0);
    let byte = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
    let changed: Vec<usize> = (0..span.div_ceil(PAGE))
        .filter(|&p| {
            let (a, b) = (p * PAGE, ((p + 1) * PAGE).min(span));
            (a..b).any(|i| byte(live, i) != byte(durable, i))
        })
        .collect();
    let prefix = rng.below(changed.len() as u64 + 1) as usize;
    for (n, &page) in changed.iter().enumerate() {
        let (a, b) = (page * PAGE, ((page + 1) * PAGE).min(span));
        // 0 lost, 1 kept, 2 torn, 3 zeroed.
        let fate = match style {
            0 => rng.below(4),
            1 => 1,
            2 => 0,
            _ if n < prefix => 1,
            _ if n == prefix => 2,
            _ => 0,
        };
        match fate {
            0 => report.pages_lost += 1,
            1 => {
                report.pages_kept += 1;
                for (i, o) in out.iter_mut().enumerate().take(b).skip(a) {
                    *o = byte(live, i);
                }
            }
            2 => {
                report.pages_torn += 1;
                let cut = a + rng.below((b - a) as u64 + 1) as usize;
                for (i, o) in out.iter_mut().enumerate().take(cut).skip(a) {
                    *o = byte(live, i);
                }
            }
            _ => {
                report.pages_zeroed += 1;
                for (i, o) in out.iter_mut().enumerate().take(b).skip(a) {
                    if byte(live, i) != byte(durable, i) {
                        *o = 0;
                    }
                }
            }
        }
    }
    let len = if live.len() != durable.len() && rng.chance(1, 2) {
        report.live_lengths += 1;
        live.len()
    } else {
        durable.len()
    };
    out.truncate(len);
    out
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

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut st = self.state.lock();
        st.op(OpKind::SyncDir)?;
        st.counters.dir_syncs += 1;
        let d = st.dir_mut(&dir)?;
        d.durable = d.live.clone();
        d.pending.clear();
        st.collect_garbage();
        Ok(())
    }
}

/// An open simulated file.
struct SimFile {
    state: Arc<Mutex<State>>,
    id: u64,
    epoch: u64,
    writable: bool,
    path: PathBuf,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("inode", &self.id)
            .finish()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.epoch == self.epoch {
            if let Some(i) = st.inodes.get_mut(&self.id) {
                i.handles = i.handles.saturating_sub(1);
            }
            st.collect_garbage();
        }
    }
}

impl SimFile {
    /// Locks the state, counts the operation (and fires faults), and checks the handle is
    /// from before no crash.
    fn begin(&self, kind: OpKind) -> io::Result<parking_lot::MutexGuard<'_, State>> {
        let mut st = self.state.lock();
        if st.epoch != self.epoch {
            return Err(sim_error(format!(
                "{}: handle from before a crash",
                self.path.display()
            )));
        }
        st.op(kind)?;
        Ok(st)
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("simfs: {} opened read-only", self.path.display()),
            ))
        }
    }

    /// Grows the live image to `len` (zeros), within the capacity.
    fn grow(st: &mut State, id: u64, len: usize) -> io::Result<()> {
        let cur = st.inode(id)?.live.len();
        if len > cur {
            st.reserve((len - cur) as u64)?;
            st.inode(id)?.live.resize(len, 0);
        }
        Ok(())
    }
}

impl File for SimFile {
    fn len(&self) -> io::Result<u64> {
        let mut st = self.begin(OpKind::Len)?;
        Ok(st.inode(self.id)?.live.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.begin(OpKind::SetLen)?;
        let len = len as usize;
        SimFile::grow(&mut st, self.id, len)?;
        let inode = st.inode(self.id)?;
        let _ = inode.detach();
        inode.live.truncate(len);
        inode.shrink_attached(len);
        Ok(())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.begin(OpKind::Allocate)?;
        SimFile::grow(&mut st, self.id, len as usize)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.begin(OpKind::Read)?;
        let inode = st.inode(self.id)?;
        // With a writer alive the read is refused (by `live_view`): the engine never reads a
        // file it is writing through a map.
        let _ = inode.detach();
        let view = inode.live_view()?;
        let start = (offset as usize).min(view.len());
        let n = buf.len().min(view.len() - start);
        buf[..n].copy_from_slice(&view[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.begin(OpKind::Write)?;
        let offset = offset as usize;
        let end = offset + buf.len();
        {
            let inode = st.inode(self.id)?;
            if inode.attached.is_some() && inode.detach().is_err() {
                return Err(sim_error(format!(
                    "{}: write_all_at into a file mapped for writing",
                    self.path.display()
                )));
            }
        }
        SimFile::grow(&mut st, self.id, end)?;
        st.inode(self.id)?.live[offset..end].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.begin(OpKind::SyncData)?;
        st.counters.data_syncs += 1;
        let inode = st.inode(self.id)?;
        // Mapped writes reach the live image by msync, or by writeback once no writer is left.
        let _ = inode.detach();
        inode.durable = inode.live.clone();
        Ok(())
    }

    fn map(&self, len: usize, mode: MapMode) -> io::Result<Mapping> {
        let mut st = self.begin(OpKind::Map)?;
        let (writable, published) = match mode {
            MapMode::ReadOnly => (false, len),
            MapMode::ReadWrite { published } => (true, published.min(len)),
        };
        if writable {
            self.check_writable()?;
        }
        if len == 0 {
            return Ok(Mapping::empty());
        }
        st.next_id += 1;
        let fresh_id = st.next_id;
        let inode = st.inode(self.id)?;
        if inode.live.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "simfs: cannot map {len} bytes of a {}-byte file",
                    inode.live.len()
                ),
            ));
        }
        // Without a writer the old buffer is folded in and left to its readers; the new map
        // gets a fresh buffer (its published bytes equal theirs). With a writer, the buffer
        // is shared and `over_shared_buffer` refuses a second writer or a reader beside it.
        if inode.detach().is_ok() {
            inode.attached = Some(Attached {
                buffer: SharedBuffer::new(inode.live[..len].to_vec()),
                id: fresh_id,
                valid: len,
            });
        }
        let Some(a) = &inode.attached else {
            return Err(sim_error("no buffer"));
        };
        if len > a.valid {
            return Err(sim_error(format!(
                "{}: mapping {len} bytes of a buffer shrunk to {} while mapped",
                self.path.display(),
                a.valid
            )));
        }
        let sink = Box::new(MsyncSink {
            state: Arc::downgrade(&self.state),
            id: self.id,
            buffer_id: a.id,
            epoch: self.epoch,
        });
        Mapping::over_shared_buffer(&a.buffer, len, published, writable, sink).map_err(|e| {
            sim_error(format!(
                "{}: mapping refused (one writer or many readers): {e}",
                self.path.display()
            ))
        })
    }
}

/// Where a simulated map's msync lands: the file's live image.
struct MsyncSink {
    state: Weak<Mutex<State>>,
    id: u64,
    buffer_id: u64,
    epoch: u64,
}

impl SharedFlush for MsyncSink {
    fn flush(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let state = self
            .state
            .upgrade()
            .ok_or_else(|| sim_error("msync after the file system was dropped"))?;
        let mut st = state.lock();
        if st.epoch != self.epoch {
            return Err(sim_error("msync of a map from before a crash"));
        }
        st.op(OpKind::Msync)?;
        st.counters.msyncs += 1;
        let inode = st.inode(self.id)?;
        let end = offset + bytes.len();
        let valid = match &inode.attached {
            Some(a) if a.id == self.buffer_id => a.valid,
            // A map whose buffer was folded into the live image (its writer is gone): its bytes
            // are already there, unless the file was rewritten since, which the engine must not
            // do under a map it still flushes.
            _ if inode.live.get(offset..end) == Some(bytes) => return Ok(()),
            _ => return Err(sim_error("msync of a stale map: the file changed under it")),
        };
        if end > valid.min(inode.live.len()) {
            // On a real system, touching these bytes would be a SIGBUS: the file was shrunk.
            return Err(sim_error(format!(
                "msync of [{offset}, {end}) past the end {valid} of the mapped file"
            )));
        }
        inode.live[offset..end].copy_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
