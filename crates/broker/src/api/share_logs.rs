//! Where the share group APIs find topics and read partitions: the broker's own store, or in
//! cluster mode the cluster image and this node's replicas (docs/design.md, "Share groups in a
//! cluster"). The share coordinator's code is the single broker's; this is its one seam to the
//! records it hands out.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use oncelog::ReadError;
use oncelog_raft::{GroupId, Replica};
use uuid::Uuid;

use crate::broker::Broker;
use crate::cluster::Cluster;
use crate::consumer_group::TopicInfo;
use crate::errors;
use crate::store::{Partition, Store};
use crate::wait::AppendListener;

/// How often a wait for records looks at a replica again: raft's state machine moves its high
/// watermark, and no append signal reaches the share fetchers (as the cluster's Fetch polls).
pub const REPLICA_POLL: Duration = Duration::from_millis(10);

/// The topics and partitions the share APIs serve.
#[derive(Clone)]
pub enum ShareLogs {
    /// The single broker's store.
    Store(Arc<Store>),
    /// A cluster node: the image's topics, read from this node's replicas.
    Cluster(Arc<Cluster>),
}

impl ShareLogs {
    /// The broker's: its cluster's when it runs in cluster mode.
    pub fn of(broker: &Broker) -> ShareLogs {
        match &broker.cluster {
            Some(c) => ShareLogs::Cluster(Arc::clone(c)),
            None => ShareLogs::Store(Arc::clone(&broker.store)),
        }
    }

    /// Every topic, as the share assignor sees them.
    pub fn topic_infos(&self) -> Vec<TopicInfo> {
        match self {
            ShareLogs::Store(store) => super::topic_infos(store),
            ShareLogs::Cluster(cluster) => super::cluster_topic_infos(cluster),
        }
    }

    /// A topic's name by id.
    pub fn topic_name(&self, id: Uuid) -> Option<String> {
        match self {
            ShareLogs::Store(store) => store.topic_by_id(id).map(|t| t.name.clone()),
            ShareLogs::Cluster(cluster) => cluster.image().topic_by_id(id).map(|t| t.name.clone()),
        }
    }

    /// A topic's id by name.
    pub fn topic_id(&self, name: &str) -> Option<Uuid> {
        match self {
            ShareLogs::Store(store) => store.topic(name).map(|t| t.id),
            ShareLogs::Cluster(cluster) => cluster.image().topic(name).map(|t| t.id),
        }
    }

    /// The partition count of a topic by name.
    pub fn partition_count(&self, name: &str) -> Option<i32> {
        match self {
            ShareLogs::Store(store) => store.topic(name).map(|t| t.partitions.len() as i32),
            ShareLogs::Cluster(cluster) => {
                cluster.image().topic(name).map(|t| t.replicas.len() as i32)
            }
        }
    }

    /// Partition `index` of topic `id`: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, or in a
    /// cluster NOT_LEADER_OR_FOLLOWER where this node holds no replica of it (a replication
    /// factor below the cluster's size: the coordinator reads only its own replicas).
    pub fn partition(&self, id: Uuid, index: i32) -> Result<ShareLog, ResponseError> {
        match self {
            ShareLogs::Store(store) => {
                let topic = store.topic_by_id(id).ok_or(ResponseError::UnknownTopicId)?;
                topic
                    .partition(index)
                    .cloned()
                    .map(ShareLog::Local)
                    .ok_or(ResponseError::UnknownTopicOrPartition)
            }
            ShareLogs::Cluster(cluster) => {
                let name = {
                    let image = cluster.image();
                    let topic = image.topic_by_id(id).ok_or(ResponseError::UnknownTopicId)?;
                    if index < 0 || index as usize >= topic.replicas.len() {
                        return Err(ResponseError::UnknownTopicOrPartition);
                    }
                    topic.name.clone()
                };
                let replica = cluster
                    .host()
                    .replica(&GroupId::new(name.clone(), index))
                    .map_err(|_| ResponseError::NotLeaderOrFollower)?;
                let start = cluster.log_start(&name, index, &replica);
                Ok(ShareLog::Replica(replica, start))
            }
        }
    }
}

/// One partition the share APIs read.
#[derive(Clone)]
pub enum ShareLog {
    Local(Arc<Partition>),
    /// This node's replica: read up to its high watermark (raft's commit), so only records a
    /// majority holds are handed out, whichever replica this is; and from the partition's log
    /// start as clients see it (the one DeleteRecords set, when it is above the replica's own).
    Replica(Arc<Replica>, i64),
}

impl ShareLog {
    pub fn log_start_offset(&self) -> i64 {
        match self {
            ShareLog::Local(p) => p.log_start_offset(),
            ShareLog::Replica(r, start) => r.log().log_start_offset().max(*start),
        }
    }

    /// Where a share-partition may read up to: the log end of the single broker's partition
    /// (every record of it is written and durable), a replica's high watermark.
    pub fn log_end_offset(&self) -> i64 {
        match self {
            ShareLog::Local(p) => p.log_end_offset(),
            ShareLog::Replica(r, _) => r.log().high_watermark(),
        }
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes` (at least one batch).
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, ResponseError> {
        match self {
            ShareLog::Local(p) => p
                .read(offset, max_bytes)
                .map_err(|refused| errors::read_error(&refused)),
            ShareLog::Replica(_, start) if offset < *start => Err(ResponseError::OffsetOutOfRange),
            ShareLog::Replica(r, _) => r
                .log()
                .fetch(offset, max_bytes.max(1))
                .map(|fetched| fetched.bytes)
                .map_err(|e| match e {
                    ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
                    ReadError::Closed => ResponseError::NotLeaderOrFollower,
                    _ => ResponseError::KafkaStorageError,
                }),
        }
    }

    /// A listener for the next append, where there is a signal for it (a replica has none:
    /// the wait polls it every [`REPLICA_POLL`]).
    pub fn listen(&self) -> Option<AppendListener> {
        match self {
            ShareLog::Local(p) => Some(p.listen()),
            ShareLog::Replica(..) => None,
        }
    }
}
