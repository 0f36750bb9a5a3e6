//! The offset index `N.index` (docs/format.md, "Offset index"): a sparse map from offsets to the
//! byte positions of batches in `N.log`.
//!
//! | off | size | field                                                   |
//! |----:|-----:|---------------------------------------------------------|
//! |   0 |    4 | relativeOffset int32 = offset − base offset             |
//! |   4 |    4 | position int32: where a batch **starts** in `.log`      |
//!
//! Entries are big-endian with strictly increasing offsets. The file has no header and no
//! checksum; an untrimmed file's length is not a trustworthy entry count, which is why the log
//! rebuilds indexes past its recovery point (docs/design.md, "Memory maps without hazards").

use super::mapped_index::{self, IndexEntry, IndexWriter, MappedIndex};
use super::search::largest_lower_bound;
use crate::format::batch::be_i32;

/// Bytes of one offset-index entry: relative offset and position, big-endian int32s.
pub const ENTRY_SIZE: usize = 8;

/// One offset-index entry, with the absolute offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    /// The last offset of the batch at `position` (the segment's base plus the stored one).
    pub offset: i64,
    /// The batch's byte position in the segment's `.log`.
    pub position: u32,
}

/// Why an entry could not be added to an index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("index full at {max_entries} entries")]
    Full { max_entries: usize },
    #[error("offset {offset} is not above the last indexed offset {last}")]
    OffsetNotIncreasing { offset: i64, last: i64 },
    #[error("offset {offset} is outside the int32 range of base offset {base_offset}")]
    RelativeOffsetOverflow { offset: i64, base_offset: i64 },
    #[error("timestamp {timestamp} is below the last indexed timestamp {last}")]
    TimestampDecreasing { timestamp: i64, last: i64 },
}

impl IndexError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            IndexError::Full { .. } => "index_full",
            IndexError::OffsetNotIncreasing { .. } => "offset_not_increasing",
            IndexError::RelativeOffsetOverflow { .. } => "relative_offset_overflow",
            IndexError::TimestampDecreasing { .. } => "timestamp_decreasing",
        }
    }
}

/// What makes a stored index untrustworthy (it is then rebuilt from the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexProblem {
    #[error("length {len} is not a multiple of the {entry_size}-byte entry")]
    Length { len: usize, entry_size: usize },
    #[error("entry {entry}: offset {offset} not above the previous {previous}")]
    OffsetOrder {
        entry: usize,
        offset: i64,
        previous: i64,
    },
    #[error("entry {entry}: timestamp {timestamp} below the previous {previous}")]
    TimestampOrder {
        entry: usize,
        timestamp: i64,
        previous: i64,
    },
    #[error("entry {entry}: offset {offset} below the base offset {base_offset}")]
    BelowBase {
        entry: usize,
        offset: i64,
        base_offset: i64,
    },
    #[error("entry {entry}: position {position} beyond the {log_size}-byte log")]
    PositionBeyondLog {
        entry: usize,
        position: u32,
        log_size: usize,
    },
}

/// Relative offset of `offset` in a segment, if it fits Kafka's int32 range.
pub fn relative_offset(base_offset: i64, offset: i64) -> Option<i32> {
    offset
        .checked_sub(base_offset)
        .and_then(|d| i32::try_from(d).ok())
}

impl IndexEntry for OffsetPosition {
    const SIZE: usize = ENTRY_SIZE;

    fn decode(e: &[u8], base_offset: i64) -> OffsetPosition {
        OffsetPosition {
            offset: base_offset + be_i32(e, 0) as i64,
            position: be_i32(e, 4) as u32,
        }
    }

    fn encode_into(self, base_offset: i64, out: &mut [u8]) {
        let rel = (self.offset - base_offset) as i32;
        out[..4].copy_from_slice(&rel.to_be_bytes());
        out[4..].copy_from_slice(&(self.position as i32).to_be_bytes());
    }
}

/// Decodes raw index bytes (for tools); a trailing partial entry is ignored.
pub fn decode(bytes: &[u8], base_offset: i64) -> impl Iterator<Item = OffsetPosition> + '_ {
    mapped_index::decode(bytes, base_offset)
}

/// Encodes one entry.
pub fn encode(base_offset: i64, entry: OffsetPosition) -> [u8; ENTRY_SIZE] {
    let mut out = [0u8; ENTRY_SIZE];
    entry.encode_into(base_offset, &mut out);
    out
}

/// Checks every entry of stored index bytes: whole entries, offsets strictly increasing and not
/// below the base, positions inside the log.
pub fn check(bytes: &[u8], base_offset: i64, log_size: usize) -> Result<(), IndexProblem> {
    if !bytes.len().is_multiple_of(ENTRY_SIZE) {
        return Err(IndexProblem::Length {
            len: bytes.len(),
            entry_size: ENTRY_SIZE,
        });
    }
    let mut previous: Option<i64> = None;
    for (entry, e) in decode(bytes, base_offset).enumerate() {
        if e.offset < base_offset {
            return Err(IndexProblem::BelowBase {
                entry,
                offset: e.offset,
                base_offset,
            });
        }
        if let Some(previous) = previous.filter(|&p| e.offset <= p) {
            return Err(IndexProblem::OffsetOrder {
                entry,
                offset: e.offset,
                previous,
            });
        }
        if e.position as usize >= log_size {
            return Err(IndexProblem::PositionBeyondLog {
                entry,
                position: e.position,
                log_size,
            });
        }
        previous = Some(e.offset);
    }
    Ok(())
}

/// The read side of a segment's offset index: the published entries of its map.
pub type OffsetIndex = MappedIndex<OffsetPosition>;

impl MappedIndex<OffsetPosition> {
    /// The greatest entry whose offset is ≤ `target`, or `(base offset, 0)` if there is none:
    /// where a scan for `target` starts.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let bytes = self.bytes();
        let n = bytes.len() / ENTRY_SIZE;
        let base_offset = self.base_offset();
        let key = |slot: usize| base_offset + be_i32(bytes, slot * ENTRY_SIZE) as i64;
        match largest_lower_bound(n, ENTRY_SIZE, key, target) {
            Some(slot) => OffsetPosition {
                offset: key(slot),
                position: be_i32(bytes, slot * ENTRY_SIZE + 4) as u32,
            },
            None => OffsetPosition {
                offset: base_offset,
                position: 0,
            },
        }
    }

    /// The first entry whose position is at or after `position` (Kafka's
    /// `fetchUpperBoundOffset`: where a read_committed fetch that ends at `position` collects
    /// aborted transactions up to), or `None` when every entry is before it.
    pub fn fetch_upper_bound(&self, position: usize) -> Option<OffsetPosition> {
        let n = self.len();
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid) {
                Some(e) if (e.position as usize) < position => lo = mid + 1,
                _ => hi = mid,
            }
        }
        self.entry(lo)
    }
}

/// The one writer of an offset index.
pub type OffsetIndexWriter = IndexWriter<OffsetPosition>;

impl IndexWriter<OffsetPosition> {
    pub fn is_full(&self) -> bool {
        self.len() >= self.max_entries()
    }

    /// Position of the last entry, or 0 without one (where the append-path counter restarts).
    pub fn last_position(&self) -> u32 {
        self.last().map_or(0, |e| e.position)
    }

    pub fn append(&mut self, offset: i64, position: u32) -> Result<(), IndexError> {
        if self.is_full() {
            return Err(IndexError::Full {
                max_entries: self.max_entries(),
            });
        }
        if let Some(last) = self.last().map(|e| e.offset).filter(|&last| offset <= last) {
            return Err(IndexError::OffsetNotIncreasing { offset, last });
        }
        if relative_offset(self.base_offset(), offset).is_none() {
            return Err(IndexError::RelativeOffsetOverflow {
                offset,
                base_offset: self.base_offset(),
            });
        }
        self.push(OffsetPosition { offset, position });
        Ok(())
    }
}
