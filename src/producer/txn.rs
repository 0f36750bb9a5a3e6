//! Transactions as the producer state sees them (docs/design.md, "Transactions"): the COMMIT and
//! ABORT markers that end them, the transactions they complete, and what a batch read back
//! from the log means for its producer.

use super::state::IncomingBatch;
use crate::format::{self, BatchError, RecordBatch};
use crate::segment::AbortedTxn;

/// A COMMIT or ABORT marker as the producer state sees it: its producer, epochs and timestamp
/// come from the batch, its coordinator epoch and type from the control record's key and value
/// (docs/format.md, "Control batches and transaction markers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub epoch: i16,
    pub coordinator_epoch: i32,
    /// The marker record's timestamp: the producer's last timestamp after it.
    pub timestamp: i64,
    /// The offset the marker was written at.
    pub offset: i64,
    pub is_abort: bool,
}

/// A transaction ended by a marker (Kafka's `CompletedTxn`), with the last stable offset its
/// `.txnindex` entry records if it was aborted (docs/format.md, ".txnindex").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub marker_offset: i64,
    pub is_abort: bool,
    /// The first offset of the earliest transaction of another producer still open when the
    /// marker was written, or the marker's offset + 1 when there was none (Kafka's
    /// `lastStableOffset(completedTxn)`).
    pub last_stable_offset: i64,
}

impl CompletedTxn {
    /// Its `.txnindex` entry (for an aborted one).
    pub fn aborted_entry(&self) -> AbortedTxn {
        AbortedTxn {
            producer_id: self.producer_id,
            first_offset: self.first_offset,
            last_offset: self.marker_offset,
            last_stable_offset: self.last_stable_offset,
        }
    }
}

/// The transaction version a marker is written under (Kafka's `transaction.version`, sent by
/// the coordinator in WriteTxnMarkers): from version 2 on (KIP-890 part 2) the coordinator bumps
/// the producer's epoch at every end of a transaction, so a marker must carry a newer epoch than
/// the producer's, and one with the same epoch is a retry of the marker just written.
pub const EPOCH_BUMPING_TRANSACTION_VERSION: i8 = 2;

/// What a batch read from the log (replay, replication) is for its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logged {
    /// A data batch.
    Data(IncomingBatch),
    /// A COMMIT or ABORT marker.
    Marker(Marker),
    /// A control batch with no records (left by compaction): the producer is known, nothing
    /// else changes.
    Empty { producer_id: i64 },
}

/// What `batch` is for producer state; `None` for a batch without a producer id. A producer's
/// control batch whose record is not a valid marker is an error (Kafka fails on it too).
pub fn classify(batch: &RecordBatch<'_>) -> Result<Option<Logged>, BatchError> {
    if batch.producer_id() < 0 {
        return Ok(None);
    }
    if !batch.is_control() {
        return Ok(Some(Logged::Data(IncomingBatch::from_batch(batch))));
    }
    Ok(Some(match format::decode_txn_marker(batch)? {
        None => Logged::Empty {
            producer_id: batch.producer_id(),
        },
        Some(m) => Logged::Marker(Marker {
            producer_id: batch.producer_id(),
            epoch: batch.producer_epoch(),
            coordinator_epoch: m.coordinator_epoch,
            timestamp: m.timestamp,
            offset: batch.base_offset(),
            is_abort: m.is_abort(),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{end_txn_marker, BatchBuilder, ControlType};

    #[test]
    fn a_marker_batch_is_read_with_its_record() {
        let bytes = end_txn_marker(40, 0, 7, 3, 1_000, ControlType::Abort, 9);
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(
            classify(&batch),
            Ok(Some(Logged::Marker(Marker {
                producer_id: 7,
                epoch: 3,
                coordinator_epoch: 9,
                timestamp: 1_000,
                offset: 40,
                is_abort: true,
            })))
        );
    }

    #[test]
    fn data_batches_and_batches_without_a_producer() {
        let mut b = BatchBuilder::new().producer(7, 0, 0).transactional(true);
        b.append(1, None, Some(b"v"), &[]);
        let bytes = b.build().unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert!(matches!(
            classify(&batch),
            Ok(Some(Logged::Data(IncomingBatch {
                producer_id: 7,
                is_transactional: true,
                ..
            })))
        ));
        let mut b = BatchBuilder::new();
        b.append(1, None, Some(b"v"), &[]);
        let bytes = b.build().unwrap();
        assert_eq!(classify(&RecordBatch::parse(&bytes).unwrap()), Ok(None));
    }

    #[test]
    fn an_empty_control_batch_only_names_its_producer() {
        let bytes = BatchBuilder::new()
            .producer(7, 0, -1)
            .transactional(true)
            .control(true)
            .build()
            .unwrap();
        assert_eq!(
            classify(&RecordBatch::parse(&bytes).unwrap()),
            Ok(Some(Logged::Empty { producer_id: 7 }))
        );
    }
}
