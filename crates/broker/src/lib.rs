//! oncelog-broker: an example Kafka-protocol broker on oncelog partition logs, for real Kafka
//! clients (librdkafka, kafka-python, the Java client).
//!
//! Layout: [`codec`] (framing, headers, response frames), [`api`] (one module per API family),
//! [`store`] (topics over the engine's `LogManager`), [`producer_ids`], [`wait`] (long-poll
//! wake-ups), [`connection`] and [`server`].
#![deny(unsafe_code)]

pub mod api;
pub mod assignor;
pub mod broker;
mod clock;
pub mod cluster;
pub mod codec;
pub mod config;
pub mod connection;
pub mod consumer_group;
pub mod consumer_group_records;
pub mod coordinator;
pub mod errors;
mod files;
pub mod group_metadata;
mod internal_log;
pub mod offsets_log;
pub mod producer_ids;
mod record_codec;
pub mod server;
pub mod share;
pub mod stats;
pub mod store;
pub mod txn_coordinator;
pub mod wait;

pub use config::{Args, BrokerConfig};
pub use server::{Server, ShutdownError, StartError};
