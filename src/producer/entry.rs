//! One producer's state (Kafka's `ProducerStateEntry`, docs/design.md, "Producer state"), plus the
//! append wall clock oncelog uses for expiry and eviction.

use super::window::{BatchMetadata, BatchWindow};

/// "No ongoing transaction" in [`ProducerEntry`]'s compact field and in snapshots.
pub(crate) const NO_TXN: i64 = -1;
/// The epoch of a producer known only by id (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_EPOCH: i16 = -1;

/// The state of one idempotent producer.
///
/// Layout is kept compact (64 bytes inline on 64-bit targets, plus the retained batches, which
/// are allocated only when there are some): the ongoing transaction is stored as an `i64` with
/// `-1` for none rather than an `Option<i64>`, which would cost 8 more bytes per producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    producer_id: i64,
    last_timestamp: i64,
    last_append_ms: i64,
    txn_first_offset: i64,
    pub(crate) batches: BatchWindow,
    coordinator_epoch: i32,
    epoch: i16,
}

impl ProducerEntry {
    /// A producer seen for the first time: unknown epoch, no batches, no transaction.
    pub fn new(producer_id: i64) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            last_timestamp: -1,
            last_append_ms: 0,
            txn_first_offset: NO_TXN,
            batches: BatchWindow::default(),
            coordinator_epoch: -1,
            epoch: NO_EPOCH,
        }
    }

    /// An entry restored as it was saved (a snapshot, a test). `batches` are oldest first; a
    /// negative transaction offset means none, as in the snapshot formats.
    pub fn restore(
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        last_timestamp: i64,
        current_txn_first_offset: Option<i64>,
        last_append_ms: i64,
        batches: Vec<BatchMetadata>,
    ) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            last_timestamp,
            last_append_ms,
            txn_first_offset: current_txn_first_offset
                .filter(|o| *o >= 0)
                .unwrap_or(NO_TXN),
            batches: BatchWindow::from_vec(batches),
            coordinator_epoch,
            epoch,
        }
    }

    /// The producer's id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// The producer's epoch, [`NO_EPOCH`] if not known yet.
    pub fn epoch(&self) -> i16 {
        self.epoch
    }
    /// The coordinator epoch of the last transaction marker, -1 before any.
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }
    /// Kafka's lastTimestamp: maxTimestamp of the last data batch, or the last marker's timestamp.
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }
    /// Wall-clock milliseconds of the last append; what expiry and eviction go by.
    pub fn last_append_ms(&self) -> i64 {
        self.last_append_ms
    }
    /// The first offset of the open transaction, if one is open.
    pub fn current_txn_first_offset(&self) -> Option<i64> {
        (self.txn_first_offset >= 0).then_some(self.txn_first_offset)
    }
    /// Whether the producer has a transaction open.
    pub fn has_open_txn(&self) -> bool {
        self.txn_first_offset >= 0
    }
    /// The retained batches, oldest first.
    pub fn batches(
        &self,
    ) -> impl DoubleEndedIterator<Item = &BatchMetadata> + ExactSizeIterator + '_ {
        self.batches.iter()
    }
    /// The newest retained batch.
    pub fn newest_batch(&self) -> Option<&BatchMetadata> {
        self.batches.newest()
    }
    /// The last sequence accepted, -1 with no retained batch (Kafka's derived `lastSeq`).
    pub fn last_seq(&self) -> i32 {
        self.newest_batch().map_or(-1, |b| b.last_seq)
    }
    /// The retained batch with exactly these sequences, if any (the duplicate check).
    pub fn find_batch(&self, first_seq: i32, last_seq: i32) -> Option<&BatchMetadata> {
        self.batches()
            .find(|b| b.last_seq == last_seq && b.first_seq() == first_seq)
    }

    /// Kafka's `addBatch`: a new epoch discards the old epoch's batches.
    pub(crate) fn set_epoch(&mut self, epoch: i16) {
        if epoch != self.epoch {
            self.batches.clear();
            self.epoch = epoch;
        }
    }
    pub(crate) fn push_batch(&mut self, batch: BatchMetadata, window: usize) {
        self.batches.push(batch, window);
    }
    pub(crate) fn set_last_timestamp(&mut self, ts: i64) {
        self.last_timestamp = ts;
    }
    pub(crate) fn set_last_append_ms(&mut self, ms: i64) {
        self.last_append_ms = ms;
    }
    pub(crate) fn set_coordinator_epoch(&mut self, epoch: i32) {
        self.coordinator_epoch = epoch;
    }
    pub(crate) fn set_txn_first_offset(&mut self, offset: Option<i64>) {
        self.txn_first_offset = offset.filter(|o| *o >= 0).unwrap_or(NO_TXN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_stays_compact() {
        assert!(
            std::mem::size_of::<ProducerEntry>() <= 64,
            "{}",
            std::mem::size_of::<ProducerEntry>()
        );
    }

    #[test]
    fn restore_treats_negative_txn_offset_as_none() {
        let e = ProducerEntry::restore(1, 0, -1, 0, Some(-1), 0, vec![]);
        assert_eq!(e.current_txn_first_offset(), None);
        assert_eq!(e.last_seq(), -1);
    }

    #[test]
    fn epoch_change_clears_batches_but_same_epoch_keeps_them() {
        let b = BatchMetadata {
            last_seq: 3,
            last_offset: 3,
            offset_delta: 3,
            timestamp: 0,
        };
        let mut e = ProducerEntry::restore(1, 0, -1, 0, None, 0, vec![b]);
        e.set_epoch(0);
        assert_eq!(e.batches().len(), 1);
        e.set_epoch(1);
        assert_eq!(e.batches().len(), 0);
        assert_eq!(e.epoch(), 1);
    }
}
