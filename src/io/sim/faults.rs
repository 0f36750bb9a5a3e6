//! Fault injection: the Nth operation of a kind fails with an errno, once or from then on, and
//! a capacity makes growth fail with ENOSPC.

use std::io;

use super::{OpKind, SimFs, State};

#[derive(Debug)]
pub(super) struct Fault {
    kind: OpKind,
    remaining: u64,
    errno: i32,
    sticky: bool,
    firing: bool,
}

impl State {
    /// Counts an operation and fires an injected fault if one is due.
    pub(super) fn op(&mut self, kind: OpKind) -> io::Result<()> {
        self.counters.ops += 1;
        *self.counters.by_kind.entry(kind).or_default() += 1;
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

    /// Fails with ENOSPC unless `more` bytes fit.
    pub(super) fn reserve(&self, more: u64) -> io::Result<()> {
        match self.capacity {
            Some(cap) if self.used_bytes() + more > cap => {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => Ok(()),
        }
    }
}

impl SimFs {
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
}
