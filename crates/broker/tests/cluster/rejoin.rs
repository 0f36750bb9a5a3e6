//! A broker killed and its data directory wiped rejoins the cluster and catches up from the
//! others (docs/design.md, "A wiped node rejoins under its id"): three `oncelog-broker`
//! processes, a topic of three partitions replicated on all three, an idempotent producer
//! (raw protocol) producing throughout. Node 3 is SIGKILLed, its data directory removed, and
//! restarted; then nodes 1 and 2 are SIGKILLed in turn, so every commit needs the rejoined
//! node. Every acknowledged batch is read back once at its offset, offsets are dense, and the
//! rejoined node's partition logs are byte for byte the others'. Last, a rejoin while another
//! node is down waits, saying so, and completes without loss once that node is back (and once
//! more after a crash right after it).

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::*;

const REJOINED: i32 = 3;

fn produce_for(c: &Cluster, producer: &mut Producer, next: &mut i32, time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        producer.produce(c, *next);
        *next = (*next + 1) % PARTITIONS;
    }
}

/// The leaders once each partition is led by its preferred replica (partition `p` by node
/// `p + 1`), where the balancer settles: a read from a leader then stays on it.
fn preferred_leaders(c: &Cluster) -> BTreeMap<i32, i32> {
    let preferred: BTreeMap<i32, i32> = (0..PARTITIONS).map(|p| (p, p + 1)).collect();
    c.wait_for_leaders(&preferred, Duration::from_secs(30))
}

/// A new producer id from node `id`, retried while it answers COORDINATOR_LOAD_IN_PROGRESS (a
/// rejoined node that does not know its producer-id incarnation yet).
fn new_producer_id(c: &Cluster, id: i32) -> i64 {
    use kafka_protocol::messages::{ApiKey, InitProducerIdResponse};
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = connect(c.kafka[&id]).unwrap();
        let granted: InitProducerIdResponse = call(
            &mut s,
            ApiKey::InitProducerId,
            4,
            &init_producer_id_request(),
        )
        .unwrap();
        match granted.error_code {
            0 => return granted.producer_id.0,
            COORDINATOR_LOAD_IN_PROGRESS if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            code => panic!("InitProducerId on node {id}: error {code}"),
        }
    }
}

#[test]
fn a_wiped_node_rejoins_catches_up_and_serves_when_the_others_die() {
    let mut c = Cluster::start_with_topic();
    let mut producer = Producer::new(&c);
    let mut next = 0;
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(800));

    // A classic group's committed offsets: the offsets group's replica on the wiped node must
    // catch up too.
    let mut member = GroupMember::join(&c, "rejoin-g");
    let mut committed: BTreeMap<i32, i64> =
        (0..PARTITIONS).map(|p| (p, 3 + i64::from(p))).collect();
    assert!(member.commit(&c, TOPIC, &committed).iter().all(|e| *e == 0));
    let granted_before = new_producer_id(&c, REJOINED);
    eprintln!("SIGKILL node {REJOINED} and remove its data directory");
    c.wipe(REJOINED);
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(800));
    c.launch(REJOINED);
    assert!(
        c.nodes[&REJOINED]
            .wait_for_log("rejoins", Duration::from_secs(10))
            .contains("has no raft state while another node has"),
        "the node says it rejoins"
    );
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(800));
    // Its producer ids come from a new incarnation: never one it handed out before.
    let granted_after = new_producer_id(&c, REJOINED);
    assert_eq!(granted_after % 1024, i64::from(REJOINED));
    assert!(
        granted_after > granted_before,
        "{granted_after} after the wipe, {granted_before} before"
    );
    // Caught up, it wins the election for the partition it prefers.
    assert_eq!(preferred_leaders(&c)[&(REJOINED - 1)], REJOINED);

    // The others die in turn: each time a majority needs the rejoined node.
    for victim in [1, 2] {
        eprintln!("SIGKILL node {victim}: the rejoined node must serve");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        produce_for(&c, &mut producer, &mut next, Duration::from_millis(1500));
        // The coordinator (on a survivor) answers every commit, each made with a majority
        // that now needs the rejoined node; then commits anew.
        assert_eq!(
            member.fetch(&c, TOPIC, PARTITIONS),
            committed,
            "node {victim} down"
        );
        for o in committed.values_mut() {
            *o += 10;
        }
        assert!(member.commit(&c, TOPIC, &committed).iter().all(|e| *e == 0));
        c.launch(victim);
        produce_for(&c, &mut producer, &mut next, Duration::from_millis(300));
        c.leaders(TOPIC, PARTITIONS);
    }
    eprintln!(
        "acknowledged {} batches, {} retries",
        producer.acked.values().map(Vec::len).sum::<usize>(),
        producer.retries
    );
    let ends = check_acknowledged_once(&c, &preferred_leaders(&c), &producer);
    assert_eq!(member.fetch(&c, TOPIC, PARTITIONS), committed);

    // The rejoined node's logs are the others', byte for byte.
    check_replicas_agree(&mut c, &ends);
}

#[test]
fn a_rejoin_while_another_node_is_down_waits_and_loses_nothing() {
    let mut c = Cluster::start_with_topic();
    let mut producer = Producer::new(&c);
    let mut next = 0;
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(800));

    // Node 3 loses its data while node 2 is down: node 1 alone cannot tell it what it held.
    c.wipe(REJOINED);
    c.nodes.get_mut(&2).unwrap().crash();
    c.nodes.remove(&2);
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut waiting = Command::new(common::broker_bin())
        .arg("--data")
        .arg(&c.dirs[&REJOINED])
        .args(["--node-id", &REJOINED.to_string(), "--cluster", &c.spec])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = waiting.stderr.take().unwrap();
    let collected = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            collected.lock().unwrap().push(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let said = loop {
        let found = lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("waiting for every other member"))
            .cloned();
        if let Some(line) = found {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "no wait was logged: {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        said.contains("node 2"),
        "the wait names the node it waits for: {said}"
    );
    assert!(
        connect(c.kafka[&REJOINED]).is_err(),
        "a node still waiting to rejoin serves no client"
    );
    let _ = waiting.kill();
    let _ = waiting.wait();

    // Node 2 back, then node 3 (its rejoin record resumes the rejoin), and nothing is lost.
    c.launch(2);
    c.launch(REJOINED);
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(400));
    // A crash soon after the rejoin: the node restarts from its rejoin record and its floors.
    c.nodes.get_mut(&REJOINED).unwrap().crash();
    c.nodes.remove(&REJOINED);
    assert!(c.dirs[&REJOINED]
        .join("oncelog-node-local/rejoin.json")
        .exists());
    c.launch(REJOINED);
    produce_for(&c, &mut producer, &mut next, Duration::from_millis(400));
    check_acknowledged_once(&c, &preferred_leaders(&c), &producer);
}
