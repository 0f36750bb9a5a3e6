//! Real Kafka data (tests/fixtures) and the fuzz corpora: what Kafka wrote opens, reads and
//! rebuilds as Kafka says it should.
//!
//! One test binary per concern (Cargo builds and links each binary once); each module is
//! one file of tests, named after what it covers. Run one with
//! `cargo test --test kafka <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod compact_kafka_broker;
mod fixtures_in_repository;
mod fuzz_corpus;
mod golden_vectors;
mod kafka_fixtures;
mod kafka_producer_state;
mod kafka_snapshots;
mod manager_kafka_dirs;
mod snapshot_fuzz_corpus;
mod txn_kafka_broker;
