//! Keeps the pages ahead of each active segment's writer faulted in, off the append path
//! (docs/design.md, "Memory maps without hazards"): the first touch of a fresh page of a mapped
//! file costs more than copying a batch into it, so a background thread asks the kernel to fault
//! the next pages in (`MADV_POPULATE_*`) while the appender copies into the ones already there.
//!
//! One thread serves every log of the process, so thousands of partitions cost one thread.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use crate::io::Mapping;

/// Ask for more once the writer is within this much of the prefaulted edge.
const CHUNK: usize = 1 << 20;

struct Job {
    map: Arc<Mapping>,
    from: usize,
    to: usize,
    write: bool,
}

fn worker() -> &'static Mutex<Sender<Job>> {
    static WORKER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        // If the thread cannot be spawned the jobs are simply dropped: prefaulting is a hint.
        let _ = std::thread::Builder::new()
            .name("oncelog-prefault".into())
            .spawn(move || {
                for job in rx {
                    job.map.populate(job.from, job.to - job.from, job.write);
                }
            });
        Mutex::new(tx)
    })
}

/// The prefaulted edge of one active segment.
#[derive(Debug, Default)]
pub(crate) struct Prefault {
    /// Bytes from the start of the map already requested.
    requested: usize,
}

impl Prefault {
    /// Called after an append: when the writer at `written` is within `lookahead` of the
    /// requested edge, asks for the next stretch up to `written + lookahead`. `write` faults
    /// the pages in writable (fastest copies, but they are dirty and a flush writes them back
    /// as zeros); otherwise readable (the copy takes a cheap write-protect fault instead).
    pub fn advance(&mut self, map: &Arc<Mapping>, written: usize, lookahead: usize, write: bool) {
        if lookahead == 0 {
            return;
        }
        let target = written.saturating_add(lookahead).min(map.len());
        let from = self.requested.max(written);
        if target <= from || (target - from < CHUNK && target < map.len()) {
            return;
        }
        self.requested = target;
        if let Ok(tx) = worker().lock() {
            let _ = tx.send(Job {
                map: Arc::clone(map),
                from,
                to: target,
                write,
            });
        }
    }
}
