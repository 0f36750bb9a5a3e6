//! The group, records and log-dir admin APIs over a raw connection, with kafka-protocol's
//! generated types: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete, DeleteRecords,
//! OffsetForLeaderEpoch and DescribeLogDirs, each answer and each refusal with Kafka's codes,
//! and the deletions surviving a SIGKILL.

mod common;

use bytes::Bytes;
use common::groups::{commit_offset, committed, group};
use common::wire::create_topic;
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;

use common::wire::{str_bytes as s, topic_name as name};

/// Produces a batch of `n` records to partition 0 of `topic`; returns its size in bytes.
fn produce(wire: &mut Wire, topic: &str, n: usize) -> usize {
    let mut builder = BatchBuilder::new().partition_leader_epoch(0);
    for i in 0..n {
        builder.append(1_700_000_000_000 + i as i64, None, Some(b"value"), &[]);
    }
    let records = Bytes::from(builder.build().unwrap());
    let size = records.len();
    assert_eq!(common::wire::produce(wire, topic, 0, records).error_code, 0);
    size
}

/// A consumer-protocol subscription (`ConsumerProtocolSubscription` v0) to `topics`.
fn subscription(topics: &[&str]) -> Bytes {
    let mut out = Vec::new();
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        out.extend_from_slice(&(t.len() as i16).to_be_bytes());
        out.extend_from_slice(t.as_bytes());
    }
    out.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(out)
}

/// Joins `group_id` as a new member with one protocol `range` and `metadata`; returns the
/// member id and the generation (after the initial rebalance delay).
fn join(wire: &mut Wire, group_id: &str, protocol_type: &str, metadata: Bytes) -> (String, i32) {
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        5,
        &JoinGroupRequest::default()
            .with_group_id(group(group_id))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(""))
            .with_protocol_type(s(protocol_type))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(metadata)]),
    );
    assert_eq!(joined.error_code, 0);
    (joined.member_id.to_string(), joined.generation_id)
}

/// The leader's SyncGroup with `assignment` for itself: the group becomes Stable.
fn sync(wire: &mut Wire, group_id: &str, member: &str, generation: i32, assignment: &[u8]) {
    let synced: SyncGroupResponse = wire.call(
        ApiKey::SyncGroup,
        3,
        &SyncGroupRequest::default()
            .with_group_id(group(group_id))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(s(member))
                .with_assignment(Bytes::copy_from_slice(assignment))]),
    );
    assert_eq!(synced.error_code, 0);
}

fn leave(wire: &mut Wire, group_id: &str, member: &str) {
    let left: LeaveGroupResponse = wire.call(
        ApiKey::LeaveGroup,
        1,
        &LeaveGroupRequest::default()
            .with_group_id(group(group_id))
            .with_member_id(s(member)),
    );
    assert_eq!(left.error_code, 0);
}

/// Commits `offset` for partition 0 of `topic` from outside any group (generation -1).
fn commit(wire: &mut Wire, group_id: &str, topic: &str, offset: i64) {
    let request = OffsetCommitRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""));
    assert_eq!(commit_offset(wire, 7, request, topic, offset), 0);
}

/// ListGroups at `version` with a states filter: (group, state, protocol type), in id order.
fn list_groups(
    wire: &mut Wire,
    version: i16,
    states: &[&str],
    types: &[&str],
) -> Vec<(String, String, String)> {
    let response: ListGroupsResponse = wire.call(
        ApiKey::ListGroups,
        version,
        &ListGroupsRequest::default()
            .with_states_filter(states.iter().map(|x| s(x)).collect())
            .with_types_filter(types.iter().map(|x| s(x)).collect()),
    );
    assert_eq!(response.error_code, 0);
    let mut groups: Vec<_> = response
        .groups
        .iter()
        .map(|g| {
            if version >= 5 {
                assert_eq!(g.group_type.as_str(), "classic");
            }
            (
                g.group_id.to_string(),
                g.group_state.to_string(),
                g.protocol_type.to_string(),
            )
        })
        .collect();
    groups.sort();
    groups
}

fn describe(
    wire: &mut Wire,
    version: i16,
    group_id: &str,
) -> describe_groups_response::DescribedGroup {
    let response: DescribeGroupsResponse = wire.call(
        ApiKey::DescribeGroups,
        version,
        &DescribeGroupsRequest::default()
            .with_groups(vec![group(group_id)])
            .with_include_authorized_operations(version >= 3),
    );
    assert_eq!(response.groups.len(), 1);
    response.groups[0].clone()
}

fn delete_groups(wire: &mut Wire, version: i16, groups: &[&str]) -> Vec<(String, i16)> {
    let response: DeleteGroupsResponse = wire.call(
        ApiKey::DeleteGroups,
        version,
        &DeleteGroupsRequest::default()
            .with_groups_names(groups.iter().map(|g| group(g)).collect()),
    );
    response
        .results
        .iter()
        .map(|r| (r.group_id.to_string(), r.error_code))
        .collect()
}

/// OffsetDelete of `group_id`: the top-level error and (topic, partition, error) per answer.
fn offset_delete(
    wire: &mut Wire,
    group_id: &str,
    partitions: &[(&str, i32)],
) -> (i16, Vec<(String, i32, i16)>) {
    let topics = partitions
        .iter()
        .map(|(t, p)| {
            OffsetDeleteRequestTopic::default()
                .with_name(name(t))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(*p)
                ])
        })
        .collect();
    let response: OffsetDeleteResponse = wire.call(
        ApiKey::OffsetDelete,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(group(group_id))
            .with_topics(topics),
    );
    let answers = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    (response.error_code, answers)
}

fn advertised(wire: &mut Wire, api: ApiKey) -> Option<(i16, i16)> {
    let response: ApiVersionsResponse =
        wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    common::wire::advertised(&response, api)
}

#[test]
fn the_admin_apis_are_advertised_with_the_versions_they_fill() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    for (api, range) in [
        (ApiKey::DescribeGroups, (0, 6)),
        (ApiKey::ListGroups, (0, 5)),
        (ApiKey::DeleteRecords, (0, 2)),
        (ApiKey::OffsetForLeaderEpoch, (2, 4)),
        (ApiKey::DescribeLogDirs, (1, 3)),
        (ApiKey::DeleteGroups, (0, 2)),
        (ApiKey::OffsetDelete, (0, 0)),
    ] {
        assert_eq!(advertised(&mut wire, api), Some(range), "{api:?}");
    }
}

/// ListGroups and DescribeGroups through a group's life: joining (CompletingRebalance, no
/// protocol and no metadata, as Kafka), Stable (the protocol, each member's client id, host,
/// metadata and assignment), a group of committed offsets only (Empty, no protocol type), an
/// unknown group (Dead; from v6 GROUP_ID_NOT_FOUND), and the state and type filters.
#[test]
fn list_and_describe_groups_answer_as_kafka_through_a_groups_life() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    assert!(
        list_groups(&mut wire, 0, &[], &[]).is_empty(),
        "no group yet"
    );

    let metadata = subscription(&["t"]);
    let (member, generation) = join(&mut wire, "g", "consumer", metadata.clone());
    let g = describe(&mut wire, 5, "g");
    assert_eq!(
        (
            g.error_code,
            g.group_state.as_str(),
            g.protocol_type.as_str(),
            g.protocol_data.as_str()
        ),
        (0, "CompletingRebalance", "consumer", "")
    );
    assert_eq!(g.members.len(), 1);
    assert!(
        g.members[0].member_metadata.is_empty(),
        "no metadata before Stable"
    );

    sync(&mut wire, "g", &member, generation, b"assigned");
    let g = describe(&mut wire, 5, "g");
    assert_eq!(
        (
            g.group_state.as_str(),
            g.protocol_type.as_str(),
            g.protocol_data.as_str()
        ),
        ("Stable", "consumer", "range")
    );
    let m = &g.members[0];
    assert_eq!(m.member_id.as_str(), member);
    assert_eq!(m.client_id.as_str(), "raw-test");
    assert_eq!(m.client_host.as_str(), "/127.0.0.1");
    assert_eq!(m.member_metadata, metadata);
    assert_eq!(&m.member_assignment[..], b"assigned");
    assert_eq!(m.group_instance_id, None);
    assert_eq!(
        g.authorized_operations,
        (1 << 3) | (1 << 6) | (1 << 8),
        "READ, DELETE, DESCRIBE"
    );
    let v2 = describe(&mut wire, 2, "g");
    assert_eq!(
        v2.authorized_operations,
        i32::MIN,
        "not asked for before v3"
    );

    // A group that only holds committed offsets: Empty, no protocol type.
    commit(&mut wire, "simple", "t", 3);
    let simple = describe(&mut wire, 6, "simple");
    assert_eq!(
        (
            simple.error_code,
            simple.group_state.as_str(),
            simple.protocol_type.as_str()
        ),
        (0, "Empty", "")
    );
    assert!(simple.members.is_empty());

    // An unknown group: Dead, and from v6 GROUP_ID_NOT_FOUND (69) with a message.
    let dead = describe(&mut wire, 5, "nope");
    assert_eq!((dead.error_code, dead.group_state.as_str()), (0, "Dead"));
    let dead = describe(&mut wire, 6, "nope");
    assert_eq!((dead.error_code, dead.group_state.as_str()), (69, "Dead"));
    assert_eq!(dead.error_message.as_deref(), Some("Group nope not found."));

    let everything = vec![
        (
            "g".to_string(),
            "Stable".to_string(),
            "consumer".to_string(),
        ),
        ("simple".to_string(), "Empty".to_string(), String::new()),
    ];
    for version in 0..=5 {
        let listed = list_groups(&mut wire, version, &[], &[]);
        let names: Vec<_> = listed
            .iter()
            .map(|(g, _, t)| (g.clone(), t.clone()))
            .collect();
        assert_eq!(
            names,
            everything
                .iter()
                .map(|(g, _, t)| (g.clone(), t.clone()))
                .collect::<Vec<_>>(),
            "v{version}"
        );
    }
    assert_eq!(list_groups(&mut wire, 4, &[], &[]), everything);
    // The states filter (v4+) is case-insensitive, as Kafka's.
    assert_eq!(
        list_groups(&mut wire, 4, &["stable"], &[]),
        everything[..1].to_vec()
    );
    assert_eq!(
        list_groups(&mut wire, 4, &["EMPTY", "Dead"], &[]),
        everything[1..].to_vec()
    );
    assert!(list_groups(&mut wire, 4, &["PreparingRebalance"], &[]).is_empty());
    // The types filter (v5): every group here is classic.
    assert_eq!(list_groups(&mut wire, 5, &[], &["Classic"]), everything);
    assert!(list_groups(&mut wire, 5, &[], &["consumer"]).is_empty());

    // The member leaves: the group is Empty and keeps its protocol type, as Kafka's.
    leave(&mut wire, "g", &member);
    let g = describe(&mut wire, 5, "g");
    assert_eq!(
        (
            g.group_state.as_str(),
            g.protocol_type.as_str(),
            g.members.len()
        ),
        ("Empty", "consumer", 0)
    );
}

/// DeleteGroups: a group with members is NON_EMPTY_GROUP (68) and keeps its offsets, an
/// unknown one GROUP_ID_NOT_FOUND (69); a deleted group's offsets are gone, also after a
/// SIGKILL, and the other groups' offsets stay.
#[test]
fn delete_groups_refuses_groups_with_members_and_unknown_ones_and_survives_a_crash() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    commit(&mut wire, "busy", "t", 4);
    commit(&mut wire, "gone", "t", 5);
    commit(&mut wire, "kept", "t", 6);
    let (member, generation) = join(&mut wire, "busy", "consumer", subscription(&["t"]));
    sync(&mut wire, "busy", &member, generation, b"");

    for version in 0..=2 {
        assert_eq!(
            delete_groups(&mut wire, version, &["busy", "nope"]),
            vec![("busy".to_string(), 68), ("nope".to_string(), 69)],
            "v{version}"
        );
    }
    assert_eq!(
        committed(&mut wire, "busy", "t"),
        4,
        "a refused delete changes nothing"
    );
    assert_eq!(
        describe(&mut wire, 5, "busy").group_state.as_str(),
        "Stable"
    );

    assert_eq!(
        delete_groups(&mut wire, 2, &["gone"]),
        vec![("gone".to_string(), 0)]
    );
    assert_eq!(committed(&mut wire, "gone", "t"), -1);
    assert_eq!(
        delete_groups(&mut wire, 2, &["gone"]),
        vec![("gone".to_string(), 69)],
        "once"
    );
    assert_eq!(describe(&mut wire, 5, "gone").group_state.as_str(), "Dead");

    // Once its member left, the group is Empty and may go, with its offsets.
    leave(&mut wire, "busy", &member);
    assert_eq!(
        delete_groups(&mut wire, 1, &["busy"]),
        vec![("busy".to_string(), 0)]
    );
    assert_eq!(committed(&mut wire, "busy", "t"), -1);
    let listed: Vec<String> = list_groups(&mut wire, 4, &[], &[])
        .into_iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(listed, vec!["kept".to_string()]);

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        committed(&mut wire, "gone", "t"),
        -1,
        "the tombstone outlived a SIGKILL"
    );
    assert_eq!(committed(&mut wire, "busy", "t"), -1);
    assert_eq!(committed(&mut wire, "kept", "t"), 6);
    let listed: Vec<String> = list_groups(&mut wire, 4, &[], &[])
        .into_iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(
        listed,
        vec!["kept".to_string()],
        "deleted groups do not come back"
    );
}

/// OffsetDelete (KIP-496): a topic a live member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC
/// (86) and keeps its offsets; the others' offsets go, also after a SIGKILL; unknown topics and
/// partitions are UNKNOWN_TOPIC_OR_PARTITION (3); an unknown group GROUP_ID_NOT_FOUND (69), an
/// empty id INVALID_GROUP_ID (24), a group with members outside the consumer protocol
/// NON_EMPTY_GROUP (68), and subscriptions that cannot be read count as every topic.
#[test]
fn offset_delete_refuses_subscribed_topics_and_survives_a_crash() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    create_topic(&mut wire, "u");
    commit(&mut wire, "g", "t", 5);
    commit(&mut wire, "g", "u", 7);
    let (member, generation) = join(&mut wire, "g", "consumer", subscription(&["t"]));
    sync(&mut wire, "g", &member, generation, b"");

    let (error, answers) =
        offset_delete(&mut wire, "g", &[("t", 0), ("u", 0), ("nope", 0), ("u", 9)]);
    assert_eq!(error, 0);
    assert_eq!(
        answers,
        vec![
            ("t".to_string(), 0, 86),
            ("u".to_string(), 0, 0),
            ("nope".to_string(), 0, 3),
            ("u".to_string(), 9, 3),
        ]
    );
    assert_eq!(
        committed(&mut wire, "g", "t"),
        5,
        "a subscribed topic keeps its offset"
    );
    assert_eq!(committed(&mut wire, "g", "u"), -1);

    // Group-wide refusals: the top-level error, no topics.
    assert_eq!(
        offset_delete(&mut wire, "unknown", &[("t", 0)]),
        (69, vec![])
    );
    assert_eq!(offset_delete(&mut wire, "", &[("t", 0)]), (24, vec![]));
    let (other, other_generation) = join(&mut wire, "connect", "connect", Bytes::from_static(b"x"));
    sync(&mut wire, "connect", &other, other_generation, b"");
    assert_eq!(
        offset_delete(&mut wire, "connect", &[("t", 0)]),
        (68, vec![])
    );
    // A consumer whose subscription does not parse: every topic counts as subscribed.
    commit(&mut wire, "opaque", "u", 2);
    let (third, third_generation) = join(&mut wire, "opaque", "consumer", Bytes::from_static(b"?"));
    sync(&mut wire, "opaque", &third, third_generation, b"");
    assert_eq!(
        offset_delete(&mut wire, "opaque", &[("u", 0)]),
        (0, vec![("u".to_string(), 0, 86)])
    );
    assert_eq!(committed(&mut wire, "opaque", "u"), 2);

    // Once the member left, the subscription is gone and the offset may go.
    leave(&mut wire, "g", &member);
    assert_eq!(
        offset_delete(&mut wire, "g", &[("t", 0)]),
        (0, vec![("t".to_string(), 0, 0)])
    );
    commit(&mut wire, "g", "u", 8);

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        committed(&mut wire, "g", "t"),
        -1,
        "the tombstone outlived a SIGKILL"
    );
    assert_eq!(
        committed(&mut wire, "g", "u"),
        8,
        "a commit after a delete stays"
    );
    assert_eq!(committed(&mut wire, "opaque", "u"), 2);
}

fn delete_records(wire: &mut Wire, version: i16, topic: &str, offset: i64) -> (i64, i16) {
    let response: DeleteRecordsResponse = wire.call(
        ApiKey::DeleteRecords,
        version,
        &DeleteRecordsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(offset)])]),
    );
    let p = &response.topics[0].partitions[0];
    (p.low_watermark, p.error_code)
}

fn earliest(wire: &mut Wire, topic: &str) -> i64 {
    let response: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(-2)
                ])]),
    );
    let p = &response.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// The error of a fetch of partition 0 of `topic` from `offset`.
fn fetch_error(wire: &mut Wire, topic: &str, offset: i64) -> i16 {
    let response: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    response.responses[0].partitions[0].error_code
}

/// DeleteRecords: the log start offset rises (durably: a SIGKILL keeps it), reads below it are
/// OFFSET_OUT_OF_RANGE, an offset above the high watermark or negative is OFFSET_OUT_OF_RANGE
/// (1) with low watermark -1 and changes nothing, an offset below the start changes nothing,
/// -1 means the high watermark, an unknown partition is UNKNOWN_TOPIC_OR_PARTITION (3).
#[test]
fn delete_records_raises_the_low_watermark_durably_and_refuses_offsets_out_of_range() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    produce(&mut wire, "t", 5);
    produce(&mut wire, "t", 5);

    assert_eq!(
        delete_records(&mut wire, 0, "t", 11),
        (-1, 1),
        "above the high watermark"
    );
    assert_eq!(delete_records(&mut wire, 1, "t", -2), (-1, 1), "negative");
    assert_eq!(delete_records(&mut wire, 2, "nope", 1), (-1, 3));
    assert_eq!(earliest(&mut wire, "t"), 0, "the refusals changed nothing");

    assert_eq!(delete_records(&mut wire, 2, "t", 3), (3, 0));
    assert_eq!(earliest(&mut wire, "t"), 3);
    assert_eq!(fetch_error(&mut wire, "t", 0), 1, "below the new start");
    assert_eq!(fetch_error(&mut wire, "t", 3), 0);
    assert_eq!(
        delete_records(&mut wire, 2, "t", 1),
        (3, 0),
        "below the start: nothing changes"
    );

    broker.crash();
    let mut broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        earliest(&mut wire, "t"),
        3,
        "the new start outlived a SIGKILL"
    );

    // -1: up to the high watermark, everything.
    assert_eq!(delete_records(&mut wire, 2, "t", -1), (10, 0));
    assert_eq!(earliest(&mut wire, "t"), 10);
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(earliest(&mut wire, "t"), 10);
    produce(&mut wire, "t", 1);
    assert_eq!(
        fetch_error(&mut wire, "t", 10),
        0,
        "the log goes on from there"
    );
}

fn offset_for_epoch(
    wire: &mut Wire,
    version: i16,
    topic: &str,
    current: i32,
    epoch: i32,
) -> (i16, i32, i64) {
    let response: OffsetForLeaderEpochResponse = wire.call(
        ApiKey::OffsetForLeaderEpoch,
        version,
        &OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(current)
                    .with_leader_epoch(epoch)])]),
    );
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// OffsetForLeaderEpoch as a consumer sends it (replica id -1): the epoch this broker leads in
/// ends at the log end (also for an empty partition: its epoch starts at 0 as Kafka's leader
/// records it), an epoch above every known one is undefined (-1, -1); a stale current epoch
/// is FENCED_LEADER_EPOCH (74), a newer one UNKNOWN_LEADER_EPOCH (75), -1 is not checked; an
/// unknown partition UNKNOWN_TOPIC_OR_PARTITION (3).
#[test]
fn offset_for_leader_epoch_answers_from_the_epoch_cache() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    for version in 2..=4 {
        assert_eq!(
            offset_for_epoch(&mut wire, version, "t", 0, 0),
            (0, 0, 0),
            "v{version}"
        );
    }
    produce(&mut wire, "t", 4);
    assert_eq!(offset_for_epoch(&mut wire, 4, "t", 0, 0), (0, 0, 4));
    assert_eq!(
        offset_for_epoch(&mut wire, 4, "t", -1, 0),
        (0, 0, 4),
        "-1: unchecked"
    );
    assert_eq!(
        offset_for_epoch(&mut wire, 4, "t", 0, 3),
        (0, -1, -1),
        "an unknown epoch"
    );
    assert_eq!(offset_for_epoch(&mut wire, 4, "t", 1, 0), (75, -1, -1));
    assert_eq!(offset_for_epoch(&mut wire, 4, "t", -2, 0), (74, -1, -1));
    assert_eq!(offset_for_epoch(&mut wire, 3, "nope", 0, 0), (3, -1, -1));
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        offset_for_epoch(&mut wire, 4, "t", 0, 0),
        (0, 0, 4),
        "after a SIGKILL"
    );
}

/// DescribeLogDirs: the data directory (absolute) with each partition asked about, its size
/// on disk (the bytes of its batches), offset lag 0 and not a future replica.
#[test]
fn describe_log_dirs_reports_each_partitions_size_in_the_data_directory() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    create_topic(&mut wire, "u");
    let size = produce(&mut wire, "t", 3) + produce(&mut wire, "t", 2);
    for version in 1..=3 {
        let response: DescribeLogDirsResponse = wire.call(
            ApiKey::DescribeLogDirs,
            version,
            &DescribeLogDirsRequest::default().with_topics(None),
        );
        assert_eq!(response.error_code, 0);
        assert_eq!(response.results.len(), 1);
        let dir = &response.results[0];
        assert_eq!(dir.error_code, 0);
        assert_eq!(dir.log_dir.as_str(), data.path().to_str().unwrap());
        let mut topics: Vec<(String, i32, i64, i64, bool)> = dir
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        t.name.to_string(),
                        p.partition_index,
                        p.partition_size,
                        p.offset_lag,
                        p.is_future_key,
                    )
                })
            })
            .collect();
        topics.sort();
        assert_eq!(
            topics,
            vec![
                ("t".to_string(), 0, size as i64, 0, false),
                ("u".to_string(), 0, 0, 0, false)
            ],
            "v{version}"
        );
    }
    // Only what is asked about; a topic none of whose partitions exist is left out.
    let response: DescribeLogDirsResponse = wire.call(
        ApiKey::DescribeLogDirs,
        2,
        &DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(name("t"))
                .with_partitions(vec![0, 7]),
            DescribableLogDirTopic::default()
                .with_topic(name("nope"))
                .with_partitions(vec![0]),
        ])),
    );
    let topics = &response.results[0].topics;
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].name.as_str(), "t");
    assert_eq!(topics[0].partitions.len(), 1);
    assert_eq!(topics[0].partitions[0].partition_size, size as i64);
}
