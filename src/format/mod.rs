//! Kafka RecordBatch v2: zero-copy views, validation, record iteration, builder, control
//! records and varints. Pure functions over bytes, no I/O (DESIGN.md §3).

pub mod batch;
pub mod error;
pub mod sequence;
pub mod validate;

pub use batch::{
    frame, BatchFrame, BatchIter, Compression, RecordBatch, TimestampType, HEADER_SIZE,
    LOG_OVERHEAD,
};
pub use error::{BatchError, RecordError};
pub use validate::{validate_client_batch, validate_stored_batch, BatchSummary};
