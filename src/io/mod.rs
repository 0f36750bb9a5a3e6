//! The file-system seam (docs/design.md, "Layers"): every file operation of the engine goes through
//! [`FileSystem`] and [`File`], so crash tests can swap the real implementation for a simulated
//! one that keeps a live and a durable image of every file.
//!
//! Memory maps are the one place where bytes move without a call: [`Mapping`] (in the small
//! `map` module, the only `unsafe` code of the crate) makes that safe with a *publish
//! watermark*: readers can only see bytes below it, and the map's single writer only writes
//! above it.
//!
//! To bring your own file system (to count, delay or fail operations), implement
//! [`FileSystem`] and [`File`] and pass it in [`crate::Environment`]. `File::map` delegates to
//! a file of [`RealFs`] (or answers [`Mapping::empty`] for an empty file): no public function
//! wraps raw memory in a `Mapping`, because the safety of every read rests on how the memory
//! was mapped.

mod error;
// The shared buffers behind simulated maps serve `sim` alone, which only tests compile.
#[allow(unsafe_code)]
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
mod map;
mod real;
internal_mod!(
    #[cfg(any(test, feature = "internals"))]
    sim
);

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use error::IoError;
pub(crate) use map::open_files_limit;
pub use map::Mapping;
pub use real::RealFs;

pub(crate) use error::IoResultExt;
pub(crate) use map::MapWriter;
#[cfg(any(test, feature = "internals"))]
pub use sim::{OpKind as SimOp, SimFs};

/// How [`FileSystem::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist. Used by read-only tools, which never modify what they read.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; created empty if missing, kept as it is otherwise.
    Create,
    /// Read and write; created empty, or truncated to empty if it exists.
    CreateTruncate,
}

/// How [`File::map`] maps a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// The whole mapped range is published; no writer exists.
    ReadOnly,
    /// Shared, writable: the engine's one writer of the map writes above the first `published`
    /// bytes and publishes what it wrote.
    ReadWrite {
        /// The bytes readers may see at once (the file's data; the rest is preallocation).
        published: usize,
    },
    /// As [`MapMode::ReadWrite`], and the writer may write through the file instead of the
    /// memory ([`crate::AppendWrites::File`]): a real file's map then keeps a descriptor of
    /// the file open for as long as it lives.
    WriteThrough {
        /// As for [`MapMode::ReadWrite`].
        published: usize,
    },
}

/// What kind of directory entry a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file: the only kind the engine reads or writes.
    File,
    /// A directory.
    Dir,
    /// Anything else (a FIFO, a socket, a device): never opened, since opening a FIFO blocks
    /// until a writer appears and a device can be of any size.
    Other(&'static str),
}

impl FileKind {
    /// What to call it in an error message.
    pub fn name(self) -> &'static str {
        match self {
            FileKind::File => "regular file",
            FileKind::Dir => "directory",
            FileKind::Other(name) => name,
        }
    }
}

/// What [`FileSystem::stat`] tells of a path (after following symbolic links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    /// What the path names.
    pub kind: FileKind,
    /// Its length in bytes.
    pub len: u64,
}

/// A lock on a file, held until dropped (see [`FileSystem::try_lock`] and
/// [`FileSystem::try_lock_shared`]).
pub struct FileLock(#[allow(dead_code)] Box<dyn Send + Sync>);

impl FileLock {
    /// Wraps whatever keeps the lock held (an open file, a simulated table entry).
    pub fn new(guard: Box<dyn Send + Sync>) -> FileLock {
        FileLock(guard)
    }
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileLock")
    }
}

/// A directory tree of files: the operations the engine needs, and no more.
pub trait FileSystem: Send + Sync + Debug + 'static {
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of `dir` (files and directories), in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Whether `path` names anything.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The kind and length of what `path` names; `NotFound` if nothing.
    fn stat(&self, path: &Path) -> io::Result<FileMeta>;
    /// Takes an exclusive lock on `path` (created if missing) without waiting, and writes
    /// `holder` into it for whoever is refused. `WouldBlock` if another holder has it: another
    /// process, or another handle in this one. Released when the [`FileLock`] is dropped or the
    /// process dies (`flock(2)` semantics).
    fn try_lock(&self, path: &Path, holder: &str) -> io::Result<FileLock>;
    /// Takes a shared lock on `path`, which must exist (`NotFound` otherwise; nothing is
    /// created or written), without waiting: `WouldBlock` while an exclusive lock
    /// ([`Self::try_lock`]) is held on it, in this process or another. Shared holders do not
    /// exclude each other; while one is held, [`Self::try_lock`] is refused.
    fn try_lock_shared(&self, path: &Path) -> io::Result<FileLock>;
    /// Opens a regular file (see [`OpenMode`]).
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>>;
    /// Atomically replaces `to` with `from` (POSIX rename). Durable only after [`Self::sync_dir`].
    /// `from` may also be a directory, renamed within its parent to a name that is free (the
    /// log manager's `<topic>-<n>.<id>-delete`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file. Durable only after [`Self::sync_dir`].
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory. Durable only after [`Self::sync_dir`] of its parent.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether the engine may call this file system from its background threads, which
    /// allocate segment space ahead of the writer. A simulated file system answers false: the
    /// same work then happens on the appending thread, in an order a seed replays.
    fn allows_background_io(&self) -> bool {
        true
    }
}

/// One open file.
pub trait File: Send + Sync + Debug {
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Grows (with zeros) or shrinks the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes sure `[0, len)` is backed by really allocated blocks (fallocate, not a sparse
    /// hole), growing the file to `len` if it is shorter. A full disk fails here, with an error,
    /// instead of later as a SIGBUS on a write through a map (docs/design.md, "Memory maps without
    /// hazards").
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Allocates `[offset, offset + len)` as [`File::allocate`] does and writes zeros over it,
    /// growing the file to its end, and writes them back to the device (without making them
    /// durable): its blocks are then allocated *and written*, so a later overwrite and sync
    /// change no file-system metadata. (`allocate` leaves unwritten extents on ext4 and XFS:
    /// the first write-back of each range converts them, a metadata write in every sync that
    /// reaches new blocks; docs/performance.md.) The range must hold zeros already or lie past
    /// the end: the engine allocates with it, it never erases.
    ///
    /// The default only allocates.
    fn write_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        self.allocate(offset.saturating_add(len))
    }
    /// Starts writing `[offset, offset + len)` back to the device and waits for it, without
    /// making anything durable (`sync_file_range`; no metadata, no cache flush): after
    /// [`File::write_zeros`], it converts the new extents long before the writer reaches them,
    /// and is called without holding the lock the writer may wait on. Only moves work
    /// earlier, so the default does nothing.
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Writes `[offset, offset + len)` back to the device and waits for it, so that the next
    /// cache flush of the device makes it durable: a data sync of any file of the same file
    /// system issues one (one device flush for two files, docs/design.md, "One device flush a
    /// round"). Answers `true` only where that is promised: the range lies within the file's
    /// durable length, in blocks allocated and written before and synced since (an overwrite
    /// in place, which needs no metadata), on a file system that overwrites data in place
    /// (ext4 without `data=journal`, XFS). Anywhere else it answers `false`, having made
    /// nothing durable, and the caller syncs the file itself.
    ///
    /// The default promises nothing.
    fn write_back_for_flush(&self, offset: u64, len: u64) -> io::Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
    /// Starts writing `[offset, offset + len)` back to the device without waiting
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that a [`File::write_back_for_flush`]
    /// of it that follows, after another file's write-back was started too, waits for both
    /// writes at once rather than one after the other. A hint: failures are the later call's
    /// to report, and the default does nothing.
    fn start_write_back(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`, growing the file if it ends before.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// fdatasync: the file's data and the metadata needed to read it back (its length).
    fn sync_data(&self) -> io::Result<()>;
    /// Maps `[0, len)`. The file must be at least as long as the bytes in the map that are read
    /// or written, for as long as they are: only shrink a mapped file below bytes nobody will
    /// touch again. A read-only map must fit in the file; a writable one may be longer (a
    /// reserve the file grows into, as the active segment's does): its writer only writes
    /// below the limit it is granted (`MapWriter::grant`), which the engine raises only
    /// after growing the file.
    fn map(&self, len: usize, mode: MapMode) -> io::Result<Mapping>;
    /// The open descriptor of a real file, for a map of it to write through
    /// (`MapWriter::attach_writes`); `None` for a file that needs none (the simulated file
    /// system's maps write through their file without one).
    fn into_descriptor(self: Box<Self>) -> Option<std::fs::File> {
        None
    }
}

/// What [`read_small_file`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SmallFile {
    Missing,
    /// Not a regular file (its kind); it was not opened.
    NotAFile(&'static str),
    /// Larger than the limit (its length); it was not read.
    TooLarge(u64),
    Bytes(Vec<u8>),
}

/// Reads a small metadata file (a checkpoint, a snapshot) whole, after checking that it is a
/// regular file of at most `max_len` bytes: a FIFO would block the read and a huge sparse file
/// would exhaust memory, so neither is opened.
pub(crate) fn read_small_file(
    fs: &dyn FileSystem,
    path: &Path,
    max_len: u64,
) -> Result<SmallFile, IoError> {
    let meta = match fs.stat(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SmallFile::Missing),
        Err(e) => return Err(IoError::new("stat", path, e)),
    };
    if meta.kind != FileKind::File {
        return Ok(SmallFile::NotAFile(meta.kind.name()));
    }
    if meta.len > max_len {
        return Ok(SmallFile::TooLarge(meta.len));
    }
    read_file(fs, path).map(SmallFile::Bytes)
}

/// Reads a whole (small) file ([`FileSystem::read_whole`](trait.FileSystem.html) for callers
/// outside the engine). The engine's callers that read what they did not write use
/// `read_small_file`, which checks type and size first.
pub(crate) fn read_file(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>, IoError> {
    let file = fs.open(path, OpenMode::Read).ctx("open", path)?;
    let len = file.len().ctx("stat", path)? as usize;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = file
            .read_at(&mut buf[done..], done as u64)
            .ctx("read", path)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}

/// The two file operations a layer above the engine needs for small files of its own kept beside
/// a log's (the replication crate's raft state), through the same [`FileSystem`] so that the
/// simulated one models them and their crashes too.
impl dyn FileSystem {
    /// Reads a whole small file.
    pub fn read_whole(&self, path: &Path) -> Result<Vec<u8>, IoError> {
        read_file(self, path)
    }

    /// Writes a small file so that a crash leaves either its old or its new content, never a
    /// mix (docs/design.md, "Files and the checkpoint"): a temp file beside it (`<name>.tmp`),
    /// fsynced, renamed over it, and the directory fsynced.
    pub fn write_atomically(&self, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
        write_file_atomically(self, path, bytes)
    }
}

/// The name a file is written under before it is renamed into place.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes a small metadata file so that a crash leaves either the old or the new content,
/// never a mix (docs/design.md, "Files and the checkpoint"): temp file, fsync, rename over the
/// target, fsync the directory ([`FileSystem::write_atomically`](trait.FileSystem.html) for
/// callers outside the engine).
pub(crate) fn write_file_atomically(
    fs: &dyn FileSystem,
    path: &Path,
    bytes: &[u8],
) -> Result<(), IoError> {
    write_file_synced(fs, &temp_path(path), bytes)?;
    publish_file(fs, &temp_path(path), path)
}

/// Writes and fsyncs `path` (the first half of [`write_file_atomically`]).
pub(crate) fn write_file_synced(
    fs: &dyn FileSystem,
    path: &Path,
    bytes: &[u8],
) -> Result<(), IoError> {
    let file = fs
        .open(path, OpenMode::CreateTruncate)
        .ctx("create", path)?;
    file.write_all_at(bytes, 0).ctx("write", path)?;
    file.sync_data().ctx("fsync", path)
}

/// Renames a synced temp file over its target and makes the rename durable (the second half
/// of [`write_file_atomically`]).
pub(crate) fn publish_file(fs: &dyn FileSystem, temp: &Path, path: &Path) -> Result<(), IoError> {
    fs.rename(temp, path).ctx("rename", temp)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    fs.sync_dir(dir).ctx("fsync directory", dir)
}

/// The real file system.
pub(crate) fn real() -> Arc<dyn FileSystem> {
    Arc::new(RealFs)
}
