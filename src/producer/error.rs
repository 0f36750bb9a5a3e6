//! Why a producer's batch was refused (kafka-format.md §5.2).

/// A batch that breaks a producer-state rule. Each variant maps to a Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    /// INVALID_PRODUCER_EPOCH (47): the batch's epoch is older than the producer's.
    #[error("producer {producer_id}: stale epoch {got}, current epoch is {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER (45): a gap, a reordering, a retry older than the window,
    /// or a new epoch not starting at 0.
    #[error("producer {producer_id}: out-of-order sequence, expected {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    /// INVALID_TXN_STATE (48): a non-transactional batch while a transaction is open.
    #[error(
        "producer {producer_id}: non-transactional batch while the transaction starting at \
         offset {txn_first_offset} is open"
    )]
    InvalidTxnState {
        producer_id: i64,
        txn_first_offset: i64,
    },
    /// TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator.
    #[error("producer {producer_id}: marker from coordinator epoch {got}, current is {current}")]
    CoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
    /// The table is at `max_producers` and the policy is to reject new producers.
    #[error(
        "producer {producer_id}: refused, the table already holds its limit of {limit} producers"
    )]
    TooManyProducers { producer_id: i64, limit: usize },
}
