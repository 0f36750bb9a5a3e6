//! Many partitions per process (docs/design.md, "Many partitions per process"): three
//! [`Host`]s of six partitions each in one process, over the multiplexed TCP transport and the
//! client protocol. Leaders spread over the nodes; batches produced to every partition through
//! its leader, across a node's shutdown and restart, are on every caught-up replica exactly
//! once at their acknowledged offsets, and retries are answered Duplicate with them.

mod ports;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::Environment;
use oncelog_raft::client::{self, Client, ClientReply, ClientRequest};
use oncelog_raft::host::HostConfig;
use oncelog_raft::{Ack, GroupId, Host, HostError, Node, NodeId, ReplicaConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const TOPIC: &str = "events";

/// Each partition's acknowledged batches: sequence, then first and last offsets.
type Acked = BTreeMap<i32, Vec<(i32, (i64, i64))>>;
const PARTITIONS: i32 = 6;
const NODES: u64 = 3;

struct Running {
    host: Arc<Host>,
    tasks: Vec<JoinHandle<()>>,
}

struct Cluster {
    peers: BTreeMap<NodeId, Node>,
    clients: BTreeMap<NodeId, String>,
    nodes: BTreeMap<NodeId, Running>,
    tmp: tempfile::TempDir,
}

fn config(id: NodeId, peers: &BTreeMap<NodeId, Node>) -> HostConfig {
    config_sets(id, peers, 1)
}

/// [`config`] with partitions in sets of up to `set_size` (docs/design.md, "Partition sets").
fn config_sets(id: NodeId, peers: &BTreeMap<NodeId, Node>, set_size: usize) -> HostConfig {
    HostConfig {
        id,
        peers: peers.clone(),
        topic: TOPIC.into(),
        partitions: PARTITIONS,
        set_size,
        replica: ReplicaConfig::default(),
    }
}

async fn start(
    id: NodeId,
    dir: &Path,
    peers: &BTreeMap<NodeId, Node>,
    raft: TcpListener,
    clients: TcpListener,
    set_size: usize,
) -> Running {
    let host = Arc::new(
        Host::open(
            dir,
            Environment::default(),
            config_sets(id, peers, set_size),
        )
        .await
        .unwrap(),
    );
    let tasks = vec![
        host.serve_raft(raft),
        client::serve(clients, Arc::clone(&host)),
        host.keep_balanced(Duration::from_millis(300)),
    ];
    Running { host, tasks }
}

async fn cluster(set_size: usize) -> Cluster {
    let tmp = tempfile::tempdir().unwrap();
    let mut rafts = Vec::new();
    let mut client_listeners = Vec::new();
    for _ in 0..NODES {
        rafts.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        client_listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers: BTreeMap<NodeId, Node> = rafts
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, Node::new(l.local_addr().unwrap().to_string())))
        .collect();
    let clients = client_listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string()))
        .collect();
    let mut nodes = BTreeMap::new();
    for (i, (r, c)) in rafts.into_iter().zip(client_listeners).enumerate() {
        let id = i as u64 + 1;
        let dir = tmp.path().join(format!("node-{id}"));
        nodes.insert(id, start(id, &dir, &peers, r, c, set_size).await);
        // Not in the same instant: raft's timers would tick together.
        tokio::time::sleep(Duration::from_millis(7)).await;
    }
    nodes[&1].host.initialize().await.unwrap();
    Cluster {
        peers,
        clients,
        nodes,
        tmp,
    }
}

fn batch(partition: i32, sequence: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(1000 + partition as i64, 0, sequence);
    let value = format!("p{partition}-s{sequence}");
    b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    Bytes::from(b.build().unwrap())
}

fn to(partition: i32, request: ClientRequest) -> ClientRequest {
    ClientRequest::To {
        topic: TOPIC.into(),
        partition,
        request: Box::new(request),
    }
}

async fn ask(addr: &str, request: &ClientRequest) -> Option<ClientReply> {
    let mut c = Client::connect(addr).await.ok()?;
    tokio::time::timeout(Duration::from_secs(5), c.call(request))
        .await
        .ok()?
        .ok()
}

/// Produces `batch` to `partition` through its leader, following `NotLeader` answers and
/// retrying the same batch after errors (a retry of a written batch is a duplicate).
async fn produce(clients: &BTreeMap<NodeId, String>, partition: i32, batch: Bytes) -> Ack {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut at: NodeId = 1;
    let request = to(partition, ClientRequest::Produce(batch));
    loop {
        assert!(Instant::now() < deadline, "partition {partition}: no ack");
        match ask(&clients[&at], &request).await {
            Some(ClientReply::Acked(ack)) => return ack,
            Some(ClientReply::NotLeader { leader: Some(l) }) if l != at => at = l,
            Some(ClientReply::Refused { kind, message }) => {
                panic!("partition {partition}: refused {kind}: {message}")
            }
            _ => {
                at = at % NODES + 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Each partition's leader, once every partition has one and each node leads at least one.
async fn spread_leaders(c: &Cluster) -> BTreeMap<i32, NodeId> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut leaders = BTreeMap::new();
        for p in 0..PARTITIONS {
            let g = GroupId::new(TOPIC, p);
            let views: Vec<Option<NodeId>> = c
                .nodes
                .values()
                .map(|n| {
                    n.host
                        .route(&g)
                        .unwrap()
                        .0
                        .raft()
                        .metrics()
                        .borrow()
                        .current_leader
                })
                .collect();
            if let Some(Some(l)) = views.first() {
                if views.iter().all(|v| *v == Some(*l)) {
                    leaders.insert(p, *l);
                }
            }
        }
        let leading: std::collections::BTreeSet<NodeId> = leaders.values().copied().collect();
        if leaders.len() == PARTITIONS as usize && leading.len() == NODES as usize {
            return leaders;
        }
        assert!(Instant::now() < deadline, "leaders not spread: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every replica of every partition has `ends[p]` committed, then checks each
/// holds every acknowledged batch exactly once, at its acknowledged offsets, and no other.
async fn check_replicas(c: &Cluster, acked: &Acked) {
    for (&p, batches) in acked {
        let g = GroupId::new(TOPIC, p);
        let end = batches.iter().map(|(_, (_, last))| last + 1).max().unwrap();
        for (id, n) in &c.nodes {
            let (r, m) = n.host.route(&g).unwrap();
            let log = r.log_of(m).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while log.high_watermark() < end {
                assert!(
                    Instant::now() < deadline,
                    "node {id} partition {p}: high watermark {} < {end}",
                    log.high_watermark()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut seen: HashMap<i32, Vec<(i64, i64)>> = HashMap::new();
            let mut offset = 0;
            while offset < log.high_watermark() {
                let f = log.fetch(offset, 1 << 20).unwrap();
                for b in BatchIter::new(&f.bytes) {
                    let b = b.unwrap().1;
                    if !b.is_control() {
                        assert_eq!(b.producer_id(), 1000 + p as i64, "node {id} partition {p}");
                        seen.entry(b.base_sequence())
                            .or_default()
                            .push((b.base_offset(), b.last_offset()));
                    }
                }
                offset = f.next_offset;
            }
            assert_eq!(
                seen.len(),
                batches.len(),
                "node {id} partition {p}: {seen:?}"
            );
            for (seq, offsets) in batches {
                assert_eq!(
                    seen.get(seq),
                    Some(&vec![*offsets]),
                    "node {id} partition {p}: sequence {seq} once, at its offsets"
                );
            }
        }
    }
}

const ROUND: i32 = 20;

/// `ROUND` batches to every partition from sequence `from`, one producer per partition, all
/// partitions at once: each batch's sequence and answer.
async fn round(
    clients: &BTreeMap<NodeId, String>,
    partitions: i32,
    from: i32,
) -> Vec<(i32, Vec<(i32, Ack)>)> {
    let mut producers = Vec::new();
    for p in 0..partitions {
        producers.push(async move {
            let mut acks = Vec::new();
            for seq in from..from + ROUND {
                acks.push((seq, produce(clients, p, batch(p, seq)).await));
            }
            (p, acks)
        });
    }
    futures_join(producers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_partitions_on_three_nodes_survive_a_node_restart() {
    survive_a_node_restart(1).await;
}

/// The same with the partitions in sets (docs/design.md, "Partition sets"): 6 partitions on 3
/// nodes in sets of 2, a group each, whose entries carry both partitions' batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_sets_on_three_nodes_survive_a_node_restart() {
    survive_a_node_restart(3).await;
}

async fn survive_a_node_restart(set_size: usize) {
    let mut c = cluster(set_size).await;
    let sets = c.nodes[&1].host.sets();
    let expected = if set_size == 1 {
        PARTITIONS as usize
    } else {
        NODES as usize
    };
    assert_eq!(sets.len(), expected, "{sets:?}");
    // A batch for a partition the group does not replicate is refused, typed, and nothing is
    // proposed: the partition's log stays empty.
    let (replica, _) = c.nodes[&1].host.route(&GroupId::new(TOPIC, 0)).unwrap();
    let members = replica.members();
    match replica.append_to(members, batch(0, 0)).await {
        Err(oncelog_raft::ReplicaError::Config(m)) => {
            assert!(m.contains(&format!("of a set of {members}")), "{m}")
        }
        other => panic!("a batch for partition {members} of a set of {members}: {other:?}"),
    }
    assert_eq!(replica.log().log_end_offset(), 0);
    let leaders = spread_leaders(&c).await;
    eprintln!("leaders: {leaders:?}");

    let mut acked: Acked = BTreeMap::new();
    for (p, acks) in round(&c.clients, PARTITIONS, 0).await {
        for (seq, ack) in acks {
            acked.entry(p).or_default().push((seq, ack.offsets()));
        }
    }

    // Node 2 stops (its groups' leadership moves), the others keep taking batches.
    let stopped = c.nodes.remove(&2).unwrap();
    for t in &stopped.tasks {
        t.abort();
    }
    for t in stopped.tasks {
        let _ = t.await;
    }
    stopped.host.close().await.unwrap();
    for (p, acks) in round(&c.clients, PARTITIONS, ROUND).await {
        for (seq, ack) in acks {
            acked.entry(p).or_default().push((seq, ack.offsets()));
        }
    }

    // Node 2 comes back on the same log dir and addresses, and catches up.
    let raft = TcpListener::bind(&c.peers[&2].addr).await.unwrap();
    let clients = TcpListener::bind(&c.clients[&2]).await.unwrap();
    let dir = c.tmp.path().join("node-2");
    c.nodes
        .insert(2, start(2, &dir, &c.peers, raft, clients, set_size).await);

    // Retries of batches written before the restart (within the producer's window of five):
    // Duplicate, with the original offsets, from whichever node leads now.
    for p in 0..PARTITIONS {
        for seq in [2 * ROUND - 5, 2 * ROUND - 1] {
            let (_, offsets) = acked[&p].iter().find(|(s, _)| *s == seq).unwrap();
            let ack = produce(&c.clients, p, batch(p, seq)).await;
            assert_eq!(
                ack,
                Ack::Duplicate {
                    first_offset: offsets.0,
                    last_offset: offsets.1
                },
                "partition {p} sequence {seq}"
            );
        }
    }
    check_replicas(&c, &acked).await;
    // Leadership spreads again with node 2 back.
    spread_leaders(&c).await;
    let (frames, writes) = c.nodes[&1].host.sent();
    eprintln!("node 1 sent {frames} frames in {writes} writes");
    assert!(frames > 0 && writes <= frames);
    for (_, n) in std::mem::take(&mut c.nodes) {
        for t in &n.tasks {
            t.abort();
        }
        for t in n.tasks {
            let _ = t.await;
        }
        n.host.close().await.unwrap();
    }
}

/// Runs the futures concurrently, answers in order.
async fn futures_join<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in fs {
        set.push(Box::pin(f));
    }
    let mut out = Vec::new();
    // Poll all together: a join of pinned futures, in order.
    let mut pending: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, f) in set.iter_mut().enumerate() {
            if pending[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => pending[i] = Some(v),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for v in pending {
        out.push(v.unwrap());
    }
    out
}

/// A request for a partition a node does not host, a request naming none to a node of
/// many, and a host of a node not among its peers: typed answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_partitions_and_bad_host_configs_are_typed() {
    let tmp = tempfile::tempdir().unwrap();
    let peers: BTreeMap<NodeId, Node> = [(1, Node::new("127.0.0.1:1"))].into();
    let host = Arc::new(
        Host::open(
            tmp.path().join("a"),
            Environment::default(),
            config(1, &peers),
        )
        .await
        .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let server = client::serve(l, Arc::clone(&host));
    assert_eq!(
        ask(&addr, &to(PARTITIONS, ClientRequest::Status)).await,
        Some(ClientReply::UnknownPartition {
            topic: TOPIC.into(),
            partition: PARTITIONS
        })
    );
    assert_eq!(
        ask(&addr, &ClientRequest::Status).await,
        Some(ClientReply::UnknownPartition {
            topic: String::new(),
            partition: -1
        })
    );
    match ask(&addr, &to(0, ClientRequest::Status)).await {
        Some(ClientReply::Status(s)) => assert_eq!(s.id, 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        host.replica(&GroupId::new("other", 0)),
        Err(HostError::UnknownPartition(_))
    ));
    server.abort();
    let _ = server.await;
    host.close().await.unwrap();

    // A log that raft does not flush and whose high watermark is not raft's: refused.
    let log = oncelog::Log::open(tmp.path().join("plain"), oncelog::LogConfig::default()).unwrap();
    let network = oncelog_raft::network::mux::Mux::new(Duration::from_millis(10));
    match oncelog_raft::Replica::open_log(
        1,
        Arc::new(log),
        Environment::default().fs,
        ReplicaConfig::default(),
        network.group(GroupId::new(TOPIC, 0)),
    )
    .await
    {
        Err(oncelog_raft::ReplicaError::Config(m)) => {
            assert!(m.contains("high watermark policy"), "{m}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened"),
    }

    match Host::open(
        tmp.path().join("b"),
        Environment::default(),
        config(9, &peers),
    )
    .await
    {
        Err(HostError::Config(m)) => assert!(m.contains("node 9"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened"),
    }
    let mut zero = config(1, &peers);
    zero.partitions = 0;
    match Host::open(tmp.path().join("c"), Environment::default(), zero).await {
        Err(HostError::Config(m)) => assert!(m.contains("0 partitions"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened"),
    }
}

/// Three `oncelog-raft-node` processes of `KILL_PARTITIONS` partitions each (`--topic`):
/// batches produced to every partition, one node SIGKILLed while the others take more, then
/// restarted on its log dir (recovered by its `LogManager`); every replica ends with every
/// acknowledged batch once at its offsets, read through the client protocol, and retries are
/// answered Duplicate with the original offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_processes_of_many_partitions_survive_a_sigkill() {
    const KILL_PARTITIONS: i32 = 20;
    let tmp = tempfile::tempdir().unwrap();
    let ports = ports::free_ports(2 * NODES as usize);
    let raft_addr = |id: NodeId| format!("127.0.0.1:{}", ports[2 * (id as usize - 1)]);
    let clients: BTreeMap<NodeId, String> = (1..=NODES)
        .map(|id| {
            (
                id,
                format!("127.0.0.1:{}", ports[2 * (id as usize - 1) + 1]),
            )
        })
        .collect();
    let peers = (1..=NODES)
        .map(|id| format!("{id}={}", raft_addr(id)))
        .collect::<Vec<_>>()
        .join(",");
    let start = |id: NodeId| {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(tmp.path().join(format!("node-{id}.stderr")))
            .unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_oncelog-raft-node"));
        cmd.arg("--id")
            .arg(id.to_string())
            .arg("--dir")
            .arg(tmp.path().join(format!("node-{id}")))
            .args(["--listen", &raft_addr(id), "--client", &clients[&id]])
            .args(["--peers", &peers, "--topic", TOPIC])
            .args(["--partitions", &KILL_PARTITIONS.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        if id == 1 {
            cmd.arg("--init");
        }
        Killed(Some(cmd.spawn().unwrap()))
    };
    let mut nodes: BTreeMap<NodeId, Killed> = (1..=NODES).map(|id| (id, start(id))).collect();

    let mut acked = Acked::new();
    for (p, acks) in round(&clients, KILL_PARTITIONS, 0).await {
        for (seq, ack) in acks {
            acked.entry(p).or_default().push((seq, ack.offsets()));
        }
    }
    // SIGKILL node 2, produce on, restart it.
    drop(nodes.remove(&2));
    for (p, acks) in round(&clients, KILL_PARTITIONS, ROUND).await {
        for (seq, ack) in acks {
            acked.entry(p).or_default().push((seq, ack.offsets()));
        }
    }
    nodes.insert(2, start(2));
    for p in 0..KILL_PARTITIONS {
        let seq = 2 * ROUND - 1;
        let (_, offsets) = acked[&p].iter().find(|(s, _)| *s == seq).unwrap();
        assert_eq!(
            produce(&clients, p, batch(p, seq)).await,
            Ack::Duplicate {
                first_offset: offsets.0,
                last_offset: offsets.1
            },
            "partition {p}"
        );
    }
    // Every node, every partition, through the client protocol.
    for (id, addr) in &clients {
        for (&p, batches) in &acked {
            let end = batches.iter().map(|(_, (_, last))| last + 1).max().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut seen: HashMap<i32, Vec<(i64, i64)>> = HashMap::new();
            let mut offset = 0;
            while offset < end {
                assert!(
                    Instant::now() < deadline,
                    "node {id} partition {p}: at {offset} < {end}"
                );
                let read = to(
                    p,
                    ClientRequest::Read {
                        offset,
                        max_bytes: 1 << 20,
                    },
                );
                let Some(ClientReply::Batches {
                    bytes, next_offset, ..
                }) = ask(addr, &read).await
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                for b in BatchIter::new(&bytes) {
                    let b = b.unwrap().1;
                    if !b.is_control() {
                        seen.entry(b.base_sequence())
                            .or_default()
                            .push((b.base_offset(), b.last_offset()));
                    }
                }
                if next_offset == offset {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                offset = next_offset;
            }
            assert_eq!(
                seen.len(),
                batches.len(),
                "node {id} partition {p}: {seen:?}"
            );
            for (seq, offsets) in batches {
                assert_eq!(
                    seen.get(seq),
                    Some(&vec![*offsets]),
                    "node {id} partition {p}: sequence {seq} once, at its offsets"
                );
            }
        }
    }
    for (id, mut n) in nodes {
        let child = n.0.as_mut().unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "node {id} exited: {}",
            std::fs::read_to_string(tmp.path().join(format!("node-{id}.stderr"))).unwrap()
        );
    }
}

/// A node process, SIGKILLed when dropped.
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
