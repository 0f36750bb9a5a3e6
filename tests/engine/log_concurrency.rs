//! Readers running while the log appends, rolls and closes; concurrent appenders
//! (docs/design.md: contract 4, "Memory maps without hazards"): readers only ever see whole, valid
//! batches at dense offsets, and bytes they hold stay unchanged after roll, close and deletion of
//! the directory.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use bytes::Bytes;
use common::{batch, read_all, small_config, T0};
use oncelog::format::BatchIter;
use oncelog::{AppendOutcome, Log, ReadError};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Log>();
};

/// A small deterministic generator, so each thread's sizes differ without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn tailing_readers_see_dense_valid_batches_and_keep_their_bytes_after_close_and_delete() {
    const BATCHES: usize = 1500;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), small_config()).unwrap());
    let appender_done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(5));

    let appender = {
        let (log, done, start) = (Arc::clone(&log), Arc::clone(&appender_done), start.clone());
        thread::spawn(move || {
            start.wait();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut expected = 0;
            for i in 0..BATCHES {
                let records = 1 + (next(&mut rng) % 5) as usize;
                let value = 50 + (next(&mut rng) % 1500) as usize;
                match log.append(&batch(records, T0 + i as i64, value)).unwrap() {
                    AppendOutcome::Appended(info) => {
                        assert_eq!(info.first_offset, expected);
                        expected = info.last_offset + 1;
                    }
                    other => panic!("{other:?}"),
                }
                if i % 300 == 0 {
                    log.flush().unwrap();
                }
            }
            done.store(true, Ordering::Release);
            expected
        })
    };

    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (log, done, start) = (Arc::clone(&log), Arc::clone(&appender_done), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut rng = 0x2545_f491_4f6c_dd1du64 + r;
                let mut offset = 0i64;
                let mut kept: Vec<(Bytes, Vec<u8>)> = Vec::new();
                let mut reads = 0u64;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let end = log.log_end_offset();
                    let max_bytes = (next(&mut rng) % 20_000) as usize;
                    let bytes = log.read(offset, max_bytes).unwrap();
                    // Everything returned is counted by the log end: a batch published but not
                    // yet committed must not be handed out.
                    let end_after = log.log_end_offset();
                    reads += 1;
                    if bytes.is_empty() {
                        assert!(offset >= end, "empty read at {offset} below end {end}");
                        if finished && offset == log.log_end_offset() {
                            break;
                        }
                        thread::yield_now();
                        continue;
                    }
                    for item in BatchIter::new(&bytes) {
                        let (_, b) = item.expect("readers never see a partial batch");
                        assert!(b.is_crc_valid(), "CRC at offset {}", b.base_offset());
                        assert_eq!(b.base_offset(), offset, "dense, increasing offsets");
                        assert!(b.last_offset() >= b.base_offset());
                        assert!(
                            b.last_offset() < end_after,
                            "batch beyond the committed end"
                        );
                        offset = b.last_offset() + 1;
                    }
                    if reads.is_multiple_of(40) {
                        kept.push((bytes.clone(), bytes.to_vec()));
                    }
                }
                (offset, kept)
            })
        })
        .collect();

    start.wait();
    let end = appender.join().unwrap();
    let mut kept = Vec::new();
    for r in readers {
        let (offset, k) = r.join().unwrap();
        assert_eq!(offset, end);
        kept.extend(k);
    }
    assert!(
        log.maintenance().segment_count() > 10,
        "rolled {} times",
        log.maintenance().segment_count()
    );
    assert!(kept.len() > 3);

    // Close while readers still hold bytes, then delete the files under them.
    let still = read_all(&log, 1 << 16);
    log.close().unwrap();
    assert!(matches!(log.read(0, 100), Err(ReadError::Closed)));
    for (held, copy) in &kept {
        assert_eq!(&held[..], &copy[..], "bytes changed after close");
    }
    let path = dir.path().to_path_buf();
    drop(log);
    drop(dir);
    assert!(!path.exists());
    for (held, copy) in &kept {
        assert_eq!(
            &held[..],
            &copy[..],
            "bytes changed after the files were deleted"
        );
        for item in BatchIter::new(held) {
            assert!(item.unwrap().1.is_crc_valid());
        }
    }
    assert_eq!(still.len(), BATCHES);
}

#[test]
fn readers_racing_close_get_whole_batches_or_closed() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), small_config()).unwrap());
    for i in 0..300 {
        log.append(&batch(3, T0 + i, 500)).unwrap();
    }
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let mut kept = Vec::new();
                let mut offset = r * 7;
                loop {
                    match log.read(offset % 900, 8000) {
                        Ok(bytes) => {
                            for item in BatchIter::new(&bytes) {
                                assert!(item.unwrap().1.is_crc_valid());
                            }
                            if kept.len() < 50 {
                                kept.push((bytes.clone(), bytes.to_vec()));
                            }
                        }
                        Err(ReadError::Closed) => break,
                        Err(e) => panic!("{e}"),
                    }
                    offset += 13;
                }
                kept
            })
        })
        .collect();
    // Appends continue (and roll) while readers read, then the log closes under them.
    for i in 0..200 {
        log.append(&batch(3, T0 + i, 500)).unwrap();
    }
    log.close().unwrap();
    for r in readers {
        for (held, copy) in r.join().unwrap() {
            assert_eq!(&held[..], &copy[..]);
        }
    }
}

#[test]
fn concurrent_appenders_get_dense_non_overlapping_offsets() {
    const PER_THREAD: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), small_config()).unwrap());
    let start = Arc::new(Barrier::new(2));
    let appenders: Vec<_> = (0..2u8)
        .map(|t| {
            let (log, start) = (Arc::clone(&log), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut mine = Vec::new();
                for i in 0..PER_THREAD {
                    let records = 1 + (i + t as usize) % 4;
                    let sent = batch(records, T0 + i as i64, 200 + 100 * t as usize);
                    match log.append(&sent).unwrap() {
                        AppendOutcome::Appended(info) => {
                            assert_eq!(info.last_offset - info.first_offset + 1, records as i64);
                            mine.push((info.first_offset, info.last_offset, sent));
                        }
                        other => panic!("{other:?}"),
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: BTreeMap<i64, (i64, Vec<u8>)> = BTreeMap::new();
    for a in appenders {
        for (first, last, sent) in a.join().unwrap() {
            assert!(
                all.insert(first, (last, sent)).is_none(),
                "offset {first} twice"
            );
        }
    }
    let mut expected = 0;
    for (first, (last, _)) in &all {
        assert_eq!(*first, expected, "dense and non-overlapping");
        expected = last + 1;
    }
    assert_eq!(log.log_end_offset(), expected);
    let stored = read_all(&log, 1 << 20);
    assert_eq!(stored.len(), 2 * PER_THREAD);
    for (bytes, (_, (_, sent))) in stored.iter().zip(&all) {
        assert!(common::same_except_offset_and_epoch(bytes, sent));
    }
}

/// Checkpoint writers racing: flushes that make a sealed segment durable write the checkpoint
/// while retention and rolls rewrite it. Every write is whole and in order: no flush fails on
/// another writer's temp file, and the checkpoint on disk at the end vouches for no segment
/// retention removed (a reopen with it validates nothing missing).
#[test]
fn checkpoint_writes_racing_flushes_and_retention_never_collide_or_go_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = oncelog::LogConfig::builder()
        .segment_bytes(4096)
        .segment_index_bytes(4096)
        .flush_policy(oncelog::FlushPolicy::Always)
        .retention_bytes(Some(16 << 10))
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = Arc::new(Log::open(dir.path(), config.clone()).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let appenders: Vec<_> = (0..2)
        .map(|_| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for _ in 0..400 {
                    log.append(&batch(2, T0, 300)).unwrap();
                }
            })
        })
        .collect();
    let rewriter = {
        let log = Arc::clone(&log);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let mut rounds = 0;
            while !done.load(Ordering::Relaxed) {
                log.maintenance().enforce_retention(T0).unwrap();
                log.roll().unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    for a in appenders {
        a.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    assert!(rewriter.join().unwrap() > 0);
    let end = log.log_end_offset();
    log.abandon_on_drop();
    drop(log);
    // No close: the checkpoint on disk is the last one a flush or a rewrite wrote.
    let reopened = Log::open(dir.path(), config).unwrap();
    assert_eq!(reopened.log_end_offset(), end);
    reopened.close().unwrap();
}
