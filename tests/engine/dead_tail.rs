//! Dead bytes after a rewrite: a truncation cuts a segment without shrinking
//! a file a reader may hold bytes of, leaving the removed batches after the cut as a dead tail.
//! Once no reader holds them they go (at the next rewrite, the deletion job, or close at the
//! latest), so after every rewrite command and a close each segment file holds exactly the
//! batches of the log: Kafka's tools reading the directory, and an open without
//! `oncelog.checkpoint`, find the same log.

use crate::common;

use std::path::{Path, PathBuf};

use common::{env_with, read_all, TestClock, T0};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, CleanupPolicy, Log, LogConfig};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 * 1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(1024)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

fn open(dir: &Path, cfg: LogConfig) -> Log {
    Log::open_in(env_with(TestClock::new(T0)), dir, cfg).unwrap()
}

/// Batch `i`: 5 keyed records (keys repeat every 7 batches, so compaction has work), its
/// timestamps growing with `i` (time retention removes a prefix).
fn batch(i: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..5 {
        let key = format!("k{}-{r}", i % 7);
        b.append(
            T0 + i as i64 * 1000,
            Some(key.as_bytes()),
            Some(&[b'v'; 60][..]),
            &[],
        );
    }
    b.build().unwrap()
}

/// A flushed log of `n` batches: batch `k` holds offsets `[5k, 5k + 4]`.
fn log_of(dir: &Path, cfg: LogConfig, n: i32) -> Log {
    let log = open(dir, cfg);
    for k in 0..n {
        assert!(matches!(
            log.append(&batch(k)).unwrap(),
            AppendOutcome::Appended(_)
        ));
    }
    log.flush().unwrap();
    log
}

fn segment_logs(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut logs: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let base = name.strip_suffix(".log")?.parse::<i64>().ok()?;
            Some((base, p))
        })
        .collect();
    logs.sort();
    logs
}

/// Every `.log` holds whole batches up to its very end, none of them reaching the next
/// segment's base offset: no byte of any file is outside the log.
fn assert_files_hold_only_the_log(dir: &Path, what: &str) {
    let logs = segment_logs(dir);
    for (i, (base, path)) in logs.iter().enumerate() {
        let bytes = std::fs::read(path).unwrap();
        let mut end = 0;
        for item in BatchIter::new(&bytes) {
            let (at, b) = item.unwrap_or_else(|e| {
                panic!(
                    "{what}: {}: {} bytes after the batches from byte {} ({})",
                    path.display(),
                    bytes.len() - e.position,
                    e.position,
                    e.error
                )
            });
            assert!(b.base_offset() >= *base, "{what}: {}", path.display());
            if let Some((next, _)) = logs.get(i + 1) {
                assert!(
                    b.last_offset() < *next,
                    "{what}: {} holds offset {} at byte {at}, at or past the next segment's base {next}",
                    path.display(),
                    b.last_offset()
                );
            }
            end = at + b.as_bytes().len();
        }
        assert_eq!(end, bytes.len(), "{what}: {}", path.display());
    }
}

fn len_of(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The `.log` of the segment holding `offset`.
fn log_holding(dir: &Path, offset: i64) -> PathBuf {
    segment_logs(dir)
        .into_iter()
        .rev()
        .find(|(base, _)| *base <= offset)
        .unwrap()
        .1
}

#[test]
fn a_truncation_then_close_leaves_no_removed_batch_in_the_cut_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), config(), 200);
    // Inside a sealed segment, then inside the (new) active one.
    log.replica().truncate_to(503).unwrap();
    assert_eq!(log.log_end_offset(), 500);
    assert_files_hold_only_the_log(dir.path(), "after the truncation");
    log.close().unwrap();
    assert_files_hold_only_the_log(dir.path(), "after close");
}

#[test]
fn a_dead_tail_a_reader_held_is_trimmed_once_the_reader_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), config(), 200);
    let held = log.read(600, 4096).unwrap();
    let copy = held.to_vec();
    let cut_file = log_holding(dir.path(), 600);
    log.replica().truncate_to(600).unwrap();
    // The reader's bytes stay, and so does the file under them.
    assert_eq!(&held[..], &copy[..]);
    let dead_len = len_of(&cut_file);
    let mut clock_ms = T0;
    clock_ms += 1;
    log.maintenance().remove_deleted_files(clock_ms).unwrap();
    assert_eq!(len_of(&cut_file), dead_len, "trimmed under a reader");
    assert_eq!(&held[..], &copy[..]);
    drop(held);
    // The deletion job trims it, before any close.
    log.maintenance().remove_deleted_files(clock_ms).unwrap();
    assert!(len_of(&cut_file) < dead_len);
    assert_files_hold_only_the_log(dir.path(), "after the reader went");
    log.close().unwrap();
    assert_files_hold_only_the_log(dir.path(), "after close");
}

#[test]
fn a_dead_tail_a_reader_holds_at_close_stays_until_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), config(), 200);
    let held = log.read(600, 4096).unwrap();
    let copy = held.to_vec();
    let cut_file = log_holding(dir.path(), 600);
    log.replica().truncate_to(600).unwrap();
    let dead_len = len_of(&cut_file);
    log.close().unwrap();
    // Never shrunk under a reader, even by close.
    assert_eq!(len_of(&cut_file), dead_len);
    assert_eq!(&held[..], &copy[..]);
    drop(held);
    drop(log);
    let log = open(dir.path(), config());
    assert_eq!(log.log_end_offset(), 600);
    log.close().unwrap();
    assert_files_hold_only_the_log(dir.path(), "after the next open");
}

/// One rewrite command, as the CLI runs them.
#[derive(Debug, Clone, Copy)]
enum Rewrite {
    Truncate(i64),
    TruncateFully(i64),
    DeleteRecords(i64),
    RetentionBySize,
    RetentionByTime,
    Compact,
}

fn run(log: &Log, rewrite: Rewrite) {
    let now = T0 + 1_000_000;
    match rewrite {
        Rewrite::Truncate(o) => drop(log.replica().truncate_to(o).unwrap()),
        Rewrite::TruncateFully(o) => drop(log.replica().truncate_fully_and_start_at(o).unwrap()),
        Rewrite::DeleteRecords(o) => {
            log.delete_records(o).unwrap();
            log.maintenance().enforce_retention(now).unwrap();
        }
        Rewrite::RetentionBySize | Rewrite::RetentionByTime => {
            drop(log.maintenance().enforce_retention(now).unwrap())
        }
        Rewrite::Compact => drop(log.maintenance().compact(now).unwrap()),
    }
}

fn config_for(rewrite: Rewrite) -> LogConfig {
    let cfg = config();
    match rewrite {
        Rewrite::RetentionBySize => cfg
            .into_builder()
            .retention_bytes(Some(40 * 1024))
            .build()
            .unwrap(),
        Rewrite::RetentionByTime => cfg
            .into_builder()
            .retention_ms(Some(1_000_000 - 120_000))
            .build()
            .unwrap(),
        Rewrite::Compact => cfg
            .into_builder()
            .cleanup_policy(CleanupPolicy::Compact)
            .build()
            .unwrap(),
        _ => cfg,
    }
}

/// Every rewrite command, at offsets in sealed and active segments, with and without readers
/// holding bytes of every segment while it runs (dropped before close): after close no file
/// holds a byte outside the log, and with the checkpoint removed the directory opens in the
/// default mode with the same batches.
#[test]
fn after_every_rewrite_and_close_the_files_hold_exactly_the_log() {
    let mut rewrites = vec![
        Rewrite::TruncateFully(0),
        Rewrite::TruncateFully(2000),
        Rewrite::DeleteRecords(503),
        Rewrite::RetentionBySize,
        Rewrite::RetentionByTime,
        Rewrite::Compact,
    ];
    for o in [0, 1, 4, 5, 333, 500, 777, 994, 995, 999] {
        rewrites.push(Rewrite::Truncate(o));
    }
    for rewrite in rewrites {
        for readers in [false, true] {
            let what = format!("{rewrite:?}, readers {readers}");
            let dir = tempfile::tempdir().unwrap();
            let cfg = config_for(rewrite);
            let log = log_of(dir.path(), cfg.clone(), 200);
            let held: Vec<bytes::Bytes> = if readers {
                (0..1000)
                    .step_by(50)
                    .map(|o| log.read(o, 100_000).unwrap())
                    .collect()
            } else {
                Vec::new()
            };
            run(&log, rewrite);
            drop(held);
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            let content = read_all(&log, usize::MAX);
            log.close().unwrap();
            drop(log);
            assert_files_hold_only_the_log(dir.path(), &what);
            std::fs::remove_file(dir.path().join("oncelog.checkpoint")).unwrap();
            let log = open(dir.path(), cfg);
            assert_eq!(log.log_end_offset(), end, "{what}");
            // The log start lives in the checkpoint (Kafka's in the log dir's file): without
            // it the log starts at its first batch, and from there on holds the same.
            assert!(log.log_start_offset() <= start, "{what}");
            let again: Vec<Vec<u8>> = read_all(&log, usize::MAX)
                .into_iter()
                .filter(|b| {
                    let b = oncelog::format::RecordBatch::parse(b).unwrap();
                    b.last_offset() >= start
                })
                .collect();
            assert_eq!(again, content, "{what}");
            log.close().unwrap();
        }
    }
}

#[test]
fn the_next_rewrite_trims_a_dead_tail_whose_reader_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), config(), 200);
    let held = log.read(600, 4096).unwrap();
    let cut_file = log_holding(dir.path(), 600);
    log.replica().truncate_to(600).unwrap();
    let dead_len = len_of(&cut_file);
    drop(held);
    // A retention pass with nothing to remove: the tail goes all the same.
    log.maintenance().enforce_retention(T0).unwrap();
    assert!(len_of(&cut_file) < dead_len);
    assert_files_hold_only_the_log(dir.path(), "after retention");
    log.close().unwrap();
}

/// A crash after the trim and before a checkpoint recorded it leaves the file anywhere from
/// the batches' end to the recorded length: `verify` and an open both take that as it is.
#[test]
fn a_dead_tail_trimmed_part_way_is_neither_damage_to_verify_nor_to_an_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), config(), 200);
    let held = log.read(600, 4096).unwrap();
    let cut_file = log_holding(dir.path(), 600);
    log.replica().truncate_to(600).unwrap();
    log.close().unwrap();
    drop(held);
    drop(log);
    let recorded = len_of(&cut_file);
    let batches_end = {
        let bytes = std::fs::read(&cut_file).unwrap();
        let mut end = 0;
        for item in BatchIter::new(&bytes) {
            let (at, b) = item.unwrap();
            if b.last_offset() >= 600 {
                break;
            }
            end = at + b.as_bytes().len();
        }
        end as u64
    };
    assert!(batches_end < recorded);
    for len in [recorded, (batches_end + recorded) / 2, batches_end] {
        let copy = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() && p.file_name().unwrap() != ".lock" {
                std::fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
            }
        }
        let file = copy.path().join(cut_file.file_name().unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(len)
            .unwrap();
        let fs = oncelog::io::RealFs;
        let report = oncelog::verify::verify_dir(&fs, copy.path()).unwrap();
        assert!(
            report.problems.is_empty(),
            "length {len}: {:?}",
            report.problems
        );
        let log = open(copy.path(), config());
        assert_eq!(log.log_end_offset(), 600, "length {len}");
        log.close().unwrap();
        assert_files_hold_only_the_log(copy.path(), &format!("length {len}"));
    }
}
