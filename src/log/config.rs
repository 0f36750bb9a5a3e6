//! The configuration of one log, with Kafka's defaults (docs/design.md, "Append"; docs/format.md).

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::format::TimestampType;
use crate::io::{self, FileSystem};
use crate::producer::{ProducerStateConfig, SnapshotVersion};

/// When appends are made durable without an explicit [`super::Log::flush`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// Only on `flush` and `close` (Kafka's default: `flush.messages` = Long.MAX).
    Manual,
    /// Every append is durable before it returns. Concurrent appenders share one `fdatasync`
    /// (group commit): the first of them to find no leader writes every queued batch, in queue
    /// order, syncs once and answers the others (the write group, docs/design.md).
    Always,
    /// After this many appended messages (records) since the last flush (`flush.messages`).
    EveryMessages(u64),
}

/// How the active segment's `.log` is allocated ahead of its writer, one
/// [`LogConfig::allocation_step_bytes`] at a time (docs/design.md, "Segment space").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preallocation {
    /// [`Preallocation::Zeroed`] under [`FlushPolicy::Always`], [`Preallocation::Reserved`]
    /// otherwise. The default.
    #[default]
    Auto,
    /// Space reserved with `fallocate`. The cheapest to allocate; but the file system marks
    /// the blocks unwritten, and the first sync of each range converts them, a metadata
    /// write on top of the data: the choice when syncs are rare.
    Reserved,
    /// Zeros written and synced over each step by a background thread before the writer gets
    /// there, so a sync of appended data writes only the data (docs/performance.md: 1.5x
    /// faster syncs of 10 KB batches on ext4). Every byte is written twice, once off the
    /// append path: the choice when appends are made durable one by one or in small groups.
    Zeroed,
}

/// How appends put their bytes into the active segment's `.log` (docs/design.md, "Append
/// writes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AppendWrites {
    /// [`AppendWrites::File`] under [`FlushPolicy::Always`], [`AppendWrites::Map`] otherwise.
    /// The default.
    #[default]
    Auto,
    /// Copied into the segment's memory map: the fastest append, and the choice when syncs are
    /// rare. A sync then costs more: the kernel write-protects every page it writes back (a
    /// walk of the page tables and a TLB flush on every core the process runs on), and the
    /// next append into the same page takes a fault to make it writable again.
    Map,
    /// Written through the file (`pwrite`), into the same page cache the map shows readers: a
    /// system call per batch, and syncs with no page-table work (docs/performance.md: group
    /// commit from 16 threads 1.4x to 1.9x the records a second). The choice when appends are
    /// made durable one by one or in small groups, as `acks=all` needs, whether by
    /// [`FlushPolicy::Always`] or by the caller's [`super::Log::flush_to`]. The active
    /// segment's file stays open: one file descriptor per log; for a partition of a
    /// [`crate::LogManager`] only while it appends, within
    /// [`crate::ManagerConfig::write_descriptors`] (past it, batches are copied into the map).
    File,
}

/// Who moves a log's high watermark: the offset below which records are committed, which
/// consumers may read, retention and DeleteRecords may remove, and (with transactions) the last
/// stable offset is bounded by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HighWatermarkPolicy {
    /// It is the durable end (the recovery point): a log used alone commits what it has made
    /// durable. The default.
    #[default]
    DurableEnd,
    /// The caller sets it ([`super::ReplicaLog::set_high_watermark`]), as a replication layer does once
    /// enough replicas have an offset. Kept in the checkpoint; never above the log end.
    SetByCaller,
}

/// How recovery treats damaged bytes it finds after an unclean shutdown (docs/design.md, "Recovery
/// on open"). The recovery point divides the log: below it every batch was durable; at and above it
/// nothing was promised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// Damage at or after the recovery point (a torn or lost tail of unflushed writes) is cut,
    /// with every later segment, and reported; damage to durable data is an error naming the
    /// file and byte position.
    #[default]
    TolerateTailCorruption,
    /// Cut at the first bad batch anywhere and drop everything after it, reported (Kafka's
    /// behaviour).
    TolerateAnyCorruption,
    /// Any bad byte is an error; nothing is cut.
    AbsoluteConsistency,
}

impl RecoveryMode {
    /// The mode's name on the command line (`oncelog recover --mode`) and in messages.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryMode::TolerateTailCorruption => "tolerate-tail",
            RecoveryMode::TolerateAnyCorruption => "tolerate-any",
            RecoveryMode::AbsoluteConsistency => "absolute",
        }
    }
}

/// The most [`LogConfig::recycled_segments`] may be.
const MAX_RECYCLED_SEGMENTS: usize = 1024;

/// Configuration of one partition log. Defaults are Kafka's.
///
/// Built with [`LogConfig::builder`]: one setter per field below, then
/// [`LogConfigBuilder::build`], which refuses a value out of its range with a [`ConfigError`]
/// naming the field. [`LogConfig::into_builder`] changes some settings of an existing
/// configuration. The type is `#[non_exhaustive]` so that a new setting is not a breaking
/// change: outside this crate it has no struct literal; its fields are public to read (and to
/// set, in which case [`super::Log::open`] checks them with [`LogConfig::validate`]).
///
/// ```
/// use oncelog::{CleanupPolicy, CompactionConfig, LogConfig};
///
/// let compacted = LogConfig::builder()
///     .segment_bytes(64 << 20)
///     .retention_ms(None)
///     .cleanup_policy(CleanupPolicy::Compact)
///     .compaction(CompactionConfig::default().with_min_cleanable_dirty_ratio(0.1))
///     .build()?;
/// let smaller = compacted.clone().into_builder().segment_bytes(16 << 20).build()?;
/// assert_eq!(smaller.cleanup_policy, CleanupPolicy::Compact);
/// # Ok::<(), oncelog::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogConfig {
    /// `segment.bytes`: a segment rolls before it would grow past this. Default 1 GiB;
    /// 14 ..= i32::MAX.
    pub segment_bytes: usize,
    /// The active segment's `.log` grows by at most this much at a time, ahead of its writer
    /// and off the append path, instead of being allocated to `segment_bytes` at once. The
    /// steps start small (256 KiB, `segment::space::FIRST_STEP`) and double with the file up
    /// to this, so a partition with one record holds about 256 KiB of disk and a busy one
    /// grows by whole steps. Default 32 MiB; 4096 ..= i32::MAX.
    pub allocation_step_bytes: usize,
    /// How each step is allocated: reserved, or zeroed for cheaper syncs.
    pub preallocation: Preallocation,
    /// How appends write into the active segment: through its map or its file.
    pub append_writes: AppendWrites,
    /// How many `.log` files of segments that retention deleted the log keeps (as
    /// `<base>.log.recycle`, once `file_delete_delay_ms` is over) to reuse as the file of a
    /// later active segment instead of creating one: a recycled file's blocks are already
    /// written, so appends into it change no file-system metadata and need no zeros, and a
    /// sync of them writes only data (docs/design.md "Segment space"). Each costs up to
    /// `segment_bytes` of disk held in reserve. Only files retention removed are kept, never
    /// those of a truncation or a compaction; a full truncation empties the pool first, and
    /// every open removes it. A crash leaves the old batches of a recycled file after the
    /// active segment's end, which recovery cuts: so it cannot be combined with
    /// [`RecoveryMode::AbsoluteConsistency`]. Default 0 (off); at most 1024.
    pub recycled_segments: usize,
    /// Sealed segments are mapped only while they are read, and hold no file descriptor: at
    /// most this many stay mapped once read; the one read longest ago is unmapped when a read
    /// maps one more (its readers keep the bytes they were handed). 0 unmaps each one after
    /// its read. The active segment is always mapped. Default 16.
    pub max_mapped_segments: usize,
    /// `segment.ms`: roll when the incoming batch's timestamp is this far past the segment's
    /// first batch. Default 7 days.
    pub segment_ms: i64,
    /// `segment.jitter.ms`: a random amount up to this is taken off `segment_ms`, so logs
    /// created together do not roll together. Default 0.
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`: the most each index file grows to (an index entry more rolls the
    /// segment); the files grow with the log. Default 10 MiB.
    pub segment_index_bytes: usize,
    /// `index.interval.bytes`: bytes between offset-index entries. Default 4096.
    pub index_interval_bytes: usize,
    /// `max.message.bytes`: the largest batch accepted from a client. Default 1,048,588.
    pub max_message_bytes: usize,
    /// The most bytes a compressed client batch's records may decompress to; a batch beyond it
    /// is refused ([`crate::format::BatchError::DecompressedTooLarge`], `batch_too_large`, the
    /// MESSAGE_TOO_LARGE on which Kafka's producer splits a batch and retries). Validation holds
    /// this much in memory per concurrent append, so it is what bounds a decompression bomb.
    ///
    /// Default 64 MiB: 64 × Kafka's default `max.message.bytes`. Kafka's broker has no such
    /// bound; real producers stay far below it (librdkafka caps a batch at about 1 MB before
    /// compression; the Java producer fills `batch.size`, 16 KiB by default, of *compressed*
    /// bytes, and JSON or log lines compress 5-20×), so only data compressible beyond 64× at
    /// the size limit, in practice a bomb, meets it. Must be in `max_message_bytes ..=
    /// 2147483647`: at least one batch's worth, so no batch accepted uncompressed is refused
    /// once compressed (raise it with `max_message_bytes`), and within the int32 sizes every
    /// Kafka client decompresses into.
    pub max_decompressed_bytes: usize,
    /// `message.timestamp.type`: CreateTime keeps the producer's timestamps; LogAppendTime
    /// stamps each batch with the append wall clock.
    pub message_timestamp_type: TimestampType,
    /// Who moves the high watermark: the durable end (the default, for a log used alone), or
    /// the caller's replication layer through [`super::ReplicaLog::set_high_watermark`].
    pub high_watermark: HighWatermarkPolicy,
    /// `retention.bytes`: [`super::Maintenance::enforce_retention`] deletes the oldest segments while
    /// the log is larger than this. `None` (Kafka's -1, the default): no size limit.
    pub retention_bytes: Option<u64>,
    /// `retention.ms`: [`super::Maintenance::enforce_retention`] deletes segments whose newest
    /// timestamp is older than this. Default 7 days; `None` (Kafka's -1): no time limit.
    pub retention_ms: Option<i64>,
    /// `file.delete.delay.ms`: how long a segment removed by truncation or retention stays on
    /// disk under `.deleted` before it is deleted (Kafka's delay for readers still using it;
    /// oncelog's own readers hold the map, so it is for outside tools). Default 60 s.
    pub file_delete_delay_ms: i64,
    /// When appends become durable. Default [`FlushPolicy::Manual`].
    pub flush_policy: FlushPolicy,
    /// What recovery may cut when it finds damage.
    pub recovery_mode: RecoveryMode,
    /// Validate every batch of every segment on open, whatever the checkpoint vouches for
    /// (`oncelog recover --deep`). By default a segment the checkpoint vouches for is held to
    /// its record (size and offsets) without being read, so opening after a clean close costs
    /// no data reads; a deep open reads the whole log. Default false.
    pub deep_recovery: bool,
    /// The idempotent-producer table: dedup window (default 5 batches), `max_producers` and its
    /// policy, expiry by append wall clock (default one day).
    pub producer_state: ProducerStateConfig,
    /// Version of the producer snapshots written: 3 (oncelog's, the whole dedup window and the
    /// offset it was taken at; the default), 2 (the same without the offset) or 1 (Kafka's, only
    /// the newest batch per producer). All are always readable.
    pub snapshot_version: SnapshotVersion,
    /// At most this many bytes of the active segment are kept faulted in ahead of the writer
    /// by a background thread, so appends copy into resident pages: the lookahead is what the
    /// writer appends in 4 ms or has written, from 128 KiB up to this (docs/design.md,
    /// "Append", step 5). 0 turns it off. Default 8 MiB.
    pub prefault_bytes: usize,
    /// A producer snapshot is also taken once this many bytes were appended since the last
    /// one, so a restart replays at most this much of the log. Default 64 MiB.
    pub snapshot_interval_bytes: u64,
    /// `cleanup.policy`: whether old data goes by retention ([`CleanupPolicy::Delete`], the
    /// default), by key compaction ([`super::Maintenance::compact`]), or both. On a log that compacts,
    /// an append holding a record without a key is refused, as Kafka refuses it.
    pub cleanup_policy: CleanupPolicy,
    /// The compaction knobs (`min.cleanable.dirty.ratio`, the compaction lags,
    /// `delete.retention.ms`, the key map's memory).
    pub compaction: CompactionConfig,
}

/// Kafka's `cleanup.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// `delete`: retention by size and time (the default).
    #[default]
    Delete,
    /// `compact`: the latest value of each key is kept; retention's size and time rules are off.
    Compact,
    /// `compact,delete`: both.
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether the policy contains `compact`.
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
    /// Whether the policy contains `delete`.
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }
    /// Kafka's spelling: `delete`, `compact`, `compact,delete`.
    pub fn name(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
}

/// The log cleaner's settings, with Kafka's names and defaults.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CompactionConfig {
    /// `min.cleanable.dirty.ratio`: compaction is due when the dirty part is at least this
    /// share of the cleanable log. Default 0.5; 0 ..= 1.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment whose newest timestamp is younger than this is not
    /// cleaned. Default 0.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty segment is older than this is due
    /// whatever its dirty ratio. Default `i64::MAX` (off).
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone, or a transaction marker with no data left,
    /// stays after the cleaner stamped its batch's delete horizon. Default one day.
    pub delete_retention_ms: i64,
    /// Memory the cleaner's key → offset map may use (Kafka's `log.cleaner.dedupe.buffer.size`,
    /// per cleaning pass): a dirty range with more keys is cleaned in several passes. Default
    /// 128 MiB; at least 1 KiB.
    pub key_map_bytes: usize,
}

with_setters!(CompactionConfig {
    with_min_cleanable_dirty_ratio => min_cleanable_dirty_ratio: f64,
    with_min_compaction_lag_ms => min_compaction_lag_ms: i64,
    with_max_compaction_lag_ms => max_compaction_lag_ms: i64,
    with_delete_retention_ms => delete_retention_ms: i64,
    with_key_map_bytes => key_map_bytes: usize,
});

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            key_map_bytes: 128 << 20,
        }
    }
}

impl PartialEq for CompactionConfig {
    fn eq(&self, o: &Self) -> bool {
        self.min_cleanable_dirty_ratio.to_bits() == o.min_cleanable_dirty_ratio.to_bits()
            && self.min_compaction_lag_ms == o.min_compaction_lag_ms
            && self.max_compaction_lag_ms == o.max_compaction_lag_ms
            && self.delete_retention_ms == o.delete_retention_ms
            && self.key_map_bytes == o.key_map_bytes
    }
}
impl Eq for CompactionConfig {}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            allocation_step_bytes: 32 << 20,
            preallocation: Preallocation::Auto,
            append_writes: AppendWrites::Auto,
            recycled_segments: 0,
            max_mapped_segments: 16,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            max_decompressed_bytes: crate::format::DEFAULT_MAX_DECOMPRESSED_BYTES,
            message_timestamp_type: TimestampType::CreateTime,
            high_watermark: HighWatermarkPolicy::DurableEnd,
            retention_bytes: None,
            retention_ms: Some(7 * 24 * 60 * 60 * 1000),
            file_delete_delay_ms: 60_000,
            flush_policy: FlushPolicy::Manual,
            recovery_mode: RecoveryMode::TolerateTailCorruption,
            deep_recovery: false,
            producer_state: ProducerStateConfig::default(),
            snapshot_version: SnapshotVersion::V3,
            snapshot_interval_bytes: 64 << 20,
            prefault_bytes: 8 << 20,
            cleanup_policy: CleanupPolicy::Delete,
            compaction: CompactionConfig::default(),
        }
    }
}

/// A configuration value outside its valid range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} = {value}: {rule}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The setting, named as its [`LogConfig`] field (`producer_state` for any of its fields).
    pub field: &'static str,
    /// The value it was given.
    pub value: String,
    /// The rule it breaks.
    pub rule: String,
}

impl ConfigError {
    /// `field` = `value` outside `min ..= max` (`max` = `i128::MAX`: no upper bound).
    fn out_of_range(field: &'static str, value: i128, min: i128, max: i128, why: &str) -> Self {
        let range = match (min, max) {
            (0, i128::MAX) => "must not be negative".to_string(),
            (min, i128::MAX) => format!("must be at least {min}"),
            (min, max) => format!("must be in {min} ..= {max}"),
        };
        let rule = match why {
            "" => range,
            why => format!("{range} ({why})"),
        };
        ConfigError {
            field,
            value: value.to_string(),
            rule,
        }
    }

    /// A stable snake_case name for the kind of error; [`ConfigError::field`] says which
    /// setting.
    pub fn kind(&self) -> &'static str {
        "invalid_config"
    }
}

impl LogConfig {
    /// Whether the active segment's steps are zeroed ([`Preallocation::Auto`] resolved).
    pub fn zeroes_ahead(&self) -> bool {
        match self.preallocation {
            Preallocation::Auto => self.flush_policy == FlushPolicy::Always,
            Preallocation::Reserved => false,
            Preallocation::Zeroed => true,
        }
    }

    /// Whether appends write through the file ([`AppendWrites::Auto`] resolved).
    pub fn writes_through_file(&self) -> bool {
        match self.append_writes {
            AppendWrites::Auto => self.flush_policy == FlushPolicy::Always,
            AppendWrites::Map => false,
            AppendWrites::File => true,
        }
    }

    /// Checks every value against its valid range: the same checks as [`LogConfig::builder`]'s
    /// `build`, for a configuration whose fields were set directly. [`super::Log::open`] calls
    /// it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const INT32: i128 = i32::MAX as i128;
        const INT64: i128 = i64::MAX as i128;
        const NO_MAX: i128 = i128::MAX;
        const HEADER: i128 = crate::format::HEADER_SIZE as i128;
        const RECYCLED: i128 = MAX_RECYCLED_SEGMENTS as i128;
        let (us, ms) = (|v: usize| Some(v as i128), |v: i64| Some(i128::from(v)));
        let c = &self.compaction;
        let max_message = self.max_message_bytes as i128;
        let min_lag = c.min_compaction_lag_ms.max(1).into();
        // One row per numeric setting: its value must be in `min ..= max`; `None` (an optional
        // setting left unset) is not checked. `why` is said after the range.
        #[rustfmt::skip]
        let ranges: [(&'static str, Option<i128>, i128, i128, &str); 17] = [
            // setting                  value                                   min          max       why
            ("segment_bytes",           us(self.segment_bytes),                 14,          INT32,    ""),
            ("allocation_step_bytes",   us(self.allocation_step_bytes),         4096,        INT32,    ""),
            ("recycled_segments",       us(self.recycled_segments),             0,           RECYCLED, ""),
            ("segment_ms",              ms(self.segment_ms),                    1,           NO_MAX,   ""),
            ("segment_jitter_ms",       ms(self.segment_jitter_ms),             0,           NO_MAX,   ""),
            ("segment_index_bytes",     us(self.segment_index_bytes),           24,          INT32,    "room for two time-index entries"),
            ("index_interval_bytes",    us(self.index_interval_bytes),          0,           INT32,    "an int32"),
            ("max_message_bytes",       us(self.max_message_bytes),             HEADER,      NO_MAX,   "one batch header"),
            ("max_decompressed_bytes",  us(self.max_decompressed_bytes),        max_message, INT32,    "max_message_bytes ..= int32"),
            ("retention_bytes",         self.retention_bytes.map(i128::from),   0,           INT64,    "an int64"),
            ("retention_ms",            self.retention_ms.map(i128::from),      0,           NO_MAX,   "None turns it off"),
            ("file_delete_delay_ms",    ms(self.file_delete_delay_ms),          0,           NO_MAX,   ""),
            ("snapshot_interval_bytes", Some(self.snapshot_interval_bytes.into()), 1,        NO_MAX,   ""),
            ("min_compaction_lag_ms",   ms(c.min_compaction_lag_ms),            0,           NO_MAX,   ""),
            ("max_compaction_lag_ms",   ms(c.max_compaction_lag_ms),            min_lag,     NO_MAX,   "at least 1 and min_compaction_lag_ms"),
            ("delete_retention_ms",     ms(c.delete_retention_ms),              0,           NO_MAX,   ""),
            ("key_map_bytes",           us(c.key_map_bytes),                    1024,        NO_MAX,   ""),
        ];
        for (field, value, min, max, why) in ranges {
            if let Some(value) = value.filter(|v| !(min..=max).contains(v)) {
                return Err(ConfigError::out_of_range(field, value, min, max, why));
            }
        }
        // The rules that are not a range.
        let bad = |field, value: &dyn fmt::Display, rule: &str| ConfigError {
            field,
            value: value.to_string(),
            rule: rule.to_string(),
        };
        if self.recycled_segments > 0 && self.recovery_mode == RecoveryMode::AbsoluteConsistency {
            return Err(bad(
                "recycled_segments",
                &self.recycled_segments,
                "must be 0 under recovery_mode AbsoluteConsistency (a crash leaves a recycled \
                 file's old bytes after the end, which recovery must cut)",
            ));
        }
        if let Err(e) = self.producer_state.validate() {
            return Err(bad("producer_state", &format!("{:?}", self.producer_state), &e.to_string()));
        }
        if !(0.0..=1.0).contains(&c.min_cleanable_dirty_ratio) {
            return Err(bad(
                "min_cleanable_dirty_ratio",
                &c.min_cleanable_dirty_ratio,
                "must be in 0 ..= 1",
            ));
        }
        if let FlushPolicy::EveryMessages(0) = self.flush_policy {
            return Err(bad(
                "flush_policy",
                &"EveryMessages(0)",
                "the interval must be at least 1",
            ));
        }
        Ok(())
    }
}

impl LogConfig {
    /// A builder from the defaults (Kafka's), with one setter per setting; its
    /// [`LogConfigBuilder::build`] checks the ranges.
    pub fn builder() -> LogConfigBuilder {
        LogConfig::default().into_builder()
    }

    /// A builder from this configuration, to change some of its settings.
    pub fn into_builder(self) -> LogConfigBuilder {
        LogConfigBuilder { config: self }
    }
}

/// Builds a [`LogConfig`]: one setter per setting, named after its field (where each is
/// documented), and [`LogConfigBuilder::build`], which checks every value as
/// [`LogConfig::validate`] does.
///
/// ```
/// use oncelog::{FlushPolicy, LogConfig};
///
/// let config = LogConfig::builder()
///     .segment_bytes(64 << 20)
///     .flush_policy(FlushPolicy::Always)
///     .retention_ms(None)
///     .build()?;
/// assert_eq!(config.segment_bytes, 64 << 20);
///
/// // A value out of range is refused, naming its field.
/// let refused = LogConfig::builder().segment_bytes(13).build().unwrap_err();
/// assert_eq!(refused.field, "segment_bytes");
/// # Ok::<(), oncelog::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LogConfigBuilder {
    config: LogConfig,
}

/// Writes one setter per [`LogConfig`] field.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {$(
        #[doc = concat!("Sets [`LogConfig::", stringify!($field), "`].")]
        pub fn $field(mut self, value: $ty) -> Self {
            self.config.$field = value;
            self
        }
    )*};
}

impl LogConfigBuilder {
    setters! {
        segment_bytes: usize,
        allocation_step_bytes: usize,
        preallocation: Preallocation,
        append_writes: AppendWrites,
        recycled_segments: usize,
        max_mapped_segments: usize,
        segment_ms: i64,
        segment_jitter_ms: i64,
        segment_index_bytes: usize,
        index_interval_bytes: usize,
        max_message_bytes: usize,
        max_decompressed_bytes: usize,
        message_timestamp_type: TimestampType,
        high_watermark: HighWatermarkPolicy,
        retention_bytes: Option<u64>,
        retention_ms: Option<i64>,
        file_delete_delay_ms: i64,
        flush_policy: FlushPolicy,
        recovery_mode: RecoveryMode,
        deep_recovery: bool,
        producer_state: ProducerStateConfig,
        snapshot_version: SnapshotVersion,
        prefault_bytes: usize,
        snapshot_interval_bytes: u64,
        cleanup_policy: CleanupPolicy,
        compaction: CompactionConfig,
    }

    /// The configuration, once every value is in its range ([`LogConfig::validate`]).
    pub fn build(self) -> Result<LogConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

/// The wall clock, in milliseconds since the Unix epoch. A seam so tests can move time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's real-time clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// What a log runs on: its file system and its clock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Environment {
    /// Every file operation goes through it ([`crate::io::RealFs`] by default).
    pub fs: Arc<dyn FileSystem>,
    /// Append times and segment roll deadlines come from it ([`SystemClock`] by default).
    pub clock: Arc<dyn Clock>,
}

with_setters!(Environment {
    with_fs => fs: Arc<dyn FileSystem>,
    with_clock => clock: Arc<dyn Clock>,
});

impl Default for Environment {
    fn default() -> Self {
        Environment {
            fs: io::real(),
            clock: Arc::new(SystemClock),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.segment_ms, 604_800_000);
        assert_eq!(c.max_decompressed_bytes, 64 << 20);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn auto_writes_through_the_file_only_when_every_append_is_synced() {
        let with = |append_writes, flush_policy| LogConfig {
            append_writes,
            flush_policy,
            ..LogConfig::default()
        };
        assert!(with(AppendWrites::Auto, FlushPolicy::Always).writes_through_file());
        for policy in [
            FlushPolicy::Manual,
            FlushPolicy::EveryMessages(100),
        ] {
            assert!(!with(AppendWrites::Auto, policy).writes_through_file());
            assert!(with(AppendWrites::File, policy).writes_through_file());
        }
        assert!(!with(AppendWrites::Map, FlushPolicy::Always).writes_through_file());
    }

    #[test]
    fn out_of_range_values_are_refused_with_their_field() {
        let cases: Vec<(LogConfig, &str)> = vec![
            (
                LogConfig {
                    segment_bytes: 13,
                    ..Default::default()
                },
                "segment_bytes",
            ),
            (
                LogConfig {
                    segment_bytes: 1 << 31,
                    ..Default::default()
                },
                "segment_bytes",
            ),
            (
                LogConfig {
                    segment_ms: 0,
                    ..Default::default()
                },
                "segment_ms",
            ),
            (
                LogConfig {
                    allocation_step_bytes: 4095,
                    ..Default::default()
                },
                "allocation_step_bytes",
            ),
            (
                LogConfig {
                    recycled_segments: 1025,
                    ..Default::default()
                },
                "recycled_segments",
            ),
            (
                LogConfig {
                    recycled_segments: 2,
                    recovery_mode: RecoveryMode::AbsoluteConsistency,
                    ..Default::default()
                },
                "recycled_segments",
            ),
            (
                LogConfig {
                    segment_jitter_ms: -1,
                    ..Default::default()
                },
                "segment_jitter_ms",
            ),
            (
                LogConfig {
                    segment_index_bytes: 8,
                    ..Default::default()
                },
                "segment_index_bytes",
            ),
            (
                LogConfig {
                    max_message_bytes: 60,
                    ..Default::default()
                },
                "max_message_bytes",
            ),
            (
                LogConfig {
                    flush_policy: FlushPolicy::EveryMessages(0),
                    ..Default::default()
                },
                "flush_policy",
            ),
            (
                LogConfig {
                    max_decompressed_bytes: 1_048_587,
                    ..Default::default()
                },
                "max_decompressed_bytes",
            ),
            (
                LogConfig {
                    max_decompressed_bytes: 1 << 31,
                    ..Default::default()
                },
                "max_decompressed_bytes",
            ),
            (
                // Raising the batch limit past the decompression limit must raise both.
                LogConfig {
                    max_message_bytes: 100 << 20,
                    ..Default::default()
                },
                "max_decompressed_bytes",
            ),
        ];
        let compaction = |c: CompactionConfig| LogConfig {
            compaction: c,
            ..Default::default()
        };
        let d = CompactionConfig::default();
        let more: Vec<(LogConfig, &str)> = vec![
            (
                LogConfig {
                    index_interval_bytes: 1 << 31,
                    ..Default::default()
                },
                "index_interval_bytes",
            ),
            (
                LogConfig {
                    retention_bytes: Some(1 << 63),
                    ..Default::default()
                },
                "retention_bytes",
            ),
            (
                LogConfig {
                    retention_ms: Some(-1),
                    ..Default::default()
                },
                "retention_ms",
            ),
            (
                LogConfig {
                    file_delete_delay_ms: -1,
                    ..Default::default()
                },
                "file_delete_delay_ms",
            ),
            (
                LogConfig {
                    snapshot_interval_bytes: 0,
                    ..Default::default()
                },
                "snapshot_interval_bytes",
            ),
            (
                LogConfig {
                    producer_state: ProducerStateConfig::default().with_window(0),
                    ..Default::default()
                },
                "producer_state",
            ),
            (
                compaction(d.with_min_cleanable_dirty_ratio(f64::NAN)),
                "min_cleanable_dirty_ratio",
            ),
            (
                compaction(d.with_min_compaction_lag_ms(-1)),
                "min_compaction_lag_ms",
            ),
            (
                compaction(d.with_min_compaction_lag_ms(10).with_max_compaction_lag_ms(9)),
                "max_compaction_lag_ms",
            ),
            (compaction(d.with_max_compaction_lag_ms(0)), "max_compaction_lag_ms"),
            (compaction(d.with_delete_retention_ms(-1)), "delete_retention_ms"),
            (compaction(d.with_key_map_bytes(1023)), "key_map_bytes"),
        ];
        for (config, field) in cases.into_iter().chain(more) {
            assert_eq!(
                config.validate().map_err(|e| (e.field, e.kind())),
                Err((field, "invalid_config"))
            );
            assert_eq!(
                config.into_builder().build().map_err(|e| e.field),
                Err(field),
                "the builder refuses what validate refuses"
            );
        }
    }

    #[test]
    fn a_refusal_states_the_range_from_the_table() {
        let rule = |b: LogConfigBuilder| b.build().map(|_| ()).map_err(|e| (e.value, e.rule));
        assert_eq!(
            rule(LogConfig::builder().segment_ms(0)),
            Err(("0".into(), "must be at least 1".into()))
        );
        assert_eq!(
            rule(LogConfig::builder().segment_jitter_ms(-3)),
            Err(("-3".into(), "must not be negative".into()))
        );
        assert_eq!(
            rule(LogConfig::builder().segment_index_bytes(8)),
            Err((
                "8".into(),
                "must be in 24 ..= 2147483647 (room for two time-index entries)".into()
            ))
        );
        // A bound taken from another setting is stated as the number it is.
        assert_eq!(
            rule(LogConfig::builder().max_message_bytes(100 << 20)),
            Err((
                (64 << 20).to_string(),
                "must be in 104857600 ..= 2147483647 (max_message_bytes ..= int32)".into()
            ))
        );
        // An optional setting left unset is not checked.
        assert_eq!(rule(LogConfig::builder().retention_ms(None)), Ok(()));
    }

    #[test]
    fn the_builder_sets_each_setting_and_starts_from_any_config() {
        let c = LogConfig::builder()
            .segment_bytes(4096)
            .retention_ms(None)
            .flush_policy(FlushPolicy::Always)
            .compaction(CompactionConfig::default().with_key_map_bytes(4096))
            .build()
            .unwrap();
        assert_eq!(
            (c.segment_bytes, c.retention_ms, c.flush_policy),
            (4096, None, FlushPolicy::Always)
        );
        assert_eq!(c.compaction.key_map_bytes, 4096);
        assert_eq!(
            c.clone().into_builder().segment_ms(5).build(),
            Ok(LogConfig {
                segment_ms: 5,
                ..c
            })
        );
        assert_eq!(LogConfig::builder().build(), Ok(LogConfig::default()));
    }

    #[test]
    fn decompression_limit_may_equal_the_batch_limit() {
        let c = LogConfig {
            max_message_bytes: 4096,
            max_decompressed_bytes: 4096,
            ..Default::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }
}
