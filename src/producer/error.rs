//! Why a producer's batch was refused (docs/design.md, "Producer state").

/// A batch that breaks a producer-state rule. Each variant maps to a Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// INVALID_PRODUCER_EPOCH (47): the batch's epoch is older than the producer's.
    #[error("producer {producer_id}: stale epoch {got}, current epoch is {current}")]
    InvalidProducerEpoch {
        /// The batch's producer id.
        producer_id: i64,
        /// The producer's current epoch.
        current: i16,
        /// The batch's epoch.
        got: i16,
    },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER (45): a gap, a reordering, a retry older than the window,
    /// or a new epoch not starting at 0.
    #[error("producer {producer_id}: out-of-order sequence, expected {expected}, got {got}")]
    OutOfOrderSequence {
        /// The batch's producer id.
        producer_id: i64,
        /// The base sequence that would have been in order.
        expected: i32,
        /// The batch's base sequence.
        got: i32,
    },
    /// INVALID_TXN_STATE (48): a non-transactional batch while a transaction is open.
    #[error(
        "producer {producer_id}: non-transactional batch while the transaction starting at \
         offset {txn_first_offset} is open"
    )]
    InvalidTxnState {
        /// The batch's producer id.
        producer_id: i64,
        /// The first offset of the open transaction.
        txn_first_offset: i64,
    },
    /// TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator.
    #[error("producer {producer_id}: marker from coordinator epoch {got}, current is {current}")]
    CoordinatorFenced {
        /// The marker's producer id.
        producer_id: i64,
        /// The coordinator epoch of the producer's last marker.
        current: i32,
        /// The marker's coordinator epoch.
        got: i32,
    },
    /// The table is at `max_producers` and the policy is to reject new producers.
    #[error(
        "producer {producer_id}: refused, the table already holds its limit of {limit} producers"
    )]
    TooManyProducers {
        /// The new producer's id.
        producer_id: i64,
        /// The configured `max_producers`.
        limit: usize,
    },
}

impl ProducerError {
    /// A stable snake_case name for the kind of error: Kafka's error name, lower case.
    pub fn kind(&self) -> &'static str {
        match self {
            ProducerError::InvalidProducerEpoch { .. } => "invalid_producer_epoch",
            ProducerError::OutOfOrderSequence { .. } => "out_of_order_sequence",
            ProducerError::InvalidTxnState { .. } => "invalid_txn_state",
            ProducerError::CoordinatorFenced { .. } => "coordinator_fenced",
            ProducerError::TooManyProducers { .. } => "too_many_producers",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_kafkas_error_names() {
        let cases = [
            (
                ProducerError::InvalidProducerEpoch {
                    producer_id: 1,
                    current: 2,
                    got: 1,
                },
                "invalid_producer_epoch",
            ),
            (
                ProducerError::OutOfOrderSequence {
                    producer_id: 1,
                    expected: 5,
                    got: 7,
                },
                "out_of_order_sequence",
            ),
            (
                ProducerError::InvalidTxnState {
                    producer_id: 1,
                    txn_first_offset: 0,
                },
                "invalid_txn_state",
            ),
            (
                ProducerError::CoordinatorFenced {
                    producer_id: 1,
                    current: 3,
                    got: 2,
                },
                "coordinator_fenced",
            ),
            (
                ProducerError::TooManyProducers {
                    producer_id: 1,
                    limit: 10,
                },
                "too_many_producers",
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind);
        }
    }
}
