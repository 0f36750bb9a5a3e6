//! The write group (docs/design.md, "The write group"): appenders that each wait for their
//! batch to be durable (`FlushPolicy::Always`) queue their validated batches, and one of them,
//! the leader, appends the whole queue under one hold of the append lock and leads the one
//! sync that covers it, then answers each. Without it, every appender woken by a sync takes
//! the append lock in turn, and each hand-off of the lock is a thread parked and woken (a
//! convoy): on two cores that, not the device, set the pace of a durable group.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::flush::Wake;
use super::{flush_to_append_error, AppendError, AppendOutcome, InFlight, Log};
use crate::format::BatchSummary;
use crate::io::IoError;

/// How long a leader keeps taking appenders into its group while appends are under way: a
/// small fraction of a sync (Postgres's `commit_delay`, but only while someone is appending).
const COLLECT: Duration = Duration::from_micros(100);

/// The appenders waiting to be written, and whether one of them leads.
#[derive(Default)]
pub(super) struct WriteGroup {
    queue: Vec<Arc<Queued>>,
    /// How the appenders of the group being formed are answered (all but one that waits to
    /// lead the next): all at once, by one wake-up (on two cores, waking each in turn cost the
    /// leader about 8 µs an appender).
    answered: Arc<Answered>,
    /// A leader leads a group: newcomers queue for the next one, unless it is `collecting`.
    leading: bool,
    /// The leader is still taking appenders into its group (it has not started its sync):
    /// newcomers join it.
    collecting: bool,
    /// How many appenders the last group had: about as many are coming back.
    last_size: usize,
}

/// The answer to a group's appenders: its word goes from [`Answered::WAITING`] to
/// [`Answered::DURABLE`] or [`Answered::UNCONFIRMED`] once, and all waiting on it wake.
#[derive(Default)]
struct Answered {
    word: AtomicU32,
}

impl Answered {
    const WAITING: u32 = 0;
    /// Each outcome is there, durable if it needed to be.
    const DURABLE: u32 = 1;
    /// Each outcome is there, but the group's sync failed: whether a batch is durable is for
    /// its appender to find out (`flush_to`).
    const UNCONFIRMED: u32 = 2;

    fn set(&self, answer: u32) {
        self.word.store(answer, Ordering::Release);
        atomic_wait::wake_all(&self.word);
    }

    fn wait(&self) -> u32 {
        loop {
            match self.word.load(Ordering::Acquire) {
                Answered::WAITING => atomic_wait::wait(&self.word, Answered::WAITING),
                answer => return answer,
            }
        }
    }
}

/// One appender's batch in the queue, and where its answer goes.
struct Queued {
    /// A copy: the appender's own slice stays with its caller.
    batch: Vec<u8>,
    summary: BatchSummary,
    now: i64,
    /// Set by the leader once the batch is appended (or refused).
    outcome: Mutex<Option<Result<AppendOutcome, AppendError>>>,
    wake: Wake,
}

impl Queued {
    /// The outcome the leader left; `None` only if it failed before it got to this batch
    /// (it panicked), which refuses the batch: it was not written.
    fn take(&self, log: &Log) -> Result<AppendOutcome, AppendError> {
        self.outcome.lock().take().unwrap_or_else(|| {
            Err(AppendError::Io(IoError::new(
                "append",
                log.dir.clone(),
                std::io::Error::other("the write group's leader failed before writing this batch"),
            )))
        })
    }
}

impl Log {
    /// Appends a validated client batch through the write group and returns once it is
    /// durable (or refused): each batch gets the outcome it would have got appending alone, in
    /// the order the batches joined the queue.
    pub(super) fn append_in_group(
        &self,
        batch: &[u8],
        summary: BatchSummary,
        now: i64,
        in_flight: InFlight<'_>,
    ) -> Result<AppendOutcome, AppendError> {
        let me = Arc::new(Queued {
            batch: batch.to_vec(),
            summary,
            now,
            outcome: Mutex::new(None),
            wake: Wake::new(),
        });
        let mut g = self.group.lock();
        g.queue.push(Arc::clone(&me));
        // Queued: a leader waiting for the appends under way need not wait for this one.
        drop(in_flight);
        if g.leading {
            // The first to queue behind a leader that closed its group leads the next one; the
            // others are answered with the group they joined.
            let first = !g.collecting && g.queue.len() == 1;
            let answered = Arc::clone(&g.answered);
            drop(g);
            if !first {
                return match answered.wait() {
                    Answered::UNCONFIRMED => self.confirm(me.take(self)),
                    _ => me.take(self),
                };
            }
            me.wake.wait_state();
        } else {
            g.leading = true;
            drop(g);
        }
        self.lead_group(&me)
    }

    /// The leader's turn: appends what is queued, and again what queued meanwhile while
    /// appends are under way (for at most [`COLLECT`]), so the appenders woken by the last
    /// sync join this group while the leader writes the first of them; then closes the group,
    /// syncs once, answers the others and hands the lead to the first that queued since.
    fn lead_group(&self, me: &Arc<Queued>) -> Result<AppendOutcome, AppendError> {
        let (answered, expected) = {
            let mut g = self.group.lock();
            g.collecting = true;
            (Arc::clone(&g.answered), g.last_size)
        };
        let mut lead = Lead {
            log: self,
            answered: &answered,
            synced: false,
        };
        let deadline = Instant::now() + COLLECT;
        let mut end = None;
        let mut flush = false;
        let mut collected = 0;
        loop {
            let (taken, closed) = {
                let mut g = self.group.lock();
                let taken = std::mem::take(&mut g.queue);
                collected += taken.len();
                // The appenders the last sync answered were woken just now: until about as
                // many as there were have come back, or none is on its way, keep collecting.
                let closed = (taken.is_empty()
                    && collected >= expected
                    && self.appends_in_flight.load(Ordering::Acquire) == 0)
                    || Instant::now() >= deadline;
                if closed {
                    // Newcomers queue for the next group, answered by its own signal.
                    g.collecting = false;
                    g.answered = Arc::default();
                    g.last_size = collected;
                }
                (taken, closed)
            };
            if !taken.is_empty() {
                let mut st = self.append.lock();
                for q in &taken {
                    let outcome = self.append_locked(&mut st, &q.batch, &q.summary, q.now);
                    if let Ok(o) = &outcome {
                        end = end.max(Some(o.offsets().1 + 1));
                    }
                    *q.outcome.lock() = Some(outcome);
                }
                flush = self.flush_due(&st);
            } else if !closed {
                std::thread::yield_now();
            }
            if closed {
                break;
            }
        }
        let flushed = match end {
            Some(end) if flush => self.flush_group(end),
            _ => Ok(()),
        };
        lead.synced = flushed.is_ok();
        drop(lead);
        let mine = me.take(self)?;
        flushed.map_err(flush_to_append_error)?;
        Ok(mine)
    }

    /// An outcome whose group's sync failed: durable only if a sync since covered it.
    fn confirm(
        &self,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> Result<AppendOutcome, AppendError> {
        let o = outcome?;
        self.flush_to(o.offsets().1 + 1)
            .map_err(flush_to_append_error)?;
        Ok(o)
    }
}

/// The leader's duty to the others, kept even if it unwinds: every other appender of the
/// group is answered, and the lead goes on to the next group (or is given up).
struct Lead<'a> {
    log: &'a Log,
    answered: &'a Answered,
    /// The group's sync succeeded: the others are answered as durable.
    synced: bool,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let mut g = self.log.group.lock();
        if g.collecting {
            // The leader failed before it closed its group: those queued are answered with it
            // (refused: nothing was written for them).
            g.collecting = false;
            g.queue.clear();
            g.answered = Arc::default();
        }
        // The next leader first: it collects the appenders answered below as they come back,
        // instead of waiting for this thread to be scheduled again once they have run.
        match g.queue.first() {
            Some(next) => next.wake.set(Wake::LEAD),
            None => g.leading = false,
        }
        drop(g);
        self.answered.set(if self.synced {
            Answered::DURABLE
        } else {
            Answered::UNCONFIRMED
        });
    }
}
