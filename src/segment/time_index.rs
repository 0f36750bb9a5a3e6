//! The time index `N.timeindex` (docs/format.md, "Time index").
//!
//! | off | size | field                           |
//! |----:|-----:|---------------------------------|
//! |   0 |    8 | timestamp int64                 |
//! |   8 |    4 | relativeOffset int32            |
//!
//! An entry `(ts, o)` says: ts is the largest timestamp in the segment up to and including the
//! batch whose last offset is o. Timestamps strictly increase from entry to entry (an equal one
//! is not written), offsets never decrease. One slot is kept free for the final entry that is
//! always appended when the segment stops being active.

use super::mapped_index::{self, IndexEntry, IndexWriter, MappedIndex};
use super::offset_index::{relative_offset, IndexError, IndexProblem};
use super::search::largest_lower_bound;
use crate::format::batch::{be_i32, be_i64};

/// Bytes of one time-index entry: timestamp (int64) and relative offset (int32), big-endian.
pub const ENTRY_SIZE: usize = 12;

/// One time-index entry, with the absolute offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// The largest timestamp in the segment up to and including the batch at `offset`.
    pub timestamp: i64,
    /// That batch's last offset (the segment's base plus the stored one).
    pub offset: i64,
}

impl IndexEntry for TimestampOffset {
    const SIZE: usize = ENTRY_SIZE;

    fn decode(e: &[u8], base_offset: i64) -> TimestampOffset {
        TimestampOffset {
            timestamp: be_i64(e, 0),
            offset: base_offset + be_i32(e, 8) as i64,
        }
    }

    fn encode_into(self, base_offset: i64, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..].copy_from_slice(&((self.offset - base_offset) as i32).to_be_bytes());
    }
}

/// Decodes raw time-index bytes (for tools); a trailing partial entry is ignored.
pub fn decode(bytes: &[u8], base_offset: i64) -> impl Iterator<Item = TimestampOffset> + '_ {
    mapped_index::decode(bytes, base_offset)
}

pub fn encode(base_offset: i64, entry: TimestampOffset) -> [u8; ENTRY_SIZE] {
    let mut out = [0u8; ENTRY_SIZE];
    entry.encode_into(base_offset, &mut out);
    out
}

/// Checks every entry of stored time-index bytes: whole entries, timestamps and offsets never
/// decreasing, offsets not below the base and not beyond the segment's last offset.
pub fn check(bytes: &[u8], base_offset: i64, last_offset: i64) -> Result<(), IndexProblem> {
    if !bytes.len().is_multiple_of(ENTRY_SIZE) {
        return Err(IndexProblem::Length {
            len: bytes.len(),
            entry_size: ENTRY_SIZE,
        });
    }
    let mut previous: Option<TimestampOffset> = None;
    for (entry, e) in decode(bytes, base_offset).enumerate() {
        if e.offset < base_offset || e.offset > last_offset {
            return Err(IndexProblem::BelowBase {
                entry,
                offset: e.offset,
                base_offset,
            });
        }
        if let Some(p) = previous {
            if e.timestamp < p.timestamp {
                return Err(IndexProblem::TimestampOrder {
                    entry,
                    timestamp: e.timestamp,
                    previous: p.timestamp,
                });
            }
            if e.offset < p.offset {
                return Err(IndexProblem::OffsetOrder {
                    entry,
                    offset: e.offset,
                    previous: p.offset,
                });
            }
        }
        previous = Some(e);
    }
    Ok(())
}

/// The read side of a segment's time index.
pub type TimeIndex = MappedIndex<TimestampOffset>;

impl MappedIndex<TimestampOffset> {
    /// The greatest entry whose timestamp is ≤ `target`, or `(-1, base offset)` without one.
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        let bytes = self.bytes();
        let n = bytes.len() / ENTRY_SIZE;
        let key = |slot: usize| be_i64(bytes, slot * ENTRY_SIZE);
        match largest_lower_bound(n, ENTRY_SIZE, key, target) {
            Some(slot) => TimestampOffset {
                timestamp: key(slot),
                offset: self.base_offset() + be_i32(bytes, slot * ENTRY_SIZE + 8) as i64,
            },
            None => TimestampOffset {
                timestamp: -1,
                offset: self.base_offset(),
            },
        }
    }
}

/// The one writer of a time index.
pub type TimeIndexWriter = IndexWriter<TimestampOffset>;

impl IndexWriter<TimestampOffset> {
    /// Full one slot early: the last slot is kept for the final entry written at roll.
    pub fn is_full(&self) -> bool {
        self.len() + 1 >= self.max_entries()
    }

    /// Appends `(timestamp, offset)` if the timestamp is above the last entry's (Kafka's
    /// `maybeAppend`). `final_entry` skips the full check, for the entry written at roll and close.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: i64,
        final_entry: bool,
    ) -> Result<(), IndexError> {
        if let Some(last) = self.last() {
            if offset < last.offset {
                return Err(IndexError::OffsetNotIncreasing {
                    offset,
                    last: last.offset,
                });
            }
            if timestamp < last.timestamp {
                return Err(IndexError::TimestampDecreasing {
                    timestamp,
                    last: last.timestamp,
                });
            }
            if timestamp == last.timestamp {
                return Ok(());
            }
        }
        let full = if final_entry {
            self.len() >= self.max_entries()
        } else {
            self.is_full()
        };
        if full {
            return Err(IndexError::Full {
                max_entries: self.max_entries(),
            });
        }
        if relative_offset(self.base_offset(), offset).is_none() {
            return Err(IndexError::RelativeOffsetOverflow {
                offset,
                base_offset: self.base_offset(),
            });
        }
        self.push(TimestampOffset { timestamp, offset });
        Ok(())
    }
}
