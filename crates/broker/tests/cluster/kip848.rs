//! The consumer protocol (KIP-848) in cluster mode (docs/design.md, "The group coordinator in
//! a cluster"): three `oncelog-broker` processes, a topic of three partitions replicated on
//! all three, and a consumer group of two members over the raw protocol
//! (ConsumerGroupHeartbeat, ConsumerGroupDescribe, OffsetCommit with the member epoch) that
//! consumes the topic while the coordinator's node is SIGKILLed, round after round
//! (`ONCELOG_CLUSTER_ROUNDS`, default 2). The new coordinator knows the group at the same
//! epoch with the same assignments (no rebalance after a move), the members carry on at their
//! epochs, every committed offset survives, and every record is consumed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::groups::{assignment, beat_request, join_request, Owned};
use crate::common::wire::{str_bytes, topic_name};
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use oncelog::format::BatchIter;

const GROUP: &str = "kip848";

/// A consumer-protocol member over the raw protocol, following the coordinator through
/// moves: a dead node, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or
/// NOT_COORDINATOR send it to FindCoordinator again, as Kafka's clients do.
struct Member {
    id: String,
    epoch: i32,
    /// What the coordinator last assigned it (and it owns: it revokes at once).
    owned: Owned,
    /// The coordinators that answered, in order (a move appends).
    coordinators: Vec<i32>,
}

fn coordinator_error(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS | NOT_COORDINATOR
    )
}

impl Member {
    fn new(id: &str) -> Member {
        Member {
            id: id.to_string(),
            epoch: 0,
            owned: Owned::new(),
            coordinators: Vec::new(),
        }
    }

    /// Sends what `make` builds to the group's coordinator until one answers without a
    /// coordinator error (as `error` reads it; 60 s at most).
    fn coordinated<Req, Resp>(
        &mut self,
        c: &Cluster,
        api: ApiKey,
        version: i16,
        make: impl Fn(&Member) -> Req,
        error: impl Fn(&Resp) -> i16,
    ) -> Resp
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable
            + kafka_protocol::protocol::HeaderVersion
            + std::fmt::Debug,
    {
        let until = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < until {
            let answer = c.group_coordinator(GROUP).and_then(|node| {
                let mut s = connect(c.kafka[&node])?;
                Ok((node, call::<_, Resp>(&mut s, api, version, &make(self))?))
            });
            match answer {
                Ok((node, r)) if !coordinator_error(error(&r)) => {
                    if self.coordinators.last() != Some(&node) {
                        self.coordinators.push(node);
                    }
                    return r;
                }
                Ok((_, r)) => last = format!("{r:?}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{api:?}: no coordinator answered in 60 s: {last}");
    }

    /// One heartbeat (a join at epoch 0): takes the epoch and the assignment answered.
    fn beat(&mut self, c: &Cluster) -> ConsumerGroupHeartbeatResponse {
        let r: ConsumerGroupHeartbeatResponse = self.coordinated(
            c,
            ApiKey::ConsumerGroupHeartbeat,
            1,
            |m| {
                if m.epoch == 0 {
                    join_request(GROUP, &m.id, &[TOPIC])
                } else {
                    beat_request(GROUP, &m.id, m.epoch, &m.owned)
                }
            },
            |r: &ConsumerGroupHeartbeatResponse| r.error_code,
        );
        assert_eq!(r.error_code, 0, "{}: {r:?}", self.id);
        self.epoch = r.member_epoch;
        if let Some(a) = assignment(&r) {
            self.owned = a;
        }
        r
    }

    /// Commits `offsets` of the member's partitions at its epoch (OffsetCommit v9).
    fn commit(&mut self, c: &Cluster, offsets: &BTreeMap<i32, i64>) {
        let r: OffsetCommitResponse = self.coordinated(
            c,
            ApiKey::OffsetCommit,
            9,
            |m| {
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(str_bytes(GROUP)))
                    .with_generation_id_or_member_epoch(m.epoch)
                    .with_member_id(str_bytes(&m.id))
                    .with_topics(vec![
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(topic_name(TOPIC))
                            .with_partitions(
                                offsets
                                    .iter()
                                    .map(|(p, o)| {
                                        offset_commit_request::OffsetCommitRequestPartition::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(*o)
                                    })
                                    .collect(),
                            ),
                    ])
            },
            |r: &OffsetCommitResponse| r.topics[0].partitions[0].error_code,
        );
        for p in &r.topics[0].partitions {
            assert_eq!(p.error_code, 0, "{}: {r:?}", self.id);
        }
    }

    /// The partitions of the topic it owns.
    fn partitions(&self) -> BTreeSet<i32> {
        self.owned.values().flatten().copied().collect()
    }
}

/// The group as its coordinator describes it.
fn describe(c: &Cluster, asker: &mut Member) -> DescribedGroup {
    let mut r: ConsumerGroupDescribeResponse = asker.coordinated(
        c,
        ApiKey::ConsumerGroupDescribe,
        1,
        |_| ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(GROUP))]),
        |r: &ConsumerGroupDescribeResponse| r.groups[0].error_code,
    );
    let g = r.groups.remove(0);
    assert_eq!(g.error_code, 0, "{g:?}");
    g
}

/// The group's committed offsets of every partition (OffsetFetch v8; -1: none).
fn committed(c: &Cluster, asker: &mut Member) -> BTreeMap<i32, i64> {
    let r: OffsetFetchResponse = asker.coordinated(
        c,
        ApiKey::OffsetFetch,
        8,
        |_| {
            OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(str_bytes(GROUP)))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(topic_name(TOPIC))
                            .with_partition_indexes((0..PARTITIONS).collect()),
                    ])),
            ])
        },
        |r: &OffsetFetchResponse| r.groups[0].error_code,
    );
    assert_eq!(r.groups[0].error_code, 0, "{r:?}");
    r.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect()
}

/// The offsets of the records of `partition` from `from` up to its high watermark, read from
/// its leader (looked up again after a failure: the leader may be the killed node), and the
/// position after them. Control batches (the raft leaders' blanks) are skipped, as a consumer
/// skips them.
fn consume(c: &Cluster, partition: i32, from: i64) -> (Vec<i64>, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut offsets = Vec::new();
    let mut next = from;
    loop {
        assert!(
            Instant::now() < deadline,
            "partition {partition} unreadable"
        );
        let leader = c.leaders(TOPIC, PARTITIONS)[&partition];
        let fetched = connect(c.kafka[&leader]).and_then(|mut s| {
            call::<_, FetchResponse>(
                &mut s,
                ApiKey::Fetch,
                12,
                &FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(0)
                    .with_max_bytes(1 << 20)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(topic_name(TOPIC))
                        .with_partitions(vec![FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(next)
                            .with_partition_max_bytes(1 << 20)])]),
            )
        });
        let r = match fetched {
            Ok(r) if r.responses[0].partitions[0].error_code == 0 => r,
            Ok(_) | Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let p = &r.responses[0].partitions[0];
        let records = p.records.clone().unwrap_or_default();
        if records.is_empty() {
            assert_eq!(next, p.high_watermark);
            return (offsets, next);
        }
        for item in BatchIter::new(&records) {
            let (_, b) = item.unwrap();
            if b.last_offset() >= next {
                if !b.is_control() {
                    offsets.extend(b.base_offset().max(next)..=b.last_offset());
                }
                next = b.last_offset() + 1;
            }
        }
    }
}

/// Heartbeats both members until the group is stable: both at the group's epoch, their
/// partitions every partition of the topic, none twice.
fn settle(c: &Cluster, members: &mut [Member]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for m in members.iter_mut() {
            m.beat(c);
        }
        let g = describe(c, &mut members[0]);
        let all: Vec<i32> = members.iter().flat_map(|m| m.partitions()).collect();
        let distinct: BTreeSet<i32> = all.iter().copied().collect();
        if g.group_state.as_str() == "Stable"
            && members.iter().all(|m| m.epoch == g.group_epoch)
            && all.len() == PARTITIONS as usize
            && distinct == (0..PARTITIONS).collect()
        {
            return;
        }
        assert!(Instant::now() < deadline, "never stable: {g:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each member's (epoch, assignment, target assignment) as the coordinator describes them,
/// with the group's epoch and assignment epoch.
fn shape(g: &DescribedGroup) -> (i32, i32, BTreeMap<String, (i32, String, String)>) {
    let members = g
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                (
                    m.member_epoch,
                    format!("{:?}", m.assignment),
                    format!("{:?}", m.target_assignment),
                ),
            )
        })
        .collect();
    (g.group_epoch, g.assignment_epoch, members)
}

#[test]
fn a_consumer_group_keeps_its_epoch_assignment_and_offsets_through_coordinator_kills() {
    let rounds = rounds(2);
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let mut producer = Producer::new(&c);
    let mut members = [Member::new("member-a"), Member::new("member-b")];
    settle(&c, &mut members);
    let mut consumed: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut position: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    for round in 0..rounds {
        for p in 0..PARTITIONS {
            for _ in 0..3 {
                producer.produce(&c, p);
            }
        }
        // Each member consumes its partitions to their end and commits at its epoch.
        for m in members.iter_mut() {
            let mut commits = BTreeMap::new();
            for p in m.partitions() {
                let (got, end) = consume(&c, p, position[&p]);
                position.insert(p, end);
                consumed.entry(p).or_default().extend(got);
                commits.insert(p, position[&p]);
            }
            m.commit(&c, &commits);
        }
        let before = shape(&describe(&c, &mut members[0]));
        let offsets = committed(&c, &mut members[0]);
        assert_eq!(
            offsets, position,
            "round {round}: the commits before the kill"
        );

        let victim = c.group_coordinator(GROUP).unwrap();
        eprintln!("round {round}: SIGKILL node {victim}, the group coordinator");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);

        // The new coordinator loaded the group as it was: no rebalance, the same epochs and
        // assignments, and every commit.
        let after = shape(&describe(&c, &mut members[0]));
        assert_ne!(members[0].coordinators.last(), Some(&victim));
        assert_eq!(
            after, before,
            "round {round}: the group changed with the move"
        );
        assert_eq!(
            committed(&c, &mut members[0]),
            position,
            "round {round}: the new coordinator lost a commit"
        );
        for m in members.iter_mut() {
            let (epoch, owned) = (m.epoch, m.owned.clone());
            let r = m.beat(&c);
            assert_eq!(
                (r.member_epoch, &m.owned),
                (epoch, &owned),
                "round {round}: {} was not carried on",
                m.id
            );
        }
        c.launch(victim);
        // Back in step: the restarted node may lead the offsets group again.
        c.leaders(TOPIC, PARTITIONS);
        settle(&c, &mut members);
        assert_eq!(committed(&c, &mut members[0]), position);
    }
    // Every record of every partition consumed, once each, in order, and every acknowledged
    // batch among them.
    for p in 0..PARTITIONS {
        let (all, _) = consume(&c, p, 0);
        let mine = consumed.get(&p).cloned().unwrap_or_default();
        assert_eq!(mine, all, "partition {p}");
        // Only a later leader's blank may follow the committed position.
        assert!(
            position[&p] > *all.last().unwrap(),
            "partition {p}: committed past its last record"
        );
        let acked = &producer.acked[&p];
        assert_eq!(acked.len(), 3 * rounds);
        assert_eq!(mine.len(), acked.len() * RECORDS_PER_BATCH as usize);
        for (_, base) in acked {
            assert!(
                mine.contains(base),
                "partition {p}: batch at {base} not consumed"
            );
        }
    }
    let moves: Vec<i32> = members[0].coordinators.clone();
    eprintln!("coordinators answering, in order: {moves:?}");
    assert!(moves.len() > rounds, "the coordinator never moved");
}

/// Off the coordinator, the consumer protocol is NOT_COORDINATOR (heartbeat and describe), so
/// clients look the coordinator up; the coordinator advertises and serves it.
#[test]
fn only_the_coordinator_serves_the_consumer_protocol() -> io::Result<()> {
    let c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3)?;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    c.leaders(TOPIC, PARTITIONS);
    let coordinator = c.group_coordinator(GROUP)?;
    for (id, addr) in &c.kafka {
        let mut s = connect(*addr)?;
        let versions: ApiVersionsResponse = call(
            &mut s,
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        )?;
        for api in [
            ApiKey::ConsumerGroupHeartbeat,
            ApiKey::ConsumerGroupDescribe,
        ] {
            assert!(
                versions.api_keys.iter().any(|k| k.api_key == api as i16),
                "node {id} does not advertise {api:?}"
            );
        }
        if *id == coordinator {
            continue;
        }
        let r: ConsumerGroupHeartbeatResponse = call(
            &mut s,
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &join_request(GROUP, "m", &[TOPIC]),
        )?;
        assert_eq!(r.error_code, NOT_COORDINATOR, "node {id}: {r:?}");
        let d: ConsumerGroupDescribeResponse = call(
            &mut s,
            ApiKey::ConsumerGroupDescribe,
            1,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(str_bytes(GROUP))]),
        )?;
        assert_eq!(d.groups[0].error_code, NOT_COORDINATOR, "node {id}: {d:?}");
    }
    // The coordinator assigns the image's topic: its id and its three partitions.
    let topic_id = c.metadata(controller, Some(&[TOPIC]))?.topics[0].topic_id;
    let mut m = Member::new("m");
    let r = m.beat(&c);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(
        m.owned,
        BTreeMap::from([(topic_id, (0..PARTITIONS).collect())])
    );
    let g = describe(&c, &mut m);
    assert_eq!(
        g.members[0].assignment.topic_partitions[0]
            .topic_name
            .0
            .as_str(),
        TOPIC
    );
    Ok(())
}

/// librdkafka's consumer with `group.protocol=consumer` (tests/clients/group_client.py: a
/// synchronous commit after each record) while the coordinator's node is SIGKILLed and
/// restarted, round after round (`ONCELOG_CLUSTER_ROUNDS`, default 2): it follows each new
/// coordinator at the epoch it had (the group's epoch never moves: no rebalance after a
/// move), consumes every message, and the group's committed offsets end at each partition's
/// end.
#[test]
fn librdkafka_in_a_consumer_group_keeps_its_epoch_through_coordinator_kills() {
    use crate::common::clients::{group_consumer, wait_until, Client, Produce};
    let rounds = rounds(2);
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    c.leaders(TOPIC, PARTITIONS);
    let bootstrap: Vec<String> = c.kafka.values().map(|a| a.to_string()).collect();
    let bootstrap = bootstrap.join(",");
    let count = 200 * (rounds + 1);
    let delivered = Client::Confluent
        .produce(
            &bootstrap,
            TOPIC,
            count,
            &Produce {
                spread: true,
                ..Produce::default()
            },
        )
        .delivered(Duration::from_secs(60));
    assert!(delivered.failed.is_empty(), "{:?}", delivered.failed);
    assert_eq!(delivered.offsets.len(), count);
    // Slow enough that every kill lands while it consumes.
    let mut consumer = group_consumer(
        &bootstrap,
        TOPIC,
        GROUP,
        &[
            "--group-protocol",
            "consumer",
            "--pace-ms",
            "10",
            "--idle",
            "15",
            "--timeout",
            "240",
        ],
    );
    consumer.wait_event("committed", Duration::from_secs(60));
    let mut observer = Member::new("observer");
    let joined = describe(&c, &mut observer);
    assert_eq!(joined.members.len(), 1, "{joined:?}");
    let epoch = joined.group_epoch;
    for round in 0..rounds {
        let victim = c.group_coordinator(GROUP).unwrap();
        eprintln!("round {round}: SIGKILL node {victim}, the group coordinator");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        std::thread::sleep(Duration::from_secs(2));
        consumer.wait_event("committed", Duration::from_secs(60));
        let g = describe(&c, &mut observer);
        assert_eq!(
            (g.group_epoch, g.members.len()),
            (epoch, 1),
            "round {round}: the group was rebalanced: {g:?}"
        );
        assert_eq!(g.members[0].member_epoch, epoch, "round {round}: {g:?}");
        c.launch(victim);
        std::thread::sleep(Duration::from_secs(1));
        consumer.wait_event("committed", Duration::from_secs(60));
    }
    // Stopped once it read every message and committed each partition's last, rather than
    // after its idle timeout.
    wait_until(&mut [&mut consumer], Duration::from_secs(300), |runs| {
        delivered.all_read_and_committed(runs[0])
    });
    let events = consumer.stop(Duration::from_secs(60));
    let consumed: BTreeSet<(i64, i64)> = events
        .iter()
        .filter(|e| e["event"] == "consumed")
        .map(|e| {
            (
                e["partition"].as_i64().unwrap(),
                e["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    let count_of = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    eprintln!(
        "{count} messages: {} reads ({} distinct), {} commits, {} commits refused, {} errors; \
         coordinators answering the observer: {:?}",
        count_of("consumed"),
        consumed.len(),
        count_of("committed"),
        count_of("commit_failed"),
        count_of("error"),
        observer.coordinators,
    );
    for (i, (p, o)) in &delivered.offsets {
        assert!(
            consumed.contains(&(i64::from(*p), *o)),
            "message {i} at {p}/{o} never consumed"
        );
    }
    let mut ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, -1)).collect();
    for (p, o) in delivered.offsets.values() {
        let end = ends.entry(*p).or_insert(0);
        *end = (*end).max(o + 1);
    }
    assert_eq!(committed(&c, &mut observer), ends);
    assert!(
        observer.coordinators.len() > 1,
        "the coordinator never moved"
    );
}
