//! The retained batches of one producer: a ring buffer that holds at most `window` batch
//! descriptions, oldest first.
//!
//! Why a hand-made ring instead of a `VecDeque`: the table may hold a million producers, so the
//! per-entry cost matters (docs/design.md, "Producer state" "bounded memory"). A boxed slice plus
//! two `u32`s is 24 bytes inline against 32 for a `VecDeque`, a producer that only wrote markers
//! allocates nothing, and the buffer grows by doubling only up to the configured window, so a
//! producer with two batches never pays for a window of 1024.

use crate::format::sequence;

/// What is remembered of one appended batch (Kafka's `BatchMetadata`, docs/design.md, "Producer
/// state").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BatchMetadata {
    /// The sequence of the batch's last record.
    pub last_seq: i32,
    /// The offset of the batch's last record.
    pub last_offset: i64,
    /// `last_offset - first_offset` (the batch's lastOffsetDelta).
    pub offset_delta: i32,
    /// The batch's maxTimestamp.
    pub timestamp: i64,
}

impl BatchMetadata {
    /// The sequence of the batch's first record, wrapping at `i32::MAX` (docs/format.md, "Sequence
    /// numbers").
    pub fn first_seq(&self) -> i32 {
        sequence::sub(self.last_seq, self.offset_delta)
    }

    /// The offset of the batch's first record.
    pub fn first_offset(&self) -> i64 {
        self.last_offset.wrapping_sub(i64::from(self.offset_delta))
    }
}

/// Up to `window` [`BatchMetadata`], oldest to newest.
#[derive(Debug, Clone, Default)]
pub struct BatchWindow {
    buf: Box<[BatchMetadata]>,
    head: u32,
    len: u32,
}

impl PartialEq for BatchWindow {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}
impl Eq for BatchWindow {}

impl BatchWindow {
    /// A window holding `batches` (oldest first), allocated to exactly their number.
    pub fn from_vec(batches: Vec<BatchMetadata>) -> BatchWindow {
        let len = batches.len() as u32;
        BatchWindow {
            buf: batches.into_boxed_slice(),
            head: 0,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The batches, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &BatchMetadata> + ExactSizeIterator + '_ {
        let cap = self.buf.len().max(1);
        let head = self.head as usize;
        (0..self.len as usize).map(move |i| &self.buf[(head + i) % cap])
    }

    /// The newest batch.
    pub fn newest(&self) -> Option<&BatchMetadata> {
        self.iter().next_back()
    }

    /// Forgets every batch (an epoch bump), keeping the allocation for the new epoch's batches.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Appends `batch` as the newest, dropping the oldest ones so that at most `limit` remain.
    pub fn push(&mut self, batch: BatchMetadata, limit: usize) {
        let limit = limit.max(1);
        while self.len() >= limit {
            self.pop_oldest();
        }
        if self.len() == self.buf.len() {
            self.grow(limit);
        }
        let cap = self.buf.len();
        let slot = (self.head as usize + self.len()) % cap;
        self.buf[slot] = batch;
        self.len += 1;
    }

    /// Keeps only the newest `limit` batches (a window configured smaller than a snapshot's).
    pub fn truncate_to_newest(&mut self, limit: usize) {
        while self.len() > limit {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = ((self.head as usize + 1) % self.buf.len()) as u32;
        self.len -= 1;
    }

    /// Doubles the capacity, never beyond `limit`, and lays the batches out from index 0.
    fn grow(&mut self, limit: usize) {
        let new_cap = (self.buf.len() * 2).clamp(1, limit.max(self.buf.len() + 1));
        let mut next = Vec::with_capacity(new_cap);
        next.extend(self.iter().copied());
        next.resize(new_cap, BatchMetadata::default());
        self.buf = next.into_boxed_slice();
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(last_seq: i32) -> BatchMetadata {
        BatchMetadata {
            last_seq,
            last_offset: i64::from(last_seq) * 10,
            offset_delta: 0,
            timestamp: 0,
        }
    }

    fn seqs(w: &BatchWindow) -> Vec<i32> {
        w.iter().map(|b| b.last_seq).collect()
    }

    #[test]
    fn push_beyond_limit_drops_the_oldest() {
        let mut w = BatchWindow::default();
        for s in 0..8 {
            w.push(batch(s), 5);
        }
        assert_eq!(seqs(&w), vec![3, 4, 5, 6, 7]);
        assert_eq!(w.newest().map(|b| b.last_seq), Some(7));
    }

    #[test]
    fn capacity_never_exceeds_the_limit() {
        let mut w = BatchWindow::default();
        for s in 0..100 {
            w.push(batch(s), 5);
            assert!(w.buf.len() <= 5);
        }
        assert_eq!(w.buf.len(), 5);
    }

    #[test]
    fn an_empty_window_allocates_nothing() {
        let w = BatchWindow::default();
        assert_eq!(w.buf.len(), 0);
        assert_eq!(w.newest(), None);
    }

    #[test]
    fn clear_then_push_starts_a_new_window() {
        let mut w = BatchWindow::default();
        for s in 0..4 {
            w.push(batch(s), 3);
        }
        w.clear();
        w.push(batch(0), 3);
        assert_eq!(seqs(&w), vec![0]);
    }

    #[test]
    fn truncate_keeps_the_newest() {
        let mut w = BatchWindow::from_vec((0..6).map(batch).collect());
        w.truncate_to_newest(2);
        assert_eq!(seqs(&w), vec![4, 5]);
        w.push(batch(6), 2);
        assert_eq!(seqs(&w), vec![5, 6]);
    }

    #[test]
    fn first_seq_and_offset_wrap() {
        let b = BatchMetadata {
            last_seq: 2,
            last_offset: 100,
            offset_delta: 4,
            timestamp: 0,
        };
        assert_eq!(b.first_seq(), i32::MAX - 1);
        assert_eq!(b.first_offset(), 96);
    }
}
