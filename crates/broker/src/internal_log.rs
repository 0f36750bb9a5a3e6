//! The logs the broker keeps for itself under `<data>/oncelog-broker-state/`: the committed
//! offsets ([`crate::offsets_log`]), the transaction states ([`crate::txn_coordinator`]) and
//! the share groups' state ([`crate::share::state_log`]). All are opened, recovered and
//! replayed the same way, here.

use std::path::{Path, PathBuf};

use oncelog::format::ConsumerRecord;
use oncelog::{CleanupPolicy, Log, LogConfig};

/// The error type of one of the broker's own logs: how [`open_replayed`] reports each failure.
pub(crate) trait InternalLogError {
    /// Creating the directory `path` failed.
    fn io(path: PathBuf, source: std::io::Error) -> Self;
    /// The log at `path` could not be opened, flushed or read.
    fn log(path: PathBuf, source: oncelog::Error) -> Self;
    /// The record at `offset` of the log at `path` is not what the broker writes there.
    fn record(path: PathBuf, offset: i64, problem: String) -> Self;
}

/// Why one of the broker's own logs (the offsets log, the share state log) could not be opened,
/// read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateLogError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}", path = .path.display())]
    Log {
        path: PathBuf,
        source: oncelog::Error,
    },
    /// A cluster node's replicated log refused the append (this node does not lead the group,
    /// or raft failed): retriable elsewhere.
    #[error("{path}: the replicated append failed: {error}", path = .path.display())]
    Replica { path: PathBuf, error: String },
    #[error("{path}: record at offset {offset}: {problem}", path = .path.display())]
    Record {
        path: PathBuf,
        offset: i64,
        problem: String,
    },
}

impl InternalLogError for StateLogError {
    fn io(path: PathBuf, source: std::io::Error) -> Self {
        StateLogError::Io { path, source }
    }
    fn log(path: PathBuf, source: oncelog::Error) -> Self {
        StateLogError::Log { path, source }
    }
    fn record(path: PathBuf, offset: i64, problem: String) -> Self {
        StateLogError::Record {
            path,
            offset,
            problem,
        }
    }
}

/// Opens (or creates) the broker's own log at `path`, its parent created first, makes durable
/// whatever recovery kept, and hands every record to `replay` in offset order; a record
/// `replay` refuses (with why) stops the open.
pub(crate) fn open_replayed<E: InternalLogError>(
    path: &Path,
    mut replay: impl FnMut(ConsumerRecord) -> Result<(), String>,
) -> Result<Log, E> {
    let err = |source: oncelog::Error| E::log(path.to_path_buf(), source);
    let config = LogConfig::builder()
        // Small: segments are preallocated, and the records are small.
        .segment_bytes(4 << 20)
        .segment_index_bytes(256 << 10)
        .prefault_bytes(0)
        // Kafka's `__consumer_offsets` and `__transaction_state` are compacted: the latest
        // record per key (partition, transactional id) stays.
        .cleanup_policy(CleanupPolicy::Compact)
        .build()
        .map_err(|e| err(oncelog::OpenError::from(e).into()))?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| E::io(parent.to_path_buf(), source))?;
    }
    let log = Log::open(path, config).map_err(|e| err(e.into()))?;
    // A tail recovery kept becomes durable, so the high watermark covers it.
    log.flush().map_err(|e| err(e.into()))?;
    let mut next = log.log_start_offset();
    loop {
        let fetched = log.fetch(next, 1 << 20).map_err(|e| err(e.into()))?;
        if fetched.bytes.is_empty() {
            break;
        }
        for r in fetched.records() {
            let r = r.map_err(|e| E::record(path.to_path_buf(), next, e.to_string()))?;
            let offset = r.offset;
            replay(r).map_err(|problem| E::record(path.to_path_buf(), offset, problem))?;
        }
        next = fetched.next_offset;
    }
    Ok(log)
}

/// Compacts the broker's own log at `path` if a round is due (its dirty ratio, Kafka's
/// rules), keeping the latest record of every key. Answers the records removed. Blocking.
pub(crate) fn compact_if_due<E: InternalLogError>(
    log: &Log,
    path: &Path,
    now_ms: i64,
) -> Result<u64, E> {
    if !log.maintenance().cleanable(now_ms).due {
        return Ok(0);
    }
    let report = log
        .maintenance()
        .compact(now_ms)
        .map_err(|e| E::log(path.to_path_buf(), e.into()))?;
    Ok(report.records_removed)
}
