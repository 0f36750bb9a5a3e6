//! The consumer group protocol (KIP-848) over a raw connection, with kafka-protocol's
//! generated types: ConsumerGroupHeartbeat joins, epochs and fencing, the reconciliation that
//! hands a partition over only once its previous owner revoked it, leaving (dynamic and
//! static), session expiry, ConsumerGroupDescribe, the OffsetCommit/OffsetFetch checks of the
//! member epoch, and the line between classic and consumer groups, each with Kafka's codes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::groups::{
    assignment, beat_request, commit_offset, describe_consumer_group as describe, group, heartbeat,
    join_request, Owned,
};
use common::wire::{create_topic, str_bytes as s, Wire};
use common::BrokerProcess;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// A broker whose auto-created topics have `partitions` partitions.
fn broker(data: &std::path::Path, partitions: i32, extra: &[&str]) -> BrokerProcess {
    let p = partitions.to_string();
    let mut args = vec!["--partitions", p.as_str()];
    args.extend_from_slice(extra);
    BrokerProcess::start(data, &args)
}

fn count(owned: &Owned) -> usize {
    owned.values().map(BTreeSet::len).sum()
}

/// An OffsetCommit at `version` of offset 7 for partition 0 of `topic` by a member at `epoch`.
fn commit(wire: &mut Wire, version: i16, g: &str, member: &str, epoch: i32, topic: &str) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(group(g))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(epoch);
    commit_offset(wire, version, request, topic, 7)
}

#[test]
fn a_member_joins_with_epoch_zero_and_gets_every_partition_in_the_group_epoch() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 4, &[]);
    let mut wire = Wire::connect(broker.addr);
    let topic = create_topic(&mut wire, "cp-join");
    let a = heartbeat(&mut wire, &join_request("g", "member-a", &["cp-join"]));
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    assert_eq!(a.member_id.as_deref(), Some("member-a"));
    assert_eq!(a.member_epoch, 1, "the first group epoch");
    assert_eq!(a.heartbeat_interval_ms, 5_000, "Kafka's default interval");
    let owned = assignment(&a).expect("a join is answered with the assignment");
    assert_eq!(owned, BTreeMap::from([(topic, (0..4).collect())]));

    // A heartbeat with nothing new: same epoch, no assignment repeated.
    let again = heartbeat(
        &mut wire,
        &beat_request("g", "member-a", 1, &owned).with_topic_partitions(None),
    );
    assert_eq!((again.error_code, again.member_epoch), (0, 1));
    assert!(
        again.assignment.is_none(),
        "an unchanged assignment is not sent again"
    );

    let d = describe(&mut wire, "g");
    assert_eq!(d.error_code, 0);
    assert_eq!(
        (d.group_state.as_str(), d.group_epoch, d.assignment_epoch),
        ("Stable", 1, 1)
    );
    assert_eq!(
        d.assignor_name.as_str(),
        "uniform",
        "Kafka's default assignor"
    );
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_epoch, 1);
    assert_eq!(
        d.members[0].assignment.topic_partitions[0]
            .topic_name
            .0
            .as_str(),
        "cp-join"
    );
    assert_eq!(d.members[0].member_type, 1);
}

#[test]
fn a_partition_moves_to_a_new_member_only_after_its_owner_revoked_it() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 4, &[]);
    let mut wire = Wire::connect(broker.addr);
    let topic = create_topic(&mut wire, "cp-move");
    let a = heartbeat(&mut wire, &join_request("g", "a", &["cp-move"]));
    let a_owned = assignment(&a).unwrap();
    assert_eq!(count(&a_owned), 4);

    // B joins: the group epoch goes to 2, but every partition is still A's.
    let b = heartbeat(&mut wire, &join_request("g", "b", &["cp-move"]));
    assert_eq!(b.error_code, 0);
    assert_eq!(b.member_epoch, 2);
    assert_eq!(
        assignment(&b),
        Some(Owned::new()),
        "nothing is released yet"
    );
    assert_eq!(describe(&mut wire, "g").group_state.as_str(), "Reconciling");

    // A is told to keep two: the other two are pending revocation, A stays in epoch 1.
    let a = heartbeat(&mut wire, &beat_request("g", "a", 1, &a_owned));
    assert_eq!((a.error_code, a.member_epoch), (0, 1));
    let a_kept = assignment(&a).expect("a changed assignment is sent");
    assert_eq!(count(&a_kept), 2);

    // While A still reports the revoked partitions, B gets none of them.
    let a = heartbeat(&mut wire, &beat_request("g", "a", 1, &a_owned));
    assert_eq!(a.member_epoch, 1, "not revoked yet: still epoch 1");
    let b = heartbeat(&mut wire, &beat_request("g", "b", 2, &Owned::new()));
    assert_eq!((b.error_code, b.member_epoch), (0, 2));
    assert!(assignment(&b).is_none_or(|o| o.is_empty()));

    // A revokes them (its heartbeat lists only what it keeps): A reaches epoch 2, then B
    // gets exactly the two partitions A gave up.
    let a = heartbeat(&mut wire, &beat_request("g", "a", 1, &a_kept));
    assert_eq!((a.error_code, a.member_epoch), (0, 2));
    let b = heartbeat(&mut wire, &beat_request("g", "b", 2, &Owned::new()));
    let b_owned = assignment(&b).expect("B's partitions are released");
    assert_eq!(count(&b_owned), 2);
    let mut all: BTreeSet<i32> = a_kept[&topic].clone();
    for p in &b_owned[&topic] {
        assert!(all.insert(*p), "partition {p} owned twice");
    }
    assert_eq!(all.len(), 4);
    let d = describe(&mut wire, "g");
    assert_eq!((d.group_state.as_str(), d.group_epoch), ("Stable", 2));
}

#[test]
fn member_epochs_are_fenced_as_kafka_fences_them() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 2, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-fence");
    let a = heartbeat(&mut wire, &join_request("g", "a", &["cp-fence"]));
    let owned = assignment(&a).unwrap();
    let b = heartbeat(&mut wire, &join_request("g", "b", &["cp-fence"]));
    assert_eq!(b.member_epoch, 2);

    // An epoch ahead of the coordinator's: fenced.
    let r = heartbeat(&mut wire, &beat_request("g", "a", 5, &owned));
    assert_eq!(r.error_code, ResponseError::FencedMemberEpoch.code());
    // An unknown member.
    let r = heartbeat(&mut wire, &beat_request("g", "nobody", 1, &Owned::new()));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    // A heartbeat to a group that does not exist (as after a DeleteGroups): UNKNOWN_MEMBER_ID,
    // which makes a client rejoin.
    let r = heartbeat(&mut wire, &beat_request("gone", "a", 3, &Owned::new()));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());

    // B reaches epoch 2 once A revoked; B then answers with its previous epoch (a lost
    // response): accepted while it owns only what it has.
    let a = heartbeat(&mut wire, &beat_request("g", "a", 1, &owned));
    let a_kept = assignment(&a).unwrap();
    let a = heartbeat(&mut wire, &beat_request("g", "a", 1, &a_kept));
    assert_eq!(a.member_epoch, 2);
    let retry = heartbeat(&mut wire, &beat_request("g", "a", 1, &a_kept));
    assert_eq!(
        (retry.error_code, retry.member_epoch),
        (0, 2),
        "previous epoch, owned subset"
    );
    let r = heartbeat(&mut wire, &beat_request("g", "a", 1, &owned));
    assert_eq!(
        r.error_code,
        ResponseError::FencedMemberEpoch.code(),
        "previous epoch but owning a partition it no longer has"
    );

    // A fenced member rejoins with epoch 0 and its member id, owning nothing.
    let again = heartbeat(&mut wire, &join_request("g", "a", &["cp-fence"]));
    assert_eq!(again.error_code, 0);
    assert_eq!(again.member_epoch, 2);
}

#[test]
fn a_member_that_leaves_hands_its_partitions_to_the_others() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 4, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-leave");
    heartbeat(&mut wire, &join_request("g", "a", &["cp-leave"]));
    let b = heartbeat(&mut wire, &join_request("g", "b", &["cp-leave"]));
    assert_eq!(b.member_epoch, 2);
    // B leaves before owning anything; A gets back to all four at epoch 3.
    let left = heartbeat(&mut wire, &beat_request("g", "b", -1, &Owned::new()));
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let d = describe(&mut wire, "g");
    assert_eq!((d.members.len(), d.group_epoch), (1, 3));
    // A, silent meanwhile, was never asked to revoke anything: the target for epoch 3 gives
    // it all four again, and its next heartbeat moves it from epoch 1 to 3 keeping them.
    let a = heartbeat(
        &mut wire,
        &beat_request("g", "a", 1, &Owned::new()).with_topic_partitions(None),
    );
    assert_eq!((a.error_code, a.member_epoch), (0, 3));
    let owned = describe(&mut wire, "g").members[0]
        .assignment
        .topic_partitions[0]
        .partitions
        .len();
    assert_eq!(owned, 4);

    // A leaving empties the group; an unknown member cannot leave.
    let r = heartbeat(&mut wire, &beat_request("g", "zz", -1, &Owned::new()));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    heartbeat(&mut wire, &beat_request("g", "a", -1, &Owned::new()));
    let d = describe(&mut wire, "g");
    assert_eq!((d.group_state.as_str(), d.members.len()), ("Empty", 0));
}

#[test]
fn a_static_member_that_leaves_with_minus_two_gets_its_partitions_back_on_rejoin() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 2, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-static");
    let join =
        |member: &str| join_request("g", member, &["cp-static"]).with_instance_id(Some(s("i-1")));
    let first = heartbeat(&mut wire, &join("old"));
    let owned = assignment(&first).unwrap();
    assert_eq!(count(&owned), 2);

    // Another process with the same instance id while the first has not left.
    let r = heartbeat(&mut wire, &join("new"));
    assert_eq!(r.error_code, ResponseError::UnreleasedInstanceId.code());

    // A static leave keeps the member's place and partitions; the group epoch stays.
    let left = heartbeat(
        &mut wire,
        &beat_request("g", "old", -2, &owned).with_instance_id(Some(s("i-1"))),
    );
    assert_eq!((left.error_code, left.member_epoch), (0, -2));
    let d = describe(&mut wire, "g");
    assert_eq!(
        (d.members.len(), d.group_epoch, d.members[0].member_epoch),
        (1, 1, -2)
    );

    // The restarted instance (new member id) takes the same partitions, no rebalance.
    let back = heartbeat(&mut wire, &join("new"));
    assert_eq!(back.error_code, 0, "{:?}", back.error_message);
    assert_eq!(back.member_epoch, 1);
    assert_eq!(assignment(&back), Some(owned));
    // The old member id is fenced by the new one.
    let r = heartbeat(
        &mut wire,
        &beat_request("g", "old", 1, &Owned::new()).with_instance_id(Some(s("i-1"))),
    );
    assert_eq!(r.error_code, ResponseError::FencedInstanceId.code());
}

#[test]
fn a_silent_member_is_removed_after_the_session_timeout() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(
        data.path(),
        2,
        &[
            "--group-consumer-session-timeout-ms",
            "1500",
            "--group-consumer-heartbeat-interval-ms",
            "500",
        ],
    );
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-expire");
    let a = heartbeat(&mut wire, &join_request("g", "a", &["cp-expire"]));
    assert_eq!(a.heartbeat_interval_ms, 500);
    let mut a_owned = assignment(&a).unwrap();
    let mut epoch = a.member_epoch;
    let b = heartbeat(&mut wire, &join_request("g", "b", &["cp-expire"]));
    assert_eq!(b.member_epoch, 2);
    // B never heartbeats again; A keeps heartbeating (and revoking as told).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = heartbeat(&mut wire, &beat_request("g", "a", epoch, &a_owned));
        assert_eq!(r.error_code, 0);
        if let Some(o) = assignment(&r) {
            a_owned = o;
        }
        epoch = r.member_epoch;
        let d = describe(&mut wire, "g");
        if d.members.len() == 1 && count(&a_owned) == 2 && epoch == d.group_epoch {
            break;
        }
        assert!(Instant::now() < deadline, "B was never removed: {d:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    broker.wait_for_log("session expired", Duration::from_secs(1));
    let r = heartbeat(&mut wire, &beat_request("g", "b", 2, &Owned::new()));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
}

#[test]
fn offset_commits_and_fetches_of_a_consumer_group_check_the_member_epoch() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 1, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-commit");
    let a = heartbeat(&mut wire, &join_request("g", "a", &["cp-commit"]));
    assert_eq!(a.member_epoch, 1);
    assert_eq!(commit(&mut wire, 9, "g", "a", 1, "cp-commit"), 0);
    assert_eq!(
        commit(&mut wire, 9, "g", "a", 0, "cp-commit"),
        ResponseError::StaleMemberEpoch.code()
    );
    assert_eq!(
        commit(&mut wire, 9, "g", "a", 2, "cp-commit"),
        ResponseError::StaleMemberEpoch.code(),
        "a newer epoch too, as Kafka 4.4 answers it"
    );
    assert_eq!(
        commit(&mut wire, 9, "g", "zz", 1, "cp-commit"),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        commit(&mut wire, 8, "g", "a", 1, "cp-commit"),
        ResponseError::UnsupportedVersion.code(),
        "a consumer-protocol member commits with OffsetCommit v9+"
    );
    assert_eq!(
        commit(&mut wire, 9, "g", "", -1, "cp-commit"),
        ResponseError::UnknownMemberId.code(),
        "a commit from outside the group while it has members"
    );

    let fetch = |wire: &mut Wire, member: Option<&str>, epoch: i32| {
        let response: OffsetFetchResponse = wire.call(
            ApiKey::OffsetFetch,
            9,
            &OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(group("g"))
                .with_member_id(member.map(|m| StrBytes::from_string(m.to_string())))
                .with_member_epoch(epoch)
                .with_topics(None)]),
        );
        response.groups[0].clone()
    };
    let ok = fetch(&mut wire, Some("a"), 1);
    assert_eq!(ok.error_code, 0);
    assert_eq!(ok.topics[0].partitions[0].committed_offset, 7);
    assert_eq!(fetch(&mut wire, None, -1).error_code, 0, "an admin's fetch");
    assert_eq!(
        fetch(&mut wire, Some("a"), 0).error_code,
        ResponseError::StaleMemberEpoch.code()
    );
    assert_eq!(
        fetch(&mut wire, Some("zz"), 1).error_code,
        ResponseError::UnknownMemberId.code()
    );

    // Once the group is empty, a commit from outside it is accepted again.
    heartbeat(&mut wire, &beat_request("g", "a", -1, &Owned::new()));
    assert_eq!(commit(&mut wire, 9, "g", "", -1, "cp-commit"), 0);
}

#[test]
fn classic_and_consumer_groups_do_not_share_an_id() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 1, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-mixed");
    heartbeat(&mut wire, &join_request("new-g", "a", &["cp-mixed"]));
    // A classic JoinGroup to a consumer group with members.
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        5,
        &JoinGroupRequest::default()
            .with_group_id(group("new-g"))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(bytes::Bytes::new())]),
    );
    assert_eq!(
        joined.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );

    // ListGroups names its type; DescribeGroups (classic only) does not find it; a
    // ConsumerGroupDescribe of an unknown group is GROUP_ID_NOT_FOUND.
    let listed: ListGroupsResponse =
        wire.call(ApiKey::ListGroups, 5, &ListGroupsRequest::default());
    let g = listed
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == "new-g")
        .unwrap();
    assert_eq!(
        (
            g.group_type.as_str(),
            g.protocol_type.as_str(),
            g.group_state.as_str()
        ),
        ("consumer", "consumer", "Stable")
    );
    let only_classic: ListGroupsResponse = wire.call(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("classic")]),
    );
    assert!(only_classic
        .groups
        .iter()
        .all(|g| g.group_id.0.as_str() != "new-g"));
    let described: DescribeGroupsResponse = wire.call(
        ApiKey::DescribeGroups,
        6,
        &DescribeGroupsRequest::default().with_groups(vec![group("new-g")]),
    );
    assert_eq!(
        described.groups[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    assert_eq!(described.groups[0].group_state.as_str(), "Dead");
    let unknown = describe(&mut wire, "no-such-group");
    assert_eq!(unknown.error_code, ResponseError::GroupIdNotFound.code());

    // DeleteGroups refuses a consumer group with members.
    let deleted: DeleteGroupsResponse = wire.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group("new-g")]),
    );
    assert_eq!(
        deleted.results[0].error_code,
        ResponseError::NonEmptyGroup.code()
    );
}

#[test]
fn a_consumer_heartbeat_to_a_classic_group_with_members_is_group_id_not_found() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 1, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-classic");
    let join = JoinGroupRequest::default()
        .with_group_id(group("old-g"))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(bytes::Bytes::new())]);
    let joined: JoinGroupResponse = wire.call(ApiKey::JoinGroup, 5, &join);
    assert_eq!(joined.error_code, 0);
    let r = heartbeat(&mut wire, &join_request("old-g", "a", &["cp-classic"]));
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
    let d = describe(&mut wire, "old-g");
    assert_eq!(d.error_code, ResponseError::GroupIdNotFound.code());
}

#[test]
fn malformed_heartbeats_are_refused_with_kafkas_codes() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 1, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-bad");
    let cases = [
        (
            join_request("g", "a", &["cp-bad"]).with_server_assignor(Some(s("sticky"))),
            ResponseError::UnsupportedAssignor,
        ),
        (
            join_request("g", "a", &[]).with_subscribed_topic_regex(Some(s("cp-(unclosed"))),
            ResponseError::InvalidRegularExpression,
        ),
        (join_request("g", "a", &[]), ResponseError::InvalidRequest),
        (
            join_request("g", "", &["cp-bad"]),
            ResponseError::InvalidRequest,
        ),
        (
            join_request("", "a", &["cp-bad"]),
            ResponseError::InvalidRequest,
        ),
        (
            join_request("g", "a", &["cp-bad"]).with_rebalance_timeout_ms(-1),
            ResponseError::InvalidRequest,
        ),
        (
            join_request("g", "a", &["cp-bad"]).with_member_epoch(-3),
            ResponseError::InvalidRequest,
        ),
        (
            beat_request("g", "a", -2, &Owned::new()),
            ResponseError::InvalidRequest,
        ),
    ];
    for (request, error) in cases {
        let r = heartbeat(&mut wire, &request);
        assert_eq!(
            r.error_code,
            error.code(),
            "{request:?}: {:?}",
            r.error_message
        );
    }
    // Version 0 has no regex, and lets the broker choose the member id.
    let v0: ConsumerGroupHeartbeatResponse = wire.call(
        ApiKey::ConsumerGroupHeartbeat,
        0,
        &join_request("g0", "", &["cp-bad"]),
    );
    assert_eq!(v0.error_code, 0);
    assert!(!v0.member_id.unwrap().is_empty());
}

#[test]
fn a_regex_subscription_follows_topics_as_they_appear() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 1, &[]);
    let mut wire = Wire::connect(broker.addr);
    let one = create_topic(&mut wire, "rx-one");
    create_topic(&mut wire, "other");
    let a = heartbeat(
        &mut wire,
        &join_request("g", "a", &[]).with_subscribed_topic_regex(Some(s("rx-.*"))),
    );
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    assert_eq!(
        assignment(&a),
        Some(BTreeMap::from([(one, BTreeSet::from([0]))]))
    );
    // A new matching topic bumps the group epoch and is assigned.
    let two = create_topic(&mut wire, "rx-two");
    let a = heartbeat(
        &mut wire,
        &beat_request("g", "a", 1, &BTreeMap::from([(one, BTreeSet::from([0]))])),
    );
    assert_eq!(a.member_epoch, 2);
    let owned = assignment(&a).unwrap();
    assert_eq!(owned.keys().copied().collect::<Vec<_>>().len(), 2);
    assert!(owned.contains_key(&two));
    let d = describe(&mut wire, "g");
    assert_eq!(
        d.members[0].subscribed_topic_regex.as_deref(),
        Some("rx-.*")
    );
}

#[test]
fn the_range_assignor_gives_each_member_a_range() {
    let data = tempfile::tempdir().unwrap();
    let broker = broker(data.path(), 3, &[]);
    let mut wire = Wire::connect(broker.addr);
    let topic = create_topic(&mut wire, "cp-range");
    let range = |member: &str| {
        join_request("g", member, &["cp-range"]).with_server_assignor(Some(s("range")))
    };
    heartbeat(&mut wire, &range("m1"));
    heartbeat(&mut wire, &range("m2"));
    let d = describe(&mut wire, "g");
    assert_eq!(d.assignor_name.as_str(), "range");
    let targets: Vec<Vec<i32>> = d
        .members
        .iter()
        .map(|m| {
            let t = &m.target_assignment.topic_partitions;
            assert!(t.iter().all(|t| t.topic_id == topic));
            t.iter().flat_map(|t| t.partitions.clone()).collect()
        })
        .collect();
    assert_eq!(targets, vec![vec![0, 1], vec![2]]);
}

#[test]
fn after_a_restart_members_carry_on_at_their_epochs_and_their_commits_are_kept() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = broker(data.path(), 2, &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "cp-restart");
    let a = heartbeat(&mut wire, &join_request("g", "a", &["cp-restart"]));
    let owned = assignment(&a).unwrap();
    assert_eq!(commit(&mut wire, 9, "g", "a", 1, "cp-restart"), 0);
    drop(wire);
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);

    // Consumer groups are persisted (tests/consumer_group_persistence.rs): the member's
    // heartbeat is answered at its epoch, its commit accepted.
    let r = heartbeat(&mut wire, &beat_request("g", "a", 1, &owned));
    assert_eq!((r.error_code, r.member_epoch), (0, 1));
    assert_eq!(commit(&mut wire, 9, "g", "a", 1, "cp-restart"), 0);
    // A member that rejoins with epoch 0 anyway (a client restart keeping its id) gets its
    // partitions back in the same group epoch.
    let again = heartbeat(&mut wire, &join_request("g", "a", &["cp-restart"]));
    assert_eq!((again.error_code, again.member_epoch), (0, 1));
    assert_eq!(assignment(&again), Some(owned));
    // What it committed before the crash is still there.
    let fetched: OffsetFetchResponse = wire.call(
        ApiKey::OffsetFetch,
        9,
        &OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(group("g"))
            .with_member_id(Some(s("a")))
            .with_member_epoch(1)
            .with_topics(None)]),
    );
    assert_eq!(fetched.groups[0].error_code, 0);
    assert_eq!(
        fetched.groups[0].topics[0].partitions[0].committed_offset,
        7
    );
}
