//! A 3-process cluster on loopback (`oncelog-raft-node` over TCP) whose leader is SIGKILLed
//! and restarted in a loop while idempotent producers append through whichever replica leads,
//! each retrying the same batch (same sequence) until it is answered, as a Kafka idempotent
//! producer does. At the end, with every replica up and caught up, each replica's committed log
//! is read back and checked against the answers: every acknowledged batch present exactly
//! once, at the offsets it was acknowledged with (a retry answered `Duplicate` included), in
//! its producer's order; offsets dense; all replicas identical batch for batch.
//!
//! Rounds: 5 kills by default; `ONCELOG_RAFT_KILL_ROUNDS=N` for more.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter, ConsumerRecordIter};
use oncelog_raft::client::{Client, ClientReply, ClientRequest, Status};
use oncelog_raft::Ack;
use parking_lot::Mutex;

const BIN: &str = env!("CARGO_BIN_EXE_oncelog-raft-node");
const NODES: usize = 3;
const PRODUCERS: i64 = 3;
/// How long one request may take before the producer tries again (elsewhere).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a batch may go unanswered before the test fails.
const BATCH_DEADLINE: Duration = Duration::from_secs(60);

struct NodeProc {
    id: u64,
    dir: PathBuf,
    raft_addr: String,
    client_addr: String,
    log: PathBuf,
    child: Option<Child>,
}

/// The three processes; killed (SIGKILL) when the test ends, however it ends.
struct Cluster {
    nodes: Vec<NodeProc>,
    peers: String,
    _tmp: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn free_ports(n: usize) -> Vec<u16> {
    // All bound at once, so they are distinct; released just before the nodes bind them.
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl Cluster {
    fn new() -> Cluster {
        let tmp = tempfile::tempdir().expect("temp dir");
        let ports = free_ports(2 * NODES);
        let nodes: Vec<NodeProc> = (0..NODES)
            .map(|i| NodeProc {
                id: i as u64 + 1,
                dir: tmp.path().join(format!("replica-{}", i + 1)),
                raft_addr: format!("127.0.0.1:{}", ports[2 * i]),
                client_addr: format!("127.0.0.1:{}", ports[2 * i + 1]),
                log: tmp.path().join(format!("replica-{}.stderr", i + 1)),
                child: None,
            })
            .collect();
        let peers = nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.raft_addr))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            nodes,
            peers,
            _tmp: tmp,
        };
        for i in 0..NODES {
            c.start(i, i == 0);
        }
        c
    }

    fn start(&mut self, i: usize, init: bool) {
        let n = &mut self.nodes[i];
        assert!(n.child.is_none(), "replica {} is already running", n.id);
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .expect("stderr file");
        let mut cmd = Command::new(BIN);
        cmd.arg("--id")
            .arg(n.id.to_string())
            .arg("--dir")
            .arg(&n.dir)
            .arg("--listen")
            .arg(&n.raft_addr)
            .arg("--client")
            .arg(&n.client_addr)
            .arg("--peers")
            .arg(&self.peers)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if init {
            cmd.arg("--init");
        }
        n.child = Some(cmd.spawn().expect("spawn oncelog-raft-node"));
    }

    fn sigkill(&mut self, i: usize) {
        let mut child = self.nodes[i].child.take().expect("a running replica");
        // std's Child::kill is SIGKILL on Unix: a crash, no shutdown path runs.
        child.kill().expect("SIGKILL the replica");
        child.wait().expect("reap the killed replica");
    }

    /// Fails if a replica that should run has exited (a failed restart, a panic).
    fn check_running(&mut self) {
        for n in &mut self.nodes {
            if let Some(child) = n.child.as_mut() {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                    panic!("replica {} exited ({status}); its stderr:\n{log}", n.id);
                }
            }
        }
    }

    fn client_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.client_addr.clone()).collect()
    }
}

async fn call(addr: &str, request: &ClientRequest) -> Option<ClientReply> {
    let once = async {
        let mut c = Client::connect(addr).await.ok()?;
        c.call(request).await.ok()
    };
    tokio::time::timeout(CALL_TIMEOUT, once)
        .await
        .ok()
        .flatten()
}

async fn status(addr: &str) -> Option<Status> {
    match call(addr, &ClientRequest::Status).await? {
        ClientReply::Status(s) => Some(s),
        other => panic!("status answered {other:?}"),
    }
}

/// The running replica that says it leads, waiting up to `within` for one.
async fn leader(cluster: &Cluster, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        for (i, n) in cluster.nodes.iter().enumerate() {
            if n.child.is_none() {
                continue;
            }
            if let Some(s) = status(&n.client_addr).await {
                if s.leader == Some(s.id) {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One acknowledged batch.
#[derive(Debug, Clone)]
struct Acked {
    producer: i64,
    sequence: i32,
    first: i64,
    last: i64,
    duplicate: bool,
    /// How many times it was sent.
    attempts: u32,
}

fn values(producer: i64, sequence: i32) -> Vec<String> {
    let n = 1 + sequence.rem_euclid(3);
    (0..n)
        .map(|r| format!("p{producer}-s{sequence}-r{r}"))
        .collect()
}

fn batch(producer: i64, sequence: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(producer, 0, sequence);
    for v in values(producer, sequence) {
        b.append(
            1_700_000_000_000 + i64::from(sequence),
            None,
            Some(v.as_bytes()),
            &[],
        );
    }
    Bytes::from(b.build().expect("a valid batch"))
}

/// Appends batches until `stop`, each until it is answered (to whichever replica leads).
async fn produce(
    producer: i64,
    addrs: Vec<String>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
) -> Result<(), String> {
    let mut conns: HashMap<usize, Client> = HashMap::new();
    let mut target = 0usize;
    let mut sequence = 0i32;
    while !stop.load(Ordering::Relaxed) {
        let bytes = batch(producer, sequence);
        let request = ClientRequest::Produce(bytes);
        let started = Instant::now();
        let mut attempts = 0u32;
        let (first, last, duplicate) = loop {
            if started.elapsed() > BATCH_DEADLINE {
                return Err(format!(
                    "producer {producer}: sequence {sequence} unanswered after {attempts} attempts"
                ));
            }
            attempts += 1;
            let reply = async {
                let c = match conns.entry(target) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(v) => v.insert(
                        tokio::time::timeout(CALL_TIMEOUT, Client::connect(&addrs[target]))
                            .await
                            .ok()?
                            .ok()?,
                    ),
                };
                tokio::time::timeout(CALL_TIMEOUT, c.call(&request))
                    .await
                    .ok()?
                    .ok()
            }
            .await;
            match reply {
                Some(ClientReply::Acked(Ack::Appended {
                    first_offset,
                    last_offset,
                })) => break (first_offset, last_offset, false),
                Some(ClientReply::Acked(Ack::Duplicate {
                    first_offset,
                    last_offset,
                })) => break (first_offset, last_offset, true),
                Some(ClientReply::NotLeader { leader: Some(l) })
                    if (l as usize) <= addrs.len() && l >= 1 =>
                {
                    let next = l as usize - 1;
                    if next == target {
                        // It names itself yet refuses: leadership is moving; wait a little.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    target = next;
                }
                Some(ClientReply::Refused { kind, message }) => {
                    return Err(format!(
                        "producer {producer}: sequence {sequence} refused ({kind}): {message}"
                    ))
                }
                Some(
                    other @ (ClientReply::Batches { .. }
                    | ClientReply::Status(_)
                    | ClientReply::UnknownPartition { .. }),
                ) => return Err(format!("producer {producer}: a produce answered {other:?}")),
                Some(ClientReply::NotLeader { .. }) | Some(ClientReply::Error(_)) | None => {
                    // No answer or no leader known: the connection may be stale; try the next
                    // replica after a pause.
                    conns.remove(&target);
                    target = (target + 1) % addrs.len();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
        };
        acked.lock().push(Acked {
            producer,
            sequence,
            first,
            last,
            duplicate,
            attempts,
        });
        sequence += values(producer, sequence).len() as i32;
    }
    Ok(())
}

/// A committed batch as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    bytes: Bytes,
    base: i64,
    last: i64,
    control: bool,
    producer: i64,
    sequence: i32,
    values: Vec<String>,
}

async fn read_all(addr: &str, high_watermark: i64) -> Vec<Read> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < high_watermark {
        let reply = call(
            addr,
            &ClientRequest::Read {
                offset,
                max_bytes: 1 << 20,
            },
        )
        .await
        .unwrap_or_else(|| panic!("{addr}: no answer to a read at {offset}"));
        let ClientReply::Batches {
            bytes, next_offset, ..
        } = reply
        else {
            panic!("{addr}: a read at {offset} answered {reply:?}");
        };
        assert!(
            !bytes.is_empty(),
            "{addr}: nothing readable at {offset} below {high_watermark}"
        );
        for b in BatchIter::new(&bytes) {
            let (_, b) =
                b.unwrap_or_else(|e| panic!("{addr}: a malformed batch near {offset}: {e}"));
            let raw = Bytes::copy_from_slice(b.as_bytes());
            let values = if b.is_control() {
                Vec::new()
            } else {
                ConsumerRecordIter::new(raw.clone(), 0)
                    .map(|r| {
                        let r = r.expect("a readable record");
                        String::from_utf8(r.value.expect("a value").to_vec()).expect("utf-8")
                    })
                    .collect()
            };
            out.push(Read {
                bytes: raw,
                base: b.base_offset(),
                last: b.last_offset(),
                control: b.is_control(),
                producer: b.producer_id(),
                sequence: b.base_sequence(),
                values,
            });
        }
        assert!(
            next_offset > offset,
            "{addr}: a read at {offset} did not move on"
        );
        offset = next_offset;
    }
    out
}

/// Every replica running, agreeing on the high watermark, with nothing uncommitted.
async fn caught_up(cluster: &Cluster, at_least: i64, within: Duration) -> i64 {
    let deadline = Instant::now() + within;
    // The agreement seen on the previous poll: it must hold twice in a row, so an election
    // under way (whose blank entry is not yet everywhere) is waited out.
    let mut agreed: Option<(i64, u64)> = None;
    loop {
        let mut statuses = Vec::new();
        for n in &cluster.nodes {
            statuses.push(status(&n.client_addr).await);
        }
        if let Some(all) = statuses.iter().cloned().collect::<Option<Vec<Status>>>() {
            let hw = all[0].high_watermark;
            let leader = all[0].leader;
            if hw >= at_least
                && leader.is_some()
                && all
                    .iter()
                    .all(|s| s.high_watermark == hw && s.log_end_offset == hw && s.leader == leader)
            {
                let now = (hw, all[0].term);
                if agreed == Some(now) && all.iter().all(|s| s.term == now.1) {
                    return hw;
                }
                agreed = Some(now);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        agreed = None;
        if Instant::now() > deadline {
            panic!("the replicas did not catch up (to at least {at_least}) within {within:?}: {statuses:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_loop_keeps_every_acknowledged_batch_once() {
    let rounds: usize = std::env::var("ONCELOG_RAFT_KILL_ROUNDS")
        .ok()
        .map(|v| v.parse().expect("ONCELOG_RAFT_KILL_ROUNDS is a number"))
        .unwrap_or(5);
    let started = Instant::now();
    let mut cluster = Cluster::new();
    leader(&cluster, Duration::from_secs(20)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            tokio::spawn(produce(
                1000 + p,
                cluster.client_addrs(),
                Arc::clone(&stop),
                Arc::clone(&acked),
            ))
        })
        .collect();

    let mut kills = Vec::new();
    for round in 0..rounds {
        // Some progress under this leader first.
        let before = acked.lock().len();
        let deadline = Instant::now() + Duration::from_secs(30);
        while acked.lock().len() < before + 50 {
            cluster.check_running();
            assert!(
                Instant::now() < deadline,
                "round {round}: no progress in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let l = leader(&cluster, Duration::from_secs(20)).await;
        cluster.sigkill(l);
        kills.push(cluster.nodes[l].id);
        if round % 3 == 2 {
            // Back before the others' election timeout: it may lead again, at a new term.
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            // Down until the other two elect a leader and commit under it.
            let successor = leader(&cluster, Duration::from_secs(20)).await;
            assert_ne!(successor, l);
            let before = acked.lock().len();
            let deadline = Instant::now() + Duration::from_secs(30);
            while acked.lock().len() < before + 10 {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: no progress without replica {}",
                    l + 1
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        cluster.start(l, false);
    }
    // A last stretch with everyone up, then the producers finish their batch in flight.
    let before = acked.lock().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().len() < before + 30 {
        cluster.check_running();
        assert!(
            Instant::now() < deadline,
            "no progress after the last restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.expect("producer task").expect("producer");
    }
    cluster.check_running();

    let acked = acked.lock().clone();
    let end = acked.iter().map(|a| a.last + 1).max().unwrap_or(0);
    let hw = caught_up(&cluster, end, Duration::from_secs(30)).await;

    let mut logs = Vec::new();
    for n in &cluster.nodes {
        logs.push((n.id, read_all(&n.client_addr, hw).await));
    }

    // Dense offsets and identical logs.
    for (id, log) in &logs {
        let mut next = 0;
        for b in log {
            assert_eq!(
                b.base, next,
                "replica {id}: the batch at {} should start at {next}",
                b.base
            );
            next = b.last + 1;
        }
        assert_eq!(
            next, hw,
            "replica {id}: the log ends at {next}, the high watermark is {hw}"
        );
    }
    let (first_id, reference) = &logs[0];
    for (id, log) in &logs[1..] {
        assert_eq!(
            log.len(),
            reference.len(),
            "replicas {first_id} and {id}: batch counts"
        );
        for (a, b) in reference.iter().zip(log) {
            assert_eq!(
                a, b,
                "replicas {first_id} and {id} differ at offset {}",
                a.base
            );
        }
    }

    // Every stored data batch once, in each producer's order, with the values it was sent with.
    let mut stored: BTreeMap<(i64, i32), &Read> = BTreeMap::new();
    let mut last_sequence: HashMap<i64, i32> = HashMap::new();
    for b in reference.iter().filter(|b| !b.control) {
        assert!(
            (1000..1000 + PRODUCERS).contains(&b.producer),
            "a batch of an unknown producer {} at {}",
            b.producer,
            b.base
        );
        assert!(
            stored.insert((b.producer, b.sequence), b).is_none(),
            "producer {} sequence {} stored twice (the second at {})",
            b.producer,
            b.sequence,
            b.base
        );
        if let Some(&prev) = last_sequence.get(&b.producer) {
            assert!(
                b.sequence > prev,
                "producer {}: sequence {} at {} after sequence {prev}",
                b.producer,
                b.sequence,
                b.base
            );
        }
        last_sequence.insert(b.producer, b.sequence);
        assert_eq!(
            b.values,
            values(b.producer, b.sequence),
            "the values of the batch at {}",
            b.base
        );
    }
    // Every acknowledged batch at the offsets it was acknowledged with.
    for a in &acked {
        let b = stored.get(&(a.producer, a.sequence)).unwrap_or_else(|| {
            panic!("acknowledged {a:?} is not in the committed log");
        });
        assert_eq!(
            (b.base, b.last),
            (a.first, a.last),
            "acknowledged {a:?} is stored elsewhere"
        );
    }
    // Each producer retried every batch until it was answered, so nothing stored went
    // unanswered.
    assert_eq!(
        stored.len(),
        acked.len(),
        "stored data batches against acknowledged ones"
    );

    let duplicates = acked.iter().filter(|a| a.duplicate).count();
    let retried = acked.iter().filter(|a| a.attempts > 1).count();
    let controls = reference.iter().filter(|b| b.control).count();
    eprintln!(
        "{rounds} leader kills (replicas {kills:?}); {} batches acknowledged, {retried} after a \
         retry, {duplicates} answered as duplicates; {controls} control batches; high watermark \
         {hw}; {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );

    // A replica restarted after a SIGKILL opened a log that was not closed.
    for n in &cluster.nodes {
        if kills.contains(&n.id) {
            let s = status(&n.client_addr).await.expect("status");
            assert!(!s.opened_clean, "replica {} was SIGKILLed, yet {s:?}", n.id);
        }
    }

    // A clean stop: SIGTERM, exit status 0; restarted, the replicas hold the same history
    // (and, once it is committed, the blank entry of the leader they elect).
    for n in &cluster.nodes {
        let pid = n.child.as_ref().expect("running").id();
        let st = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("kill -TERM");
        assert!(st.success(), "kill -TERM {pid}");
    }
    for n in &mut cluster.nodes {
        let mut child = n.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "replica {} did not stop on SIGTERM",
                n.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let stderr = std::fs::read_to_string(&n.log).unwrap_or_default();
        assert!(
            status.success(),
            "replica {} stopped with {status}:\n{stderr}",
            n.id
        );
        assert!(stderr.contains("stopping"), "replica {}: {stderr}", n.id);
    }
    for i in 0..NODES {
        cluster.start(i, false);
    }
    let hw_after = caught_up(&cluster, hw, Duration::from_secs(30)).await;
    for n in &cluster.nodes {
        let s = status(&n.client_addr).await.expect("status");
        assert!(
            s.opened_clean,
            "replica {} was stopped cleanly, yet {s:?}",
            n.id
        );
        let log = read_all(&n.client_addr, hw_after).await;
        assert!(
            log.len() >= reference.len(),
            "replica {}: {} batches",
            n.id,
            log.len()
        );
        assert_eq!(
            &log[..reference.len()],
            &reference[..],
            "replica {} after a clean restart",
            n.id
        );
        assert!(
            log[reference.len()..].iter().all(|b| b.control),
            "replica {}",
            n.id
        );
    }
}

/// Arguments the binary cannot run with: refused before anything is opened, saying which.
#[test]
fn bad_arguments_are_refused_saying_which() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("replica");
    let run = |id: &str, listen: &str, peers: &str| {
        let out = Command::new(BIN)
            .args([
                "--id",
                id,
                "--listen",
                listen,
                "--client",
                "127.0.0.1:0",
                "--peers",
                peers,
            ])
            .arg("--dir")
            .arg(&dir)
            .output()
            .expect("run the binary");
        assert!(
            !out.status.success(),
            "--id {id} --listen {listen} --peers {peers} ran"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run("4", "127.0.0.1:7001", "1=127.0.0.1:7001");
    assert!(e.contains("--id 4 is not among --peers"), "{e}");
    let e = run("1", "127.0.0.1:7002", "1=127.0.0.1:7001");
    assert!(e.contains("is not replica 1's address"), "{e}");
    let e = run("1", "127.0.0.1:7001", "1=nowhere");
    assert!(e.contains("the address \"nowhere\""), "{e}");
    assert!(
        !dir.exists(),
        "a refused start created the partition directory"
    );
}
