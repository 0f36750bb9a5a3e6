//! Property tests: random operation sequences against plain in-memory models, with reopens and
//! crashes in between.
//!
//! One test binary per concern (Cargo builds and links each binary once); each module is
//! one file of tests, named after what it covers. Run one with
//! `cargo test --test models <module>::`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common_sim/mod.rs"]
mod common_sim;

mod compact_model;
mod exactly_once_model;
mod log_model;
mod producer_snapshot_props;
mod rewrite_model;
mod txn_model;
