//! Where compaction plugs into the manager: the manager's `cleaning` job, its
//! interval, its byte-rate throttle and the cleaner checkpoint are here; the cleaning itself
//! is a [`Cleaner`]: [`Compactor`] (the log's own compaction) unless another is given to
//! [`super::LogManager::set_cleaner`].
//!
//! Each run of [`super::Job::Cleaning`] visits every online partition whose
//! `cleanup.policy` includes `compact`, in order, and asks the cleaner to clean it from the
//! partition's `cleaner-offset-checkpoint` entry (its log start when it has none). The offset
//! the cleaner answers moves that entry, which the high-watermark job, and `close`, write to
//! the log dir's `cleaner-offset-checkpoint` as Kafka does; an answer outside the log's bounds
//! is a failure and moves nothing. Every partition of one run shares one [`Throttle`]: Kafka's
//! `log.cleaner.io.max.bytes.per.second` bounds the cleaner as a whole.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{CleanupPolicy, TopicPartition};
use crate::log::Log;

/// A compaction cleaner, run by the manager's cleaning job on the job's thread.
pub trait Cleaner: Send + Sync {
    /// Cleans `log` from `request.from` on, calling [`Throttle::pay`] for the bytes it reads
    /// (and stopping early when it answers `false`: the manager is closing). Answers how far
    /// the log is now clean: the next run starts there.
    fn clean(&self, log: &Log, request: &CleanRequest<'_>) -> Result<Cleaned, String>;
}

/// What the cleaning job asks of a [`Cleaner`] for one partition.
#[derive(Debug)]
#[non_exhaustive]
pub struct CleanRequest<'a> {
    /// The partition.
    pub partition: &'a TopicPartition,
    /// Its `cleanup.policy` (`compact` or `compact,delete`).
    pub policy: CleanupPolicy,
    /// Where cleaning starts: the cleaner checkpoint's offset, within the log's bounds, or the
    /// log start.
    pub from: i64,
    /// The manager's clock (ms since the epoch), for the cleaner's lags and horizons.
    pub now_ms: i64,
    /// The throttle every partition of this run shares.
    pub throttle: &'a Throttle<'a>,
}

/// What a [`Cleaner`] did to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cleaned {
    /// The log is clean below this offset: the partition's new cleaner checkpoint entry. Must
    /// lie between the request's `from` and the log end.
    pub clean_to: i64,
    /// Bytes the cleaner read (reported in the job's statistics as what it did when > 0).
    pub bytes_read: u64,
}

impl Cleaned {
    /// Clean below `clean_to`, having read `bytes_read` bytes: what a [`Cleaner`] answers.
    pub fn new(clean_to: i64, bytes_read: u64) -> Cleaned {
        Cleaned {
            clean_to,
            bytes_read,
        }
    }
}

/// Bounds the bytes per second of a cleaning run; a closing manager ends its waits.
pub struct Throttle<'a> {
    bytes_per_second: Option<u64>,
    started: Instant,
    paid: Mutex<u64>,
    stopping: &'a AtomicBool,
}

impl std::fmt::Debug for Throttle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("bytes_per_second", &self.bytes_per_second)
            .field("paid", &*self.paid.lock())
            .finish()
    }
}

/// The longest single wait, so that a closing manager is noticed soon.
const WAIT_SLICE: Duration = Duration::from_millis(20);

impl<'a> Throttle<'a> {
    /// A throttle to `bytes_per_second` (`None`: unbounded) that gives up waiting once
    /// `stopping` is set.
    pub(crate) fn new(bytes_per_second: Option<u64>, stopping: &'a AtomicBool) -> Throttle<'a> {
        Throttle {
            bytes_per_second,
            started: Instant::now(),
            paid: Mutex::new(0),
            stopping,
        }
    }

    /// Accounts for `bytes` read, waiting until the run is back within its rate. `false`:
    /// the manager is closing, and the cleaner should stop where it is.
    pub fn pay(&self, bytes: u64) -> bool {
        let total = {
            let mut paid = self.paid.lock();
            *paid = paid.saturating_add(bytes);
            *paid
        };
        loop {
            if self.stopping.load(Ordering::Acquire) {
                return false;
            }
            let wait = wait_for(total, self.started.elapsed(), self.bytes_per_second);
            if wait.is_zero() {
                return true;
            }
            std::thread::sleep(wait.min(WAIT_SLICE));
        }
    }

    /// Bytes paid for so far.
    pub fn paid(&self) -> u64 {
        *self.paid.lock()
    }
}

/// The manager's own cleaner: the log's compaction ([`Maintenance::compact`](crate::Maintenance::compact), Kafka's log cleaner and
/// its rules), run on a partition when [`Maintenance::cleanable`](crate::Maintenance::cleanable) says a round is due. What a round
/// reads is paid to the throttle after it (a round is one rewrite, committed as a whole); a
/// manager that is closing stops before the next partition.
#[derive(Debug, Default, Clone, Copy)]
pub struct Compactor;

impl Cleaner for Compactor {
    fn clean(&self, log: &Log, request: &CleanRequest<'_>) -> Result<Cleaned, String> {
        let due = log.maintenance().cleanable(request.now_ms);
        if !due.due {
            return Ok(Cleaned {
                clean_to: due.first_dirty_offset.max(request.from).min(log.log_end_offset()),
                bytes_read: 0,
            });
        }
        let report = log.maintenance().compact(request.now_ms).map_err(|e| e.to_string())?;
        request.throttle.pay(report.bytes_before);
        Ok(Cleaned {
            clean_to: report.cleaned_to.max(request.from).min(log.log_end_offset()),
            bytes_read: report.bytes_before,
        })
    }
}

/// How long to wait, `elapsed` into a run that read `total` bytes, to keep within
/// `bytes_per_second`: the time those bytes take at the rate, less what has passed.
pub(crate) fn wait_for(total: u64, elapsed: Duration, bytes_per_second: Option<u64>) -> Duration {
    match bytes_per_second {
        None => Duration::ZERO,
        Some(0) => Duration::MAX,
        Some(rate) => {
            let due =
                Duration::try_from_secs_f64(total as f64 / rate as f64).unwrap_or(Duration::MAX);
            due.saturating_sub(elapsed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_what_the_bytes_take_at_the_rate_less_what_passed() {
        let s = Duration::from_secs;
        assert_eq!(wait_for(1 << 30, s(0), None), Duration::ZERO);
        assert_eq!(wait_for(1000, s(0), Some(1000)), s(1));
        assert_eq!(
            wait_for(1000, Duration::from_millis(400), Some(1000)),
            Duration::from_millis(600)
        );
        assert_eq!(wait_for(1000, s(2), Some(1000)), Duration::ZERO);
        assert_eq!(wait_for(5000, s(1), Some(1000)), s(4));
        // More bytes than a Duration holds at the rate: the longest wait, no overflow.
        assert_eq!(wait_for(u64::MAX, s(0), Some(1)), Duration::MAX);
    }

    #[test]
    fn a_closing_manager_ends_the_wait() {
        let stopping = AtomicBool::new(true);
        let t = Throttle::new(Some(1), &stopping);
        // A day's worth of bytes at 1 B/s: answered at once, because the manager is closing.
        assert!(!t.pay(86_400));
        assert_eq!(t.paid(), 86_400);
        let running = AtomicBool::new(false);
        assert!(Throttle::new(None, &running).pay(u64::MAX));
    }
}
