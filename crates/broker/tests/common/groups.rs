//! Group requests over a raw [`Wire`], shared by the group tests (`admin_groups.rs`,
//! `group_persistence.rs`, `consumer_protocol.rs`, `consumer_group_persistence.rs`): offset
//! commits and fetches, and the consumer protocol's (KIP-848) heartbeats.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use uuid::Uuid;

use super::wire::{str_bytes as s, topic_name as name, Wire};

/// The partitions a consumer-protocol member owns or is assigned, by topic id.
pub type Owned = BTreeMap<Uuid, BTreeSet<i32>>;

/// A group id.
pub fn group(text: &str) -> GroupId {
    GroupId(s(text))
}

/// OffsetCommit at `version` of `offset` for partition 0 of `topic`, by whom `request` names
/// (its group, member, generation or member epoch, instance id): the partition's error code.
pub fn commit_offset(
    wire: &mut Wire,
    version: i16,
    request: OffsetCommitRequest,
    topic: &str,
    offset: i64,
) -> i16 {
    let response: OffsetCommitResponse = wire.call(
        ApiKey::OffsetCommit,
        version,
        &request.with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]),
    );
    response.topics[0].partitions[0].error_code
}

/// The offset `group_id` committed for partition 0 of `topic` (OffsetFetch v7).
pub fn committed(wire: &mut Wire, group_id: &str, topic: &str) -> i64 {
    let response: OffsetFetchResponse = wire.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(group(group_id))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![0])])),
    );
    response.topics[0].partitions[0].committed_offset
}

/// `owned` as a heartbeat reports it.
pub fn owned_list(owned: &Owned) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(*id)
                .with_partitions(ps.iter().copied().collect())
        })
        .collect()
}

/// A first heartbeat (epoch 0) subscribing to `topics`.
pub fn join_request(g: &str, member: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group(g))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(topics.iter().map(|t| name(t)).collect()))
        .with_topic_partitions(Some(Vec::new()))
}

/// A later heartbeat at `epoch` reporting `owned`.
pub fn beat_request(
    g: &str,
    member: &str,
    epoch: i32,
    owned: &Owned,
) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group(g))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(owned_list(owned)))
}

/// ConsumerGroupHeartbeat v1.
pub fn heartbeat(
    wire: &mut Wire,
    request: &ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    wire.call(ApiKey::ConsumerGroupHeartbeat, 1, request)
}

/// The assignment of a heartbeat answer (`None`: not sent, unchanged).
pub fn assignment(response: &ConsumerGroupHeartbeatResponse) -> Option<Owned> {
    response.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
            .collect()
    })
}

/// ConsumerGroupDescribe v1 of one group.
pub fn describe_consumer_group(wire: &mut Wire, g: &str) -> DescribedGroup {
    let mut response: ConsumerGroupDescribeResponse = wire.call(
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group(g)]),
    );
    response.groups.remove(0)
}

/// Every record of a `__consumer_offsets`-style log directory's segments (the broker's
/// offsets log, or a Kafka partition's), in log order: (key, value; `None` a tombstone).
/// Every record must have a key.
pub fn log_records(dir: &std::path::Path) -> Vec<(bytes::Bytes, Option<bytes::Bytes>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        // A preallocated segment ends in zeros: the batches stop at the first empty header.
        let mut end = 0;
        while end + 12 <= bytes.len() {
            let len = i32::from_be_bytes(bytes[end + 8..end + 12].try_into().unwrap());
            if len <= 0 {
                break;
            }
            end += 12 + len as usize;
        }
        let records = bytes::Bytes::from(bytes).slice(..end);
        for r in oncelog::format::ConsumerRecordIter::new(records, 0) {
            let r = r.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            out.push((r.key.expect("a key"), r.value));
        }
    }
    out
}
