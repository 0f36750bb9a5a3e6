//! The leader-epoch cache (docs/format.md "Leader-epoch checkpoint"): which leader epoch wrote
//! which range of offsets, as Kafka's `LeaderEpochFileCache` keeps it. An ordered list of
//! `(epoch, start offset)`, both strictly increasing: the start offset is the first offset
//! written in that epoch. Followers ask it where an epoch ended (OffsetsForLeaderEpoch) to find
//! where their log diverged from the leader's; consumers, to detect a truncated log.
//!
//! The rules are pure functions here; the log keeps the cache in its append state and writes
//! `leader-epoch-checkpoint` (Kafka's text checkpoint, version 0) whenever it changes.

use std::path::{Path, PathBuf};

use super::metadata_file::{self, BadMetadataFile, Invalid, MetadataFile};
use super::text_checkpoint::{self, field};
use crate::io::{self, FileSystem, IoError};

/// The file, in the partition directory.
pub const FILE_NAME: &str = "leader-epoch-checkpoint";
const VERSION: i32 = 0;
/// Kafka's "no epoch" / "no offset" answers (OffsetsForLeaderEpochResponse).
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// The first offset written in a leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// The first offset a leader of that epoch wrote.
    pub start_offset: i64,
}

/// Kafka's answer to OffsetsForLeaderEpoch: the largest epoch at or below the one asked
/// about, and where it ended. `(-1, -1)` when undefined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// The epoch answered with: the largest at or below the one asked about.
    pub leader_epoch: i32,
    /// The first offset after that epoch: the next epoch's start, or the log end offset for
    /// the latest epoch.
    pub end_offset: i64,
}

impl EpochEndOffset {
    /// The answer when no epoch at or below the one asked about is known.
    pub const UNDEFINED: EpochEndOffset = EpochEndOffset {
        leader_epoch: UNDEFINED_EPOCH,
        end_offset: UNDEFINED_EPOCH_OFFSET,
    };
}

/// The cache: entries in increasing epoch and start offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// A cache of entries read from a checkpoint, which [`check`] accepted.
    pub fn from_entries(entries: Vec<EpochEntry>) -> LeaderEpochCache {
        LeaderEpochCache { entries }
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest().map(|e| e.epoch)
    }

    /// Kafka's `assign`: records that `epoch` starts at `start_offset`. Nothing changes if the
    /// latest entry already has this epoch and starts at or before it. Otherwise every trailing
    /// entry whose epoch is not below `epoch`, or whose start is not below `start_offset`, is
    /// removed (a new leader's history replaces what it contradicts) and the entry is added.
    /// Returns whether anything changed. Negative epochs and offsets are never assigned.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if self
            .latest()
            .is_some_and(|l| l.epoch == epoch && l.start_offset <= start_offset)
        {
            return false;
        }
        while self
            .entries
            .last()
            .is_some_and(|l| l.epoch >= epoch || l.start_offset >= start_offset)
        {
            self.entries.pop();
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Kafka's `truncateFromEnd`: the log now ends at `end_offset`, so epochs that start at or
    /// after it never wrote anything. Returns whether anything changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        if end_offset >= 0 {
            while self
                .entries
                .last()
                .is_some_and(|l| l.start_offset >= end_offset)
            {
                self.entries.pop();
            }
        }
        self.entries.len() != before
    }

    /// Kafka's `truncateFromStart`: the log now starts at `start_offset`. Entries starting at or
    /// before it go, and the last of them comes back starting at `start_offset` (that epoch
    /// wrote the first offset still in the log). Returns whether anything changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let removed = self
            .entries
            .iter()
            .take_while(|e| e.start_offset <= start_offset)
            .count();
        if removed == 0 {
            return false;
        }
        let last = self.entries[removed - 1];
        let unchanged = removed == 1 && last.start_offset == start_offset;
        self.entries.drain(..removed);
        self.entries.insert(
            0,
            EpochEntry {
                epoch: last.epoch,
                start_offset,
            },
        );
        !unchanged
    }

    /// Kafka's `endOffsetFor`, the answer to OffsetsForLeaderEpoch for `epoch` on a log that
    /// ends at `log_end_offset`:
    /// - the latest epoch ends at the log end;
    /// - an older epoch ends where the next larger one starts, answered with the largest epoch
    ///   at or below the one asked (an epoch that wrote nothing is reported as its predecessor);
    /// - an epoch below every known one ends where the first known one starts (its data is
    ///   gone from the log; the follower replicates from the leader's start);
    /// - an undefined epoch, one above every known epoch, or an empty cache: undefined.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> EpochEndOffset {
        if epoch == UNDEFINED_EPOCH {
            return EpochEndOffset::UNDEFINED;
        }
        if self.latest_epoch() == Some(epoch) {
            return EpochEndOffset {
                leader_epoch: epoch,
                end_offset: log_end_offset,
            };
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > epoch) else {
            return EpochEndOffset::UNDEFINED;
        };
        let floor = self.entries.iter().rev().find(|e| e.epoch <= epoch);
        EpochEndOffset {
            leader_epoch: floor.map_or(epoch, |f| f.epoch),
            end_offset: higher.start_offset,
        }
    }

    /// The epoch that wrote `offset` (Kafka's `epochForOffset`), if any entry covers it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Checks that entries are what a cache holds: non-negative, epochs and start offsets strictly
/// increasing. Returns the index of the first entry that is not.
pub fn check(entries: &[EpochEntry]) -> Result<(), (usize, String)> {
    for (i, e) in entries.iter().enumerate() {
        if e.epoch < 0 || e.start_offset < 0 {
            return Err((
                i,
                format!("negative epoch or offset in {} {}", e.epoch, e.start_offset),
            ));
        }
        if let Some(p) = i.checked_sub(1).map(|j| entries[j]) {
            if e.epoch <= p.epoch || e.start_offset <= p.start_offset {
                return Err((
                    i,
                    format!(
                        "epoch {} at {} does not follow epoch {} at {}",
                        e.epoch, e.start_offset, p.epoch, p.start_offset
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Parses the file's text.
pub fn decode(text: &str) -> Result<Vec<EpochEntry>, Invalid> {
    let entries = text_checkpoint::parse(text, VERSION, |f| {
        if f.len() != 2 {
            return Err(format!(
                "expected \"<epoch> <start offset>\", found {} fields",
                f.len()
            ));
        }
        Ok(EpochEntry {
            epoch: field(f, 0, "epoch")?,
            start_offset: field(f, 1, "start offset")?,
        })
    })?;
    // Entries are on lines 3 onwards.
    check(&entries).map_err(|(i, reason)| Invalid::at(i + 3, reason))?;
    Ok(entries)
}

pub fn encode(entries: &[EpochEntry]) -> String {
    text_checkpoint::encode(
        VERSION,
        entries
            .iter()
            .map(|e| format!("{} {}", e.epoch, e.start_offset)),
    )
}

/// Reads the checkpoint of `dir`: `Ok(Ok(None))` without one, `Ok(Err(..))` if it is unusable.
pub fn read(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Result<Option<Vec<EpochEntry>>, BadMetadataFile>, IoError> {
    metadata_file::read(fs, &path(dir), MetadataFile::LeaderEpochs, decode)
}

/// Parses the bytes of a `leader-epoch-checkpoint` read from `path` (which errors name): the
/// entries, oldest epoch first.
pub fn decode_file(path: &Path, bytes: &[u8]) -> Result<Vec<EpochEntry>, BadMetadataFile> {
    metadata_file::decode_bytes(path, bytes, MetadataFile::LeaderEpochs, decode)
}

/// Writes the checkpoint atomically (temp file, fsync, rename, directory fsync).
pub fn write(fs: &dyn FileSystem, dir: &Path, entries: &[EpochEntry]) -> Result<(), IoError> {
    io::write_file_atomically(fs, &path(dir), encode(entries).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pairs: &[(i32, i64)]) -> LeaderEpochCache {
        LeaderEpochCache::from_entries(
            pairs
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_adds_new_epochs_and_ignores_repeats() {
        let mut c = LeaderEpochCache::default();
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 5), "the same epoch later changes nothing");
        assert!(c.assign(2, 10));
        assert!(
            !c.assign(-1, 20) && !c.assign(3, -1),
            "no undefined epochs or offsets"
        );
        assert_eq!(pairs(&c), vec![(0, 0), (2, 10)]);
        // The same epoch starting earlier replaces it.
        assert!(c.assign(2, 8));
        assert_eq!(pairs(&c), vec![(0, 0), (2, 8)]);
    }

    #[test]
    fn assign_removes_the_entries_a_new_leader_contradicts() {
        // A lower epoch, or an earlier start, truncates the entries it conflicts with.
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.assign(4, 15));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 10), (4, 15)]);
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.assign(6, 12));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 10), (6, 12)]);
        let mut c = cache(&[(1, 0), (3, 10)]);
        assert!(c.assign(2, 30));
        assert_eq!(pairs(&c), vec![(1, 0), (2, 30)]);
    }

    #[test]
    fn truncate_from_end_drops_epochs_starting_at_or_after_the_new_end() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(!c.truncate_from_end(25));
        assert!(c.truncate_from_end(20));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 10)]);
        assert!(c.truncate_from_end(5));
        assert_eq!(pairs(&c), vec![(1, 0)]);
        assert!(
            !c.truncate_from_end(-1),
            "an undefined end truncates nothing"
        );
        assert!(c.truncate_from_end(0));
        assert!(c.entries().is_empty());
    }

    #[test]
    fn truncate_from_start_keeps_the_epoch_of_the_new_first_offset() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(!c.truncate_from_start(-1));
        assert!(c.truncate_from_start(15));
        assert_eq!(pairs(&c), vec![(3, 15), (5, 20)]);
        assert!(!c.truncate_from_start(15), "already there");
        assert!(c.truncate_from_start(20));
        assert_eq!(pairs(&c), vec![(5, 20)]);
        assert!(c.truncate_from_start(100));
        assert_eq!(pairs(&c), vec![(5, 100)]);
    }

    #[test]
    fn end_offset_for_answers_as_kafka_does() {
        let c = cache(&[(1, 0), (3, 10), (5, 20)]);
        let at = |e| {
            let r = c.end_offset_for(e, 30);
            (r.leader_epoch, r.end_offset)
        };
        assert_eq!(at(5), (5, 30), "the latest epoch ends at the log end");
        assert_eq!(at(3), (3, 20));
        assert_eq!(at(1), (1, 10));
        assert_eq!(
            at(4),
            (3, 20),
            "an epoch that wrote nothing: its predecessor's end"
        );
        assert_eq!(at(2), (1, 10));
        assert_eq!(
            at(0),
            (0, 0),
            "below every known epoch: the first start offset"
        );
        assert_eq!(at(6), (-1, -1), "above every known epoch: undefined");
        assert_eq!(at(-1), (-1, -1), "undefined epoch: undefined");
        let empty = LeaderEpochCache::default();
        assert_eq!(empty.end_offset_for(0, 30), EpochEndOffset::UNDEFINED);
        assert_eq!(c.epoch_for_offset(15), Some(3));
        assert_eq!(c.epoch_for_offset(20), Some(5));
    }

    #[test]
    fn the_file_round_trips_and_refuses_what_no_cache_holds() {
        let entries = pairs_to_entries(&[(3, 0), (5, 1200)]);
        assert_eq!(encode(&entries), "0\n2\n3 0\n5 1200\n");
        assert_eq!(decode(&encode(&entries)), Ok(entries));
        for (text, line) in [
            ("0\n2\n5 10\n3 20\n", Some(4)),
            ("0\n2\n3 10\n5 10\n", Some(4)),
            ("0\n1\n-2 10\n", Some(3)),
            ("0\n1\n3 10 x\n", Some(3)),
            ("0\n1\n3 ten\n", Some(3)),
        ] {
            assert_eq!(decode(text).map_err(|e| e.line), Err(line), "{text:?}");
        }
    }

    fn pairs_to_entries(p: &[(i32, i64)]) -> Vec<EpochEntry> {
        p.iter()
            .map(|&(epoch, start_offset)| EpochEntry {
                epoch,
                start_offset,
            })
            .collect()
    }
}
