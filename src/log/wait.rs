//! Waiting for data: a reader at the log end parks until an append moves the end past its
//! offset (a broker's long-poll Fetch), by a blocking call or by a future any async runtime
//! can await. No polling, and no runtime dependency: the future is a `std::future::Future`
//! over a list of `std::task::Waker`s.
//!
//! The append path pays for this only when someone waits. An appender stores the new log end
//! and then reads the waiter count, both sequentially consistent; a waiter raises the count
//! and then reads the log end, in the same order. Whichever of the two comes second sees the
//! other's write: either the appender sees a waiter and wakes it (taking the waiter lock, so a
//! waiter between its check and its sleep cannot miss the wake), or the waiter sees the new
//! end and does not sleep. With no waiter the cost is one load and a branch.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::Log;

/// How a wait for data ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// The log end passed the offset: the record at the offset is readable.
    Ready {
        /// The log end offset seen, greater than the offset waited for.
        log_end_offset: i64,
    },
    /// The timeout passed first (only from [`Log::wait_for`]: a future's timeout is the
    /// runtime's).
    TimedOut {
        /// The log end offset seen, at most the offset waited for.
        log_end_offset: i64,
    },
    /// The log was closed: no data will come.
    Closed,
}

/// The waiters on a log's end offset.
#[derive(Debug, Default)]
pub(super) struct EndSignal {
    /// Blocking waiters plus registered futures. Appenders skip the rest when it is 0.
    waiters: AtomicUsize,
    wakers: Mutex<WakerSlots>,
    blocked: Condvar,
}

/// The futures' wakers, each in the slot its future holds until it is dropped.
#[derive(Debug, Default)]
struct WakerSlots {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

#[derive(Debug)]
enum Slot {
    Free,
    /// A future waiting to be woken.
    Waiting(Waker),
    /// Woken; its future has not been polled since.
    Woken,
}

impl EndSignal {
    /// Called after every move of the log end (the store must be `SeqCst`, see above).
    #[inline]
    pub(super) fn notify(&self) {
        if self.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    /// Wakes every waiter; they recheck the log end (and whether it is closed) themselves.
    #[cold]
    pub(super) fn wake_all(&self) {
        // Taken out under the lock, woken outside it: a waker may run its task at once.
        let woken: Vec<Waker> = {
            let mut w = self.wakers.lock();
            w.slots
                .iter_mut()
                .filter_map(|slot| match std::mem::replace(slot, Slot::Woken) {
                    Slot::Waiting(waker) => Some(waker),
                    other => {
                        *slot = other;
                        None
                    }
                })
                .collect()
        };
        self.blocked.notify_all();
        woken.into_iter().for_each(Waker::wake);
    }

    #[cfg(test)]
    pub(super) fn waiter_count(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }
}

impl Log {
    /// Moves the log end forward after an append and wakes whoever waits for it.
    pub(super) fn publish_log_end(&self, end: i64) {
        self.log_end_offset.store(end, Ordering::SeqCst);
        self.end_signal.notify();
    }

    /// Blocks until the log end passes `offset` (the record at `offset` can be read), the
    /// log is closed, or `timeout` passes. Returns at once when the record is already there.
    /// Appenders wake waiters directly: there is no polling interval.
    pub fn wait_for(&self, offset: i64, timeout: Duration) -> WaitOutcome {
        self.wait_until(timeout, || {
            self.log_end_offset.load(Ordering::SeqCst) > offset
        })
    }

    /// Blocks until `ready` holds, the log is closed, or `timeout` passes. `ready` reads what
    /// it waits on after the waiter count is raised; whatever moves it notifies the end
    /// signal after the move (see the module's docs).
    pub(super) fn wait_until(&self, timeout: Duration, ready: impl Fn() -> bool) -> WaitOutcome {
        let check = || {
            if self.closed.load(Ordering::Acquire) {
                return Some(WaitOutcome::Closed);
            }
            let log_end_offset = self.log_end_offset.load(Ordering::SeqCst);
            ready().then_some(WaitOutcome::Ready { log_end_offset })
        };
        if let Some(done) = check() {
            return done;
        }
        // A deadline too far to represent is no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let signal = &self.end_signal;
        let mut guard = signal.wakers.lock();
        signal.waiters.fetch_add(1, Ordering::SeqCst);
        let outcome = loop {
            if let Some(done) = check() {
                break done;
            }
            match deadline {
                Some(deadline) => {
                    if signal.blocked.wait_until(&mut guard, deadline).timed_out() {
                        break check().unwrap_or(WaitOutcome::TimedOut {
                            log_end_offset: self.log_end_offset(),
                        });
                    }
                }
                None => signal.blocked.wait(&mut guard),
            }
        };
        signal.waiters.fetch_sub(1, Ordering::SeqCst);
        outcome
    }

    /// Wakes the waiters after something other than an append moved what they may wait on
    /// (the high watermark): the fence orders that move before the waiter count is read.
    pub(super) fn notify_waiters(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.end_signal.notify();
    }

    /// A future that resolves when the log end passes `offset` ([`WaitOutcome::Ready`]) or
    /// the log is closed ([`WaitOutcome::Closed`]). It registers its waker with the log, so
    /// it is polled again only after an append or the close; wrap it in the runtime's timeout
    /// for a long poll with a limit.
    pub fn wait_for_async(&self, offset: i64) -> WaitFor<'_> {
        WaitFor {
            log: self,
            offset,
            slot: None,
        }
    }

    /// The outcome if the wait is over.
    fn wait_check(&self, offset: i64) -> Option<WaitOutcome> {
        if self.closed.load(Ordering::Acquire) {
            return Some(WaitOutcome::Closed);
        }
        let log_end_offset = self.log_end_offset.load(Ordering::SeqCst);
        (log_end_offset > offset).then_some(WaitOutcome::Ready { log_end_offset })
    }
}

/// The future of [`Log::wait_for_async`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct WaitFor<'a> {
    log: &'a Log,
    offset: i64,
    /// The slot holding this future's waker, once registered.
    slot: Option<usize>,
}

impl WaitFor<'_> {
    fn unregister(&mut self) {
        if let Some(i) = self.slot.take() {
            let signal = &self.log.end_signal;
            let mut w = signal.wakers.lock();
            w.slots[i] = Slot::Free;
            w.free.push(i);
            signal.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn finish(&mut self, outcome: WaitOutcome) -> Poll<WaitOutcome> {
        self.unregister();
        Poll::Ready(outcome)
    }
}

impl Future for WaitFor<'_> {
    type Output = WaitOutcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WaitOutcome> {
        let this = self.get_mut();
        if let Some(done) = this.log.wait_check(this.offset) {
            return this.finish(done);
        }
        let signal = &this.log.end_signal;
        {
            let mut w = signal.wakers.lock();
            let waker = Slot::Waiting(cx.waker().clone());
            match this.slot {
                Some(i) => w.slots[i] = waker,
                None => {
                    let i = match w.free.pop() {
                        Some(i) => {
                            w.slots[i] = waker;
                            i
                        }
                        None => {
                            w.slots.push(waker);
                            w.slots.len() - 1
                        }
                    };
                    this.slot = Some(i);
                    signal.waiters.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        // An append between the first check and the registration did not see this waiter:
        // look again now that it is counted.
        match this.log.wait_check(this.offset) {
            Some(done) => this.finish(done),
            None => Poll::Pending,
        }
    }
}

impl Drop for WaitFor<'_> {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;
    use crate::format::BatchBuilder;
    use crate::LogConfig;

    struct Flag(std::sync::atomic::AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn one_record() -> Vec<u8> {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000, None, Some(b"v"), &[]);
        b.build().expect("build")
    }

    #[test]
    fn a_pending_future_is_woken_once_by_an_append_and_forgotten_when_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path(), LogConfig::default()).expect("open");
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut future = log.wait_for_async(0);
        assert_eq!(Pin::new(&mut future).poll(&mut cx), Poll::Pending);
        assert_eq!(log.end_signal.waiter_count(), 1);
        assert!(!flag.0.load(Ordering::SeqCst));
        log.append(&one_record()).expect("append");
        assert!(flag.0.load(Ordering::SeqCst), "the append woke the future");
        drop(future);
        assert_eq!(log.end_signal.waiter_count(), 0, "the slot was given back");
        // A second future reuses the slot and resolves at once: the record is there.
        let mut future = log.wait_for_async(0);
        assert_eq!(
            Pin::new(&mut future).poll(&mut cx),
            Poll::Ready(WaitOutcome::Ready { log_end_offset: 1 })
        );
        assert_eq!(log.end_signal.waiter_count(), 0);
    }
}
