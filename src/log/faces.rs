//! The two faces of a [`Log`] besides its own, one per kind of caller (docs/design.md, "The
//! layers").
//!
//! [`Log`] itself is what a client of one partition uses: open, append, fetch and read, wait,
//! flush, roll, close, metrics. Two other callers need more, and each gets a face of its own,
//! borrowed from the log for as long as it is used:
//!
//! - [`ReplicaLog`] (`log.replica()`): a replication layer. Batches that already carry their
//!   offsets, truncation to a leader's log, the producer-state handoff of a snapshot install,
//!   the high watermark and the leader epoch.
//! - [`Maintenance`] (`log.maintenance()`): whoever runs the log's upkeep, a
//!   [`LogManager`](crate::LogManager)'s background jobs or an embedder that runs its own:
//!   retention, compaction, removal of deleted files, producer snapshots and expiry.
//!
//! A face is a borrow and costs nothing; every call on it is the log's, with the log's locks
//! and crash rules.

use super::{
    AppendError, AppendInfo, Cleanable, CompactionReport, EpochEndOffset, EpochEntry, FlushError,
    Log, RetentionReport, RewriteError, TruncateReport,
};
use crate::io::IoError;

/// What a replication layer calls on a [`Log`]: see [`Log::replica`].
#[derive(Debug, Clone, Copy)]
pub struct ReplicaLog<'a> {
    log: &'a Log,
}

/// What a log's upkeep calls on a [`Log`]: see [`Log::maintenance`].
#[derive(Debug, Clone, Copy)]
pub struct Maintenance<'a> {
    log: &'a Log,
}

impl Log {
    /// The log as a replication layer uses it: a follower's appends of its leader's batches,
    /// truncation, the producer-state handoff and the high watermark under
    /// [`HighWatermarkPolicy::SetByCaller`](crate::HighWatermarkPolicy::SetByCaller), and the
    /// leader epoch. A client of the partition never needs it.
    pub fn replica(&self) -> ReplicaLog<'_> {
        ReplicaLog { log: self }
    }

    /// The log as its upkeep uses it: retention, compaction, removal of the files rewrites
    /// left for deletion, producer snapshots and expiry, and the segments' layout. A
    /// [`LogManager`](crate::LogManager) calls these from its background jobs; an embedder
    /// that opens logs alone calls them on its own schedule.
    pub fn maintenance(&self) -> Maintenance<'_> {
        Maintenance { log: self }
    }
}

impl<'a> ReplicaLog<'a> {
    /// The log this face is of.
    pub fn log(&self) -> &'a Log {
        self.log
    }
}

impl<'a> Maintenance<'a> {
    /// The log this face is of.
    pub fn log(&self) -> &'a Log {
        self.log
    }
}

impl ReplicaLog<'_> {
    /// Appends batches that already carry their offsets (a follower copying its leader): each
    /// batch is checked (frame, CRC) and must start at or after the log end, with offsets
    /// strictly increasing. All batches are checked before any is written.
    pub fn append(&self, batches: &[u8]) -> Result<Option<AppendInfo>, AppendError> {
        self.log.append_replicated(batches)
    }

    /// Truncates the log to end at `offset` (Kafka's `truncateTo`): every batch ending at or
    /// after `offset` is removed, a batch holding `offset` whole; the producer state is rebuilt
    /// from the newest snapshot at or below the new end (so a retry of a removed batch is
    /// appended again, not answered as a duplicate), the leader-epoch cache cut, the recovery
    /// point and high watermark lowered. Appends continue at the new end. `offset` equal to the
    /// log end changes nothing; above it, or below the log start, is refused. A `Bytes` read
    /// before keeps its bytes.
    pub fn truncate_to(&self, offset: i64) -> Result<TruncateReport, RewriteError> {
        self.log.truncate_to(offset)
    }

    /// Removes every segment and starts the log over, empty, at `offset` (Kafka's
    /// `truncateFullyAndStartAt`, for a follower whose log has nothing in common with its
    /// leader's): log start, log end, recovery point and high watermark all become `offset`;
    /// producer state, its snapshots and the leader-epoch cache are cleared. The new empty
    /// segment is made durable before the old ones go, so a crash leaves the old log or the
    /// new one.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<TruncateReport, RewriteError> {
        self.log.truncate_fully_and_start_at(offset)
    }

    /// The producer state as of `offset`, a batch boundary in `[log start, log end]`, encoded
    /// as a `.snapshot` file of this log's snapshot version: the state a replica starting its
    /// log at `offset` needs. Rebuilt from the newest snapshot at or below `offset` and the
    /// batches after it, as a truncation to `offset` would; the log is not changed.
    pub fn producer_snapshot_at(&self, offset: i64) -> Result<Vec<u8>, RewriteError> {
        self.log.producer_snapshot_at(offset)
    }

    /// [`Self::truncate_fully_and_start_at`] with a producer state: the log starts over, empty,
    /// at `offset`, and knows the producers `producer_snapshot` (the bytes of a `.snapshot`
    /// file, as [`Self::producer_snapshot_at`] makes them) holds. The snapshot is checked
    /// before anything changes; a snapshot that does not decode is refused and changes
    /// nothing. A crash before the call returns leaves the old log, or the empty one with or
    /// without the producers: the caller that needs them keeps what it installs until the call
    /// returns.
    pub fn truncate_fully_and_start_with(
        &self,
        offset: i64,
        producer_snapshot: &[u8],
    ) -> Result<TruncateReport, RewriteError> {
        self.log.truncate_fully_and_start_with(offset, producer_snapshot)
    }

    /// Sets the high watermark (the replication layer, once enough replicas have the offsets),
    /// as Kafka's `updateHighWatermark` does: kept within `[log start, log end]`. Returns the
    /// value set. It is written to the checkpoint with the next flush. Only under
    /// [`HighWatermarkPolicy::SetByCaller`](crate::HighWatermarkPolicy::SetByCaller).
    pub fn set_high_watermark(&self, offset: i64) -> Result<i64, RewriteError> {
        self.log.set_high_watermark(offset)
    }

    /// The leader epoch stamped on client batches.
    pub fn leader_epoch(&self) -> i32 {
        self.log.leader_epoch()
    }

    /// Makes `epoch` the leader epoch (this replica became leader for it, Kafka's
    /// `maybeAssignEpochStartOffset`): it starts at the log end, is written to the
    /// `leader-epoch-checkpoint` before the call returns, and is stamped on every client batch
    /// appended after. An epoch older than the current one is refused; the same one changes
    /// nothing.
    pub fn set_leader_epoch(&self, epoch: i32) -> Result<(), RewriteError> {
        self.log.set_leader_epoch(epoch)
    }

    /// Kafka's OffsetsForLeaderEpoch: the largest epoch at or below `epoch` and the offset it
    /// ended at ([`EpochEndOffset::UNDEFINED`] when the cache cannot tell).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        self.log.end_offset_for_epoch(epoch)
    }

    /// The leader-epoch cache: which epoch started at which offset.
    pub fn leader_epochs(&self) -> Vec<EpochEntry> {
        self.log.leader_epochs()
    }
}

impl Maintenance<'_> {
    /// Removes the `.deleted` files of segments that truncation or retention removed once
    /// their `file_delete_delay_ms` is over at `now_ms` (retention and truncation also do it
    /// on their way). What the log manager's deletion job calls.
    /// It also trims the dead tails truncations left in segments whose readers are gone.
    pub fn remove_deleted_files(&self, now_ms: i64) -> Result<(), IoError> {
        self.log.remove_deleted_files(now_ms)
    }

    /// Takes a producer snapshot at the log end, and flushes it, if more than `replay_bytes`
    /// were appended since the last one: a crash then replays at most that much on open (the
    /// append path takes one only every `snapshot_interval_bytes`, and only when appending).
    /// Returns whether it took one.
    pub fn snapshot_if_behind(&self, replay_bytes: u64) -> Result<bool, FlushError> {
        self.log.snapshot_if_behind(replay_bytes)
    }

    /// Applies retention now, at wall-clock `now_ms` (what a broker's retention task calls
    /// every `log.retention.check.interval.ms`): the log-start, size (`retention_bytes`) and
    /// time (`retention_ms`) rules.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<RetentionReport, RewriteError> {
        self.log.enforce_retention(now_ms)
    }

    /// [`Self::enforce_retention`] that deletes no segment holding offsets at or above `bound`
    /// (a replication layer's purge point: the entries its consensus engine may still send to
    /// a lagging follower stay).
    pub fn enforce_retention_below(
        &self,
        now_ms: i64,
        bound: i64,
    ) -> Result<RetentionReport, RewriteError> {
        self.log.enforce_retention_below(now_ms, bound)
    }

    /// The cleaner's view of the log now: the dirty range, its ratio and whether a round is due
    /// (the seam a manager schedules [`Self::compact`] with).
    pub fn cleanable(&self, now_ms: i64) -> Cleanable {
        self.log.cleanable(now_ms)
    }

    /// Cleans the log now, at wall clock `now_ms` (the horizon clock of tombstones and
    /// markers): passes until the cleaner offset reaches the first uncleanable offset, whether
    /// or not the dirty ratio makes it due. Refused on a log whose `cleanup_policy` does not
    /// compact. A record the cleaner cannot read stops the round with
    /// [`RewriteError::CompactionCorrupt`] and changes nothing.
    pub fn compact(&self, now_ms: i64) -> Result<CompactionReport, RewriteError> {
        self.log.compact(now_ms)
    }

    /// What [`Self::compact`] would keep and remove, writing nothing.
    pub fn compact_dry_run(&self, now_ms: i64) -> Result<CompactionReport, RewriteError> {
        self.log.compact_dry_run(now_ms)
    }

    /// Forgets producers whose last append (wall clock) is at least `producer_state.
    /// expiration_ms` before `now_ms` and that have no open transaction. Returns how many.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        self.log.expire_producers(now_ms)
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.log.segment_count()
    }

    /// Base offsets of the segments, in order.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.log.segment_base_offsets()
    }
}
