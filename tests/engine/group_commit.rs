//! Group commit on the simulated file system: many threads append and wait for their own
//! durability (`FlushPolicy::Always`, or `Manual` appends followed by `flush_to`), sharing
//! syncs, while the power is cut in the middle of some later file operation. Whatever a thread
//! was told is durable (an append or a `flush_to` that returned `Ok`) must be found, byte for
//! byte at its offsets, after the crash and a reopen; a thread whose sync failed, or that was
//! waiting on one that failed, must not have been told so.
//!
//! Environment: `ONCELOG_GROUP_SEEDS=<n>` seeds (default 40), `ONCELOG_CRASH_SEED=<n>` one seed.

use crate::common_sim;

use std::sync::{Arc, Mutex};

use common_sim::{client_batch, open, StepClock};
use oncelog::format::BatchIter;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig};

/// One batch a thread was told is durable: its offsets and the byte its values are made of.
#[derive(Debug, Clone, Copy)]
struct Acked {
    first: i64,
    last: i64,
    fill: u8,
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("ONCELOG_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("ONCELOG_GROUP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    (0..n).collect()
}

/// `threads` appenders, `per_thread` batches each; under `Manual`, each batch is followed by
/// `flush_to(last + 1)` except every fourth (appended, never waited for: not acknowledged).
/// With `cut_at`, every file operation from that one on fails (the power cut begins).
fn run(seed: u64, policy: FlushPolicy, threads: usize, per_thread: usize, cut_at: Option<u64>) {
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .flush_policy(policy)
        .segment_bytes((8 + rng.below(24) as usize) * 1024)
        .allocation_step_bytes(4096)
        .build()
        .unwrap();
    let log = Arc::new(open(&fs, &clock, &cfg).expect("open"));
    if let Some(n) = cut_at {
        fs.fail_from(OpKind::Any, n, libc::EIO);
    }
    let acked = Mutex::new(Vec::<Acked>::new());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (log, acked) = (&log, &acked);
            scope.spawn(move || {
                for i in 0..per_thread {
                    let fill = (t * per_thread + i) as u8;
                    let batch = client_batch(1 + i % 3, 40, 1_700_000_000_000, None, fill);
                    let info = match log.append(&batch) {
                        Ok(AppendOutcome::Appended(info)) => info,
                        Ok(other) => panic!("seed {seed}: unexpected outcome {other:?}"),
                        // The power cut reached this thread: it stops, told nothing more.
                        Err(_) => return,
                    };
                    let durable = match policy {
                        FlushPolicy::Always => true,
                        _ if i % 4 == 3 => false,
                        _ => match log.flush_to(info.last_offset + 1) {
                            Ok(()) => true,
                            Err(_) => return,
                        },
                    };
                    if durable {
                        assert!(
                            log.recovery_point() > info.last_offset,
                            "seed {seed}: told durable below the recovery point {} (batch {}..={})",
                            log.recovery_point(),
                            info.first_offset,
                            info.last_offset
                        );
                        acked.lock().unwrap().push(Acked {
                            first: info.first_offset,
                            last: info.last_offset,
                            fill,
                        });
                    }
                }
            });
        }
    });
    let log = Arc::try_unwrap(log).unwrap_or_else(|_| panic!("threads are done"));
    log.abandon();
    fs.clear_faults();
    let report = fs.crash(rng.next_u64());
    let acked = acked.into_inner().unwrap();
    let log: Log = open(&fs, &clock, &cfg)
        .unwrap_or_else(|e| panic!("seed {seed}: reopen after crash ({report:?}): {e}"));
    for a in &acked {
        let bytes = log
            .read(a.first, 1 << 20)
            .unwrap_or_else(|e| panic!("seed {seed}: acknowledged {a:?} unreadable: {e}"));
        let (_, b) = BatchIter::new(&bytes)
            .next()
            .unwrap_or_else(|| panic!("seed {seed}: acknowledged {a:?} lost ({report:?})"))
            .unwrap_or_else(|e| panic!("seed {seed}: acknowledged {a:?} damaged: {e:?}"));
        assert_eq!(
            (b.base_offset(), b.last_offset()),
            (a.first, a.last),
            "seed {seed}: acknowledged batch lost or moved ({report:?})"
        );
        assert!(b.is_crc_valid(), "seed {seed}: acknowledged {a:?} damaged");
        let value = vec![a.fill; 40];
        assert!(
            b.records_data().windows(40).any(|w| w == value.as_slice()),
            "seed {seed}: acknowledged {a:?} holds other values"
        );
    }
    log.abandon();
}

#[test]
fn acknowledged_appends_survive_a_power_cut_under_flush_policy_always() {
    for seed in seeds() {
        let cut = 20 + SplitMix64::new(seed ^ 0xA1).below(400);
        run(
            seed,
            FlushPolicy::Always,
            2 + (seed % 7) as usize,
            30,
            Some(cut),
        );
    }
}

#[test]
fn acknowledged_flush_to_survives_a_power_cut() {
    for seed in seeds() {
        let cut = 20 + SplitMix64::new(seed ^ 0xB2).below(400);
        run(
            seed,
            FlushPolicy::Manual,
            2 + (seed % 7) as usize,
            30,
            Some(cut),
        );
    }
}

#[test]
fn without_a_crash_every_acknowledged_append_is_found() {
    for seed in seeds().into_iter().take(8) {
        run(seed, FlushPolicy::Always, 8, 40, None);
        run(seed, FlushPolicy::Manual, 8, 40, None);
    }
}
