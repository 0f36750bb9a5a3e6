//! What every request handler sees: the store, the producer-id allocator, the committed
//! offsets, the counters, and how clients reach this broker.

use std::sync::Arc;

use crate::api::CommittedOffsets;
use crate::codec::RequestMemory;
use crate::coordinator::Groups;
use crate::producer_ids::ProducerIds;
use crate::share::ShareGroups;
use crate::stats::Stats;
use crate::store::Store;
use crate::txn_coordinator::Txns;

/// Where clients connect to this broker (the advertised listener).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

/// The broker's shared state.
#[derive(Debug)]
pub struct Broker {
    pub store: Arc<Store>,
    pub producer_ids: Arc<ProducerIds>,
    pub offsets: CommittedOffsets,
    pub groups: Groups,
    pub txns: Txns,
    /// Share groups (KIP-932) and their share-partitions.
    pub shares: ShareGroups,
    pub stats: Stats,
    pub endpoint: Endpoint,
    /// Partitions of a topic created by Metadata.
    pub default_partitions: i32,
    pub auto_create_topics: bool,
    /// Batches are stamped with the broker's clock (`LogAppendTime`), which produce answers
    /// then report.
    pub log_append_time: bool,
    /// An acks=all produce waits for its batch to be durable (every flush policy but
    /// `never`).
    pub acks_all_flushes: bool,
    /// The budget of bytes every connection together may hold in requests not yet handled
    /// (`queued.max.request.bytes`), and the count of what their read buffers hold.
    pub request_memory: Arc<RequestMemory>,
    /// Cluster mode (`--cluster`): the raft groups and the cluster image that Produce, Fetch,
    /// ListOffsets, Metadata and CreateTopics are answered from; `None` on a single broker.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}
