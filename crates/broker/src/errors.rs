//! How the engine's answers become Kafka error codes: one table, mirrored in the README.
//!
//! A duplicate is not an error: Kafka answers a retry of one of a producer's recent batches
//! with NONE and the original base offset, and so does this broker. UNKNOWN_PRODUCER_ID (59)
//! never comes from a produce: since KIP-360 (Kafka 2.5) an unknown producer is accepted at any
//! sequence, by Kafka and by oncelog alike.

use kafka_protocol::ResponseError;

use crate::store::{AppendRefused, ReadRefused};

/// The engine's append error kinds (`oncelog::AppendError::kind`) and the Kafka error each is
/// answered with.
pub const APPEND_ERRORS: &[(&str, ResponseError)] = &[
    // Damaged bytes (frame, CRC, records): retriable, the damage may have come in transit.
    ("corrupt_batch", ResponseError::CorruptMessage),
    // A well-formed batch breaking a client rule (non-zero base offset, no records, a control
    // batch, a missing sequence, more than one batch in a v3+ produce, ...).
    ("invalid_record", ResponseError::InvalidRecord),
    // A codec this build of oncelog was compiled without (its cargo feature is off).
    (
        "unsupported_compression",
        ResponseError::UnsupportedCompressionType,
    ),
    // Larger than `max.message.bytes`.
    ("batch_too_large", ResponseError::MessageTooLarge),
    // Larger than a whole segment.
    ("record_list_too_large", ResponseError::RecordListTooLarge),
    // A gap or a reordering in the producer's sequence, or a new epoch not starting at 0.
    (
        "out_of_order_sequence",
        ResponseError::OutOfOrderSequenceNumber,
    ),
    // An epoch older than the producer's current one (a fenced zombie).
    (
        "invalid_producer_epoch",
        ResponseError::InvalidProducerEpoch,
    ),
    ("invalid_txn_state", ResponseError::InvalidTxnState),
    (
        "coordinator_fenced",
        ResponseError::TransactionCoordinatorFenced,
    ),
    // `--max-producers` reached under a reject policy: refused by configuration.
    ("too_many_producers", ResponseError::PolicyViolation),
    // A file operation failed, or an earlier failed fsync left the log read-only: Kafka's
    // answer for a failing log dir.
    ("io", ResponseError::KafkaStorageError),
    ("read_only", ResponseError::KafkaStorageError),
    // The broker took the partition offline: a batch it was about to serve failed its CRC.
    ("offline", ResponseError::KafkaStorageError),
    // The partition is shutting down: retriable, and it sends the client back to Metadata.
    ("closed", ResponseError::NotLeaderOrFollower),
];

/// The Kafka error for a refused append. A kind the table does not know (a newer engine) is
/// UNKNOWN_SERVER_ERROR, which clients treat as fatal for the batch, and is logged.
pub fn append_error(refused: &AppendRefused) -> ResponseError {
    match APPEND_ERRORS.iter().find(|(kind, _)| *kind == refused.kind) {
        Some((_, error)) => *error,
        None => {
            tracing::warn!(kind = refused.kind, error = %refused, "append error kind without a Kafka code");
            ResponseError::UnknownServerError
        }
    }
}

/// [`append_error`] for an error kind as raft's leader answered it (a replicated append
/// refused by the leader's log, cluster mode): the same table.
pub fn append_error_kind(kind: &str) -> ResponseError {
    match APPEND_ERRORS.iter().find(|(k, _)| *k == kind) {
        Some((_, error)) => *error,
        None => {
            tracing::warn!(kind, "append error kind without a Kafka code");
            ResponseError::UnknownServerError
        }
    }
}

/// The Kafka error for a failed read.
pub fn read_error(refused: &ReadRefused) -> ResponseError {
    match refused {
        ReadRefused::OutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadRefused::Storage(_) | ReadRefused::Offline(_) => ResponseError::KafkaStorageError,
        ReadRefused::Closed => ResponseError::NotLeaderOrFollower,
    }
}

/// The wire value of "no error".
pub const NONE: i16 = 0;

/// The wire value of `error`, or of no error.
pub fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(NONE, |e| e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(kind: &'static str) -> AppendRefused {
        AppendRefused {
            kind,
            message: String::new(),
        }
    }

    #[test]
    fn the_codes_kafka_clients_act_on() {
        let cases = [
            ("corrupt_batch", 2),
            ("batch_too_large", 10),
            ("record_list_too_large", 18),
            ("out_of_order_sequence", 45),
            ("invalid_producer_epoch", 47),
            ("io", 56),
            ("invalid_record", 87),
            ("closed", 6),
        ];
        for (kind, code) in cases {
            assert_eq!(append_error(&refused(kind)).code(), code, "{kind}");
        }
    }

    #[test]
    fn an_unknown_kind_is_an_unknown_server_error() {
        assert_eq!(
            append_error(&refused("something_new")),
            ResponseError::UnknownServerError
        );
    }

    #[test]
    fn each_kind_is_listed_once() {
        let mut kinds: Vec<_> = APPEND_ERRORS.iter().map(|(k, _)| *k).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), APPEND_ERRORS.len());
    }
}
