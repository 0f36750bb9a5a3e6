//! Waiting for data at the log end: the blocking `Log::wait_for` and the future of
//! `Log::wait_for_async`, woken by appends (client and replicated) and by close. The future is
//! driven by a minimal executor written here: the library needs no async runtime.

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

use common::{batch, replicated_batch, T0};
use oncelog::{Log, LogConfig, WaitOutcome};

/// Long enough never to be what ends a wait that must end otherwise.
const FOREVER: Duration = Duration::from_secs(60);

fn open() -> (tempfile::TempDir, Arc<Log>) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    (dir, Arc::new(log))
}

/// Wakes the thread that runs the executor.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` to completion on this thread, parking between polls; returns the output and
/// how many times it was polled.
fn block_on<F: Future>(future: F) -> (F::Output, usize) {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return (out, polls);
        }
        thread::park();
    }
}

#[test]
fn a_record_already_there_needs_no_wait() {
    let (_dir, log) = open();
    log.append(&batch(3, T0, 10)).unwrap();
    assert_eq!(
        log.wait_for(2, Duration::ZERO),
        WaitOutcome::Ready { log_end_offset: 3 }
    );
    let (out, polls) = block_on(log.wait_for_async(0));
    assert_eq!((out, polls), (WaitOutcome::Ready { log_end_offset: 3 }, 1));
}

#[test]
fn a_blocked_reader_is_woken_by_an_append_on_another_thread() {
    let (_dir, log) = open();
    log.append(&batch(5, T0, 10)).unwrap();
    let started = Arc::new(Barrier::new(2));
    let appender = {
        let (log, started) = (Arc::clone(&log), Arc::clone(&started));
        thread::spawn(move || {
            started.wait();
            thread::sleep(Duration::from_millis(20));
            log.append(&batch(2, T0, 10)).unwrap();
        })
    };
    started.wait();
    assert_eq!(
        log.wait_for(5, FOREVER),
        WaitOutcome::Ready { log_end_offset: 7 }
    );
    appender.join().unwrap();
}

#[test]
fn a_replicated_append_wakes_a_reader_too() {
    let (_dir, log) = open();
    let waiter = {
        let log = Arc::clone(&log);
        thread::spawn(move || log.wait_for(0, FOREVER))
    };
    thread::sleep(Duration::from_millis(20));
    log.replica()
        .append(&replicated_batch(0, 4, T0, 10))
        .unwrap();
    assert_eq!(
        waiter.join().unwrap(),
        WaitOutcome::Ready { log_end_offset: 4 }
    );
}

#[test]
fn a_wait_with_nothing_appended_times_out_at_the_log_end() {
    let (_dir, log) = open();
    log.append(&batch(2, T0, 10)).unwrap();
    assert_eq!(
        log.wait_for(2, Duration::from_millis(30)),
        WaitOutcome::TimedOut { log_end_offset: 2 }
    );
    // An append that does not reach the offset does not end the wait either.
    assert_eq!(
        log.wait_for(9, Duration::from_millis(1)),
        WaitOutcome::TimedOut { log_end_offset: 2 }
    );
}

#[test]
fn close_releases_blocked_readers_and_futures() {
    let (_dir, log) = open();
    let blocked = {
        let log = Arc::clone(&log);
        thread::spawn(move || log.wait_for(0, FOREVER))
    };
    let awaiting = {
        let log = Arc::clone(&log);
        thread::spawn(move || block_on(log.wait_for_async(0)).0)
    };
    thread::sleep(Duration::from_millis(30));
    log.close().unwrap();
    assert_eq!(blocked.join().unwrap(), WaitOutcome::Closed);
    assert_eq!(awaiting.join().unwrap(), WaitOutcome::Closed);
    // And a wait on a closed log returns at once.
    assert_eq!(log.wait_for(0, FOREVER), WaitOutcome::Closed);
}

#[test]
fn the_future_is_polled_again_only_when_woken() {
    let (_dir, log) = open();
    let polled = Arc::new(AtomicUsize::new(0));
    let awaiting = {
        let (log, polled) = (Arc::clone(&log), Arc::clone(&polled));
        thread::spawn(move || {
            let (out, polls) = block_on(log.wait_for_async(9));
            polled.store(polls, Ordering::SeqCst);
            out
        })
    };
    // Appends that do not reach offset 9 wake the future, which looks and waits again.
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(10));
        log.append(&batch(2, T0, 10)).unwrap();
    }
    log.append(&batch(4, T0, 10)).unwrap();
    assert_eq!(
        awaiting.join().unwrap(),
        WaitOutcome::Ready { log_end_offset: 10 }
    );
    // A busy-polling future would have been polled without bound; this one once, then at most
    // once per append (a spurious unpark may add a few).
    let polls = polled.load(Ordering::SeqCst);
    assert!(polls <= 5 + 3, "polled {polls} times for 4 appends");
}
