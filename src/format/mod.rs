//! Kafka RecordBatch v2: zero-copy views, validation, record iteration, builder, control
//! records and varints. Pure functions over bytes, no I/O (docs/design.md, "Layers").

pub mod batch;
pub mod builder;
pub mod compression;
pub mod consumer;
pub mod control;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod record;
pub mod sequence;
pub mod validate;
pub mod varint;

pub use batch::{
    frame, BatchFrame, BatchIter, Compression, RecordBatch, TimestampType, HEADER_SIZE,
    LOG_OVERHEAD, MAGIC_V2,
};
pub use builder::BatchBuilder;
pub use compression::{compress, decompress, decompress_into, DEFAULT_MAX_DECOMPRESSED_BYTES};
pub use consumer::{ConsumerRecord, ConsumerRecordIter};
pub use control::{
    decode_control_record, end_txn_marker, ControlRecordKey, ControlType, EndTxnMarker,
};
pub use error::{BatchError, BatchErrorAt, ControlRecordError, RecordError};
pub use record::{decode_record, Header, HeaderIter, Record, RecordContext, RecordIter};
pub use validate::{validate_client_batch, validate_stored_batch, BatchSummary};
