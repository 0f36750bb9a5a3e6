//! An open simulated file, and where the msync of its maps lands.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::super::map::{SharedBuffer, SharedFlush};
use super::super::{File, MapMode, Mapping};
use super::{sim_error, Attached, OpKind, State};

/// An open simulated file.
pub(super) struct SimFile {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) id: u64,
    pub(super) epoch: u64,
    pub(super) writable: bool,
    pub(super) path: PathBuf,
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

    /// The last extension of the file's name, for the counters.
    fn kind(&self) -> String {
        self.path
            .extension()
            .map_or_else(String::new, |e| e.to_string_lossy().into_owned())
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

    /// Counted as an allocation (a full disk fails it as one). The zeros are live content at
    /// once, as a write's; nothing of them is durable before a sync. The range must be zero
    /// already or past the end, in the file and in a map of it: anything else is the engine
    /// erasing data.
    fn write_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut st = self.begin(OpKind::Allocate)?;
        let (start, end) = (offset as usize, (offset + len) as usize);
        SimFile::grow(&mut st, self.id, end)?;
        let inode = st.inode(self.id)?;
        let mapped_zero = match &inode.attached {
            Some(a) if a.valid > start => {
                let mut bytes = vec![0u8; end.min(a.valid) - start];
                // With a writer alive the buffer cannot be read: the engine's writer only writes
                // below its limit, which never reaches a range still being allocated.
                a.buffer.read_unwritten(start, &mut bytes).is_err()
                    || bytes.iter().all(|&b| b == 0)
            }
            _ => true,
        };
        if !mapped_zero || inode.live[start..end].iter().any(|&b| b != 0) {
            return Err(sim_error(format!(
                "{}: write_zeros over [{start}, {end}), which holds data",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.begin(OpKind::Read)?;
        *st.counters.reads.entry(self.kind()).or_default() += 1;
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
        st.flush_device();
        Ok(())
    }

    /// Counted as a write (faults aimed at writes hit it). The range's live bytes are set
    /// aside for the next device flush; an error past the durable length (the engine's
    /// mistake: nothing could promise it there).
    fn write_back_for_flush(&self, offset: u64, len: u64) -> io::Result<bool> {
        let mut st = self.begin(OpKind::Write)?;
        let (start, end) = (offset as usize, (offset + len) as usize);
        let inode = st.inode(self.id)?;
        if inode.attached.is_some() && inode.detach().is_err() {
            return Err(sim_error(format!(
                "{}: write_back_for_flush of a file mapped for writing",
                self.path.display()
            )));
        }
        if end > inode.durable.len() || end > inode.live.len() {
            // Past the durable length the write-back would need the length committed: only
            // a sync of the file does that, and the engine must not ask for a promise here.
            return Err(sim_error(format!(
                "{}: write_back_for_flush of [{start}, {end}) past the durable length {}",
                self.path.display(),
                inode.durable.len()
            )));
        }
        let bytes = inode.live[start..end].to_vec();
        st.written_back.push((self.id, start, bytes));
        Ok(true)
    }

    fn map(&self, len: usize, mode: MapMode) -> io::Result<Mapping> {
        let mut st = self.begin(OpKind::Map)?;
        *st.counters.maps.entry(self.kind()).or_default() += 1;
        let (writable, published) = match mode {
            MapMode::ReadOnly => (false, len),
            MapMode::ReadWrite { published } | MapMode::WriteThrough { published } => {
                (true, published.min(len))
            }
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
        // A writable map may reserve room past the end for the file to grow into (its writer
        // is granted only what the file holds); a read-only one must fit.
        let must_fit = if writable { published } else { len };
        if inode.live.len() < must_fit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "simfs: cannot map {must_fit} bytes of a {}-byte file",
                    inode.live.len()
                ),
            ));
        }
        let file_len = inode.live.len();
        // Without a writer the old buffer is folded in and left to its readers; the new map
        // gets a fresh buffer (its published bytes equal theirs). With a writer, the buffer
        // is shared and `over_shared_buffer` refuses a second writer or a reader beside it.
        if inode.detach().is_ok() {
            // Zeroed (untouched) memory past the file's end: a reserve costs nothing until used.
            let mut content = vec![0u8; len];
            let n = len.min(file_len);
            content[..n].copy_from_slice(&inode.live[..n]);
            inode.attached = Some(Attached {
                buffer: SharedBuffer::new(content),
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
        let writable_end = file_len.min(len);
        Mapping::over_shared_buffer(&a.buffer, len, published, writable, writable_end, sink)
            .map_err(|e| {
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

impl MsyncSink {
    /// Runs `f` on the file system's state, which must still be there and not have crashed
    /// since the map was made; `op` names the operation in the error.
    fn with_state<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut State) -> io::Result<T>,
    ) -> io::Result<T> {
        let state = self
            .state
            .upgrade()
            .ok_or_else(|| sim_error(format!("{op} after the file system was dropped")))?;
        let mut st = state.lock();
        if st.epoch != self.epoch {
            return Err(sim_error(format!("{op} of a map from before a crash")));
        }
        f(&mut st)
    }

    /// Copies a map's published bytes into the file's live image; with `durable` (`MS_SYNC`)
    /// into its durable image too, with the file's length, as a ranged `fdatasync` makes them.
    fn write_back(&self, offset: usize, bytes: &[u8], durable: bool) -> io::Result<()> {
        self.with_state("msync", |st| self.write_back_locked(st, offset, bytes, durable))
    }

    fn write_back_locked(
        &self,
        st: &mut State,
        offset: usize,
        bytes: &[u8],
        durable: bool,
    ) -> io::Result<()> {
        // A durable msync is a data sync: faults aimed at fsync hit it too.
        st.op(if durable {
            OpKind::SyncData
        } else {
            OpKind::Msync
        })?;
        if durable {
            st.counters.data_syncs += 1;
        } else {
            st.counters.msyncs += 1;
        }
        let Some(inode) = st.inodes.get_mut(&self.id) else {
            // The file was removed and its last handle closed while it was still mapped: as on
            // Linux, its pages live on for the map, and writing them back goes nowhere.
            return Ok(());
        };
        let end = offset + bytes.len();
        let valid = match &inode.attached {
            Some(a) if a.id == self.buffer_id => a.valid,
            // A map whose buffer was folded into the live image (its writer is gone): its bytes
            // are already there, unless the file was rewritten since, which the engine must not
            // do under a map it still flushes.
            _ if inode.live.get(offset..end) == Some(bytes) => usize::MAX,
            _ => return Err(sim_error("msync of a stale map: the file changed under it")),
        };
        if end > valid.min(inode.live.len()) {
            // On a real system, touching these bytes would be a SIGBUS: the file was shrunk.
            return Err(sim_error(format!(
                "msync of [{offset}, {end}) past the end {valid} of the mapped file"
            )));
        }
        inode.live[offset..end].copy_from_slice(bytes);
        if durable {
            let len = inode.live.len();
            inode.durable.resize(len, 0);
            inode.durable[offset..end].copy_from_slice(bytes);
            st.flush_device();
        }
        Ok(())
    }
}

impl SharedFlush for MsyncSink {
    fn flush(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.write_back(offset, bytes, false)
    }

    fn sync(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.write_back(offset, bytes, true)
    }

    /// The bytes reach the live image (a write-back), and are set aside for the next device
    /// flush, as a file's `write_back_for_flush`; an error past the durable length (the
    /// engine's mistake: nothing could promise it there).
    fn write_back_for_flush(&self, offset: usize, bytes: &[u8]) -> io::Result<bool> {
        self.with_state("write_back_for_flush", |st| {
            self.write_back_locked(st, offset, bytes, false)?;
            let end = offset + bytes.len();
            let Some(inode) = st.inodes.get(&self.id) else {
                return Ok(false);
            };
            if end > inode.durable.len() {
                return Err(sim_error(format!(
                    "write_back_for_flush of a map's [{offset}, {end}) past the durable length {}",
                    inode.durable.len()
                )));
            }
            st.written_back.push((self.id, offset, bytes.to_vec()));
            Ok(true)
        })
    }

    fn write(&self) -> io::Result<()> {
        self.with_state("write", |st| st.op(OpKind::Write))
    }
}
