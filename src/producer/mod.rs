//! Producer state (docs/design.md, "Producer state"; docs/format.md, "Producer snapshot"): the
//! idempotent-producer table whose rules decide appended / duplicate / error, and its snapshot
//! files beside the segments.

mod config;
mod entry;
mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod snapshot;
pub mod snapshot_files;
mod state;
mod window;

pub use config::{
    ConfigError, ProducerLimitPolicy, ProducerStateConfig, DEFAULT_EXPIRATION_MS, DEFAULT_WINDOW,
    MAX_WINDOW, MIN_WINDOW,
};
pub use entry::{ProducerEntry, NO_EPOCH};
pub use error::ProducerError;
pub use snapshot::{Snapshot, SnapshotError, SnapshotVersion};
pub use state::{CompletedTxn, Decision, IncomingBatch, ProducerStateTable, TxnMarker};
pub use window::{BatchMetadata, BatchWindow};
