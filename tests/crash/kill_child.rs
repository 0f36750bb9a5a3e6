//! Real crashes: a child process appends idempotent batches, flushing each, and is killed with
//! SIGKILL at a random moment; the parent reopens the log and checks the contract (docs/design.md,
//! "The contract"): every acknowledged batch is present once at its offsets, offsets are dense, and
//! a retry of any acknowledged batch in its producer's window is answered with the original
//! offsets.
//!
//! The segment's space grows in 4 KiB steps, so kills land while the appender reserves space
//! and while the background thread writes zeros ahead of it (`Preallocation::Zeroed`, every
//! other round; `Reserved` in the others). Half the rounds write batches through the file
//! (`AppendWrites::File`, what `FlushPolicy::Always` picks), the others through the map.
//!
//! `ONCELOG_KILL_ROUNDS` sets the number of kill rounds (default 50).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{
    AppendOutcome, AppendWrites, DuplicateInfo, FlushPolicy, Log, LogConfig, Preallocation,
};

const PRODUCERS: [i64; 3] = [100, 200, 300];
const RECORDS: i32 = 4;
const CHILD_DIR: &str = "ONCELOG_KILL_CHILD_DIR";
/// `zeroed` or `reserved`: how the child preallocates.
const CHILD_PREALLOCATION: &str = "ONCELOG_KILL_CHILD_PREALLOCATION";
/// `file` or `map`: how the child writes its batches.
const CHILD_WRITES: &str = "ONCELOG_KILL_CHILD_WRITES";

/// How a round's child runs.
#[derive(Debug, Clone, Copy)]
struct Setup {
    zeroed: bool,
    through_file: bool,
}

impl Setup {
    const ALL: [Setup; 4] = [
        Setup {
            zeroed: true,
            through_file: true,
        },
        Setup {
            zeroed: false,
            through_file: true,
        },
        Setup {
            zeroed: true,
            through_file: false,
        },
        Setup {
            zeroed: false,
            through_file: false,
        },
    ];
}

fn config(setup: Setup) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(32 * 1024)
        .segment_index_bytes(2048)
        .allocation_step_bytes(4096)
        .preallocation(if setup.zeroed {
            Preallocation::Zeroed
        } else {
            Preallocation::Reserved
        })
        .append_writes(if setup.through_file {
            AppendWrites::File
        } else {
            AppendWrites::Map
        })
        .snapshot_interval_bytes(8 * 1024)
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap()
}

/// The batch a producer sends at `seq`: the same bytes every time, so a retry is exact.
fn batch(pid: i64, seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    for i in 0..RECORDS {
        let value = format!("producer {pid} record {}", seq + i);
        b.append(
            1_700_000_000_000 + (seq + i) as i64,
            None,
            Some(value.as_bytes()),
            &[],
        );
    }
    b.build().expect("valid batch")
}

/// The child's side: append round-robin for each producer from where the log says it is,
/// printing one line per acknowledged (durable) batch, until killed or after `limit` batches.
fn run_appender(dir: &str, limit: usize, setup: Setup) {
    let log = Log::open(dir, config(setup)).expect("child opens the log");
    let mut next: BTreeMap<i64, i32> = PRODUCERS
        .iter()
        .map(|&pid| (pid, log.producer(pid).map_or(0, |e| e.last_seq() + 1)))
        .collect();
    for i in 0..limit {
        let pid = PRODUCERS[i % PRODUCERS.len()];
        let seq = next[&pid];
        match log.append(&batch(pid, seq)).expect("child append") {
            AppendOutcome::Appended(info) => {
                println!("ACK {pid} {seq} {} {}", info.first_offset, info.last_offset)
            }
            AppendOutcome::Duplicate(d) => panic!("fresh sequence answered as duplicate: {d:?}"),
            other => panic!("unexpected outcome: {other:?}"),
        }
        next.insert(pid, seq + RECORDS);
    }
    log.close().expect("child close");
}

/// Entry point of the child process; run in-process (briefly) it is a plain smoke test.
#[test]
fn appender_child_process() {
    let setup = Setup {
        zeroed: std::env::var(CHILD_PREALLOCATION).map_or(true, |v| v == "zeroed"),
        through_file: std::env::var(CHILD_WRITES).map_or(true, |v| v == "file"),
    };
    match std::env::var(CHILD_DIR) {
        Ok(dir) => run_appender(&dir, usize::MAX, setup),
        Err(_) => {
            for setup in Setup::ALL {
                let dir = tempfile::tempdir().unwrap();
                run_appender(dir.path().to_str().unwrap(), 12, setup);
                let log = Log::open(dir.path(), config(setup)).unwrap();
                assert_eq!(log.log_end_offset(), 12 * RECORDS as i64);
            }
        }
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ack {
    pid: i64,
    seq: i32,
    first: i64,
    last: i64,
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_batch_and_retries_are_duplicates() {
    let rounds: usize = std::env::var("ONCELOG_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let dir_str = dir.path().to_str().unwrap().to_string();
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x5EED_u64;
    let mut acked: Vec<Ack> = Vec::new();
    for round in 0..rounds {
        let setup = Setup::ALL[round % Setup::ALL.len()];
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "kill_child::appender_child_process",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DIR, &dir_str)
            .env(
                CHILD_PREALLOCATION,
                if setup.zeroed { "zeroed" } else { "reserved" },
            )
            .env(
                CHILD_WRITES,
                if setup.through_file { "file" } else { "map" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let kill_after = 1 + (splitmix(&mut rng) % 40) as usize;
        let mut seen = 0;
        while seen < kill_after {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(ack) = parse_ack(&line) {
                acked.push(ack);
                seen += 1;
            }
        }
        // Land the kill at a random moment, often in the middle of an append or a flush.
        std::thread::sleep(Duration::from_micros(splitmix(&mut rng) % 3000));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        // Lines the child printed before dying are acknowledged too.
        for line in lines.map_while(Result::ok) {
            acked.extend(parse_ack(&line));
        }
        check_after_crash(&dir_str, &acked, round, setup);
    }
    assert!(
        acked.len() >= rounds,
        "every round acknowledged at least one batch"
    );
}

/// An acknowledgement line. libtest prints `test <name> ... ` without a newline before the
/// child's first line, so the marker may follow other text.
fn parse_ack(line: &str) -> Option<Ack> {
    let rest = &line[line.find("ACK ")? + 4..];
    let f: Vec<i64> = rest
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 4).then(|| Ack {
        pid: f[0],
        seq: f[1] as i32,
        first: f[2],
        last: f[3],
    })
}

fn check_after_crash(dir: &str, acked: &[Ack], round: usize, setup: Setup) {
    let log =
        Log::open(dir, config(setup)).unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
    // Every acknowledged batch is present once, at its offsets, with its producer fields.
    let mut present: BTreeMap<i64, (i64, i32, i64)> = BTreeMap::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(
                b.is_crc_valid(),
                "round {round}: CRC at offset {}",
                b.base_offset()
            );
            assert_eq!(b.base_offset(), next, "round {round}: offsets dense");
            present.insert(
                b.base_offset(),
                (b.producer_id(), b.base_sequence(), b.last_offset()),
            );
            next = b.last_offset() + 1;
        }
    }
    for a in acked {
        assert_eq!(
            present.get(&a.first),
            Some(&(a.pid, a.seq, a.last)),
            "round {round}: acknowledged {a:?} missing or different"
        );
    }
    // A retry of each acknowledged batch among its producer's last five in the log (a batch
    // can be durable without having been acknowledged, when the kill fell between the two) is
    // a duplicate.
    for pid in PRODUCERS {
        let window: Vec<i64> = present
            .iter()
            .filter(|(_, v)| v.0 == pid)
            .map(|(o, _)| *o)
            .rev()
            .take(5)
            .collect();
        let mine: Vec<&Ack> = acked
            .iter()
            .filter(|a| a.pid == pid && window.contains(&a.first))
            .collect();
        for a in &mine {
            match log.append(&batch(a.pid, a.seq)) {
                Ok(AppendOutcome::Duplicate(DuplicateInfo {
                    first_offset,
                    last_offset,
                    ..
                })) => {
                    assert_eq!(
                        (first_offset, last_offset),
                        (a.first, a.last),
                        "round {round}"
                    )
                }
                other => {
                    panic!(
                    "round {round}: retry of {a:?} gave {other:?}\nacked: {mine:?}\npresent: {:?}",
                    present.iter().filter(|(_, v)| v.0 == pid).collect::<Vec<_>>()
                )
                }
            }
        }
    }
    if round.is_multiple_of(2) {
        log.close().unwrap();
    } else {
        log.abandon();
    }
}
