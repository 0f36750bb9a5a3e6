//! Network partitions between the nodes of a cluster (docs/design.md, "A cluster of brokers"):
//! three `oncelog-broker` processes on loopback whose raft connections each pass through a
//! proxy of the test (tests/common/netsplit.rs; each node dials its peers there with
//! `--cluster-dial`), so the test cuts and heals each link. An idempotent acks=all producer
//! (raw protocol) writes throughout; the partitions heal; every acknowledged batch is then read
//! once at its acknowledged offset, offsets are dense, no append that was not acknowledged is
//! in any log, and the replicas' logs are byte for byte the same.
//!
//! Rounds: `ONCELOG_CLUSTER_ROUNDS` (default 1 per test; the first cuts off the leader of everything), each cut for
//! `ONCELOG_PARTITION_MS` (default 3000, several election timeouts of 300-600 ms).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::netsplit::{Cut, Links};
use crate::common::wire::str_bytes;
use bytes::Bytes;
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;

const GROUP: &str = "partitioned-group";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cut_time() -> Duration {
    Duration::from_millis(env_or("ONCELOG_PARTITION_MS", 3000))
}

/// Three nodes, each dialing its peers through the proxies of `Links`; a topic of three
/// partitions replicated on all three, its leaders agreed.
fn partitioned_cluster() -> (Cluster, Links) {
    let mut c = Cluster::configure();
    let links = Links::start(&c.raft);
    for id in 1..=3 {
        c.flags
            .insert(id, vec!["--cluster-dial".into(), links.dial_flag(id)]);
    }
    c.launch_all();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(
        created.topics[0].error_code, 0,
        "{:?}",
        created.topics[0].error_message
    );
    // Each partition led by its preferred replica (where the balancer moves it), so that
    // node 1 leads partition 0 and the metadata and offsets groups.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.leaders(TOPIC, PARTITIONS) != BTreeMap::from([(0, 1), (1, 2), (2, 3)]) {
        assert!(
            Instant::now() < deadline,
            "not led by the preferred replicas"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (c, links)
}

/// The coordinator of `group` as node `on` names it (-1: none).
fn coordinator_named_by(c: &Cluster, on: i32, group: &str) -> i32 {
    let answer = connect(c.kafka[&on]).and_then(|mut s| {
        call::<_, FindCoordinatorResponse>(
            &mut s,
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![str_bytes(group)]),
        )
    });
    match answer {
        Ok(r) if r.coordinators[0].error_code == 0 => r.coordinators[0].node_id.0,
        _ => -1,
    }
}

fn produce_for(c: &Cluster, producer: &mut Producer, time: Duration, next: &mut i32) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        producer.produce(c, *next);
        *next = (*next + 1) % PARTITIONS;
    }
}

fn acked_of(producer: &Producer, partition: i32) -> usize {
    producer.acked.get(&partition).map_or(0, Vec::len)
}

/// A batch sent with acks=all to `leader` on `partition` from a thread, as a plain producer
/// (no producer id: a retry would not be recognized, so none is made): the answer, or the
/// I/O error when none came in `wait`.
fn probe(
    c: &Cluster,
    leader: i32,
    partition: i32,
    round: usize,
    wait: Duration,
) -> std::thread::JoinHandle<std::io::Result<(i16, i64)>> {
    let addr = c.kafka[&leader];
    std::thread::spawn(move || {
        let mut b = BatchBuilder::new();
        let value = format!("probe of round {round}");
        b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
        let records = Bytes::from(b.build().unwrap());
        let mut s: TcpStream = connect(addr)?;
        s.set_read_timeout(Some(wait))?;
        let r: ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_request(partition, records),
        )?;
        let p = &r.responses[0].partition_responses[0];
        Ok((p.error_code, p.base_offset))
    })
}

/// The leader of a partition is cut off from both other nodes for several election timeouts
/// (each round another partition's leader; node 1, which also leads the metadata and offsets
/// groups, in the first), while the producer goes on, then the links heal. While the
/// controller is cut off the majority's new controller creates a topic, which the old one
/// learns once healed; a group's offsets committed before survive the coordinator's move. The old
/// leader still takes a batch sent to it (it cannot know it lost its majority): that batch is
/// never acknowledged, and is in no log afterwards; the producer, after its patience runs out,
/// finds the leader the majority elected and writes there. Half the rounds cut as a black hole
/// (the bytes wait and pass late, stale terms and all), half by resetting every connection.
#[test]
fn a_leader_cut_off_from_both_others_acknowledges_nothing_and_heals_without_loss() {
    let (mut c, links) = partitioned_cluster();
    let mut producer = Producer::new(&c);
    producer.patience = Duration::from_millis(1000);
    let mut next = 0;
    produce_for(&c, &mut producer, Duration::from_millis(500), &mut next);
    let mut member = GroupMember::join(&c, GROUP);
    let committed = BTreeMap::from([(0, 5), (1, 6), (2, 7)]);
    assert_eq!(member.commit(&c, TOPIC, &committed), vec![0; 3]);
    let mut created = Vec::new();
    for round in 0..rounds(1) {
        let partition = round as i32 % PARTITIONS;
        let victim = c.leaders(TOPIC, PARTITIONS)[&partition];
        let others: Vec<i32> = (1..=3).filter(|id| *id != victim).collect();
        let how = if round % 2 == 0 {
            Cut::BlackHole
        } else {
            Cut::Reset
        };
        let controller = c.metadata(victim, None).unwrap().controller_id.0;
        eprintln!(
            "round {round}: node {victim} (leader of partition {partition}; controller {controller}) \
             cut off from {others:?} ({how:?})"
        );
        let before = acked_of(&producer, partition);
        links.split(&[victim], &others, how);
        // The old leader takes the batch into its log, and cannot commit it.
        let zombie = probe(&c, victim, partition, round, Duration::from_secs(60));
        produce_for(&c, &mut producer, cut_time(), &mut next);
        if acked_of(&producer, partition) == before {
            // A loaded machine: one more batch of this partition, which returns once the
            // majority's leader acknowledged it (90 s at most), while the cut lasts.
            producer.produce(&c, partition);
        }
        let during = acked_of(&producer, partition) - before;
        if controller == victim {
            // The majority's metadata group elects a controller, which creates a topic while
            // the old one is cut off; the offsets group a coordinator.
            let mut new_controller = -1;
            eventually("the majority names a controller of its own", || {
                new_controller = c
                    .metadata(others[0], None)
                    .map_or(-1, |m| m.controller_id.0);
                others.contains(&new_controller)
            });
            let name = format!("made-while-cut-{round}");
            let r = c.create_topic(new_controller, &name, 1, 3).unwrap();
            assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
            created.push(name);
            eventually("the majority names a coordinator of its own", || {
                others.contains(&coordinator_named_by(&c, others[0], GROUP))
            });
        }
        // The majority elected a leader and the producer wrote there while the cut lasted.
        let majority_leader = c.metadata(others[0], Some(&[TOPIC])).unwrap().topics[0].partitions
            [partition as usize]
            .leader_id
            .0;
        assert!(
            others.contains(&majority_leader),
            "round {round}: the majority names leader {majority_leader} for partition {partition}"
        );
        assert!(
            during > 0,
            "round {round}: nothing acknowledged on partition {partition} while cut"
        );
        links.heal();
        produce_for(&c, &mut producer, Duration::from_millis(500), &mut next);
        let answer = zombie.join().unwrap();
        eprintln!("round {round}: {during} batches of partition {partition} acknowledged while cut; the old leader answered {answer:?}");
        assert!(
            !matches!(answer, Ok((0, _))),
            "round {round}: the cut-off leader acknowledged an append: {answer:?}"
        );
        // Whole again: every node knows every leader, and the topics made while it was cut.
        c.leaders(TOPIC, PARTITIONS);
        for name in &created {
            c.leaders(name, 1);
        }
    }
    assert!(!created.is_empty(), "the controller was never cut off");
    // The group's offsets, committed before the coordinator was cut off, are still there.
    assert_eq!(member.fetch(&c, TOPIC, PARTITIONS), committed);
    let moved = BTreeMap::from([(0, 8), (1, 9), (2, 10)]);
    assert_eq!(member.commit(&c, TOPIC, &moved), vec![0; 3]);
    assert_eq!(member.fetch(&c, TOPIC, PARTITIONS), moved);
    eprintln!(
        "acknowledged {} batches, {} retries",
        producer.acked.values().map(Vec::len).sum::<usize>(),
        producer.retries
    );
    check_acknowledged_once_and_replicas_agree(&mut c, &producer);
}

/// Only the links between a partition's leader and one follower are cut: the leader keeps a
/// majority with the third node while the cut follower, hearing no leader, stands for election
/// again and again with higher terms (and wins when the third node's log allows), so leadership
/// may move back and forth while the producer writes. Then the links heal.
#[test]
fn a_link_cut_between_leader_and_one_follower_heals_without_loss() {
    let (mut c, links) = partitioned_cluster();
    let mut producer = Producer::new(&c);
    producer.patience = Duration::from_millis(1000);
    let mut next = 0;
    produce_for(&c, &mut producer, Duration::from_millis(500), &mut next);
    let mut epochs = BTreeMap::new();
    for round in 0..rounds(1) {
        let partition = round as i32 % PARTITIONS;
        let leader = c.leaders(TOPIC, PARTITIONS)[&partition];
        let follower = (1..=3).find(|id| *id != leader).unwrap();
        let how = if round % 2 == 0 {
            Cut::Reset
        } else {
            Cut::BlackHole
        };
        eprintln!("round {round}: link {leader} (leader of partition {partition}) - {follower} cut ({how:?})");
        links.split(&[leader], &[follower], how);
        produce_for(&c, &mut producer, cut_time(), &mut next);
        links.heal();
        produce_for(&c, &mut producer, Duration::from_millis(500), &mut next);
        c.leaders(TOPIC, PARTITIONS);
        let m = c.metadata(leader, Some(&[TOPIC])).unwrap();
        epochs.insert(
            round,
            m.topics[0].partitions[partition as usize].leader_epoch,
        );
    }
    eprintln!(
        "acknowledged {} batches, {} retries; leader epochs after each round {epochs:?}",
        producer.acked.values().map(Vec::len).sum::<usize>(),
        producer.retries
    );
    check_acknowledged_once_and_replicas_agree(&mut c, &producer);
}

/// A JoinGroup waiting for a rebalance when its coordinator stops leading the offsets group
/// (the node cut off, then healed: it learns the majority's term and steps down) is answered
/// NOT_COORDINATOR, as Kafka answers the joins of a group it unloads, so the client finds the
/// new coordinator and joins there. (It was answered as joined, with no error, generation 0
/// and no member id, which Kafka's Java consumer takes for a leadership with no protocol and
/// fails on.)
#[test]
fn a_join_waiting_when_the_coordinator_moves_is_answered_not_coordinator() {
    let (c, links) = partitioned_cluster();
    let group = "moving-group";
    // One member joined: a second member's join waits for it to join again (60 s at most).
    let _first = GroupMember::join(&c, group);
    let coordinator = c.group_coordinator(group).unwrap();
    let addr = c.kafka[&coordinator];
    let second = std::thread::spawn(move || -> std::io::Result<JoinGroupResponse> {
        let mut s = connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(50)))?;
        call(
            &mut s,
            ApiKey::JoinGroup,
            3,
            &JoinGroupRequest::default()
                .with_group_id(GroupId(str_bytes(group)))
                .with_session_timeout_ms(60_000)
                .with_rebalance_timeout_ms(60_000)
                .with_member_id(str_bytes(""))
                .with_protocol_type(str_bytes("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(str_bytes("range"))
                .with_metadata(Bytes::from_static(b"sub"))]),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let others: Vec<i32> = (1..=3).filter(|id| *id != coordinator).collect();
    eprintln!("coordinator {coordinator} cut off from {others:?} while a join waits");
    links.split(&[coordinator], &others, Cut::Reset);
    eventually("the majority names a coordinator of its own", || {
        others.contains(&coordinator_named_by(&c, others[0], group))
    });
    links.heal();
    let answer = second.join().unwrap().unwrap();
    assert_eq!(answer.error_code, NOT_COORDINATOR, "{answer:?}");
}
