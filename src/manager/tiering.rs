//! Where tiered storage plugs into the manager (docs/design.md, "Tiered storage", "In the
//! manager"): the tiering job first brings each online partition's log and manifest into
//! agreement (`tier::reconcile`), uploads its uploadable segments oldest first under one byte
//! rate shared by the run, then applies local retention, then the partition's retention to its
//! remote segments, then removes orphaned objects; a partition whose run
//! failed is retried after a backoff that doubles with each failure in a row, up to a bound.
//! Every failure is in the job's report and statistics and in the partition's
//! [`TierStatus`].

use std::sync::Arc;
use std::time::Duration;

use super::cleaning::Throttle;
use super::{Inner, JobReport, ResolvedConfig, TopicPartition};
use crate::log::Log;
use crate::tier::{self, keys, LocalRetention, RemoteStore, TierError, Uploaded};

/// How a manager's partitions are tiered ([`super::LogManager::set_tiering`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Tiering {
    /// The object store.
    pub store: Arc<dyn RemoteStore>,
    /// Partition `<topic>-<n>`'s objects live under `<root>/<topic>-<n>`
    /// (docs/format.md, "Tiered storage").
    pub root: String,
    /// The most the job uploads per second, over all partitions (the `.log` bytes counted).
    /// `None`: unbounded.
    pub bytes_per_second: Option<u64>,
    /// Local retention, applied after the uploads of each run (no limit by default: the
    /// local copies stay).
    pub local_retention: LocalRetention,
    /// The wait before a partition whose run failed is tried again; it doubles with each
    /// further failure in a row. Default 1 s.
    pub backoff: Duration,
    /// The longest such wait. Default 5 minutes.
    pub max_backoff: Duration,
    /// How long an object no manifest names is left alone after the job first sees it, unless
    /// a newer manifest generation shows its upload lost (`tier::remove_orphans`). Keep it
    /// well above the longest upload. Default 1 hour.
    pub orphan_grace: Duration,
}

with_setters!(Tiering {
    with_bytes_per_second => bytes_per_second: Option<u64>,
    with_local_retention => local_retention: LocalRetention,
    with_backoff => backoff: Duration,
    with_max_backoff => max_backoff: Duration,
    with_orphan_grace => orphan_grace: Duration,
});

impl Tiering {
    /// Tiering to `store` under the key prefix `root`, with the defaults.
    pub fn new(store: Arc<dyn RemoteStore>, root: impl Into<String>) -> Tiering {
        Tiering {
            store,
            root: root.into(),
            bytes_per_second: None,
            local_retention: LocalRetention::default(),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(3600),
        }
    }

    /// The key prefix of a partition's objects.
    pub fn partition_prefix(&self, tp: &TopicPartition) -> String {
        format!("{}/{}", self.root, tp.dir_name())
    }
}

/// A partition's tiering as the tiering job last left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierStatus {
    /// Where the remote segments end, as the last run found or made them.
    pub remote_end: Option<i64>,
    /// The partition's log start offset across tiers as the last run left it
    /// (`tier::log_start_offset`).
    pub log_start_offset: Option<i64>,
    /// Segments this manager uploaded since it opened.
    pub segments_uploaded: u64,
    /// Bytes of those uploads (all six objects of each).
    pub bytes_uploaded: u64,
    /// Local copies local retention deleted since the manager opened.
    pub local_segments_deleted: u64,
    /// Remote segments total retention (`retention_ms`, `retention_bytes`) removed from the
    /// store since the manager opened.
    pub remote_segments_removed: u64,
    /// Remote segments dropped since the manager opened because the local log no longer held
    /// their bytes (it was truncated below the remote end: `tier::reconcile`).
    pub remote_segments_dropped: u64,
    /// Orphaned objects (named by no manifest) deleted since the manager opened.
    pub orphans_removed: u64,
    /// Orphaned objects seen and not deleted yet (within their grace).
    pub orphans_waiting: u64,
    /// Runs in a row that failed (0 after a run that did not).
    pub consecutive_failures: u32,
    /// The last failure: the error's kind and message.
    pub last_failure: Option<String>,
    /// The clock time (ms) before which the job does not try again, after a failure.
    pub retry_at_ms: Option<i64>,
    /// The orphans seen, for the grace of the next runs.
    pub(crate) orphans: tier::OrphanSightings,
    /// The local segments found to hold their remote bytes, not read again while unchanged.
    pub(crate) verified: tier::Verified,
}

/// The wait before the next try after `failures` failures in a row.
pub(crate) fn backoff(t: &Tiering, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    t.backoff
        .saturating_mul(1u32 << doublings)
        .min(t.max_backoff)
}

/// What one run did to one partition.
#[derive(Debug, Default)]
struct Done {
    uploaded: u64,
    bytes: u64,
    deleted: u64,
    removed: u64,
    dropped: u64,
    orphans_removed: u64,
    remote_end: Option<i64>,
    log_start_offset: Option<i64>,
}

/// One run of the tiering job.
pub(crate) fn run(inner: &Inner) -> JobReport {
    let mut report = JobReport::default();
    let Some(t) = inner.tiering.read().clone() else {
        return report;
    };
    let throttle = Throttle::new(t.bytes_per_second, &inner.closed);
    for slot in inner.slots() {
        let Some((log, config)) = slot.online() else {
            continue;
        };
        // Compacted partitions are never tiered (their segments are rewritten), nor those
        // whose `remote.storage.enable` is false.
        if config.cleanup_policy.compacts() || !config.remote_storage_enable {
            continue;
        }
        if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let now = inner.now_ms();
        let waiting = inner
            .tier_status
            .lock()
            .get(&slot.tp)
            .and_then(|s| s.retry_at_ms)
            .is_some_and(|at| now < at);
        if waiting {
            continue;
        }
        report.visited += 1;
        let limits = local_retention(&t, config);
        let (mut orphans, mut verified) = inner
            .tier_status
            .lock()
            .get(&slot.tp)
            .map(|s| (s.orphans.clone(), s.verified.clone()))
            .unwrap_or_default();
        let prefix = t.partition_prefix(&slot.tp);
        let run = Run {
            t: &t,
            limits,
            prefix: &prefix,
            throttle: &throttle,
            now_ms: now,
        };
        let outcome = tier_partition(log, &run, &mut orphans, &mut verified);
        let mut statuses = inner.tier_status.lock();
        let status = statuses.entry(slot.tp.clone()).or_default();
        status.orphans_waiting = orphans.len() as u64;
        status.orphans = orphans;
        status.verified = verified;
        match outcome {
            Ok(done) => {
                status.remote_end = done.remote_end.or(status.remote_end);
                status.log_start_offset = done.log_start_offset.or(status.log_start_offset);
                status.segments_uploaded += done.uploaded;
                status.bytes_uploaded += done.bytes;
                status.local_segments_deleted += done.deleted;
                status.remote_segments_removed += done.removed;
                status.remote_segments_dropped += done.dropped;
                status.orphans_removed += done.orphans_removed;
                status.consecutive_failures = 0;
                status.retry_at_ms = None;
                report.acted += (done.uploaded
                    + done.deleted
                    + done.removed
                    + done.dropped
                    + done.orphans_removed) as usize;
            }
            Err(_) if log.is_closed() => {}
            Err(e) => {
                status.consecutive_failures = status.consecutive_failures.saturating_add(1);
                let wait = backoff(&t, status.consecutive_failures);
                status.retry_at_ms = Some(now.saturating_add(wait.as_millis() as i64));
                status.last_failure = Some(format!("{}: {e}", e.kind()));
                report.failures.push(format!("{}: {e}", slot.tp));
            }
        }
    }
    report
}

/// One run's settings for one partition.
struct Run<'a> {
    t: &'a Tiering,
    limits: LocalRetention,
    prefix: &'a str,
    throttle: &'a Throttle<'a>,
    now_ms: i64,
}

/// Brings the log and the manifest into agreement, uploads the partition's uploadable segments
/// from where its remote segments end, then applies local retention, then the partition's own
/// retention to its remote segments, then removes orphaned objects.
fn tier_partition(
    log: &Log,
    run: &Run<'_>,
    orphans: &mut tier::OrphanSightings,
    verified: &mut tier::Verified,
) -> Result<Done, TierError> {
    let (store, prefix, now_ms) = (run.t.store.as_ref(), run.prefix, run.now_ms);
    // Before any upload: a truncated log's remote segments go first, so no offset is ever
    // uploaded twice with different bytes, and a DeleteRecords a crash cut is finished.
    let reconciled = tier::reconcile_with(log, store, prefix, verified)?;
    let mut done = Done {
        remote_end: tier::read_manifest(store, prefix)?.and_then(|m| m.remote_end()),
        dropped: reconciled.dropped.len() as u64,
        ..Done::default()
    };
    let sizes: std::collections::BTreeMap<i64, u64> = log
        .sealed_extents()
        .into_iter()
        .map(|(base, _, size)| (base, size))
        .collect();
    let mut paid_out = false;
    for (base, end) in tier::uploadable_segments(log) {
        if done.remote_end.is_some_and(|r| end <= r) {
            continue;
        }
        if !run.throttle.pay(sizes.get(&base).copied().unwrap_or(0)) {
            paid_out = true;
            break;
        }
        if let Uploaded::Uploaded { segment, .. } = tier::upload_segment(log, store, prefix, base)? {
            done.uploaded += 1;
            done.bytes += segment.bytes();
            done.remote_end = Some(segment.end_offset);
        }
    }
    if paid_out {
        return Ok(done);
    }
    let limits = run.limits;
    if limits.local_retention_bytes.is_some() || limits.local_retention_ms.is_some() {
        let r = tier::enforce_local_retention(log, store, prefix, limits, now_ms)?;
        done.deleted = r.deleted.len() as u64;
    }
    done.removed = tier::enforce_remote_retention(log, store, prefix, now_ms)?
        .removed
        .len() as u64;
    let grace = i64::try_from(run.t.orphan_grace.as_millis()).unwrap_or(i64::MAX);
    done.orphans_removed = tier::remove_orphans(store, prefix, orphans, now_ms, grace)?.deleted as u64;
    done.log_start_offset = Some(tier::log_start_offset(log, store, prefix)?);
    Ok(done)
}

/// A partition's local retention: its own `local.retention.ms` / `.bytes` where it sets them,
/// else the manager's [`Tiering::local_retention`].
fn local_retention(t: &Tiering, config: &ResolvedConfig) -> LocalRetention {
    let d = t.local_retention;
    LocalRetention::new(
        config.local_retention_ms.unwrap_or(d.local_retention_ms),
        config.local_retention_bytes.unwrap_or(d.local_retention_bytes),
    )
}

/// Why a tiering root cannot be used, or `None`.
pub(crate) fn check_root(root: &str) -> Option<&'static str> {
    keys::check_partition_prefix(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct NoStore;
    impl RemoteStore for NoStore {
        fn put(&self, _: &str, _: &[u8]) -> Result<(), tier::RemoteError> {
            unreachable!()
        }
        fn put_if_absent(&self, _: &str, _: &[u8]) -> Result<tier::Created, tier::RemoteError> {
            unreachable!()
        }
        fn get(&self, _: &str) -> Result<Vec<u8>, tier::RemoteError> {
            unreachable!()
        }
        fn get_range(
            &self,
            _: &str,
            _: std::ops::Range<u64>,
        ) -> Result<Vec<u8>, tier::RemoteError> {
            unreachable!()
        }
        fn list(&self, _: &str) -> Result<Vec<tier::RemoteObject>, tier::RemoteError> {
            unreachable!()
        }
        fn delete(&self, _: &str) -> Result<(), tier::RemoteError> {
            unreachable!()
        }
    }

    #[test]
    fn the_backoff_doubles_with_each_failure_up_to_its_bound() {
        let t = Tiering::new(Arc::new(NoStore), "r")
            .with_backoff(Duration::from_millis(500))
            .with_max_backoff(Duration::from_secs(3));
        let waits: Vec<u128> = (1..=6).map(|f| backoff(&t, f).as_millis()).collect();
        assert_eq!(waits, vec![500, 1000, 2000, 3000, 3000, 3000]);
        assert_eq!(backoff(&t, u32::MAX), Duration::from_secs(3));
        assert_eq!(
            t.partition_prefix(&TopicPartition::new("orders", 3)),
            "r/orders-3"
        );
    }
}
