//! A seeded simulation of a replicated partition: 3 and 5 replicas on simulated disks
//! (oncelog's SimFs: a crash keeps only what was synced, plus a seeded choice of the rest) over
//! the in-process network with seeded faults (drops, delays that reorder, partitions, heals),
//! with crashes and restarts, while idempotent producers append and retry. Time is tokio's
//! paused clock, so timeouts and elections run as fast as the work allows.
//!
//! A history checker then holds every replica that caught up to the contract (docs/design.md,
//! "Replication on openraft"): every acknowledged batch is in its log exactly once, at the
//! offsets it was acknowledged with, in its producer's order; offsets are dense; every
//! replica's committed log is the same, batch for batch; and a retry of each producer's last
//! batch is a duplicate with the original offsets on the final leader, whoever led before.
//!
//! Environment:
//! * `ONCELOG_RAFT_SIM_STEPS=<n>`: steps per cluster size (default 3,000: CI runs 6,000 steps
//!   in all).
//! * `ONCELOG_RAFT_SIM_SEED=<n>`: replay one seed only (a failure prints its seed and the
//!   steps per run to replay it with; a replay is close to, not exactly, the same run: tokio's
//!   and openraft's scheduling is not seeded).
//! * `ONCELOG_RAFT_SIM_TRACE=<file>`: keep the last 200,000 events of the run (openraft's
//!   engine decisions and the store's appends, truncations, purges and installs, each with its
//!   node's directory) and write them to the file when a run fails.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncelog::io::SimFs;
use oncelog::{Environment, SystemClock};
use oncelog_raft::network::mem::{Faults, Rng, Router};
use oncelog_raft::{Ack, NodeId, Replica, ReplicaError};
use openraft::BasicNode;

/// The partition's directory on node `id`'s disk (a node's own name, so that traced events
/// say whose they are).
fn dir(id: NodeId) -> std::path::PathBuf {
    Path::new("/sim").join(format!("node-{id}")).join("topic-0")
}
const DEFAULT_STEPS: u64 = 3_000;
const PRODUCERS: usize = 4;

#[path = "sim_common/mod.rs"]
mod sim_common;
use sim_common::{committed, config, Acked, Producer};

struct Cluster {
    seed: u64,
    /// Steps of this run.
    steps: u64,
    ids: Vec<NodeId>,
    disks: HashMap<NodeId, SimFs>,
    up: HashMap<NodeId, Arc<Replica>>,
    router: Router,
    notes: Vec<String>,
}

impl Cluster {
    fn fail(&self, why: String) -> ! {
        trace::dump();
        let tail: Vec<&String> = self.notes.iter().rev().take(30).collect();
        let states: Vec<String> = self
            .up
            .iter()
            .map(|(id, r)| {
                let m = r.raft().metrics().borrow().clone();
                format!(
                    "node {id}: {:?}, {:?} in term {}, vote {}, last log {:?}, applied {:?}, leader {:?}",
                    m.running_state,
                    m.state,
                    m.current_term,
                    m.vote,
                    m.last_log_index,
                    m.last_applied,
                    m.current_leader
                )
            })
            .collect();
        let why = format!("{why}\nraft states: {states:?}");
        panic!(
            "seed {}: {why}\nreplay: ONCELOG_RAFT_SIM_SEED={} ONCELOG_RAFT_SIM_STEPS={} cargo test --release -p oncelog-raft --test sim\nlast steps (newest first): {tail:#?}",
            self.seed, self.seed, self.steps
        );
    }

    async fn start(&mut self, id: NodeId) {
        let fs = self.disks[&id].clone();
        let env = Environment::default()
            .with_fs(fs.as_dyn())
            .with_clock(Arc::new(SystemClock));
        let replica =
            match Replica::open(id, &dir(id), env, config(), self.router.endpoint(id)).await {
                Ok(r) => Arc::new(r),
                Err(e) => self.fail(format!("node {id} does not reopen: {e}")),
            };
        self.router.add(id, replica.raft().clone());
        self.up.insert(id, replica);
    }

    /// A power cut: raft stops, the log is dropped without a close, and the disk keeps what
    /// was synced (and a seeded part of the rest).
    async fn crash(&mut self, id: NodeId, rng: &mut Rng) {
        let Some(replica) = self.up.remove(&id) else {
            return;
        };
        self.router.remove(id);
        let _ = replica.shutdown().await;
        replica.log().abandon_on_drop();
        // openraft's tasks let go of the storage as they end.
        for _ in 0..100 {
            if Arc::strong_count(replica.partition()) == 1 && Arc::strong_count(&replica) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if Arc::strong_count(replica.partition()) != 1 {
            self.fail(format!(
                "node {id}: the partition is still held after shutdown"
            ));
        }
        drop(replica);
        self.disks[&id].crash(rng.next_u64());
    }

    fn leader_hint(&self) -> Option<NodeId> {
        // The leader of the highest term any running node knows of.
        self.up
            .values()
            .filter_map(|r| {
                let m = r.raft().metrics().borrow().clone();
                m.current_leader.map(|l| (m.current_term, l))
            })
            .max()
            .map(|(_, l)| l)
            .filter(|l| self.up.contains_key(l))
    }
}

/// Sends each producer's batch once, concurrently; records the answers.
async fn send_round(
    c: &mut Cluster,
    producers: &mut [Producer],
    rng: &mut Rng,
    acked: &mut Acked,
    who: &[usize],
) {
    let mut set = tokio::task::JoinSet::new();
    for &p in who {
        let target = match c.leader_hint() {
            Some(l) if rng.chance(4, 5) => l,
            _ => {
                let ups: Vec<NodeId> = c.up.keys().copied().collect();
                if ups.is_empty() {
                    return;
                }
                ups[rng.below(ups.len() as u64) as usize]
            }
        };
        let replica = Arc::clone(&c.up[&target]);
        let sent = producers[p].batch(rng);
        set.spawn(async move {
            let answer =
                tokio::time::timeout(Duration::from_secs(3), replica.append(sent.bytes.clone()))
                    .await;
            (p, target, sent, answer)
        });
    }
    while let Some(done) = set.join_next().await {
        let (p, target, sent, answer) = done.expect("send task");
        let pr = &mut producers[p];
        match answer {
            Ok(Ok(ack)) => {
                let (first, last) = ack.offsets();
                c.notes
                    .push(format!("p{} s{} -> {target}: {ack:?}", pr.id, sent.seq));
                if last - first + 1 != i64::from(sent.records) {
                    c.fail(format!(
                        "p{} s{}: {ack:?} for {} records",
                        pr.id, sent.seq, sent.records
                    ));
                }
                if let Some(&(prev_first, _)) = acked
                    .range((pr.id, i32::MIN)..(pr.id, sent.seq))
                    .next_back()
                    .map(|(_, v)| v)
                {
                    if prev_first >= first {
                        c.fail(format!(
                            "p{} s{} acked at {first}, not after its earlier batch at {prev_first}",
                            pr.id, sent.seq
                        ));
                    }
                }
                acked.insert((pr.id, sent.seq), (first, last));
                pr.next_seq += sent.records;
                pr.pending = None;
                pr.last_acked = Some(sent);
            }
            Ok(Err(ReplicaError::Refused { kind, message })) => c.fail(format!(
                "p{} s{} refused ({kind}): {message}",
                pr.id, sent.seq
            )),
            Ok(Err(e)) => c
                .notes
                .push(format!("p{} s{} -> {target}: {e}", pr.id, sent.seq)),
            Err(_) => c
                .notes
                .push(format!("p{} s{} -> {target}: timed out", pr.id, sent.seq)),
        }
    }
}

fn check_history(c: &Cluster, acked: &Acked) {
    let mut reference: Option<(NodeId, BTreeMap<i64, Bytes>)> = None;
    for (&id, r) in &c.up {
        let batches = committed(r);
        let start = r.log().log_start_offset();
        // Dense: each batch starts where the one before ended.
        let mut expect = start;
        let mut seen: HashMap<(i64, i32), i64> = HashMap::new();
        for (first, last, bytes) in &batches {
            if *first != expect {
                c.fail(format!(
                    "node {id}: batch at {first}, expected {expect}: offsets not dense"
                ));
            }
            expect = last + 1;
            let b = oncelog::format::RecordBatch::parse(bytes).expect("parse");
            if b.producer_id() >= 0 && !b.is_control() {
                let key = (b.producer_id(), b.base_sequence());
                if let Some(other) = seen.insert(key, *first) {
                    c.fail(format!(
                        "node {id}: p{} s{} stored twice, at {other} and {first}",
                        key.0, key.1
                    ));
                }
            }
        }
        // Every acknowledged batch the log still retains is there, once, where it was acked.
        for (&(pid, seq), &(first, last)) in acked {
            if first < start {
                continue;
            }
            match seen.get(&(pid, seq)) {
                Some(&at) if at == first => {}
                Some(&at) => c.fail(format!("node {id}: p{pid} s{seq} acked at {first}..={last}, stored at {at}")),
                None => c.fail(format!("node {id}: acknowledged p{pid} s{seq} at {first}..={last} is missing (log {start}..)")),
            }
        }
        // The same log on every replica, where they overlap.
        let map: BTreeMap<i64, Bytes> = batches.into_iter().map(|(f, _, b)| (f, b)).collect();
        match &reference {
            None => reference = Some((id, map)),
            Some((rid, rmap)) => {
                for (offset, bytes) in &map {
                    if let Some(other) = rmap.get(offset) {
                        if other != bytes {
                            c.fail(format!("nodes {rid} and {id} differ at offset {offset}"));
                        }
                    }
                }
            }
        }
    }
}

async fn wait_for_leader(c: &mut Cluster) -> NodeId {
    for _ in 0..600 {
        if let Some(l) = c.leader_hint() {
            if c.up[&l].raft().ensure_linearizable().await.is_ok() {
                return l;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.fail("no leader after healing".into())
}

/// One seeded run of `steps` steps on `n` replicas. Returns the steps run.
async fn run(seed: u64, n: u64, steps: u64) -> u64 {
    trace::clear();
    let mut rng = Rng::new(seed);
    let ids: Vec<NodeId> = (1..=n).collect();
    let mut c = Cluster {
        seed,
        steps,
        ids: ids.clone(),
        disks: ids.iter().map(|&i| (i, SimFs::new())).collect(),
        up: HashMap::new(),
        router: Router::new(seed ^ 0x5EED),
        notes: Vec::new(),
    };
    for &id in &ids {
        // Not in the same instant of the paused clock (tests/deposed_leader.rs says why).
        tokio::time::sleep(Duration::from_millis(7)).await;
        c.start(id).await;
    }
    let members: BTreeMap<NodeId, BasicNode> =
        ids.iter().map(|&i| (i, BasicNode::default())).collect();
    if let Err(e) = c.up[&1].initialize(members).await {
        c.fail(format!("initialize: {e}"));
    }
    let mut producers: Vec<Producer> = (0..PRODUCERS)
        .map(|p| Producer {
            id: 1_000 + p as i64,
            next_seq: 0,
            pending: None,
            last_acked: None,
        })
        .collect();
    let mut acked = Acked::new();
    let majority = (n / 2 + 1) as usize;
    for step in 0..steps {
        let roll = rng.below(100);
        match roll {
            0..=49 => {
                let who: Vec<usize> = (0..PRODUCERS).filter(|_| rng.chance(1, 2)).collect();
                send_round(&mut c, &mut producers, &mut rng, &mut acked, &who).await;
            }
            50..=59 => {
                let faults = Faults {
                    drop_per_mille: [0, 0, 20, 100, 300][rng.below(5) as usize],
                    max_delay: Duration::from_millis([0, 5, 20, 60][rng.below(4) as usize]),
                    ..Faults::default()
                };
                c.notes.push(format!("step {step}: faults {faults:?}"));
                c.router.set_faults(faults);
            }
            60..=64 => {
                let k = 1 + rng.below(n - 1) as usize;
                let mut side = c.ids.clone();
                while side.len() > k {
                    side.remove(rng.below(side.len() as u64) as usize);
                }
                c.notes.push(format!("step {step}: partition {side:?}"));
                c.router.partition(&side, &c.ids);
            }
            65..=69 => {
                c.notes.push(format!("step {step}: heal"));
                c.router.heal();
            }
            70..=74 => {
                // Crash a replica (the leader half the time), keeping a majority of disks
                // that are not down at once.
                if c.up.len() > majority {
                    let target = match c.leader_hint() {
                        Some(l) if rng.chance(1, 2) => l,
                        _ => {
                            let ups: Vec<NodeId> = c.up.keys().copied().collect();
                            ups[rng.below(ups.len() as u64) as usize]
                        }
                    };
                    c.notes.push(format!("step {step}: crash {target}"));
                    c.crash(target, &mut rng).await;
                }
            }
            75..=79 => {
                let down: Vec<NodeId> = c
                    .ids
                    .iter()
                    .copied()
                    .filter(|i| !c.up.contains_key(i))
                    .collect();
                if !down.is_empty() {
                    let id = down[rng.below(down.len() as u64) as usize];
                    c.notes.push(format!("step {step}: restart {id}"));
                    c.start(id).await;
                }
            }
            80..=84 => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_millis() as i64;
                for r in c.up.values() {
                    if let Err(e) = r.enforce_retention(now) {
                        c.notes
                            .push(format!("step {step}: retention on {}: {e}", r.id()));
                    }
                }
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(10 + rng.below(400))).await;
            }
        }
    }
    // Heal everything, bring every replica back, and let the producers finish.
    c.router.heal();
    let down: Vec<NodeId> = c
        .ids
        .iter()
        .copied()
        .filter(|i| !c.up.contains_key(i))
        .collect();
    for id in down {
        c.start(id).await;
    }
    let all: Vec<usize> = (0..PRODUCERS).collect();
    for _ in 0..200 {
        let pending: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&p| producers[p].pending.is_some())
            .collect();
        if pending.is_empty() {
            break;
        }
        wait_for_leader(&mut c).await;
        send_round(&mut c, &mut producers, &mut rng, &mut acked, &pending).await;
    }
    if producers.iter().any(|p| p.pending.is_some()) {
        c.fail("producers still have unanswered batches after healing".into());
    }
    // A retry of each producer's last batch, on the final leader: a duplicate, original offsets.
    // (Leadership may still move: a refusal to a non-leader is asked again of the new one.)
    for p in &producers {
        let Some(last) = &p.last_acked else { continue };
        let want = acked[&(p.id, last.seq)];
        let mut answer = None;
        for _ in 0..20 {
            let leader = wait_for_leader(&mut c).await;
            match c.up[&leader].append(last.bytes.clone()).await {
                Err(ReplicaError::NotLeader { .. } | ReplicaError::Raft(_)) => continue,
                other => {
                    answer = Some((leader, other));
                    break;
                }
            }
        }
        match answer {
            Some((
                _,
                Ok(Ack::Duplicate {
                    first_offset,
                    last_offset,
                }),
            )) if (first_offset, last_offset) == want => {}
            other => c.fail(format!(
                "retry of p{} s{}: {other:?}, want a duplicate at {want:?}",
                p.id, last.seq
            )),
        }
    }
    let leader = wait_for_leader(&mut c).await;
    // Every replica catches up to the leader's last entry, then the checker runs.
    let last_index = c.up[&leader]
        .raft()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0);
    for r in c.up.values() {
        if let Err(e) = r.wait_applied(last_index, Duration::from_secs(60)).await {
            c.fail(format!(
                "node {} does not catch up to {last_index}: {e}",
                r.id()
            ));
        }
    }
    check_history(&c, &acked);
    let (sent, dropped) = c.router.counts();
    let crashes = c.notes.iter().filter(|n| n.contains(": crash ")).count();
    let starts: Vec<(NodeId, i64, i64)> =
        c.up.values()
            .map(|r| (r.id(), r.log().log_start_offset(), r.log().log_end_offset()))
            .collect();
    eprintln!(
        "seed {seed}: {} batches acknowledged, {last_index} entries, {sent} messages ({dropped} lost), \
         {crashes} crashes, {} images installed, (node, log start, log end) {starts:?}",
        acked.len(),
        c.up.values().map(|r| r.partition().images_installed()).sum::<u64>(),
    );
    for r in c.up.values() {
        let _ = r.shutdown().await;
    }
    steps
}

fn sweep(n: u64, first_seed: u64) {
    trace::install();
    let steps: u64 = std::env::var("ONCELOG_RAFT_SIM_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_STEPS);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime")
    };
    if let Some(seed) = std::env::var("ONCELOG_RAFT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        runtime().block_on(run(seed, n, steps));
        return;
    }
    // Runs of 150 steps each, from successive seeds.
    let per_run = 150.min(steps);
    let mut done = 0;
    let mut seed = first_seed;
    while done < steps {
        done += runtime().block_on(run(seed, n, per_run));
        seed += 1;
    }
    eprintln!("{n} replicas: {done} steps over seeds {first_seed}..{seed}");
}

#[test]
fn three_replicas_keep_every_acknowledged_batch_once_under_faults() {
    sweep(3, 3_000);
}

#[test]
fn five_replicas_keep_every_acknowledged_batch_once_under_faults() {
    sweep(5, 5_000);
}

/// `ONCELOG_RAFT_SIM_TRACE`: a ring of the newest trace events, written out when a run fails.
mod trace {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    const KEEP: usize = 200_000;
    static RING: Mutex<VecDeque<Vec<u8>>> = Mutex::new(VecDeque::new());

    struct Ring;

    impl std::io::Write for Ring {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut ring = RING.lock().unwrap_or_else(|e| e.into_inner());
            if ring.len() == KEEP {
                ring.pop_front();
            }
            ring.push_back(b.to_vec());
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn path() -> Option<std::ffi::OsString> {
        std::env::var_os("ONCELOG_RAFT_SIM_TRACE")
    }

    pub fn install() {
        use tracing_subscriber::prelude::*;
        if path().is_none() {
            return;
        }
        let targets = tracing_subscriber::filter::Targets::new()
            .with_target("openraft::engine::engine_impl", tracing::Level::DEBUG)
            .with_target("oncelog_raft", tracing::Level::DEBUG);
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(|| Ring)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_filter(targets);
        let _ = tracing_subscriber::registry().with(layer).try_init();
    }

    pub fn clear() {
        RING.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub fn dump() {
        let Some(path) = path() else { return };
        let ring = RING.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = ring.iter().flatten().copied().collect();
        match std::fs::write(&path, bytes) {
            Ok(()) => eprintln!("trace of the run: {}", path.to_string_lossy()),
            Err(e) => eprintln!("writing the trace to {}: {e}", path.to_string_lossy()),
        }
    }
}
