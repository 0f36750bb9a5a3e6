//! Cluster mode (docs/design.md, "A cluster of brokers"): `oncelog-broker` processes of one
//! cluster on loopback, killed, wiped, cut off from each other, and asked what Kafka's
//! clients and tools ask. One test binary, so its suites share one build and run side by
//! side (each test starts its own nodes on free ports over its own directories).
//! `ONCELOG_CLUSTER_ROUNDS` scales the rounds of kills, cuts and moves of every suite that
//! has rounds (common::cluster::rounds).

#[path = "../common/mod.rs"]
mod common;

mod configs;
mod describe;
mod kills;
mod kip848;
mod partition;
mod rejoin;
mod retention;
mod rf;
mod share;
mod topics;
mod txn;
