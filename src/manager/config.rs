//! The manager's configuration, and the per-partition settings that override its defaults.
//!
//! A partition's own settings are Kafka's topic-level configurations. Kafka keeps them in the
//! cluster's metadata; the manager has no cluster, so those given to
//! [`super::LogManager::create`] are written beside the partition's segments in
//! `oncelog.properties`, with Kafka's names, and read back on every open:
//!
//! ```text
//! # oncelog: this partition's settings over the manager's defaults
//! retention.ms=86400000
//! segment.bytes=67108864
//! cleanup.policy=delete
//! ```
//!
//! A partition without the file (one Kafka wrote) takes [`ManagerConfig::topics`]' entry for
//! its topic, if any, over [`ManagerConfig::log`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::format::TimestampType;
use crate::io::{self, FileSystem, IoError};
use crate::log::metadata_file::{self, BadMetadataFile, Invalid, MetadataFile};
use crate::log::{AppendWrites, CleanupPolicy, FlushPolicy, LogConfig};

/// The file holding a partition's own settings, in its directory.
pub const PARTITION_CONFIG_FILE: &str = "oncelog.properties";

/// One partition's settings over the manager's defaults (Kafka's topic configurations);
/// `None` takes the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionConfig {
    /// `segment.bytes`.
    pub segment_bytes: Option<usize>,
    /// `segment.ms`.
    pub segment_ms: Option<i64>,
    /// `segment.jitter.ms`.
    pub segment_jitter_ms: Option<i64>,
    /// `segment.index.bytes`.
    pub segment_index_bytes: Option<usize>,
    /// `index.interval.bytes`.
    pub index_interval_bytes: Option<usize>,
    /// `max.message.bytes`.
    pub max_message_bytes: Option<usize>,
    /// `message.timestamp.type`.
    pub message_timestamp_type: Option<TimestampType>,
    /// `retention.bytes`: `Some(None)` is Kafka's -1, no limit.
    pub retention_bytes: Option<Option<u64>>,
    /// `retention.ms`: `Some(None)` is Kafka's -1, no limit.
    pub retention_ms: Option<Option<i64>>,
    /// `file.delete.delay.ms`.
    pub file_delete_delay_ms: Option<i64>,
    /// `flush.messages`: the flush job makes the partition durable once this many messages
    /// are unflushed. `Some(None)`: never by count.
    pub flush_messages: Option<Option<u64>>,
    /// `flush.ms`: the flush job makes the partition durable once its oldest unflushed append
    /// is this old. `Some(None)`: never by time.
    pub flush_ms: Option<Option<u64>>,
    /// `cleanup.policy`.
    pub cleanup_policy: Option<CleanupPolicy>,
    /// `remote.storage.enable`: `Some(false)` keeps the tiering job away from the partition
    /// (docs/design.md, "Tiered storage"); unset, a manager with a store tiers it.
    pub remote_storage_enable: Option<bool>,
    /// `local.retention.ms`, over the manager's [`super::Tiering::local_retention`]:
    /// `Some(None)` is Kafka's -1, no limit.
    pub local_retention_ms: Option<Option<i64>>,
    /// `local.retention.bytes`, over the manager's [`super::Tiering::local_retention`]:
    /// `Some(None)` is Kafka's -1, no limit.
    pub local_retention_bytes: Option<Option<u64>>,
}

with_setters!(PartitionConfig {
    with_segment_bytes => Some(segment_bytes): usize,
    with_segment_ms => Some(segment_ms): i64,
    with_segment_jitter_ms => Some(segment_jitter_ms): i64,
    with_segment_index_bytes => Some(segment_index_bytes): usize,
    with_index_interval_bytes => Some(index_interval_bytes): usize,
    with_max_message_bytes => Some(max_message_bytes): usize,
    with_message_timestamp_type => Some(message_timestamp_type): TimestampType,
    with_retention_bytes => Some(retention_bytes): Option<u64>,
    with_retention_ms => Some(retention_ms): Option<i64>,
    with_file_delete_delay_ms => Some(file_delete_delay_ms): i64,
    with_flush_messages => Some(flush_messages): Option<u64>,
    with_flush_ms => Some(flush_ms): Option<u64>,
    with_cleanup_policy => Some(cleanup_policy): CleanupPolicy,
    with_remote_storage_enable => Some(remote_storage_enable): bool,
    with_local_retention_ms => Some(local_retention_ms): Option<i64>,
    with_local_retention_bytes => Some(local_retention_bytes): Option<u64>,
});

/// A partition's settings resolved over the defaults: its log's configuration and what the
/// manager's jobs do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedConfig {
    /// What its [`crate::Log`] is opened with.
    pub log: LogConfig,
    /// `flush.messages`.
    pub flush_messages: Option<u64>,
    /// `flush.ms`.
    pub flush_ms: Option<u64>,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `remote.storage.enable`: whether the tiering job tiers the partition (yes unless the
    /// partition says no).
    pub remote_storage_enable: bool,
    /// `local.retention.ms` of its own; `None` takes the manager's tiering default.
    pub local_retention_ms: Option<Option<i64>>,
    /// `local.retention.bytes` of its own; `None` takes the manager's tiering default.
    pub local_retention_bytes: Option<Option<u64>>,
}

impl PartitionConfig {
    /// These settings over `base`: each one set here replaces its default.
    pub fn over(&self, base: &PartitionConfig) -> PartitionConfig {
        macro_rules! pick {
            ($($f:ident),*) => { PartitionConfig { $($f: self.$f.or(base.$f),)* } };
        }
        pick!(
            segment_bytes,
            segment_ms,
            segment_jitter_ms,
            segment_index_bytes,
            index_interval_bytes,
            max_message_bytes,
            message_timestamp_type,
            retention_bytes,
            retention_ms,
            file_delete_delay_ms,
            flush_messages,
            flush_ms,
            cleanup_policy,
            remote_storage_enable,
            local_retention_ms,
            local_retention_bytes
        )
    }

    /// The partition's configuration: these settings over the manager's defaults. A
    /// compact-only partition is never deleted by time or size.
    pub fn resolve(&self, defaults: &ManagerConfig) -> ResolvedConfig {
        let d = &defaults.log;
        let cleanup_policy = self.cleanup_policy.unwrap_or(d.cleanup_policy);
        let mut log = LogConfig {
            segment_bytes: self.segment_bytes.unwrap_or(d.segment_bytes),
            segment_ms: self.segment_ms.unwrap_or(d.segment_ms),
            segment_jitter_ms: self.segment_jitter_ms.unwrap_or(d.segment_jitter_ms),
            segment_index_bytes: self.segment_index_bytes.unwrap_or(d.segment_index_bytes),
            index_interval_bytes: self.index_interval_bytes.unwrap_or(d.index_interval_bytes),
            max_message_bytes: self.max_message_bytes.unwrap_or(d.max_message_bytes),
            message_timestamp_type: self
                .message_timestamp_type
                .unwrap_or(d.message_timestamp_type),
            retention_bytes: self.retention_bytes.unwrap_or(d.retention_bytes),
            retention_ms: self.retention_ms.unwrap_or(d.retention_ms),
            file_delete_delay_ms: self.file_delete_delay_ms.unwrap_or(d.file_delete_delay_ms),
            cleanup_policy,
            ..d.clone()
        };
        if !cleanup_policy.deletes() {
            log.retention_bytes = None;
            log.retention_ms = None;
        }
        if log.append_writes == AppendWrites::Auto {
            // As for a standalone log: through the file when every append is synced. The
            // descriptor that takes is held only while the partition appends, within
            // `ManagerConfig::write_descriptors` (docs/design.md, "Append writes").
            log.append_writes = if log.flush_policy == FlushPolicy::Always {
                AppendWrites::File
            } else {
                AppendWrites::Map
            };
        }
        ResolvedConfig {
            log,
            flush_messages: self.flush_messages.unwrap_or(defaults.flush_messages),
            flush_ms: self.flush_ms.unwrap_or(defaults.flush_ms),
            cleanup_policy,
            remote_storage_enable: self.remote_storage_enable.unwrap_or(true),
            local_retention_ms: self.local_retention_ms,
            local_retention_bytes: self.local_retention_bytes,
        }
    }

    /// The `oncelog.properties` text of these settings: only those that are set.
    pub fn encode(&self) -> String {
        let mut out = String::from("# oncelog: this partition's settings over the manager's defaults\n");
        let mut put = |key: &str, value: Option<String>| {
            if let Some(v) = value {
                out.push_str(&format!("{key}={v}\n"));
            }
        };
        let limit = |v: Option<Option<u64>>| v.map(|l| l.map_or("-1".to_string(), |n| n.to_string()));
        put("segment.bytes", self.segment_bytes.map(|v| v.to_string()));
        put("segment.ms", self.segment_ms.map(|v| v.to_string()));
        put("segment.jitter.ms", self.segment_jitter_ms.map(|v| v.to_string()));
        put("segment.index.bytes", self.segment_index_bytes.map(|v| v.to_string()));
        put("index.interval.bytes", self.index_interval_bytes.map(|v| v.to_string()));
        put("max.message.bytes", self.max_message_bytes.map(|v| v.to_string()));
        put(
            "message.timestamp.type",
            self.message_timestamp_type.map(|t| match t {
                TimestampType::CreateTime => "CreateTime".to_string(),
                TimestampType::LogAppendTime => "LogAppendTime".to_string(),
            }),
        );
        put("retention.bytes", limit(self.retention_bytes));
        put(
            "retention.ms",
            self.retention_ms
                .map(|l| l.map_or("-1".to_string(), |n| n.to_string())),
        );
        put("file.delete.delay.ms", self.file_delete_delay_ms.map(|v| v.to_string()));
        put("flush.messages", limit(self.flush_messages));
        put("flush.ms", limit(self.flush_ms));
        put("cleanup.policy", self.cleanup_policy.map(|p| p.name().to_string()));
        put("remote.storage.enable", self.remote_storage_enable.map(|v| v.to_string()));
        put(
            "local.retention.ms",
            self.local_retention_ms
                .map(|l| l.map_or("-1".to_string(), |n| n.to_string())),
        );
        put("local.retention.bytes", limit(self.local_retention_bytes));
        out
    }

    /// Parses `oncelog.properties` text; the error names the line.
    pub fn decode(text: &str) -> Result<PartitionConfig, (usize, String)> {
        let mut c = PartitionConfig::default();
        let mut seen = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err((n, format!("expected \"<key>=<value>\", found {line:?}")));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.insert(key.to_string(), n).is_some() {
                return Err((n, format!("{key} is set twice")));
            }
            let bad = |what: &str| (n, format!("{key}: {value:?} is not {what}"));
            let number = |v: &str| v.parse::<i64>().map_err(|_| bad("an integer"));
            let size = |v: &str| v.parse::<usize>().map_err(|_| bad("a size in bytes"));
            let limit = |v: &str| -> Result<Option<u64>, (usize, String)> {
                match v.parse::<i64>() {
                    Ok(-1) => Ok(None),
                    Ok(x) if x >= 0 => Ok(Some(x as u64)),
                    _ => Err(bad("a non-negative integer or -1")),
                }
            };
            match key {
                "segment.bytes" => c.segment_bytes = Some(size(value)?),
                "segment.ms" => c.segment_ms = Some(number(value)?),
                "segment.jitter.ms" => c.segment_jitter_ms = Some(number(value)?),
                "segment.index.bytes" => c.segment_index_bytes = Some(size(value)?),
                "index.interval.bytes" => c.index_interval_bytes = Some(size(value)?),
                "max.message.bytes" => c.max_message_bytes = Some(size(value)?),
                "message.timestamp.type" => {
                    c.message_timestamp_type = Some(match value {
                        "CreateTime" => TimestampType::CreateTime,
                        "LogAppendTime" => TimestampType::LogAppendTime,
                        _ => return Err(bad("CreateTime or LogAppendTime")),
                    })
                }
                "retention.bytes" => c.retention_bytes = Some(limit(value)?),
                "retention.ms" => c.retention_ms = Some(limit(value)?.map(|v| v as i64)),
                "file.delete.delay.ms" => c.file_delete_delay_ms = Some(number(value)?),
                "flush.messages" => c.flush_messages = Some(limit(value)?),
                "flush.ms" => c.flush_ms = Some(limit(value)?),
                "remote.storage.enable" => {
                    c.remote_storage_enable = Some(match value {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("true or false")),
                    })
                }
                "local.retention.ms" => {
                    c.local_retention_ms = Some(limit(value)?.map(|v| v as i64))
                }
                "local.retention.bytes" => c.local_retention_bytes = Some(limit(value)?),
                "cleanup.policy" => {
                    c.cleanup_policy = Some(
                        parse_cleanup_policy(value)
                            .ok_or_else(|| bad("delete, compact or compact,delete"))?,
                    )
                }
                _ => return Err((n, format!("unknown setting {key:?}"))),
            }
        }
        Ok(c)
    }

    /// Reads a partition directory's `oncelog.properties`: `Ok(Ok(None))` without one.
    pub(crate) fn read(
        fs: &dyn FileSystem,
        dir: &Path,
    ) -> Result<Result<Option<PartitionConfig>, BadMetadataFile>, IoError> {
        let path = dir.join(PARTITION_CONFIG_FILE);
        metadata_file::read(fs, &path, MetadataFile::PartitionConfig, |text| {
            PartitionConfig::decode(text).map_err(|(line, reason)| Invalid::at(line, reason))
        })
    }

    pub(crate) fn write(&self, fs: &dyn FileSystem, dir: &Path) -> Result<(), IoError> {
        io::write_file_atomically(fs, &dir.join(PARTITION_CONFIG_FILE), self.encode().as_bytes())
    }
}

/// How often each background job runs; `None` turns it off (it can still be run at once with
/// [`super::LogManager::run_job`]). Defaults are Kafka's where Kafka has the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobIntervals {
    /// Checks `flush.ms` and `flush.messages` of every partition (Kafka's
    /// `log.flush.scheduler.interval.ms`). Default 1 s.
    pub flush: Option<Duration>,
    /// Writes the recovery points and log start offsets of every log dir
    /// (`log.flush.offset.checkpoint.interval.ms`). Default 60 s.
    pub checkpoints: Option<Duration>,
    /// Writes the high watermarks (`replica.high.watermark.checkpoint.interval.ms`).
    /// Default 5 s.
    pub high_watermarks: Option<Duration>,
    /// Applies retention (`log.retention.check.interval.ms`). Default 5 minutes.
    pub retention: Option<Duration>,
    /// Forgets expired producers (`producer.id.expiration.check.interval.ms`). Default 10
    /// minutes.
    pub producer_expiry: Option<Duration>,
    /// Snapshots the producer state of partitions whose replay since the last snapshot is over
    /// [`ManagerConfig::replay_budget_bytes`]. Default 30 s.
    pub snapshots: Option<Duration>,
    /// Removes `.deleted` segment files and deleted partitions' directories once their
    /// `file.delete.delay.ms` is over. Default 1 s.
    pub deletion: Option<Duration>,
    /// Cleans (compacts) the partitions whose `cleanup.policy` includes `compact`, with the
    /// manager's cleaner (Kafka's `log.cleaner.backoff.ms`).
    /// Default 15 s.
    pub cleaning: Option<Duration>,
    /// Uploads sealed segments to the object store and applies local retention, once
    /// [`super::LogManager::set_tiering`] gave one (Kafka's
    /// `remote.log.manager.task.interval.ms`). Default 30 s.
    pub tiering: Option<Duration>,
}

with_setters!(JobIntervals {
    with_flush => flush: Option<Duration>,
    with_checkpoints => checkpoints: Option<Duration>,
    with_high_watermarks => high_watermarks: Option<Duration>,
    with_retention => retention: Option<Duration>,
    with_producer_expiry => producer_expiry: Option<Duration>,
    with_snapshots => snapshots: Option<Duration>,
    with_deletion => deletion: Option<Duration>,
    with_cleaning => cleaning: Option<Duration>,
    with_tiering => tiering: Option<Duration>,
});

impl Default for JobIntervals {
    fn default() -> Self {
        JobIntervals {
            flush: Some(Duration::from_secs(1)),
            checkpoints: Some(Duration::from_secs(60)),
            high_watermarks: Some(Duration::from_secs(5)),
            retention: Some(Duration::from_secs(300)),
            producer_expiry: Some(Duration::from_secs(600)),
            snapshots: Some(Duration::from_secs(30)),
            deletion: Some(Duration::from_secs(1)),
            cleaning: Some(Duration::from_secs(15)),
            tiering: Some(Duration::from_secs(30)),
        }
    }
}

impl JobIntervals {
    /// Every job off: they run only when [`super::LogManager::run_job`] is called.
    pub fn none() -> JobIntervals {
        JobIntervals {
            flush: None,
            checkpoints: None,
            high_watermarks: None,
            retention: None,
            producer_expiry: None,
            snapshots: None,
            deletion: None,
            cleaning: None,
            tiering: None,
        }
    }
}

/// Configuration of a [`super::LogManager`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManagerConfig {
    /// Every partition's defaults.
    pub log: LogConfig,
    /// `flush.messages` by default (`None`: Kafka's default, never by count).
    pub flush_messages: Option<u64>,
    /// `flush.ms` by default (`None`: Kafka's default, never by time).
    pub flush_ms: Option<u64>,
    /// Settings by topic over [`ManagerConfig::log`], for partitions without their own
    /// `oncelog.properties` (those Kafka wrote: Kafka keeps them in its cluster metadata).
    pub topics: BTreeMap<String, PartitionConfig>,
    /// Threads that open (and recover) partitions in parallel (Kafka's
    /// `num.recovery.threads.per.data.dir`, for all dirs together). Default: the machine's
    /// parallelism, and at least 16: a clean open mostly waits for a few small reads per
    /// partition, which a device serves many at once when the page cache is cold (10,000
    /// clean partitions here, caches dropped: 2.1-2.3 s on 2 threads, 1.2 s on 8, 0.99 s on
    /// 16; warm, 0.41-0.43 s on any of them).
    pub recovery_threads: usize,
    /// Each log dir's bound on the threads that issue its partitions' syncs together
    /// ([`LogManager::flush_many`](super::LogManager::flush_many), the flush job); spawned as
    /// the work needs them. Default 16: with 16 syncs in flight this machine's disk served
    /// several times the syncs a second it serves one at a time (docs/benchmarks.md). 0 is
    /// refused.
    pub sync_threads: usize,
    /// How many file descriptors the partitions' active segments may hold open to write
    /// their appends through the file (`pwrite`, [`AppendWrites::File`]: what a partition under
    /// [`FlushPolicy::Always`](crate::FlushPolicy::Always) uses, as a standalone log does).
    /// A partition takes one at its first append and gives it back when the flush job finds
    /// it has appended nothing for a whole interval, so an idle partition holds none; at the
    /// bound, appends are copied into the map instead (correct, and a sync then costs more).
    /// Default: half the process's limit on open files (`RLIMIT_NOFILE`'s soft limit), or
    /// 512 if it cannot be read. 0: every partition copies into its map.
    pub write_descriptors: usize,
    /// The background jobs' intervals.
    pub jobs: JobIntervals,
    /// A partition's producer state is snapshotted by the snapshot job once this many bytes
    /// were appended since its last snapshot, so a crash replays at most this much on open.
    /// Default 16 MiB.
    pub replay_budget_bytes: u64,
    /// The cleaning job's bound on the bytes its cleaner reads per second, over all partitions
    /// (Kafka's `log.cleaner.io.max.bytes.per.second`). Default `None`: no bound. 0 is refused.
    pub cleaner_bytes_per_second: Option<u64>,
    /// The cluster every log dir belongs to: checked against each `meta.properties`, and
    /// written into a new dir's (a new id when `None` and no dir has one).
    pub cluster_id: Option<String>,
    /// This node's id: checked against each `meta.properties`, written into a new dir's (0
    /// when `None` and no dir has one).
    pub node_id: Option<i32>,
}

with_setters!(ManagerConfig {
    with_log => log: LogConfig,
    with_flush_messages => flush_messages: Option<u64>,
    with_flush_ms => flush_ms: Option<u64>,
    with_topics => topics: BTreeMap<String, PartitionConfig>,
    with_recovery_threads => recovery_threads: usize,
    with_sync_threads => sync_threads: usize,
    with_write_descriptors => write_descriptors: usize,
    with_jobs => jobs: JobIntervals,
    with_replay_budget_bytes => replay_budget_bytes: u64,
    with_cleaner_bytes_per_second => cleaner_bytes_per_second: Option<u64>,
    with_cluster_id => cluster_id: Option<String>,
    with_node_id => node_id: Option<i32>,
});

impl ManagerConfig {
    /// These settings with `config` for `topic`'s partitions that have no settings of their
    /// own (an entry of [`ManagerConfig::topics`]).
    #[must_use]
    pub fn with_topic(mut self, topic: impl Into<String>, config: PartitionConfig) -> Self {
        self.topics.insert(topic.into(), config);
        self
    }
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            log: LogConfig::default(),
            flush_messages: None,
            flush_ms: None,
            topics: BTreeMap::new(),
            recovery_threads: std::thread::available_parallelism().map_or(1, |n| n.get()).max(16),
            sync_threads: 16,
            write_descriptors: crate::io::open_files_limit().map_or(512, |n| n / 2),
            jobs: JobIntervals::default(),
            replay_budget_bytes: 16 << 20,
            cleaner_bytes_per_second: None,
            cluster_id: None,
            node_id: None,
        }
    }
}

/// Kafka's spelling of a `cleanup.policy` (`delete`, `compact`, `compact,delete`, in any order).
fn parse_cleanup_policy(text: &str) -> Option<CleanupPolicy> {
    let mut words: Vec<&str> = text.split(',').map(str::trim).collect();
    words.sort_unstable();
    words.dedup();
    match words.as_slice() {
        ["delete"] => Some(CleanupPolicy::Delete),
        ["compact"] => Some(CleanupPolicy::Compact),
        ["compact", "delete"] => Some(CleanupPolicy::CompactDelete),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_with_kafkas_names() {
        let c = PartitionConfig {
            segment_bytes: Some(1 << 20),
            retention_ms: Some(None),
            retention_bytes: Some(Some(5_000)),
            message_timestamp_type: Some(TimestampType::LogAppendTime),
            flush_messages: Some(Some(100)),
            cleanup_policy: Some(CleanupPolicy::CompactDelete),
            remote_storage_enable: Some(false),
            local_retention_ms: Some(Some(60_000)),
            local_retention_bytes: Some(None),
            ..PartitionConfig::default()
        };
        let text = c.encode();
        assert!(text.contains("\nretention.ms=-1\n"), "{text}");
        assert!(text.contains("remote.storage.enable=false\n"), "{text}");
        assert!(text.contains("local.retention.ms=60000\n"), "{text}");
        assert!(text.contains("local.retention.bytes=-1\n"), "{text}");
        assert!(text.contains("cleanup.policy=compact,delete\n"), "{text}");
        assert_eq!(PartitionConfig::decode(&text), Ok(c));
        assert_eq!(
            PartitionConfig::decode("cleanup.policy=delete,compact\n")
                .unwrap()
                .cleanup_policy,
            Some(CleanupPolicy::CompactDelete)
        );
    }

    #[test]
    fn every_malformed_line_is_refused_with_its_number() {
        for (text, line) in [
            ("segment.bytes\n", 1),
            ("# c\nsegment.bytes=big\n", 2),
            ("retention.ms=-2\n", 1),
            ("message.timestamp.type=Now\n", 1),
            ("cleanup.policy=keep\n", 1),
            ("remote.storage.enable=yes\n", 1),
            ("local.retention.ms=-2\n", 1),
            ("local.retention.bytes=x\n", 1),
            ("no.such.setting=1\n", 1),
            ("flush.ms=1\nflush.ms=2\n", 2),
        ] {
            match PartitionConfig::decode(text) {
                Ok(c) => panic!("accepted {text:?} as {c:?}"),
                Err((l, reason)) => assert_eq!(l, line, "{text:?}: {reason}"),
            }
        }
    }

    #[test]
    fn a_partitions_settings_win_over_its_topics_and_the_defaults() {
        let mut defaults = ManagerConfig::default();
        defaults.log.segment_bytes = 1 << 20;
        defaults.flush_ms = Some(1000);
        let topic = PartitionConfig {
            retention_ms: Some(Some(10)),
            segment_bytes: Some(2 << 20),
            ..PartitionConfig::default()
        };
        let own = PartitionConfig {
            segment_bytes: Some(3 << 20),
            ..PartitionConfig::default()
        };
        let r = own.over(&topic).resolve(&defaults);
        assert_eq!(r.log.segment_bytes, 3 << 20);
        assert_eq!(r.log.retention_ms, Some(10));
        assert_eq!(r.flush_ms, Some(1000));
        let compact = PartitionConfig {
            cleanup_policy: Some(CleanupPolicy::Compact),
            ..PartitionConfig::default()
        };
        let r = compact.resolve(&defaults);
        assert_eq!((r.log.retention_ms, r.log.retention_bytes), (None, None));
        // Tiering's: a partition is tiered unless it says no; local retention of its own or
        // none (the manager's tiering default then).
        assert!(r.remote_storage_enable);
        assert_eq!((r.local_retention_ms, r.local_retention_bytes), (None, None));
        let own = PartitionConfig::default()
            .with_remote_storage_enable(false)
            .with_local_retention_bytes(Some(0));
        let r = own.over(&topic).resolve(&defaults);
        assert!(!r.remote_storage_enable);
        assert_eq!(r.local_retention_bytes, Some(Some(0)));
    }
}

