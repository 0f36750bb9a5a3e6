//! A 3-process cluster on loopback (`oncelog-raft-node` over TCP) whose leader is SIGKILLed
//! and restarted in a loop while idempotent producers append through whichever replica leads,
//! each retrying the same batch (same sequence) until it is answered, as a Kafka idempotent
//! producer does. At the end, with every replica up and caught up, each replica's committed log
//! is read back and checked against the answers: every acknowledged batch present exactly
//! once, at the offsets it was acknowledged with (a retry answered `Duplicate` included), in
//! its producer's order; offsets dense; all replicas identical batch for batch.
//!
//! Rounds: 5 kills by default; `ONCELOG_RAFT_KILL_ROUNDS=N` for more.

mod node_procs;

use std::process::Command;
use std::time::{Duration, Instant};

use node_procs::{
    caught_up, check_logs, check_opened_unclean, kill_rounds, leader, read_all,
    restart_cleanly_keeps, Cluster, Producer, Producing, BIN,
};

const PRODUCERS: i64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_loop_keeps_every_acknowledged_batch_once() {
    let rounds = kill_rounds(5);
    let started = Instant::now();
    let mut cluster = Cluster::new(None);
    leader(&cluster, None, Duration::from_secs(20)).await;

    let producing = Producing::start(
        (0..PRODUCERS).map(|p| Producer::new(1000 + p, None, cluster.client_addrs())),
    );

    let mut kills = Vec::new();
    for round in 0..rounds {
        // Some progress under this leader first.
        producing
            .progress(&mut cluster, 50, &format!("round {round}"))
            .await;
        let l = leader(&cluster, None, Duration::from_secs(20)).await;
        cluster.sigkill(l);
        kills.push(cluster.nodes[l].id);
        if round % 3 == 2 {
            // Back before the others' election timeout: it may lead again, at a new term.
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            // Down until the other two elect a leader and commit under it.
            let successor = leader(&cluster, None, Duration::from_secs(20)).await;
            assert_ne!(successor, l);
            let down = format!("round {round}, replica {} down", l + 1);
            producing.progress(&mut cluster, 10, &down).await;
        }
        cluster.start(l, false);
    }
    // A last stretch with everyone up, then the producers finish their batch in flight.
    producing
        .progress(&mut cluster, 30, "after the last restart")
        .await;
    let acked = producing.finish().await;
    cluster.check_running();

    let end = acked.iter().map(|a| a.last + 1).max().unwrap_or(0);
    let hw = caught_up(&cluster, None, end, Duration::from_secs(30)).await;

    let mut logs = Vec::new();
    for n in &cluster.nodes {
        logs.push((n.id, read_all(&n.client_addr, None, hw).await));
    }
    let reference = check_logs(None, &logs, hw, &acked, 1000..1000 + PRODUCERS);

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
    check_opened_unclean(&cluster, None, &kills).await;
    restart_cleanly_keeps(&mut cluster, &[(None, reference, hw)]).await;
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
