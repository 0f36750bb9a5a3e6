//! Shared memory maps with a publish watermark: the only `unsafe` code in oncelog.
//!
//! The hazards of a shared map (docs/design.md: contract 4 and "Memory maps without hazards") and
//! how this module closes them:
//!
//! * **A reader sees bytes change.** Readers only get slices of `[0, published)`
//!   ([`Mapping::slice`], [`Mapping::bytes`]); the one [`MapWriter`] of a map only writes
//!   `[published, len)` and moves `published` forward, never back. So a published byte never
//!   changes while the map lives.
//! * **A reader sees half a write.** `publish` is a `Release` store after the copy; readers load
//!   it with `Acquire`, so every byte below the watermark they read is fully written.
//! * **A reader outlives the map.** A returned [`bytes::Bytes`] owns an `Arc` of the map, so the
//!   pages stay mapped until the last reader is gone, even after the file is closed or deleted.
//! * **SIGBUS.** The file must stay at least as long as the bytes anyone touches. A writable
//!   map may be longer than its file (address space reserved for the file to grow into), but
//!   its writer only writes below the limit it was granted ([`MapWriter::grant`]), which the
//!   owner raises only after a real allocation (the `File::allocate` contract) grew the file;
//!   files are only trimmed down to their published length.

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// What keeps a mapping's memory alive and flushes it; dropped when the last [`Mapping`]
/// reference goes (which unmaps it).
pub trait MapBacking: Send + Sync + 'static {
    /// Schedules the dirty pages of `[offset, offset + len)` for write-back (msync `MS_ASYNC`).
    fn flush(&self, offset: usize, len: usize) -> io::Result<()>;
    /// Makes `[offset, offset + len)` durable: its pages and the metadata needed to read them
    /// back (msync `MS_SYNC`, a ranged `fdatasync`).
    fn sync(&self, offset: usize, len: usize) -> io::Result<()>;
    /// Starts writing the dirty pages of `[offset, offset + len)` back to the device without
    /// waiting for them (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), where the map is written
    /// through a file it holds: a sync that follows then finds them under way. A hint: doing
    /// nothing is correct.
    fn start_write_back(&self, _offset: usize, _len: usize) {}
    /// Writes the pages of `[offset, offset + len)` back to the device and waits for them,
    /// so that the next cache flush of the device (a data sync of any file of the same file
    /// system) makes them durable, as [`super::File::write_back_for_flush`] does for a file.
    /// Answers `true` only where the file system promises that; the caller must know the
    /// range lies in blocks allocated, written and synced before (only their data changed).
    /// The default promises nothing.
    fn write_back_for_flush(&self, _offset: usize, _len: usize) -> io::Result<bool> {
        Ok(false)
    }
    /// The mapping's [`MapWriter`] is gone: no byte of the mapping will change again.
    fn writer_dropped(&self) {}
    /// Faults in the pages of `[offset, offset + len)` ahead of the writer, readable (`write`
    /// false: the page-cache pages are allocated and zeroed, a first write still takes a cheap
    /// write-protect fault) or writable; for a map its writer writes through the file, only
    /// the pages the page cache lacks. A hint: doing nothing is correct.
    fn populate(&self, _offset: usize, _len: usize, _write: bool) {}
    /// Writes `bytes` at `offset` through the file rather than the map (`pwrite`), when the
    /// backing has a file to write to: `None` if not (the writer then copies into the map).
    /// The bytes land in the same page cache the map shows.
    fn write_through(&self, _offset: usize, _bytes: &[u8]) -> Option<io::Result<()>> {
        None
    }
    /// Writes through the file again from now on ([`Self::write_through`] answers), with
    /// `file`'s descriptor where the backing needs one (a real map). False, and `file` closed,
    /// if the map was not made to be written through its file ([`super::MapMode::WriteThrough`])
    /// or the descriptor it needs is missing.
    fn attach_writes(&self, _file: Option<std::fs::File>) -> bool {
        false
    }
    /// Stops writing through the file and closes the descriptor that did: the writer copies
    /// into the map until [`Self::attach_writes`]. Whether it was writing through the file.
    fn release_writes(&self) -> bool {
        false
    }
}

/// A mapped region of a file: `len` bytes at a stable address for the mapping's whole life.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    published: AtomicUsize,
    writable: bool,
    /// What the file holds of a writable mapping when it is mapped: its writer's first limit.
    writable_end: usize,
    writer_taken: AtomicBool,
    backing: Box<dyn MapBacking>,
}

// SAFETY: the raw pointer is only dereferenced through `slice`/`bytes` (published, immutable
// bytes, safe to share between threads) and through the unique `MapWriter` (disjoint,
// unpublished bytes). The backing is `Send + Sync` by its trait bound.
unsafe impl Send for Mapping {}
// SAFETY: as above; all shared state besides the memory is atomic.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Wraps memory that a [`super::File`] implementation mapped.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (and for writes, if `writable`) for as long
    /// as `backing` lives, and nothing else may write to that memory while it is mapped.
    pub(crate) unsafe fn from_raw(
        ptr: *mut u8,
        len: usize,
        published: usize,
        writable: bool,
        backing: Box<dyn MapBacking>,
    ) -> Mapping {
        assert!(
            published <= len,
            "published {published} beyond map length {len}"
        );
        Mapping {
            ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()),
            len,
            published: AtomicUsize::new(published),
            writable,
            writable_end: if writable { len } else { 0 },
            writer_taken: AtomicBool::new(false),
            backing,
        }
    }

    /// Wraps a `memmap2` map of a file range (used by the real file system). A writable map
    /// may reach past the file's end: its writer starts with the limit `writable_end`, the
    /// bytes the file holds.
    pub(super) fn from_mmap(
        raw: memmap2::MmapRaw,
        file: Option<std::fs::File>,
        published: usize,
        writable: bool,
        writable_end: usize,
    ) -> Mapping {
        let (ptr, len) = (raw.as_mut_ptr(), raw.len());
        // SAFETY: `raw` maps `len` bytes and is moved into the backing, which the Mapping keeps
        // until it drops; the caller mapped it read-write iff `writable`. Other processes
        // writing the same file are outside oncelog's contract (a log directory belongs to one
        // process).
        let mut map = unsafe {
            Mapping::from_raw(
                ptr,
                len,
                published.min(len),
                writable,
                Box::new(RealMap {
                    raw,
                    through: file.is_some(),
                    file: parking_lot::Mutex::new(file),
                    flush_covers: std::sync::OnceLock::new(),
                }),
            )
        };
        map.writable_end = writable_end.clamp(map.published(), map.len);
        map
    }

    /// An empty mapping (of an empty file, which `mmap` refuses).
    pub fn empty() -> Mapping {
        struct NoBacking;
        impl MapBacking for NoBacking {
            fn flush(&self, _: usize, _: usize) -> io::Result<()> {
                Ok(())
            }
            fn sync(&self, _: usize, _: usize) -> io::Result<()> {
                Ok(())
            }
        }
        // SAFETY: a zero-length region needs no valid memory; `ptr` is never dereferenced for
        // a non-empty range because every access is bounded by `len` = 0.
        unsafe {
            Mapping::from_raw(
                NonNull::dangling().as_ptr(),
                0,
                0,
                false,
                Box::new(NoBacking),
            )
        }
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the mapping is empty (of an empty file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes `[0, published)` are visible to readers and never change again.
    pub fn published(&self) -> usize {
        self.published.load(Ordering::Acquire)
    }

    /// The published bytes of `[start, end)`, or `None` if the range is not all published.
    pub fn slice(&self, start: usize, end: usize) -> Option<&[u8]> {
        if start > end || end > self.published() {
            return None;
        }
        // SAFETY: `[start, end)` is inside `[0, published)`, which lies inside the mapping
        // (published ≤ len) and is never written again (the writer only writes at or above
        // `published`, which only grows); the Acquire load above orders the writer's copy
        // before this read.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), end - start) })
    }

    /// All published bytes.
    pub fn published_slice(&self) -> &[u8] {
        let end = self.published();
        self.slice(0, end).unwrap_or(&[])
    }

    /// A zero-copy [`Bytes`] of the published range `[start, end)` that keeps the map alive.
    pub fn bytes(self: &Arc<Self>, start: usize, end: usize) -> Option<Bytes> {
        self.slice(start, end)?;
        Some(Bytes::from_owner(MapSlice {
            map: Arc::clone(self),
            start,
            end,
        }))
    }

    /// Faults in `[offset, offset + len)` ahead of the writer (see [`MapBacking::populate`]).
    pub(crate) fn populate(&self, offset: usize, len: usize, write: bool) {
        if offset < self.len && len > 0 {
            self.backing
                .populate(offset, len.min(self.len - offset), write);
        }
    }

    /// msync of `[offset, offset + len)`. The range must be published: the engine only ever
    /// makes whole, published batches durable, and a [`SharedBuffer`] backing relies on it to
    /// copy the range while the writer may be writing above the watermark.
    pub(crate) fn flush(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_published(offset, len)?;
        self.backing.flush(offset, len)
    }

    /// Starts writing the published range `[offset, offset + len)` back without waiting
    /// ([`MapBacking::start_write_back`]); a hint, ignored past the published bytes.
    pub(crate) fn start_write_back(&self, offset: usize, len: usize) {
        if len > 0 && self.check_published(offset, len).is_ok() {
            self.backing.start_write_back(offset, len);
        }
    }

    /// [`MapBacking::write_back_for_flush`] of the published range `[offset, offset + len)`.
    pub(crate) fn write_back_for_flush(&self, offset: usize, len: usize) -> io::Result<bool> {
        if len == 0 {
            return Ok(false);
        }
        self.check_published(offset, len)?;
        self.backing.write_back_for_flush(offset, len)
    }

    /// Makes the published range `[offset, offset + len)` durable with the metadata needed to
    /// read it (msync `MS_SYNC`: a ranged `fdatasync`, which waits for no other write-back of
    /// the file). Published only, as [`Mapping::flush`].
    pub(crate) fn sync(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_published(offset, len)?;
        self.backing.sync(offset, len)
    }

    fn check_published(&self, offset: usize, len: usize) -> io::Result<()> {
        let published = self.published();
        if offset.checked_add(len).is_none_or(|end| end > published) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("msync of [{offset}, +{len}) beyond the published {published} bytes"),
            ));
        }
        Ok(())
    }

    /// The unique writer of a writable mapping, or `None` if the mapping is read-only or its
    /// writer was already taken.
    pub(crate) fn writer(self: &Arc<Self>) -> Option<MapWriter> {
        if !self.writable || self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(MapWriter {
            map: Arc::clone(self),
            limit: self.writable_end,
        })
    }
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.len)
            .field("published", &self.published())
            .field("writable", &self.writable)
            .finish()
    }
}

struct RealMap {
    raw: memmap2::MmapRaw,
    /// Made to be written through its file ([`super::MapMode::WriteThrough`]).
    through: bool,
    /// The mapped file's descriptor, while its writer writes through it: from the map's
    /// creation (a standalone log's active segment), or lent by a managed partition's writer
    /// while it appends ([`MapBacking::attach_writes`]); closed when the writer is dropped.
    file: parking_lot::Mutex<Option<std::fs::File>>,
    /// Whether a device flush covers what is written back of the file (its file system's
    /// answer, [`super::real::flush_covers_write_back`]), once asked: every write-back for a
    /// flush of the map would otherwise `fstat` the file to find its device.
    flush_covers: std::sync::OnceLock<bool>,
}

impl RealMap {
    /// Faults in, readable, the pages of `[start, end)` (`start` page-aligned) from the first
    /// one that is not in the page cache (`mincore`, a chunk of pages at a time): nothing when
    /// all are cached, the whole rest in one call when the file's pages left the cache.
    fn populate_missing(&self, start: usize, end: usize) {
        const PAGE: usize = 4096;
        const CHUNK: usize = 256;
        let mut resident = [0u8; CHUNK];
        let mut at = start;
        while at < end {
            let len = (end - at).min(CHUNK * PAGE);
            let pages = len.div_ceil(PAGE);
            // SAFETY: `[at, at + len)` lies inside the mapping (`at` is page-aligned: `start`
            // is, and it moves by whole chunks; `end` is within the length), which stays
            // mapped while `self` lives, and `resident` has room for one byte per page of it.
            // mincore reads no byte of the mapping.
            let rc = unsafe {
                libc::mincore(
                    self.raw.as_mut_ptr().add(at).cast(),
                    len,
                    resident.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return; // a hint: the pages are read when written
            }
            if let Some(missing) = resident[..pages].iter().position(|r| r & 1 == 0) {
                let from = at + missing * PAGE;
                // SAFETY: `[from, end)` lies inside the mapping (above); as in `populate`,
                // madvise touches no byte from user space.
                unsafe {
                    libc::madvise(
                        self.raw.as_mut_ptr().add(from).cast(),
                        end - from,
                        libc::MADV_POPULATE_READ,
                    );
                }
                return;
            }
            at += len;
        }
    }
}

impl MapBacking for RealMap {
    /// `MS_ASYNC`: on Linux, `msync(MS_SYNC)` is itself a ranged fsync, and the `fdatasync`
    /// that every flush does next writes back every dirty page of the file, the ones dirtied
    /// through this map included. Syncing twice doubled the journal commits of a durable append.
    fn flush(&self, offset: usize, len: usize) -> io::Result<()> {
        self.raw.flush_async_range(offset, len)
    }

    fn sync(&self, offset: usize, len: usize) -> io::Result<()> {
        // `flush_range` rounds the start down to its page, as msync requires.
        self.raw.flush_range(offset, len)
    }

    fn start_write_back(&self, offset: usize, len: usize) {
        // Only a map written through its file has pages the file's write-back sees dirty
        // without a sync of the map (pages dirtied through the map reach the file at msync).
        if let Some(file) = self.file.lock().as_ref() {
            start_write_back(file, offset as u64, len as u64);
        }
    }

    fn write_back_for_flush(&self, offset: usize, len: usize) -> io::Result<bool> {
        // Written through its file, as above; anything else is the caller's msync.
        let file = self.file.lock();
        let Some(file) = file.as_ref() else {
            return Ok(false);
        };
        let covers = match self.flush_covers.get() {
            Some(&covers) => covers,
            None => {
                let covers = super::real::flush_covers_write_back(file)?;
                let _ = self.flush_covers.set(covers);
                covers
            }
        };
        if !covers {
            return Ok(false);
        }
        written_back(file, offset as u64, len as u64)
    }

    fn populate(&self, offset: usize, len: usize, write: bool) {
        const PAGE: usize = 4096;
        let start = offset & !(PAGE - 1);
        let end = (offset + len).min(self.raw.len());
        if end <= start {
            return;
        }
        if self.through {
            // Written through its file, the map needs the pages in the page cache, not in its
            // page tables, where each sync would have to write-protect them again.
            self.populate_missing(start, end);
            return;
        }
        let advice = if write {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: `[start, end)` lies inside the mapping (start is rounded down to the page that
        // holds `offset`, end is clamped to the length), which stays mapped while `self` lives.
        // madvise touches no byte from user space: the kernel faults the pages in, racing
        // safely with the writer's copies. An error (a kernel before 5.14 lacks the advice)
        // only means the pages are faulted in on first touch instead.
        unsafe {
            libc::madvise(self.raw.as_mut_ptr().add(start).cast(), end - start, advice);
        }
    }

    fn write_through(&self, offset: usize, bytes: &[u8]) -> Option<io::Result<()>> {
        use std::os::unix::fs::FileExt;
        // The kernel changes the mapped memory under no Rust reference: the range is above the
        // watermark (no reader holds it) and the unique writer holds no slice of it while it
        // asks for the write (`MapWriter::write_through` takes it by `&mut`).
        // Held across the write: the descriptor is not closed under it.
        let file = self.file.lock();
        Some(file.as_ref()?.write_all_at(bytes, offset as u64))
    }

    fn attach_writes(&self, file: Option<std::fs::File>) -> bool {
        let mut held = self.file.lock();
        match file {
            Some(f) if self.through && held.is_none() => {
                *held = Some(f);
                true
            }
            _ => false,
        }
    }

    fn release_writes(&self) -> bool {
        self.file.lock().take().is_some()
    }

    /// A sealed segment's map holds no descriptor.
    fn writer_dropped(&self) {
        self.release_writes();
    }
}

/// The process's limit on open files (`RLIMIT_NOFILE`'s soft limit), if it can be read.
pub(crate) fn open_files_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given, which lives here.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some(usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// Allocates real blocks for `[0, len)` of `file`, growing it if needed. fallocate mode 0;
/// file systems without it (EOPNOTSUPP) get glibc's posix_fallocate, which writes a byte into
/// every block.
pub(super) fn fallocate(file: &std::fs::File, len: u64) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "allocation too large"))?;
    let fd = file.as_raw_fd();
    // SAFETY: a plain syscall on a descriptor that `file` keeps open; no memory is passed.
    if unsafe { libc::fallocate(fd, 0, 0, len) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err);
    }
    // SAFETY: as above.
    match unsafe { libc::posix_fallocate(fd, 0, len) } {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Writes the dirty pages of `[offset, offset + len)` of `file` back and waits for them
/// (`sync_file_range` with `WAIT_BEFORE | WRITE | WAIT_AFTER`): the data reaches the device, no
/// metadata is written and no cache flush is issued, so nothing is made durable. Where it is
/// not supported (EINVAL, ENOSYS, ESPIPE) nothing happens: it only moves work earlier.
pub(super) fn write_back(file: &std::fs::File, offset: u64, len: u64) -> io::Result<()> {
    written_back(file, offset, len).map(|_| ())
}

/// Starts writing the dirty pages of `[offset, offset + len)` back to the device and returns
/// without waiting (`SYNC_FILE_RANGE_WRITE` alone: the requests are queued, no metadata, no
/// cache flush). A hint for a sync or a [`written_back`] that follows and waits: failures are
/// theirs to report, so they are ignored here.
pub(super) fn start_write_back(file: &std::fs::File, offset: u64, len: u64) {
    let _ = sync_file_range(file, offset, len, libc::SYNC_FILE_RANGE_WRITE);
}

/// [`write_back`], answering whether the pages were written back (false where
/// `sync_file_range` is not supported).
pub(super) fn written_back(file: &std::fs::File, offset: u64, len: u64) -> io::Result<bool> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let Err(err) = sync_file_range(file, offset, len, flags) else {
        return Ok(true);
    };
    match err.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE) => Ok(false),
        _ => Err(err),
    }
}

/// `sync_file_range(2)` of `[offset, offset + len)` of `file` with `flags`.
fn sync_file_range(
    file: &std::fs::File,
    offset: u64,
    len: u64,
    flags: libc::c_uint,
) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "range too large",
        ));
    };
    // SAFETY: a plain syscall on a descriptor that `file` keeps open; no memory is passed.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The magic number of the file system `file` is on (`fstatfs`'s `f_type`).
pub(super) fn file_system_magic(file: &std::fs::File) -> io::Result<u64> {
    use std::os::unix::io::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs writes one `statfs` into the struct it is given, which lives here, on a
    // descriptor that `file` keeps open.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded, so it filled the struct (zeroed before, so every field is
    // initialized either way).
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets
    Ok(st.f_type as u64)
}

/// A fixed-size heap allocation that stands in for the page cache of a mapped file in the
/// simulated file system (`io::sim`): [`Mapping::over_shared_buffer`] maps it, the engine writes
/// it through a [`MapWriter`] as it would a real map, and the simulator copies ranges out of it.
///
/// Soundness rests on two rules, both enforced here under `maps`:
/// * a buffer has either one writable mapping or any number of read-only ones, never both, so
///   there is never more than one writer and no reader can see bytes a writer changes;
/// * bytes are copied out only where they cannot be changing: a flushed range (published, so
///   immutable; see [`Mapping::flush`]) or any range while no writable mapping exists
///   ([`SharedBuffer::read_unwritten`], which holds the lock during the copy so no writer can
///   appear meanwhile).
///
/// Nothing writes the buffer except a `MapWriter`: the initial content is copied in before the
/// buffer is shared.
pub struct SharedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    maps: parking_lot::Mutex<MapCount>,
}

#[derive(Debug, Default, Clone, Copy)]
struct MapCount {
    read_only: usize,
    writable: usize,
}

// SAFETY: the memory is only written through the unique `MapWriter` of the one writable
// mapping (disjoint from what readers may see) and only read under the rules above; the counts
// are behind a mutex.
unsafe impl Send for SharedBuffer {}
// SAFETY: as above.
unsafe impl Sync for SharedBuffer {}

/// Why [`SharedBuffer::read_unwritten`] or [`Mapping::over_shared_buffer`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SharedBufferBusy {
    #[error("the buffer has a live writable mapping")]
    Writable,
    #[error("the buffer has live read-only mappings")]
    ReadOnly,
    #[error("range beyond the buffer")]
    OutOfRange,
}

impl SharedBuffer {
    /// A buffer holding `content` (its length is the buffer's length).
    pub fn new(content: Vec<u8>) -> Arc<SharedBuffer> {
        let len = content.len();
        let raw: *mut [u8] = Box::into_raw(content.into_boxed_slice());
        SharedBuffer {
            ptr: NonNull::new(raw.cast::<u8>()).unwrap_or(NonNull::dangling()),
            len,
            maps: parking_lot::Mutex::new(MapCount::default()),
        }
        .into()
    }

    /// Copies `[offset, offset + dst.len())` into `dst`, provided no writable mapping lives
    /// (then nothing can be writing the buffer).
    pub fn read_unwritten(&self, offset: usize, dst: &mut [u8]) -> Result<(), SharedBufferBusy> {
        let maps = self.maps.lock();
        if maps.writable > 0 {
            return Err(SharedBufferBusy::Writable);
        }
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(SharedBufferBusy::OutOfRange);
        }
        // SAFETY: the range is inside the allocation (checked above), and with no writable
        // mapping there is no `MapWriter`; one cannot appear while `maps` is locked, because
        // `over_shared_buffer` takes the same lock. So nothing writes these bytes now.
        let src = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), dst.len()) };
        dst.copy_from_slice(src);
        drop(maps);
        Ok(())
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a boxed slice in `new` (a zero
        // length box has a dangling, never-freed pointer, which `Box` handles); every mapping
        // holds an `Arc` of the buffer, so none is left when it drops.
        drop(unsafe { Box::from_raw(raw) });
    }
}

impl fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("len", &self.len)
            .field("maps", &*self.maps.lock())
            .finish()
    }
}

/// Where a [`SharedBuffer`] mapping's msync goes (the simulated file).
pub trait SharedFlush: Send + Sync + 'static {
    /// msync of `[offset, offset + bytes.len())`; `bytes` are published and never change.
    fn flush(&self, offset: usize, bytes: &[u8]) -> io::Result<()>;
    /// msync `MS_SYNC` of the same: the bytes and the file's length become durable.
    fn sync(&self, offset: usize, bytes: &[u8]) -> io::Result<()>;
    /// The same bytes written back for the next device flush
    /// ([`MapBacking::write_back_for_flush`]). The default promises nothing.
    fn write_back_for_flush(&self, _offset: usize, _bytes: &[u8]) -> io::Result<bool> {
        Ok(false)
    }
    /// A write through the file, before its bytes are copied into the map (where a real
    /// file's `pwrite` puts them too, the page cache being the map's): the simulated file
    /// counts it and may fail it by injection.
    fn write(&self) -> io::Result<()>;
}

struct SharedBacking {
    buffer: Arc<SharedBuffer>,
    /// Counted as the buffer's writable mapping until its writer is dropped.
    writable: std::sync::atomic::AtomicBool,
    /// Its writer writes through the file (a simulated file needs no descriptor for it, but
    /// the writer that released its real one copies into the map until it attaches again).
    through: AtomicBool,
    sink: Box<dyn SharedFlush>,
}

impl SharedBacking {
    /// The published bytes of `[offset, offset + len)`.
    fn published(&self, offset: usize, len: usize) -> io::Result<&[u8]> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.buffer.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "msync beyond the mapping",
            ));
        }
        // SAFETY: this backing is private to this module and only reached through
        // `Mapping::flush` and `Mapping::sync`, which refuse ranges that are not published;
        // published bytes are never written again, so reading them races with nothing.
        Ok(unsafe { std::slice::from_raw_parts(self.buffer.ptr.as_ptr().add(offset), len) })
    }
}

impl MapBacking for SharedBacking {
    fn flush(&self, offset: usize, len: usize) -> io::Result<()> {
        self.sink.flush(offset, self.published(offset, len)?)
    }

    fn sync(&self, offset: usize, len: usize) -> io::Result<()> {
        self.sink.sync(offset, self.published(offset, len)?)
    }

    fn write_back_for_flush(&self, offset: usize, len: usize) -> io::Result<bool> {
        self.sink
            .write_back_for_flush(offset, self.published(offset, len)?)
    }

    fn write_through(&self, offset: usize, bytes: &[u8]) -> Option<io::Result<()>> {
        if !self.through.load(Ordering::Acquire) {
            return None;
        }
        if let Err(e) = self.sink.write() {
            return Some(Err(e));
        }
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.buffer.len)
        {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write beyond the mapping",
            )));
        }
        // SAFETY: the range is inside the buffer (checked above). This backing is only reached
        // through `MapWriter::write_through`, which holds the mapping's unique writer mutably
        // and has checked that the range is unpublished: no reader holds a slice of it and
        // nothing else writes it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.buffer.ptr.as_ptr().add(offset),
                bytes.len(),
            );
        }
        Some(Ok(()))
    }

    fn attach_writes(&self, _file: Option<std::fs::File>) -> bool {
        !self.through.swap(true, Ordering::AcqRel)
    }

    fn release_writes(&self) -> bool {
        self.through.swap(false, Ordering::AcqRel)
    }

    fn writer_dropped(&self) {
        // A writer is never taken again (`writer_taken` stays set), so from now on this is a
        // read-only mapping: the buffer may be read, and mapped by others, again.
        let mut maps = self.buffer.maps.lock();
        if self.writable.swap(false, Ordering::AcqRel) {
            maps.writable -= 1;
            maps.read_only += 1;
        }
    }
}

impl Drop for SharedBacking {
    fn drop(&mut self) {
        let mut maps = self.buffer.maps.lock();
        if self.writable.load(Ordering::Acquire) {
            maps.writable -= 1;
        } else {
            maps.read_only -= 1;
        }
    }
}

impl Mapping {
    /// Maps `[0, len)` of a [`SharedBuffer`] (the simulated file system's maps). A writable
    /// mapping is refused while any other mapping of the buffer lives, a read-only one while a
    /// writable one lives: one writer, and readers never see a byte change.
    ///
    /// A writable mapping's writer starts with the limit `writable_end` (the bytes the file
    /// holds; the buffer past them is address space reserved for the file to grow into).
    pub(crate) fn over_shared_buffer(
        buffer: &Arc<SharedBuffer>,
        len: usize,
        published: usize,
        writable: bool,
        writable_end: usize,
        sink: Box<dyn SharedFlush>,
    ) -> Result<Mapping, SharedBufferBusy> {
        if len > buffer.len {
            return Err(SharedBufferBusy::OutOfRange);
        }
        let mut maps = buffer.maps.lock();
        if maps.writable > 0 {
            return Err(SharedBufferBusy::Writable);
        }
        if writable && maps.read_only > 0 {
            return Err(SharedBufferBusy::ReadOnly);
        }
        if writable {
            maps.writable += 1;
        } else {
            maps.read_only += 1;
        }
        drop(maps);
        let published = if writable { published.min(len) } else { len };
        let backing = SharedBacking {
            buffer: Arc::clone(buffer),
            writable: AtomicBool::new(writable),
            through: AtomicBool::new(true),
            sink,
        };
        // SAFETY: `[0, len)` lies inside the buffer's allocation, which the backing keeps alive
        // (an `Arc`) as long as the mapping. Only this mapping's `MapWriter` can write it: the
        // counts above admit one writable mapping and no readers beside it, and the buffer is
        // never written otherwise.
        let mut map = unsafe {
            Mapping::from_raw(
                buffer.ptr.as_ptr(),
                len,
                published,
                writable,
                Box::new(backing),
            )
        };
        map.writable_end = writable_end.clamp(map.published(), len);
        Ok(map)
    }
}

/// A published range of a mapping, owned by a [`Bytes`].
struct MapSlice {
    map: Arc<Mapping>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        // The range was checked to be published when the slice was made, and publication never
        // shrinks, so this cannot fail.
        self.map.slice(self.start, self.end).unwrap_or(&[])
    }
}

/// The one writer of a writable [`Mapping`]: writes above the watermark and below its limit,
/// then publishes.
pub struct MapWriter {
    map: Arc<Mapping>,
    /// Bytes it may write below: never past the file's end (a SIGBUS), raised by [`Self::grant`].
    limit: usize,
}

impl MapWriter {
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }
    /// The mapped length: how far the file may grow under this map.
    pub fn capacity(&self) -> usize {
        self.map.len
    }
    /// Where writing must stop: the file's length when it was last granted.
    pub fn limit(&self) -> usize {
        self.limit
    }
    /// Allows writes below `end` (at most the mapped length; a limit never goes down). The
    /// caller must have grown the file to at least `end` and must not shrink it below that
    /// while this writer lives: a write past a file's end is a SIGBUS.
    pub fn grant(&mut self, end: usize) {
        self.limit = self.limit.max(end.min(self.map.len));
    }
    pub fn published(&self) -> usize {
        // Only this writer stores the watermark, so a relaxed load sees its own last store.
        self.map.published.load(Ordering::Relaxed)
    }

    /// The unpublished range `[start, end)` for writing. Panics if the range is published or
    /// beyond the map: that is a bug in the caller, never a property of input data.
    pub fn unpublished_mut(&mut self, start: usize, end: usize) -> &mut [u8] {
        self.check_unpublished(start, end);
        // SAFETY: the range is inside the mapping (the limit never passes its length) and at or
        // above the watermark, so no reader
        // holds a slice of it (readers only get published bytes); `&mut self` on the unique
        // writer makes this the only mutable access.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(start), end - start) }
    }

    /// Lends the writer `file`'s descriptor (a real file's; `None` for a simulated one) to
    /// write through (see [`Self::write_through`]). False, and `file` closed, if the map is not
    /// written through its file or already holds a descriptor.
    pub fn attach_writes(&mut self, file: Option<std::fs::File>) -> bool {
        self.map.backing.attach_writes(file)
    }

    /// Closes the descriptor the writer writes through: it copies into the map until
    /// [`Self::attach_writes`]. Whether it held one.
    pub fn release_writes(&mut self) -> bool {
        self.map.backing.release_writes()
    }

    /// Writes `src` to `at` (unpublished) through the file where the mapping has one (a real
    /// file: `pwrite`, so the map's pages are neither faulted in nor write-protected again by
    /// the next sync), or copies it into the map. The bytes are in the map either way.
    pub fn write_through(&mut self, at: usize, src: &[u8]) -> io::Result<()> {
        self.check_unpublished(at, at + src.len());
        match self.map.backing.write_through(at, src) {
            Some(result) => result,
            None => {
                self.write(at, src);
                Ok(())
            }
        }
    }

    /// Panics unless `[start, end)` is unpublished and granted: a write outside it is a bug in
    /// the caller, never a property of input data.
    fn check_unpublished(&self, start: usize, end: usize) {
        assert!(
            self.published() <= start && start <= end && end <= self.limit,
            "write [{start}, {end}) outside the unpublished range [{}, {})",
            self.published(),
            self.limit
        );
    }

    /// Copies `src` to `at` (unpublished).
    pub fn write(&mut self, at: usize, src: &[u8]) {
        self.unpublished_mut(at, at + src.len())
            .copy_from_slice(src);
    }

    /// Makes `[0, end)` visible to readers. `end` must not go backwards.
    pub fn publish(&mut self, end: usize) {
        assert!(
            self.published() <= end && end <= self.limit,
            "publish {end} outside [{}, {}]",
            self.published(),
            self.limit
        );
        self.map.published.store(end, Ordering::Release);
    }

    /// Touches every page of `[start, end)` (unpublished) so the page faults are taken now,
    /// off the append path, instead of inside the copy that will fill them.
    pub fn prefault(&mut self, start: usize, end: usize) {
        const PAGE: usize = 4096;
        let region = self.unpublished_mut(start, end);
        let mut i = 0;
        while i < region.len() {
            // A volatile read-modify-write of a byte that is still zero: the page becomes
            // resident and writable without changing its content.
            // SAFETY: `i < region.len()`, so the pointer is inside the exclusive region.
            unsafe {
                let p = region.as_mut_ptr().add(i);
                std::ptr::write_volatile(p, std::ptr::read_volatile(p));
            }
            i += PAGE;
        }
    }
}

impl Drop for MapWriter {
    fn drop(&mut self) {
        self.map.backing.writer_dropped();
    }
}

impl fmt::Debug for MapWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapWriter").field("map", &self.map).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Heap(#[allow(dead_code)] Box<[u8]>);
    impl MapBacking for Heap {
        fn flush(&self, _: usize, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn sync(&self, _: usize, _: usize) -> io::Result<()> {
            Ok(())
        }
    }

    fn heap_mapping(len: usize, published: usize) -> Arc<Mapping> {
        let mut buf = vec![0u8; len].into_boxed_slice();
        let ptr = buf.as_mut_ptr();
        // SAFETY: the boxed slice is moved into the backing and lives as long as the mapping;
        // moving a Box does not move its heap allocation.
        Arc::new(unsafe { Mapping::from_raw(ptr, len, published, true, Box::new(Heap(buf))) })
    }

    #[test]
    fn readers_see_only_published_bytes() {
        let map = heap_mapping(64, 0);
        let mut w = map.writer().expect("writer");
        w.write(0, b"hello");
        assert!(map.slice(0, 5).is_none());
        w.publish(5);
        assert_eq!(map.slice(0, 5), Some(&b"hello"[..]));
        assert!(map.slice(0, 6).is_none());
    }

    #[test]
    fn bytes_outlive_the_writer_and_every_other_handle() {
        let map = heap_mapping(16, 0);
        let mut w = map.writer().expect("writer");
        w.write(0, b"abcd");
        w.publish(4);
        let b = map.bytes(1, 3).expect("published");
        drop(w);
        drop(map);
        assert_eq!(&b[..], b"bc");
    }

    #[test]
    fn a_mapping_has_one_writer() {
        let map = heap_mapping(16, 0);
        let _w = map.writer().expect("first writer");
        assert!(map.writer().is_none());
    }

    #[test]
    #[should_panic(expected = "outside the unpublished range")]
    fn writing_below_the_watermark_is_refused() {
        let map = heap_mapping(16, 8);
        let mut w = map.writer().expect("writer");
        w.write(4, b"x");
    }
}
