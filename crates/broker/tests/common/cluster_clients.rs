//! Real clients (tests/common/clients.rs) against a cluster of brokers (tests/cluster/): what
//! a producer reported delivered, checked against what the partitions' leaders serve, and
//! librdkafka's consumer in a group while the group coordinator's node is SIGKILLed.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::clients::{consumed_positions, group_consumer, wait_until, Client, Delivered, Produce};
use super::cluster::{fetch_all, Cluster, PARTITIONS, TOPIC};

/// Every one of the `count` messages a client producer ran (`m-<i>`, as tests/clients name
/// them) reported delivered and none failed; read back from each partition's leader
/// (`leaders`: where to ask first), each is stored once, at the partition and offset
/// reported, and nothing is stored that was never reported delivered. Answers where each
/// value is stored.
pub fn check_delivered_stored_once(
    c: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    delivered: &Delivered,
    count: usize,
) -> BTreeMap<String, (i32, i64)> {
    assert!(delivered.failed.is_empty(), "{:?}", delivered.failed);
    assert_eq!(delivered.offsets.len(), count);
    let mut stored: BTreeMap<String, (i32, i64)> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (bytes, _) = fetch_all(c, leaders[&p], p);
        for r in oncelog::format::ConsumerRecordIter::new(Bytes::from(bytes), 0) {
            let r = r.unwrap();
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            let at = (p, r.offset);
            if let Some(first) = stored.insert(value.clone(), at) {
                panic!("{value} stored twice: at {first:?} and {at:?}");
            }
        }
    }
    for (i, at) in &delivered.offsets {
        assert_eq!(stored.get(&format!("m-{i}")), Some(at), "message {i}");
    }
    assert_eq!(
        stored.len(),
        count,
        "messages stored that were never reported delivered"
    );
    stored
}

/// The group protocol a librdkafka consumer speaks (its `group.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup, SyncGroup and Heartbeat.
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat: the coordinator assigns.
    Consumer,
}

impl GroupProtocol {
    /// The name tests/clients/group_client.py takes (`--group-protocol`).
    fn name(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

/// A cluster with [`TOPIC`] (three replicas a partition), librdkafka's producer's messages
/// spread over its partitions, and librdkafka's consumer in `group` speaking `protocol`
/// (tests/clients/group_client.py: subscribe(), a synchronous commit after each record) while
/// the coordinator's node is SIGKILLed and restarted, `rounds` times: the consumer finds each
/// new coordinator and consumes every message. `check` looks at the group once the consumer
/// first committed (`None`) and in each round once it committed again after the kill, before
/// the node restarts (`Some(round)`). Answers the cluster and the offsets the group must have
/// committed in the end: each partition's end (the offset after its last delivered message;
/// -1 where none was delivered).
pub fn consumer_group_through_coordinator_kills(
    protocol: GroupProtocol,
    group: &str,
    rounds: usize,
    mut check: impl FnMut(&Cluster, Option<usize>),
) -> (Cluster, BTreeMap<i32, i64>) {
    let mut c = Cluster::start_with_topic();
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
        group,
        &[
            "--group-protocol",
            protocol.name(),
            "--pace-ms",
            "10",
            "--idle",
            "15",
            "--timeout",
            "240",
        ],
    );
    consumer.wait_event("committed", Duration::from_secs(60));
    check(&c, None);
    for round in 0..rounds {
        let victim = c.group_coordinator(group).unwrap();
        eprintln!("round {round}: SIGKILL node {victim}, the group coordinator");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        std::thread::sleep(Duration::from_secs(2));
        consumer.wait_event("committed", Duration::from_secs(60));
        check(&c, Some(round));
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
    let consumed = consumed_positions(&events);
    let count_of = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    eprintln!(
        "{count} messages ({protocol:?} protocol): {} reads ({} distinct), {} commits, \
         {} commits refused, {} errors",
        count_of("consumed"),
        consumed.len(),
        count_of("committed"),
        count_of("commit_failed"),
        count_of("error"),
    );
    for (i, (p, o)) in &delivered.offsets {
        assert!(
            consumed.contains(&(i64::from(*p), *o)),
            "message {i} at {p}/{o} never consumed"
        );
    }
    let mut ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, -1)).collect();
    for (p, o) in delivered.offsets.values() {
        let end = ends.entry(*p).or_insert(-1);
        *end = (*end).max(o + 1);
    }
    (c, ends)
}
