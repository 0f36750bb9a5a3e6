//! What opening a log found and did, for operators (`oncelog recover`) and tests.

use std::path::PathBuf;

use crate::log::error::Damage;

/// What opening the log found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Whether a checkpoint written by a clean close was found.
    pub clean_shutdown: bool,
    /// Whether the directory had an `oncelog.checkpoint` (a Kafka directory has none).
    pub checkpoint_found: bool,
    /// Whether the checkpoint recorded the segments it vouches for (version 1): recorded
    /// segments are held to that record instead of being read.
    pub segments_recorded: bool,
    /// The recovery point of the checkpoint: every offset below it was durable.
    pub recovery_point: i64,
    /// Whether every segment was validated whatever the checkpoint said (`deep_recovery`, or
    /// because damage was found in bytes the checkpoint vouched for).
    pub deep: bool,
    /// Segments whose batches were validated one by one.
    pub segments_validated: usize,
    /// Segments trusted on the log dir's Kafka checkpoints (opened through
    /// [`crate::LogManager`], without a checkpoint of the partition's own): their indexes
    /// checked and kept, their tail walked, their batches not validated.
    pub segments_vouched: usize,
    /// The partition's own checkpoint was older than the log dir's Kafka checkpoints (Kafka
    /// appended or deleted records after it was written) and was not used.
    pub checkpoint_superseded: bool,
    /// The partition's checkpoint was damaged (it fails its checksum), and why: it was not
    /// used, every segment was validated as in a directory without one, and a new one was
    /// written. What only it knew is lost: a log start above the first segment (the log
    /// starts at its first segment's base), the high watermark, the clean flag.
    pub checkpoint_damaged: Option<String>,
    /// Bytes of batches validated.
    pub bytes_validated: u64,
    /// Where damaged bytes were cut off.
    pub truncations: Vec<Truncation>,
    /// Segment files removed, and why: after a cut, below the log start offset (a retention
    /// that a crash interrupted), the leftover of a failed roll, or not part of the log.
    pub segments_deleted: Vec<(PathBuf, String)>,
    /// Index files rebuilt from the log, and why.
    pub indexes_rebuilt: Vec<(PathBuf, String)>,
    /// Temporary files left by an interrupted operation and removed (or renamed into place).
    pub leftovers: Vec<PathBuf>,
    /// The data the cuts and deletions removed, file by file, measured before they were made
    /// ([`RecoveryReport::removed_totals`], [`RecoveryReport::removes_data`]).
    pub removed: Vec<super::RemovedData>,
}

/// One cut of damaged bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncation {
    /// The `.log` that was cut.
    pub path: PathBuf,
    /// Bytes kept: the cut is here.
    pub position: usize,
    /// Length of the file before the cut (including preallocated space).
    pub file_len: usize,
    /// What was found at `position`.
    pub damage: Damage,
}
