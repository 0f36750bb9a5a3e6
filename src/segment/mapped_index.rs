//! A segment's fixed-entry index file, mapped: the `.index` (8-byte [`OffsetPosition`]
//! entries) and the `.timeindex` (12-byte [`TimestampOffset`] entries) are the same mechanism,
//! a run of equal-sized big-endian entries read through the published part of a map and
//! appended by the one writer. What differs is the entry's layout and each index's rules for
//! accepting one, which stay in `offset_index` and `time_index`.
//!
//! [`OffsetPosition`]: super::offset_index::OffsetPosition
//! [`TimestampOffset`]: super::time_index::TimestampOffset

use std::marker::PhantomData;
use std::sync::Arc;

use crate::io::{MapWriter, Mapping};

/// The largest entry an index may have (the time index's 12 bytes fit), so that an entry is
/// encoded on the stack.
const MAX_ENTRY_SIZE: usize = 16;

/// One entry of a fixed-entry index: its size and byte layout (in the doc comment of the module
/// that implements it, and in docs/format.md).
pub trait IndexEntry: Copy {
    /// Bytes of one entry.
    const SIZE: usize;

    /// The entry stored in `bytes` (exactly [`Self::SIZE`] of them) of a segment whose base
    /// offset is `base_offset`.
    fn decode(bytes: &[u8], base_offset: i64) -> Self;

    /// Writes the entry into `out` (exactly [`Self::SIZE`] bytes), its offset relative to
    /// `base_offset`.
    fn encode_into(self, base_offset: i64, out: &mut [u8]);
}

/// Decodes raw index bytes (for tools); a trailing partial entry is ignored.
pub fn decode<E: IndexEntry>(bytes: &[u8], base_offset: i64) -> impl Iterator<Item = E> + '_ {
    bytes
        .chunks_exact(E::SIZE)
        .map(move |e| E::decode(e, base_offset))
}

/// The read side of a segment's index: the published entries of its map.
#[derive(Debug)]
pub struct MappedIndex<E> {
    base_offset: i64,
    map: Arc<Mapping>,
    entry: PhantomData<fn() -> E>,
}

// Not derived: a derive would ask `E: Clone`, and entries are not what is cloned.
impl<E> Clone for MappedIndex<E> {
    fn clone(&self) -> Self {
        MappedIndex {
            base_offset: self.base_offset,
            map: Arc::clone(&self.map),
            entry: PhantomData,
        }
    }
}

impl<E: IndexEntry> MappedIndex<E> {
    pub fn new(base_offset: i64, map: Arc<Mapping>) -> MappedIndex<E> {
        MappedIndex {
            base_offset,
            map,
            entry: PhantomData,
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn len(&self) -> usize {
        self.map.published() / E::SIZE
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The published bytes: whole entries only.
    pub(super) fn bytes(&self) -> &[u8] {
        self.map.published_slice()
    }

    pub fn entry(&self, slot: usize) -> Option<E> {
        let e = self.bytes().get(slot * E::SIZE..(slot + 1) * E::SIZE)?;
        Some(E::decode(e, self.base_offset))
    }

    pub fn last(&self) -> Option<E> {
        self.len().checked_sub(1).and_then(|slot| self.entry(slot))
    }

    /// All published entries.
    pub fn entries(&self) -> impl Iterator<Item = E> + '_ {
        decode(self.bytes(), self.base_offset)
    }
}

/// The one writer of a segment's index: appends entries the index's own rules accepted
/// (`OffsetIndexWriter::append`, `TimeIndexWriter::maybe_append`) and publishes each whole.
#[derive(Debug)]
pub struct IndexWriter<E> {
    base_offset: i64,
    writer: MapWriter,
    entry: PhantomData<fn() -> E>,
}

impl<E: IndexEntry> IndexWriter<E> {
    pub fn new(base_offset: i64, writer: MapWriter) -> IndexWriter<E> {
        IndexWriter {
            base_offset,
            writer,
            entry: PhantomData,
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn len(&self) -> usize {
        self.writer.published() / E::SIZE
    }
    /// Allows entries below byte `end` (the file was allocated that far).
    pub fn grant(&mut self, end: usize) {
        self.writer.grant(end);
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn max_entries(&self) -> usize {
        self.writer.capacity() / E::SIZE
    }

    /// The last published entry.
    pub fn last(&self) -> Option<E> {
        let n = self.len().checked_sub(1)?;
        let b = self.writer.mapping().published_slice();
        Some(E::decode(&b[n * E::SIZE..(n + 1) * E::SIZE], self.base_offset))
    }

    /// Writes `entry` after the last one and publishes it. The caller checked it against the
    /// index's rules and its room.
    pub(super) fn push(&mut self, entry: E) {
        const { assert!(E::SIZE <= MAX_ENTRY_SIZE) };
        let mut bytes = [0u8; MAX_ENTRY_SIZE];
        let bytes = &mut bytes[..E::SIZE];
        entry.encode_into(self.base_offset, bytes);
        let at = self.writer.published();
        self.writer.write(at, bytes);
        self.writer.publish(at + E::SIZE);
    }

    /// Bytes in use (entries × entry size): the length the file is trimmed to.
    pub fn size_bytes(&self) -> usize {
        self.writer.published()
    }
}
