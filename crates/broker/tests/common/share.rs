//! Share group (KIP-932) requests over a raw connection, for the share group tests.

use bytes::Bytes;
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;
use uuid::Uuid;

use super::wire::{str_bytes, topic_name, Wire};

/// ShareFetch and ShareAcknowledge version of the tests: the stable v2.
pub const V2: i16 = 2;

/// Acknowledgement types.
pub const ACCEPT: i8 = 1;
pub const RELEASE: i8 = 2;
pub const REJECT: i8 = 3;

/// A ShareGroupHeartbeat v1.
pub fn heartbeat(
    wire: &mut Wire,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
) -> ShareGroupHeartbeatResponse {
    wire.call(
        ApiKey::ShareGroupHeartbeat,
        1,
        &ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_member_id(str_bytes(member))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                topics.map(|names| names.iter().map(|n| topic_name(n)).collect()),
            ),
    )
}

/// Joins `member` to `group` subscribed to `topics`; its member epoch.
pub fn join(wire: &mut Wire, group: &str, member: &str, topics: &[&str]) -> i32 {
    let response = heartbeat(wire, group, member, 0, Some(topics));
    assert_eq!(response.error_code, 0, "{:?}", response.error_message);
    response.member_epoch
}

/// One partition of a ShareFetch: topic id, partition, acknowledgement batches
/// `(first, last, types)`.
pub type Part = (Uuid, i32, Vec<(i64, i64, Vec<i8>)>);

/// A ShareFetch v2.
pub fn fetch(
    wire: &mut Wire,
    group: &str,
    member: &str,
    epoch: i32,
    parts: &[Part],
    max_wait_ms: i32,
) -> ShareFetchResponse {
    wire.call(
        ApiKey::ShareFetch,
        V2,
        &fetch_request(group, member, epoch, parts, max_wait_ms),
    )
}

/// The body of a ShareFetch v2 ([`fetch`]), for the tests that send it their own way.
pub fn fetch_request(
    group: &str,
    member: &str,
    epoch: i32,
    parts: &[Part],
    max_wait_ms: i32,
) -> ShareFetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (topic_id, index, acks) in parts {
        let partition = FetchPartition::default()
            .with_partition_index(*index)
            .with_acknowledgement_batches(
                acks.iter()
                    .map(|(first, last, types)| {
                        AcknowledgementBatch::default()
                            .with_first_offset(*first)
                            .with_last_offset(*last)
                            .with_acknowledge_types(types.clone())
                    })
                    .collect(),
            );
        match topics.iter_mut().find(|t| t.topic_id == *topic_id) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic_id(*topic_id)
                    .with_partitions(vec![partition]),
            ),
        }
    }
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(str_bytes(group))))
        .with_member_id(Some(str_bytes(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(500)
        .with_topics(topics)
}

/// A ShareAcknowledge v2 of one partition.
pub fn acknowledge(
    wire: &mut Wire,
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    partition: i32,
    batches: &[(i64, i64, Vec<i8>)],
) -> ShareAcknowledgeResponse {
    let parts = [(topic_id, partition, batches.to_vec())];
    wire.call(
        ApiKey::ShareAcknowledge,
        V2,
        &acknowledge_request(group, member, epoch, &parts),
    )
}

/// The body of a ShareAcknowledge v2 of `parts` ([`acknowledge`]).
pub fn acknowledge_request(
    group: &str,
    member: &str,
    epoch: i32,
    parts: &[Part],
) -> ShareAcknowledgeRequest {
    let mut topics: Vec<AcknowledgeTopic> = Vec::new();
    for (topic_id, index, batches) in parts {
        let partition = AcknowledgePartition::default()
            .with_partition_index(*index)
            .with_acknowledgement_batches(
                batches
                    .iter()
                    .map(|(first, last, types)| {
                        AckBatch::default()
                            .with_first_offset(*first)
                            .with_last_offset(*last)
                            .with_acknowledge_types(types.clone())
                    })
                    .collect(),
            );
        match topics.iter_mut().find(|t| t.topic_id == *topic_id) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                AcknowledgeTopic::default()
                    .with_topic_id(*topic_id)
                    .with_partitions(vec![partition]),
            ),
        }
    }
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(str_bytes(group))))
        .with_member_id(Some(str_bytes(member)))
        .with_share_session_epoch(epoch)
        .with_topics(topics)
}

/// Every acquired range of a ShareFetch answer: `(partition, first, last, delivery count)`.
pub fn acquired(response: &ShareFetchResponse) -> Vec<(i32, i64, i64, i16)> {
    response
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().flat_map(|p| {
                p.acquired_records.iter().map(move |a| {
                    (
                        p.partition_index,
                        a.first_offset,
                        a.last_offset,
                        a.delivery_count,
                    )
                })
            })
        })
        .collect()
}

/// The acknowledge error code of `partition` in a ShareFetch answer.
pub fn ack_error(response: &ShareFetchResponse, partition: i32) -> i16 {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| p.acknowledge_error_code)
        .expect("the partition is answered")
}

/// Produces `n` records in one batch to partition `partition` of `topic`.
pub fn produce(wire: &mut Wire, topic: &str, partition: i32, n: usize) {
    let mut builder = BatchBuilder::new().partition_leader_epoch(0);
    for i in 0..n {
        builder.append(1_700_000_000_000 + i as i64, None, Some(b"value"), &[]);
    }
    let records = Bytes::from(builder.build().unwrap());
    assert_eq!(
        super::wire::produce(wire, topic, partition, records).error_code,
        0
    );
}
