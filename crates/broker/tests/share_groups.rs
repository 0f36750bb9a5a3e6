//! Share groups (KIP-932) over the raw protocol: ShareGroupHeartbeat membership and the simple
//! assignor, ShareFetch acquisition from the latest offset, share sessions and their epochs,
//! ShareAcknowledge's ACCEPT/RELEASE/REJECT, acquisition locks that expire, the delivery count
//! limit, the group-type checks, DeleteGroups, and a restart that keeps acknowledged state.
//! Error codes are Kafka's (`Errors.java`).

mod common;

use common::share::{self, ACCEPT, REJECT, RELEASE};
use common::wire::{str_bytes, Wire};
use common::BrokerProcess;
use kafka_protocol::messages::*;
use uuid::Uuid;

const INVALID_REQUEST: i16 = 42;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const GROUP_ID_NOT_FOUND: i16 = 69;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const NON_EMPTY_GROUP: i16 = 68;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

/// A broker with `topic` created, a connection, and the topic's id.
fn start(dir: &tempfile::TempDir, extra: &[&str], topic: &str) -> (BrokerProcess, Wire, Uuid) {
    let broker = BrokerProcess::start(dir.path(), extra);
    let mut wire = Wire::connect(broker.addr);
    let id = common::wire::create_topic(&mut wire, topic);
    (broker, wire, id)
}

#[test]
fn share_apis_are_advertised_at_kafka_44_versions() {
    let (_dir, _broker, mut wire) = common::start_connected(&[]);
    let versions: ApiVersionsResponse =
        wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    use common::wire::advertised;
    assert_eq!(
        advertised(&versions, ApiKey::ShareGroupHeartbeat),
        Some((1, 1))
    );
    assert_eq!(
        advertised(&versions, ApiKey::ShareGroupDescribe),
        Some((1, 1))
    );
    assert_eq!(advertised(&versions, ApiKey::ShareFetch), Some((1, 2)));
    assert_eq!(
        advertised(&versions, ApiKey::ShareAcknowledge),
        Some((1, 2))
    );
}

#[test]
fn every_member_is_assigned_every_partition_of_its_topics() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-assign");
    let (_broker, mut wire, id) = start(&dir, &["--partitions", "3"], &topic);
    let a = share::heartbeat(&mut wire, "g-assign", "member-a", 0, Some(&[&topic]));
    assert_eq!(a.error_code, 0);
    assert_eq!(a.member_epoch, 1);
    let b = share::heartbeat(&mut wire, "g-assign", "member-b", 0, Some(&[&topic]));
    assert_eq!(b.member_epoch, 2);
    for response in [&a, &b] {
        let assignment = response
            .assignment
            .as_ref()
            .expect("a joiner learns its assignment");
        assert_eq!(assignment.topic_partitions.len(), 1);
        assert_eq!(assignment.topic_partitions[0].topic_id, id);
        assert_eq!(assignment.topic_partitions[0].partitions, vec![0, 1, 2]);
    }
    // Member a, at epoch 1, moves to the group epoch with its next heartbeat.
    let again = share::heartbeat(&mut wire, "g-assign", "member-a", 1, None);
    assert_eq!(again.error_code, 0);
    assert_eq!(again.member_epoch, 2);
    let described: ShareGroupDescribeResponse = wire.call(
        ApiKey::ShareGroupDescribe,
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes("g-assign"))]),
    );
    let g = &described.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.group_epoch, 2);
    assert_eq!(g.assignor_name.as_str(), "simple");
    assert_eq!(g.members.len(), 2);
    // Leaving: epoch -1 is answered, and the group epoch moves on.
    let left = share::heartbeat(&mut wire, "g-assign", "member-b", -1, None);
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let after = share::heartbeat(&mut wire, "g-assign", "member-a", 2, None);
    assert_eq!(after.member_epoch, 3);
}

#[test]
fn heartbeat_refusals_are_kafkas() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-refuse");
    let (_broker, mut wire, _) = start(&dir, &[], &topic);
    // Kafka's checks and messages (compared against Kafka 4.4, 2026-12-06).
    let empty_member = share::heartbeat(&mut wire, "g-refuse", "", 0, Some(&[&topic]));
    assert_eq!(
        (empty_member.error_code, empty_member.error_message),
        (INVALID_REQUEST, None)
    );
    let no_topics = share::heartbeat(&mut wire, "g-refuse", "m", 0, None);
    assert_eq!(no_topics.error_code, INVALID_REQUEST);
    assert_eq!(
        no_topics.error_message.as_deref(),
        Some("SubscribedTopicNames must be set in first request.")
    );
    let bad_epoch = share::heartbeat(&mut wire, "g-refuse", "m", -2, None);
    assert_eq!(bad_epoch.error_code, INVALID_REQUEST);
    assert_eq!(
        bad_epoch.error_message.as_deref(),
        Some("MemberEpoch is invalid.")
    );
    // Only a join creates the group.
    let no_group = share::heartbeat(&mut wire, "g-refuse", "m", 1, None);
    assert_eq!(no_group.error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        no_group.error_message.as_deref(),
        Some("Share group g-refuse not found.")
    );
    assert_eq!(share::join(&mut wire, "g-refuse", "m", &[&topic]), 1);
    let unknown = share::heartbeat(&mut wire, "g-refuse", "other", 1, None);
    assert_eq!(unknown.error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(
        unknown.error_message.as_deref(),
        Some("Member other is not a member of group g-refuse.")
    );
    let fenced = share::heartbeat(&mut wire, "g-refuse", "m", 5, None);
    assert_eq!(fenced.error_code, FENCED_MEMBER_EPOCH);
    assert_eq!(
        fenced.error_message.as_deref(),
        Some(
            "The share group member has a greater member epoch (5) than the one known by the \
             group coordinator (1). The member must abandon all its partitions and rejoin."
        )
    );
    let unknown_leave = share::heartbeat(&mut wire, "g-refuse", "other", -1, None);
    assert_eq!(unknown_leave.error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn group_ids_do_not_cross_group_types() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-types");
    let (_broker, mut wire, _) = start(&dir, &[], &topic);
    // A classic group (committed offsets only) is not a share group.
    let committed = common::groups::commit_offset(
        &mut wire,
        8,
        OffsetCommitRequest::default()
            .with_group_id(GroupId(str_bytes("classic-g")))
            .with_generation_id_or_member_epoch(-1),
        &topic,
        1,
    );
    assert_eq!(committed, 0);
    let refused = share::heartbeat(&mut wire, "classic-g", "m", 0, Some(&[&topic]));
    assert_eq!(refused.error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        refused.error_message.as_deref(),
        Some("Group classic-g is not a share group.")
    );
    // A share group is neither a classic group nor a consumer group.
    share::join(&mut wire, "share-g", "m", &[&topic]);
    let join: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        9,
        &JoinGroupRequest::default()
            .with_group_id(GroupId(str_bytes("share-g")))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_protocol_type(str_bytes("consumer")),
    );
    assert_eq!(join.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let consumer = common::groups::heartbeat(
        &mut wire,
        &common::groups::join_request("share-g", "m2", &[&topic]),
    );
    assert_eq!(consumer.error_code, GROUP_ID_NOT_FOUND);
    // A share group commits no offsets (Kafka: GROUP_ID_NOT_FOUND, "not a consumer group").
    let commit = common::groups::commit_offset(
        &mut wire,
        8,
        OffsetCommitRequest::default()
            .with_group_id(GroupId(str_bytes("share-g")))
            .with_generation_id_or_member_epoch(-1),
        &topic,
        1,
    );
    assert_eq!(commit, GROUP_ID_NOT_FOUND);
    let consumer_describe = common::groups::describe_consumer_group(&mut wire, "share-g");
    assert_eq!(consumer_describe.error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        consumer_describe.error_message.as_deref(),
        Some("Group share-g is not a consumer group.")
    );
    let describe: DescribeGroupsResponse = wire.call(
        ApiKey::DescribeGroups,
        6,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes("share-g"))]),
    );
    assert_eq!(describe.groups[0].error_code, GROUP_ID_NOT_FOUND);
    // ListGroups v5 shows it with type and protocol type `share`, and filters by type.
    let listed: ListGroupsResponse = wire.call(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![str_bytes("share")]),
    );
    assert_eq!(listed.groups.len(), 1);
    let g = &listed.groups[0];
    assert_eq!(g.group_id.0.as_str(), "share-g");
    assert_eq!(g.group_type.as_str(), "share");
    assert_eq!(g.protocol_type.as_str(), "share");
    assert_eq!(g.group_state.as_str(), "Stable");
    let described: ShareGroupDescribeResponse = wire.call(
        ApiKey::ShareGroupDescribe,
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![
            GroupId(str_bytes("classic-g")),
            GroupId(str_bytes("nobody")),
        ]),
    );
    assert_eq!(described.groups[0].error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(described.groups[1].error_code, GROUP_ID_NOT_FOUND);
}

#[test]
fn a_new_share_group_starts_at_the_latest_offset_and_acquires_once() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-latest");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::produce(&mut wire, &topic, 0, 2);
    share::join(&mut wire, "g-latest", "a", &[&topic]);
    share::join(&mut wire, "g-latest", "b", &[&topic]);
    share::produce(&mut wire, &topic, 0, 3);
    let a = share::fetch(&mut wire, "g-latest", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(a.error_code, 0);
    assert_eq!(a.acquisition_lock_timeout_ms, 30_000);
    // Offsets 0-1 were written before the group existed: not delivered.
    assert_eq!(share::acquired(&a), vec![(0, 2, 4, 1)]);
    let records = a.responses[0].partitions[0].records.clone().unwrap();
    assert!(!records.is_empty(), "the acquired records' batch is sent");
    // Acquired by a: b gets nothing while a holds them.
    let b = share::fetch(&mut wire, "g-latest", "b", 0, &[(id, 0, vec![])], 0);
    assert_eq!(b.error_code, 0);
    assert_eq!(share::acquired(&b), vec![]);
}

#[test]
fn share_session_epochs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-session");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-session", "m", &[&topic]);
    let none = share::fetch(&mut wire, "g-session", "m", 3, &[(id, 0, vec![])], 0);
    assert_eq!(none.error_code, SHARE_SESSION_NOT_FOUND);
    let no_member = share::fetch(&mut wire, "g-session", "", 0, &[(id, 0, vec![])], 0);
    assert_eq!(no_member.error_code, INVALID_REQUEST);
    let acks_in_initial = share::fetch(
        &mut wire,
        "g-session",
        "m",
        0,
        &[(id, 0, vec![(0, 0, vec![ACCEPT])])],
        0,
    );
    assert_eq!(acks_in_initial.error_code, INVALID_REQUEST);
    assert_eq!(
        share::fetch(&mut wire, "g-session", "m", 0, &[(id, 0, vec![])], 0).error_code,
        0
    );
    let skipped = share::fetch(&mut wire, "g-session", "m", 2, &[], 0);
    assert_eq!(skipped.error_code, INVALID_SHARE_SESSION_EPOCH);
    assert_eq!(
        share::fetch(&mut wire, "g-session", "m", 1, &[], 0).error_code,
        0
    );
    let ack_initial = share::acknowledge(&mut wire, "g-session", "m", 0, id, 0, &[]);
    assert_eq!(ack_initial.error_code, INVALID_SHARE_SESSION_EPOCH);
    let ack_stale = share::acknowledge(&mut wire, "g-session", "m", 1, id, 0, &[]);
    assert_eq!(ack_stale.error_code, INVALID_SHARE_SESSION_EPOCH);
    assert_eq!(
        share::acknowledge(&mut wire, "g-session", "m", 2, id, 0, &[]).error_code,
        0
    );
    // Closing (-1; a partition listed carries acknowledgements only, and is answered as Kafka
    // 4.4 does, without fetching), then the session is gone.
    let closing = share::fetch(&mut wire, "g-session", "m", -1, &[(id, 0, vec![])], 0);
    assert_eq!(closing.error_code, 0);
    assert_eq!(share::acquired(&closing), vec![]);
    let closed = share::fetch(&mut wire, "g-session", "m", 3, &[], 0);
    assert_eq!(closed.error_code, SHARE_SESSION_NOT_FOUND);
}

#[test]
fn acknowledgements_accept_release_and_reject() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-ack");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-ack", "a", &[&topic]);
    share::join(&mut wire, "g-ack", "b", &[&topic]);
    share::produce(&mut wire, &topic, 0, 6);
    let a = share::fetch(&mut wire, "g-ack", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&a), vec![(0, 0, 5, 1)]);
    // b may not acknowledge what a holds: the whole batch is refused.
    assert_eq!(
        share::fetch(&mut wire, "g-ack", "b", 0, &[(id, 0, vec![])], 0).error_code,
        0
    );
    let stolen = share::acknowledge(&mut wire, "g-ack", "b", 1, id, 0, &[(0, 1, vec![ACCEPT])]);
    assert_eq!(
        stolen.responses[0].partitions[0].error_code,
        INVALID_RECORD_STATE
    );
    assert_eq!(
        stolen.responses[0].partitions[0].error_message.as_deref(),
        Some("Member is not the owner of batch record")
    );
    // a: accept 0-1, release 2-3, reject 4, accept 5; piggybacked on its next fetch.
    let next = share::fetch(
        &mut wire,
        "g-ack",
        "a",
        1,
        &[(
            id,
            0,
            vec![
                (0, 1, vec![ACCEPT]),
                (2, 5, vec![RELEASE, RELEASE, REJECT, ACCEPT]),
            ],
        )],
        0,
    );
    assert_eq!(next.error_code, 0);
    assert_eq!(share::ack_error(&next, 0), 0);
    // a's own fetch took the released 2-3 back (delivery 2); b then gets nothing.
    assert_eq!(share::acquired(&next), vec![(0, 2, 3, 2)]);
    let released = share::acknowledge(&mut wire, "g-ack", "a", 2, id, 0, &[(2, 3, vec![RELEASE])]);
    assert_eq!(released.responses[0].partitions[0].error_code, 0);
    let b = share::fetch(&mut wire, "g-ack", "b", 2, &[], 1_000);
    assert_eq!(share::acquired(&b), vec![(0, 2, 3, 3)]);
    // Below the start offset (0-1, accepted) an acknowledgement passes and changes nothing, as
    // in Kafka; a settled record above it (4, rejected) cannot be acknowledged again.
    let late = share::acknowledge(&mut wire, "g-ack", "b", 3, id, 0, &[(0, 1, vec![ACCEPT])]);
    assert_eq!(late.responses[0].partitions[0].error_code, 0);
    let again = share::acknowledge(&mut wire, "g-ack", "b", 4, id, 0, &[(4, 4, vec![ACCEPT])]);
    assert_eq!(
        again.responses[0].partitions[0].error_code,
        INVALID_RECORD_STATE
    );
    // A type count that fits neither one per batch nor one per offset is INVALID_REQUEST.
    let malformed = share::acknowledge(
        &mut wire,
        "g-ack",
        "b",
        5,
        id,
        0,
        &[(2, 3, vec![ACCEPT, ACCEPT, ACCEPT])],
    );
    assert_eq!(
        malformed.responses[0].partitions[0].error_code,
        INVALID_REQUEST
    );
}

#[test]
fn an_expired_acquisition_lock_redelivers_to_another_member() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-lock");
    let (_broker, mut wire, id) = start(
        &dir,
        &["--group-share-record-lock-duration-ms", "500"],
        &topic,
    );
    share::join(&mut wire, "g-lock", "a", &[&topic]);
    share::join(&mut wire, "g-lock", "b", &[&topic]);
    share::produce(&mut wire, &topic, 0, 3);
    let a = share::fetch(&mut wire, "g-lock", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(a.acquisition_lock_timeout_ms, 500);
    assert_eq!(share::acquired(&a), vec![(0, 0, 2, 1)]);
    // b waits; a's lock runs out, and the records come to b, delivered a second time.
    let b = share::fetch(&mut wire, "g-lock", "b", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&b), vec![(0, 0, 2, 2)]);
    // a's late acknowledgement is refused: it no longer holds them.
    let late = share::acknowledge(&mut wire, "g-lock", "a", 1, id, 0, &[(0, 2, vec![ACCEPT])]);
    assert_eq!(
        late.responses[0].partitions[0].error_code,
        INVALID_RECORD_STATE
    );
}

#[test]
fn the_delivery_count_limit_archives_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-limit");
    let (broker, mut wire, id) = start(&dir, &["--group-share-delivery-count-limit", "2"], &topic);
    share::join(&mut wire, "g-limit", "a", &[&topic]);
    share::produce(&mut wire, &topic, 0, 1);
    let first = share::fetch(&mut wire, "g-limit", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&first), vec![(0, 0, 0, 1)]);
    let second = share::fetch(
        &mut wire,
        "g-limit",
        "a",
        1,
        &[(id, 0, vec![(0, 0, vec![RELEASE])])],
        5_000,
    );
    assert_eq!(share::acquired(&second), vec![(0, 0, 0, 2)]);
    // Released after its second delivery: archived, never delivered again.
    let third = share::fetch(
        &mut wire,
        "g-limit",
        "a",
        2,
        &[(id, 0, vec![(0, 0, vec![RELEASE])])],
        300,
    );
    assert_eq!(share::ack_error(&third, 0), 0);
    assert_eq!(share::acquired(&third), vec![]);
    // The log says so: a consumer waiting for it would wait for ever.
    let warned = broker.wait_for_log(
        "share records archived at the delivery count limit",
        std::time::Duration::from_secs(5),
    );
    assert!(
        warned.contains("g-limit") && warned.contains("first=0 last=0"),
        "{warned}"
    );
    // The next record is delivered as usual.
    share::produce(&mut wire, &topic, 0, 1);
    let fourth = share::fetch(&mut wire, "g-limit", "a", 3, &[], 5_000);
    assert_eq!(share::acquired(&fourth), vec![(0, 1, 1, 1)]);
}

#[test]
fn a_restart_keeps_acknowledged_records_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-restart");
    let (mut broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-restart", "a", &[&topic]);
    share::produce(&mut wire, &topic, 0, 5);
    let got = share::fetch(&mut wire, "g-restart", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&got), vec![(0, 0, 4, 1)]);
    let acked = share::acknowledge(
        &mut wire,
        "g-restart",
        "a",
        1,
        id,
        0,
        &[(0, 2, vec![ACCEPT])],
    );
    assert_eq!(acked.responses[0].partitions[0].error_code, 0);
    // A crash: what was acknowledged was durable before the answer.
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    // The group and its member are as they were: the member carries on at its epoch.
    let described: ShareGroupDescribeResponse = wire.call(
        ApiKey::ShareGroupDescribe,
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes("g-restart"))]),
    );
    let g = &described.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!((g.group_state.as_str(), g.group_epoch), ("Stable", 1));
    assert_eq!(g.members[0].member_id.as_str(), "a");
    assert_eq!(
        g.members[0].assignment.topic_partitions[0].partitions,
        vec![0]
    );
    let beat = share::heartbeat(&mut wire, "g-restart", "a", 1, None);
    assert_eq!((beat.error_code, beat.member_epoch), (0, 1));
    // Share sessions do not outlive the broker (Kafka's cache is in memory): the member
    // opens a new one.
    let stale = share::fetch(&mut wire, "g-restart", "a", 2, &[], 0);
    assert_eq!(stale.error_code, SHARE_SESSION_NOT_FOUND);
    // 0-2 stay acknowledged; 3-4, acquired at the crash, come back for a second delivery.
    let again = share::fetch(&mut wire, "g-restart", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&again), vec![(0, 3, 4, 2)]);
}

#[test]
fn delete_groups_deletes_an_empty_share_group_and_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-delete");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-delete", "a", &[&topic]);
    share::produce(&mut wire, &topic, 0, 2);
    assert_eq!(
        share::acquired(&share::fetch(
            &mut wire,
            "g-delete",
            "a",
            0,
            &[(id, 0, vec![])],
            5_000
        ))
        .len(),
        1
    );
    let delete = |wire: &mut Wire| -> i16 {
        let response: DeleteGroupsResponse = wire.call(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes("g-delete"))]),
        );
        response.results[0].error_code
    };
    assert_eq!(delete(&mut wire), NON_EMPTY_GROUP);
    assert_eq!(
        share::heartbeat(&mut wire, "g-delete", "a", -1, None).error_code,
        0
    );
    assert_eq!(delete(&mut wire), 0);
    assert_eq!(delete(&mut wire), GROUP_ID_NOT_FOUND);
    // A new group of that id starts afresh, at the latest offset.
    share::join(&mut wire, "g-delete", "a", &[&topic]);
    let fresh = share::fetch(&mut wire, "g-delete", "a", 0, &[(id, 0, vec![])], 0);
    assert_eq!(share::acquired(&fresh), vec![]);
}

/// IncrementalAlterConfigs on a GROUP resource (type 32), as franz-go's share tests set it.
fn alter_group_configs(wire: &mut Wire, group: &str, configs: &[(&str, Option<&str>)]) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let response: IncrementalAlterConfigsResponse = wire.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(str_bytes(group))
                .with_configs(
                    configs
                        .iter()
                        .map(|(name, value)| {
                            AlterableConfig::default()
                                .with_name(str_bytes(name))
                                .with_config_operation(if value.is_some() { 0 } else { 1 })
                                .with_value(value.map(str_bytes))
                        })
                        .collect(),
                ),
        ]),
    );
    response.responses[0].error_code
}

#[test]
fn group_configs_set_earliest_and_the_lock_duration() {
    const INVALID_CONFIG: i16 = 40;
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-config");
    let (broker, mut wire, id) = start(&dir, &[], &topic);
    share::produce(&mut wire, &topic, 0, 3);
    let set = [
        ("share.auto.offset.reset", Some("earliest")),
        ("share.record.lock.duration.ms", Some("15000")),
    ];
    assert_eq!(alter_group_configs(&mut wire, "g-config", &set), 0);
    // Kafka's rules: only latest/earliest here, the lock within [15000, 60000], known names.
    let bad_reset = [("share.auto.offset.reset", Some("middle"))];
    assert_eq!(
        alter_group_configs(&mut wire, "g-config", &bad_reset),
        INVALID_CONFIG
    );
    let bad_lock = [("share.record.lock.duration.ms", Some("1000"))];
    assert_eq!(
        alter_group_configs(&mut wire, "g-config", &bad_lock),
        INVALID_CONFIG
    );
    let unknown = [("share.no.such.setting", Some("1"))];
    assert_eq!(
        alter_group_configs(&mut wire, "g-config", &unknown),
        INVALID_CONFIG
    );
    let described: DescribeConfigsResponse = wire.call(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            kafka_protocol::messages::describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(str_bytes("g-config"))
                .with_configuration_keys(None),
        ]),
    );
    let configs: Vec<(String, Option<String>)> = described.results[0]
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect();
    assert!(configs.contains(&("share.auto.offset.reset".into(), Some("earliest".into()))));
    assert!(configs.contains(&("share.record.lock.duration.ms".into(), Some("15000".into()))));
    // The group starts at the log start, and its lock is its own; both outlive a restart.
    drop(wire);
    let mut broker = broker;
    broker.terminate();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    share::join(&mut wire, "g-config", "a", &[&topic]);
    let got = share::fetch(&mut wire, "g-config", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(got.acquisition_lock_timeout_ms, 15_000);
    assert_eq!(share::acquired(&got), vec![(0, 0, 2, 1)]);
}

#[test]
fn share_group_offsets_are_altered_described_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-offsets");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::produce(&mut wire, &topic, 0, 10);
    let alter = |wire: &mut Wire, group: &str, topic: &str, offset: i64| {
        use kafka_protocol::messages::alter_share_group_offsets_request::*;
        let response: AlterShareGroupOffsetsResponse = wire.call(
            ApiKey::AlterShareGroupOffsets,
            0,
            &AlterShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(str_bytes(group)))
                .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(common::wire::topic_name(topic))
                    .with_partitions(vec![
                        AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(0)
                            .with_start_offset(offset),
                    ])]),
        );
        response
    };
    let describe = |wire: &mut Wire, group: &str| -> DescribeShareGroupOffsetsResponse {
        use kafka_protocol::messages::describe_share_group_offsets_request::*;
        wire.call(
            ApiKey::DescribeShareGroupOffsets,
            1,
            &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(str_bytes(group)))
                    .with_topics(None),
            ]),
        )
    };
    // The group is created, Empty, at offset 4 of 10.
    let altered = alter(&mut wire, "g-offsets", &topic, 4);
    assert_eq!(altered.error_code, 0);
    assert_eq!(altered.responses[0].topic_id, id);
    assert_eq!(altered.responses[0].partitions[0].error_code, 0);
    let unknown = alter(&mut wire, "g-offsets", "no-such-topic", 0);
    assert_eq!(unknown.responses[0].partitions[0].error_code, 3);
    let d = describe(&mut wire, "g-offsets");
    let p = &d.groups[0].topics[0].partitions[0];
    assert_eq!((p.start_offset, p.lag), (4, 6));
    // An unknown group is no error (Kafka 4.4 answers it so too): it has no share-partitions.
    let nobody = describe(&mut wire, "nobody");
    assert_eq!(nobody.groups[0].error_code, 0);
    assert!(nobody.groups[0].topics.is_empty());
    // A member takes 4-9 and accepts 4-5: the start offset moves, the lag falls.
    share::join(&mut wire, "g-offsets", "a", &[&topic]);
    let got = share::fetch(&mut wire, "g-offsets", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&got), vec![(0, 4, 9, 1)]);
    share::acknowledge(
        &mut wire,
        "g-offsets",
        "a",
        1,
        id,
        0,
        &[(4, 5, vec![ACCEPT])],
    );
    let p = describe(&mut wire, "g-offsets").groups[0].topics[0].partitions[0].clone();
    assert_eq!((p.start_offset, p.lag), (6, 4));
    // With a member, altering and deleting are refused.
    assert_eq!(
        alter(&mut wire, "g-offsets", &topic, 0).error_code,
        NON_EMPTY_GROUP
    );
    let delete = |wire: &mut Wire| -> DeleteShareGroupOffsetsResponse {
        use kafka_protocol::messages::delete_share_group_offsets_request::*;
        wire.call(
            ApiKey::DeleteShareGroupOffsets,
            0,
            &DeleteShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(str_bytes("g-offsets")))
                .with_topics(vec![DeleteShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(common::wire::topic_name(&topic))]),
        )
    };
    assert_eq!(delete(&mut wire).error_code, NON_EMPTY_GROUP);
    assert_eq!(
        share::heartbeat(&mut wire, "g-offsets", "a", -1, None).error_code,
        0
    );
    let deleted = delete(&mut wire);
    assert_eq!(
        (deleted.error_code, deleted.responses[0].error_code),
        (0, 0)
    );
    assert!(describe(&mut wire, "g-offsets").groups[0].topics.is_empty());
}

#[test]
fn renew_restarts_the_lock_and_needs_is_renew_ack() {
    use kafka_protocol::messages::share_acknowledge_request::{
        AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
    };
    const RENEW: i8 = 4;
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-renew");
    let (_broker, mut wire, id) = start(
        &dir,
        &["--group-share-record-lock-duration-ms", "1000"],
        &topic,
    );
    share::join(&mut wire, "g-renew", "a", &[&topic]);
    share::join(&mut wire, "g-renew", "b", &[&topic]);
    share::produce(&mut wire, &topic, 0, 1);
    let got = share::fetch(&mut wire, "g-renew", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&got), vec![(0, 0, 0, 1)]);
    let renew = |wire: &mut Wire, epoch: i32, is_renew_ack: bool| -> ShareAcknowledgeResponse {
        wire.call(
            ApiKey::ShareAcknowledge,
            share::V2,
            &ShareAcknowledgeRequest::default()
                .with_group_id(Some(GroupId(str_bytes("g-renew"))))
                .with_member_id(Some(str_bytes("a")))
                .with_share_session_epoch(epoch)
                .with_is_renew_ack(is_renew_ack)
                .with_topics(vec![AcknowledgeTopic::default()
                    .with_topic_id(id)
                    .with_partitions(vec![AcknowledgePartition::default()
                        .with_partition_index(0)
                        .with_acknowledgement_batches(vec![
                            AcknowledgementBatch::default()
                                .with_first_offset(0)
                                .with_last_offset(0)
                                .with_acknowledge_types(vec![RENEW]),
                        ])])]),
        )
    };
    // RENEW without `IsRenewAck` is malformed: the partition's acknowledgements are refused.
    let malformed = renew(&mut wire, 1, false);
    assert_eq!(malformed.error_code, 0);
    assert_eq!(
        malformed.responses[0].partitions[0].error_code,
        INVALID_REQUEST
    );
    // Renewed every 600 ms, a's 1 s lock outlives 1.8 s: b never gets the record.
    for epoch in 2..=4 {
        std::thread::sleep(std::time::Duration::from_millis(600));
        let renewed = renew(&mut wire, epoch, true);
        assert_eq!(renewed.error_code, 0);
        assert_eq!(renewed.responses[0].partitions[0].error_code, 0);
    }
    let b = share::fetch(&mut wire, "g-renew", "b", 0, &[(id, 0, vec![])], 0);
    assert_eq!(share::acquired(&b), vec![]);
    // Without renewal it expires and goes to b.
    let b = share::fetch(&mut wire, "g-renew", "b", 1, &[], 5_000);
    assert_eq!(share::acquired(&b), vec![(0, 0, 0, 2)]);
}

#[test]
fn a_leaving_member_and_a_closed_session_release_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-leave");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-leave", "a", &[&topic]);
    share::join(&mut wire, "g-leave", "b", &[&topic]);
    share::produce(&mut wire, &topic, 0, 2);
    let a = share::fetch(&mut wire, "g-leave", "a", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&a), vec![(0, 0, 1, 1)]);
    // a closes its session (ShareAcknowledge -1) accepting offset 0: offset 1 is released at
    // once, not at its lock's expiry (30 s).
    let closed = share::acknowledge(
        &mut wire,
        "g-leave",
        "a",
        -1,
        id,
        0,
        &[(0, 0, vec![ACCEPT])],
    );
    assert_eq!(closed.error_code, 0);
    let b = share::fetch(&mut wire, "g-leave", "b", 0, &[(id, 0, vec![])], 1_000);
    assert_eq!(share::acquired(&b), vec![(0, 1, 1, 2)]);
    // b leaves the group: what it holds is released for the others.
    assert_eq!(
        share::heartbeat(&mut wire, "g-leave", "b", -1, None).error_code,
        0
    );
    let a = share::fetch(&mut wire, "g-leave", "a", 0, &[(id, 0, vec![])], 1_000);
    assert_eq!(share::acquired(&a), vec![(0, 1, 1, 3)]);
}

/// Records that members leave holding are handed out again until acknowledged, with Kafka's
/// delivery counts, and, as Kafka 4.4 does, sparingly once delivered often (from the 4th
/// delivery of the default limit of 5): half a batch per fetch, nothing after it, a record on
/// its last delivery alone. Handing whole batches out to the end let members that leave (or
/// are killed) with a large acquisition burn the last delivery of every record of it: franz-go's
/// TestShareGroupETL lost 137 records that way and waited for them for ever.
#[test]
fn records_members_leave_holding_are_redelivered_sparingly_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-throttle");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    let group = "g-throttle";
    share::join(&mut wire, group, "m1", &[&topic]);
    share::produce(&mut wire, &topic, 0, 8);
    let leave = |wire: &mut Wire, member: &str| {
        let left = share::heartbeat(wire, group, member, -1, None);
        assert_eq!(left.error_code, 0, "{:?}", left.error_message);
    };
    // Three members each take the whole batch and leave without acknowledging it.
    for round in 1..=3 {
        let member = format!("m{round}");
        if round > 1 {
            share::join(&mut wire, group, &member, &[&topic]);
        }
        let got = share::fetch(&mut wire, group, &member, 0, &[(id, 0, vec![])], 5_000);
        assert_eq!(share::acquired(&got), vec![(0, 0, 7, round)]);
        leave(&mut wire, &member);
    }
    // The 4th delivery: half the batch per fetch, and nothing after it in the same fetch
    // (the new batch 8..=9 comes in a fetch of its own).
    share::produce(&mut wire, &topic, 0, 2);
    share::join(&mut wire, group, "m4", &[&topic]);
    let mut got = Vec::new();
    for epoch in 0..3 {
        let fetched = share::fetch(&mut wire, group, "m4", epoch, &[(id, 0, vec![])], 5_000);
        got.push(share::acquired(&fetched));
    }
    assert_eq!(
        got,
        vec![vec![(0, 0, 3, 4)], vec![(0, 4, 7, 4)], vec![(0, 8, 9, 1)]]
    );
    leave(&mut wire, "m4");
    // The last delivery: one record per fetch. An accepted one is done with; one its member
    // leaves holding is archived; the others wait for their turn.
    share::join(&mut wire, group, "m5", &[&topic]);
    let first = share::fetch(&mut wire, group, "m5", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&first), vec![(0, 0, 0, 5)]);
    let second = share::fetch(
        &mut wire,
        group,
        "m5",
        1,
        &[(id, 0, vec![(0, 0, vec![ACCEPT])])],
        5_000,
    );
    assert_eq!(share::ack_error(&second, 0), 0);
    assert_eq!(share::acquired(&second), vec![(0, 1, 1, 5)]);
    leave(&mut wire, "m5");
    share::join(&mut wire, group, "m6", &[&topic]);
    let rest = share::fetch(&mut wire, group, "m6", 0, &[(id, 0, vec![])], 5_000);
    assert_eq!(share::acquired(&rest), vec![(0, 2, 2, 5)]);
}

#[test]
fn share_fetch_parameters_are_checked_and_record_limit_mode_splits_batches() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::topic("share-params");
    let (_broker, mut wire, id) = start(&dir, &[], &topic);
    share::join(&mut wire, "g-params", "a", &[&topic]);
    share::produce(&mut wire, &topic, 0, 5);
    let request = |mode: i8, renew: bool, max_records: i32| {
        use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(str_bytes("g-params"))))
            .with_member_id(Some(str_bytes("a")))
            .with_share_session_epoch(0)
            .with_max_wait_ms(1_000)
            .with_max_bytes(1 << 20)
            .with_max_records(max_records)
            .with_batch_size(max_records)
            .with_share_acquire_mode(mode)
            .with_is_renew_ack(renew)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![
                    FetchPartition::default().with_partition_index(0)
                ])])
    };
    // An unknown acquire mode, and a renewal that also asks to fetch: INVALID_REQUEST.
    let bad_mode: ShareFetchResponse = wire.call(ApiKey::ShareFetch, 2, &request(2, false, 10));
    assert_eq!(bad_mode.error_code, INVALID_REQUEST);
    let renew_fetch: ShareFetchResponse = wire.call(ApiKey::ShareFetch, 2, &request(0, true, 10));
    assert_eq!(renew_fetch.error_code, INVALID_REQUEST);
    // The record-limit mode (1) acquires 2 of the batch's 5 records; the rest stay for later.
    let limited: ShareFetchResponse = wire.call(ApiKey::ShareFetch, 2, &request(1, false, 2));
    assert_eq!(limited.error_code, 0);
    assert_eq!(share::acquired(&limited), vec![(0, 0, 1, 1)]);
    let next = share::fetch(&mut wire, "g-params", "a", 1, &[], 1_000);
    assert_eq!(share::acquired(&next), vec![(0, 2, 4, 1)]);
}
