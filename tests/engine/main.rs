//! The log of one partition through its public API: appends, fetches, rolls, flushes, rewrites,
//! transactions, verification, the processed-id store.
//!
//! One test binary per concern (Cargo builds and links each binary once); each module is
//! one file of tests, named after what it covers. Run one with
//! `cargo test --test engine <module>::`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common_sim/mod.rs"]
mod common_sim;
#[path = "../common_tier/mod.rs"]
mod common_tier;

mod append_writes;
mod batch_roundtrip;
mod clean_open;
mod compact_log;
mod compact_txn_rebuild;
mod compressed_append;
mod dead_tail;
mod exactly_once;
mod group_commit;
mod handoff;
mod leader_epochs;
mod leftovers;
mod log_bad_input;
mod log_concurrency;
mod log_fetch;
mod log_metrics;
mod log_reader;
mod log_reconfigure;
mod log_roll;
mod log_smoke;
mod log_wait;
mod processed_store;
mod rewrite_readers;
mod rewrite_retention;
mod rewrite_truncate;
mod sealed_segments;
mod segment_growth;
mod segment_space;
mod tier_cache;
mod tier_common;
mod tier_delete_records;
mod tier_local;
mod tier_remote_retention;
mod tier_restore;
mod tier_upload;
mod txn_log;
mod verify;
