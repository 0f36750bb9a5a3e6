//! The SIGKILL loop of tests/cluster_kill.rs with many partitions per process
//! (docs/design.md, "Many partitions per process"): three `oncelog-raft-node` processes on
//! loopback, each hosting the same 20 partitions (`--topic events --partitions 20`), leaders
//! spread over the nodes. An idempotent producer per partition (its own producer id) appends
//! to all of them at once, each following its partition's leader (`ClientRequest::To`) and
//! retrying the same batch after `NotLeader` or a lost answer. Each round SIGKILLs a node that
//! leads some partitions (in turn: the one leading most, and a random one of those leading
//! any), restarts it (every third round before the others' election timeout, otherwise once
//! the other two lead and commit in every partition) and waits until every partition has a
//! leader that every node knows again. At the end, per partition: every acknowledged batch
//! present exactly once on every caught-up replica (read from each replica's log) at the
//! offsets it was acknowledged with, a retry of the last batch after the kills answered
//! `Duplicate` with its original offsets, offsets dense, all replicas identical; then a clean
//! stop and restart keeps it all. The same loop runs with the 20 partitions in 3 partition
//! sets (`--set-size 7`, docs/design.md "Partition sets": a raft group each, whose entries
//! carry batches of all of its partitions).
//!
//! Rounds: 4 kills by default (CI); `ONCELOG_RAFT_KILL_ROUNDS=N` for more, 10x by hand:
//! `ONCELOG_RAFT_KILL_ROUNDS=40 cargo test --release -p oncelog-raft --test cluster_kill_partitions`.

mod node_procs;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use node_procs::{
    caught_up, check_logs, check_opened_unclean, kill_rounds, read_all, restart_cleanly_keeps,
    status, Cluster, Producer, Producing, NODES,
};
use oncelog_raft::network::mem::Rng;

const PARTITIONS: i32 = 20;

/// The producer id of partition `p`'s producer.
fn producer_id(p: i32) -> i64 {
    1000 + i64::from(p)
}

/// Each partition's leader (node index), once every partition has one that every running
/// node names and that says it leads, waiting up to `within`.
async fn leaders(cluster: &Cluster, within: Duration) -> BTreeMap<i32, usize> {
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = BTreeMap::new();
        let mut missing = Vec::new();
        for p in 0..PARTITIONS {
            let mut views = Vec::new();
            for (i, n) in cluster.nodes.iter().enumerate() {
                if cluster.running(i) {
                    views.push((i, status(&n.client_addr, Some(p)).await));
                }
            }
            // The leader the first running node names: every running node names it, and
            // it is among them.
            let named = views.first().and_then(|(_, s)| s.as_ref()?.leader);
            let agreed = views
                .iter()
                .all(|(_, s)| s.as_ref().is_some_and(|s| s.leader == named));
            let leader = views
                .iter()
                .find(|(_, s)| s.as_ref().is_some_and(|s| Some(s.id) == named));
            match leader {
                Some(&(i, _)) if agreed => {
                    leaders.insert(p, i);
                }
                _ => missing.push((p, views)),
            }
        }
        if missing.is_empty() {
            return leaders;
        }
        assert!(
            Instant::now() < deadline,
            "partitions without an agreed leader within {within:?}: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loop_of_many_partitions_keeps_every_acknowledged_batch_once() {
    kill_loop(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loop_of_partition_sets_keeps_every_acknowledged_batch_once() {
    kill_loop(7).await;
}

/// The loop, on processes that replicate the partitions in sets of up to `set_size`.
async fn kill_loop(set_size: usize) {
    let rounds = kill_rounds(4);
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random victims drawn with seed {seed}");
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut cluster = Cluster::with_sets(Some(PARTITIONS), set_size);
    // Node 1 formed every group and leads them all at first; the nodes' balancers spread
    // the leaders (partition i to the (i mod 3)-th node).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = leaders(&cluster, Duration::from_secs(30)).await;
        if (0..NODES).all(|i| now.values().any(|&l| l == i)) {
            eprintln!("leaders: {now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "leaders not spread: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let producing = Producing::start(
        (0..PARTITIONS).map(|p| Producer::new(producer_id(p), Some(p), cluster.client_addrs())),
    );

    let mut kills = Vec::new();
    let mut led = Vec::new();
    for round in 0..rounds {
        // Every partition makes progress under its leader first.
        producing
            .progress(&mut cluster, 5, &format!("round {round}"))
            .await;
        let now = leaders(&cluster, Duration::from_secs(30)).await;
        let mut leading = [0usize; NODES];
        for &i in now.values() {
            leading[i] += 1;
        }
        let victim = if round % 2 == 0 {
            (0..NODES).max_by_key(|&i| leading[i]).unwrap()
        } else {
            let some: Vec<usize> = (0..NODES).filter(|&i| leading[i] > 0).collect();
            some[rng.below(some.len() as u64) as usize]
        };
        cluster.sigkill(victim);
        kills.push(cluster.nodes[victim].id);
        led.push(leading[victim]);
        if round % 3 == 2 {
            // Back before the others' election timeout: it may lead again, at a new term.
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            // Down until the other two lead every partition and commit in each.
            let successors = leaders(&cluster, Duration::from_secs(30)).await;
            assert!(successors.values().all(|&i| i != victim));
            let down = format!("round {round}, node {} down", victim + 1);
            producing.progress(&mut cluster, 2, &down).await;
        }
        cluster.start(victim, false);
        leaders(&cluster, Duration::from_secs(30)).await;
    }
    // A last stretch with everyone up, then the producers finish their batch in flight.
    producing
        .progress(&mut cluster, 5, "after the last restart")
        .await;
    let acked = producing.finish().await;
    let killing = started.elapsed();
    cluster.check_running();

    // Each producer's last batch again, through whichever node leads now: a duplicate, with
    // the offsets of the original.
    for p in 0..PARTITIONS {
        let last = acked
            .iter()
            .filter(|a| a.part == Some(p))
            .max_by_key(|a| a.sequence)
            .unwrap_or_else(|| panic!("nothing acknowledged in partition {p}"));
        let retry = Producer::new(producer_id(p), Some(p), cluster.client_addrs())
            .send(last.sequence)
            .await
            .expect("the retry is answered");
        assert!(
            retry.duplicate && (retry.first, retry.last) == (last.first, last.last),
            "partition {p}: a retry of {last:?} answered {retry:?}"
        );
    }

    let mut references = Vec::new();
    for p in 0..PARTITIONS {
        let part = Some(p);
        let end = acked
            .iter()
            .filter(|a| a.part == part)
            .map(|a| a.last + 1)
            .max()
            .unwrap_or(0);
        let hw = caught_up(&cluster, part, end, Duration::from_secs(30)).await;
        let mut logs = Vec::new();
        for n in &cluster.nodes {
            logs.push((n.id, read_all(&n.client_addr, part, hw).await));
        }
        let reference = check_logs(part, &logs, hw, &acked, producer_id(p)..producer_id(p) + 1);
        references.push((part, reference, hw));
    }

    let duplicates = acked.iter().filter(|a| a.duplicate).count();
    let retried = acked.iter().filter(|a| a.attempts > 1).count();
    let controls: usize = references
        .iter()
        .map(|(_, r, _)| r.iter().filter(|b| b.control).count())
        .sum();
    eprintln!(
        "{rounds} kills of nodes {kills:?} leading {led:?} of {PARTITIONS} partitions; {} \
         batches acknowledged, {retried} after a retry, {duplicates} answered as duplicates; \
         {controls} control batches; {:.1} s of kills, {:.1} s of checks",
        acked.len(),
        killing.as_secs_f64(),
        (started.elapsed() - killing).as_secs_f64()
    );

    for p in 0..PARTITIONS {
        check_opened_unclean(&cluster, Some(p), &kills).await;
    }
    restart_cleanly_keeps(&mut cluster, &references).await;
}
