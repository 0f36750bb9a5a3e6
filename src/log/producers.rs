//! The log's producer state: the table, its snapshots beside the segments, and how it is
//! rebuilt on open (docs/design.md, "Producer state", docs/format.md, "Producer snapshot").
//!
//! Snapshots are taken at roll (at the new base offset), every `snapshot_interval_bytes`, and
//! at close. The first two are written to a temp file under the append lock and made durable
//! (fsync, rename, directory fsync) by the next flush, never on the append path; the close
//! snapshot is written durably. On open the newest valid snapshot at or below the log end is
//! loaded (bad ones are renamed aside, never deleted) and the batch headers after it replayed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::LogConfig;
use super::error::OpenError;
use crate::format::{sequence, BatchIter, BatchSummary};
use crate::io::{FileSystem, IoError};
use crate::producer::{
    snapshot, snapshot_files, Decision, IncomingBatch, ProducerEntry, ProducerError,
    ProducerStateTable, SnapshotVersion,
};
use crate::segment::{CorruptSegment, Segment};

/// What loading the producer state found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerLoadReport {
    /// Offset of the snapshot loaded, if any (otherwise the log was replayed from its start).
    pub snapshot_offset: Option<i64>,
    /// Snapshots that failed their checks and were renamed aside, with the reason.
    pub quarantined: Vec<(PathBuf, String)>,
    /// Snapshots above the log end (their offsets were lost in a crash), removed.
    pub removed_above_end: Vec<i64>,
    /// Batch headers replayed after the snapshot.
    pub batches_replayed: u64,
    /// Producers known after loading.
    pub producers: usize,
}

pub(crate) struct ProducerState {
    table: ProducerStateTable,
    version: SnapshotVersion,
    interval_bytes: u64,
    bytes_since_snapshot: u64,
    /// A snapshot written to its temp file, waiting for a flush to make it durable.
    pending: Option<snapshot_files::PendingSnapshot>,
}

impl ProducerState {
    /// Loads the newest usable snapshot at or below `log_end` and replays the batches after it.
    pub fn load(
        fs: &dyn FileSystem,
        dir: &Path,
        config: &LogConfig,
        segments: &[Arc<Segment>],
        log_start: i64,
        log_end: i64,
        now_ms: i64,
    ) -> Result<(ProducerState, ProducerLoadReport), OpenError> {
        let mut report = ProducerLoadReport {
            removed_above_end: snapshot_files::delete_above(fs, dir, log_end)?,
            ..Default::default()
        };
        let mut table = ProducerStateTable::new(config.producer_state).map_err(|e| {
            crate::log::ConfigError {
                field: "producer_state",
                value: e.to_string(),
                rule: "see ProducerStateConfig",
            }
        })?;
        let loaded = snapshot_files::load_newest(fs, dir, log_end)?;
        report.quarantined = loaded
            .quarantined
            .iter()
            .map(|q| (q.moved_to.clone(), q.error.to_string()))
            .collect();
        let mut from = log_start;
        if let Some((offset, mut snap)) = loaded.newest {
            if snap.version == SnapshotVersion::V1 {
                // Kafka's format has no append wall clock, only record timestamps, which client
                // clocks can skew: count the producers as appended now, so a restart can
                // delay their expiry but never hasten it.
                for entry in &mut snap.entries {
                    entry.set_last_append_ms(now_ms);
                }
            }
            table.load(snap.entries);
            report.snapshot_offset = Some(offset);
            from = offset.max(log_start);
        }
        report.batches_replayed = replay(&mut table, segments, from, now_ms)?;
        table.expire(now_ms);
        report.producers = table.len();
        let state = ProducerState {
            table,
            version: config.snapshot_version,
            interval_bytes: config.snapshot_interval_bytes,
            bytes_since_snapshot: 0,
            pending: None,
        };
        Ok((state, report))
    }

    pub fn table(&self) -> &ProducerStateTable {
        &self.table
    }

    /// The producer rules for a client batch (duplicate, epoch, sequence, limits).
    pub fn check(&self, incoming: &IncomingBatch) -> Result<Decision, ProducerError> {
        self.table.check_client(incoming)
    }

    /// Records a batch written at `first_offset` (client or replicated).
    pub fn record(
        &mut self,
        incoming: Option<&IncomingBatch>,
        first_offset: i64,
        size: usize,
        now_ms: i64,
    ) {
        if let Some(b) = incoming {
            self.table.record_replicated(b, first_offset, now_ms);
        }
        self.bytes_since_snapshot += size as u64;
    }

    pub fn snapshot_due(&self) -> bool {
        self.bytes_since_snapshot >= self.interval_bytes
    }

    /// Writes the state as of `offset` (the log end) to a temp file, without fsync; the next
    /// flush finishes it. Replaces an unfinished older one.
    pub fn prepare_snapshot(
        &mut self,
        fs: &dyn FileSystem,
        dir: &Path,
        offset: i64,
    ) -> Result<(), IoError> {
        let bytes = snapshot::encode(self.table.iter(), self.version);
        if let Some(old) = self.pending.take() {
            // Its temp file is rewritten below if it has the same offset; otherwise removing it
            // is housekeeping (a leftover .tmp is also removed on open).
            if old.offset() != offset {
                let _ = old.abandon(fs);
            }
        }
        self.pending = Some(snapshot_files::prepare(fs, dir, offset, &bytes)?);
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    pub fn take_pending(&mut self) -> Option<snapshot_files::PendingSnapshot> {
        self.pending.take()
    }

    /// Writes the state as of `offset` durably (at close).
    pub fn write_snapshot(
        &mut self,
        fs: &dyn FileSystem,
        dir: &Path,
        offset: i64,
    ) -> Result<(), IoError> {
        if let Some(old) = self.pending.take() {
            if old.offset() != offset {
                let _ = old.abandon(fs);
            }
        }
        let bytes = snapshot::encode(self.table.iter(), self.version);
        snapshot_files::write(fs, dir, offset, &bytes)?;
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    pub fn expire(&mut self, now_ms: i64) -> usize {
        self.table.expire(now_ms)
    }

    pub fn producer(&self, producer_id: i64) -> Option<ProducerEntry> {
        self.table.get(producer_id).cloned()
    }
}

/// What the producer rules need of a validated client batch.
pub(crate) fn incoming(summary: &BatchSummary) -> Option<IncomingBatch> {
    (summary.producer_id >= 0).then(|| IncomingBatch {
        producer_id: summary.producer_id,
        epoch: summary.producer_epoch,
        first_seq: summary.base_sequence,
        last_seq: sequence::add(summary.base_sequence, summary.last_offset_delta),
        offset_delta: summary.last_offset_delta,
        max_timestamp: summary.max_timestamp,
        is_transactional: summary.is_transactional,
        is_control: summary.is_control,
    })
}

/// Applies every batch at or after `from` to the table, reading only batch headers. Replayed
/// batches carry no append wall clock, so they count as appended now: a restart can delay a
/// producer's expiry, never hasten it.
fn replay(
    table: &mut ProducerStateTable,
    segments: &[Arc<Segment>],
    from: i64,
    now_ms: i64,
) -> Result<u64, CorruptSegment> {
    let mut replayed = 0;
    for segment in segments.iter().filter(|s| s.next_offset() > from) {
        let data = segment.data();
        let start = segment.offset_index().lookup(from).position as usize;
        for item in BatchIter::new(data.get(start..).unwrap_or(&[])) {
            let (_, batch) = item.map_err(|e| CorruptSegment {
                path: segment.log_path().to_path_buf(),
                position: start + e.position,
                error: e.error,
            })?;
            if batch.last_offset() < from || batch.producer_id() < 0 {
                continue;
            }
            table.record_replicated(
                &IncomingBatch::from_batch(&batch),
                batch.base_offset(),
                now_ms,
            );
            replayed += 1;
        }
    }
    Ok(replayed)
}
