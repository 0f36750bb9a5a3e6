//! Cluster mode with a replication factor below the cluster's size, and the groups' admin
//! APIs in cluster mode (docs/design.md, "A cluster of brokers"): three `oncelog-broker`
//! processes on loopback, a topic of three partitions with two replicas each (partition `p`
//! on nodes `p+1` and `p+2` mod 3), so each partition has one node that holds no replica of it
//! and still answers Metadata and NOT_LEADER_OR_FOLLOWER with the partition's leader and
//! epoch. Kafka's Java producer runs through a SIGKILL of a leader; Kafka's own
//! `kafka-consumer-groups` lists, describes and deletes groups of the cluster.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::cluster_clients::check_delivered_stored_once;
use crate::common::wire::{fetch_request, str_bytes, topic_name};
use bytes::Bytes;
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;

/// Partition `p`'s two replicas: nodes `p+1`, `p+2` (mod 3, ids from 1), the first preferred.
fn replicas_of(p: i32) -> Vec<i32> {
    vec![p % 3 + 1, (p + 1) % 3 + 1]
}

/// The one node that holds no replica of partition `p`.
fn outsider_of(p: i32) -> i32 {
    (p + 2) % 3 + 1
}

/// Creates [`TOPIC`] with [`PARTITIONS`] partitions of two replicas, and waits until each is
/// led by its preferred replica (where the balancer leaves it) as every node says.
fn start_with_rf2() -> Cluster {
    let c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 2).unwrap();
    let t = &created.topics[0];
    assert_eq!(t.error_code, 0, "{:?}", t.error_message);
    assert_eq!((t.num_partitions, t.replication_factor), (PARTITIONS, 2));
    wait_preferred(&c);
    c
}

fn wait_preferred(c: &Cluster) -> BTreeMap<i32, i32> {
    let preferred: BTreeMap<i32, i32> = (0..PARTITIONS).map(|p| (p, replicas_of(p)[0])).collect();
    c.wait_for_leaders(&preferred, Duration::from_secs(60))
}

/// Each partition as node `id` describes it: (leader, epoch, replicas, error).
fn described(c: &Cluster, id: i32) -> BTreeMap<i32, (i32, i32, Vec<i32>, i16)> {
    let m = c.metadata(id, Some(&[TOPIC])).unwrap();
    m.topics[0]
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                (
                    p.leader_id.0,
                    p.leader_epoch,
                    p.replica_nodes.iter().map(|b| b.0).collect(),
                    p.error_code,
                ),
            )
        })
        .collect()
}

/// Waits until every running node describes every partition alike (leader and epoch), and
/// answers that description.
fn agreed(c: &Cluster) -> BTreeMap<i32, (i32, i32, Vec<i32>, i16)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<_> = c.nodes.keys().map(|id| described(c, *id)).collect();
        if views.windows(2).all(|w| w[0] == w[1]) && views[0].values().all(|v| v.0 >= 0) {
            return views.into_iter().next().unwrap();
        }
        assert!(Instant::now() < deadline, "nodes disagree: {views:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A node that holds no replica of a partition names its leader and epoch in Metadata, and
/// sends a Produce or Fetch for it to the leader (NOT_LEADER_OR_FOLLOWER with the leader's id,
/// epoch and endpoint).
#[test]
fn a_node_without_a_replica_names_the_partitions_leader() {
    let c = start_with_rf2();
    let view = agreed(&c);
    for p in 0..PARTITIONS {
        let (leader, epoch, replicas, error) = &view[&p];
        assert_eq!(*error, 0);
        assert_eq!(*replicas, replicas_of(p), "partition {p}'s replicas");
        assert_eq!(*leader, replicas_of(p)[0]);
        assert!(*epoch >= 1, "partition {p}: the raft term, not {epoch}");
    }
    // The in-sync replicas the leader names: both.
    let m = c.metadata(1, Some(&[TOPIC])).unwrap();
    let p0 = &m.topics[0].partitions[0];
    let isr: BTreeSet<i32> = p0.isr_nodes.iter().map(|b| b.0).collect();
    assert!(isr.contains(&1), "{isr:?}");

    // Produce and Fetch on the outsider of partition 0 (node 3).
    let (leader, epoch, _, _) = view[&0];
    let outsider = outsider_of(0);
    let mut s = connect(c.kafka[&outsider]).unwrap();
    let records = {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000, None, Some(b"v"), &[]);
        Bytes::from(b.build().unwrap())
    };
    let r: ProduceResponse =
        call(&mut s, ApiKey::Produce, 10, &produce_request(0, records)).unwrap();
    let line = &r.responses[0].partition_responses[0];
    assert_eq!(line.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(
        (
            line.current_leader.leader_id.0,
            line.current_leader.leader_epoch
        ),
        (leader, epoch)
    );
    assert_eq!(r.node_endpoints.len(), 1);
    assert_eq!(r.node_endpoints[0].node_id.0, leader);
    assert_eq!(r.node_endpoints[0].port, i32::from(c.kafka[&leader].port()));
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch_request(TOPIC, 0, 0)).unwrap();
    let part = &r.responses[0].partitions[0];
    assert_eq!(part.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(
        (
            part.current_leader.leader_id.0,
            part.current_leader.leader_epoch
        ),
        (leader, epoch)
    );
}

/// Kafka's Java producer (idempotent, acks=all) through a SIGKILL of the leader of a
/// partition of two replicas: raft's majority of two is two, so the partition takes no write
/// while one replica is down (as Kafka with `min.insync.replicas=2`) and the producer retries
/// until the node is back; the other partitions go on. Every message reported delivered is in
/// the log once at its offset. While the node is down the outsider names no dead leader, and
/// once the balancer moved the partition back it names the new leader and epoch.
#[test]
fn the_java_producer_keeps_every_message_through_a_kill_with_two_replicas() {
    use crate::common::clients::{Client, Produce};
    let mut c = start_with_rf2();
    let before = agreed(&c);
    let bootstrap: Vec<String> = c.kafka.values().map(|a| a.to_string()).collect();
    let count = 1500;
    let mut run = Client::Java.produce(
        &bootstrap.join(","),
        TOPIC,
        count,
        &Produce {
            wave: 20,
            pace_ms: 20,
            ..Produce::default()
        },
    );
    run.wait_delivered(100, Duration::from_secs(60));
    // Partition 0 (nodes 1 and 2) loses its leader, node 1.
    let victim = before[&0].0;
    assert_eq!(victim, 1);
    eprintln!("SIGKILL node {victim}, leader of partition 0");
    c.nodes.get_mut(&victim).unwrap().crash();
    c.nodes.remove(&victim);
    // Node 2 cannot win an election alone: it stands in a newer term with no leader, and the
    // outsider (node 3) says so, naming no dead node.
    let outsider = outsider_of(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (leader, epoch, _, error) = described(&c, outsider)[&0].clone();
        if leader == -1 {
            assert_eq!(error, LEADER_NOT_AVAILABLE);
            assert!(epoch > before[&0].1, "a newer term: {epoch}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {outsider} still names {leader} for partition 0"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1000));
    c.launch(victim);
    let after = wait_preferred(&c);
    assert_eq!(after[&0], victim);
    let view = agreed(&c);
    assert!(
        view[&0].1 > before[&0].1,
        "partition 0's epoch moved on: {:?} -> {:?}",
        before[&0],
        view[&0]
    );

    let delivered = run.delivered(Duration::from_secs(180));
    check_delivered_stored_once(&c, &after, &delivered, count);
    // The outsider of partition 0 held none of its records.
    assert!(
        !c.dirs[&outsider].join(format!("{TOPIC}-0")).exists(),
        "node {outsider} holds a replica of partition 0"
    );
}

const NON_EMPTY_GROUP: i16 = 68;

/// Commits `offsets` of [`TOPIC`] for `group` with no member (a standalone commit, as
/// `kafka-consumer-groups --reset-offsets` makes), on the coordinator.
fn commit_standalone(c: &Cluster, group: &str, offsets: &[(i32, i64)]) {
    use offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(str_bytes(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(TOPIC))
            .with_partitions(
                offsets
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                    })
                    .collect(),
            )]);
    let r: OffsetCommitResponse = on_coordinator(c, ApiKey::OffsetCommit, 7, &request);
    for p in &r.topics[0].partitions {
        assert_eq!(p.error_code, 0, "{r:?}");
    }
}

/// A request answered by the group coordinator (found again while it moves).
fn on_coordinator<Req, Resp>(c: &Cluster, api: ApiKey, version: i16, request: &Req) -> Resp
where
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = c
            .group_coordinator("any")
            .and_then(|id| connect(c.kafka[&id]))
            .and_then(|mut s| call::<Req, Resp>(&mut s, api, version, request));
        match answer {
            Ok(r) => return r,
            Err(e) => assert!(Instant::now() < deadline, "{api:?}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn list_groups(c: &Cluster, id: i32) -> ListGroupsResponse {
    let mut s = connect(c.kafka[&id]).unwrap();
    call(&mut s, ApiKey::ListGroups, 4, &ListGroupsRequest::default()).unwrap()
}

fn listed(r: &ListGroupsResponse) -> BTreeSet<String> {
    r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
}

/// The committed offset of each of `partitions` of [`TOPIC`] for `group` (-1: none).
fn committed(c: &Cluster, group: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(topic_name(TOPIC))
                .with_partition_indexes((0..partitions).collect()),
        ]));
    let r: OffsetFetchResponse = on_coordinator(c, ApiKey::OffsetFetch, 5, &request);
    assert_eq!(r.error_code, 0, "{r:?}");
    r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect()
}

/// Runs Kafka's `kafka-consumer-groups` (ConsumerGroupCommand of kafka-tools 4.4) against the
/// cluster: its standard output, once it exited successfully.
fn consumer_groups(c: &Cluster, args: &[&str]) -> String {
    let bootstrap = c.bootstrap();
    let mut all = vec!["--bootstrap-server", &bootstrap];
    all.extend(args);
    common::clients::kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &all,
    )
}

/// DescribeGroups, ListGroups, DeleteGroups and OffsetDelete in cluster mode: answered by the
/// group coordinator, NOT_COORDINATOR elsewhere (ListGroups elsewhere lists none, as a Kafka
/// broker lists only the groups it coordinates); deletions are replicated, so a new
/// coordinator after a kill does not bring them back; Kafka's `kafka-consumer-groups` lists,
/// describes, deletes offsets of and deletes groups of the cluster.
#[test]
fn the_group_admin_apis_are_the_coordinators_and_kafka_consumer_groups_works() {
    let mut c = start_with_rf2();
    let mut member = GroupMember::join(&c, "live");
    assert_eq!(member.commit(&c, TOPIC, &BTreeMap::from([(0, 5)])), vec![0]);
    commit_standalone(&c, "idle", &[(0, 1), (1, 2), (2, 3)]);
    commit_standalone(&c, "tool", &[(0, 4), (1, 4)]);
    let coordinator = c.group_coordinator("any").unwrap();
    let others: Vec<i32> = (1..=3).filter(|id| *id != coordinator).collect();

    // ListGroups: the coordinator lists every group, the others none, without an error.
    let r = list_groups(&c, coordinator);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        listed(&r),
        BTreeSet::from(["idle".into(), "live".into(), "tool".into()])
    );
    for id in &others {
        let r = list_groups(&c, *id);
        assert_eq!((r.error_code, r.groups.len()), (0, 0), "node {id}");
    }

    // DescribeGroups: the coordinator's; NOT_COORDINATOR elsewhere, for each group asked.
    let describe = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(str_bytes("live")), GroupId(str_bytes("idle"))]);
    let mut s = connect(c.kafka[&coordinator]).unwrap();
    let r: DescribeGroupsResponse = call(&mut s, ApiKey::DescribeGroups, 5, &describe).unwrap();
    let states: Vec<(i16, &str, usize)> = r
        .groups
        .iter()
        .map(|g| (g.error_code, g.group_state.as_str(), g.members.len()))
        .collect();
    assert_eq!(states, vec![(0, "Stable", 1), (0, "Empty", 0)]);
    let mut s = connect(c.kafka[&others[0]]).unwrap();
    let r: DescribeGroupsResponse = call(&mut s, ApiKey::DescribeGroups, 5, &describe).unwrap();
    assert!(
        r.groups.iter().all(|g| g.error_code == NOT_COORDINATOR),
        "{r:?}"
    );

    // OffsetDelete and DeleteGroups elsewhere: NOT_COORDINATOR, nothing deleted.
    let offset_delete = OffsetDeleteRequest::default()
        .with_group_id(GroupId(str_bytes("idle")))
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(topic_name(TOPIC))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ]),
        ]);
    let r: OffsetDeleteResponse = call(&mut s, ApiKey::OffsetDelete, 0, &offset_delete).unwrap();
    assert_eq!(r.error_code, NOT_COORDINATOR);
    let delete = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(str_bytes("live")), GroupId(str_bytes("idle"))]);
    let r: DeleteGroupsResponse = call(&mut s, ApiKey::DeleteGroups, 2, &delete).unwrap();
    assert!(
        r.results.iter().all(|g| g.error_code == NOT_COORDINATOR),
        "{r:?}"
    );
    assert_eq!(
        committed(&c, "idle", 3),
        BTreeMap::from([(0, 1), (1, 2), (2, 3)])
    );

    // On the coordinator: the offset goes, a group with a member stays, an empty one goes.
    let r: OffsetDeleteResponse = on_coordinator(&c, ApiKey::OffsetDelete, 0, &offset_delete);
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");
    assert_eq!(
        committed(&c, "idle", 3),
        BTreeMap::from([(0, -1), (1, 2), (2, 3)])
    );
    let r: DeleteGroupsResponse = on_coordinator(&c, ApiKey::DeleteGroups, 2, &delete);
    let results: Vec<i16> = r.results.iter().map(|g| g.error_code).collect();
    assert_eq!(results, vec![NON_EMPTY_GROUP, 0]);

    // Kafka's kafka-consumer-groups against the cluster.
    let list = consumer_groups(&c, &["--list"]);
    let names: BTreeSet<&str> = list.lines().map(str::trim).collect();
    assert!(
        names.contains("live") && names.contains("tool") && !names.contains("idle"),
        "{list}"
    );
    let described = consumer_groups(&c, &["--describe", "--group", "tool"]);
    let rows: BTreeMap<i32, i64> = described
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() >= 4 && cols[0] == "tool" && cols[1] == TOPIC)
                .then(|| (cols[2].parse().unwrap(), cols[3].parse().unwrap()))
        })
        .collect();
    assert_eq!(rows, BTreeMap::from([(0, 4), (1, 4)]), "{described}");
    let deleted_offsets = consumer_groups(
        &c,
        &[
            "--delete-offsets",
            "--group",
            "tool",
            "--topic",
            &format!("{TOPIC}:1"),
        ],
    );
    assert!(deleted_offsets.contains("Successful"), "{deleted_offsets}");
    assert_eq!(committed(&c, "tool", 2), BTreeMap::from([(0, 4), (1, -1)]));
    let deleted = consumer_groups(&c, &["--delete", "--group", "tool"]);
    assert!(deleted.contains("successful"), "{deleted}");
    let list = consumer_groups(&c, &["--list"]);
    assert!(!list.lines().any(|l| l.trim() == "tool"), "{list}");

    // The coordinator dies: the new one holds what was deleted as deleted.
    eprintln!("SIGKILL node {coordinator}, the group coordinator");
    c.nodes.get_mut(&coordinator).unwrap().crash();
    c.nodes.remove(&coordinator);
    let deadline = Instant::now() + Duration::from_secs(30);
    let next = loop {
        match c.group_coordinator("any") {
            Ok(id) if id != coordinator && list_groups(&c, id).error_code == 0 => break id,
            _ => {}
        }
        assert!(Instant::now() < deadline, "no new coordinator");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        listed(&list_groups(&c, next)),
        BTreeSet::from(["live".into()])
    );
    assert_eq!(member.heartbeat(&c), 0);
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Partition 0's high watermark, as its leader `leader` answers a Fetch.
fn high_watermark(c: &Cluster, leader: i32) -> i64 {
    let mut s = connect(c.kafka[&leader]).unwrap();
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch_request(TOPIC, 0, 0)).unwrap();
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "{p:?}");
    p.high_watermark
}

/// acks=1 is answered once the leader's own log holds the batch (Kafka's semantics), acks=all
/// once a majority does: with partition 0's follower SIGSTOPped, an acks=1 produce to its
/// leader is answered, an acks=all one is not (and the acks=1 batch is not served: the high
/// watermark is raft's commit) until the follower resumes; then the acks=1 batch is committed
/// at the offset it was answered with.
#[test]
fn acks_1_is_answered_after_the_leaders_own_write_acks_all_after_a_majority() {
    let c = start_with_rf2();
    let [leader, follower] = [replicas_of(0)[0], replicas_of(0)[1]];
    let record = |value: &str| {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
        Bytes::from(b.build().unwrap())
    };
    let before = high_watermark(&c, leader);
    let pid = c.nodes[&follower].pid();
    signal(pid, "STOP");
    let mut s = connect(c.kafka[&leader]).unwrap();
    let request = produce_request(0, record("acks-1")).with_acks(1);
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 9, &request).unwrap();
    let line = &r.responses[0].partition_responses[0];
    assert_eq!(line.error_code, 0, "{line:?}");
    let acked_at = line.base_offset;
    assert!(acked_at >= before, "{acked_at} below {before}");

    let (tx, rx) = std::sync::mpsc::channel();
    let addr = c.kafka[&leader];
    std::thread::spawn(move || {
        let answer = connect(addr).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
            call::<_, ProduceResponse>(
                &mut s,
                ApiKey::Produce,
                9,
                &produce_request(0, record("acks-all")),
            )
        });
        let _ = tx.send(answer);
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(3)).is_err(),
        "acks=all answered while the follower is stopped"
    );
    assert_eq!(
        high_watermark(&c, leader),
        before,
        "the acks=1 batch was served before a majority held it"
    );

    signal(pid, "CONT");
    let answer = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("acks=all answered once the follower is back")
        .unwrap();
    let code = answer.responses[0].partition_responses[0].error_code;
    // The leader may have been deposed by the follower's election on waking (the follower
    // cannot win: its log lacks the entries, so the old leader is elected again): then the
    // answer is a retriable NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT.
    assert!(
        matches!(code, 0 | NOT_LEADER_OR_FOLLOWER | REQUEST_TIMED_OUT),
        "{answer:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders = c.leaders(TOPIC, PARTITIONS);
        let (bytes, _) = fetch_all(&c, leaders[&0], 0);
        let found = oncelog::format::ConsumerRecordIter::new(Bytes::from(bytes), 0)
            .map(|r| r.unwrap())
            .find(|r| r.value.as_deref() == Some(b"acks-1".as_slice()));
        if let Some(r) = found {
            assert_eq!(r.offset, acked_at);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the acks=1 batch was not committed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
