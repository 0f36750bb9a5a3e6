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

use std::collections::BTreeMap;
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
        let Some(base) = first_base else {
            return Ok(TxnCheck { table, exact: true });
        };
        let choice = snapshot_files::choose_newest(fs, snapshots, base)?;
        let exact = match choice.newest {
            Some((_, snap)) => {
                table.load(snap.entries);
                true
            }
            None => base == 0,
        };
        Ok(TxnCheck { table, exact })
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
        let mut aborts: Vec<(i64, i64)> = Vec::new();
        for &pos in starts.keys() {
            let Ok(batch) = RecordBatch::parse(&data[pos..]) else {
                continue;
            };
            let Ok(Some(logged)) = txn::classify(&batch) else {
                continue;
            };
            if let Logged::Marker(m) = &logged {
                if m.is_abort {
                    aborts.push((m.producer_id, m.offset));
                }
            }
            if let Some(c) = self.table.apply(&logged, batch.base_offset(), 0) {
                if c.is_abort {
                    expected.push(c.aborted_entry());
                }
            }
        }
        let path = names::file_path(dir, base, names::TXN_INDEX_EXT);
        let max = (data.len() / crate::format::HEADER_SIZE + 1) * txn_index::ENTRY_SIZE;
        let stored = match io::read_small_file(fs, &path, max as u64)? {
            io::SmallFile::Missing => None,
            io::SmallFile::NotAFile(kind) => {
                report.problem(
                    &path,
                    None,
                    "not_a_file",
                    format!("a {kind}, not a regular file (not opened)"),
                );
                self.exact = false;
                return Ok(());
            }
            io::SmallFile::TooLarge(len) => {
                report.problem(
                    &path,
                    None,
                    "too_large",
                    format!(
                        "{len} bytes, more than the markers of a {}-byte segment can need (not \
                         read)",
                        data.len()
                    ),
                );
                self.exact = false;
                return Ok(());
            }
            io::SmallFile::Bytes(bytes) => match txn_index::check(&bytes, base, next_offset) {
                Ok(entries) => Some(entries),
                Err(problem) => {
                    let position = problem_position(&problem);
                    report.problem(&path, position, "bad_txn_index", problem.to_string());
                    self.exact &= clean;
                    return Ok(());
                }
            },
        };
        report.txn_index_entries += stored.as_ref().map_or(0, |s| s.len() as u64);
        if self.exact {
            compare(&path, stored.as_deref(), &expected, report);
        } else if let Some(stored) = &stored {
            for (i, e) in stored.iter().enumerate() {
                if !aborts.contains(&(e.producer_id, e.last_offset)) {
                    report.problem(
                        &path,
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
        self.exact &= clean;
        Ok(())
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

/// The stored entries (`None`: no file) against those the replay computed.
fn compare(
    path: &Path,
    stored: Option<&[AbortedTxn]>,
    expected: &[AbortedTxn],
    report: &mut VerifyReport,
) {
    let stored_or_none = stored.unwrap_or(&[]);
    if stored_or_none == expected {
        return;
    }
    if stored.is_none() {
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
    let i = stored_or_none
        .iter()
        .zip(expected)
        .position(|(s, e)| s != e)
        .unwrap_or(stored_or_none.len().min(expected.len()));
    let reason = match (stored_or_none.get(i), expected.get(i)) {
        (Some(s), Some(e)) => format!("entry {i} is {}, the log says {}", show(s), show(e)),
        (Some(s), None) => format!(
            "entry {i} ({}) is for no aborted transaction of this segment",
            show(s)
        ),
        (None, Some(e)) => format!("entry {i} is missing: the log says {}", show(e)),
        (None, None) => unreachable!("the lists differ"),
    };
    report.problem(
        path,
        Some(i * txn_index::ENTRY_SIZE),
        "bad_txn_index",
        format!("{reason} (recover --deep rebuilds it)"),
    );
}

fn show(e: &AbortedTxn) -> String {
    format!(
        "(producer {}, first {}, marker {}, last stable {})",
        e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
    )
}
