//! Kafka RecordBatch v2: zero-copy views, validation, record iteration, builder, control
//! records and varints. Pure functions over bytes, no I/O (docs/design.md, "Layers").

internal_mod!(batch);
internal_mod!(builder);
internal_mod!(compression);
internal_mod!(consumer);
internal_mod!(control);
internal_mod!(error);
internal_mod!(
    #[cfg(any(test, feature = "internals"))]
    fuzz
);
internal_mod!(record);
internal_mod!(sequence);
internal_mod!(validate);
internal_mod!(varint);

pub use batch::{
    frame, BatchFrame, BatchIter, Compression, RecordBatch, TimestampType, HEADER_SIZE,
    LOG_OVERHEAD, MAGIC_V2,
};
pub use builder::BatchBuilder;
pub use compression::DEFAULT_MAX_DECOMPRESSED_BYTES;
pub use consumer::{AbortedTransaction, ConsumerRecord, ConsumerRecordIter};
pub use control::{
    decode_control_record, decode_txn_marker, end_txn_marker, ControlRecordKey, ControlType,
    EndTxnMarker, TxnMarkerRecord,
};
pub use error::{BatchError, BatchErrorAt, ControlRecordError, RecordError};
pub use record::{Header, HeaderIter, Record, RecordContext, RecordIter};

pub(crate) use validate::{validate_client_batch, validate_stored_batch, BatchSummary};
