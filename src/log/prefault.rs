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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::io::Mapping;
use crate::segment::SegmentSpace;

/// Ask for more once the writer is within this much of the requested edge.
const CHUNK: usize = 1 << 20;

/// How far ahead of a writer that has written nothing yet pages are faulted in: the lookahead
/// starts here and grows with what the writer has written, to `prefault_bytes`. A fresh
/// segment of a partition that takes a few kilobytes then costs a few pages, not
/// `prefault_bytes` of them (1,000 partitions took 4 GB of faulted pages for 110 MB of
/// appends, docs/benchmarks.md).
const FIRST_LOOKAHEAD: usize = 128 << 10;

/// How long the lookahead lasts the writer at the rate it appends: it must cover the time the
/// background thread takes to wake up and fault in a chunk, or a fast writer catches it up and
/// both fault the same pages, each waiting on the other's page locks (docs/performance.md,
/// "Pages faulted in ahead of the writer").
const LOOKAHEAD_TIME: Duration = Duration::from_millis(4);

/// Pages just ahead of the writer that the background thread leaves to it: it starts at least
/// this far past the writer (a quarter of the lookahead while that is short). Both faulting in
/// the same pages at once, each waits on the other's page locks, and the kernel's read-around
/// of a fault (`read_ahead_kb` each side of it) reaches back from the thread's pages to the
/// writer's: a writer that caught the thread up went at a third of its speed. Measured in
/// docs/performance.md ("Pages faulted in ahead of the writer").
const WRITER_GAP: usize = 1 << 20;

/// What the background thread faults in at a time, before it looks where the writer is again
/// and lets another job run.
const PIECE: usize = 1 << 20;

/// The lookahead for a writer at `written` that appends `rate` bytes a second: as much as it
/// has written, or as much as it writes in [`LOOKAHEAD_TIME`], whichever is more, between
/// [`FIRST_LOOKAHEAD`] and `max`. Pure, so the rule has its test.
fn lookahead_for(written: usize, rate: f64, max: usize) -> usize {
    let for_rate = (rate * LOOKAHEAD_TIME.as_secs_f64()) as usize;
    written.max(for_rate).max(FIRST_LOOKAHEAD).min(max)
}

/// Whether a lookahead grew past the first one: the writer wrote, or appends, enough for its
/// files to be grown ahead of its pages (an idle partition's are not).
pub(crate) fn past_first_lookahead(lookahead: usize) -> bool {
    lookahead > FIRST_LOOKAHEAD
}

/// The gap left to a writer whose lookahead is `lookahead`.
fn writer_gap(lookahead: usize) -> usize {
    (lookahead / 4).min(WRITER_GAP)
}

/// Where the background thread starts faulting in pages: where it got to, but at least `gap`
/// past the writer. Pure, so the rule has its test.
fn populate_from(done: usize, writer: usize, gap: usize) -> usize {
    done.max(writer.saturating_add(gap))
}

/// What the appender and the background thread share about one active segment's map: how far
/// ahead pages are wanted, and how far they are faulted in. The thread works on the latest
/// request, from where the writer is when it gets to it: a stale range the writer has passed
/// costs nothing, and a writer that outran it is not followed page by page.
struct Ahead {
    map: Arc<Mapping>,
    /// Fault the pages in writable (`MADV_POPULATE_WRITE`) rather than readable.
    write: bool,
    /// Bytes from the start of the map wanted faulted in.
    want: AtomicUsize,
    /// Bytes from the start of the map faulted in (the background thread's cursor).
    done: AtomicUsize,
    /// What the thread leaves to the writer ([`writer_gap`] of its lookahead).
    gap: AtomicUsize,
    /// A job for this map is queued or running; a raise of `want` then needs no new job.
    queued: AtomicBool,
}

impl Ahead {
    /// Faults in a chunk of the pages still wanted, and queues the map again if more are: one
    /// thread serves every log of the process, and a growth or another partition's chunk
    /// waits for one chunk at most. Clears `queued` first, so a raise that comes after the
    /// read of `want` queues the map again.
    fn run(self: Arc<Self>) {
        self.queued.store(false, Ordering::SeqCst);
        let want = self.want.load(Ordering::SeqCst);
        let from = populate_from(
            self.done.load(Ordering::Relaxed),
            self.map.published(),
            self.gap.load(Ordering::Relaxed),
        );
        if from >= want {
            return;
        }
        let to = want.min(from + PIECE);
        self.map.populate(from, to - from, self.write);
        self.done.store(to, Ordering::Relaxed);
        if to < want && !self.queued.swap(true, Ordering::SeqCst) {
            send(Job::Populate(self));
        }
    }
}

enum Job {
    Populate(Arc<Ahead>),
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
                        Job::Populate(ahead) => ahead.run(),
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
#[derive(Default)]
pub(crate) struct Prefault {
    /// The map's shared cursor, from the first request on.
    ahead: Option<Arc<Ahead>>,
    /// Where growth of the files was last requested to reach.
    grow_requested: usize,
    /// The writer's append rate, bytes a second, from the last two requests (kept across
    /// segments: a roll does not slow the writer down).
    rate: f64,
    /// When the last request was made, and where the writer was then.
    last: Option<(Instant, usize)>,
}

impl std::fmt::Debug for Prefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefault")
            .field("want", &self.ahead.as_ref().map(|a| a.want.load(Ordering::Relaxed)))
            .field("grow_requested", &self.grow_requested)
            .field("rate", &self.rate)
            .finish()
    }
}

impl Drop for Prefault {
    /// The segment stopped being active (a roll, a truncation, a close): work still queued for
    /// its map finds nothing wanted.
    fn drop(&mut self) {
        if let Some(ahead) = &self.ahead {
            ahead.want.store(0, Ordering::SeqCst);
        }
    }
}

impl Prefault {
    /// A fresh start for the next segment, keeping what was learned of the writer's rate.
    pub fn for_next_segment(&self) -> Prefault {
        let mut next = Prefault::default();
        next.rate = self.rate;
        next
    }

    /// How far ahead of a writer at `written` pages are wanted, at most `max`
    /// ([`lookahead_for`] at the writer's rate).
    pub fn lookahead(&self, written: usize, max: usize) -> usize {
        if max == 0 {
            return 0;
        }
        lookahead_for(written, self.rate, max)
    }

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
    /// requested edge, asks for the pages up to `written + lookahead`, at most to `allocated`
    /// (a page past the file's end would be a SIGBUS). The lookahead grows with the writer
    /// and its rate up to `lookahead` ([`lookahead_for`]). `write` faults the pages in
    /// writable (fastest copies, but they are dirty and a flush writes them back as zeros);
    /// otherwise readable (the copy takes a cheap write-protect fault instead). `gap`: the
    /// writer faults pages in itself, through the map, so the thread keeps [`writer_gap`]
    /// ahead of it; a writer through the file faults nothing, and wants every page cached.
    pub fn advance(
        &mut self,
        map: &Arc<Mapping>,
        written: usize,
        allocated: usize,
        lookahead: usize,
        write: bool,
        gap: bool,
    ) {
        if lookahead == 0 {
            return;
        }
        let end = allocated.min(map.len());
        let ahead = lookahead_for(written, self.rate, lookahead);
        let target = written.saturating_add(ahead).min(end);
        let requested = self
            .ahead
            .as_ref()
            .map_or(0, |a| a.want.load(Ordering::Relaxed));
        let from = requested.max(written);
        // Requests of at least a chunk (half the lookahead while it is short).
        let grain = CHUNK.min(ahead / 2).max(1);
        if target <= from || (target - from < grain && target < end) {
            return;
        }
        self.note_rate(written);
        let shared = self.ahead.get_or_insert_with(|| {
            Arc::new(Ahead {
                map: Arc::clone(map),
                write,
                want: AtomicUsize::new(0),
                // The thread starts where the writer is.
                done: AtomicUsize::new(written),
                gap: AtomicUsize::new(0),
                queued: AtomicBool::new(false),
            })
        });
        let gap = if gap { writer_gap(ahead) } else { 0 };
        shared.gap.store(gap, Ordering::Relaxed);
        shared.want.fetch_max(target, Ordering::SeqCst);
        if !shared.queued.swap(true, Ordering::SeqCst) {
            send(Job::Populate(Arc::clone(shared)));
        }
    }

    /// Updates the append rate from the writer's progress since the last request.
    fn note_rate(&mut self, written: usize) {
        let now = Instant::now();
        if let Some((at, was)) = self.last {
            let secs = now.duration_since(at).as_secs_f64();
            if written > was && secs > 0.0 {
                self.rate = (written - was) as f64 / secs;
            }
        }
        self.last = Some((now, written));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookahead_grows_with_the_writer_to_its_maximum() {
        const MIB: usize = 1 << 20;
        assert_eq!(lookahead_for(0, 0.0, 8 * MIB), FIRST_LOOKAHEAD);
        assert_eq!(lookahead_for(11_000, 0.0, 8 * MIB), FIRST_LOOKAHEAD);
        assert_eq!(lookahead_for(3 * MIB, 0.0, 8 * MIB), 3 * MIB);
        assert_eq!(lookahead_for(100 * MIB, 0.0, 8 * MIB), 8 * MIB);
        // Never more than asked for.
        assert_eq!(lookahead_for(0, 0.0, 4096), 4096);
    }

    #[test]
    fn a_fast_writer_gets_what_it_writes_in_the_lookahead_time_at_once() {
        const MIB: usize = 1 << 20;
        // 1 GB/s: 4 ms is 4 MB, from the first requests of a fresh segment on.
        assert_eq!(lookahead_for(0, 1e9, 8 * MIB), 4_000_000);
        // A slow writer keeps the small start: an idle partition faults in few pages.
        assert_eq!(lookahead_for(0, 1e6, 8 * MIB), FIRST_LOOKAHEAD);
        assert_eq!(lookahead_for(0, 1e12, 8 * MIB), 8 * MIB);
    }

    #[test]
    fn the_thread_keeps_a_gap_ahead_of_the_writer() {
        const MIB: usize = 1 << 20;
        assert_eq!(populate_from(8 * MIB, 4096, MIB), 8 * MIB);
        assert_eq!(populate_from(4096, 3 * MIB, MIB), 4 * MIB);
        assert_eq!(populate_from(4096, 4096, MIB), 4096 + MIB);
        // A short lookahead leaves a short gap; a long one at most WRITER_GAP.
        assert_eq!(writer_gap(FIRST_LOOKAHEAD), FIRST_LOOKAHEAD / 4);
        assert_eq!(writer_gap(8 * MIB), WRITER_GAP);
    }
}
