//! The aborted-transaction index `N.txnindex` (docs/format.md, ".txnindex"; docs/kafka-format.md
//! §7.3): one entry per transaction aborted by a marker written while the segment was active.
//!
//! | off | size | field                                              |
//! |----:|-----:|----------------------------------------------------|
//! |   0 |    2 | version int16 = 0                                  |
//! |   2 |    8 | producerId int64                                   |
//! |  10 |    8 | firstOffset int64 (may lie in an earlier segment)  |
//! |  18 |    8 | lastOffset int64: the ABORT marker's offset         |
//! |  26 |    8 | lastStableOffset int64 when the marker was written |
//!
//! Entries are appended in marker order (strictly increasing lastOffset) to the active
//! segment's file, which is created on the first one and never preallocated, so its length is
//! its entries. Unlike the other indexes it is written with `pwrite`, not through a map (as
//! Kafka writes it through a `FileChannel`), and a segment keeps its entries in memory: a few
//! dozen bytes per aborted transaction, read by every read_committed fetch.

use std::path::{Path, PathBuf};

use parking_lot::{Mutex, RwLock};

use crate::format::batch::{be_i16, be_i64};
use crate::io::{File, FileSystem, IoError, IoResultExt, OpenMode};

/// Bytes of one entry.
pub const ENTRY_SIZE: usize = 34;
/// The only entry version Kafka writes and reads.
pub const VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    /// The producer whose transaction was aborted.
    pub producer_id: i64,
    /// The transaction's first offset.
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
    /// The first offset of the earliest transaction of another producer still open when the
    /// marker was written, or the marker's offset + 1: a read_committed fetch that reaches no
    /// further than this needs no later entry (docs/kafka-format.md §7.4).
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// The entry's bytes.
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        out[..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }
}

/// What is wrong with the bytes of a `.txnindex`; positions are byte offsets in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnIndexProblem {
    /// An entry of a version other than 0 (Kafka refuses it too).
    #[error("entry at byte {position} has version {version}, only 0 exists")]
    UnsupportedVersion {
        /// Where the entry starts.
        position: usize,
        /// The version found.
        version: i16,
    },
    /// The file ends inside an entry.
    #[error("{len} bytes are not whole {ENTRY_SIZE}-byte entries")]
    PartialEntry {
        /// The file's length.
        len: usize,
    },
    /// An entry whose marker is below the segment's base offset (Kafka's sanity check).
    #[error("entry at byte {position}: marker offset {last_offset} is below the segment's base offset {base_offset}")]
    BelowBase {
        /// Where the entry starts.
        position: usize,
        /// Its lastOffset.
        last_offset: i64,
        /// The segment's base offset.
        base_offset: i64,
    },
    /// An entry whose marker is past the segment's last offset.
    #[error("entry at byte {position}: marker offset {last_offset} is not in the segment, which ends below {next_offset}")]
    BeyondSegment {
        /// Where the entry starts.
        position: usize,
        /// Its lastOffset.
        last_offset: i64,
        /// The segment's last offset + 1.
        next_offset: i64,
    },
    /// Markers not in increasing offset order.
    #[error("entry at byte {position}: marker offset {last_offset} does not follow {previous}")]
    NotIncreasing {
        /// Where the entry starts.
        position: usize,
        /// Its lastOffset.
        last_offset: i64,
        /// The previous entry's lastOffset.
        previous: i64,
    },
    /// A transaction that starts after its marker, or a last stable offset past the marker's
    /// next offset: no marker can have written it.
    #[error("entry at byte {position}: offsets first {first_offset}, marker {last_offset}, last stable {last_stable_offset} cannot be")]
    Inconsistent {
        /// Where the entry starts.
        position: usize,
        /// Its firstOffset.
        first_offset: i64,
        /// Its lastOffset.
        last_offset: i64,
        /// Its lastStableOffset.
        last_stable_offset: i64,
    },
}

impl TxnIndexProblem {
    /// A stable snake_case name for the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            TxnIndexProblem::UnsupportedVersion { .. } => "unsupported_version",
            TxnIndexProblem::PartialEntry { .. } => "partial_entry",
            TxnIndexProblem::BelowBase { .. } => "below_base",
            TxnIndexProblem::BeyondSegment { .. } => "beyond_segment",
            TxnIndexProblem::NotIncreasing { .. } => "not_increasing",
            TxnIndexProblem::Inconsistent { .. } => "inconsistent",
        }
    }
}

/// Decodes the entries of `.txnindex` bytes in file order, for tools: stops after the first
/// entry of an unknown version, and ends with [`TxnIndexProblem::PartialEntry`] when the bytes
/// end inside an entry (which Kafka ignores).
pub fn decode(bytes: &[u8]) -> impl Iterator<Item = Result<AbortedTxn, TxnIndexProblem>> + '_ {
    let whole = bytes.len() - bytes.len() % ENTRY_SIZE;
    let mut failed = false;
    let entries = bytes[..whole]
        .chunks_exact(ENTRY_SIZE)
        .enumerate()
        .map_while(move |(i, e)| {
            if failed {
                return None;
            }
            let version = be_i16(e, 0);
            if version != VERSION {
                failed = true;
                return Some(Err(TxnIndexProblem::UnsupportedVersion {
                    position: i * ENTRY_SIZE,
                    version,
                }));
            }
            Some(Ok(AbortedTxn {
                producer_id: be_i64(e, 2),
                first_offset: be_i64(e, 10),
                last_offset: be_i64(e, 18),
                last_stable_offset: be_i64(e, 26),
            }))
        });
    let partial = (whole != bytes.len()).then_some(Err(TxnIndexProblem::PartialEntry {
        len: bytes.len(),
    }));
    entries.chain(partial)
}

/// Checks stored `.txnindex` bytes of the segment holding offsets `[base_offset, next_offset)`
/// and returns their entries: Kafka's sanity check (every marker at or above the base) and
/// what an index this engine or Kafka wrote always satisfies besides: version 0, whole entries,
/// markers inside the segment and increasing, a transaction starting at or before its marker
/// and a last stable offset no further than the marker's next offset.
pub fn check(
    bytes: &[u8],
    base_offset: i64,
    next_offset: i64,
) -> Result<Vec<AbortedTxn>, TxnIndexProblem> {
    let mut out = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
    for (i, entry) in decode(bytes).enumerate() {
        let e = entry?;
        let position = i * ENTRY_SIZE;
        if e.last_offset < base_offset {
            return Err(TxnIndexProblem::BelowBase {
                position,
                last_offset: e.last_offset,
                base_offset,
            });
        }
        if e.last_offset >= next_offset {
            return Err(TxnIndexProblem::BeyondSegment {
                position,
                last_offset: e.last_offset,
                next_offset,
            });
        }
        if let Some(previous) = out.last().map(|p: &AbortedTxn| p.last_offset) {
            if e.last_offset <= previous {
                return Err(TxnIndexProblem::NotIncreasing {
                    position,
                    last_offset: e.last_offset,
                    previous,
                });
            }
        }
        if e.first_offset < 0
            || e.first_offset > e.last_offset
            || e.last_stable_offset > e.last_offset + 1
        {
            return Err(TxnIndexProblem::Inconsistent {
                position,
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                last_stable_offset: e.last_stable_offset,
            });
        }
        out.push(e);
    }
    Ok(out)
}

/// Kafka's `collectAbortedTxns` over one segment's entries: adds those that overlap a fetch
/// from `fetch_offset` whose data ends below `upper_bound` (marker at or after the fetch
/// offset, transaction starting below the bound) to `out`. Returns `true` once an entry's
/// last stable offset reaches the bound: no later entry, in this segment or a later one, can
/// overlap the fetch.
pub fn collect_aborted(
    entries: &[AbortedTxn],
    fetch_offset: i64,
    upper_bound: i64,
    out: &mut Vec<AbortedTxn>,
) -> bool {
    for e in entries {
        if e.last_offset >= fetch_offset && e.first_offset < upper_bound {
            out.push(*e);
        }
        if e.last_stable_offset >= upper_bound {
            return true;
        }
    }
    false
}

/// A segment's `.txnindex`: its entries, and the open file while entries are appended.
#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    entries: RwLock<Vec<AbortedTxn>>,
    /// Opened (the file created if need be) on the first append, kept for the next ones and
    /// for the flush that makes them durable.
    file: Mutex<Option<Box<dyn File>>>,
}

impl TxnIndex {
    /// The index of the segment whose `.txnindex` is `path`, holding `entries` (what the file
    /// holds, or nothing when there is no file).
    pub fn new(path: PathBuf, entries: Vec<AbortedTxn>) -> TxnIndex {
        TxnIndex {
            path,
            entries: RwLock::new(entries),
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the entries, in marker order.
    pub fn entries(&self) -> Vec<AbortedTxn> {
        self.entries.read().clone()
    }

    /// The length and CRC-32C of the file holding its entries (docs/format.md "Checkpoint").
    pub fn digest(&self) -> (u64, u32) {
        super::digest::txn_digest(&self.entries.read())
    }

    /// [`collect_aborted`] over this segment's entries.
    pub fn collect(&self, fetch_offset: i64, upper_bound: i64, out: &mut Vec<AbortedTxn>) -> bool {
        collect_aborted(&self.entries.read(), fetch_offset, upper_bound, out)
    }

    /// Appends `entry` to the file (created on the first entry; the caller makes the directory
    /// entry durable: the return value says whether the file was created), then to the entries
    /// readers see. On a failure nothing changes: a partly written entry is cut off again, and
    /// if even that fails the error says so (the caller must not go on appending).
    pub fn append(&self, fs: &dyn FileSystem, entry: AbortedTxn) -> Result<bool, IoError> {
        // The file's lock orders appenders (there is one: the log's, under its append lock);
        // the entries' lock is taken for writing only to push, so readers never wait for I/O.
        let mut file = self.file.lock();
        let (count, last) = {
            let entries = self.entries.read();
            (entries.len(), entries.last().map(|e| e.last_offset))
        };
        if let Some(previous) = last.filter(|p| entry.last_offset <= *p) {
            return Err(IoError::new(
                "txn index append",
                &self.path,
                std::io::Error::other(format!(
                    "marker offset {} does not follow {previous}",
                    entry.last_offset
                )),
            ));
        }
        let end = (count * ENTRY_SIZE) as u64;
        let mut created = false;
        if file.is_none() {
            created = !fs.exists(&self.path).ctx("stat", &self.path)?;
            let f = fs
                .open(&self.path, OpenMode::Create)
                .ctx("open", &self.path)?;
            if f.len().ctx("stat", &self.path)? != end {
                f.set_len(end).ctx("truncate", &self.path)?;
            }
            *file = Some(f);
        }
        let Some(f) = file.as_ref() else {
            unreachable!("opened above")
        };
        if let Err(e) = f.write_all_at(&entry.encode(), end) {
            let write = IoError::new("write", &self.path, e);
            return match f.set_len(end) {
                Ok(()) => Err(write),
                // The next append writes over the partial entry (at the count's position), and
                // recovery rebuilds or refuses a partial tail: the entries stay right.
                Err(cut) => Err(IoError::new(
                    "truncate after a failed write",
                    &self.path,
                    std::io::Error::other(format!("{write}; then: {cut}")),
                )),
            };
        }
        self.entries.write().push(entry);
        Ok(created)
    }

    /// Makes the appended entries durable (fdatasync of the open file, if entries were
    /// appended since the segment was opened).
    pub fn sync(&self) -> Result<(), IoError> {
        match self.file.lock().as_ref() {
            Some(f) => f.sync_data().ctx("fdatasync", &self.path),
            None => Ok(()),
        }
    }
}

/// Writes `entries` as the whole `.txnindex` at `path`, durably and atomically (temp file,
/// fsync, rename; the directory is synced by the caller), or removes the file when there are
/// none: an index rebuilt by recovery replaces the old one in one step, so a crash leaves the
/// one or the other.
pub fn rewrite(fs: &dyn FileSystem, path: &Path, entries: &[AbortedTxn]) -> Result<(), IoError> {
    if entries.is_empty() {
        return match fs.remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(IoError::new("remove", path, e))
            }
            _ => Ok(()),
        };
    }
    let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    let temp = crate::io::temp_path(path);
    crate::io::write_file_synced(fs, &temp, &bytes)?;
    fs.rename(&temp, path).ctx("rename", &temp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    fn bytes(entries: &[AbortedTxn]) -> Vec<u8> {
        entries.iter().flat_map(|e| e.encode()).collect()
    }

    #[test]
    fn an_entry_encodes_as_tv8() {
        let hex: String = txn(7, 1000, 1010, 1011)
            .encode()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "0000000000000000000700000000000003e800000000000003f200000000000003f3"
        );
    }

    #[test]
    fn entries_decode_back_and_a_partial_tail_is_reported_last() {
        let e = [txn(1, 0, 5, 6), txn(2, 3, 9, 10)];
        let mut b = bytes(&e);
        assert_eq!(decode(&b).collect::<Vec<_>>(), [Ok(e[0]), Ok(e[1])]);
        b.extend_from_slice(&[0; 5]);
        let got: Vec<_> = decode(&b).collect();
        assert_eq!(got[2], Err(TxnIndexProblem::PartialEntry { len: 73 }));
    }

    #[test]
    fn an_unknown_version_stops_the_decoding() {
        let mut b = bytes(&[txn(1, 0, 5, 6), txn(2, 3, 9, 10), txn(3, 3, 11, 12)]);
        b[ENTRY_SIZE + 1] = 1;
        let got: Vec<_> = decode(&b).collect();
        assert_eq!(
            got,
            [
                Ok(txn(1, 0, 5, 6)),
                Err(TxnIndexProblem::UnsupportedVersion {
                    position: ENTRY_SIZE,
                    version: 1
                })
            ]
        );
    }

    #[test]
    fn the_sanity_check_holds_entries_to_their_segment() {
        let ok = [txn(1, 90, 105, 106), txn(2, 100, 107, 108)];
        assert_eq!(check(&bytes(&ok), 100, 110), Ok(ok.to_vec()));
        assert_eq!(
            check(&bytes(&[txn(1, 90, 99, 100)]), 100, 110),
            Err(TxnIndexProblem::BelowBase {
                position: 0,
                last_offset: 99,
                base_offset: 100
            })
        );
        assert!(matches!(
            check(&bytes(&[txn(1, 100, 110, 111)]), 100, 110),
            Err(TxnIndexProblem::BeyondSegment { .. })
        ));
        assert!(matches!(
            check(&bytes(&[txn(1, 100, 105, 106), txn(2, 100, 105, 106)]), 100, 110),
            Err(TxnIndexProblem::NotIncreasing { position: 34, .. })
        ));
        assert!(matches!(
            check(&bytes(&[txn(1, 106, 105, 106)]), 100, 110),
            Err(TxnIndexProblem::Inconsistent { .. })
        ));
        assert!(matches!(
            check(&bytes(&[txn(1, 100, 105, 107)]), 100, 110),
            Err(TxnIndexProblem::Inconsistent { .. })
        ));
        let mut partial = bytes(&ok);
        partial.pop();
        assert_eq!(
            check(&partial, 100, 110),
            Err(TxnIndexProblem::PartialEntry { len: 67 })
        );
        assert_eq!(check(&[], 100, 100), Ok(vec![]));
    }

    #[test]
    fn collect_takes_what_overlaps_and_stops_at_the_bound() {
        // Kafka's TransactionIndexTest "collectAbortedTransactions" in spirit: four aborted
        // transactions, searched from several fetch offsets and bounds.
        let entries = [
            txn(0, 0, 10, 11),
            txn(1, 5, 15, 13),
            txn(2, 18, 35, 25),
            txn(3, 32, 50, 40),
        ];
        let search = |from, bound| {
            let mut out = Vec::new();
            let complete = collect_aborted(&entries, from, bound, &mut out);
            (out.iter().map(|e| e.producer_id).collect::<Vec<_>>(), complete)
        };
        assert_eq!(search(0, 5), (vec![0], true));
        assert_eq!(search(0, 15), (vec![0, 1], true));
        assert_eq!(search(11, 15), (vec![1], true));
        assert_eq!(search(16, 60), (vec![2, 3], false));
        assert_eq!(search(51, 60), (vec![], false));
    }
}
