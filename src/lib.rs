//! oncelog: an embeddable Kafka-format partition log with exactly-once idempotent appends.
#![deny(unsafe_code)]
#![doc = include_str!("../README.md")]

pub mod format;
pub mod io;
pub mod log;
pub mod producer;
pub mod segment;
pub mod verify;

pub use log::{
    AppendError, AppendInfo, AppendOutcome, DeletedSegment, DuplicateInfo, Environment,
    EpochEndOffset, EpochEntry, FetchResult, FlushError, FlushPolicy, HighWatermarkPolicy,
    LatencyHistogram, Log, LogConfig, LogMetrics, OpenError, ReadError, RecoveryMode,
    RecoveryReport, RetentionReason, RetentionReport, RewriteError, TruncateReport, WaitFor,
    WaitOutcome,
};
