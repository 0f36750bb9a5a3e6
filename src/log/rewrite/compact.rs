//! Key compaction: Kafka's log cleaner (docs/kafka-format.md §9.3, docs/design.md "Rewriting the
//! log").
//!
//! A round builds a key → latest offset map over the dirty range (from the cleaner offset to
//! the first uncleanable offset: the last stable offset, the active segment, the compaction
//! lag, the durable end), then rewrites every segment from the log start up to the map's end,
//! in groups, each into one `.cleaned` segment, with Kafka's record and batch rules: a record
//! stays when it is past the map, or the latest of its key with a value, or a tombstone whose
//! horizon has not passed; aborted transactional data goes; markers stay while data of their
//! transaction is seen, then get a horizon; the batch holding an active producer's last
//! sequence, the last batch of the round and the last batch of each group stay (empty if all
//! their records go; oncelog keeps every batch of an active producer's dedup window, Kafka the
//! newest), so sequences survive and each cleaned segment ends where its group ended.
//! A batch nothing changed in is copied byte for byte; otherwise it is rebuilt with its own
//! codec, offsets, producer fields and lastOffsetDelta, and a new CRC.
//!
//! Offsets never move and the producer table is not touched: dedup outlives data, and a
//! snapshot at or after the round's end is durable before any file is swapped, so a restart
//! never replays the cleaned segments to learn a producer.
//!
//! The file protocol, crash safe at every step (recovery: docs/format.md "Leftovers"):
//! 1. `.cleaned` files written and fsynced (a crash: they are removed);
//! 2. the checkpoint raises `dense_from` past the round (the gaps compaction leaves are legal);
//! 3. `.cleaned` → `.swap` in descending base order, directory fsynced (from here recovery
//!    completes the swap; a `.swap` at or above a remaining `.cleaned` is rolled back);
//! 4. the checkpoint records the new segments;
//! 5. the old segment files → `.deleted`;
//! 6. `.swap` → final names, directory fsynced; the new segments replace the old ones in
//!    memory under the segments' write lock (readers holding bytes of the old ones keep them);
//! 7. the cleaner offset is written (`cleaner-offset-checkpoint`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Exclusive;
use crate::format::batch::{ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON};
use crate::format::builder::{reencode_record, write_cleaned_batch};
use crate::format::compression::compress;
use crate::format::{BatchError, BatchIter, Compression, ControlRecordKey, ControlType, RecordBatch};
use crate::io::{File, FileSystem, IoError, IoResultExt, OpenMode};
use crate::log::{checkpoint, cleaner_offset, Log, RewriteError, SegmentRecord};
use crate::segment::{
    self, names, AbortedTxn, BatchInfo, IndexSource, OpenSpec, Opened, Segment, TailInfo,
    TxnSource,
};

/// The file in the partition directory that holds the cleaner offset (`log::cleaner_offset`).
pub use crate::log::cleaner_offset::FILE_NAME as CLEANER_OFFSET_FILE;

/// Bytes one key costs in the key map besides its own bytes (the table slot, the offset, the
/// allocation's header), for the memory bound.
const KEY_ENTRY_OVERHEAD: usize = 48;

/// Where a log stands for the cleaner: what [`Maintenance::cleanable`](crate::Maintenance::cleanable) returns, what a scheduler looks at.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Cleanable {
    /// The cleaner offset: records below it were cleaned (reset to the log start when invalid).
    pub first_dirty_offset: i64,
    /// The first offset the cleaner may not touch: the smallest of the last stable offset, the
    /// active segment's base, the first segment younger than `min_compaction_lag_ms`, and the
    /// durable end.
    pub first_uncleanable_offset: i64,
    /// Bytes of the segments below the cleaner offset.
    pub clean_bytes: u64,
    /// Bytes of the segments from the cleaner offset to the first uncleanable offset.
    pub dirty_bytes: u64,
    /// `dirty_bytes / (clean_bytes + dirty_bytes)`, 0 when both are 0.
    pub dirty_ratio: f64,
    /// Whether a round is due: the log compacts, something is dirty, and the ratio reaches
    /// `min_cleanable_dirty_ratio` or the oldest dirty segment is older than
    /// `max_compaction_lag_ms`.
    pub due: bool,
}

/// What a compaction did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Nothing was written: what a round would keep and remove.
    pub dry_run: bool,
    /// Cleaning passes: more than one when the dirty range held more keys than the map.
    pub passes: u32,
    /// The cleaner offset before and after.
    pub first_dirty_offset: i64,
    /// The cleaner offset after: every record below it was cleaned.
    pub cleaned_to: i64,
    /// Segments rewritten (old) and written (new).
    pub segments_replaced: usize,
    /// Segments written in their place.
    pub segments_written: usize,
    /// Bytes of the segments rewritten, and of what replaced them.
    pub bytes_before: u64,
    /// Bytes written in their place.
    pub bytes_after: u64,
    /// Records read, kept and removed (markers included).
    pub records_read: u64,
    /// Records kept.
    pub records_kept: u64,
    /// Records removed: superseded by a later value of their key, keyless, an expired
    /// tombstone, aborted data, or an expired marker.
    pub records_removed: u64,
    /// Tombstones kept (their horizon not passed), and removed.
    pub tombstones_kept: u64,
    /// Tombstones removed once their batch's delete horizon passed.
    pub tombstones_removed: u64,
    /// Transaction markers kept, and removed.
    pub markers_kept: u64,
    /// Transaction markers removed once their horizon passed.
    pub markers_removed: u64,
    /// Records of aborted transactions removed.
    pub aborted_records_removed: u64,
    /// Batches copied byte for byte, rebuilt, kept as an empty header, and dropped.
    pub batches_copied: u64,
    /// Batches rebuilt (some records removed, or a delete horizon stamped).
    pub batches_rebuilt: u64,
    /// Batches kept as a bare header for their producer's sequence or the round's end.
    pub batches_emptied: u64,
    /// Batches dropped.
    pub batches_removed: u64,
    /// Distinct keys in the largest pass's map, and the map's estimated peak memory.
    pub map_keys: u64,
    /// Estimated peak memory of the key map, bytes.
    pub map_bytes: u64,
}

/// What the cleaner decided for a batch (Kafka's `BatchRetention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retention {
    /// Drop the batch and its records.
    Delete,
    /// Filter its records; drop it if none is left.
    DeleteEmpty,
    /// Filter its records; keep a bare header if none is left.
    RetainEmpty,
}

/// A key → latest offset map, keys compared byte for byte, bounded by memory.
#[derive(Debug, Default)]
pub(crate) struct KeyMap {
    map: HashMap<Box<[u8]>, i64, foldhash::fast::RandomState>,
    bytes: usize,
    limit: usize,
    /// The last offset the map covers: records above it are kept whatever their key.
    latest: i64,
}

impl KeyMap {
    pub(crate) fn new(limit: usize) -> KeyMap {
        KeyMap {
            map: HashMap::default(),
            bytes: 0,
            limit,
            latest: -1,
        }
    }

    /// Records `key` at `offset`; false (and nothing recorded) when a new key does not fit.
    fn put(&mut self, key: &[u8], offset: i64) -> bool {
        if let Some(o) = self.map.get_mut(key) {
            *o = offset;
            return true;
        }
        let cost = key.len() + KEY_ENTRY_OVERHEAD;
        if self.bytes + cost > self.limit {
            return false;
        }
        self.bytes += cost;
        self.map.insert(key.into(), offset);
        true
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        self.map.get(key).copied()
    }
}

/// Kafka's `CleanedTransactionMetadata`: which transactions the pass is inside, to drop
/// aborted data and decide when markers may go.
#[derive(Debug, Default)]
pub(crate) struct TxnTracker {
    /// Aborted transactions not yet reached, by first offset.
    pending: Vec<AbortedTxn>,
    next: usize,
    /// Producers inside an aborted transaction, with whether a batch of it was seen.
    aborted: HashMap<i64, (AbortedTxn, bool)>,
    /// Producers inside a committed (or still open) transaction whose data was seen.
    committed: HashSet<i64>,
}

impl TxnTracker {
    pub(crate) fn new(mut aborted: Vec<AbortedTxn>) -> TxnTracker {
        aborted.sort_by_key(|a| a.first_offset);
        aborted.dedup();
        TxnTracker {
            pending: aborted,
            ..TxnTracker::default()
        }
    }

    fn reach(&mut self, offset: i64) {
        while let Some(a) = self.pending.get(self.next).filter(|a| a.first_offset <= offset) {
            self.aborted.entry(a.producer_id).or_insert((*a, false));
            self.next += 1;
        }
    }

    /// A data batch: whether it belongs to an aborted transaction (and can go).
    fn on_batch(&mut self, b: &RecordBatch<'_>) -> bool {
        self.reach(b.last_offset());
        if !b.is_transactional() {
            return false;
        }
        match self.aborted.get_mut(&b.producer_id()) {
            Some(entry) => {
                entry.1 = true;
                true
            }
            None => {
                self.committed.insert(b.producer_id());
                false
            }
        }
    }

    /// A control batch: whether it can go (once its horizon passed), and the aborted
    /// transaction to carry to the new `.txnindex` when it is an ABORT marker that stays.
    fn on_control(&mut self, b: &RecordBatch<'_>, kind: Option<ControlType>) -> (bool, Option<AbortedTxn>) {
        self.reach(b.last_offset());
        let pid = b.producer_id();
        match kind {
            Some(ControlType::Abort) => match self.aborted.remove(&pid) {
                Some((txn, true)) => (false, Some(txn)),
                _ => (true, None),
            },
            Some(ControlType::Commit) => (!self.committed.remove(&pid), None),
            Some(_) => (false, None),
            // An empty control batch was cleaned before: it can go.
            None => (true, None),
        }
    }
}

/// The producers whose sequences must survive: the last offsets of the batches in each known
/// producer's dedup window, or, for one with no batch, its epoch (Kafka's
/// `lastRecordsOfActiveProducers`, which keeps only the newest batch: oncelog keeps the whole
/// window, as its snapshots do, so a replay over the cleaned log rebuilds every window as it
/// was, docs/design.md "Compaction and producer state").
#[derive(Debug, Default, Clone)]
pub(crate) struct ActiveProducers {
    pub window_last_offsets: HashMap<i64, Vec<i64>>,
    pub epoch_only: HashMap<i64, i16>,
}

impl ActiveProducers {
    fn keeps(&self, b: &RecordBatch<'_>) -> bool {
        if !b.has_producer_id() {
            return false;
        }
        if let Some(window) = self.window_last_offsets.get(&b.producer_id()) {
            return window.contains(&b.last_offset());
        }
        self.epoch_only
            .get(&b.producer_id())
            .is_some_and(|&e| b.is_control() && b.producer_epoch() == e)
    }
}

/// The rules of one pass, shared by its groups.
pub(crate) struct Rules<'a> {
    pub map: &'a KeyMap,
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    pub producers: &'a ActiveProducers,
    /// The first uncleanable offset: the batch ending there is kept (empty if need be).
    pub round_end: i64,
    pub max_decompressed_bytes: usize,
}

/// What [`clean_batch`] made of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Removed,
    Copied,
    Rebuilt,
    Emptied,
}

/// Applies the record and batch rules to one stored batch, appending what is kept to `out`.
/// `group_end` says the batch is the last of its group (kept, empty if need be). Returns what
/// happened and, for a kept ABORT marker, its aborted transaction.
pub(crate) fn clean_batch(
    b: &RecordBatch<'_>,
    rules: &Rules<'_>,
    txns: &mut TxnTracker,
    group_end: bool,
    out: &mut Vec<u8>,
    report: &mut CompactionReport,
) -> Result<(Outcome, Option<AbortedTxn>), BatchError> {
    let records = b.records_buf_limited(rules.max_decompressed_bytes)?;
    let (can_discard, discard_records, carried) = txn_disposition(b, &records, rules, txns)?;
    let retention = if rules.producers.keeps(b) || b.last_offset() + 1 == rules.round_end || group_end {
        Retention::RetainEmpty
    } else if discard_records {
        Retention::Delete
    } else {
        Retention::DeleteEmpty
    };
    let count = b.records_count().max(0) as u64;
    report.records_read += count;
    let marker_batch = b.is_control();
    if retention == Retention::Delete {
        report.records_removed += count;
        if marker_batch {
            report.markers_removed += count;
        } else {
            report.aborted_records_removed += count;
        }
        report.batches_removed += 1;
        return Ok((Outcome::Removed, None));
    }
    let has_horizon = b.has_delete_horizon();
    let horizon = b.base_timestamp();
    let KeptRecords {
        kept,
        all_kept,
        tombstones,
    } = kept_records(b, &records, rules, discard_records, report)?;
    if kept.is_empty() {
        if retention == Retention::RetainEmpty {
            write_empty_header(b, out);
            report.batches_emptied += 1;
            return Ok((Outcome::Emptied, carried.filter(|_| marker_batch)));
        }
        report.batches_removed += 1;
        return Ok((Outcome::Removed, None));
    }
    let needs_horizon = (tombstones || (can_discard && marker_batch)) && !has_horizon;
    if all_kept && !needs_horizon {
        out.extend_from_slice(b.as_bytes());
        report.batches_copied += 1;
        return Ok((Outcome::Copied, carried));
    }
    let horizon = if needs_horizon {
        Some(rules.now_ms.saturating_add(rules.delete_retention_ms))
    } else if has_horizon {
        Some(horizon)
    } else {
        None
    };
    rebuild(b, &kept, horizon, out)?;
    report.batches_rebuilt += 1;
    Ok((Outcome::Rebuilt, carried))
}

/// What the transaction rules make of a batch: whether its transaction lets it be discarded,
/// whether its records go now, and, for a control batch, the aborted transaction it carries.
fn txn_disposition(
    b: &RecordBatch<'_>,
    records: &[u8],
    rules: &Rules<'_>,
    txns: &mut TxnTracker,
) -> Result<(bool, bool, Option<AbortedTxn>), BatchError> {
    let mut carried = None;
    let (can_discard, discard_records) = if b.is_control() {
        let kind = match b.iter_records(records).next() {
            Some(r) => {
                let r = r?;
                Some(
                    ControlRecordKey::decode(r.key.unwrap_or(&[]))
                        .map_err(|e| BatchError::InvalidMarker { producer_id: b.producer_id(), reason: e })?
                        .control_type,
                )
            }
            None => None,
        };
        let (can, txn) = txns.on_control(b, kind);
        carried = txn;
        let horizon_passed = b.has_delete_horizon() && b.base_timestamp() <= rules.now_ms;
        (can, can && horizon_passed)
    } else {
        let aborted = txns.on_batch(b);
        (aborted, aborted)
    };
    Ok((can_discard, discard_records, carried))
}

/// The records of a batch that stay.
struct KeptRecords<'a> {
    kept: Vec<crate::format::Record<'a>>,
    /// No record went.
    all_kept: bool,
    /// A kept record is a tombstone.
    tombstones: bool,
}

/// Which records of a batch stay (all of them go when `discard_records`), counted in `report`.
fn kept_records<'a>(
    b: &RecordBatch<'_>,
    records: &'a [u8],
    rules: &Rules<'_>,
    discard_records: bool,
    report: &mut CompactionReport,
) -> Result<KeptRecords<'a>, BatchError> {
    let count = b.records_count().max(0) as u64;
    let marker_batch = b.is_control();
    let has_horizon = b.has_delete_horizon();
    let horizon = b.base_timestamp();
    // Which records stay.
    let mut kept: Vec<crate::format::Record<'_>> = Vec::new();
    let mut all_kept = true;
    let mut tombstones = false;
    for r in b.iter_records(records) {
        let r = r?;
        let keep = if discard_records {
            false
        } else if marker_batch || r.offset > rules.map.latest {
            true
        } else if let Some(key) = r.key {
            let latest = rules.map.get(key).is_none_or(|o| r.offset >= o);
            let retain_deletes = !has_horizon || rules.now_ms < horizon;
            latest && (r.value.is_some() || retain_deletes)
        } else {
            false
        };
        if keep {
            tombstones |= r.value.is_none() && !marker_batch;
            if r.value.is_none() && !marker_batch {
                report.tombstones_kept += 1;
            }
            kept.push(r);
        } else {
            all_kept = false;
            if r.value.is_none() && r.key.is_some() && !marker_batch && !discard_records {
                report.tombstones_removed += 1;
            }
            if discard_records && !marker_batch {
                report.aborted_records_removed += 1;
            }
            if marker_batch {
                report.markers_removed += 1;
            }
        }
    }
    report.records_kept += kept.len() as u64;
    report.records_removed += count - kept.len() as u64;
    if marker_batch {
        report.markers_kept += kept.len() as u64;
    }
    Ok(KeptRecords {
        kept,
        all_kept,
        tombstones,
    })
}

/// Kafka's `writeEmptyHeader`: the original's offsets, producer fields, flags and maxTimestamp,
/// no records, baseTimestamp -1, uncompressed.
fn write_empty_header(b: &RecordBatch<'_>, out: &mut Vec<u8>) {
    let attrs = b.attributes() & !(ATTR_COMPRESSION_MASK | ATTR_DELETE_HORIZON);
    write_cleaned_batch(b, attrs, -1, b.max_timestamp(), 0, &[], out);
}

/// Kafka's `buildRetainedRecordsInto`: the kept records with their own offsets, the original's
/// header fields and lastOffsetDelta, its codec; baseTimestamp is the horizon when there is one,
/// else the first kept record's timestamp.
fn rebuild(
    b: &RecordBatch<'_>,
    kept: &[crate::format::Record<'_>],
    horizon: Option<i64>,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    let base_ts = horizon.unwrap_or(kept[0].timestamp);
    let mut raw = Vec::with_capacity(kept.iter().map(|r| r.encoded_size + 8).sum());
    for r in kept {
        reencode_record(r, base_ts, &mut raw);
    }
    let codec_id = (b.attributes() & ATTR_COMPRESSION_MASK) as u8;
    let codec = Compression::from_id(codec_id).ok_or(BatchError::UnknownCompression { codec: codec_id })?;
    let payload = if codec == Compression::None {
        raw
    } else {
        compress(codec, &raw)?
    };
    let max_ts = match b.timestamp_type() {
        crate::format::TimestampType::LogAppendTime => b.max_timestamp(),
        crate::format::TimestampType::CreateTime => kept.iter().map(|r| r.timestamp).max().unwrap_or(-1),
    };
    let mut attrs = b.attributes() & !ATTR_DELETE_HORIZON;
    if horizon.is_some() {
        attrs |= ATTR_DELETE_HORIZON;
    }
    write_cleaned_batch(b, attrs, base_ts, max_ts, kept.len() as i32, &payload, out);
    Ok(())
}

/// A segment written by a round, not yet swapped in.
#[derive(Debug)]
/// A group's `.cleaned` file as it is written (no file in a dry run).
struct CleanedFile {
    file: Option<Box<dyn File>>,
    path: PathBuf,
    written: usize,
    batches: Vec<BatchInfo>,
    txn_entries: Vec<AbortedTxn>,
    /// The header digest of the batches written.
    headers: u32,
}

impl CleanedFile {
    /// Appends a kept batch, cleaned from the batch at `position` in `s`; `carried` is the
    /// aborted transaction of a kept ABORT marker.
    fn push(
        &mut self,
        out: &[u8],
        carried: Option<AbortedTxn>,
        s: &Segment,
        position: usize,
    ) -> Result<(), RewriteError> {
        let kept = RecordBatch::parse(out).map_err(|e| corrupt(s, position, e))?;
        self.batches.push(BatchInfo {
            position: self.written,
            size: out.len(),
            base_offset: kept.base_offset(),
            last_offset: kept.last_offset(),
            max_timestamp: kept.max_timestamp(),
            partition_leader_epoch: kept.partition_leader_epoch(),
            is_marker: kept.is_control(),
        });
        if let Some(t) = carried {
            self.txn_entries.push(t);
        }
        self.headers = segment::digest::chain_header(self.headers, out);
        if let Some(f) = &self.file {
            f.write_all_at(out, self.written as u64)
                .ctx("write", &self.path)?;
        }
        self.written += out.len();
        Ok(())
    }
}

struct Cleaned {
    base: i64,
    /// The old segments it replaces.
    replaces: Vec<Arc<Segment>>,
    size: usize,
    next_offset: i64,
    batches: Vec<BatchInfo>,
    txn: Vec<AbortedTxn>,
    /// The header digest of its batches, for the checkpoint's record of it.
    headers: u32,
}

fn suffixed(dir: &Path, base: i64, ext: &str, suffix: &str) -> PathBuf {
    dir.join(format!("{}.{suffix}", names::file_name(base, ext)))
}

impl Log {
    /// The work of [`Maintenance::cleanable`](crate::Maintenance::cleanable).
    pub(crate) fn cleanable(&self, now_ms: i64) -> Cleanable {
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        self.cleanable_of(&segments, now_ms)
    }

    fn cleanable_of(&self, segments: &[Arc<Segment>], now_ms: i64) -> Cleanable {
        let c = &self.config().compaction;
        let log_start = segments.first().map_or(0, |s| s.base_offset()).max(self.log_start_offset());
        let active_base = segments.last().map_or(0, |s| s.base_offset());
        let mut uncleanable = self
            .last_stable_offset()
            .min(active_base)
            .min(self.recovery_point())
            .min(self.high_watermark());
        if c.min_compaction_lag_ms > 0 {
            if let Some(s) = segments.iter().find(|s| {
                s.base_offset() < uncleanable
                    && s.max_timestamp() > now_ms.saturating_sub(c.min_compaction_lag_ms)
            }) {
                uncleanable = uncleanable.min(s.base_offset());
            }
        }
        let stored = cleaner_offset::read(self.env.fs.as_ref(), &self.dir);
        let first_dirty = match stored {
            Some(o) if o >= log_start && o <= uncleanable => o,
            _ => log_start,
        };
        let uncleanable = uncleanable.max(first_dirty);
        let mut clean = 0u64;
        let mut dirty = 0u64;
        let mut oldest_dirty_ts = None;
        for (i, s) in segments.iter().enumerate() {
            let next = segments.get(i + 1).map_or(s.next_offset(), |n| n.base_offset());
            if next <= first_dirty {
                clean += s.size() as u64;
            } else if s.base_offset() < uncleanable {
                dirty += s.size() as u64;
                if oldest_dirty_ts.is_none() {
                    oldest_dirty_ts = Some(first_batch_timestamp(s));
                }
            }
        }
        let ratio = if clean + dirty == 0 {
            0.0
        } else {
            dirty as f64 / (clean + dirty) as f64
        };
        let lagging = oldest_dirty_ts
            .is_some_and(|ts| ts >= 0 && now_ms.saturating_sub(ts) > c.max_compaction_lag_ms);
        Cleanable {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: uncleanable,
            clean_bytes: clean,
            dirty_bytes: dirty,
            dirty_ratio: ratio,
            due: self.config().cleanup_policy.compacts()
                && dirty > 0
                && (ratio >= c.min_cleanable_dirty_ratio || lagging),
        }
    }

    /// The work of [`Maintenance::compact`](crate::Maintenance::compact).
    pub(crate) fn compact(&self, now_ms: i64) -> Result<CompactionReport, RewriteError> {
        self.compact_inner(now_ms, false)
    }

    /// The work of [`Maintenance::compact_dry_run`](crate::Maintenance::compact_dry_run).
    pub(crate) fn compact_dry_run(&self, now_ms: i64) -> Result<CompactionReport, RewriteError> {
        self.compact_inner(now_ms, true)
    }

    fn compact_inner(&self, now_ms: i64, dry_run: bool) -> Result<CompactionReport, RewriteError> {
        if !self.config().cleanup_policy.compacts() {
            return Err(RewriteError::NotCompacted {
                policy: self.config().cleanup_policy.name(),
            });
        }
        // Everything the round may read is made durable first: only durable segments are
        // rewritten, and the snapshots rolls left pending are finished.
        if !dry_run {
            self.flush()?;
        }
        let mut ex = self.exclusive()?;
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let cleanable = self.cleanable_of(&segments, now_ms);
        let mut report = CompactionReport {
            dry_run,
            first_dirty_offset: cleanable.first_dirty_offset,
            cleaned_to: cleanable.first_dirty_offset,
            ..CompactionReport::default()
        };
        let uncleanable = cleanable.first_uncleanable_offset;
        let mut first_dirty = cleanable.first_dirty_offset;
        while first_dirty < uncleanable {
            let end = self.compaction_pass(&mut ex, first_dirty, uncleanable, now_ms, dry_run, &mut report)?;
            report.passes += 1;
            report.cleaned_to = end;
            if end <= first_dirty {
                break;
            }
            first_dirty = end;
            if dry_run {
                // A dry run reports the first pass: later ones would read what it rewrote.
                break;
            }
        }
        drop(ex);
        if !dry_run {
            self.remove_due_deletions(now_ms, false)?;
            self.trim_dead_tails_locking()?;
        }
        Ok(report)
    }

    /// One pass: map, groups, rules, swap. Returns the map's end (the new cleaner offset).
    fn compaction_pass(
        &self,
        ex: &mut Exclusive<'_>,
        first_dirty: i64,
        uncleanable: i64,
        now_ms: i64,
        dry_run: bool,
        report: &mut CompactionReport,
    ) -> Result<i64, RewriteError> {
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let all_aborted: Vec<AbortedTxn> = segments.iter().flat_map(|s| s.txn_index().entries()).collect();
        let aborted_in = |lo: i64, hi: i64| -> Vec<AbortedTxn> {
            all_aborted
                .iter()
                .filter(|a| a.last_offset >= lo && a.first_offset < hi)
                .copied()
                .collect()
        };
        // 1. The key map over the dirty range.
        let txns = TxnTracker::new(aborted_in(first_dirty, uncleanable));
        let map = self.dirty_key_map(&segments, first_dirty, uncleanable, txns)?;
        let end = map.latest + 1;
        report.map_keys = report.map_keys.max(map.map.len() as u64);
        report.map_bytes = report.map_bytes.max(map.bytes as u64);

        // 2. Groups: from the log start up to the map's end, sealed, durable, non-empty.
        let groups = self.cleanable_groups(ex, &segments, end, uncleanable)?;

        let producers = Self::active_producers(ex);
        let rules = Rules {
            map: &map,
            now_ms,
            delete_retention_ms: self.config().compaction.delete_retention_ms,
            producers: &producers,
            round_end: uncleanable,
            max_decompressed_bytes: self.config().max_decompressed_bytes,
        };
        let range_end = groups
            .last()
            .and_then(|g| g.last())
            .map_or(0, |s| s.next_offset());
        let range_start = groups.first().map_or(0, |g| g[0].base_offset());
        let txns = TxnTracker::new(aborted_in(range_start, range_end));
        let cleaned = self.clean_groups(&groups, &rules, txns, dry_run, report)?;
        if dry_run || cleaned.is_empty() {
            return Ok(end);
        }
        if let Err(e) = self.swap_in(ex, cleaned, end, now_ms, report) {
            // The files may be between the old segments and the new ones (recovery settles
            // that on the next open), but this process's view of them is not: nothing more
            // may be written.
            ex.st.failure = Some(Arc::new(IoError::new(
                "compact",
                &self.dir,
                std::io::Error::other(format!("a compaction failed part way: {e}")),
            )));
            return Err(e);
        }
        Ok(end)
    }

    /// The key map over the dirty range `[first_dirty, uncleanable)`: each key's latest offset,
    /// up to as many keys as fit; `map.latest` says how far it covers.
    fn dirty_key_map(
        &self,
        segments: &[Arc<Segment>],
        first_dirty: i64,
        uncleanable: i64,
        mut txns: TxnTracker,
    ) -> Result<KeyMap, RewriteError> {
        let mut map = KeyMap::new(self.config().compaction.key_map_bytes);
        let max_dec = self.config().max_decompressed_bytes;
        let mut full = false;
        'segments: for s in segments.iter().filter(|s| s.next_offset() > first_dirty && s.base_offset() < uncleanable) {
            let view = s.view()?;
            let mut iter = BatchIter::new(view.data());
            loop {
                let (position, b) = match iter.next() {
                    None => break,
                    Some(Ok(pb)) => pb,
                    Some(Err(e)) => return Err(corrupt(s, e.position, e.error)),
                };
                if b.last_offset() >= uncleanable {
                    break 'segments;
                }
                b.verify_crc().map_err(|e| corrupt(s, position, e))?;
                if b.last_offset() < first_dirty {
                    continue;
                }
                if b.is_control() {
                    let kind = control_kind(&b, max_dec).map_err(|e| corrupt(s, position, e))?;
                    txns.on_control(&b, kind);
                } else if !txns.on_batch(&b) {
                    let records = b.records_buf_limited(max_dec).map_err(|e| corrupt(s, position, e))?;
                    for r in b.iter_records(&records) {
                        let r = r.map_err(|e| corrupt(s, position, e))?;
                        if let Some(key) = r.key.filter(|_| r.offset >= first_dirty) {
                            if !map.put(key, r.offset) {
                                full = true;
                                break 'segments;
                            }
                        }
                    }
                }
                map.latest = b.last_offset();
            }
            if !full {
                let next = segments
                    .iter()
                    .find(|n| n.base_offset() > s.base_offset())
                    .map_or(uncleanable, |n| n.base_offset())
                    .min(uncleanable);
                map.latest = map.latest.max(next - 1);
            }
        }
        if full && map.latest < first_dirty {
            // Not one batch's keys fit: the map is too small for this log.
            return Err(RewriteError::KeyMapTooSmall {
                key_map_bytes: self.config().compaction.key_map_bytes,
                offset: first_dirty,
            });
        }
        Ok(map)
    }

    /// The segments a pass may clean, in groups: from the log start up to `end`, sealed,
    /// durable, non-empty.
    fn cleanable_groups(
        &self,
        ex: &Exclusive<'_>,
        segments: &[Arc<Segment>],
        end: i64,
        uncleanable: i64,
    ) -> Result<Vec<Vec<Arc<Segment>>>, RewriteError> {
        let active_base = segments.last().map_or(0, |s| s.base_offset());
        let candidates: Vec<Arc<Segment>> = segments
            .iter()
            .filter(|s| s.base_offset() < end && s.base_offset() < active_base)
            .take_while(|s| {
                s.next_offset() <= self.recovery_point()
                    && !ex
                        .st
                        .unflushed_sealed
                        .iter()
                        .any(|u| u.base_offset() == s.base_offset())
            })
            .cloned()
            .collect();
        Ok(group_segments(&candidates, &self.config(), uncleanable)?)
    }

    /// Writes every group's `.cleaned` files; on an error, removes those written so far.
    fn clean_groups(
        &self,
        groups: &[Vec<Arc<Segment>>],
        rules: &Rules<'_>,
        mut txns: TxnTracker,
        dry_run: bool,
        report: &mut CompactionReport,
    ) -> Result<Vec<Cleaned>, RewriteError> {
        let fs = self.env.fs.as_ref();
        let mut cleaned: Vec<Cleaned> = Vec::new();
        for group in groups {
            let first = group[0].base_offset();
            match self.clean_group(group, rules, &mut txns, dry_run, report) {
                Ok(c) => cleaned.push(c),
                Err(e) => {
                    if !dry_run {
                        for c in cleaned.iter().map(|c| c.base).chain(std::iter::once(first)) {
                            remove_cleaned(fs, &self.dir, c);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(cleaned)
    }

    /// The producers whose last batch must stay.
    fn active_producers(ex: &Exclusive<'_>) -> ActiveProducers {
        let mut producers = ActiveProducers::default();
        for e in ex.st.producers.table().iter() {
            if e.newest_batch().is_some() {
                let window = e.batches().map(|b| b.last_offset).collect();
                producers.window_last_offsets.insert(e.producer_id(), window);
            } else {
                producers.epoch_only.insert(e.producer_id(), e.epoch());
            }
        }
        producers
    }

    /// Writes one group's `.cleaned` files (nothing in a dry run).
    fn clean_group(
        &self,
        group: &[Arc<Segment>],
        rules: &Rules<'_>,
        txns: &mut TxnTracker,
        dry_run: bool,
        report: &mut CompactionReport,
    ) -> Result<Cleaned, RewriteError> {
        let fs = self.env.fs.as_ref();
        let base = group[0].base_offset();
        let log_path = suffixed(&self.dir, base, names::LOG_EXT, names::CLEANED_SUFFIX);
        let file: Option<Box<dyn File>> = if dry_run {
            None
        } else {
            Some(fs.open(&log_path, OpenMode::CreateTruncate).ctx("create", &log_path)?)
        };
        let mut out = Vec::new();
        let mut w = CleanedFile {
            file,
            path: log_path,
            written: 0,
            batches: Vec::new(),
            txn_entries: Vec::new(),
            headers: 0,
        };
        let mut next_offset = base;
        for (si, s) in group.iter().enumerate() {
            report.bytes_before += s.size() as u64;
            report.segments_replaced += 1;
            let view = s.view()?;
            let mut iter = BatchIter::new(view.data());
            loop {
                let (position, b) = match iter.next() {
                    None => break,
                    Some(Ok(pb)) => pb,
                    Some(Err(e)) => return Err(corrupt(s, e.position, e.error)),
                };
                b.verify_crc().map_err(|e| corrupt(s, position, e))?;
                let group_end = si + 1 == group.len() && position + b.size() == view.data().len();
                out.clear();
                let (outcome, carried) = clean_batch(&b, rules, txns, group_end, &mut out, report)
                    .map_err(|e| corrupt(s, position, e))?;
                next_offset = b.last_offset() + 1;
                if outcome == Outcome::Removed {
                    continue;
                }
                w.push(&out, carried, s, position)?;
            }
        }
        let CleanedFile {
            file,
            path: log_path,
            written,
            batches,
            txn_entries,
            headers,
        } = w;
        report.bytes_after += written as u64;
        report.segments_written += 1;
        if let Some(f) = &file {
            f.sync_data().ctx("fdatasync", &log_path)?;
            // Written even when empty: recovery takes a swapped-in segment's aborted
            // transactions from it, never from the old segment's file of the same name.
            let txn_path = suffixed(&self.dir, base, names::TXN_INDEX_EXT, names::CLEANED_SUFFIX);
            let bytes: Vec<u8> = txn_entries.iter().flat_map(|e| e.encode()).collect();
            crate::io::write_file_synced(fs, &txn_path, &bytes)?;
        }
        Ok(Cleaned {
            base,
            replaces: group.to_vec(),
            size: written,
            next_offset,
            batches,
            txn: txn_entries,
            headers,
        })
    }

    /// Steps 2-7 of the protocol.
    fn swap_in(
        &self,
        ex: &mut Exclusive<'_>,
        mut cleaned: Vec<Cleaned>,
        end: i64,
        now_ms: i64,
        _report: &mut CompactionReport,
    ) -> Result<(), RewriteError> {
        let fs = self.env.fs.as_ref();
        let dir = &self.dir;
        // Producer state durable at or after the round: a restart replays from the newest
        // snapshot and never needs the cleaned batches to know a producer.
        for pending in ex.st.producers.take_pending() {
            pending.finish(fs)?;
        }
        let newest = crate::producer::snapshot_files::list(fs, dir)?
            .last()
            .map(|(o, _)| *o);
        if newest.is_none_or(|o| o < end) {
            let at = self.log_end_offset();
            ex.st.producers.write_snapshot(fs, dir, at)?;
        }
        // 2. The gaps below the round's end are legal from now on.
        let all: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        ex.st.dense_from = ex.st.dense_from.max(end);
        let intent = self.checkpoint_of(&ex.st, &all, self.recovery_point(), self.log_start_offset());
        self.store_checkpoint(&mut ex.st, &intent)?;
        // 3. `.cleaned` → `.swap`, highest base first.
        cleaned.sort_by_key(|c| std::cmp::Reverse(c.base));
        for c in &cleaned {
            for ext in [names::LOG_EXT, names::TXN_INDEX_EXT] {
                let from = suffixed(dir, c.base, ext, names::CLEANED_SUFFIX);
                let to = suffixed(dir, c.base, ext, names::SWAP_SUFFIX);
                fs.rename(&from, &to).ctx("rename", &from)?;
            }
        }
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
        cleaned.reverse();
        // 4. The checkpoint records the new segments in place of the old.
        let c = self.swapped_checkpoint(intent, &cleaned);
        self.store_checkpoint(&mut ex.st, &c)?;
        // 5. The old segments' files go, durably before any `.swap` takes a final name: a
        //    segment of the old log left next to the new ones would not be in the record.
        for n in &cleaned {
            for s in &n.replaces {
                self.retire_segment_files(s.base_offset(), now_ms, None)?;
            }
        }
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
        // 6. `.swap` → final names; a segment's `.txnindex` before its `.log`, so a `.log.swap`
        //    left by a crash still covers the index swaps recovery completes with it.
        for n in &cleaned {
            for ext in [names::TXN_INDEX_EXT, names::LOG_EXT] {
                let from = suffixed(dir, n.base, ext, names::SWAP_SUFFIX);
                let to = names::file_path(dir, n.base, ext);
                fs.rename(&from, &to).ctx("rename", &from)?;
            }
        }
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
        let opened = self.open_cleaned(&cleaned, now_ms)?;
        {
            let mut map = self.segments.write();
            for n in &cleaned {
                for s in &n.replaces {
                    map.remove(&s.base_offset());
                }
            }
            for s in opened {
                map.insert(s.base_offset(), s);
            }
        }
        // 7. The cleaner offset.
        cleaner_offset::write(fs, dir, end)?;
        Ok(())
    }

    /// The checkpoint `intent` with the new segments recorded in place of those they replace.
    fn swapped_checkpoint(&self, intent: checkpoint::Checkpoint, cleaned: &[Cleaned]) -> checkpoint::Checkpoint {
        let mut c = intent;
        if let Some(record) = c.segments.as_mut() {
            let replaced: HashSet<i64> = cleaned
                .iter()
                .flat_map(|c| c.replaces.iter().map(|s| s.base_offset()))
                .collect();
            record.retain(|r| !replaced.contains(&r.base_offset));
            for n in cleaned {
                // Opening the new segment rebuilds its indexes through a writer, which
                // preallocates the `.log` until it is sealed: a crash in between leaves zeros
                // after the batches, dead bytes recovery trims.
                let mut r = SegmentRecord::exact(n.base, n.next_offset, n.size as u64);
                r.file_len = r.file_len.max(self.config().segment_bytes as u64);
                r.digest = Some(segment::SealDigest::new(n.headers, &n.txn));
                record.push(r);
            }
            record.sort_by_key(|r| r.base_offset);
        }
        c
    }

    /// Opens the swapped-in segments, their indexes rebuilt and made durable.
    fn open_cleaned(&self, cleaned: &[Cleaned], now_ms: i64) -> Result<Vec<Arc<Segment>>, RewriteError> {
        let dir = &self.dir;
        let cfg = self.segment_config();
        let mut opened = Vec::new();
        for n in cleaned {
            let spec = OpenSpec {
                base_offset: n.base,
                log_size: n.size,
                active: false,
                indexes: IndexSource::Rebuild(&n.batches),
                tail: TailInfo::from_batches(&n.batches),
                txn: TxnSource::Stored(&n.txn),
            };
            let seg = match segment::open(dir, &cfg, spec, now_ms) {
                Ok(Opened::Sealed(s)) => s,
                Ok(Opened::Active(_)) => unreachable!("opened sealed"),
                Err(segment::OpenSegmentError::Io(e)) => return Err(e.into()),
                Err(segment::OpenSegmentError::Corrupt(e)) => return Err(e.into()),
                Err(segment::OpenSegmentError::Index { path, error }) => {
                    return Err(IoError::new("rebuild index", &path, std::io::Error::other(error.to_string())).into())
                }
            };
            // The empty segment of a group whose every batch went keeps its place: its
            // offsets still end where the group's did.
            seg.set_next_offset(n.next_offset.max(seg.next_offset()));
            seg.set_header_digest(n.size, n.headers);
            seg.flush_all()?;
            seg.mark_validated();
            opened.push(seg);
        }
        Ok(opened)
    }
}

/// The first batch's max timestamp (-1 when it cannot be read: the lag then counts it old).
fn first_batch_timestamp(s: &Segment) -> i64 {
    s.view().ok().map_or(-1, |v| {
        RecordBatch::parse(v.data()).map_or(-1, |b| b.max_timestamp())
    })
}

fn control_kind(b: &RecordBatch<'_>, max: usize) -> Result<Option<ControlType>, BatchError> {
    let records = b.records_buf_limited(max)?;
    match b.iter_records(&records).next() {
        None => Ok(None),
        Some(r) => {
            let r = r?;
            Ok(Some(
                ControlRecordKey::decode(r.key.unwrap_or(&[]))
                    .map_err(|e| BatchError::InvalidMarker { producer_id: b.producer_id(), reason: e })?
                    .control_type,
            ))
        }
    }
}

fn corrupt(s: &Segment, position: usize, error: BatchError) -> RewriteError {
    RewriteError::CompactionCorrupt {
        path: s.log_path().to_path_buf(),
        position,
        error,
    }
}

fn remove_cleaned(fs: &dyn FileSystem, dir: &Path, base: i64) {
    for ext in [names::LOG_EXT, names::TXN_INDEX_EXT] {
        // Best effort on a failure path: the next open removes `.cleaned` files anyway.
        let _ = fs.remove_file(&suffixed(dir, base, ext, names::CLEANED_SUFFIX));
    }
}

/// Kafka's `groupSegmentsBySize`: consecutive segments whose `.log`s fit `segment_bytes`, whose
/// indexes fit `segment_index_bytes`, and whose offsets fit an int32 from the group's base. An
/// empty segment is never grouped (it ends the group before it and is left alone).
pub(crate) fn group_segments(
    segments: &[Arc<Segment>],
    config: &crate::log::LogConfig,
    uncleanable: i64,
) -> Result<Vec<Vec<Arc<Segment>>>, IoError> {
    let mut groups: Vec<Vec<Arc<Segment>>> = Vec::new();
    let mut i = 0;
    while i < segments.len() {
        if segments[i].is_empty() {
            i += 1;
            continue;
        }
        let mut group = vec![Arc::clone(&segments[i])];
        let mut log = segments[i].size() as u64;
        let mut index = index_bytes(&segments[i])?;
        let mut time = time_bytes(&segments[i])?;
        i += 1;
        while let Some(next) = segments.get(i) {
            let last_offset = segments
                .get(i + 1)
                .map_or(uncleanable - 1, |n| n.base_offset() - 1)
                .max(next.next_offset() - 1);
            if next.is_empty()
                || log + next.size() as u64 > config.segment_bytes as u64
                || index + index_bytes(next)? > config.segment_index_bytes as u64
                || time + time_bytes(next)? > config.segment_index_bytes as u64
                || last_offset - group[0].base_offset() > i32::MAX as i64
            {
                break;
            }
            log += next.size() as u64;
            index += index_bytes(next)?;
            time += time_bytes(next)?;
            group.push(Arc::clone(next));
            i += 1;
        }
        groups.push(group);
    }
    Ok(groups)
}

fn index_bytes(s: &Segment) -> Result<u64, IoError> {
    Ok((s.view()?.offset_index().len() * segment::offset_index::ENTRY_SIZE) as u64)
}

fn time_bytes(s: &Segment) -> Result<u64, IoError> {
    Ok((s.view()?.time_index().len() * segment::time_index::ENTRY_SIZE) as u64)
}

#[cfg(test)]
mod tests {
    //! Kafka's record and batch rules (docs/kafka-format.md §9.3), one case each.
    use super::*;
    use crate::format::{end_txn_marker, BatchBuilder};

    const NOW: i64 = 1_000_000;
    const RETENTION: i64 = 500;

    /// A batch at `base` of `(key, value)` records; `producer` sets pid (epoch 0, seq = base).
    fn batch(
        base: i64,
        records: &[(Option<&str>, Option<&str>)],
        producer: Option<i64>,
        transactional: bool,
        codec: Compression,
        horizon: Option<i64>,
    ) -> Vec<u8> {
        let mut b = BatchBuilder::new()
            .base_offset(base)
            .compression(codec)
            .transactional(transactional);
        if let Some(h) = horizon {
            b = b.delete_horizon(h);
        }
        if let Some(pid) = producer {
            b = b.producer(pid, 0, base as i32);
        }
        for (i, (k, v)) in records.iter().enumerate() {
            b.append(
                100 + i as i64,
                k.map(str::as_bytes),
                v.map(str::as_bytes),
                &[],
            );
        }
        b.build().unwrap()
    }

    fn plain(base: i64, records: &[(Option<&str>, Option<&str>)]) -> Vec<u8> {
        batch(base, records, None, false, Compression::None, None)
    }

    struct Case {
        map: KeyMap,
        producers: ActiveProducers,
        round_end: i64,
        txns: TxnTracker,
        now: i64,
    }

    impl Case {
        fn new(keys: &[(&str, i64)], latest: i64) -> Case {
            let mut map = KeyMap::new(1 << 20);
            for (k, o) in keys {
                map.put(k.as_bytes(), *o);
            }
            map.latest = latest;
            Case {
                map,
                producers: ActiveProducers::default(),
                round_end: 1_000,
                txns: TxnTracker::new(Vec::new()),
                now: NOW,
            }
        }

        fn clean(&mut self, bytes: &[u8], group_end: bool) -> (Outcome, Vec<u8>, CompactionReport) {
            let rules = Rules {
                map: &self.map,
                now_ms: self.now,
                delete_retention_ms: RETENTION,
                producers: &self.producers,
                round_end: self.round_end,
                max_decompressed_bytes: 1 << 20,
            };
            let b = RecordBatch::parse(bytes).unwrap();
            let mut out = Vec::new();
            let mut report = CompactionReport::default();
            let (outcome, _) =
                clean_batch(&b, &rules, &mut self.txns, group_end, &mut out, &mut report).unwrap();
            (outcome, out, report)
        }
    }

    fn offsets(bytes: &[u8]) -> Vec<i64> {
        let b = RecordBatch::parse(bytes).unwrap();
        let buf = b.records_buf().unwrap();
        b.iter_records(&buf).map(|r| r.unwrap().offset).collect()
    }

    #[test]
    fn a_record_past_the_map_stays_and_an_unchanged_batch_is_copied() {
        let mut c = Case::new(&[("a", 50)], 9);
        let b = plain(10, &[(Some("a"), Some("x"))]);
        let (o, out, _) = c.clean(&b, false);
        assert_eq!(o, Outcome::Copied);
        assert_eq!(out, b);
    }

    #[test]
    fn a_superseded_record_goes_and_the_batch_is_rebuilt_with_its_offsets() {
        let mut c = Case::new(&[("a", 11), ("b", 10)], 20);
        let b = plain(10, &[(Some("a"), Some("old")), (Some("b"), Some("y")), (Some("a"), Some("new"))]);
        let (o, out, r) = c.clean(&b, false);
        assert_eq!(o, Outcome::Rebuilt);
        let rb = RecordBatch::parse(&out).unwrap();
        assert!(rb.is_crc_valid());
        assert_eq!((rb.base_offset(), rb.last_offset(), rb.records_count()), (10, 12, 2));
        assert_eq!(offsets(&out), vec![11, 12]);
        assert_eq!(r.records_removed, 1);
    }

    #[test]
    fn keyless_records_go() {
        let mut c = Case::new(&[], 20);
        let (o, _, _) = c.clean(&plain(10, &[(None, Some("v"))]), false);
        assert_eq!(o, Outcome::Removed);
    }

    #[test]
    fn a_tombstone_gets_the_horizon_and_goes_once_it_passed() {
        let mut c = Case::new(&[("a", 10)], 20);
        let (o, out, r) = c.clean(&plain(10, &[(Some("a"), None)]), false);
        assert_eq!((o, r.tombstones_kept), (Outcome::Rebuilt, 1));
        let rb = RecordBatch::parse(&out).unwrap();
        assert!(rb.has_delete_horizon());
        assert_eq!(rb.base_timestamp(), NOW + RETENTION);
        // Its record keeps its own timestamp against the new base.
        let buf = rb.records_buf().unwrap();
        assert_eq!(rb.iter_records(&buf).next().unwrap().unwrap().timestamp, 100);
        // Not passed: copied as it is; passed: removed.
        let before = batch(10, &[(Some("a"), None)], None, false, Compression::None, Some(NOW + 1));
        assert_eq!(c.clean(&before, false).0, Outcome::Copied);
        let after = batch(10, &[(Some("a"), None)], None, false, Compression::None, Some(NOW));
        let (o, _, r) = c.clean(&after, false);
        assert_eq!((o, r.tombstones_removed), (Outcome::Removed, 1));
    }

    #[test]
    fn an_active_producers_last_batch_stays_as_a_bare_header() {
        let mut c = Case::new(&[("a", 99)], 200);
        c.producers.window_last_offsets.insert(7, vec![11]);
        let b = batch(10, &[(Some("a"), Some("x")), (Some("a"), Some("y"))], Some(7), false, Compression::None, None);
        let (o, out, _) = c.clean(&b, false);
        assert_eq!(o, Outcome::Emptied);
        let e = RecordBatch::parse(&out).unwrap();
        assert_eq!(out.len(), 61);
        assert!(e.is_crc_valid());
        assert_eq!((e.base_offset(), e.last_offset(), e.records_count()), (10, 11, 0));
        assert_eq!((e.producer_id(), e.producer_epoch(), e.base_sequence()), (7, 0, 10));
        assert_eq!((e.base_timestamp(), e.max_timestamp()), (-1, 101));
        // Not the producer's last batch: removed.
        c.producers.window_last_offsets.insert(7, vec![5, 50]);
        assert_eq!(c.clean(&b, false).0, Outcome::Removed);
        // The last batch of the round, or of its group, stays as well.
        c.round_end = 12;
        assert_eq!(c.clean(&b, false).0, Outcome::Emptied);
        c.round_end = 1_000;
        assert_eq!(c.clean(&b, true).0, Outcome::Emptied);
    }

    #[test]
    fn aborted_data_goes_and_its_abort_marker_stays_with_its_txnindex_entry() {
        let mut c = Case::new(&[], 200);
        let txn = AbortedTxn {
            producer_id: 5,
            first_offset: 10,
            last_offset: 11,
            last_stable_offset: 10,
        };
        c.txns = TxnTracker::new(vec![txn]);
        let data = batch(10, &[(Some("k"), Some("v"))], Some(5), true, Compression::None, None);
        let (o, _, r) = c.clean(&data, false);
        assert_eq!((o, r.aborted_records_removed), (Outcome::Removed, 1));
        let marker = end_txn_marker(11, 0, 5, 0, 100, ControlType::Abort, 0);
        let rules = Rules {
            map: &c.map,
            now_ms: NOW,
            delete_retention_ms: RETENTION,
            producers: &c.producers,
            round_end: 1_000,
            max_decompressed_bytes: 1 << 20,
        };
        let mut out = Vec::new();
        let (o, carried) = clean_batch(
            &RecordBatch::parse(&marker).unwrap(),
            &rules,
            &mut c.txns,
            false,
            &mut out,
            &mut CompactionReport::default(),
        )
        .unwrap();
        assert_eq!(o, Outcome::Copied);
        assert_eq!(carried, Some(txn));
    }

    #[test]
    fn a_marker_without_data_gets_a_horizon_then_goes() {
        let mut c = Case::new(&[], 200);
        let commit = end_txn_marker(11, 0, 5, 0, 100, ControlType::Commit, 0);
        let (o, out, _) = c.clean(&commit, false);
        assert_eq!(o, Outcome::Rebuilt);
        let rb = RecordBatch::parse(&out).unwrap();
        assert!(rb.has_delete_horizon() && rb.is_control());
        assert_eq!(rb.base_timestamp(), NOW + RETENTION);
        // Past the horizon it goes; with data of it seen in the pass, it stays untouched.
        let mut late = Case::new(&[], 200);
        late.now = NOW + RETENTION;
        assert_eq!(late.clean(&out, false).0, Outcome::Removed);
        let mut seen = Case::new(&[], 200);
        let data = batch(10, &[(Some("k"), Some("v"))], Some(5), true, Compression::None, None);
        seen.clean(&data, false);
        assert_eq!(seen.clean(&commit, false).0, Outcome::Copied);
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn a_compressed_batch_is_rebuilt_with_its_own_codec() {
        let mut c = Case::new(&[("a", 12)], 20);
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let b = batch(10, &[(Some("a"), Some("old")), (Some("b"), Some("keep")), (Some("a"), Some("new"))], None, false, codec, None);
            let (o, out, _) = c.clean(&b, false);
            assert_eq!(o, Outcome::Rebuilt);
            let rb = RecordBatch::parse(&out).unwrap();
            assert_eq!(rb.compression(), Some(codec));
            assert_eq!(offsets(&out), vec![11, 12]);
        }
    }

    #[test]
    fn the_key_map_refuses_a_new_key_beyond_its_bound_but_updates_known_ones() {
        let mut m = KeyMap::new(2 * (KEY_ENTRY_OVERHEAD + 1));
        assert!(m.put(b"a", 1) && m.put(b"b", 2));
        assert!(!m.put(b"c", 3));
        assert!(m.put(b"a", 4));
        assert_eq!(m.get(b"a"), Some(4));
        assert_eq!(m.get(b"c"), None);
    }
}
