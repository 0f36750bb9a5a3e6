//! The real file system: std files, `fallocate`, and `memmap2` maps.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use memmap2::MmapOptions;

use super::{File, FileKind, FileLock, FileMeta, FileSystem, MapMode, Mapping, OpenMode};

/// How long a held lock is retried before it is reported held (see `try_lock`): far longer than
/// a fork's child keeps the lock's description before its exec, far shorter than a user waits.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);
const LOCK_RETRY: Duration = Duration::from_millis(5);

fn kind_of(t: fs::FileType) -> FileKind {
    if t.is_file() {
        FileKind::File
    } else if t.is_dir() {
        FileKind::Dir
    } else if t.is_fifo() {
        FileKind::Other("FIFO")
    } else if t.is_socket() {
        FileKind::Other("socket")
    } else if t.is_block_device() {
        FileKind::Other("block device")
    } else if t.is_char_device() {
        FileKind::Other("character device")
    } else {
        FileKind::Other("special file")
    }
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn stat(&self, path: &Path) -> io::Result<FileMeta> {
        let m = fs::metadata(path)?;
        Ok(FileMeta {
            kind: kind_of(m.file_type()),
            len: m.len(),
        })
    }

    fn try_lock(&self, path: &Path, holder: &str) -> io::Result<FileLock> {
        let mut file = open_regular(path, OpenMode::Create)?;
        // flock(2): owned by this open file description, so a second open in the same process
        // is refused too, and the kernel releases it when the process dies. A child forked by
        // any thread of this process shares the description until its exec closes it (the
        // descriptor is close-on-exec), so a lock just released can look held for that
        // moment: a refusal is retried for a short while before it is believed.
        let mut waited = Duration::ZERO;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if waited < LOCK_PATIENCE => {
                    std::thread::sleep(LOCK_RETRY);
                    waited += LOCK_RETRY;
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::from(io::ErrorKind::WouldBlock))
                }
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        file.set_len(0)?;
        file.write_all(holder.as_bytes())?;
        Ok(FileLock::new(Box::new(file)))
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<FileLock> {
        let file = open_regular(path, OpenMode::Read)?;
        // As `try_lock`: a refusal is retried for a while before it is believed.
        let mut waited = Duration::ZERO;
        loop {
            match file.try_lock_shared() {
                Ok(()) => return Ok(FileLock::new(Box::new(file))),
                Err(fs::TryLockError::WouldBlock) if waited < LOCK_PATIENCE => {
                    std::thread::sleep(LOCK_RETRY);
                    waited += LOCK_RETRY;
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::from(io::ErrorKind::WouldBlock))
                }
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        Ok(Box::new(RealFile {
            file: open_regular(path, mode)?,
            writable: mode != OpenMode::Read,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        fs::File::open(dir)?.sync_all()
    }
}

/// Opens a regular file. `O_NONBLOCK` keeps the open of a FIFO that appeared under a segment's
/// name from waiting for a writer (it has no effect on regular files); anything that is not a
/// regular file is then refused.
fn open_regular(path: &Path, mode: OpenMode) -> io::Result<fs::File> {
    let mut o = fs::OpenOptions::new();
    match mode {
        OpenMode::Read => o.read(true),
        OpenMode::ReadWrite => o.read(true).write(true),
        OpenMode::Create => o.read(true).write(true).create(true),
        OpenMode::CreateTruncate => o.read(true).write(true).create(true).truncate(true),
    };
    o.custom_flags(libc::O_NONBLOCK);
    let file = o.open(path)?;
    let kind = kind_of(file.metadata()?.file_type());
    if kind != FileKind::File {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a {}, not a regular file",
                path.display(),
                kind.name()
            ),
        ));
    }
    Ok(file)
}

#[derive(Debug)]
struct RealFile {
    file: fs::File,
    writable: bool,
}

/// `f_type` of ext4 (and ext2/3, which share it).
const EXT4_MAGIC: u64 = 0xEF53;
/// `f_type` of XFS.
const XFS_MAGIC: u64 = 0x5846_5342;

/// Whether the device cache flush of a data sync makes what another file of `file`'s file
/// system wrote back durable ([`File::write_back_for_flush`]): on ext4 without `data=journal`
/// and on XFS, whose overwrites of written blocks go to those blocks, with no metadata. Not on
/// copy-on-write file systems (btrfs, ZFS: an overwrite is new blocks and metadata), nor on
/// ext4 with `data=journal` (data goes through the journal), nor where the mount cannot be
/// identified. Known once per device.
pub(super) fn flush_covers_write_back(file: &fs::File) -> io::Result<bool> {
    use std::collections::BTreeMap;
    use std::os::unix::fs::MetadataExt;
    static KNOWN: parking_lot::Mutex<BTreeMap<u64, bool>> =
        parking_lot::Mutex::new(BTreeMap::new());
    let dev = file.metadata()?.dev();
    if let Some(&known) = KNOWN.lock().get(&dev) {
        return Ok(known);
    }
    let covers = match super::map::file_system_magic(file)? {
        XFS_MAGIC => true,
        EXT4_MAGIC => fs::read_to_string("/proc/self/mountinfo")
            .map(|info| ext4_writes_data_in_place(&info, dev))
            .unwrap_or(false),
        _ => false,
    };
    KNOWN.lock().insert(dev, covers);
    Ok(covers)
}

/// Whether `/proc/self/mountinfo` (`info`) shows the ext4 file system of device `dev` mounted
/// without `data=journal`; false if it does not show it at all.
fn ext4_writes_data_in_place(info: &str, dev: u64) -> bool {
    // glibc's encoding of a `dev_t`.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let id = format!("{major}:{minor}");
    let mut seen = false;
    for line in info.lines() {
        // `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`:
        // the device is the third field; the file system's own options come last, after " - ".
        if line.split_whitespace().nth(2) != Some(id.as_str()) {
            continue;
        }
        let Some((_, fs_part)) = line.split_once(" - ") else {
            return false;
        };
        let mut fields = fs_part.split_whitespace();
        let (Some(fstype), _, options) = (fields.next(), fields.next(), fields.next()) else {
            return false;
        };
        if !fstype.starts_with("ext")
            || options
                .unwrap_or("")
                .split(',')
                .any(|o| o == "data=journal")
        {
            return false;
        }
        seen = true;
    }
    seen
}

impl File for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        super::map::fallocate(&self.file, len)
    }

    fn write_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range too large"))?;
        // The blocks first, so a full disk fails here as ENOSPC, and the extents exist (as
        // unwritten ones) before any zero reaches them: a crash never leaves the file's metadata
        // pointing at blocks whose old content was not yet overwritten.
        super::map::fallocate(&self.file, end)?;
        // Page-sized writes, so the page cache holds the zeros in single pages: a write through
        // the map then dirties one page, not a large folio that the next sync writes back
        // whole (measured: docs/performance.md).
        const PAGE: u64 = 4096;
        static ZEROS: [u8; PAGE as usize] = [0; PAGE as usize];
        let mut at = offset;
        while at < end {
            let n = (PAGE - at % PAGE).min(end - at);
            self.file.write_all_at(&ZEROS[..n as usize], at)?;
            at += n;
        }
        Ok(())
    }

    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        super::map::write_back(&self.file, offset, len)
    }

    fn start_write_back(&self, offset: u64, len: u64) {
        super::map::start_write_back(&self.file, offset, len);
    }

    fn write_back_for_flush(&self, offset: u64, len: u64) -> io::Result<bool> {
        if !flush_covers_write_back(&self.file)? {
            return Ok(false);
        }
        super::map::written_back(&self.file, offset, len)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn into_descriptor(self: Box<Self>) -> Option<fs::File> {
        Some(self.file)
    }

    fn map(&self, len: usize, mode: MapMode) -> io::Result<Mapping> {
        if len == 0 {
            return Ok(Mapping::empty());
        }
        let file_len = self.len()?;
        let (writable, published) = match mode {
            MapMode::ReadOnly => (false, len),
            MapMode::ReadWrite { published } | MapMode::WriteThrough { published } => {
                (true, published.min(len))
            }
        };
        // A writable map may reserve address space past the end (its writer is granted only
        // what the file holds); a read-only one is read whole, so it must fit.
        let must_fit = if writable { published } else { len };
        if (file_len as u128) < must_fit as u128 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {must_fit} bytes of a {file_len}-byte file"),
            ));
        }
        if writable && !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ));
        }
        let raw = if writable {
            MmapOptions::new().len(len).map_raw(&self.file)?
        } else {
            MmapOptions::new().len(len).map_raw_read_only(&self.file)?
        };
        let writable_end = if writable {
            (file_len.min(len as u64) as usize).max(published)
        } else {
            0
        };
        // Only a map written through the file keeps a descriptor: a managed partition's other
        // maps hold none (docs/design.md, "Many partitions").
        let file = match mode {
            MapMode::WriteThrough { .. } => Some(self.file.try_clone()?),
            _ => None,
        };
        Ok(Mapping::from_mmap(
            raw,
            file,
            published,
            writable,
            writable_end,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dev_t` of major 254, minor 0 (glibc's encoding).
    const VDA: u64 = 254 << 8;

    #[test]
    fn an_ext4_mount_writes_data_in_place_unless_it_journals_data() {
        let info = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resuid=65534\n";
        assert!(ext4_writes_data_in_place(info, VDA));
        let journalled = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,data=journal\n";
        assert!(!ext4_writes_data_in_place(journalled, VDA));
        // Bind mounts of the same device: one journalling line is enough to refuse.
        let both = format!("{info}31 27 254:0 /srv /srv rw - ext4 /dev/vda rw,data=journal\n");
        assert!(!ext4_writes_data_in_place(&both, VDA));
        // A device the table does not show, and a line without the file system's part.
        assert!(!ext4_writes_data_in_place(info, 8 << 8));
        assert!(!ext4_writes_data_in_place("27 1 254:0 / / rw\n", VDA));
    }

    #[test]
    fn a_device_number_splits_as_glibc_encodes_it() {
        // major 259, minor 300: minor's high bits above bit 19, major's above bit 43.
        let dev: u64 = (259 & 0xfff) << 8 | (300 & 0xff) | ((300 & !0xff) << 12);
        let info = "40 1 259:300 / /data rw - xfs /dev/nvme0n1p300 rw\n";
        // XFS is decided by its magic alone; the ext4 rule must not take an xfs line.
        assert!(!ext4_writes_data_in_place(info, dev));
        let ext = "40 1 259:300 / /data rw - ext4 /dev/nvme0n1p300 rw\n";
        assert!(ext4_writes_data_in_place(ext, dev));
    }

    /// A file of 8 KiB of 7s, synced, then 100 bytes of 8s written over it at 10 and not
    /// synced (kept in its directory, returned first), and whether its file system overwrites
    /// data in place (ext4, XFS).
    fn file_with_an_overwrite() -> (tempfile::TempDir, Box<dyn File>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = RealFs.open(&path, OpenMode::Create).unwrap();
        f.write_all_at(&[7; 8192], 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(&[8; 100], 10).unwrap();
        let plain = std::fs::File::open(&path).unwrap();
        let magic = super::super::map::file_system_magic(&plain).unwrap();
        (dir, f, magic == EXT4_MAGIC || magic == XFS_MAGIC)
    }

    #[test]
    fn a_started_write_back_changes_no_byte_and_no_promise() {
        let (_dir, f, in_place) = file_with_an_overwrite();
        // A hint, past the end and of nothing included: never an error, never a panic.
        f.start_write_back(0, 4096);
        f.start_write_back(1 << 40, 4096);
        f.start_write_back(0, 0);
        f.start_write_back(u64::MAX, u64::MAX);
        let promised = f.write_back_for_flush(0, 4096).unwrap();
        assert!(in_place || !promised);
        let mut buf = [0u8; 120];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 120);
        assert_eq!(buf[..10], [7; 10]);
        assert_eq!(buf[10..110], [8; 100]);
        assert_eq!(buf[110..], [7; 10]);
    }

    #[test]
    fn a_written_back_range_is_promised_only_on_a_file_system_that_overwrites_in_place() {
        let (_dir, f, in_place) = file_with_an_overwrite();
        let promised = f.write_back_for_flush(0, 4096).unwrap();
        assert!(
            in_place || !promised,
            "a file system that does not overwrite in place promised a write-back"
        );
    }
}
