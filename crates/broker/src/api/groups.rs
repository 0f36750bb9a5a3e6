//! What a consumer with a group id needs when it assigns partitions itself (`assign()`):
//! FindCoordinator names this broker, OffsetCommit stores positions, OffsetFetch returns them.
//!
//! Group membership (JoinGroup, SyncGroup, Heartbeat) is a later step and is not advertised,
//! so a `subscribe()` consumer fails clearly instead of half-joining. Committed offsets are
//! kept in memory: a restart forgets them, and a consumer then starts from its
//! `auto.offset.reset` position. Storing them durably (Kafka's `__consumer_offsets` log) comes
//! with the groups.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;

/// FindCoordinator's key types.
const GROUP: i8 = 0;

/// Kafka's `offset.metadata.max.bytes` default.
const MAX_METADATA_BYTES: usize = 4096;

/// One committed position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// One group's committed positions, by (topic, partition).
type GroupOffsets = BTreeMap<(String, i32), Committed>;

/// Committed offsets by group, topic and partition.
#[derive(Debug, Default)]
pub struct CommittedOffsets {
    by_group: Mutex<BTreeMap<String, GroupOffsets>>,
}

impl CommittedOffsets {
    fn commit(&self, group: &str, topic: &str, partition: i32, committed: Committed) {
        self.lock()
            .entry(group.to_string())
            .or_default()
            .insert((topic.to_string(), partition), committed);
    }

    fn get(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        self.lock()
            .get(group)?
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Every (topic, partition) the group committed, in order.
    fn all(&self, group: &str) -> Vec<(String, i32)> {
        self.lock()
            .get(group)
            .map(|offsets| offsets.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, GroupOffsets>> {
        self.by_group.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub fn find_coordinator(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: FindCoordinatorRequest = request.body()?;
    let endpoint = &broker.endpoint;
    let error = (body.key_type != GROUP).then_some(ResponseError::InvalidRequest);
    let message = error.map(|_| {
        StrBytes::from_static_str(
            "only group coordinators: transactions and share groups are not supported",
        )
    });
    let (node_id, host, port) = match error {
        None => (
            endpoint.node_id,
            StrBytes::from_string(endpoint.host.clone()),
            i32::from(endpoint.port),
        ),
        Some(_) => (-1, StrBytes::default(), -1),
    };
    let code = crate::errors::code(error);
    let response = if request.version >= 4 {
        // From v4 a request names several keys and gets one coordinator each.
        let coordinators = body
            .coordinator_keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(node_id))
                    .with_host(host.clone())
                    .with_port(port)
                    .with_error_code(code)
                    .with_error_message(message.clone())
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(node_id))
            .with_host(host)
            .with_port(port)
            .with_error_code(code)
            // Error messages exist from v1.
            .with_error_message(message.filter(|_| request.version >= 1))
    };
    Ok(Reply::Now(respond(request, &response)?))
}

pub fn offset_commit(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: OffsetCommitRequest = request.body()?;
    // Kafka accepts commits for a group it does not manage only from a consumer outside any
    // generation (an `assign()` consumer sends -1); anything else claims a membership this
    // broker never granted.
    let group_error =
        (body.generation_id_or_member_epoch >= 0).then_some(ResponseError::IllegalGeneration);
    let topics = body
        .topics
        .into_iter()
        .map(|topic| {
            let known = broker.store.topic(&topic.name);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let error = group_error.or_else(|| {
                        let partition = known.as_ref().and_then(|t| t.partition(p.partition_index));
                        if partition.is_none() {
                            Some(ResponseError::UnknownTopicOrPartition)
                        } else if p.committed_metadata.as_ref().map_or(0, |m| m.len())
                            > MAX_METADATA_BYTES
                        {
                            Some(ResponseError::OffsetMetadataTooLarge)
                        } else {
                            None
                        }
                    });
                    if error.is_none() {
                        broker.offsets.commit(
                            &body.group_id,
                            &topic.name,
                            p.partition_index,
                            Committed {
                                offset: p.committed_offset,
                                leader_epoch: p.committed_leader_epoch,
                                metadata: p
                                    .committed_metadata
                                    .map(|m| m.to_string())
                                    .unwrap_or_default(),
                            },
                        );
                    }
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(crate::errors::code(error))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    let response = OffsetCommitResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

pub fn offset_fetch(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: OffsetFetchRequest = request.body()?;
    let offsets = &broker.offsets;
    let response = if request.version >= 8 {
        // From v8 a request asks for several groups.
        let groups = body
            .groups
            .into_iter()
            .map(|group| {
                let wanted = match group.topics {
                    Some(topics) => topics
                        .into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect(),
                    None => group_partitions(offsets, &group.group_id),
                };
                let topics = wanted
                    .into_iter()
                    .map(|(name, partitions)| {
                        let partitions = partitions
                            .into_iter()
                            .map(|index| {
                                let c =
                                    committed_or_none(offsets.get(&group.group_id, &name, index));
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(c.offset)
                                    .with_committed_leader_epoch(c.leader_epoch)
                                    .with_metadata(Some(StrBytes::from_string(c.metadata)))
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(StrBytes::from_string(name)))
                            .with_partitions(partitions)
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id)
                    .with_topics(topics)
            })
            .collect();
        OffsetFetchResponse::default().with_groups(groups)
    } else {
        let wanted = match body.topics {
            Some(topics) => topics
                .into_iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                .collect(),
            None => group_partitions(offsets, &body.group_id),
        };
        let topics = wanted
            .into_iter()
            .map(|(name, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|index| {
                        let c = committed_or_none(offsets.get(&body.group_id, &name, index));
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(index)
                            .with_committed_offset(c.offset)
                            .with_committed_leader_epoch(c.leader_epoch)
                            .with_metadata(Some(StrBytes::from_string(c.metadata)))
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partitions(partitions)
            })
            .collect();
        OffsetFetchResponse::default().with_topics(topics)
    };
    Ok(Reply::Now(respond(request, &response)?))
}

/// "No committed offset", as Kafka answers it: offset -1, no epoch, empty metadata.
fn committed_or_none(committed: Option<Committed>) -> Committed {
    committed.unwrap_or(Committed {
        offset: -1,
        leader_epoch: -1,
        metadata: String::new(),
    })
}

/// The group's committed partitions, by topic.
fn group_partitions(offsets: &CommittedOffsets, group: &str) -> Vec<(String, Vec<i32>)> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in offsets.all(group) {
        by_topic.entry(topic).or_default().push(partition);
    }
    by_topic.into_iter().collect()
}
