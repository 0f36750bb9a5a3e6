//! Consumer-protocol groups (KIP-848) across broker restarts, over a raw connection: their
//! records in `__consumer_offsets` (Kafka's ConsumerGroup* records) keep the group epoch, the
//! members' epochs and their current and target assignments through a SIGKILL and a clean
//! restart, so members carry on at their epochs (no rebalance) and their commits are accepted;
//! members that do not come back expire with their session timed from the load; a leave and a
//! DeleteGroups are tombstones that win across a restart; the records are Kafka's, in Kafka's
//! order.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::groups::{
    assignment, beat_request, commit_offset, describe_consumer_group as describe, group, heartbeat,
    join_request, Owned,
};
use common::wire::{str_bytes as s, Wire};
use common::BrokerProcess;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use oncelog_broker::consumer_group_records::{RecordKey, RecordValue};

const TOPIC: &str = "cgp";

/// A broker with `TOPIC` (4 partitions).
fn start(data: &Path, extra: &[&str]) -> BrokerProcess {
    let mut args = vec!["--partitions", "4"];
    args.extend_from_slice(extra);
    common::start_with_topic(data, &args, TOPIC)
}

/// A member as its client knows itself.
struct Member {
    wire: Wire,
    id: String,
    epoch: i32,
    owned: Owned,
}

impl Member {
    fn join(broker: &BrokerProcess, g: &str, id: &str) -> Member {
        let mut wire = Wire::connect(broker.addr);
        let r = heartbeat(&mut wire, &join_request(g, id, &[TOPIC]));
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        Member {
            wire,
            id: id.to_string(),
            epoch: r.member_epoch,
            owned: assignment(&r).unwrap_or_default(),
        }
    }

    /// One heartbeat at the member's epoch with what it owns; it takes what it is told.
    fn beat(&mut self, g: &str) -> ConsumerGroupHeartbeatResponse {
        let r = self.beat_at(g, self.epoch);
        if r.error_code == 0 {
            self.epoch = r.member_epoch;
            if let Some(owned) = assignment(&r) {
                self.owned = owned;
            }
        }
        r
    }

    /// A heartbeat at `epoch` (-1: a leave), whatever the member's.
    fn beat_at(&mut self, g: &str, epoch: i32) -> ConsumerGroupHeartbeatResponse {
        let request = self.beat_request(g, epoch);
        heartbeat(&mut self.wire, &request)
    }

    fn beat_request(&self, g: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        beat_request(g, &self.id, epoch, &self.owned)
    }

    fn reconnect(&mut self, broker: &BrokerProcess) {
        self.wire = Wire::connect(broker.addr);
    }
}

/// Heartbeats until the group is Stable (every member reconciled to the target).
fn settle(g: &str, members: &mut [Member]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for m in members.iter_mut() {
            let r = m.beat(g);
            assert_eq!(r.error_code, 0, "{}: {:?}", m.id, r.error_message);
        }
        if describe(&mut members[0].wire, g).group_state.as_str() == "Stable" {
            return;
        }
        assert!(Instant::now() < deadline, "the group does not settle");
    }
}

/// An OffsetCommit v9 of partition 0 at `offset` by a member at `epoch`.
fn commit(wire: &mut Wire, g: &str, member: &str, epoch: i32, offset: i64) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(group(g))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(epoch);
    commit_offset(wire, 9, request, TOPIC, offset)
}

/// Every consumer-group record of the broker's offsets log, in log order (`None`: a
/// tombstone). Read from its files after the broker stopped.
fn consumer_group_records(data: &Path) -> Vec<(RecordKey, Option<RecordValue>)> {
    let dir = data.join(oncelog_broker::offsets_log::DIR_NAME);
    let mut out = Vec::new();
    for (key, value) in common::groups::log_records(&dir) {
        let Some(key) = RecordKey::decode(&key).unwrap() else {
            continue;
        };
        let value = value.map(|v| RecordValue::decode(&key, &v).unwrap());
        out.push((key, value));
    }
    out
}

#[test]
fn a_consumer_group_keeps_its_epochs_and_assignments_across_a_sigkill_and_a_clean_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path(), &[]);
    let mut members = vec![Member::join(&broker, "g", "a")];
    members.push(Member::join(&broker, "g", "b"));
    settle("g", &mut members);
    let before = describe(&mut members[0].wire, "g");
    assert_eq!((before.group_epoch, before.assignment_epoch), (2, 2));
    assert!(members
        .iter()
        .all(|m| m.epoch == 2 && m.owned.values().map(BTreeSet::len).sum::<usize>() == 2));
    let b = &mut members[1];
    assert_eq!(commit(&mut b.wire, "g", "b", b.epoch, 10), 0);

    for clean in [false, true] {
        if clean {
            assert!(broker.terminate().success());
        } else {
            broker.crash();
        }
        broker = broker.restart();
        for m in &mut members {
            m.reconnect(&broker);
        }
        assert_eq!(
            describe(&mut members[0].wire, "g"),
            before,
            "the same group epoch, members, epochs and assignments (clean: {clean})"
        );
        // Nobody rebalances: each member's heartbeat at its epoch is answered at that epoch,
        // with nothing new to reconcile.
        for m in &mut members {
            let owned = m.owned.clone();
            let r = m.beat("g");
            assert_eq!((r.error_code, r.member_epoch), (0, 2), "clean: {clean}");
            assert_eq!(assignment(&r), None, "unchanged");
            assert_eq!(m.owned, owned);
        }
        // Their commits are accepted at their epoch (and checked: another is stale).
        let offset = if clean { 30 } else { 20 };
        let b = &mut members[1];
        assert_eq!(commit(&mut b.wire, "g", "b", 2, offset), 0);
        assert_eq!(
            commit(&mut b.wire, "g", "b", 3, offset),
            ResponseError::StaleMemberEpoch.code()
        );
    }

    // A newcomer after the restarts: the group epoch goes on from the stored one.
    let c = Member::join(&broker, "g", "c");
    assert_eq!(c.epoch, 3);
}

#[test]
fn members_that_do_not_come_back_expire_with_their_session_timed_from_the_load() {
    let data = tempfile::tempdir().unwrap();
    let settings = [
        "--group-consumer-session-timeout-ms",
        "3000",
        "--group-consumer-heartbeat-interval-ms",
        "1000",
    ];
    let mut broker = start(data.path(), &settings);
    let mut a = Member::join(&broker, "g", "a");
    settle("g", std::slice::from_mut(&mut a));
    broker.crash();
    // Longer than the session: had the timer kept running from before the crash, the member
    // would be gone at once.
    std::thread::sleep(Duration::from_millis(3_500));
    let mut broker = broker.restart();
    a.reconnect(&broker);
    let r = a.beat("g");
    assert_eq!((r.error_code, r.member_epoch), (0, 1));
    // Silent past its session: removed, the group Empty at the next epoch.
    std::thread::sleep(Duration::from_millis(4_000));
    broker.wait_for_log("consumer group member removed", Duration::from_secs(5));
    let r = a.beat_at("g", 1);
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    let emptied = describe(&mut a.wire, "g");
    assert_eq!(
        (emptied.group_state.as_str(), emptied.group_epoch),
        ("Empty", 2)
    );
    // The expiry is stored: another restart does not bring the member back.
    std::thread::sleep(Duration::from_millis(500));
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(describe(&mut wire, "g"), emptied);
    let r = heartbeat(&mut wire, &a.beat_request("g", 1));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
}

#[test]
fn a_leave_and_a_delete_are_tombstones_that_win_across_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path(), &[]);
    let mut members = vec![Member::join(&broker, "g", "a")];
    members.push(Member::join(&broker, "g", "b"));
    settle("g", &mut members);
    let mut b = members.pop().unwrap();
    let left = b.beat_at("g", -1);
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    broker.crash();
    broker = broker.restart();
    let a = &mut members[0];
    a.reconnect(&broker);
    let g = describe(&mut a.wire, "g");
    assert_eq!(g.group_epoch, 3, "the leave bumped the epoch");
    let ids: Vec<&str> = g.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, ["a"], "b stays gone");
    b.reconnect(&broker);
    let r = b.beat_at("g", 2);
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    // A takes b's partitions over from the stored epochs.
    settle("g", &mut members);
    let a = &mut members[0];
    assert_eq!(
        (a.epoch, a.owned.values().map(BTreeSet::len).sum::<usize>()),
        (3, 4)
    );

    // A leaves, the group is deleted: it stays deleted.
    let left = a.beat_at("g", -1);
    assert_eq!(left.error_code, 0);
    let deleted: DeleteGroupsResponse = a.wire.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group("g")]),
    );
    assert_eq!(deleted.results[0].error_code, 0);
    broker.crash();
    broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        describe(&mut wire, "g").error_code,
        ResponseError::GroupIdNotFound.code()
    );
    // A new group of that id starts from epoch 1.
    let fresh = Member::join(&broker, "g", "a");
    assert_eq!(fresh.epoch, 1);
    assert!(broker.terminate().success());

    // What the log holds: the delete's tombstones cover every key the group ever had, in
    // Kafka's order (a member's assignment, target, subscription; then the group's).
    let records = consumer_group_records(data.path());
    let fresh_join = records
        .iter()
        .rposition(|(k, v)| matches!(k, RecordKey::Member(..)) && v.is_some())
        .unwrap();
    let before_fresh = &records[..fresh_join];
    let mut latest: BTreeMap<&RecordKey, bool> = BTreeMap::new();
    for (k, v) in before_fresh {
        latest.insert(k, v.is_some());
    }
    assert!(
        latest.values().all(|live| !live),
        "every key ends in a tombstone before the new group: {latest:?}"
    );
    let tail: Vec<&RecordKey> = before_fresh.iter().rev().take(2).map(|(k, _)| k).collect();
    assert_eq!(
        tail,
        [
            &RecordKey::Group("g".into()),
            &RecordKey::TargetAssignment("g".into())
        ],
        "the group's own tombstones come last"
    );
}

#[test]
fn the_records_are_kafkas_in_kafkas_order() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path(), &[]);
    let mut a = Member::join(&broker, "g", "a");
    let topic = *a.owned.keys().next().unwrap();
    // Heartbeats that change nothing write nothing.
    for _ in 0..3 {
        assert_eq!(a.beat("g").error_code, 0);
    }
    let r = a.beat_at("g", -1);
    assert_eq!(r.error_code, 0);
    assert!(broker.terminate().success());
    let records = consumer_group_records(data.path());
    let types: Vec<(&str, bool)> = records
        .iter()
        .map(|(k, v)| {
            let t = match k {
                RecordKey::Group(_) => "epoch",
                RecordKey::PartitionMetadata(_) => "partition-metadata",
                RecordKey::Member(..) => "member",
                RecordKey::TargetAssignment(_) => "target-epoch",
                RecordKey::TargetMember(..) => "target",
                RecordKey::CurrentAssignment(..) => "current",
            };
            (t, v.is_some())
        })
        .collect();
    // As a Kafka 4.4 coordinator writes a join and a leave (its log of a VerifiableConsumer
    // run: offsets 0-4 and 16-19).
    assert_eq!(
        types,
        [
            ("member", true),
            ("epoch", true),
            ("target", true),
            ("target-epoch", true),
            ("current", true),
            ("current", false),
            ("target", false),
            ("member", false),
            ("epoch", true),
        ]
    );
    let RecordValue::CurrentAssignment(current) = records[4].1.clone().unwrap() else {
        panic!("{:?}", records[4]);
    };
    assert_eq!(
        (
            current.member_epoch,
            current.previous_member_epoch,
            current.state
        ),
        (1, 0, 0)
    );
    assert_eq!(
        current.assigned,
        BTreeMap::from([(topic, (0..4).collect())])
    );
    let RecordValue::Member(member) = records[0].1.clone().unwrap() else {
        panic!("{:?}", records[0]);
    };
    assert_eq!(member.subscribed_topic_names, [TOPIC]);
    assert_eq!(member.rebalance_timeout_ms, 30_000);
    assert_eq!(records[8].1, Some(RecordValue::GroupEpoch(2)));
}

#[test]
fn a_consumer_group_that_took_an_empty_classic_groups_id_is_still_a_consumer_group_after_a_restart()
{
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path(), &[]);
    // A classic group with one generation, then emptied: its records say Empty.
    let mut wire = Wire::connect(broker.addr);
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        3,
        &JoinGroupRequest::default()
            .with_group_id(group("g"))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(s("range"))
            .with_metadata(Bytes::new())]),
    );
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    let synced: SyncGroupResponse = wire.call(
        ApiKey::SyncGroup,
        3,
        &SyncGroupRequest::default()
            .with_group_id(group("g"))
            .with_member_id(joined.member_id.clone())
            .with_generation_id(1),
    );
    assert_eq!(synced.error_code, 0);
    let left: LeaveGroupResponse = wire.call(
        ApiKey::LeaveGroup,
        1,
        &LeaveGroupRequest::default()
            .with_group_id(group("g"))
            .with_member_id(joined.member_id),
    );
    assert_eq!(left.error_code, 0);
    std::thread::sleep(Duration::from_millis(500));
    // A consumer-protocol member takes the id over.
    let mut a = Member::join(&broker, "g", "a");
    settle("g", std::slice::from_mut(&mut a));
    for clean in [false, true] {
        if clean {
            assert!(broker.terminate().success());
        } else {
            broker.crash();
        }
        broker = broker.restart();
        a.reconnect(&broker);
        let r = a.beat("g");
        assert_eq!(
            (r.error_code, r.member_epoch),
            (0, 1),
            "clean: {clean}: {:?}",
            r.error_message
        );
    }
}
