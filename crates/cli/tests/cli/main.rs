//! The `oncelog` command line, run as a user runs it (the built binary, its exit codes and its
//! output), on logs the tests write and on real Kafka data (tests/fixtures).
//!
//! One test binary (Cargo builds and links it once); each module is one file of tests, named
//! after the commands it covers. Run one with `cargo test -p oncelog-cli --test cli <module>::`.

#[path = "../../../../tests/common/mod.rs"]
mod common;
#[path = "../common_cli/mod.rs"]
mod common_cli;

mod cli_append_bench;
mod cli_compact;
mod cli_damage_sweep;
mod cli_dead_tail;
mod cli_demo;
mod cli_dump;
mod cli_log_dir;
mod cli_log_dir_skipped;
mod cli_operator_safety;
mod cli_rewrite;
mod cli_text;
mod cli_tier;
mod cli_txn;
mod cli_verify_recover;
