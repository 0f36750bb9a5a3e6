//! What can go wrong in tiered storage, each with what and where.

use super::store::RemoteError;
use crate::io::IoError;
use crate::log::{ReadError, RewriteError};
use crate::verify::Problem;

/// Why a segment cannot be uploaded now (docs/design.md, "Tiered storage": what is uploaded,
/// and when). Most pass by themselves: the log flushes, the high watermark moves, a
/// transaction ends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotUploadable {
    /// The log has no segment with that base offset.
    NoSuchSegment,
    /// It is the active segment.
    Active,
    /// It is not wholly durable yet: it ends above the recovery point.
    NotDurable {
        /// The log's recovery point.
        recovery_point: i64,
    },
    /// It is not wholly committed: it ends above the high watermark.
    AboveHighWatermark {
        /// The log's high watermark.
        high_watermark: i64,
    },
    /// An open transaction may still decide some of it: it ends above the last stable offset.
    Unstable {
        /// The log's last stable offset.
        last_stable_offset: i64,
    },
    /// It lies wholly below the log start: nothing in it is readable.
    BelowLogStart {
        /// The log's start offset.
        log_start_offset: i64,
    },
    /// The log compacts, which rewrites sealed segments (Kafka's tiered storage refuses
    /// compacted topics too).
    Compacted,
    /// The log is closed.
    Closed,
}

impl std::fmt::Display for NotUploadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotUploadable::NoSuchSegment => write!(f, "the log has no segment there"),
            NotUploadable::Active => write!(f, "it is the active segment"),
            NotUploadable::NotDurable { recovery_point } => write!(
                f,
                "it ends above the recovery point {recovery_point}: not wholly durable yet"
            ),
            NotUploadable::AboveHighWatermark { high_watermark } => write!(
                f,
                "it ends above the high watermark {high_watermark}: not wholly committed yet"
            ),
            NotUploadable::Unstable { last_stable_offset } => write!(
                f,
                "it ends above the last stable offset {last_stable_offset}: an open \
                 transaction may still decide part of it"
            ),
            NotUploadable::BelowLogStart { log_start_offset } => {
                write!(f, "it lies wholly below the log start {log_start_offset}")
            }
            NotUploadable::Compacted => write!(
                f,
                "the log's cleanup policy compacts, which rewrites sealed segments"
            ),
            NotUploadable::Closed => write!(f, "the log is closed"),
        }
    }
}

/// A tiered-storage operation that failed. A failed upload changed no local file and left no
/// manifest naming anything it put.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    /// The partition prefix cannot be used in keys.
    #[error("partition prefix {prefix:?}: {reason}")]
    BadPartitionPrefix {
        /// The prefix given.
        prefix: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The segment cannot be uploaded now.
    #[error("segment {segment}: not uploadable: {reason}")]
    NotUploadable {
        /// Its base offset.
        segment: i64,
        /// Why.
        reason: NotUploadable,
    },
    /// The segment does not start where the remote segments end, so uploading it would leave
    /// a hole (or an overlap) in the remote log.
    #[error(
        "segment {segment}: the remote segments end at {remote_end}; the next upload must start there"
    )]
    NotContiguous {
        /// Its base offset.
        segment: i64,
        /// Where the manifest's last segment ends.
        remote_end: i64,
    },
    /// The segment's bytes failed the checks every upload makes: nothing was uploaded.
    #[error("segment {segment}: damaged, not uploaded: {}", describe(problems))]
    Damaged {
        /// Its base offset.
        segment: i64,
        /// Everything found, each with its file and byte position.
        problems: Vec<Problem>,
    },
    /// A local file of the segment could not be read.
    #[error("segment {segment}: {error}")]
    LocalFile {
        /// Its base offset.
        segment: i64,
        /// The failed operation and its file.
        error: IoError,
    },
    /// A local file of the segment is missing or unusable (removed by retention meanwhile, or
    /// not a regular file).
    #[error("segment {segment}: {path}: {reason}", path = path.display())]
    LocalFileUnusable {
        /// Its base offset.
        segment: i64,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The producer state at the segment's end could not be rebuilt.
    #[error("segment {segment}: producer state at offset {offset}: {error}")]
    ProducerState {
        /// Its base offset.
        segment: i64,
        /// The segment's end.
        offset: i64,
        /// Why.
        error: RewriteError,
    },
    /// A call to the store failed; `step` says what the upload was doing.
    #[error("{step}: {error}")]
    Remote {
        /// What was being done: `put .log of segment 860`, `put_if_absent manifest 3`, ...
        step: String,
        /// The store's error.
        error: RemoteError,
    },
    /// The current manifest (the highest generation) cannot be used: nothing falls back to an
    /// older one, which would forget what this one confirmed.
    #[error("manifest {key}{}: {reason}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    BadManifest {
        /// Its key.
        key: String,
        /// The line at fault, if one is.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// Local retention could not delete what it meant to (the log's retention rewrite failed).
    #[error("local retention: {error}")]
    LocalRetention {
        /// The rewrite's error.
        error: RewriteError,
    },
    /// A read at or above the local log start failed.
    #[error("read at offset {offset}: {error}")]
    LocalRead {
        /// The offset asked for.
        offset: i64,
        /// The log's error.
        error: ReadError,
    },
    /// A read below the local log start asked for an offset no remote segment holds.
    #[error(
        "offset {offset} is below the local log start {log_start_offset} and in no remote \
         segment (remote offsets: {})",
        remote.map_or("none".to_string(), |(a, b)| format!("[{a}, {b})"))
    )]
    NotRemote {
        /// The offset asked for.
        offset: i64,
        /// The log's (local) start offset.
        log_start_offset: i64,
        /// The offsets the manifest's segments cover, if it names any.
        remote: Option<(i64, i64)>,
    },
    /// An object read back is not what the manifest says was uploaded, or does not hold
    /// batches where it must.
    #[error("{key}{}: {reason}", position.map(|p| format!(" at byte {p}")).unwrap_or_default())]
    RemoteCorrupt {
        /// The object.
        key: String,
        /// The byte position in it, where one applies.
        position: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// A restore was asked of a log that holds something: only an empty log is restored.
    #[error(
        "restore: the log is not empty (offsets [{log_start_offset}, {log_end_offset})); only a \
         partition recreated empty is restored from the store"
    )]
    RestoreNotEmpty {
        /// Its log start.
        log_start_offset: i64,
        /// Its log end.
        log_end_offset: i64,
    },
    /// A restore found no remote segment of the partition.
    #[error("restore: {partition} has no remote segment to restore from")]
    NothingRemote {
        /// The partition prefix.
        partition: String,
    },
    /// The restored log could not start over with the remote state.
    #[error("restore: {error}")]
    Restore {
        /// The log's error.
        error: RewriteError,
    },
    /// Another writer wrote the manifest generation this upload meant to write (or a higher
    /// one): this upload is not confirmed, and its objects were deleted (`orphans_left` says
    /// how many could not be).
    #[error(
        "manifest generation {generation} of {partition} was written by another writer; segment \
         {segment} is not confirmed ({orphans_left} of its objects could not be deleted)"
    )]
    ManifestConflict {
        /// The partition prefix.
        partition: String,
        /// The generation lost.
        generation: u64,
        /// The segment that was being uploaded.
        segment: i64,
        /// Objects of the upload left in the store (named by no manifest).
        orphans_left: usize,
    },
    /// A read asked for an offset below the partition's log start (raised by DeleteRecords
    /// or retention across tiers; Kafka's OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is below the partition's log start {log_start_offset}")]
    BelowLogStart {
        /// The offset asked for.
        offset: i64,
        /// The partition's log start offset, across tiers.
        log_start_offset: i64,
    },
    /// A DeleteRecords asked for an offset below 0 or above the high watermark: nothing
    /// changed.
    #[error(
        "delete records to offset {offset}: not in [0, {high_watermark}] (the high watermark)"
    )]
    DeleteRecordsOutOfRange {
        /// The offset asked for.
        offset: i64,
        /// The log's high watermark.
        high_watermark: i64,
    },
    /// The log's own DeleteRecords failed after the manifest recorded the new log start; the
    /// next [`super::reconcile`] (the tiering job's next run) raises the local log start.
    #[error(
        "delete records to offset {offset}: the manifest holds it, the local log failed: {error}"
    )]
    LocalDeleteRecords {
        /// The new log start offset, recorded in the manifest.
        offset: i64,
        /// The log's error.
        error: RewriteError,
    },
    /// The manifest names a segment at this base whose offsets or bytes (size, CRC-32C) are
    /// not the local log's (the log was truncated below the remote end and written again):
    /// [`super::reconcile`] drops it from the manifest before anything is uploaded there.
    #[error(
        "segment {segment}: the manifest names [{segment}, {remote_end}) of {remote_size} bytes, \
         not the local log's bytes: it {}", local.map_or("has no sealed segment there".to_string(),
         |(end, size)| format!("has [{segment}, {end}) of {size} bytes")))]
    RemoteDiverged {
        /// Its base offset.
        segment: i64,
        /// The remote segment's end.
        remote_end: i64,
        /// The remote `.log`'s size.
        remote_size: u64,
        /// The local sealed segment's end and `.log` size, if it has one.
        local: Option<(i64, u64)>,
    },
}

fn describe(problems: &[Problem]) -> String {
    let shown: Vec<String> = problems
        .iter()
        .take(3)
        .map(|p| {
            let at = p
                .position
                .map(|b| format!(" at byte {b}"))
                .unwrap_or_default();
            format!("{}{at}: {} ({})", p.file.display(), p.reason, p.kind)
        })
        .collect();
    let more = problems.len().saturating_sub(3);
    let more = if more > 0 {
        format!("; {more} more")
    } else {
        String::new()
    };
    format!("{}{more}", shown.join("; "))
}

impl TierError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            TierError::BadPartitionPrefix { .. } => "bad_partition_prefix",
            TierError::NotUploadable { .. } => "not_uploadable",
            TierError::NotContiguous { .. } => "not_contiguous",
            TierError::Damaged { .. } => "damaged_segment",
            TierError::LocalFile { .. } => "local_io",
            TierError::LocalFileUnusable { .. } => "local_file_unusable",
            TierError::ProducerState { .. } => "producer_state",
            TierError::Remote { .. } => "remote",
            TierError::BadManifest { .. } => "bad_manifest",
            TierError::ManifestConflict { .. } => "manifest_conflict",
            TierError::LocalRetention { .. } => "local_retention",
            TierError::LocalRead { .. } => "local_read",
            TierError::NotRemote { .. } => "not_remote",
            TierError::RemoteCorrupt { .. } => "remote_corrupt",
            TierError::RestoreNotEmpty { .. } => "restore_not_empty",
            TierError::NothingRemote { .. } => "nothing_remote",
            TierError::Restore { .. } => "restore",
            TierError::BelowLogStart { .. } => "below_log_start",
            TierError::DeleteRecordsOutOfRange { .. } => "delete_records_out_of_range",
            TierError::LocalDeleteRecords { .. } => "local_delete_records",
            TierError::RemoteDiverged { .. } => "remote_diverged",
        }
    }
}
