//! oncelog-raft: oncelog partitions replicated on [openraft](https://docs.rs/openraft) 0.9,
//! with the partition log as the raft log (docs/design.md, "Replication on openraft").
//!
//! A [`Replica`] is one replica of one partition: an oncelog [`oncelog::Log`] in a directory,
//! openraft's log storage and state machine over it ([`store`]), and a network to the other
//! replicas (`network::mem` in process, [`network::tcp`] between processes). A client batch
//! appended on the leader gets its offsets and its producer check from the leader's log, is
//! replicated unchanged, and is acknowledged once a majority has it durably; a retry of it is
//! answered as a duplicate with the original offsets by every later leader, because each
//! replica's producer state comes from the replicated log.
//!
//! A [`Host`] is many partitions' replicas in one process (docs/design.md, "Many partitions
//! per process"): one openraft group each over one `oncelog::LogManager`, one connection per
//! peer node shared by all groups ([`network::mux`]).
//!
//! The binary `oncelog-raft-node` runs one replica (or, with `--topic`, a [`Host`]) as a process: raft RPCs over
//! [`network::tcp`], and the [`client`] protocol (produce a batch, read what is committed,
//! status) for producers and checkers.

#![warn(missing_docs)]

use std::io::Cursor;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub mod client;
pub mod entry;
pub mod host;
pub mod network;
mod replica;
pub mod state_file;
pub mod store;

pub use host::{GroupStatus, Host, HostError, RejoinFloor};
/// The consensus engine, for the types its answers carry (log ids, votes).
pub use openraft;
pub use replica::{synced_every_entry, Ack, Replica, ReplicaConfig, ReplicaError, Submitted};

/// A raft group of a process that hosts many ([`Host`]): a partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupId {
    /// The topic.
    pub topic: String,
    /// The partition number, from 0.
    pub partition: i32,
}

impl GroupId {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> GroupId {
        GroupId {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A replica's id in its partition's raft group.
pub type NodeId = u64;
/// How a replica is reached: its address.
pub type Node = openraft::BasicNode;

/// What a raft entry carries (openraft's `D`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Client batches, as the clients sent them, in the order the leader took them: one entry
    /// for all (docs/design.md, "Entries are runs of batches"). The leader's log assigns each
    /// its offsets and checks its producer. Only in the leader's hands: every entry read back
    /// from a log is `Stored`.
    Produce {
        /// The batches, each with the partition of the group it is for (its place in a
        /// partition set, docs/design.md "Partition sets"; 0 for a partition of its own).
        batches: Vec<(u32, Bytes)>,
        /// Where the leader's own answers go once the entry is durable in its log, before any
        /// follower has it (acks=1, [`crate::Submitted::written`]): a number the proposer
        /// registered with [`store::Partition`]; a number nobody registered is told nothing.
        notice: u64,
    },
    /// An entry's batches as the logs store them (offsets and leader epoch assigned, its head
    /// first), one run per partition of the group, in its order (one for a partition of its
    /// own; empty where the entry wrote nothing): what followers get.
    Stored(Vec<Bytes>),
    /// A transaction coordinator's COMMIT or ABORT marker ([`Replica::append_marker`]): the
    /// leader's log writes it as Kafka's control batch after the entry's head, with the
    /// producer checks of a marker. Like `Produce`, only in the leader's hands (followers get
    /// the written batch, `Stored`). A client's batch never becomes one: the log refuses a
    /// control batch from a producer. For the partition of the group it names (0 for a
    /// partition of its own).
    Marker(u32, Marker),
}

/// A COMMIT or ABORT marker as a raft entry carries it ([`oncelog::TxnMarker`]'s fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The producer whose transaction ends.
    pub producer_id: i64,
    /// The producer epoch the coordinator writes it with.
    pub producer_epoch: i16,
    /// The coordinator's epoch.
    pub coordinator_epoch: i32,
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// Kafka's `transaction.version` the coordinator runs.
    pub transaction_version: i8,
}

impl From<&oncelog::TxnMarker> for Marker {
    fn from(m: &oncelog::TxnMarker) -> Marker {
        Marker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            commit: m.result == oncelog::TxnResult::Commit,
            transaction_version: m.transaction_version,
        }
    }
}

impl From<Marker> for oncelog::TxnMarker {
    fn from(m: Marker) -> oncelog::TxnMarker {
        let marker = if m.commit {
            oncelog::TxnMarker::commit(m.producer_id, m.producer_epoch, m.coordinator_epoch)
        } else {
            oncelog::TxnMarker::abort(m.producer_id, m.producer_epoch, m.coordinator_epoch)
        };
        marker.with_transaction_version(m.transaction_version)
    }
}

/// What applying an entry answers (openraft's `R`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to each client batch of the entry, in the entry's order.
    Answers(Vec<Answer>),
    /// An entry this replica did not take from clients (a follower's, a blank or membership
    /// entry).
    Replicated,
}

/// What the leader's log answered one client batch of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The batch was written at these offsets, or was a retry of a batch its producer already
    /// wrote (nothing was written; the original's offsets).
    Acked(Ack),
    /// The leader's log refused the batch (its [`oncelog::AppendError::kind`] and message);
    /// nothing was written for it.
    Refused {
        /// The error's kind.
        kind: String,
        /// What it says.
        message: String,
    },
}

openraft::declare_raft_types!(
    /// The raft types of a replicated partition.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// openraft's `Raft` for a partition.
pub type Raft = openraft::Raft<TypeConfig>;
