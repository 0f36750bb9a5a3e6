//! What the tests of `oncelog-raft-node` processes share (tests/cluster_kill.rs, one partition
//! per process; tests/cluster_kill_partitions.rs, twenty): three processes on loopback,
//! idempotent producers that follow the leader and retry the same batch until it is answered,
//! a replica's committed log read back through the client protocol, and the checks of those
//! logs against the answers.

#![allow(dead_code)]

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::ops::Range;
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

pub const BIN: &str = env!("CARGO_BIN_EXE_oncelog-raft-node");
pub const NODES: usize = 3;
/// The topic of a cluster of many partitions (`--topic`).
pub const TOPIC: &str = "events";
/// How long one request may take before the producer tries again (elsewhere).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a batch may go unanswered before the test fails.
const BATCH_DEADLINE: Duration = Duration::from_secs(60);

/// The kill rounds asked for: `ONCELOG_RAFT_KILL_ROUNDS`, or `default`.
pub fn kill_rounds(default: usize) -> usize {
    std::env::var("ONCELOG_RAFT_KILL_ROUNDS")
        .ok()
        .map(|v| v.parse().expect("ONCELOG_RAFT_KILL_ROUNDS is a number"))
        .unwrap_or(default)
}

/// A partition of the cluster: the processes' only one (`None`: requests go as they are) or
/// one of [`TOPIC`]'s (`Some(p)`: requests go wrapped in [`ClientRequest::To`]).
pub type Part = Option<i32>;

/// `request` addressed to `part`.
pub fn to(part: Part, request: ClientRequest) -> ClientRequest {
    match part {
        None => request,
        Some(partition) => ClientRequest::To {
            topic: TOPIC.into(),
            partition,
            request: Box::new(request),
        },
    }
}

pub struct NodeProc {
    pub id: u64,
    dir: PathBuf,
    raft_addr: String,
    pub client_addr: String,
    log: PathBuf,
    child: Option<Child>,
}

/// The three processes; killed (SIGKILL) when the test ends, however it ends.
pub struct Cluster {
    pub nodes: Vec<NodeProc>,
    peers: String,
    /// `--partitions`, if the processes host many (of [`TOPIC`]).
    partitions: Option<i32>,
    /// `--set-size` (partitions per raft group) with `partitions`.
    set_size: usize,
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

#[path = "../ports/mod.rs"]
mod ports;
use ports::free_ports;

impl Cluster {
    /// Three processes, each one replica of one partition (`partitions: None`) or a host of
    /// `partitions` partitions of [`TOPIC`]; the first forms the group(s).
    pub fn new(partitions: Option<i32>) -> Cluster {
        Cluster::with_sets(partitions, 1)
    }

    /// [`Cluster::new`] whose processes replicate the partitions in sets of up to `set_size`
    /// (docs/design.md, "Partition sets").
    pub fn with_sets(partitions: Option<i32>, set_size: usize) -> Cluster {
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
            partitions,
            set_size,
            _tmp: tmp,
        };
        for i in 0..NODES {
            c.start(i, i == 0);
        }
        c
    }

    /// Every partition of the cluster.
    pub fn parts(&self) -> Vec<Part> {
        match self.partitions {
            None => vec![None],
            Some(n) => (0..n).map(Some).collect(),
        }
    }

    pub fn start(&mut self, i: usize, init: bool) {
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
        if let Some(partitions) = self.partitions {
            cmd.args(["--topic", TOPIC, "--partitions", &partitions.to_string()]);
            cmd.args(["--set-size", &self.set_size.to_string()]);
        }
        if init {
            cmd.arg("--init");
        }
        n.child = Some(cmd.spawn().expect("spawn oncelog-raft-node"));
    }

    pub fn running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    pub fn sigkill(&mut self, i: usize) {
        let mut child = self.nodes[i].child.take().expect("a running replica");
        // std's Child::kill is SIGKILL on Unix: a crash, no shutdown path runs.
        child.kill().expect("SIGKILL the replica");
        child.wait().expect("reap the killed replica");
    }

    /// Fails if a replica that should run has exited (a failed restart, a panic).
    pub fn check_running(&mut self) {
        for n in &mut self.nodes {
            if let Some(child) = n.child.as_mut() {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                    panic!("replica {} exited ({status}); its stderr:\n{log}", n.id);
                }
            }
        }
    }

    pub fn client_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.client_addr.clone()).collect()
    }

    /// Stops every process with SIGTERM: each exits with status 0 having said it stops.
    pub async fn stop_cleanly(&mut self) {
        for n in &self.nodes {
            let pid = n.child.as_ref().expect("running").id();
            let st = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .expect("kill -TERM");
            assert!(st.success(), "kill -TERM {pid}");
        }
        for n in &mut self.nodes {
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
    }
}

pub async fn call(addr: &str, request: &ClientRequest) -> Option<ClientReply> {
    let once = async {
        let mut c = Client::connect(addr).await.ok()?;
        c.call(request).await.ok()
    };
    tokio::time::timeout(CALL_TIMEOUT, once)
        .await
        .ok()
        .flatten()
}

pub async fn status(addr: &str, part: Part) -> Option<Status> {
    match call(addr, &to(part, ClientRequest::Status)).await? {
        ClientReply::Status(s) => Some(s),
        other => panic!("status of {part:?} answered {other:?}"),
    }
}

/// The running replica that says it leads `part`, waiting up to `within` for one.
pub async fn leader(cluster: &Cluster, part: Part, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        for (i, n) in cluster.nodes.iter().enumerate() {
            if n.child.is_none() {
                continue;
            }
            if let Some(s) = status(&n.client_addr, part).await {
                if s.leader == Some(s.id) {
                    return i;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{part:?}: no leader within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One acknowledged batch.
#[derive(Debug, Clone)]
pub struct Acked {
    pub part: Part,
    pub producer: i64,
    pub sequence: i32,
    pub first: i64,
    pub last: i64,
    pub duplicate: bool,
    /// How many times it was sent.
    pub attempts: u32,
}

pub fn values(producer: i64, sequence: i32) -> Vec<String> {
    let n = 1 + sequence.rem_euclid(3);
    (0..n)
        .map(|r| format!("p{producer}-s{sequence}-r{r}"))
        .collect()
}

pub fn batch(producer: i64, sequence: i32) -> Bytes {
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

/// An idempotent producer of one partition: sends each batch until it is answered, to
/// whichever replica leads, as a Kafka idempotent producer does.
pub struct Producer {
    pub id: i64,
    part: Part,
    addrs: Vec<String>,
    conns: HashMap<usize, Client>,
    target: usize,
}

impl Producer {
    pub fn new(id: i64, part: Part, addrs: Vec<String>) -> Producer {
        Producer {
            id,
            part,
            addrs,
            conns: HashMap::new(),
            target: 0,
        }
    }

    /// Sends the batch `sequence` (the same bytes each time) until it is answered: after no
    /// answer, an error or an unknown leader to the next replica, after `NotLeader` to the
    /// leader named.
    pub async fn send(&mut self, sequence: i32) -> Result<Acked, String> {
        let producer = self.id;
        let request = to(self.part, ClientRequest::Produce(batch(producer, sequence)));
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            if started.elapsed() > BATCH_DEADLINE {
                return Err(format!(
                    "{:?} producer {producer}: sequence {sequence} unanswered after {attempts} attempts",
                    self.part
                ));
            }
            attempts += 1;
            let target = self.target;
            let addr = &self.addrs[target];
            let reply = async {
                let c = match self.conns.entry(target) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(v) => v.insert(
                        tokio::time::timeout(CALL_TIMEOUT, Client::connect(addr))
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
            let acked = |ack: Ack, duplicate: bool| {
                let (first, last) = ack.offsets();
                Acked {
                    part: self.part,
                    producer,
                    sequence,
                    first,
                    last,
                    duplicate,
                    attempts,
                }
            };
            match reply {
                Some(ClientReply::Acked(ack @ Ack::Appended { .. })) => {
                    return Ok(acked(ack, false))
                }
                Some(ClientReply::Acked(ack @ Ack::Duplicate { .. })) => {
                    return Ok(acked(ack, true))
                }
                Some(ClientReply::NotLeader { leader: Some(l) })
                    if (l as usize) <= self.addrs.len() && l >= 1 =>
                {
                    let next = l as usize - 1;
                    if next == target {
                        // It names itself yet refuses: leadership is moving; wait a little.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    self.target = next;
                }
                Some(ClientReply::Refused { kind, message }) => {
                    return Err(format!(
                        "{:?} producer {producer}: sequence {sequence} refused ({kind}): {message}",
                        self.part
                    ))
                }
                Some(
                    other @ (ClientReply::Batches { .. }
                    | ClientReply::Status(_)
                    | ClientReply::UnknownPartition { .. }),
                ) => {
                    return Err(format!(
                        "{:?} producer {producer}: a produce answered {other:?}",
                        self.part
                    ))
                }
                Some(ClientReply::NotLeader { .. }) | Some(ClientReply::Error(_)) | None => {
                    // No answer or no leader known: the connection may be stale; try the next
                    // replica after a pause.
                    self.conns.remove(&target);
                    self.target = (target + 1) % self.addrs.len();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
        }
    }
}

/// What producers had acknowledged: every batch, and how many in each partition (read while
/// they run, so kept as they come rather than counted over all).
#[derive(Default)]
pub struct Acks {
    pub all: Vec<Acked>,
    pub by_part: BTreeMap<Part, usize>,
}

/// Appends batches until `stop`, each until it is answered ([`Producer::send`]).
pub async fn produce(
    mut producer: Producer,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acks>>,
) -> Result<(), String> {
    let mut sequence = 0i32;
    while !stop.load(Ordering::Relaxed) {
        let a = producer.send(sequence).await?;
        let mut acks = acked.lock();
        *acks.by_part.entry(a.part).or_default() += 1;
        acks.all.push(a);
        drop(acks);
        sequence += values(producer.id, sequence).len() as i32;
    }
    Ok(())
}

/// Producers appending in tasks of their own ([`produce`]) until [`Producing::finish`].
pub struct Producing {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acks>>,
    tasks: Vec<tokio::task::JoinHandle<Result<(), String>>>,
}

impl Producing {
    pub fn start(producers: impl IntoIterator<Item = Producer>) -> Producing {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Acks::default()));
        let tasks = producers
            .into_iter()
            .map(|p| tokio::spawn(produce(p, Arc::clone(&stop), Arc::clone(&acked))))
            .collect();
        Producing { stop, acked, tasks }
    }

    /// The batches acknowledged so far in each partition of `cluster`.
    fn counts(&self, cluster: &Cluster) -> BTreeMap<Part, usize> {
        let acks = self.acked.lock();
        cluster
            .parts()
            .into_iter()
            .map(|p| (p, acks.by_part.get(&p).copied().unwrap_or(0)))
            .collect()
    }

    /// Waits until `more` batches more are acknowledged in every partition of `cluster`,
    /// failing after 30 s or if a process that should run has exited.
    pub async fn progress(&self, cluster: &mut Cluster, more: usize, what: &str) {
        let since = self.counts(cluster);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.counts(cluster);
            let behind: Vec<Part> = since
                .iter()
                .filter(|(p, n)| now[*p] < *n + more)
                .map(|(p, _)| *p)
                .collect();
            if behind.is_empty() {
                return;
            }
            cluster.check_running();
            assert!(
                Instant::now() < deadline,
                "{what}: no progress in 30 s in partitions {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the producers once each has its batch in flight answered: all acknowledged.
    pub async fn finish(self) -> Vec<Acked> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("producer task").expect("producer");
        }
        let acked = std::mem::take(&mut self.acked.lock().all);
        acked
    }
}

/// A committed batch as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    bytes: Bytes,
    pub base: i64,
    pub last: i64,
    pub control: bool,
    pub producer: i64,
    pub sequence: i32,
    pub values: Vec<String>,
}

/// The batches of `part` on the replica at `addr` below `high_watermark`, however far its
/// log has grown since (a read answers up to the replica's high watermark of the moment).
pub async fn read_all(addr: &str, part: Part, high_watermark: i64) -> Vec<Read> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < high_watermark {
        let reply = call(
            addr,
            &to(
                part,
                ClientRequest::Read {
                    offset,
                    max_bytes: 1 << 20,
                },
            ),
        )
        .await
        .unwrap_or_else(|| panic!("{addr} {part:?}: no answer to a read at {offset}"));
        let ClientReply::Batches {
            bytes, next_offset, ..
        } = reply
        else {
            panic!("{addr} {part:?}: a read at {offset} answered {reply:?}");
        };
        assert!(
            !bytes.is_empty(),
            "{addr} {part:?}: nothing readable at {offset} below {high_watermark}"
        );
        for b in BatchIter::new(&bytes) {
            let (_, b) = b.unwrap_or_else(|e| {
                panic!("{addr} {part:?}: a malformed batch near {offset}: {e}")
            });
            if b.base_offset() >= high_watermark {
                // Committed since the caller learnt `high_watermark` (the blank entry of a
                // leader elected meanwhile): not part of what is compared.
                eprintln!(
                    "{addr} {part:?}: a batch at {} (control: {}) past the high watermark {high_watermark} read",
                    b.base_offset(),
                    b.is_control()
                );
                break;
            }
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
            "{addr} {part:?}: a read at {offset} did not move on"
        );
        offset = next_offset;
    }
    out
}

/// Every replica of `part` running, agreeing on the high watermark, with nothing uncommitted.
pub async fn caught_up(cluster: &Cluster, part: Part, at_least: i64, within: Duration) -> i64 {
    let deadline = Instant::now() + within;
    // The agreement seen on the previous poll: it must hold twice in a row, so an election
    // under way (whose blank entry is not yet everywhere) is waited out.
    let mut agreed: Option<(i64, u64)> = None;
    loop {
        let mut statuses = Vec::new();
        for n in &cluster.nodes {
            statuses.push(status(&n.client_addr, part).await);
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
            panic!("{part:?}: the replicas did not catch up (to at least {at_least}) within {within:?}: {statuses:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the caught-up replicas' logs of `part` (node id, batches below `hw`) against what
/// was acknowledged in it (`acked`, by `producers` only): offsets dense, all replicas
/// identical batch for batch, every data batch stored once in its producer's order with the
/// values it was sent with, every acknowledged batch at the offsets it was acknowledged with
/// (a retry answered `Duplicate` included), nothing stored unanswered. Returns the log.
pub fn check_logs(
    part: Part,
    logs: &[(u64, Vec<Read>)],
    hw: i64,
    acked: &[Acked],
    producers: Range<i64>,
) -> Vec<Read> {
    // Dense offsets and identical logs.
    for (id, log) in logs {
        let mut next = 0;
        for b in log {
            assert_eq!(
                b.base, next,
                "{part:?} replica {id}: the batch at {} should start at {next}",
                b.base
            );
            next = b.last + 1;
        }
        assert_eq!(
            next, hw,
            "{part:?} replica {id}: the log ends at {next}, the high watermark is {hw}"
        );
    }
    let (first_id, reference) = &logs[0];
    for (id, log) in &logs[1..] {
        assert_eq!(
            log.len(),
            reference.len(),
            "{part:?} replicas {first_id} and {id}: batch counts"
        );
        for (a, b) in reference.iter().zip(log) {
            assert_eq!(
                a, b,
                "{part:?} replicas {first_id} and {id} differ at offset {}",
                a.base
            );
        }
    }

    // Every stored data batch once, in each producer's order, with the values it was sent with.
    let mut stored: BTreeMap<(i64, i32), &Read> = BTreeMap::new();
    let mut last_sequence: HashMap<i64, i32> = HashMap::new();
    for b in reference.iter().filter(|b| !b.control) {
        assert!(
            producers.contains(&b.producer),
            "{part:?}: a batch of an unknown producer {} at {}",
            b.producer,
            b.base
        );
        assert!(
            stored.insert((b.producer, b.sequence), b).is_none(),
            "{part:?}: producer {} sequence {} stored twice (the second at {})",
            b.producer,
            b.sequence,
            b.base
        );
        if let Some(&prev) = last_sequence.get(&b.producer) {
            assert!(
                b.sequence > prev,
                "{part:?}: producer {}: sequence {} at {} after sequence {prev}",
                b.producer,
                b.sequence,
                b.base
            );
        }
        last_sequence.insert(b.producer, b.sequence);
        assert_eq!(
            b.values,
            values(b.producer, b.sequence),
            "{part:?}: the values of the batch at {}",
            b.base
        );
    }
    // Every acknowledged batch at the offsets it was acknowledged with.
    let acked: Vec<&Acked> = acked.iter().filter(|a| a.part == part).collect();
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
        "{part:?}: stored data batches against acknowledged ones"
    );
    reference.clone()
}

/// The replicas `kills` (node ids) were SIGKILLed and restarted: each says its log of `part`
/// was opened after a crash.
pub async fn check_opened_unclean(cluster: &Cluster, part: Part, kills: &[u64]) {
    for n in &cluster.nodes {
        if kills.contains(&n.id) {
            let s = status(&n.client_addr, part).await.expect("status");
            assert!(
                !s.opened_clean,
                "{part:?} replica {} was SIGKILLed, yet {s:?}",
                n.id
            );
        }
    }
}

/// A clean stop (SIGTERM, exit status 0) and a restart of every process: each partition's
/// replicas say their log was closed cleanly and hold the same history as `logs` (by
/// partition) and, once it is committed, the blank entries of the leaders they elect.
pub async fn restart_cleanly_keeps(cluster: &mut Cluster, logs: &[(Part, Vec<Read>, i64)]) {
    cluster.stop_cleanly().await;
    for i in 0..NODES {
        cluster.start(i, false);
    }
    for (part, reference, hw) in logs {
        let part = *part;
        let hw_after = caught_up(cluster, part, *hw, Duration::from_secs(30)).await;
        for n in &cluster.nodes {
            let s = status(&n.client_addr, part).await.expect("status");
            assert!(
                s.opened_clean,
                "{part:?} replica {} was stopped cleanly, yet {s:?}",
                n.id
            );
            let log = read_all(&n.client_addr, part, hw_after).await;
            assert!(
                log.len() >= reference.len(),
                "{part:?} replica {}: {} batches",
                n.id,
                log.len()
            );
            assert_eq!(
                &log[..reference.len()],
                &reference[..],
                "{part:?} replica {} after a clean restart",
                n.id
            );
            assert!(
                log[reference.len()..].iter().all(|b| b.control),
                "{part:?} replica {}",
                n.id
            );
        }
    }
}
