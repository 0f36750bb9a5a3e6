//! Work ahead of each active segment's writer, off the append path: growing its files
//! ([`SegmentSpace`], docs/design.md "Segment space") and faulting its pages in (docs/design.md,
//! "Memory maps without hazards"). The first touch of a fresh page of a mapped file costs more
//! than copying a batch into it, so a background thread asks the kernel to fault the next pages
//! in (`MADV_POPULATE_*`) while the appender copies into the ones already there; and it
//! allocates (or zeroes) the next step of the file before the writer gets there.
//!
//! One thread serves every log of the process, so thousands of partitions cost one thread.
//! Everything it does is a hint: a growth that fails (a full disk) is done again, and its
//! error reported, by the append that needs the space.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use crate::io::Mapping;
use crate::segment::SegmentSpace;

/// Ask for more once the writer is within this much of the prefaulted edge.
const CHUNK: usize = 1 << 20;

/// How far ahead of a writer that has written nothing yet pages are faulted in: the lookahead
/// starts here and grows with what the writer has written, to `prefault_bytes`. A fresh
/// segment of a partition that takes a few kilobytes then costs a few pages, not
/// `prefault_bytes` of them (1,000 partitions took 4 GB of faulted pages for 110 MB of
/// appends, docs/benchmarks.md).
const FIRST_LOOKAHEAD: usize = 128 << 10;

/// The lookahead for a writer at `written`: as much as it has written, between
/// [`FIRST_LOOKAHEAD`] and `max`. Pure, so the rule has its test.
fn lookahead_for(written: usize, max: usize) -> usize {
    written.max(FIRST_LOOKAHEAD).min(max)
}

enum Job {
    Populate {
        map: Arc<Mapping>,
        from: usize,
        to: usize,
        write: bool,
    },
    Grow {
        space: Arc<SegmentSpace>,
        to: usize,
    },
}

fn worker() -> &'static Mutex<Sender<Job>> {
    static WORKER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        // If the thread cannot be spawned the jobs are simply dropped: both kinds are hints.
        let _ = std::thread::Builder::new()
            .name("oncelog-prefault".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Populate {
                            map,
                            from,
                            to,
                            write,
                        } => map.populate(from, to - from, write),
                        // An error here is met again by the append that needs the space.
                        Job::Grow { space, to } => drop(space.grow_ahead(to)),
                    }
                }
            });
        Mutex::new(tx)
    })
}

fn send(job: Job) {
    if let Ok(tx) = worker().lock() {
        let _ = tx.send(job);
    }
}

/// How far ahead of one active segment's writer work was requested.
#[derive(Debug, Default)]
pub(crate) struct Prefault {
    /// Bytes from the start of the map already requested faulted in.
    requested: usize,
    /// Where growth of the files was last requested to reach.
    grow_requested: usize,
}

impl Prefault {
    /// Asks for the segment's files to be grown to `target`, unless that was asked already.
    pub fn grow(&mut self, space: &Arc<SegmentSpace>, target: usize) {
        if target <= self.grow_requested {
            return;
        }
        self.grow_requested = target;
        send(Job::Grow {
            space: Arc::clone(space),
            to: target,
        });
    }

    /// Called after an append: when the writer at `written` is within its lookahead of the
    /// requested edge, asks for the next stretch up to `written + lookahead`, at most to
    /// `allocated` (a page past the file's end would be a SIGBUS). The lookahead grows with
    /// the writer up to `lookahead` ([`lookahead_for`]). `write` faults the pages in writable
    /// (fastest copies, but they are dirty and a flush writes them back as zeros); otherwise
    /// readable (the copy takes a cheap write-protect fault instead).
    pub fn advance(
        &mut self,
        map: &Arc<Mapping>,
        written: usize,
        allocated: usize,
        lookahead: usize,
        write: bool,
    ) {
        if lookahead == 0 {
            return;
        }
        let end = allocated.min(map.len());
        let ahead = lookahead_for(written, lookahead);
        let target = written.saturating_add(ahead).min(end);
        let from = self.requested.max(written);
        // Requests of at least a chunk (half the lookahead while it is short).
        let grain = CHUNK.min(ahead / 2).max(1);
        if target <= from || (target - from < grain && target < end) {
            return;
        }
        self.requested = target;
        send(Job::Populate {
            map: Arc::clone(map),
            from,
            to: target,
            write,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookahead_grows_with_the_writer_to_its_maximum() {
        const MIB: usize = 1 << 20;
        assert_eq!(lookahead_for(0, 8 * MIB), FIRST_LOOKAHEAD);
        assert_eq!(lookahead_for(11_000, 8 * MIB), FIRST_LOOKAHEAD);
        assert_eq!(lookahead_for(3 * MIB, 8 * MIB), 3 * MIB);
        assert_eq!(lookahead_for(100 * MIB, 8 * MIB), 8 * MIB);
        // Never more than asked for.
        assert_eq!(lookahead_for(0, 4096), 4096);
    }
}
