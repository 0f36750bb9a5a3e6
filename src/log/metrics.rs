//! What a broker exports about one partition log: counters of appends, duplicates, refusals,
//! rolls, flushes and snapshots, latency histograms of flushes, and what recovery did on open.
//! [`Log::metrics`](super::Log::metrics) takes a plain snapshot at any time.
//!
//! Cheap enough to leave on: the append path adds a few relaxed loads and stores to counters
//! that only the append-lock holder writes (no locked read-modify-write, no allocation); the
//! histograms are fixed arrays of atomics written only on the flush path. The figure is in
//! `docs/benchmarks.md` ("Cost of metrics"). Building with `--cfg oncelog_no_metrics` compiles
//! the append-path hooks out, which is how that figure is measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{AppendError, Log, ProducerLoadReport, RecoveryReport};
use crate::producer::ProducerError;

/// A counter written only by the holder of the append lock: a relaxed load and store, so the
/// append path pays no locked instruction. Readers may see it a moment late, never torn.
#[derive(Debug, Default)]
struct LockedCounter(AtomicU64);

impl LockedCounter {
    #[inline]
    fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter any thread may bump.
#[derive(Debug, Default)]
struct Counter(AtomicU64);

impl Counter {
    #[inline]
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Buckets per power of two: the upper bound of a bucket is at most 1.25x its lower bound.
const SUB_BUCKET_BITS: u32 = 2;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Enough buckets for every `u64` nanosecond count.
pub const LATENCY_BUCKETS: usize = (64 - SUB_BUCKET_BITS as usize + 1) * SUB_BUCKETS;

/// The bucket of a value: exact below 4, then four log-spaced buckets per power of two.
fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS as u64 {
        return ns as usize;
    }
    let exponent = 63 - ns.leading_zeros();
    let sub = (ns >> (exponent - SUB_BUCKET_BITS)) as usize & (SUB_BUCKETS - 1);
    (exponent - SUB_BUCKET_BITS + 1) as usize * SUB_BUCKETS + sub
}

/// The smallest value of a bucket (the inverse of [`bucket_of`]).
fn bucket_floor(bucket: usize) -> u64 {
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let exponent = (bucket / SUB_BUCKETS) as u32 + SUB_BUCKET_BITS - 1;
    let sub = (bucket % SUB_BUCKETS) as u64;
    (SUB_BUCKETS as u64 + sub) << (exponent - SUB_BUCKET_BITS)
}

/// A latency histogram with fixed log-scale buckets: recording is three relaxed atomic adds
/// and never allocates.
#[derive(Debug)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LatencyHistogram {
        LatencyHistogram {
            counts: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of a latency histogram: counts in log-scale buckets of nanoseconds (four per
/// power of two, so a bucket's bounds are within 25% of each other).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencyHistogram {
    counts: [u64; LATENCY_BUCKETS],
    sum_ns: u64,
    max_ns: u64,
}

impl LatencyHistogram {
    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
    /// Sum of the values recorded.
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }
    /// The largest value recorded.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }
    /// The mean, or zero when nothing was recorded.
    pub fn mean(&self) -> Duration {
        match self.count() {
            0 => Duration::ZERO,
            n => Duration::from_nanos(self.sum_ns / n),
        }
    }
    /// An upper bound of the `q` quantile (`q` in 0..=1, clamped): the top of the bucket that
    /// holds it, never above the largest value recorded. Zero when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let top = bucket_floor(bucket + 1).saturating_sub(1);
                return Duration::from_nanos(top.min(self.max_ns));
            }
        }
        self.max()
    }
    /// The non-empty buckets in order: (smallest value, largest value, count), for exporting
    /// (a Prometheus histogram takes the largest values as its `le` bounds).
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, Duration, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(b, &n)| {
                let top = bucket_floor(b + 1).saturating_sub(1);
                (
                    Duration::from_nanos(bucket_floor(b)),
                    Duration::from_nanos(top),
                    n,
                )
            })
    }
}

/// Appends refused, by the kind [`AppendError::kind`] names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusals {
    /// `corrupt_batch`: damaged bytes (CORRUPT_MESSAGE).
    pub corrupt_batch: u64,
    /// `invalid_record`: a well-formed batch breaking a client rule (INVALID_RECORD).
    pub invalid_record: u64,
    /// `batch_too_large` and `record_list_too_large`.
    pub too_large: u64,
    /// `invalid_producer_epoch`.
    pub invalid_producer_epoch: u64,
    /// `out_of_order_sequence`.
    pub out_of_order_sequence: u64,
    /// `invalid_txn_state`.
    pub invalid_txn_state: u64,
    /// `coordinator_fenced`.
    pub coordinator_fenced: u64,
    /// `too_many_producers`.
    pub too_many_producers: u64,
    /// `unexpected_append_offset` (replicated appends).
    pub unexpected_append_offset: u64,
    /// `io`, `read_only` and `closed`: the log, not the batch, was the reason.
    pub log_unavailable: u64,
}

impl Refusals {
    /// Every counter with its name, for exporting.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("corrupt_batch", self.corrupt_batch),
            ("invalid_record", self.invalid_record),
            ("too_large", self.too_large),
            ("invalid_producer_epoch", self.invalid_producer_epoch),
            ("out_of_order_sequence", self.out_of_order_sequence),
            ("invalid_txn_state", self.invalid_txn_state),
            ("coordinator_fenced", self.coordinator_fenced),
            ("too_many_producers", self.too_many_producers),
            ("unexpected_append_offset", self.unexpected_append_offset),
            ("log_unavailable", self.log_unavailable),
        ]
        .into_iter()
    }
    /// All refusals.
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, n)| n).sum()
    }
}

/// Indexes of [`Refusals`]' counters, in its field order.
const REFUSAL_KINDS: usize = 10;

#[cfg_attr(oncelog_no_metrics, allow(dead_code))]
fn refusal_index(e: &AppendError) -> usize {
    match e {
        AppendError::Batch(b) => match b.kind() {
            "corrupt_batch" => 0,
            "batch_too_large" => 2,
            // invalid_record, and compression_failed which no append raises.
            _ => 1,
        },
        AppendError::RecordListTooLarge { .. } => 2,
        // A coordinator's request breaking a rule, as a client's batch would.
        AppendError::InvalidMarker { .. } => 1,
        // Kafka answers INVALID_RECORD.
        AppendError::KeylessRecord { .. } => 1,
        AppendError::Producer(p) => match p {
            ProducerError::InvalidProducerEpoch { .. } => 3,
            ProducerError::OutOfOrderSequence { .. } => 4,
            ProducerError::InvalidTxnState { .. } => 5,
            ProducerError::CoordinatorFenced { .. } => 6,
            ProducerError::TooManyProducers { .. } => 7,
        },
        AppendError::UnexpectedAppendOffset { .. } => 8,
        AppendError::Io(_) | AppendError::ReadOnly { .. } | AppendError::Closed => 9,
        // Counted by what stopped it.
        AppendError::PartiallyWritten { cause, .. } => refusal_index(cause),
    }
}

/// What opening the log cost: from the recovery and producer-load reports, and the clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryMetrics {
    /// Wall time of `Log::open`: recovery, index rebuilds and the producer-state load.
    pub duration: Duration,
    /// Whether the last close was clean (nothing was validated then).
    pub clean_shutdown: bool,
    /// Segments validated batch by batch.
    pub segments_validated: usize,
    /// Bytes of batches validated.
    pub bytes_validated: u64,
    /// Batch headers replayed into the producer state after its snapshot.
    pub batches_replayed: u64,
}

/// A snapshot of a log's metrics, from its open to the moment [`Log::metrics`] was called.
/// Counters only grow.
///
/// [`Log::metrics`]: super::Log::metrics
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogMetrics {
    /// Batches written (client and replicated).
    pub batches_appended: u64,
    /// Records in them.
    pub records_appended: u64,
    /// Bytes of them, headers included: the bytes that go to the segments.
    pub bytes_appended: u64,
    /// Of the batches written, those appended as replicated (`ReplicaLog::append`).
    pub replicated_batches_appended: u64,
    /// Client batches answered as duplicates (nothing written).
    pub duplicates: u64,
    /// Appends refused, by kind.
    pub refusals: Refusals,
    /// Segment rolls.
    pub rolls: u64,
    /// Of the rolls, those whose new segment reused a recycled file
    /// (`LogConfig::recycled_segments`).
    pub recycled_rolls: u64,
    /// Syncs that made appends durable (one per group commit).
    pub flushes: u64,
    /// Syncs that failed (each leaves the log read-only).
    pub flush_failures: u64,
    /// Time of each sync: msync and fdatasync of the data, sealed segments, snapshot.
    pub flush_latency: LatencyHistogram,
    /// Time an append that had to be durable before returning (`FlushPolicy::Always`, or the
    /// one that reached `EveryMessages`) spent in the flush, waiting included: the
    /// acknowledgement latency a producer with `acks=all` sees, less its validation. Under
    /// `Always`, from joining the write group to the answer, the group's write included.
    pub durable_append_wait: LatencyHistogram,
    /// Producer snapshot files written (at roll, by the replay budget, at close).
    pub snapshot_writes: u64,
    /// What opening the log did.
    pub recovery: RecoveryMetrics,
}

impl Log {
    /// A snapshot of the log's counters and histograms, cheap enough to take at any time (a
    /// few hundred relaxed loads; it takes no lock).
    pub fn metrics(&self) -> LogMetrics {
        self.metrics.snapshot()
    }
}

/// The live counters of one log.
#[derive(Debug)]
pub(super) struct Metrics {
    batches_appended: LockedCounter,
    records_appended: LockedCounter,
    bytes_appended: LockedCounter,
    replicated_batches_appended: LockedCounter,
    duplicates: LockedCounter,
    rolls: LockedCounter,
    recycled_rolls: LockedCounter,
    snapshot_writes: Counter,
    refusals: [Counter; REFUSAL_KINDS],
    flushes: Counter,
    flush_failures: Counter,
    flush_latency: Histogram,
    durable_append_wait: Histogram,
    recovery: RecoveryMetrics,
}

impl Metrics {
    pub(super) fn new(
        duration: Duration,
        report: &RecoveryReport,
        producers: &ProducerLoadReport,
    ) -> Metrics {
        Metrics {
            batches_appended: LockedCounter::default(),
            records_appended: LockedCounter::default(),
            bytes_appended: LockedCounter::default(),
            replicated_batches_appended: LockedCounter::default(),
            duplicates: LockedCounter::default(),
            rolls: LockedCounter::default(),
            recycled_rolls: LockedCounter::default(),
            snapshot_writes: Counter::default(),
            refusals: Default::default(),
            flushes: Counter::default(),
            flush_failures: Counter::default(),
            flush_latency: Histogram::default(),
            durable_append_wait: Histogram::default(),
            recovery: RecoveryMetrics {
                duration,
                clean_shutdown: report.clean_shutdown,
                segments_validated: report.segments_validated,
                bytes_validated: report.bytes_validated,
                batches_replayed: producers.batches_replayed,
            },
        }
    }

    /// A batch was written. Caller holds the append lock.
    #[inline]
    pub(super) fn appended(&self, records: u64, bytes: usize) {
        #[cfg(not(oncelog_no_metrics))]
        {
            self.batches_appended.add(1);
            self.records_appended.add(records);
            self.bytes_appended.add(bytes as u64);
        }
        #[cfg(oncelog_no_metrics)]
        let _ = (records, bytes);
    }

    /// A replicated batch was written (besides [`Self::appended`]). Caller holds the append
    /// lock.
    pub(super) fn replicated(&self) {
        self.replicated_batches_appended.add(1);
    }

    /// A client batch was a duplicate. Caller holds the append lock.
    #[inline]
    pub(super) fn duplicate(&self) {
        #[cfg(not(oncelog_no_metrics))]
        self.duplicates.add(1);
    }

    /// An append ended in `result`; counts it if it was refused.
    #[inline]
    pub(super) fn refused_if<T>(&self, result: &Result<T, AppendError>) {
        #[cfg(not(oncelog_no_metrics))]
        if let Err(e) = result {
            self.refusals[refusal_index(e)].add(1);
        }
        #[cfg(oncelog_no_metrics)]
        let _ = result;
    }

    /// The active segment rolled. Caller holds the append lock.
    pub(super) fn rolled(&self) {
        self.rolls.add(1);
    }

    /// A roll reused a recycled file. Caller holds the append lock.
    pub(super) fn recycled(&self) {
        self.recycled_rolls.add(1);
    }

    /// A producer snapshot file was written.
    pub(super) fn snapshot_written(&self) {
        self.snapshot_writes.add(1);
    }

    /// A sync ended after `took`.
    pub(super) fn synced(&self, took: Duration, ok: bool) {
        if ok {
            self.flushes.add(1);
            self.flush_latency.record(took);
        } else {
            self.flush_failures.add(1);
        }
    }

    /// An append waited `took` for its durability.
    pub(super) fn durable_wait(&self, took: Duration) {
        self.durable_append_wait.record(took);
    }

    pub(super) fn snapshot(&self) -> LogMetrics {
        let r: [u64; REFUSAL_KINDS] = std::array::from_fn(|i| self.refusals[i].get());
        LogMetrics {
            batches_appended: self.batches_appended.get(),
            records_appended: self.records_appended.get(),
            bytes_appended: self.bytes_appended.get(),
            replicated_batches_appended: self.replicated_batches_appended.get(),
            duplicates: self.duplicates.get(),
            refusals: Refusals {
                corrupt_batch: r[0],
                invalid_record: r[1],
                too_large: r[2],
                invalid_producer_epoch: r[3],
                out_of_order_sequence: r[4],
                invalid_txn_state: r[5],
                coordinator_fenced: r[6],
                too_many_producers: r[7],
                unexpected_append_offset: r[8],
                log_unavailable: r[9],
            },
            rolls: self.rolls.get(),
            recycled_rolls: self.recycled_rolls.get(),
            flushes: self.flushes.get(),
            flush_failures: self.flush_failures.get(),
            flush_latency: self.flush_latency.snapshot(),
            durable_append_wait: self.durable_append_wait.snapshot(),
            snapshot_writes: self.snapshot_writes.get(),
            recovery: self.recovery,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_each_value_lands_in_its_own() {
        for b in 0..LATENCY_BUCKETS - 1 {
            let (floor, next) = (bucket_floor(b), bucket_floor(b + 1));
            assert!(next > floor, "bucket {b}");
            assert_eq!(bucket_of(floor), b);
            assert_eq!(bucket_of(next - 1), b);
            // Within 25% above 4 ns: the resolution the docs promise.
            if floor >= 4 {
                assert!((next - 1) as f64 <= floor as f64 * 1.25, "bucket {b}");
            }
        }
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_bucket_tops_capped_by_the_maximum() {
        let h = Histogram::default();
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.max(), Duration::from_micros(100));
        assert_eq!(s.mean(), Duration::from_nanos(50_500));
        let p50 = s.quantile(0.5);
        assert!(
            p50 >= Duration::from_micros(50) && p50 <= Duration::from_micros(63),
            "{p50:?}"
        );
        assert_eq!(s.quantile(1.0), Duration::from_micros(100));
        assert_eq!(s.buckets().map(|(_, _, n)| n).sum::<u64>(), 100);
        let empty = Histogram::default().snapshot();
        assert_eq!((empty.count(), empty.quantile(0.99)), (0, Duration::ZERO));
    }

    #[test]
    fn a_counter_written_under_the_lock_adds_up() {
        let c = LockedCounter::default();
        for _ in 0..1000 {
            c.add(3);
        }
        assert_eq!(c.get(), 3000);
    }
}
