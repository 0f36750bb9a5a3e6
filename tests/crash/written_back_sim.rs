//! A log made durable by another file's device flush (`Log::write_back_for_flush`, the first
//! half of a partition set's persist in oncelog-raft: docs/design.md, "Partition sets"). One
//! log appends under `FlushPolicy::Manual`; after each append it is made durable either by
//! its own flush, or by writing its bytes back and then syncing another file of the same file
//! system (whose data sync flushes the device's cache), or, once in a while, by a write-back
//! that is dropped without that flush (the next flush must then sync the bytes itself). The
//! power is cut at a seeded file operation; the crash image must hold every batch that was
//! reported durable, at its offsets, dense from 0.
//!
//! The simulated file system refuses a write-back promised past a file's durable length, so
//! the log's own account of which blocks a write-back can promise is checked at every step.
//!
//! `ONCELOG_WRITTEN_BACK_POINTS=<n>` sets the crash points (default 200).

use crate::common_sim;

use std::path::Path;

use common_sim::{open, StepClock};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::{OpenMode, SimFs};
use oncelog::{AppendWrites, FlushPolicy, Log, LogConfig, Preallocation};

fn config(writes: AppendWrites) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(24 * 1024)
        .segment_index_bytes(1024)
        .allocation_step_bytes(8192)
        .preallocation(Preallocation::Zeroed)
        .append_writes(writes)
        .flush_policy(FlushPolicy::Manual)
        .build()
        .unwrap()
}

fn batch(seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(9, 0, seq);
    let value = format!("batch {seq} {}", "x".repeat(300));
    b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    b.build().unwrap()
}

/// How the batches after the last durable one are made durable.
#[derive(Debug, Clone, Copy)]
enum Durable {
    OwnFlush,
    WrittenBack,
    DroppedThenFlush,
}

/// Appends until the cut; answers the batches reported durable and how many write-backs the
/// log promised.
fn append_until_cut(
    fs: &SimFs,
    log: &Log,
    other: &dyn oncelog::io::File,
    seed: u64,
) -> (Vec<(i64, i32)>, usize) {
    let mut rng = SplitMix64::new(seed);
    let mut durable = Vec::new();
    let mut written = Vec::new();
    let mut promised = 0;
    for seq in 0..200 {
        let Ok(outcome) = log.append(&batch(seq)) else {
            break;
        };
        written.push((outcome.offsets().0, seq));
        let how = match rng.below(10) {
            0..=2 => Durable::OwnFlush,
            3 => Durable::DroppedThenFlush,
            _ => Durable::WrittenBack,
        };
        let made = match how {
            Durable::OwnFlush => log.flush().is_ok(),
            Durable::WrittenBack => match log.write_back_for_flush() {
                Ok(Some(back)) => {
                    promised += 1;
                    let note = seq.to_be_bytes();
                    let synced = other.write_all_at(&note, 0).is_ok() && other.sync_data().is_ok();
                    if synced {
                        back.flushed();
                    }
                    synced
                }
                Ok(None) => true,
                Err(_) => false,
            },
            Durable::DroppedThenFlush => match log.write_back_for_flush() {
                Ok(back) => {
                    drop(back);
                    log.flush().is_ok()
                }
                Err(_) => false,
            },
        };
        if !made || fs.counters().injected_failures > 0 {
            break;
        }
        durable.append(&mut written);
    }
    (durable, promised)
}

fn batches(log: &Log) -> Vec<(i64, i32)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            if b.last_offset() >= next {
                out.push((b.base_offset(), b.base_sequence()));
                next = b.last_offset() + 1;
            }
        }
    }
    out
}

#[test]
fn bytes_written_back_are_durable_only_after_another_files_sync() {
    let points: u64 = std::env::var("ONCELOG_WRITTEN_BACK_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut promised_total = 0;
    for point in 0..points {
        let writes = if point % 2 == 0 {
            AppendWrites::File
        } else {
            AppendWrites::Map
        };
        let fs = SimFs::new();
        let clock = StepClock::new();
        let other_path = Path::new("/sim/other");
        fs.as_dyn().create_dir_all(Path::new("/sim")).unwrap();
        fs.as_dyn().write_atomically(other_path, &[0; 64]).unwrap();
        let other = fs.as_dyn().open(other_path, OpenMode::ReadWrite).unwrap();
        let log = open(&fs, &clock, &config(writes)).unwrap();
        // The cut falls at a file operation between the 20th and the 1,500th.
        let at = 20 + (point * 7919) % 1_480;
        fs.fail_from(OpKind::Any, at, libc::EIO);
        let (durable, promised) = append_until_cut(&fs, &log, other.as_ref(), point);
        promised_total += promised;
        log.abandon_on_drop();
        drop(log);
        drop(other);
        fs.clear_faults();
        fs.crash(point);
        let log = match open(&fs, &clock, &config(writes)) {
            Ok(log) => log,
            Err(e) => panic!("point {point} (cut at op {at}): the log does not reopen: {e}"),
        };
        let held = batches(&log);
        assert!(
            held.len() >= durable.len(),
            "point {point} (cut at op {at}, {writes:?}): {} batches reported durable, {} held",
            durable.len(),
            held.len()
        );
        assert_eq!(
            &held[..durable.len()],
            &durable[..],
            "point {point} (cut at op {at}, {writes:?}): the durable batches, at their offsets"
        );
        let mut next = 0;
        for &(offset, _) in &held {
            assert_eq!(offset, next, "point {point}: offsets dense from 0");
            next = offset + 1;
        }
    }
    // Through the file, the log's writes-back promised most of the time.
    assert!(
        promised_total > points as usize,
        "only {promised_total} write-backs promised over {points} runs"
    );
}
