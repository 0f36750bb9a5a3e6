//! Classic groups across broker restarts, and static membership (KIP-345), over a raw
//! connection with kafka-protocol's generated types: a Stable group keeps its generation,
//! members and assignments through a SIGKILL and a clean restart (heartbeats answer NONE,
//! commits are accepted, nobody rebalances); members that never come back expire with their
//! session, timed from the load; a static member that restarts gets its assignment back
//! without a rebalance and its old member id is fenced (FENCED_INSTANCE_ID on every request);
//! and the records the broker stores are Kafka's own GroupMetadata records, byte for byte as
//! Kafka 4.4 and older brokers write them.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::groups::{commit_offset, group};
use common::wire::{str_bytes as s, Wire};
use common::BrokerProcess;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use oncelog_broker::group_metadata::{decode_value, encode_value, GroupMetadata};
use oncelog_broker::offsets_log::encode_group_key;

const TOPIC: &str = "orders";
const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const FENCED_INSTANCE_ID: i16 = 82;

/// A consumer's subscription to `TOPIC` (ConsumerProtocolSubscription v0: version, topics,
/// no user data).
fn subscription() -> Bytes {
    let mut out = vec![0, 0, 0, 0, 0, 1];
    out.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    out.extend_from_slice(TOPIC.as_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(out)
}

/// A member as the test drives it: its connection, member id and instance id.
struct Member {
    wire: Wire,
    id: String,
    instance: Option<String>,
}

fn join_request(
    group_id: &str,
    member_id: &str,
    instance: Option<&str>,
    session_ms: i32,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group(group_id))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member_id))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(subscription())])
}

fn sync(
    wire: &mut Wire,
    group_id: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
    assignments: &[(String, Bytes)],
) -> SyncGroupResponse {
    wire.call(
        ApiKey::SyncGroup,
        3,
        &sync_request(group_id, member, instance, generation, assignments),
    )
}

fn sync_request(
    group_id: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
    assignments: &[(String, Bytes)],
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_group_instance_id(instance.map(s))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        )
}

fn heartbeat(
    wire: &mut Wire,
    group_id: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> i16 {
    let r: HeartbeatResponse = wire.call(
        ApiKey::Heartbeat,
        4,
        &HeartbeatRequest::default()
            .with_group_id(group(group_id))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_group_instance_id(instance.map(s)),
    );
    r.error_code
}

/// An OffsetCommit v8 of `offset` for partition 0 of `TOPIC` by a member of `generation`.
fn commit(
    wire: &mut Wire,
    group_id: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_group_instance_id(instance.map(s));
    commit_offset(wire, 8, request, TOPIC, offset)
}

fn committed(wire: &mut Wire, group_id: &str) -> i64 {
    common::groups::committed(wire, group_id, TOPIC)
}

fn describe(wire: &mut Wire, group_id: &str) -> DescribedGroup {
    let mut r: DescribeGroupsResponse = wire.call(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![group(group_id)]),
    );
    r.groups.remove(0)
}

fn leave(wire: &mut Wire, group_id: &str, members: &[(&str, Option<&str>)]) -> Vec<i16> {
    let r: LeaveGroupResponse = wire.call(
        ApiKey::LeaveGroup,
        4,
        &LeaveGroupRequest::default()
            .with_group_id(group(group_id))
            .with_members(
                members
                    .iter()
                    .map(|(m, i)| {
                        MemberIdentity::default()
                            .with_member_id(s(m))
                            .with_group_instance_id(i.map(s))
                    })
                    .collect(),
            ),
    );
    assert_eq!(r.error_code, 0);
    r.members.iter().map(|m| m.error_code).collect()
}

/// A broker with `TOPIC` (two partitions).
fn start(data: &Path) -> BrokerProcess {
    common::start_with_topic(data, &["--partitions", "2"], TOPIC)
}

/// The assignment the leader hands member `i` (opaque to the broker).
fn assignment(i: usize) -> Bytes {
    Bytes::from(format!("partition-{i}"))
}

/// `instances.len()` members join `group_id` together (one connection each), the leader
/// assigns; answers the members, the leader first, in generation 1, Stable.
fn stable_group(
    broker: &BrokerProcess,
    group_id: &str,
    instances: &[Option<&str>],
    session_ms: i32,
) -> Vec<Member> {
    let mut wires: Vec<Wire> = instances
        .iter()
        .map(|_| Wire::connect(broker.addr))
        .collect();
    for (wire, instance) in wires.iter_mut().zip(instances) {
        wire.send(
            ApiKey::JoinGroup,
            5,
            &join_request(group_id, "", *instance, session_ms),
        );
    }
    let mut members = Vec::new();
    let mut leader = None;
    for (wire, instance) in wires.into_iter().zip(instances) {
        let mut wire = wire;
        let (_, joined): (_, JoinGroupResponse) = wire.receive(5);
        assert_eq!(joined.error_code, NONE);
        assert_eq!(joined.generation_id, 1);
        if joined.leader == joined.member_id {
            assert_eq!(joined.members.len(), instances.len());
            leader = Some(members.len());
        }
        members.push(Member {
            wire,
            id: joined.member_id.to_string(),
            instance: instance.map(str::to_string),
        });
    }
    let leader = leader.expect("one member leads");
    members.swap(0, leader);
    let assignments: Vec<(String, Bytes)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.clone(), assignment(i)))
        .collect();
    // The followers' SyncGroups wait for the leader's.
    for m in &mut members[1..] {
        let request = sync_request(group_id, &m.id, m.instance.as_deref(), 1, &[]);
        m.wire.send(ApiKey::SyncGroup, 3, &request);
    }
    let l = &mut members[0];
    let synced = sync(
        &mut l.wire,
        group_id,
        &l.id,
        l.instance.as_deref(),
        1,
        &assignments,
    );
    assert_eq!(synced.error_code, NONE);
    assert_eq!(synced.assignment, assignment(0));
    for (i, m) in members.iter_mut().enumerate().skip(1) {
        let (_, synced): (_, SyncGroupResponse) = m.wire.receive(3);
        assert_eq!(synced.error_code, NONE);
        assert_eq!(synced.assignment, assignment(i));
    }
    members
}

/// New connections for the members (after a restart).
fn reconnect(broker: &BrokerProcess, members: &mut [Member]) {
    for m in members {
        m.wire = Wire::connect(broker.addr);
    }
}

/// The group as DescribeGroups shows it: state, protocol, and (member, instance, assignment)
/// in member order.
type Shown = (String, String, Vec<(String, Option<String>, Bytes)>);

fn shown(wire: &mut Wire, group_id: &str) -> Shown {
    let g = describe(wire, group_id);
    assert_eq!(g.error_code, 0);
    let mut members: Vec<_> = g
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.group_instance_id.as_ref().map(|i| i.to_string()),
                m.member_assignment.clone(),
            )
        })
        .collect();
    members.sort();
    (
        g.group_state.to_string(),
        g.protocol_data.to_string(),
        members,
    )
}

#[test]
fn a_stable_group_keeps_its_generation_members_and_assignments_across_a_sigkill_and_a_clean_restart(
) {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path());
    let mut members = stable_group(&broker, "g", &[None, None], 30_000);
    let m = &mut members[1];
    assert_eq!(commit(&mut m.wire, "g", &m.id, None, 1, 10), NONE);
    let before = shown(&mut members[0].wire, "g");
    assert_eq!(before.0, "Stable");
    assert_eq!(before.1, "range");
    assert_eq!(before.2.len(), 2);

    for clean in [false, true] {
        if clean {
            assert!(broker.terminate().success());
        } else {
            broker.crash();
        }
        broker = broker.restart();
        reconnect(&broker, &mut members);
        assert_eq!(
            shown(&mut members[0].wire, "g"),
            before,
            "clean restart: {clean}"
        );
        // Nobody rebalances: every member carries on in generation 1.
        for m in &mut members {
            assert_eq!(heartbeat(&mut m.wire, "g", &m.id, None, 1), NONE);
            assert_eq!(
                heartbeat(&mut m.wire, "g", &m.id, None, 2),
                ILLEGAL_GENERATION
            );
        }
        let offset = if clean { 30 } else { 20 };
        let m = &mut members[1];
        assert_eq!(commit(&mut m.wire, "g", &m.id, None, 1, offset), NONE);
        assert_eq!(committed(&mut m.wire, "g"), offset);
        // A follower's SyncGroup of the generation still answers its assignment.
        let synced = sync(&mut m.wire, "g", &m.id, None, 1, &[]);
        assert_eq!(
            (synced.error_code, synced.assignment),
            (NONE, assignment(1))
        );
    }

    // A new member after the restart: the group rebalances as usual into generation 2.
    let mut newcomer = Wire::connect(broker.addr);
    newcomer.send(ApiKey::JoinGroup, 5, &join_request("g", "", None, 30_000));
    let asked = Instant::now();
    let m = &mut members[0];
    while heartbeat(&mut m.wire, "g", &m.id, None, 1) == NONE {
        assert!(asked.elapsed() < Duration::from_secs(10), "no rebalance");
        std::thread::sleep(Duration::from_millis(50));
    }
    for m in &mut members {
        assert_eq!(
            heartbeat(&mut m.wire, "g", &m.id, None, 1),
            REBALANCE_IN_PROGRESS
        );
        m.wire.send(
            ApiKey::JoinGroup,
            5,
            &join_request("g", &m.id, None, 30_000),
        );
    }
    let (_, joined): (_, JoinGroupResponse) = newcomer.receive(5);
    assert_eq!((joined.error_code, joined.generation_id), (NONE, 2));
}

#[test]
fn members_that_do_not_come_back_expire_with_their_session_timed_from_the_load() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path());
    let mut members = stable_group(&broker, "g", &[None], 6_000);
    broker.crash();
    // Longer than the session: had the timer kept running from before the crash, the member
    // would be gone at once.
    std::thread::sleep(Duration::from_millis(6_500));
    let mut broker = broker.restart();
    reconnect(&broker, &mut members);
    let m = &mut members[0];
    assert_eq!(heartbeat(&mut m.wire, "g", &m.id, None, 1), NONE);
    let beat = Instant::now();
    // Silent past its session timeout: removed, and the group is Empty in generation 2.
    std::thread::sleep(Duration::from_millis(7_000));
    assert!(beat.elapsed() > Duration::from_millis(6_000));
    assert_eq!(
        heartbeat(&mut m.wire, "g", &m.id, None, 1),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(describe(&mut m.wire, "g").group_state.to_string(), "Empty");
    // The emptied generation is stored: another restart does not bring the member back.
    broker.wait_for_log("session expired", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    broker.crash();
    let mut broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    let g = describe(&mut wire, "g");
    assert_eq!(g.group_state.to_string(), "Empty");
    assert!(g.members.is_empty());
    assert_eq!(
        heartbeat(&mut wire, "g", &members[0].id, None, 1),
        UNKNOWN_MEMBER_ID
    );
    // An empty group takes commits from outside any generation.
    assert_eq!(commit(&mut wire, "g", "", None, -1, 4), NONE);
    // Deleted (DeleteGroups' tombstones), it stays deleted across a restart.
    let deleted: DeleteGroupsResponse = wire.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group("g")]),
    );
    assert_eq!(deleted.results[0].error_code, NONE);
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(describe(&mut wire, "g").group_state.to_string(), "Dead");
}

#[test]
fn a_static_member_that_restarts_gets_its_assignment_back_without_a_rebalance_and_its_old_id_is_fenced(
) {
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path());
    let mut members = stable_group(&broker, "g", &[Some("inst-a"), Some("inst-b")], 30_000);
    let leader_id = members[0].id.clone();
    let follower_inst = members[1].instance.clone().unwrap();
    let old_follower = members[1].id.clone();

    // The follower's client restarts: it joins with no member id and its instance id, and is
    // answered at once in the same generation, with a new member id.
    let mut wire = Wire::connect(broker.addr);
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        5,
        &join_request("g", "", Some(&follower_inst), 30_000),
    );
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.generation_id, 1, "no rebalance");
    assert_eq!(joined.leader.to_string(), leader_id);
    assert!(joined.members.is_empty(), "a follower");
    assert!(joined.member_id.starts_with(&format!("{follower_inst}-")));
    assert_ne!(joined.member_id.to_string(), old_follower);
    let new_follower = joined.member_id.to_string();
    let synced = sync(&mut wire, "g", &new_follower, Some(&follower_inst), 1, &[]);
    assert_eq!(
        (synced.error_code, synced.assignment),
        (NONE, assignment(1))
    );
    let l = &mut members[0];
    assert_eq!(
        heartbeat(&mut l.wire, "g", &l.id, l.instance.as_deref(), 1),
        NONE,
        "the leader does not rebalance"
    );

    // The old member id is fenced on every request that names the instance.
    let old = &mut members[1].wire;
    let inst = Some(follower_inst.as_str());
    assert_eq!(
        heartbeat(old, "g", &old_follower, inst, 1),
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        heartbeat(old, "g", &old_follower, None, 1),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        sync(old, "g", &old_follower, inst, 1, &[]).error_code,
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        commit(old, "g", &old_follower, inst, 1, 3),
        FENCED_INSTANCE_ID
    );
    let rejoined: JoinGroupResponse = old.call(
        ApiKey::JoinGroup,
        5,
        &join_request("g", &old_follower, inst, 30_000),
    );
    assert_eq!(rejoined.error_code, FENCED_INSTANCE_ID);
    assert_eq!(
        leave(old, "g", &[(&old_follower, inst)]),
        vec![FENCED_INSTANCE_ID]
    );
    assert_eq!(committed(old, "g"), -1, "no fenced commit stored");
    assert_eq!(commit(&mut wire, "g", &new_follower, inst, 1, 3), NONE);
    members[1] = Member {
        wire,
        id: new_follower,
        instance: Some(follower_inst.clone()),
    };

    // The leader's client restarts with JoinGroup v9: it leads again under its new id and is
    // told to keep the current assignment (KIP-814).
    let leader_inst = members[0].instance.clone().unwrap();
    let mut wire = Wire::connect(broker.addr);
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        9,
        &join_request("g", "", Some(&leader_inst), 30_000).with_reason(Some(s("restart"))),
    );
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader, joined.member_id);
    assert!(joined.skip_assignment);
    assert_eq!(joined.members.len(), 2);
    let new_leader = joined.member_id.to_string();
    let synced = sync(&mut wire, "g", &new_leader, Some(&leader_inst), 1, &[]);
    assert_eq!(
        (synced.error_code, synced.assignment),
        (NONE, assignment(0))
    );
    let old = &mut members[0];
    assert_eq!(
        heartbeat(&mut old.wire, "g", &leader_id, Some(&leader_inst), 1),
        FENCED_INSTANCE_ID
    );
    members[0] = Member {
        wire,
        id: new_leader.clone(),
        instance: Some(leader_inst.clone()),
    };

    // An older client (JoinGroup v5) that leads is answered as a follower, with the leader
    // id before the replacement, as Kafka answers it; its SyncGroup gets its assignment.
    let mut wire = Wire::connect(broker.addr);
    let joined: JoinGroupResponse = wire.call(
        ApiKey::JoinGroup,
        5,
        &join_request("g", "", Some(&leader_inst), 30_000),
    );
    assert_eq!((joined.error_code, joined.generation_id), (NONE, 1));
    assert_eq!(joined.leader.to_string(), new_leader);
    assert!(joined.members.is_empty());
    let newest_leader = joined.member_id.to_string();
    let synced = sync(&mut wire, "g", &newest_leader, Some(&leader_inst), 1, &[]);
    assert_eq!(
        (synced.error_code, synced.assignment),
        (NONE, assignment(0))
    );
    members[0] = Member {
        wire,
        id: newest_leader,
        instance: Some(leader_inst),
    };

    // Persisted like the rest: after a SIGKILL the new member ids carry on, the old ones are
    // fenced still.
    let before = shown(&mut members[0].wire, "g");
    broker.crash();
    let broker = broker.restart();
    reconnect(&broker, &mut members);
    assert_eq!(shown(&mut members[0].wire, "g"), before);
    for m in &mut members {
        let inst = m.instance.clone();
        assert_eq!(heartbeat(&mut m.wire, "g", &m.id, inst.as_deref(), 1), NONE);
    }
    let m = &mut members[1];
    assert_eq!(
        heartbeat(&mut m.wire, "g", &old_follower, Some(&follower_inst), 1),
        FENCED_INSTANCE_ID
    );
    assert_eq!(committed(&mut m.wire, "g"), 3);
}

#[test]
fn static_members_stay_until_their_session_ends_and_leave_by_instance_id() {
    let data = tempfile::tempdir().unwrap();
    let broker = start(data.path());
    let mut members = stable_group(&broker, "g", &[Some("a"), Some("b"), Some("c")], 6_000);
    // Member "c" goes silent (a client restart that never comes back: no LeaveGroup). The
    // others keep heartbeating in generation 1 until c's session ends, then rebalance.
    let silent_since = Instant::now();
    let rebalanced_after = loop {
        let mut codes = Vec::new();
        for m in &mut members[..2] {
            let inst = m.instance.clone();
            codes.push(heartbeat(&mut m.wire, "g", &m.id, inst.as_deref(), 1));
        }
        if codes.contains(&REBALANCE_IN_PROGRESS) {
            let elapsed = silent_since.elapsed();
            // c's session may end between a's heartbeat and b's: from then on both see it.
            for m in &mut members[..2] {
                let inst = m.instance.clone();
                let code = heartbeat(&mut m.wire, "g", &m.id, inst.as_deref(), 1);
                assert_eq!(code, REBALANCE_IN_PROGRESS);
            }
            break elapsed;
        }
        assert_eq!(codes, vec![NONE, NONE]);
        assert!(silent_since.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        rebalanced_after >= Duration::from_millis(5_500),
        "c stayed until its session ended: {rebalanced_after:?}"
    );

    // LeaveGroup v3+ names members by instance id: a wrong pairing is fenced, an unknown
    // instance is unknown, an instance alone removes whichever member id it has.
    let (a_id, b_id) = (members[0].id.clone(), members[1].id.clone());
    let wire = &mut members[0].wire;
    assert_eq!(
        leave(wire, "g", &[(&a_id, Some("b")), ("", Some("nope"))]),
        vec![FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID]
    );
    assert_eq!(leave(wire, "g", &[("", Some("b"))]), vec![NONE]);
    assert_eq!(
        heartbeat(wire, "g", &b_id, Some("b"), 1),
        UNKNOWN_MEMBER_ID,
        "b left"
    );
    let g = describe(wire, "g");
    let left: Vec<String> = g.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(left, vec![a_id]);
}

/// A real client (librdkafka through confluent-kafka, `tests/clients/group_client.py`) in a
/// group across a broker SIGKILL: its heartbeats after the restart are answered NONE, so it
/// never rebalances (one assignment in its whole run, where a broker that forgot the group
/// made it rejoin), and it reads every record once, committing as it goes.
#[test]
fn a_librdkafka_member_carries_on_through_a_broker_crash_without_a_rebalance() {
    use common::clients::{group_consumer, Client, Produce};
    const TIMEOUT: Duration = Duration::from_secs(180);
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--partitions", "2"]);
    let topic = common::topic("group-persist");
    let group_id = format!("{topic}-readers");
    let delivered = Client::Confluent
        .produce(
            &broker.bootstrap(),
            &topic,
            300,
            &Produce {
                spread: true,
                ..Produce::default()
            },
        )
        .delivered(TIMEOUT);
    assert_eq!(delivered.offsets.len(), 300);
    // Paced (20 ms a record: 6 s for the topic), so the crash falls mid-read.
    let mut member = group_consumer(
        &broker.bootstrap(),
        &topic,
        &group_id,
        &["--idle", "10", "--pace-ms", "20"],
    );
    member.wait_event("assigned", TIMEOUT);
    member.wait_event("committed", TIMEOUT);
    broker.crash();
    std::thread::sleep(Duration::from_millis(500));
    let broker = broker.restart();
    let events = member.finish(TIMEOUT);
    let assigned: Vec<_> = events.iter().filter(|e| e["event"] == "assigned").collect();
    assert_eq!(
        assigned.len(),
        1,
        "one assignment, no rebalance: {assigned:?}"
    );
    let read = common::clients::consumed_positions(&events);
    assert_eq!(read.len(), 300, "every record read");
    broker.wait_for_log("group loaded", Duration::from_secs(5));
}

/// A GroupMetadata record as Kafka 4.4.0 wrote it (`kafka.sh` with the console consumer,
/// `group.instance.id=inst-1`, `client.id=oracle-client`, classic protocol), copied from its
/// `__consumer_offsets-0`: key, then value.
const KAFKA_44_KEY: &str = "0002000967702d737461746963";
const KAFKA_44_VALUE: &str = "00030008636f6e73756d657200000001000572616e6765002b696e73742d312d65\
32666331613338\
2d356139652d346361622d623239332d316437643866366430393438000001a249d87a7b00000001002b696e73742d31\
2d65326663316133382d356139652d346361622d623239332d3164376438663664303934380006696e73742d31000d6f\
7261636c652d636c69656e74000a2f3132372e302e302e31000493e00000afc8000000190003000000010003677074ff\
ffffff00000000ffffffffffff0000001700030000000100036770740000000100000000ffffffff";
/// The empty group Kafka 4.4 wrote before the member joined (generation 0, no protocol).
const KAFKA_44_EMPTY_VALUE: &str = "0003000000000000ffffffff000001a249d87a5100000000";

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Every (key, value) of a `__consumer_offsets`-style log directory's segments whose key is
/// a group-metadata key (version 2).
fn group_records(dir: &Path) -> Vec<(Bytes, Option<Bytes>)> {
    let mut records = common::groups::log_records(dir);
    records.retain(|(key, _)| key[..2] == [0, 2]);
    records
}

#[test]
fn the_stored_records_are_kafkas_group_metadata_byte_for_byte() {
    // Kafka 4.4's own records decode, and encode back to the same bytes.
    let value = unhex(KAFKA_44_VALUE);
    let g = decode_value(&value).unwrap();
    assert_eq!(g.protocol_type, "consumer");
    assert_eq!((g.generation, g.protocol.as_deref()), (1, Some("range")));
    assert_eq!(g.members.len(), 1);
    let m = &g.members[0];
    assert_eq!(g.leader.as_deref(), Some(m.member_id.as_str()));
    assert_eq!(m.group_instance_id.as_deref(), Some("inst-1"));
    assert!(m.member_id.starts_with("inst-1-"));
    assert_eq!(
        (m.client_id.as_str(), m.client_host.as_str()),
        ("oracle-client", "/127.0.0.1")
    );
    assert_eq!(
        (m.rebalance_timeout_ms, m.session_timeout_ms),
        (300_000, 45_000)
    );
    assert_eq!(encode_value(&g), value);
    assert_eq!(encode_group_key("gp-static"), unhex(KAFKA_44_KEY));
    let empty = unhex(KAFKA_44_EMPTY_VALUE);
    let e = decode_value(&empty).unwrap();
    assert_eq!(
        (e.generation, e.protocol.clone(), e.leader.clone()),
        (0, None, None)
    );
    assert!(e.members.is_empty() && e.protocol_type.is_empty());
    assert_eq!(encode_value(&e), empty);

    // So do the records of the older brokers in the fixture sets.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kafka-logdirs/volodymyrzee-kafka");
    let mut checked = 0;
    for partition in [
        "__consumer_offsets-12",
        "__consumer_offsets-18",
        "__consumer_offsets-32",
    ] {
        for (key, value) in group_records(&fixture.join(partition)) {
            assert!(!key.is_empty());
            let Some(value) = value else { continue };
            let g = decode_value(&value).unwrap();
            assert_eq!(encode_value(&g), value, "{g:?}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} fixture records");

    // And the broker's own: a Stable group with a static member, after a clean stop.
    let data = tempfile::tempdir().unwrap();
    let mut broker = start(data.path());
    let members = stable_group(&broker, "stored", &[Some("inst-1"), None], 30_000);
    assert!(broker.terminate().success());
    let records = group_records(&data.path().join(oncelog_broker::offsets_log::DIR_NAME));
    let (key, value) = records.last().expect("a group record");
    assert_eq!(key[..], encode_group_key("stored")[..]);
    let value = value.as_ref().expect("not a tombstone");
    assert_eq!(
        &value[..2],
        &[0, 3],
        "value version 3, as Kafka 4.4 writes it"
    );
    let g: GroupMetadata = decode_value(value).unwrap();
    assert_eq!(g.protocol_type, "consumer");
    assert_eq!((g.generation, g.protocol.as_deref()), (1, Some("range")));
    assert_eq!(g.leader.as_deref(), Some(members[0].id.as_str()));
    assert!(g.current_state_timestamp > 1_700_000_000_000);
    let mut stored: Vec<_> = g
        .members
        .iter()
        .map(|m| {
            assert_eq!(m.client_id, "raw-test");
            assert_eq!(m.client_host, "/127.0.0.1");
            assert_eq!(
                (m.session_timeout_ms, m.rebalance_timeout_ms),
                (30_000, 10_000)
            );
            assert_eq!(m.subscription, subscription());
            (
                m.member_id.clone(),
                m.group_instance_id.clone(),
                m.assignment.clone(),
            )
        })
        .collect();
    stored.sort();
    let mut expected: Vec<_> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.clone(), m.instance.clone(), assignment(i)))
        .collect();
    expected.sort();
    assert_eq!(stored, expected);
    assert_eq!(encode_value(&g), value[..]);
}
