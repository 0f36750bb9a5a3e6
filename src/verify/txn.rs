//! The `.txnindex` check of `verify`: the transactions of the log are replayed, segment by
//! segment, with the producer-state rules recovery uses, and each segment's stored index must
//! hold exactly the aborted transactions whose markers it holds (docs/format.md, ".txnindex").
//!
//! The replay needs the transactions open where the first segment starts: from the log's
//! start that is none, otherwise the newest snapshot at or below it says. Without either (a
//! log whose start was removed, with its snapshots), the transactions begun before are
//! unknown, and only what does not depend on them is checked: every stored entry names an
//! ABORT marker of its producer in its segment. Damage in a segment (bytes that could not be
//! checked) ends the exact check there, as its batches are unknown.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::VerifyReport;
use crate::format::RecordBatch;
use crate::io::{self, FileSystem, IoError};
use crate::producer::{snapshot_files, txn, Logged, ProducerStateConfig, ProducerStateTable};
use crate::segment::{names, txn_index, AbortedTxn};

/// The replay across the segments.
pub(super) struct TxnCheck {
    table: ProducerStateTable,
    /// Whether the table holds every transaction open at the current segment's start.
    exact: bool,
    /// What the replay saw of each producer, for entries the cleaner wrote.
    seen: HashMap<i64, Seen>,
    /// The last offset of the previous batch replayed, and the offset ranges missing between
    /// consecutive batches (removed by compaction, or lost), in order.
    previous_last: Option<i64>,
    gaps: Vec<(i64, i64)>,
}

/// What the replay saw of one producer.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// The last offset of its last batch.
    last: Option<i64>,
    /// The last offset of its last batch before its open transaction, when the replay saw that
    /// transaction begin (`None`: it was open where the replay started, or not open).
    before_txn: Option<i64>,
    /// Its open transaction's first batch the replay saw.
    txn_first_seen: Option<i64>,
    /// Whether the replay saw its open transaction begin.
    txn_begun_here: bool,
}

/// An aborted transaction as the replay derived it, with the bounds an entry for it must keep
/// where batches of its span were removed.
#[derive(Debug, Clone, Copy)]
struct Derived {
    entry: AbortedTxn,
    /// The lowest first offset that covers none of the producer's earlier batches.
    first_min: i64,
    /// The highest first offset that still covers the transaction's first remaining batch.
    first_max: i64,
    /// The highest last stable offset below no other open transaction's remaining batches.
    lso_max: i64,
}

/// An ABORT marker the segment holds.
#[derive(Debug, Clone, Copy)]
struct Abort {
    producer_id: i64,
    offset: i64,
    /// The last offset of its producer's batch before it.
    previous: Option<i64>,
}

impl TxnCheck {
    /// The replay from the first segment's base `first_base`, with the state of the newest
    /// snapshot at or below it that passes its checks (`snapshots` oldest first).
    pub fn new(
        fs: &dyn FileSystem,
        snapshots: &[(i64, PathBuf)],
        first_base: Option<i64>,
    ) -> Result<TxnCheck, IoError> {
        let mut table = match ProducerStateTable::new(ProducerStateConfig::default()) {
            Ok(t) => t,
            Err(e) => unreachable!("the default producer-state config is valid: {e}"),
        };
        let new = |table, exact| TxnCheck {
            table,
            exact,
            seen: HashMap::new(),
            previous_last: None,
            gaps: Vec::new(),
        };
        let Some(base) = first_base else {
            return Ok(new(table, true));
        };
        let choice = snapshot_files::choose_newest(fs, snapshots, base)?;
        let exact = match choice.newest {
            Some((_, snap)) => {
                table.load(snap.entries);
                true
            }
            None => base == 0,
        };
        Ok(new(table, exact))
    }

    /// Replays one batch: the producer-state rules, what was seen of its producer, and the gap
    /// before it. Returns the aborted transaction a marker completed, and the ABORT marker.
    fn apply(&mut self, batch: &RecordBatch<'_>) -> (Option<Derived>, Option<Abort>) {
        if let Some(previous) = self.previous_last {
            if batch.base_offset() > previous + 1 {
                self.gaps.push((previous + 1, batch.base_offset()));
            }
        }
        self.previous_last = Some(batch.last_offset());
        let Ok(Some(logged)) = txn::classify(batch) else {
            return (None, None);
        };
        let pid = batch.producer_id();
        let open_before = self.table.get(pid).is_some_and(|e| e.has_open_txn());
        let mut seen = self.seen.get(&pid).copied().unwrap_or_default();
        // Before its first batch in this replay, the producer's last batch is the newest of
        // its window in the snapshot the replay started from.
        seen.last = seen.last.or_else(|| {
            self.table
                .get(pid)
                .and_then(|e| e.newest_batch())
                .map(|b| b.last_offset)
        });
        let mut abort = None;
        let mut derived = None;
        match &logged {
            Logged::Data(b) if b.is_transactional => {
                let s = self.seen.entry(pid).or_default();
                if !open_before {
                    s.before_txn = seen.last;
                    s.txn_begun_here = true;
                }
                s.txn_first_seen.get_or_insert(batch.base_offset());
            }
            Logged::Marker(m) => {
                if m.is_abort {
                    abort = Some(Abort {
                        producer_id: pid,
                        offset: m.offset,
                        previous: seen.last,
                    });
                }
                if let Some(c) = self.table.completion(m).filter(|c| c.is_abort) {
                    let lso_max = self
                        .table
                        .ongoing()
                        .filter(|(_, other)| *other != pid)
                        .filter_map(|(_, other)| self.seen.get(&other)?.txn_first_seen)
                        .min()
                        .unwrap_or(m.offset + 1);
                    derived = Some(Derived {
                        entry: c.aborted_entry(),
                        first_min: match (seen.txn_begun_here, seen.before_txn) {
                            (true, Some(before)) => before + 1,
                            (true, None) => i64::MIN,
                            // Open where the replay started: the snapshot's first offset.
                            (false, _) => c.first_offset,
                        },
                        first_max: seen.txn_first_seen.unwrap_or(m.offset),
                        lso_max,
                    });
                }
            }
            _ => {}
        }
        self.table.apply(&logged, batch.base_offset(), 0);
        let s = self.seen.entry(pid).or_default();
        s.last = Some(batch.last_offset());
        if !self.table.get(pid).is_some_and(|e| e.has_open_txn()) {
            s.before_txn = None;
            s.txn_first_seen = None;
            s.txn_begun_here = false;
        }
        (derived, abort)
    }

    /// Whether a batch is missing somewhere in `[from, to)`.
    fn gap_within(&self, from: i64, to: i64) -> bool {
        self.gaps.iter().any(|&(a, b)| a < to && b > from)
    }

    /// Replays the checked batches of one segment (`starts`: their positions, in order) and
    /// compares its stored `.txnindex` with the aborted transactions its markers complete.
    /// `clean` says whether every byte of the segment could be checked.
    #[allow(clippy::too_many_arguments)]
    pub fn segment(
        &mut self,
        fs: &dyn FileSystem,
        dir: &Path,
        base: i64,
        data: &[u8],
        starts: &BTreeMap<usize, i64>,
        next_offset: i64,
        clean: bool,
        report: &mut VerifyReport,
    ) -> Result<(), IoError> {
        let mut expected = Vec::new();
        let mut aborts: Vec<Abort> = Vec::new();
        // The segment's offsets start at its base: a first batch above it follows a gap.
        self.previous_last.get_or_insert(base - 1);
        for &pos in starts.keys() {
            let Ok(batch) = RecordBatch::parse(&data[pos..]) else {
                continue;
            };
            let (derived, abort) = self.apply(&batch);
            expected.extend(derived);
            aborts.extend(abort);
        }
        let path = names::file_path(dir, base, names::TXN_INDEX_EXT);
        let Some(stored) = self.read_stored(fs, &path, base, data.len(), next_offset, report)?
        else {
            self.exact &= clean;
            return Ok(());
        };
        report.txn_index_entries += stored.as_ref().map_or(0, |s| s.len() as u64);
        if self.exact {
            self.compare(&path, stored.as_deref(), &expected, &aborts, report);
        } else if let Some(stored) = &stored {
            entries_name_aborts(&path, stored, &aborts, report);
        }
        self.exact &= clean;
        Ok(())
    }

    /// The segment's stored `.txnindex` entries (`Some(None)`: no file), or `None` when it
    /// cannot be read (reported; the replay is no longer exact) or fails its check (reported).
    fn read_stored(
        &mut self,
        fs: &dyn FileSystem,
        path: &Path,
        base: i64,
        data_len: usize,
        next_offset: i64,
        report: &mut VerifyReport,
    ) -> Result<Option<Option<Vec<AbortedTxn>>>, IoError> {
        let max = (data_len / crate::format::HEADER_SIZE + 1) * txn_index::ENTRY_SIZE;
        Ok(Some(match io::read_small_file(fs, path, max as u64)? {
            io::SmallFile::Missing => None,
            io::SmallFile::NotAFile(kind) => {
                report.problem(
                    path,
                    None,
                    "not_a_file",
                    format!("a {kind}, not a regular file (not opened)"),
                );
                self.exact = false;
                return Ok(None);
            }
            io::SmallFile::TooLarge(len) => {
                report.problem(
                    path,
                    None,
                    "too_large",
                    format!(
                        "{len} bytes, more than the markers of a {data_len}-byte segment can need \
                         (not read)"
                    ),
                );
                self.exact = false;
                return Ok(None);
            }
            io::SmallFile::Bytes(bytes) => match txn_index::check(&bytes, base, next_offset) {
                Ok(entries) => Some(entries),
                Err(problem) => {
                    let position = problem_position(&problem);
                    report.problem(path, position, "bad_txn_index", problem.to_string());
                    return Ok(None);
                }
            },
        }))
    }
}

/// When the replay is not exact, all that can be checked of stored entries: each names an
/// ABORT marker of its producer.
fn entries_name_aborts(
    path: &Path,
    stored: &[AbortedTxn],
    aborts: &[Abort],
    report: &mut VerifyReport,
) {
    for (i, e) in stored.iter().enumerate() {
        if !aborts
            .iter()
            .any(|a| (a.producer_id, a.offset) == (e.producer_id, e.last_offset))
        {
            report.problem(
                path,
                Some(i * txn_index::ENTRY_SIZE),
                "bad_txn_index",
                format!(
                    "entry for producer {} names offset {}, which is not an ABORT marker \
                     of that producer",
                    e.producer_id, e.last_offset
                ),
            );
        }
    }
}

fn problem_position(p: &txn_index::TxnIndexProblem) -> Option<usize> {
    use txn_index::TxnIndexProblem::*;
    match p {
        UnsupportedVersion { position, .. }
        | BelowBase { position, .. }
        | BeyondSegment { position, .. }
        | NotIncreasing { position, .. }
        | Inconsistent { position, .. } => Some(*position),
        PartialEntry { len } => Some(len - len % txn_index::ENTRY_SIZE),
    }
}

impl TxnCheck {
    /// The stored entries (`None`: no file) against those the replay computed: equal, except
    /// where a batch of an entry's span is missing (see the module's doc).
    fn compare(
        &self,
        path: &Path,
        stored: Option<&[AbortedTxn]>,
        expected: &[Derived],
        aborts: &[Abort],
        report: &mut VerifyReport,
    ) {
        if stored.is_none() && !expected.is_empty() {
            report.problem(
                path,
                None,
                "txn_index_missing",
                format!(
                    "missing, but the segment holds the ABORT markers of {} aborted transaction{} \
                     (recover --deep rebuilds it)",
                    expected.len(),
                    if expected.len() == 1 { "" } else { "s" }
                ),
            );
            return;
        }
        let stored = stored.unwrap_or(&[]);
        let key = |e: &AbortedTxn| (e.producer_id, e.last_offset);
        for (i, s) in stored.iter().enumerate() {
            let position = Some(i * txn_index::ENTRY_SIZE);
            if let Some(reason) = self.entry_problem(i, s, expected, aborts) {
                report.problem(
                    path,
                    position,
                    "bad_txn_index",
                    format!("{reason} (recover --deep rebuilds it)"),
                );
            }
        }
        for d in expected {
            if !stored.iter().any(|s| key(s) == key(&d.entry)) {
                let i = stored.partition_point(|s| s.last_offset < d.entry.last_offset);
                report.problem(
                    path,
                    Some(i * txn_index::ENTRY_SIZE),
                    "bad_txn_index",
                    format!(
                        "entry {i} is missing: the log says {} (recover --deep rebuilds it)",
                        show(&d.entry)
                    ),
                );
            }
        }
    }

    /// What is wrong with stored entry `i`, `s`, against the entries the replay computed.
    fn entry_problem(
        &self,
        i: usize,
        s: &AbortedTxn,
        expected: &[Derived],
        aborts: &[Abort],
    ) -> Option<String> {
        let key = |e: &AbortedTxn| (e.producer_id, e.last_offset);
        let derived = expected.iter().find(|d| key(&d.entry) == key(s));
        match derived {
            Some(d) if self.spans_a_gap(s, Some(&d.entry)) => {
                if s.first_offset < d.first_min || s.first_offset > d.first_max {
                    Some(format!(
                        "entry {i} is {}: its first offset must lie in {}..={} to cover \
                             exactly the transaction's batches left in the log",
                        show(s),
                        d.first_min,
                        d.first_max
                    ))
                } else if s.last_stable_offset > d.lso_max {
                    Some(format!(
                        "entry {i} is {}: its last stable offset is above {}, where another \
                             transaction open at the marker has a batch",
                        show(s),
                        d.lso_max
                    ))
                } else {
                    None
                }
            }
            Some(d) if d.entry != *s => Some(format!(
                "entry {i} is {}, the log says {}",
                show(s),
                show(&d.entry)
            )),
            Some(_) => None,
            None => {
                let abort = aborts.iter().find(|a| (a.producer_id, a.offset) == key(s));
                match abort {
                    // The transaction's data were all removed: the cleaner's entry stays
                    // with its marker, covering none of the producer's earlier batches.
                    Some(a)
                        if self.spans_a_gap(s, None)
                            && a.previous.is_none_or(|p| s.first_offset > p) =>
                    {
                        None
                    }
                    _ => Some(format!(
                        "entry {i} ({}) is for no aborted transaction of this segment",
                        show(s)
                    )),
                }
            }
        }
    }

    /// Whether a batch is missing between the lowest offset `stored` (or `derived`) names and
    /// its marker: there the replay cannot re-derive the entry.
    fn spans_a_gap(&self, stored: &AbortedTxn, derived: Option<&AbortedTxn>) -> bool {
        let low = [stored.first_offset, stored.last_stable_offset]
            .into_iter()
            .chain(derived.map(|d| d.first_offset))
            .chain(derived.map(|d| d.last_stable_offset))
            .min()
            .unwrap_or(stored.last_offset);
        self.gap_within(low, stored.last_offset)
    }
}

fn show(e: &AbortedTxn) -> String {
    format!(
        "(producer {}, first {}, marker {}, last stable {})",
        e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
    )
}
