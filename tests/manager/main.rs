//! Many partitions: the LogManager, its background jobs and its locks.
//!
//! One test binary per concern (Cargo builds and links each binary once); each module is
//! one file of tests, named after what it covers. Run one with
//! `cargo test --test manager <module>::`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common_tier/mod.rs"]
mod common_tier;

mod manager;
mod manager_flush_many;
mod manager_jobs;
mod manager_locks;
mod manager_tiering;
mod manager_write_descriptors;
