//! The seeded simulation with several raft groups per node (docs/design.md, "Many partitions
//! per process"): 3 nodes, each a simulated disk holding one partition directory per group,
//! every group a raft group over its own in-process network whose faults are the node's
//! (drops, delays, a network partition that isolates one node from the other two in every
//! group at once), crashes and
//! restarts of whole nodes (every group of the node loses what its disk had not synced), and
//! leaders moving between nodes (elections asked for at random, as `Host::balance` does).
//! Two of the groups are partition sets (docs/design.md, "Partition sets": one raft group
//! over two partitions, an entry carrying batches of both; a crash can fall between the files
//! of one persist). Idempotent producers append to every partition and retry. The checker of
//! tests/sim.rs holds each partition: every acknowledged batch once, at its offsets, offsets
//! dense, only its own producers' batches, the same log on every replica, and a retry of each
//! producer's last batch a duplicate with its offsets.
//!
//! Environment: `ONCELOG_RAFT_SIM_STEPS=<n>` (default 1,500), `ONCELOG_RAFT_SIM_SEED=<n>`.

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

const DEFAULT_STEPS: u64 = 1_500;
const GROUPS: usize = 4;
/// How many partitions each group replicates: the last two are sets.
const MEMBERS: [usize; GROUPS] = [1, 1, 2, 2];
const PRODUCERS: usize = 2;
const NODES: u64 = 3;

/// The directory of partition `m` of group `g` on node `id`'s disk.
fn dir(id: NodeId, g: usize, m: usize) -> std::path::PathBuf {
    let name = if m == 0 {
        format!("topic-{g}")
    } else {
        format!("topic-{g}-{m}")
    };
    Path::new("/sim").join(format!("node-{id}")).join(name)
}

/// The partition of its group producer `p` appends to.
fn member_of(g: usize, p: usize) -> usize {
    p % MEMBERS[g]
}

#[path = "sim_common/mod.rs"]
mod sim_common;
use sim_common::{committed_in, config, Acked, Producer};

struct Cluster {
    seed: u64,
    steps: u64,
    ids: Vec<NodeId>,
    disks: HashMap<NodeId, SimFs>,
    /// Each running node's replicas, by group.
    up: HashMap<NodeId, Vec<Arc<Replica>>>,
    /// One network per group.
    routers: Vec<Router>,
    notes: Vec<String>,
}

impl Cluster {
    fn fail(&self, why: String) -> ! {
        let tail: Vec<&String> = self.notes.iter().rev().take(30).collect();
        panic!(
            "seed {}: {why}\nreplay: ONCELOG_RAFT_SIM_SEED={} ONCELOG_RAFT_SIM_STEPS={} cargo test --release -p oncelog-raft --test sim_groups\nlast steps (newest first): {tail:#?}",
            self.seed, self.seed, self.steps
        );
    }

    async fn start(&mut self, id: NodeId) {
        let env = Environment::default()
            .with_fs(self.disks[&id].as_dyn())
            .with_clock(Arc::new(SystemClock));
        let mut replicas = Vec::new();
        for (g, &members) in MEMBERS.iter().enumerate() {
            let dirs: Vec<std::path::PathBuf> = (0..members).map(|m| dir(id, g, m)).collect();
            let dirs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
            let r = Replica::open_dirs(
                id,
                &dirs,
                env.clone(),
                config(),
                self.routers[g].endpoint(id),
            )
            .await;
            let r = match r {
                Ok(r) => Arc::new(r),
                Err(e) => self.fail(format!("node {id} group {g} does not reopen: {e}")),
            };
            self.routers[g].add(id, r.raft().clone());
            replicas.push(r);
        }
        self.up.insert(id, replicas);
    }

    /// A power cut of the node: every group's raft stops, every log is dropped unclosed, and
    /// the disk keeps what was synced (and a seeded part of the rest).
    async fn crash(&mut self, id: NodeId, rng: &mut Rng) {
        let Some(replicas) = self.up.remove(&id) else {
            return;
        };
        for (g, r) in replicas.into_iter().enumerate() {
            self.routers[g].remove(id);
            let _ = r.shutdown().await;
            for m in 0..r.members() {
                r.log_of(m).expect("a member").abandon_on_drop();
            }
            for _ in 0..100 {
                if Arc::strong_count(r.partition()) == 1 && Arc::strong_count(&r) == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if Arc::strong_count(r.partition()) != 1 {
                self.fail(format!("node {id} group {g}: still held after shutdown"));
            }
        }
        self.disks[&id].crash(rng.next_u64());
    }

    fn leader_hint(&self, g: usize) -> Option<NodeId> {
        self.up
            .values()
            .filter_map(|rs| {
                let m = rs[g].raft().metrics().borrow().clone();
                m.current_leader.map(|l| (m.current_term, l))
            })
            .max()
            .map(|(_, l)| l)
            .filter(|l| self.up.contains_key(l))
    }

    fn set_faults(&self, f: &Faults) {
        for r in &self.routers {
            r.set_faults(f.clone());
        }
    }
}

/// Sends the batch of each producer of `who` (group, producer) once, concurrently.
async fn send_round(
    c: &mut Cluster,
    producers: &mut [Vec<Producer>],
    rng: &mut Rng,
    acked: &mut [Acked],
    who: &[(usize, usize)],
) {
    let mut set = tokio::task::JoinSet::new();
    for &(g, p) in who {
        let target = match c.leader_hint(g) {
            Some(l) if rng.chance(4, 5) => l,
            _ => {
                let ups: Vec<NodeId> = c.up.keys().copied().collect();
                if ups.is_empty() {
                    return;
                }
                ups[rng.below(ups.len() as u64) as usize]
            }
        };
        let replica = Arc::clone(&c.up[&target][g]);
        let sent = producers[g][p].batch(rng);
        let member = member_of(g, p);
        set.spawn(async move {
            let answer = tokio::time::timeout(
                Duration::from_secs(3),
                replica.append_to(member, sent.bytes.clone()),
            )
            .await;
            (g, p, target, sent, answer)
        });
    }
    while let Some(done) = set.join_next().await {
        let (g, p, target, sent, answer) = done.expect("send task");
        let pr = &mut producers[g][p];
        match answer {
            Ok(Ok(ack)) => {
                let (first, last) = ack.offsets();
                c.notes.push(format!(
                    "g{g} p{} s{} -> {target}: {ack:?}",
                    pr.id, sent.seq
                ));
                if last - first + 1 != i64::from(sent.records) {
                    c.fail(format!(
                        "g{g} p{} s{}: {ack:?} for {} records",
                        pr.id, sent.seq, sent.records
                    ));
                }
                acked[g].insert((pr.id, sent.seq), (first, last));
                pr.next_seq += sent.records;
                pr.pending = None;
                pr.last_acked = Some(sent);
            }
            Ok(Err(ReplicaError::Refused { kind, message })) => c.fail(format!(
                "g{g} p{} s{} refused ({kind}): {message}",
                pr.id, sent.seq
            )),
            Ok(Err(e)) => c
                .notes
                .push(format!("g{g} p{} s{} -> {target}: {e}", pr.id, sent.seq)),
            Err(_) => c.notes.push(format!(
                "g{g} p{} s{} -> {target}: timed out",
                pr.id, sent.seq
            )),
        }
    }
}

/// Checks every partition of group `g`.
fn check_group(c: &Cluster, g: usize, acked: &Acked, producers: &[Producer]) {
    for m in 0..MEMBERS[g] {
        let own: Vec<i64> = (0..PRODUCERS)
            .filter(|&p| member_of(g, p) == m)
            .map(|p| producers[p].id)
            .collect();
        let acked: Acked = acked
            .iter()
            .filter(|((pid, _), _)| own.contains(pid))
            .map(|(k, v)| (*k, *v))
            .collect();
        check_partition(c, g, m, &acked, &own);
    }
}

/// Checks partition `m` of group `g` on every running node, whose producers are `own`.
fn check_partition(c: &Cluster, g: usize, m: usize, acked: &Acked, own: &[i64]) {
    let mut reference: Option<(NodeId, BTreeMap<i64, Bytes>)> = None;
    for (&id, rs) in &c.up {
        let r = &rs[g];
        let batches = committed_in(r, m);
        let start = r.log_of(m).expect("a member").log_start_offset();
        let mut expect = start;
        let mut seen: HashMap<(i64, i32), i64> = HashMap::new();
        for (first, last, bytes) in &batches {
            if *first != expect {
                c.fail(format!(
                    "node {id} group {g} partition {m}: batch at {first}, expected {expect}: \
                     not dense"
                ));
            }
            expect = last + 1;
            let b = oncelog::format::RecordBatch::parse(bytes).expect("parse");
            if b.producer_id() >= 0 && !b.is_control() {
                if !own.contains(&b.producer_id()) {
                    c.fail(format!(
                        "node {id} group {g} partition {m}: a batch of producer {} at {first}, \
                         which appends to another partition",
                        b.producer_id()
                    ));
                }
                let key = (b.producer_id(), b.base_sequence());
                if let Some(other) = seen.insert(key, *first) {
                    c.fail(format!(
                        "node {id} group {g} partition {m}: p{} s{} stored twice, at {other} \
                         and {first}",
                        key.0, key.1
                    ));
                }
            }
        }
        for (&(pid, seq), &(first, last)) in acked {
            if first < start {
                continue;
            }
            match seen.get(&(pid, seq)) {
                Some(&at) if at == first => {}
                other => c.fail(format!(
                    "node {id} group {g} partition {m}: p{pid} s{seq} acked at {first}..={last}, \
                     stored at {other:?}"
                )),
            }
        }
        let map: BTreeMap<i64, Bytes> = batches.into_iter().map(|(f, _, b)| (f, b)).collect();
        match &reference {
            None => reference = Some((id, map)),
            Some((rid, rmap)) => {
                for (offset, bytes) in &map {
                    if rmap.get(offset).is_some_and(|other| other != bytes) {
                        c.fail(format!(
                            "group {g} partition {m}: nodes {rid} and {id} differ at offset \
                             {offset}"
                        ));
                    }
                }
            }
        }
    }
}

async fn wait_for_leader(c: &mut Cluster, g: usize) -> NodeId {
    for _ in 0..600 {
        if let Some(l) = c.leader_hint(g) {
            if c.up[&l][g].raft().ensure_linearizable().await.is_ok() {
                return l;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.fail(format!("group {g}: no leader after healing"))
}

async fn run(seed: u64, steps: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let ids: Vec<NodeId> = (1..=NODES).collect();
    let mut c = Cluster {
        seed,
        steps,
        ids: ids.clone(),
        disks: ids.iter().map(|&i| (i, SimFs::new())).collect(),
        up: HashMap::new(),
        routers: (0..GROUPS as u64)
            .map(|g| Router::new(seed ^ 0x5EED ^ (g << 32)))
            .collect(),
        notes: Vec::new(),
    };
    for &id in &ids {
        tokio::time::sleep(Duration::from_millis(7)).await;
        c.start(id).await;
    }
    let members: BTreeMap<NodeId, BasicNode> =
        ids.iter().map(|&i| (i, BasicNode::default())).collect();
    for g in 0..GROUPS {
        if let Err(e) = c.up[&1][g].initialize(members.clone()).await {
            c.fail(format!("initialize group {g}: {e}"));
        }
    }
    let mut producers: Vec<Vec<Producer>> = (0..GROUPS)
        .map(|g| {
            (0..PRODUCERS)
                .map(|p| Producer {
                    id: 1_000 + (g * PRODUCERS + p) as i64,
                    next_seq: 0,
                    pending: None,
                    last_acked: None,
                })
                .collect()
        })
        .collect();
    let mut acked: Vec<Acked> = vec![Acked::new(); GROUPS];
    let majority = (NODES / 2 + 1) as usize;
    for step in 0..steps {
        match rng.below(100) {
            0..=49 => {
                let mut who = Vec::new();
                for g in 0..GROUPS {
                    for p in 0..PRODUCERS {
                        if rng.chance(1, 2) {
                            who.push((g, p));
                        }
                    }
                }
                send_round(&mut c, &mut producers, &mut rng, &mut acked, &who).await;
            }
            50..=57 => {
                let faults = Faults {
                    drop_per_mille: [0, 0, 20, 100, 300][rng.below(5) as usize],
                    max_delay: Duration::from_millis([0, 5, 20, 60][rng.below(4) as usize]),
                    ..Faults::default()
                };
                c.notes.push(format!("step {step}: faults {faults:?}"));
                c.set_faults(&faults);
            }
            58..=61 => {
                let side = vec![c.ids[rng.below(NODES) as usize]];
                c.notes.push(format!("step {step}: partition {side:?}"));
                for r in &c.routers {
                    r.partition(&side, &c.ids);
                }
            }
            62..=66 => {
                c.notes.push(format!("step {step}: heal"));
                for r in &c.routers {
                    r.heal();
                }
            }
            67..=71 => {
                if c.up.len() > majority {
                    let ups: Vec<NodeId> = c.up.keys().copied().collect();
                    let target = ups[rng.below(ups.len() as u64) as usize];
                    c.notes.push(format!("step {step}: crash node {target}"));
                    c.crash(target, &mut rng).await;
                }
            }
            72..=76 => {
                let down: Vec<NodeId> = c
                    .ids
                    .iter()
                    .copied()
                    .filter(|i| !c.up.contains_key(i))
                    .collect();
                if !down.is_empty() {
                    let id = down[rng.below(down.len() as u64) as usize];
                    c.notes.push(format!("step {step}: restart node {id}"));
                    c.start(id).await;
                }
            }
            77..=84 => {
                // A leader moves: a node asks for an election in a group, as Host::balance.
                let ups: Vec<NodeId> = c.up.keys().copied().collect();
                if !ups.is_empty() {
                    let id = ups[rng.below(ups.len() as u64) as usize];
                    let g = rng.below(GROUPS as u64) as usize;
                    c.notes
                        .push(format!("step {step}: node {id} asks to lead group {g}"));
                    let _ = c.up[&id][g].raft().trigger().elect().await;
                }
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(10 + rng.below(400))).await;
            }
        }
    }
    for r in &c.routers {
        r.heal();
    }
    let down: Vec<NodeId> = c
        .ids
        .iter()
        .copied()
        .filter(|i| !c.up.contains_key(i))
        .collect();
    for id in down {
        c.start(id).await;
    }
    for _ in 0..200 {
        let pending: Vec<(usize, usize)> = (0..GROUPS)
            .flat_map(|g| (0..PRODUCERS).map(move |p| (g, p)))
            .filter(|&(g, p)| producers[g][p].pending.is_some())
            .collect();
        if pending.is_empty() {
            break;
        }
        for g in 0..GROUPS {
            wait_for_leader(&mut c, g).await;
        }
        send_round(&mut c, &mut producers, &mut rng, &mut acked, &pending).await;
    }
    if producers.iter().flatten().any(|p| p.pending.is_some()) {
        c.fail("producers still have unanswered batches after healing".into());
    }
    for (g, group) in producers.iter().enumerate() {
        for (p, pr) in group.iter().enumerate() {
            let Some(last) = pr.last_acked.clone() else {
                continue;
            };
            let pid = pr.id;
            let want = acked[g][&(pid, last.seq)];
            let mut answer = None;
            for _ in 0..20 {
                let leader = wait_for_leader(&mut c, g).await;
                match c.up[&leader][g]
                    .append_to(member_of(g, p), last.bytes.clone())
                    .await
                {
                    Err(ReplicaError::NotLeader { .. } | ReplicaError::Raft(_)) => continue,
                    other => {
                        answer = Some(other);
                        break;
                    }
                }
            }
            match answer {
                Some(Ok(Ack::Duplicate {
                    first_offset,
                    last_offset,
                })) if (first_offset, last_offset) == want => {}
                other => c.fail(format!(
                    "group {g}: retry of p{pid} s{}: {other:?}, want a duplicate at {want:?}",
                    last.seq
                )),
            }
        }
    }
    let mut entries = 0;
    for g in 0..GROUPS {
        let leader = wait_for_leader(&mut c, g).await;
        let last_index = c.up[&leader][g]
            .raft()
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or(0);
        entries += last_index;
        for rs in c.up.values() {
            if let Err(e) = rs[g]
                .wait_applied(last_index, Duration::from_secs(60))
                .await
            {
                c.fail(format!(
                    "node {} group {g} does not catch up to {last_index}: {e}",
                    rs[g].id()
                ));
            }
        }
        check_group(&c, g, &acked[g], &producers[g]);
    }
    let crashes = c
        .notes
        .iter()
        .filter(|n| n.contains(": crash node"))
        .count();
    let moves = c
        .notes
        .iter()
        .filter(|n| n.contains("asks to lead"))
        .count();
    eprintln!(
        "seed {seed}: {GROUPS} groups ({MEMBERS:?} partitions), {} batches acknowledged, {entries} entries, {crashes} node crashes, {moves} leader moves asked",
        acked.iter().map(|a| a.len()).sum::<usize>()
    );
    for rs in c.up.values() {
        for r in rs {
            let _ = r.shutdown().await;
        }
    }
    steps
}

#[test]
fn several_groups_per_node_keep_every_acknowledged_batch_once_under_faults() {
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
        runtime().block_on(run(seed, steps));
        return;
    }
    let per_run = 150.min(steps);
    let (mut done, first_seed) = (0, 7_000);
    let mut seed = first_seed;
    while done < steps {
        done += runtime().block_on(run(seed, per_run));
        seed += 1;
    }
    eprintln!("{GROUPS} groups on {NODES} nodes: {done} steps over seeds {first_seed}..{seed}");
}
