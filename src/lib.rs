//! oncelog: an embeddable Kafka-format partition log with exactly-once idempotent appends.
#![deny(unsafe_code)]

pub mod format;
pub mod io;
pub mod producer;
