//! What the tests of one replica's files on a simulated disk share (tests/install_crash.rs,
//! tests/entries_recovery.rs): the partition's directory, its environment on a `SimFs`, the
//! log configuration raft's store runs, and opening raft's view of the partition.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use oncelog::io::SimFs;
use oncelog::{Environment, FlushPolicy, HighWatermarkPolicy, Log, LogConfig, SystemClock};
use oncelog_raft::store::Partition;

/// The partition's directory on the simulated disk.
pub const DIR: &str = "/sim/topic-0";

/// An environment whose files are `fs`'s.
pub fn env(fs: &SimFs) -> Environment {
    Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(Arc::new(SystemClock))
}

/// The log as raft's store runs it (small segments).
pub fn log_config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(4 * 1024)
        .high_watermark(HighWatermarkPolicy::SetByCaller)
        .flush_policy(FlushPolicy::Manual)
        .build()
        .unwrap()
}

/// Raft's view of the partition in [`DIR`] on `fs`.
pub fn open_partition(fs: &SimFs) -> Result<Partition, String> {
    let log = Log::open_in(env(fs), Path::new(DIR), log_config()).map_err(|e| e.to_string())?;
    Partition::open(log, fs.as_dyn())
}
