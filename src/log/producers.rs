//! The log's producer state: the table, its snapshots beside the segments, and how it is
//! rebuilt on open (docs/design.md "Producer state"), open transactions included: a replay
//! also yields the transactions its markers complete, from which recovery rebuilds `.txnindex`
//! files and the log its first unstable offset.
//!
//! Snapshots are taken at roll (at the new base offset), every `snapshot_interval_bytes`, and
//! at close. The first two are written to a temp file under the append lock and made durable
//! (fsync, rename, directory fsync) by the next flush, never on the append path; the close
//! snapshot is written durably. On open the newest snapshot at or below the log end that
//! passes its checks is loaded (bad ones are renamed aside, never deleted) and the batches
//! after it replayed.

use std::path::{Path, PathBuf};

use super::config::LogConfig;
use crate::format::{self, sequence, BatchIter, BatchSummary};
use crate::io::{FileSystem, IoError, IoResultExt, MapMode, OpenMode};
use crate::producer::{
    snapshot, snapshot_files, txn, CompletedTxn, Decision, IncomingBatch, Logged, Marker,
    ProducerEntry, ProducerError, ProducerStateTable, SnapshotError, SnapshotVersion,
};
use crate::segment::{names, offset_index, AbortedTxn, BatchInfo, BatchProblem, OffsetBounds};

/// What loading the producer state found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Snapshots written to their temp files, waiting for a flush to make them durable: one per
    /// roll since the last flush (each at a segment base, kept), plus at most one interval
    /// snapshot (replaced by the next).
    pending: Vec<Pending>,
    /// The offset of a snapshot file that holds exactly this state: the one loaded on open
    /// when nothing was replayed after it or expired since, or the last one written. A close
    /// at that offset writes nothing, so opening and closing a log without appending rewrites
    /// no snapshot (a Kafka snapshot stays in Kafka's format, which Kafka can read back).
    on_disk: Option<i64>,
}

struct Pending {
    snapshot: snapshot_files::PendingSnapshot,
    at_segment_base: bool,
}

/// A segment as replay reads it.
pub(crate) struct ReplaySegment<'a> {
    pub base: i64,
    pub path: &'a Path,
    pub log_size: usize,
    pub next_offset: i64,
    pub next_segment_base: Option<i64>,
    /// Every batch was validated already (frame, CRC, offsets).
    pub validated: bool,
    /// Its batches, where recovery listed them.
    pub batches: Option<&'a [BatchInfo]>,
}

/// Why the producer state cannot be rebuilt.
#[derive(Debug)]
pub(crate) enum LoadError {
    Io(IoError),
    /// A batch replayed from bytes trusted without validation is damaged.
    Damaged {
        path: PathBuf,
        position: usize,
        problem: BatchProblem,
    },
}

impl From<IoError> for LoadError {
    fn from(e: IoError) -> Self {
        LoadError::Io(e)
    }
}

/// What a replay must keep of the transactions it sees completed, besides the state itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplayWants {
    /// The aborted transactions whose markers are at or after this offset, for `.txnindex`
    /// files to rebuild: their transactions are replayed from a snapshot at or below it (the
    /// state of the transactions open there is what the entries are made of), apart from the
    /// producers' windows, which come from the newest snapshot.
    pub txn_index_from: Option<i64>,
    /// The completed transactions whose markers are at or after this offset (the high
    /// watermark: they still hold the first unstable offset back), among those the replay
    /// meets. Like Kafka, the replay does not start earlier for them: the transactions
    /// completed before the snapshot it starts from are not known again (a replay from the
    /// high watermark would undo the replay budget of every unclean open).
    pub completed_from: i64,
}

/// The producer state decided on open, and the changes to the snapshot files it needs.
pub(crate) struct LoadPlan {
    state: ProducerState,
    report: ProducerLoadReport,
    bad: Vec<(i64, PathBuf, SnapshotError)>,
    above_end: Vec<i64>,
    /// The aborted transactions [`ReplayWants::txn_index_from`] asked for, in marker order.
    pub aborted: Vec<AbortedTxn>,
    /// The completed transactions [`ReplayWants::completed_from`] asked for, in marker order.
    pub completed: Vec<CompletedTxn>,
}

impl LoadPlan {
    /// Whether applying it changes no file: no snapshot to set aside or remove.
    pub fn changes_nothing(&self) -> bool {
        self.bad.is_empty() && self.above_end.is_empty()
    }

    /// What [`LoadPlan::apply`] would report, without changing a file: the snapshots it
    /// would set aside (by their present names) and those it would remove.
    pub fn preview_report(&self) -> ProducerLoadReport {
        ProducerLoadReport {
            quarantined: self
                .bad
                .iter()
                .map(|(_, path, e)| (path.clone(), e.to_string()))
                .collect(),
            removed_above_end: self.above_end.clone(),
            ..self.report.clone()
        }
    }

    /// The state alone, leaving the snapshot files as they are.
    pub fn into_state(self) -> ProducerState {
        self.state
    }

    /// Sets bad snapshots aside and removes those above the log end.
    pub fn apply(
        mut self,
        fs: &dyn FileSystem,
        dir: &Path,
    ) -> Result<(ProducerState, ProducerLoadReport), IoError> {
        let quarantined = snapshot_files::quarantine(fs, dir, std::mem::take(&mut self.bad))?;
        self.report.quarantined = quarantined
            .iter()
            .map(|q| (q.moved_to.clone(), q.error.to_string()))
            .collect();
        for &o in &self.above_end {
            let p = snapshot_files::path(dir, o);
            fs.remove_file(&p).ctx("remove", &p)?;
        }
        if !self.above_end.is_empty() {
            fs.sync_dir(dir).ctx("fsync directory", dir)?;
        }
        self.report.removed_above_end = self.above_end;
        Ok((self.state, self.report))
    }
}

impl ProducerState {
    /// Decides the producer state of a log about to be opened, reading only: the newest
    /// snapshot at or below `log_end` that passes its checks, then the batches after it. When
    /// `wants.txn_index_from` is below that snapshot, the transactions aborted from there up
    /// to it come from a second replay, from an older snapshot (or the log start) into a table
    /// that is then dropped: it may cross batches compaction removed, which would leave holes
    /// in the windows it rebuilt.
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        fs: &dyn FileSystem,
        config: &LogConfig,
        snapshots: &[(i64, PathBuf)],
        segments: &[ReplaySegment<'_>],
        log_start: i64,
        log_end: i64,
        wants: ReplayWants,
        now_ms: i64,
    ) -> Result<LoadPlan, LoadError> {
        let mut table = ProducerStateTable::new(config.producer_state)
            .map_err(|e| IoError::new("producer state", Path::new(""), std::io::Error::other(e)))?;
        let above_end = snapshots
            .iter()
            .map(|(o, _)| *o)
            .filter(|o| *o > log_end)
            .collect();
        // The window comes from the newest snapshot at or below the end, never from an older
        // one: batches compaction removed cannot be replayed, so a replay over a compacted
        // range would lose the retries they answer (docs/design.md, "Compaction and producer
        // state"). `.txnindex` files to rebuild below that snapshot get their own replay.
        let choice = snapshot_files::choose_newest(fs, snapshots, log_end)?;
        let mut bad = choice.bad;
        let mut report = ProducerLoadReport::default();
        // Batches below the log start that are still in the first segment (DeleteRecords hid
        // them) are replayed too: a producer known only from them stays known.
        let first_base = segments.first().map_or(log_start, |s| s.base.min(log_start));
        let mut from = first_base;
        let mut seen = Completions::new(wants);
        if let Some((offset, snap)) = choice.newest {
            if let Some(txn_from) = wants.txn_index_from.filter(|&t| t < offset) {
                let (older, older_bad) = txn_replay_start(fs, snapshots, offset, txn_from)?;
                bad.extend(older_bad);
                let mut scratch = ProducerStateTable::new(config.producer_state).map_err(|e| {
                    IoError::new("producer state", Path::new(""), std::io::Error::other(e))
                })?;
                let scratch_from = match older {
                    Some((at, snap)) => {
                        scratch.load(snap.entries);
                        at.max(first_base)
                    }
                    None => first_base,
                };
                // Only the aborted transactions this replay completes are kept: its table is
                // dropped, and the completed ones that hold the first unstable offset back
                // are, as ever, those from the snapshot the state starts from on.
                let mut aborted_only = Completions::new(ReplayWants {
                    completed_from: i64::MAX,
                    ..wants
                });
                replay(fs, &mut scratch, segments, scratch_from, offset, now_ms, &mut aborted_only)?;
                seen.aborted = aborted_only.aborted;
            }
            table.load(snapshot_entries(snap, now_ms));
            report.snapshot_offset = Some(offset);
            from = offset.max(first_base);
        }
        report.batches_replayed = replay(fs, &mut table, segments, from, i64::MAX, now_ms, &mut seen)?;
        let expired = table.expire(now_ms);
        report.producers = table.len();
        let on_disk = report
            .snapshot_offset
            .filter(|&o| o == log_end && report.batches_replayed == 0 && expired == 0);
        let state = ProducerState {
            table,
            version: config.snapshot_version,
            interval_bytes: config.snapshot_interval_bytes,
            bytes_since_snapshot: 0,
            pending: Vec::new(),
            on_disk,
        };
        Ok(LoadPlan {
            state,
            report,
            bad,
            above_end,
            aborted: seen.aborted,
            completed: seen.completed,
        })
    }

    pub fn table(&self) -> &ProducerStateTable {
        &self.table
    }

    /// The producer rules for a client batch (duplicate, epoch, sequence, limits).
    pub fn check(&self, incoming: &IncomingBatch) -> Result<Decision, ProducerError> {
        self.table.check_client(incoming)
    }

    /// Records a data batch written at `first_offset` (client or replicated).
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

    /// Bytes appended since the last snapshot: what a crash now would replay on open.
    pub fn bytes_since_snapshot(&self) -> u64 {
        self.bytes_since_snapshot
    }

    /// Records a batch read back from the log (replicated): data, a marker, or an empty
    /// control batch. Returns the transaction a marker completed.
    pub fn apply(
        &mut self,
        logged: &Logged,
        first_offset: i64,
        size: usize,
        now_ms: i64,
    ) -> Option<CompletedTxn> {
        self.bytes_since_snapshot += size as u64;
        self.table.apply(logged, first_offset, now_ms)
    }

    /// The producer rules for a marker from the coordinator (epoch, coordinator epoch).
    pub fn check_marker(&self, m: &Marker, transaction_version: i8) -> Result<(), ProducerError> {
        self.table.check_marker(m, transaction_version)
    }

    /// The transaction `m` would complete, without recording it.
    pub fn completion(&self, m: &Marker) -> Option<CompletedTxn> {
        self.table.completion(m)
    }

    pub fn snapshot_due(&self) -> bool {
        self.bytes_since_snapshot >= self.interval_bytes
    }

    /// Writes the state as of `offset` (the log end) to a temp file, without fsync; the next
    /// flush finishes it. A snapshot at a segment base (a roll) is kept until then; an interval
    /// snapshot replaces the previous interval one, which would be a stray anyway.
    pub fn prepare_snapshot(
        &mut self,
        fs: &dyn FileSystem,
        dir: &Path,
        offset: i64,
        at_segment_base: bool,
    ) -> Result<(), IoError> {
        let bytes = snapshot::encode(self.table.iter(), self.version, offset);
        let snapshot = snapshot_files::prepare(fs, dir, offset, &bytes)?;
        let mut kept = Vec::with_capacity(self.pending.len() + 1);
        for p in self.pending.drain(..) {
            if p.snapshot.offset() == offset {
                // The same temp file was just rewritten.
                continue;
            }
            if p.at_segment_base {
                kept.push(p);
            } else {
                // Housekeeping: a leftover .tmp is also removed on open.
                let _ = p.snapshot.abandon(fs);
            }
        }
        kept.push(Pending {
            snapshot,
            at_segment_base,
        });
        self.pending = kept;
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    /// Whether a snapshot waits for the next flush.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The snapshots waiting for a flush, oldest first.
    pub fn take_pending(&mut self) -> Vec<snapshot_files::PendingSnapshot> {
        self.pending.drain(..).map(|p| p.snapshot).collect()
    }

    /// Gives up the pending snapshots above `offset` (a truncation removed the state they
    /// hold) and hands the others over to `next`, the state rebuilt in their place.
    pub fn hand_over_pending(
        &mut self,
        fs: &dyn FileSystem,
        offset: i64,
        next: &mut ProducerState,
    ) {
        for p in self.pending.drain(..) {
            if p.snapshot.offset() > offset {
                // Housekeeping: a leftover .tmp is also removed on open.
                let _ = p.snapshot.abandon(fs);
            } else {
                next.pending.push(p);
            }
        }
    }

    /// An empty table with the configuration of this one (a log that starts over).
    pub fn emptied(
        &mut self,
        fs: &dyn FileSystem,
        config: &LogConfig,
    ) -> Result<ProducerState, IoError> {
        for p in self.pending.drain(..) {
            let _ = p.snapshot.abandon(fs);
        }
        let table = ProducerStateTable::new(config.producer_state)
            .map_err(|e| IoError::new("producer state", Path::new(""), std::io::Error::other(e)))?;
        Ok(ProducerState {
            table,
            version: config.snapshot_version,
            interval_bytes: config.snapshot_interval_bytes,
            bytes_since_snapshot: 0,
            pending: Vec::new(),
            on_disk: None,
        })
    }

    /// Writes the state as of `offset` durably (at close), unless the snapshot file at
    /// `offset` already holds exactly this state. Returns whether it wrote one.
    pub fn write_snapshot(
        &mut self,
        fs: &dyn FileSystem,
        dir: &Path,
        offset: i64,
    ) -> Result<bool, IoError> {
        let unchanged = self.on_disk == Some(offset)
            && self.pending.iter().all(|p| p.snapshot.offset() != offset);
        let path = snapshot_files::path(dir, offset);
        if unchanged && fs.exists(&path).ctx("stat", &path)? {
            return Ok(false);
        }
        // A pending snapshot at the same offset is replaced by this one (its temp file is
        // rewritten); the others still wait for their flush.
        self.pending.retain(|p| p.snapshot.offset() != offset);
        let bytes = snapshot::encode(self.table.iter(), self.version, offset);
        snapshot_files::write(fs, dir, offset, &bytes)?;
        self.bytes_since_snapshot = 0;
        self.on_disk = Some(offset);
        Ok(true)
    }

    pub fn expire(&mut self, now_ms: i64) -> usize {
        let expired = self.table.expire(now_ms);
        if expired > 0 {
            self.on_disk = None;
        }
        expired
    }

    pub fn producer(&self, producer_id: i64) -> Option<ProducerEntry> {
        self.table.get(producer_id).cloned()
    }
}

/// A loaded snapshot's entries, as the table takes them.
fn snapshot_entries(mut snap: snapshot::Snapshot, now_ms: i64) -> Vec<ProducerEntry> {
    if snap.version == SnapshotVersion::V1 {
        // Kafka's format has no append wall clock, only record timestamps, which client
        // clocks can skew: count the producers as appended now, so a restart can delay their
        // expiry but never hasten it.
        for entry in &mut snap.entries {
            entry.set_last_append_ms(now_ms);
        }
    }
    snap.entries
}

/// Where the replay for `.txnindex` entries from `txn_from` starts: the newest snapshot at or
/// below it that passes its checks, among those below `window_snapshot` (the ones above were
/// looked at already), and the bad ones met on the way.
#[allow(clippy::type_complexity)]
fn txn_replay_start(
    fs: &dyn FileSystem,
    snapshots: &[(i64, PathBuf)],
    window_snapshot: i64,
    txn_from: i64,
) -> Result<(Option<(i64, snapshot::Snapshot)>, Vec<(i64, PathBuf, SnapshotError)>), IoError> {
    let older: Vec<(i64, PathBuf)> = snapshots
        .iter()
        .filter(|(o, _)| *o < window_snapshot)
        .cloned()
        .collect();
    let choice = snapshot_files::choose_newest(fs, &older, txn_from)?;
    Ok((choice.newest, choice.bad))
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

/// The completed transactions a replay keeps, as [`ReplayWants`] asks.
struct Completions {
    wants: ReplayWants,
    aborted: Vec<AbortedTxn>,
    completed: Vec<CompletedTxn>,
}

impl Completions {
    fn new(wants: ReplayWants) -> Completions {
        Completions {
            wants,
            aborted: Vec::new(),
            completed: Vec::new(),
        }
    }

    fn saw(&mut self, c: CompletedTxn) {
        if c.is_abort
            && self
                .wants
                .txn_index_from
                .is_some_and(|from| c.marker_offset >= from)
        {
            self.aborted.push(c.aborted_entry());
        }
        if c.marker_offset >= self.wants.completed_from {
            self.completed.push(c);
        }
    }
}

/// Applies every batch at or after `from` and starting below `until` to the table, reading
/// only batch headers (and the one record of each marker). Batches of segments that were not
/// validated on open (their bytes were trusted) are checked as they are replayed (CRC and
/// offsets), so damage there never becomes producer state. Replayed batches carry no append wall clock, so they count as
/// appended now: a restart can delay a producer's expiry, never hasten it.
fn replay(
    fs: &dyn FileSystem,
    table: &mut ProducerStateTable,
    segments: &[ReplaySegment<'_>],
    from: i64,
    until: i64,
    now_ms: i64,
    seen: &mut Completions,
) -> Result<u64, LoadError> {
    let mut replayed = 0;
    for segment in segments
        .iter()
        .filter(|s| s.next_offset > from && s.base < until)
    {
        if segment.log_size == 0 {
            continue;
        }
        let file = fs
            .open(segment.path, OpenMode::Read)
            .ctx("open", segment.path)?;
        let map = file
            .map(segment.log_size, MapMode::ReadOnly)
            .ctx("mmap", segment.path)?;
        let data = map.published_slice();
        let start = match segment.batches {
            Some(batches) => {
                let i = batches.partition_point(|b| b.last_offset < from);
                batches.get(i).map_or(data.len(), |b| b.position)
            }
            None => stored_index_start(fs, segment, data, from),
        };
        let bounds = OffsetBounds {
            segment_base: segment.base,
            next_segment_base: segment.next_segment_base,
            dense_from: None,
        };
        let damaged = |position: usize, problem: BatchProblem| LoadError::Damaged {
            path: segment.path.to_path_buf(),
            position,
            problem,
        };
        let mut previous_last = None;
        for item in BatchIter::new(&data[start..]) {
            let (at, batch) = item.map_err(|e| damaged(start + e.position, e.error.into()))?;
            let at = start + at;
            if !segment.validated {
                format::validate_stored_batch(batch.as_bytes())
                    .map_err(|e| damaged(at, e.into()))?;
                bounds
                    .check(batch.base_offset(), batch.last_offset(), previous_last)
                    .map_err(|p| damaged(at, p))?;
                previous_last = Some(batch.last_offset());
            }
            if batch.base_offset() >= until {
                break;
            }
            if batch.last_offset() < from || batch.producer_id() < 0 {
                continue;
            }
            let logged = txn::classify(&batch).map_err(|e| damaged(at, e.into()))?;
            if let Some(logged) = logged {
                if let Some(c) = table.apply(&logged, batch.base_offset(), now_ms) {
                    seen.saw(c);
                }
            }
            replayed += 1;
        }
    }
    Ok(replayed)
}

/// Where replay starts in a segment with stored indexes: the index entry for `from` if it
/// names its batch, else the segment's start.
fn stored_index_start(
    fs: &dyn FileSystem,
    segment: &ReplaySegment<'_>,
    data: &[u8],
    from: i64,
) -> usize {
    let path = names::file_path(
        segment.path.parent().unwrap_or(Path::new(".")),
        segment.base,
        names::INDEX_EXT,
    );
    let Ok(bytes) = crate::io::read_small_file(fs, &path, data.len() as u64 + 8) else {
        return 0;
    };
    let crate::io::SmallFile::Bytes(index) = bytes else {
        return 0;
    };
    offset_index::decode(&index, segment.base)
        .take_while(|e| e.offset <= from)
        .filter(|e| {
            format::RecordBatch::parse(data.get(e.position as usize..).unwrap_or(&[]))
                .is_ok_and(|b| b.last_offset() == e.offset)
        })
        .last()
        .map_or(0, |e| e.position as usize)
}
