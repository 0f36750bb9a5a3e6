//! Producer state (docs/design.md, "Producer state"; docs/format.md, "Producer snapshot"): the
//! idempotent-producer table whose rules decide appended / duplicate / error, and its snapshot
//! files beside the segments.

mod config;
mod entry;
mod error;
internal_mod!(
    #[cfg(any(test, feature = "internals"))]
    fuzz
);
internal_mod!(snapshot);
internal_mod!(snapshot_files);
internal_mod!(state);
internal_mod!(txn);
internal_mod!(window);

pub use config::{
    ProducerLimitPolicy, ProducerStateConfig, ProducerStateConfigError, DEFAULT_EXPIRATION_MS,
    DEFAULT_WINDOW, MAX_WINDOW, MIN_WINDOW,
};
pub use entry::{ProducerEntry, NO_EPOCH};
pub use error::ProducerError;
pub use snapshot::{SnapshotError, SnapshotVersion};
pub use window::BatchMetadata;

pub(crate) use state::{Decision, IncomingBatch, ProducerStateTable};
pub(crate) use txn::{CompletedTxn, Logged, Marker};
