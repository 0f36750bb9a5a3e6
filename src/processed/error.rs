//! Why a processed-id store refused a call or could not open.

use std::path::PathBuf;

use super::record::Undecodable;

/// An error of the processed-id store ([`super::ProcessedStore`]). Each has a stable
/// [`ProcessedError::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessedError {
    /// The log under the store failed (open, append, read, flush, retention); its own kind is
    /// the store's kind (`locked`, `io`, `read_only`, ...).
    #[error(transparent)]
    Log(#[from] crate::Error),
    /// An id that is empty or longer than [`super::MAX_ID_BYTES`].
    #[error("invalid message id ({len} bytes): {rule}")]
    InvalidId {
        /// Its length.
        len: usize,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A source that is empty or longer than [`super::MAX_SOURCE_BYTES`].
    #[error("invalid source {source_name:?}: {rule}")]
    InvalidSource {
        /// The source as given.
        source_name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A negative position.
    #[error("invalid position {position} for {source_name:?}: positions are offsets, at least 0")]
    InvalidPosition {
        /// The source.
        source_name: String,
        /// The position given.
        position: i64,
    },
    /// An effect longer than [`super::MAX_EFFECT_BYTES`].
    #[error("effect of {len} bytes is over the limit of {max}")]
    EffectTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A setting of [`super::ProcessedConfig`] outside its range.
    #[error("invalid processed-store setting {field} = {value}: {rule}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The log holds a record the store did not write: another application's log, or a
    /// newer version's record.
    #[error("{}: record at offset {offset} is not a processed-store record: {problem}", dir.display())]
    ForeignRecord {
        /// The store's directory.
        dir: PathBuf,
        /// The record's offset.
        offset: i64,
        /// What is wrong with it.
        problem: Undecodable,
    },
    /// A batch of the store's log could not be read back (a damaged byte, found by its CRC).
    #[error("{}: reading from offset {offset}: {error}", dir.display())]
    Unreadable {
        /// The store's directory.
        dir: PathBuf,
        /// Where the read started.
        offset: i64,
        /// What is wrong, and where in the read.
        error: crate::format::BatchErrorAt,
    },
    /// The store was closed.
    #[error("the processed-id store is closed")]
    Closed,
}

impl ProcessedError {
    /// A stable snake_case name for the kind of error: the log's own kind for
    /// [`ProcessedError::Log`], else `invalid_id`, `invalid_source`, `invalid_position`,
    /// `effect_too_large`, `config`, `foreign_record`, `corrupt_record`, `closed`.
    pub fn kind(&self) -> &'static str {
        match self {
            ProcessedError::Log(e) => e.kind(),
            ProcessedError::InvalidId { .. } => "invalid_id",
            ProcessedError::InvalidSource { .. } => "invalid_source",
            ProcessedError::InvalidPosition { .. } => "invalid_position",
            ProcessedError::EffectTooLarge { .. } => "effect_too_large",
            ProcessedError::Config { .. } => "config",
            ProcessedError::ForeignRecord { .. } => "foreign_record",
            ProcessedError::Unreadable { .. } => "corrupt_record",
            ProcessedError::Closed => "closed",
        }
    }
}

macro_rules! from_log_error {
    ($($t:ty),*) => {$(
        impl From<$t> for ProcessedError {
            fn from(e: $t) -> Self {
                ProcessedError::Log(crate::Error::from(e))
            }
        }
    )*};
}
from_log_error!(
    crate::OpenError,
    crate::AppendError,
    crate::ReadError,
    crate::FlushError,
    crate::RewriteError
);
