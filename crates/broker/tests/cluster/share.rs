//! Share groups (KIP-932) in cluster mode (docs/design.md, "Share groups in a cluster"): three
//! `oncelog-broker` processes, a topic of three partitions replicated on all three, and a share
//! consumer over the raw protocol that sends its ShareFetch and ShareAcknowledge to every node
//! in turn (as a client sends them to each partition's leader: a node that does not coordinate
//! forwards them), while the coordinator's node is SIGKILLed, round after round
//! (`ONCELOG_CLUSTER_ROUNDS`, default 1). Every record is acknowledged once; a record
//! acknowledged before a kill is never handed out again after it; a record acquired and not
//! acknowledged at the kill is handed out again by the next coordinator; the member carries
//! on at its epoch.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::share::{acknowledge_request, acquired, fetch_request, Part, ACCEPT, V2};
use crate::common::wire::{str_bytes, topic_name};
use kafka_protocol::messages::*;
use uuid::Uuid;

const GROUP: &str = "share-cluster";
const MEMBER: &str = "share-member";

const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const NOT_COORDINATOR: i16 = 16;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

/// A share consumer that keeps one share session per node, as a client keeps one per broker.
struct ShareConsumer {
    topic_id: Uuid,
    /// The next session epoch on each node (0: open one).
    epochs: BTreeMap<i32, i32>,
    member_epoch: i32,
}

impl ShareConsumer {
    fn parts(&self) -> Vec<Part> {
        (0..PARTITIONS)
            .map(|p| (self.topic_id, p, Vec::new()))
            .collect()
    }

    /// Heartbeats to the coordinator until one answers (60 s at most): its answer.
    fn heartbeat(&mut self, c: &Cluster, topics: Option<&[&str]>) -> ShareGroupHeartbeatResponse {
        let until = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < until {
            let answer = c.group_coordinator(GROUP).and_then(|node| {
                let mut s = connect(c.kafka[&node])?;
                call::<_, ShareGroupHeartbeatResponse>(
                    &mut s,
                    ApiKey::ShareGroupHeartbeat,
                    1,
                    &ShareGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(str_bytes(GROUP)))
                        .with_member_id(str_bytes(MEMBER))
                        .with_member_epoch(self.member_epoch)
                        .with_subscribed_topic_names(
                            topics.map(|t| t.iter().map(|n| topic_name(n)).collect()),
                        ),
                )
            });
            match answer {
                Ok(r)
                    if ![
                        COORDINATOR_NOT_AVAILABLE,
                        COORDINATOR_LOAD_IN_PROGRESS,
                        NOT_COORDINATOR,
                    ]
                    .contains(&r.error_code) =>
                {
                    assert_eq!(r.error_code, 0, "{r:?}");
                    self.member_epoch = r.member_epoch;
                    return r;
                }
                Ok(r) => last = format!("{r:?}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no share coordinator answered in 60 s: {last}");
    }

    /// One ShareFetch on `node`'s session: the acquired ranges `(partition, first, last,
    /// delivery count)`, or why none (an I/O failure, or a top-level error that resets the
    /// session, as clients reset theirs).
    fn fetch(&mut self, c: &Cluster, node: i32) -> Result<Vec<(i32, i64, i64, i16)>, String> {
        let parts = self.parts();
        self.fetch_parts(c, node, &parts)
    }

    /// [`ShareConsumer::fetch`] of `parts` only, as a client fetches from a broker the
    /// partitions it leads.
    fn fetch_parts(
        &mut self,
        c: &Cluster,
        node: i32,
        parts: &[Part],
    ) -> Result<Vec<(i32, i64, i64, i16)>, String> {
        let epoch = *self.epochs.get(&node).unwrap_or(&0);
        let request = fetch_request(GROUP, MEMBER, epoch, parts, 200);
        let answer = connect(c.kafka[&node]).and_then(|mut s| {
            call::<_, ShareFetchResponse>(&mut s, ApiKey::ShareFetch, V2, &request)
        });
        let r = self.answered(node, answer.map(|r| (r.error_code, r)))?;
        for t in &r.responses {
            for p in &t.partitions {
                assert_eq!(p.error_code, 0, "node {node}: {p:?}");
            }
        }
        Ok(acquired(&r))
    }

    /// Accepts `ranges` on `node`'s session. `Ok` only when every partition answered no error:
    /// then the records are acknowledged for good.
    fn accept(
        &mut self,
        c: &Cluster,
        node: i32,
        ranges: &[(i32, i64, i64, i16)],
    ) -> Result<(), String> {
        let mut by_partition: BTreeMap<i32, Vec<(i64, i64, Vec<i8>)>> = BTreeMap::new();
        for &(p, first, last, _) in ranges {
            by_partition
                .entry(p)
                .or_default()
                .push((first, last, vec![ACCEPT]));
        }
        let parts: Vec<Part> = by_partition
            .into_iter()
            .map(|(p, batches)| (self.topic_id, p, batches))
            .collect();
        let epoch = *self.epochs.get(&node).unwrap_or(&0);
        if epoch == 0 {
            return Err("no session to acknowledge in".into());
        }
        let request = acknowledge_request(GROUP, MEMBER, epoch, &parts);
        let answer = connect(c.kafka[&node]).and_then(|mut s| {
            call::<_, ShareAcknowledgeResponse>(&mut s, ApiKey::ShareAcknowledge, V2, &request)
        });
        let r = self.answered(node, answer.map(|r| (r.error_code, r)))?;
        let errors: Vec<(i32, i16)> = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.error_code != 0)
            .map(|p| (p.partition_index, p.error_code))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("acknowledgements refused: {errors:?}"))
        }
    }

    /// Moves `node`'s session epoch on after an answer, or resets it on a failure.
    fn answered<R>(&mut self, node: i32, answer: io::Result<(i16, R)>) -> Result<R, String> {
        match answer {
            Ok((0, r)) => {
                let epoch = self.epochs.entry(node).or_insert(0);
                *epoch = if *epoch == i32::MAX { 1 } else { *epoch + 1 };
                Ok(r)
            }
            Ok((code, _)) => {
                assert!(
                    [
                        COORDINATOR_NOT_AVAILABLE,
                        SHARE_SESSION_NOT_FOUND,
                        INVALID_SHARE_SESSION_EPOCH
                    ]
                    .contains(&code),
                    "node {node}: top-level error {code}"
                );
                self.epochs.insert(node, 0);
                Err(format!("node {node}: error {code}"))
            }
            Err(e) => {
                self.epochs.insert(node, 0);
                Err(format!("node {node}: {e}"))
            }
        }
    }
}

/// Every offset of the ranges.
fn offsets(ranges: &[(i32, i64, i64, i16)]) -> BTreeSet<(i32, i64)> {
    ranges
        .iter()
        .flat_map(|&(p, first, last, _)| (first..=last).map(move |o| (p, o)))
        .collect()
}

/// Counts a hand-out of each record of `got`.
fn take(deliveries: &mut BTreeMap<(i32, i64), usize>, got: &[(i32, i64, i64, i16)]) {
    for o in offsets(got) {
        *deliveries.entry(o).or_default() += 1;
    }
}

/// Every record the producer had acknowledged.
fn produced(producer: &Producer) -> BTreeSet<(i32, i64)> {
    producer
        .acked
        .iter()
        .flat_map(|(p, batches)| {
            batches.iter().flat_map(move |(_, base)| {
                (*base..*base + RECORDS_PER_BATCH as i64).map(move |o| (*p, o))
            })
        })
        .collect()
}

#[test]
fn a_share_consumer_reads_every_record_once_through_coordinator_kills() {
    let rounds: usize = std::env::var("ONCELOG_CLUSTER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let topic_id = created.topics[0].topic_id;
    c.leaders(TOPIC, PARTITIONS);
    let mut consumer = ShareConsumer {
        topic_id,
        epochs: BTreeMap::new(),
        member_epoch: 0,
    };
    // The member joins first: its share-partitions start at the log end (Kafka's
    // `share.auto.offset.reset=latest`), before anything is produced.
    let joined = consumer.heartbeat(&c, Some(&[TOPIC]));
    assert!(joined.assignment.is_some(), "{joined:?}");
    let mut producer = Producer::new(&c);
    // Acknowledged for good, and how often each record was handed out.
    let mut acknowledged: BTreeSet<(i32, i64)> = BTreeSet::new();
    let mut deliveries: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for round in 0..rounds {
        for p in 0..PARTITIONS {
            for _ in 0..3 {
                producer.produce(&c, p);
            }
        }
        // Every node in turn, until what was produced is acknowledged.
        let want = produced(&producer);
        let until = Instant::now() + Duration::from_secs(30);
        let nodes: Vec<i32> = c.nodes.keys().copied().collect();
        let mut turn = 0;
        while !want.is_subset(&acknowledged) {
            assert!(
                Instant::now() < until,
                "round {round}: not everything was handed out"
            );
            let node = nodes[turn % nodes.len()];
            turn += 1;
            let Ok(got) = consumer.fetch(&c, node) else {
                continue;
            };
            take(&mut deliveries, &got);
            if got.is_empty() {
                continue;
            }
            consumer
                .accept(&c, node, &got)
                .unwrap_or_else(|e| panic!("round {round}: no kill yet, yet {e}"));
            acknowledged.extend(offsets(&got));
        }
        let before_kill = acknowledged.clone();

        // More records, acquired and not acknowledged when the coordinator dies.
        for p in 0..PARTITIONS {
            producer.produce(&c, p);
        }
        let mut held = BTreeSet::new();
        let until = Instant::now() + Duration::from_secs(30);
        while held.len() < PARTITIONS as usize * RECORDS_PER_BATCH as usize {
            assert!(
                Instant::now() < until,
                "round {round}: the new records never came"
            );
            let node = nodes[turn % nodes.len()];
            turn += 1;
            if let Ok(got) = consumer.fetch(&c, node) {
                take(&mut deliveries, &got);
                held.extend(offsets(&got));
            }
        }
        let victim = c.group_coordinator(GROUP).unwrap();
        eprintln!("round {round}: SIGKILL node {victim}, the share coordinator");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);

        // The member carries on at its epoch under the next coordinator.
        let epoch = consumer.member_epoch;
        let r = consumer.heartbeat(&c, None);
        assert_eq!(r.member_epoch, epoch, "round {round}: {r:?}");
        assert_ne!(c.group_coordinator(GROUP).unwrap(), victim);

        // The held records come back (the next coordinator loaded them Available), with what
        // is produced after the kill; nothing acknowledged before it does.
        for p in 0..PARTITIONS {
            producer.produce(&c, p);
        }
        let want = produced(&producer);
        let nodes: Vec<i32> = c.nodes.keys().copied().collect();
        let until = Instant::now() + Duration::from_secs(60);
        while !want.is_subset(&acknowledged) {
            assert!(
                Instant::now() < until,
                "round {round}: not handed out after the kill: {:?}",
                want.difference(&acknowledged).collect::<Vec<_>>()
            );
            let node = nodes[turn % nodes.len()];
            turn += 1;
            let Ok(got) = consumer.fetch(&c, node) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            take(&mut deliveries, &got);
            let again: Vec<_> = offsets(&got).intersection(&before_kill).copied().collect();
            assert!(
                again.is_empty(),
                "round {round}: acknowledged before the kill, handed out after it: {again:?}"
            );
            if consumer.accept(&c, node, &got).is_ok() {
                acknowledged.extend(offsets(&got));
            }
        }
        assert!(
            held.iter().all(|o| deliveries[o] >= 2),
            "round {round}: a record held at the kill was not handed out again"
        );
        c.launch(victim);
        c.leaders(TOPIC, PARTITIONS);
    }
    // Every record acknowledged, none beyond what was produced; a record handed out twice is
    // one held at a kill (or whose acknowledgement's answer a kill took).
    assert_eq!(acknowledged, produced(&producer));
    let twice = deliveries.values().filter(|n| **n > 1).count();
    eprintln!(
        "{} records acknowledged, {twice} handed out more than once",
        acknowledged.len()
    );
    assert!(twice <= rounds * (PARTITIONS as usize * RECORDS_PER_BATCH as usize) * 2);
}

/// Closing a member's session on one node ends that session only, as a client closes its
/// sessions one broker at a time (Kafka's `SharePartitionManager.releaseSession` releases the
/// closed session's partitions): closing the one on the coordinator's own node releases what
/// it holds there, while the member's session through another node, and the records it
/// holds, go on, so that session's acknowledgements are taken. franz-go's TestShareGroupETL
/// saw them refused on the cluster, its records handed out again, accepted twice and burning
/// deliveries.
#[test]
fn closing_the_session_on_the_coordinators_node_leaves_the_others_alone() {
    let c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let topic_id = created.topics[0].topic_id;
    c.leaders(TOPIC, PARTITIONS);
    let mut consumer = ShareConsumer {
        topic_id,
        epochs: BTreeMap::new(),
        member_epoch: 0,
    };
    consumer.heartbeat(&c, Some(&[TOPIC]));
    let coordinator = c.group_coordinator(GROUP).unwrap();
    let other = *c.nodes.keys().find(|&&n| n != coordinator).unwrap();
    let mut producer = Producer::new(&c);
    producer.produce(&c, 0);
    producer.produce(&c, 1);
    // Partition 0 through the other node's session, partition 1 through the coordinator's.
    let mut take_all = |node: i32, partition: i32| {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < until, "partition {partition} never came");
            let got = consumer.fetch_parts(&c, node, &[(topic_id, partition, Vec::new())]);
            match got {
                Ok(got) if !got.is_empty() => {
                    assert_eq!(got, vec![(partition, 0, RECORDS_PER_BATCH as i64 - 1, 1)]);
                    return got;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    let via_other = take_all(other, 0);
    take_all(coordinator, 1);
    let mut s = connect(c.kafka[&coordinator]).unwrap();
    let closed: ShareAcknowledgeResponse = call(
        &mut s,
        ApiKey::ShareAcknowledge,
        V2,
        &acknowledge_request(GROUP, MEMBER, -1, &[]),
    )
    .unwrap();
    assert_eq!(closed.error_code, 0, "{closed:?}");
    consumer.epochs.insert(coordinator, 0);
    // The other node's session still holds partition 0's records: its acceptance is taken.
    consumer
        .accept(&c, other, &via_other)
        .unwrap_or_else(|e| panic!("the other session ended with the coordinator's: {e}"));
    // Partition 1's records were released by the close: handed out again, delivered twice.
    let again = consumer
        .fetch_parts(&c, other, &[(topic_id, 1, Vec::new())])
        .unwrap();
    assert_eq!(again, vec![(1, 0, RECORDS_PER_BATCH as i64 - 1, 2)]);
}

/// FindCoordinator names the share coordinator (key type 2, `group:topicId:partition`): the
/// offsets group's leader, from every node; the share group APIs answer NOT_COORDINATOR
/// elsewhere.
#[test]
fn every_node_names_the_share_coordinator() -> io::Result<()> {
    let c = Cluster::start();
    let describe = |id: i32| -> io::Result<ShareGroupDescribeResponse> {
        let mut s = connect(c.kafka[&id])?;
        call(
            &mut s,
            ApiKey::ShareGroupDescribe,
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(GROUP))]),
        )
    };
    // Once elected, and loaded.
    let until = Instant::now() + Duration::from_secs(30);
    let coordinator = loop {
        if let Ok(id) = c.group_coordinator(GROUP) {
            if describe(id).is_ok_and(|r| r.groups[0].error_code != COORDINATOR_LOAD_IN_PROGRESS) {
                break id;
            }
        }
        assert!(Instant::now() < until, "no share coordinator");
        std::thread::sleep(Duration::from_millis(100));
    };
    for id in c.nodes.keys() {
        // Each node names it, once it knows the offsets group's leader.
        let named = || -> io::Result<FindCoordinatorResponse> {
            let mut s = connect(c.kafka[id])?;
            call(
                &mut s,
                ApiKey::FindCoordinator,
                4,
                &FindCoordinatorRequest::default()
                    .with_key_type(2)
                    .with_coordinator_keys(vec![str_bytes(&format!(
                        "{GROUP}:{}:0",
                        Uuid::from_u128(1)
                    ))]),
            )
        };
        let mut r = named()?;
        let until = Instant::now() + Duration::from_secs(30);
        while r.coordinators[0].error_code != 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
            r = named()?;
        }
        assert_eq!(r.coordinators[0].error_code, 0, "{r:?}");
        assert_eq!(r.coordinators[0].node_id.0, coordinator);
        let r = describe(*id)?;
        let expected = if *id == coordinator {
            69
        } else {
            NOT_COORDINATOR
        };
        assert_eq!(r.groups[0].error_code, expected, "node {id}: {r:?}");
    }
    Ok(())
}
