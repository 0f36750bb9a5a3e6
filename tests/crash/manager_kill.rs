//! Real crashes of a log manager: a child process opens a log dir of many partitions with every
//! background job running every few milliseconds, appends idempotent batches round-robin across
//! the partitions, and is killed with SIGKILL at a random moment; the parent reopens the log
//! dir and checks every partition: it opens, its offsets are dense, every acknowledged (durable)
//! batch is there once at its offsets, a retry of one still in its producer's window is a
//! duplicate, and what else the log holds is what was sent, in order.
//!
//! Half the partitions are flushed after each append before it is answered (the child prints
//! `ACK`); the other half are left to the manager's flush job, by message count (the child
//! prints `SENT`: nothing durable is promised, but nothing wrong may appear).
//! `ONCELOG_MANAGER_KILL_ROUNDS` sets the rounds (default 12).

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use oncelog::format::BatchIter;
use oncelog::{AppendOutcome, LogConfig, LogManager, ManagerConfig, PartitionConfig};

const PARTITIONS: i32 = 16;
const RECORDS: i32 = 2;
const CHILD_DIR: &str = "ONCELOG_MANAGER_KILL_DIR";

fn config(jobs: bool) -> ManagerConfig {
    let every = jobs.then_some(Duration::from_millis(3));
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(8 << 10)
                .segment_index_bytes(1024)
                .snapshot_interval_bytes(4 << 10)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_flush_messages(Some(6))
        .with_jobs(common::every_job(every))
        .with_replay_budget_bytes(2 << 10)
        .with_recovery_threads(2)
}

/// Partitions below half make every append durable; the others leave it to the flush job.
fn durable(partition: i32) -> bool {
    partition < PARTITIONS / 2
}

/// The batch producer `partition + 1` sends at `seq` into its partition (the same bytes every
/// time, so a retry is exact; in 2096, so the child's retention job deletes nothing).
fn batch(partition: i32, seq: i32) -> Vec<u8> {
    common::producer_batch_in_2096(partition, seq, RECORDS)
}

fn run_child(dir: &str) {
    let m = LogManager::open(&[Path::new(dir)], config(true)).expect("child opens");
    let mut logs = Vec::new();
    for p in 0..PARTITIONS {
        let log = match m.get("kill", p) {
            Ok(log) => log,
            Err(_) => m
                .create("kill", p, PartitionConfig::default())
                .expect("create"),
        };
        logs.push(log);
    }
    let mut next: Vec<i32> = (0..PARTITIONS)
        .map(|p| {
            logs[p as usize]
                .producer(p as i64 + 1)
                .map_or(0, |e| e.last_seq() + 1)
        })
        .collect();
    for i in 0usize.. {
        let p = (i % PARTITIONS as usize) as i32;
        let log = &logs[p as usize];
        let seq = next[p as usize];
        match log.append(&batch(p, seq)).expect("child append") {
            AppendOutcome::Appended(info) => {
                if durable(p) {
                    log.flush().expect("child flush");
                    println!("ACK {p} {seq} {} {}", info.first_offset, info.last_offset);
                } else {
                    println!("SENT {p} {seq} {} {}", info.first_offset, info.last_offset);
                }
            }
            AppendOutcome::Duplicate(d) => panic!("fresh sequence answered as duplicate: {d:?}"),
            other => panic!("unexpected outcome: {other:?}"),
        }
        next[p as usize] = seq + RECORDS;
    }
}

/// Entry point of the child; without the variable, a short in-process smoke run.
#[test]
fn manager_child_process() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        run_child(&dir);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    acked: bool,
    partition: i32,
    seq: i32,
    first: i64,
    last: i64,
}

fn parse(line: &str) -> Option<Line> {
    let (at, acked) = match (line.find("ACK "), line.find("SENT ")) {
        (Some(a), _) => (a + 4, true),
        (None, Some(s)) => (s + 5, false),
        _ => return None,
    };
    let f: Vec<i64> = line[at..]
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 4).then(|| Line {
        acked,
        partition: f[0] as i32,
        seq: f[1] as i32,
        first: f[2],
        last: f[3],
    })
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn check(dir: &Path, lines: &mut Vec<Line>, round: usize) {
    let m = LogManager::open(&[dir], config(false))
        .unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
    if let Some((tp, f)) = m.open_report().failures().next() {
        panic!("round {round}: {tp} did not open: {f}");
    }
    let mut kept = Vec::new();
    for p in 0..PARTITIONS {
        let Ok(log) = m.get("kill", p) else {
            // Created by a child killed before it returned: never acknowledged.
            assert!(
                lines.iter().all(|l| l.partition != p),
                "round {round}: kill-{p} lost"
            );
            continue;
        };
        // What the log holds: batches in order, dense, each as it was sent.
        let mut present: BTreeMap<i64, (i32, i64)> = BTreeMap::new();
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let bytes = log.read(next, 1 << 20).unwrap();
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                assert!(
                    b.is_crc_valid(),
                    "round {round}: kill-{p} CRC at {}",
                    b.base_offset()
                );
                assert_eq!(
                    b.base_offset(),
                    next,
                    "round {round}: kill-{p} offsets dense"
                );
                assert_eq!(b.producer_id(), p as i64 + 1, "round {round}: kill-{p}");
                present.insert(b.base_offset(), (b.base_sequence(), b.last_offset()));
                next = b.last_offset() + 1;
            }
        }
        let end = log.log_end_offset();
        for l in lines.iter().filter(|l| l.partition == p) {
            let at = present.get(&l.first);
            if l.acked {
                assert_eq!(
                    at,
                    Some(&(l.seq, l.last)),
                    "round {round}: acknowledged {l:?} missing"
                );
            } else if l.first < end {
                assert_eq!(
                    at,
                    Some(&(l.seq, l.last)),
                    "round {round}: sent {l:?} differs"
                );
            }
        }
        // A retry of each acknowledged batch still in the window is a duplicate.
        let window: Vec<i64> = present.keys().rev().take(5).copied().collect();
        for l in lines
            .iter()
            .filter(|l| l.partition == p && l.acked && window.contains(&l.first))
        {
            match log.append(&batch(p, l.seq)).unwrap() {
                AppendOutcome::Duplicate(d) => {
                    assert_eq!(
                        (d.first_offset, d.last_offset),
                        (l.first, l.last),
                        "round {round}"
                    )
                }
                other => panic!("round {round}: retry of {l:?}: {other:?}"),
            }
        }
        // What the crash lost was never acknowledged; the next child goes on from here.
        kept.extend(
            lines
                .iter()
                .filter(|l| l.partition == p && l.first < end)
                .copied(),
        );
    }
    *lines = kept;
    m.close().unwrap();
}

#[test]
fn sigkill_with_many_partitions_and_jobs_running_loses_no_acknowledged_batch() {
    let rounds: usize = std::env::var("ONCELOG_MANAGER_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x4B11_u64;
    let mut lines: Vec<Line> = Vec::new();
    let mut acked_total = 0;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "manager_kill::manager_child_process",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DIR, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after = 1 + (splitmix(&mut rng) % 200) as usize;
        let mut seen = 0;
        while seen < kill_after {
            let Some(Ok(line)) = out.next() else { break };
            if let Some(l) = parse(&line) {
                acked_total += l.acked as usize;
                lines.push(l);
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(splitmix(&mut rng) % 5000));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        for line in out.map_while(Result::ok) {
            if let Some(l) = parse(&line) {
                acked_total += l.acked as usize;
                lines.push(l);
            }
        }
        check(&dir, &mut lines, round);
    }
    assert!(
        acked_total >= rounds,
        "every round acknowledged something: {acked_total}"
    );
}
