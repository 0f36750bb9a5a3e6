//! Compacted logs with transactions, rebuilt: a log written by
//! transactional and idempotent producers (transactions committed and aborted, interleaved,
//! retries), compacted in several groups and passes, then reopened through every path that
//! rebuilds producer state or a `.txnindex`: deep recovery, a damaged or missing `.txnindex`, a
//! deleted or damaged producer snapshot, an unclean checkpoint whose recovery point is below
//! the compacted segments, and a truncation inside the compacted range.
//!
//! After each: every retry inside a producer's dedup window is a `Duplicate` with its original
//! offsets, what read_committed returns is unchanged, and `verify` finds the healthy
//! compacted directory clean (docs/design.md, "Compaction and producer state").
//!
//! The sweep runs fixed seeds, so a failure names its seed and replays from it.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{copy_dir, env_with, TestClock, T0};
use oncelog::format::BatchBuilder;
use oncelog::log::checkpoint;
use oncelog::{
    AppendOutcome, CleanupPolicy, CompactionConfig, IsolationLevel, Log, LogConfig, TxnMarker,
};

const DAY: i64 = 24 * 60 * 60 * 1000;
const WINDOW: usize = 5;
/// Producers 1..=3 are transactional, 4 only idempotent.
const TXN_PRODUCERS: i64 = 3;
const PRODUCERS: i64 = 4;

fn config(small_map: bool) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(128)
        .prefault_bytes(0)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .compaction(
            CompactionConfig::default().with_key_map_bytes(if small_map { 1024 } else { 1 << 20 }),
        )
        .build()
        .unwrap()
}

fn open_with(dir: &Path, cfg: LogConfig) -> Log {
    Log::open_in(env_with(TestClock::new(T0)), dir, cfg).unwrap()
}

/// splitmix64: a seed replays the same log.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A batch a producer sent, as the client would send it again.
#[derive(Debug, Clone)]
struct Sent {
    first: i64,
    last: i64,
    client: Vec<u8>,
}

/// What was written, and where the log could be cut without cutting a transaction in two.
#[derive(Debug, Default)]
struct Written {
    sent: BTreeMap<i64, Vec<Sent>>,
    /// Log ends at which no transaction was open.
    quiet: Vec<i64>,
    aborted_txns: usize,
}

impl Written {
    /// The batches in each producer's dedup window of a log ending at `end`.
    fn windows(&self, end: i64) -> Vec<&Sent> {
        self.sent
            .values()
            .flat_map(|s| {
                let below: Vec<&Sent> = s.iter().filter(|b| b.last < end).collect();
                let skip = below.len().saturating_sub(WINDOW);
                below.into_iter().skip(skip)
            })
            .collect()
    }
}

fn appended(log: &Log, client: &[u8]) -> (i64, i64) {
    match log.append(client).unwrap() {
        AppendOutcome::Appended(a) => (a.first_offset, a.last_offset),
        other => panic!("append: {other:?}"),
    }
}

/// Retries every batch of every window: each must be a duplicate with its original offsets.
#[track_caller]
fn expect_windows(log: &Log, written: &Written, end: i64, what: &str) {
    let mut wrong = Vec::new();
    let window = written.windows(end);
    for s in &window {
        match log.append(&s.client) {
            Ok(AppendOutcome::Duplicate(d))
                if (d.first_offset, d.last_offset) == (s.first, s.last) => {}
            other => wrong.push(format!("{}..={}: {other:?}", s.first, s.last)),
        }
    }
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} in-window retries are not duplicates: {wrong:#?}",
        wrong.len(),
        window.len()
    );
}

/// (offset, key, value) of every record a read_committed consumer gets, from the log start.
type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn committed_view(log: &Log) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let f = log
            .fetch_isolated(next, 1 << 20, IsolationLevel::ReadCommitted)
            .unwrap();
        if f.bytes.is_empty() {
            return out;
        }
        for r in f.records() {
            let r = r.unwrap();
            out.push((
                r.offset,
                r.key.map(|k| k.to_vec()),
                r.value.map(|v| v.to_vec()),
            ));
        }
        next = f.next_offset;
    }
}

/// Panics at the first difference of two read_committed views, without printing them whole.
#[track_caller]
fn same_view(seen: &[Rec], want: &[Rec], what: &str) {
    for (a, b) in seen.iter().zip(want) {
        assert!(
            a == b,
            "{what}: read_committed returns {a:?} where it returned {b:?}"
        );
    }
    assert_eq!(
        seen.len(),
        want.len(),
        "{what}: read_committed record counts"
    );
}

/// A keyed batch of `n` records from `producer` (pid, seq, transactional) or a plain client.
fn keyed_batch(rng: &mut Rng, producer: Option<(i64, i32, bool)>, n: usize, tag: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some((pid, seq, txn)) = producer {
        b = b.producer(pid, 0, seq).transactional(txn);
    }
    for i in 0..n {
        let key = format!("k{}", rng.below(24));
        let value = format!("value {tag}.{i} of {key}");
        b.append(
            T0 + i as i64,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
            &[],
        );
    }
    b.build().unwrap()
}

/// Writes a random transactional log into `dir` (closed cleanly), compacts it in two rounds,
/// and returns what was written.
fn write_and_compact(dir: &Path, seed: u64, small_map: bool) -> Written {
    let mut rng = Rng(seed);
    let log = open_with(dir, config(small_map));
    let mut w = Written::default();
    let mut seq = [0i32; PRODUCERS as usize + 1];
    let mut open = [false; TXN_PRODUCERS as usize + 1];
    let mut tag = 0u64;
    let end_txn = |log: &Log, rng: &mut Rng, pid: i64, w: &mut Written| {
        let abort = rng.below(100) < 60;
        let marker = if abort {
            w.aborted_txns += 1;
            TxnMarker::abort(pid, 0, 0)
        } else {
            TxnMarker::commit(pid, 0, 0)
        };
        log.append_marker(&marker).unwrap();
    };
    for step in 0..220 {
        tag += 1;
        if step % 55 == 54 {
            // A quiet spell: every transaction ends, then plain batches roll a segment or two,
            // leaving snapshots where no transaction is open.
            for pid in 1..=TXN_PRODUCERS {
                if open[pid as usize] {
                    end_txn(&log, &mut rng, pid, &mut w);
                    open[pid as usize] = false;
                }
            }
            for _ in 0..16 {
                tag += 1;
                appended(&log, &keyed_batch(&mut rng, None, 2, tag));
                w.quiet.push(log.log_end_offset());
            }
        }
        match rng.below(100) {
            0..=44 => {
                let pid = 1 + rng.below(PRODUCERS as u64) as i64;
                let txn = pid <= TXN_PRODUCERS;
                let n = 1 + rng.below(3) as usize;
                let client = keyed_batch(&mut rng, Some((pid, seq[pid as usize], txn)), n, tag);
                let (first, last) = appended(&log, &client);
                seq[pid as usize] += n as i32;
                if txn {
                    open[pid as usize] = true;
                }
                w.sent.entry(pid).or_default().push(Sent {
                    first,
                    last,
                    client,
                });
            }
            45..=62 => {
                let pid = 1 + rng.below(TXN_PRODUCERS as u64) as i64;
                if open[pid as usize] {
                    end_txn(&log, &mut rng, pid, &mut w);
                    open[pid as usize] = false;
                }
            }
            63..=72 => {
                let pid = 1 + rng.below(PRODUCERS as u64) as i64;
                let window = w.windows(i64::MAX);
                let mine: Vec<&&Sent> = window
                    .iter()
                    .filter(|s| {
                        w.sent
                            .get(&pid)
                            .is_some_and(|v| v.iter().any(|x| x.first == s.first))
                    })
                    .collect();
                if !mine.is_empty() {
                    let s = mine[rng.below(mine.len() as u64) as usize];
                    match log.append(&s.client).unwrap() {
                        AppendOutcome::Duplicate(d) => {
                            assert_eq!((d.first_offset, d.last_offset), (s.first, s.last))
                        }
                        other => panic!("seed {seed}: retry answered {other:?}"),
                    }
                }
            }
            _ => {
                let n = 1 + rng.below(3) as usize;
                appended(&log, &keyed_batch(&mut rng, None, n, tag));
            }
        }
        if open.iter().all(|o| !o) {
            w.quiet.push(log.log_end_offset());
        }
    }
    for pid in 1..=TXN_PRODUCERS {
        if open[pid as usize] {
            end_txn(&log, &mut rng, pid, &mut w);
        }
    }
    // Plain batches after the last marker: the active segment holds none of the transactions.
    for _ in 0..30 {
        tag += 1;
        appended(&log, &keyed_batch(&mut rng, None, 2, tag));
    }
    w.quiet.push(log.log_end_offset());
    let first = log.maintenance().compact(T0).unwrap();
    assert!(
        first.aborted_records_removed > 0 || w.aborted_txns == 0,
        "seed {seed}: {first:?}"
    );
    for _ in 0..30 {
        tag += 1;
        appended(&log, &keyed_batch(&mut rng, None, 2, tag));
    }
    // Past the markers' horizon: markers without data left go.
    log.maintenance().compact(T0 + 2 * DAY).unwrap();
    log.close().unwrap();
    w
}

/// What a rebuild is made to face.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// `recover --deep`: every batch validated, every `.txnindex` rebuilt.
    Deep,
    /// One bit of the first compacted segment with aborted transactions' `.txnindex` flipped
    /// where the sanity check notices (the first offset of its first entry made negative).
    TxnIndexFlipped,
    /// That `.txnindex` deleted, and the checkpoint made unclean so that the open notices.
    TxnIndexMissing,
    /// The newest producer snapshot deleted.
    SnapshotDeleted,
    /// The newest producer snapshot damaged (its checksum fails).
    SnapshotDamaged,
    /// Every producer snapshot deleted: the state is replayed from the log start, over every
    /// compacted batch.
    SnapshotsAllDeleted,
    /// An unclean checkpoint whose recovery point is the log start, before every compacted
    /// segment, and that vouches for no segment.
    Unclean,
}

const TRIGGERS: [Trigger; 7] = [
    Trigger::Deep,
    Trigger::TxnIndexFlipped,
    Trigger::TxnIndexMissing,
    Trigger::SnapshotDeleted,
    Trigger::SnapshotDamaged,
    Trigger::SnapshotsAllDeleted,
    Trigger::Unclean,
];

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// Applies `trigger` to the closed log in `dir`; returns the config to open it with.
fn apply(trigger: Trigger, dir: &Path, small_map: bool) -> LogConfig {
    let mut cfg = config(small_map);
    match trigger {
        Trigger::Deep => cfg.deep_recovery = true,
        Trigger::TxnIndexFlipped | Trigger::TxnIndexMissing => {
            if let Some(p) = files_with(dir, "txnindex")
                .into_iter()
                .find(|p| std::fs::metadata(p).unwrap().len() > 0)
            {
                if let Trigger::TxnIndexMissing = trigger {
                    std::fs::remove_file(&p).unwrap();
                    make_unclean(dir);
                } else {
                    let mut bytes = std::fs::read(&p).unwrap();
                    // Entry: version (2), producer id (8), first offset (8), ...
                    bytes[10] ^= 0x80;
                    std::fs::write(&p, bytes).unwrap();
                }
            }
        }
        Trigger::SnapshotDeleted | Trigger::SnapshotDamaged => {
            let newest = files_with(dir, "snapshot").pop().expect("a snapshot");
            if let Trigger::SnapshotDeleted = trigger {
                std::fs::remove_file(&newest).unwrap();
            } else {
                let mut bytes = std::fs::read(&newest).unwrap();
                let last = bytes.len() - 1;
                bytes[last] ^= 0x01;
                std::fs::write(&newest, bytes).unwrap();
            }
        }
        Trigger::SnapshotsAllDeleted => {
            for p in files_with(dir, "snapshot") {
                std::fs::remove_file(p).unwrap();
            }
        }
        Trigger::Unclean => make_unclean(dir),
    }
    cfg
}

/// Rewrites the checkpoint as a crash would leave it with nothing flushed since the log start:
/// unclean, its recovery point before every compacted segment, vouching for no segment.
fn make_unclean(dir: &Path) {
    let fs = oncelog::io::RealFs;
    let mut cp = checkpoint::read(&fs, dir).unwrap().unwrap().unwrap();
    cp.clean_shutdown = false;
    cp.recovery_point = cp.log_start_offset;
    cp.segments = Some(Vec::new());
    checkpoint::write(&fs, dir, &cp).unwrap();
}

fn verify_clean(dir: &Path, what: &str) {
    let report = oncelog::verify::verify_dir(&oncelog::io::RealFs, dir).unwrap();
    // A damaged snapshot is set aside, never deleted: verify names it, and nothing else.
    let problems: Vec<_> = report
        .problems
        .iter()
        .filter(|p| {
            !(p.kind == "leftover" && p.file.to_string_lossy().ends_with(".snapshot.corrupt"))
        })
        .collect();
    assert!(problems.is_empty(), "{what}: verify found {problems:#?}");
}

/// One seed: write, compact, check the healthy directory, then every trigger on a copy of it.
fn sweep_one(seed: u64, small_map: bool) -> bool {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("healthy");
    let w = write_and_compact(&dir, seed, small_map);
    verify_clean(
        &dir,
        &format!("seed {seed}: the healthy compacted directory"),
    );
    let log = open_with(&dir, config(small_map));
    let end = log.log_end_offset();
    let view = committed_view(&log);
    expect_windows(&log, &w, end, &format!("seed {seed}: clean reopen"));
    log.close().unwrap();
    verify_clean(&dir, &format!("seed {seed}: after a clean reopen"));

    // The rule verify holds a compacted `.txnindex` to still finds damage: an entry whose
    // producer id lost a bit names no ABORT marker of its producer.
    if let Some(p) = files_with(&dir, "txnindex")
        .into_iter()
        .find(|p| std::fs::metadata(p).unwrap().len() > 0)
    {
        let copy = tmp.path().join("pid-flipped");
        copy_dir(&dir, &copy);
        let index = copy.join(p.file_name().unwrap());
        let mut bytes = std::fs::read(&index).unwrap();
        bytes[9] ^= 0x01;
        std::fs::write(&index, bytes).unwrap();
        let report = oncelog::verify::verify_dir(&oncelog::io::RealFs, &copy).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.kind == "bad_txn_index" && p.file == index),
            "seed {seed}: a flipped producer id in {}: {:#?}",
            index.display(),
            report.problems
        );
    }

    for trigger in TRIGGERS {
        let what = format!("seed {seed}, {trigger:?}");
        let copy = tmp.path().join(format!("{trigger:?}"));
        copy_dir(&dir, &copy);
        let cfg = apply(trigger, &copy, small_map);
        let log = open_with(&copy, cfg);
        assert_eq!(log.log_end_offset(), end, "{what}");
        // After an unclean open the high watermark is the durable end: a flush moves it on.
        log.flush().unwrap();
        same_view(&committed_view(&log), &view, &what);
        expect_windows(&log, &w, end, &what);
        log.close().unwrap();
        verify_clean(&copy, &format!("{what}: after the rebuild"));
    }

    // Truncation inside the compacted range, to a snapshot's offset no transaction spans: the
    // state there is known exactly (between snapshots, batches compaction removed are gone for
    // good, in Kafka as here: docs/design.md, "Compaction and producer state").
    let log = open_with(&dir, config(small_map));
    let cleaned = std::fs::read_to_string(dir.join(oncelog::CLEANER_OFFSET_FILE)).unwrap();
    let cleaned: i64 = cleaned.lines().nth(2).unwrap().parse().unwrap();
    let snapshots: Vec<i64> = files_with(&dir, "snapshot")
        .iter()
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect();
    let points: Vec<i64> = w
        .quiet
        .iter()
        .copied()
        .filter(|q| *q > log.log_start_offset() && *q < cleaned && snapshots.contains(q))
        .collect();
    let truncated = points.last().copied();
    if let Some(to) = truncated {
        let what = format!("seed {seed}, truncation to {to} (cleaned to {cleaned})");
        log.replica().truncate_to(to).unwrap();
        assert_eq!(log.log_end_offset(), to, "{what}");
        let kept: Vec<Rec> = view.iter().filter(|r| r.0 < to).cloned().collect();
        same_view(&committed_view(&log), &kept, &what);
        expect_windows(&log, &w, to, &what);
        log.close().unwrap();
        verify_clean(&dir, &what);
        let cfg = (config(small_map))
            .into_builder()
            .deep_recovery(true)
            .build()
            .unwrap();
        let log = open_with(&dir, cfg);
        expect_windows(&log, &w, to, &format!("{what}, then deep recovery"));
        log.close().unwrap();
    } else {
        log.close().unwrap();
    }
    truncated.is_some()
}

/// The reproduction of fault 2: deep recovery of one compacted transactional log.
#[test]
fn deep_recovery_of_a_compacted_log_with_aborted_transactions_keeps_every_window() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    let w = write_and_compact(&dir, 7, false);
    assert!(w.aborted_txns > 3);
    let end = {
        let log = open_with(&dir, config(false));
        let end = log.log_end_offset();
        log.close().unwrap();
        end
    };
    let cfg = (config(false))
        .into_builder()
        .deep_recovery(true)
        .build()
        .unwrap();
    let log = open_with(&dir, cfg);
    expect_windows(&log, &w, end, "deep recovery");
}

/// The reproduction of fault 3: verify of a healthy compacted log with aborted transactions.
#[test]
fn verify_finds_a_healthy_compacted_log_with_aborted_transactions_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    let w = write_and_compact(&dir, 7, false);
    assert!(w.aborted_txns > 3);
    verify_clean(&dir, "healthy compacted log");
}

/// The class sweep: fixed seeds, both key-map sizes (one pass per round, several), every
/// rebuild trigger.
#[test]
fn every_rebuild_of_compacted_transactional_logs_keeps_windows_reads_and_verify() {
    let mut truncated = 0;
    for seed in 1..=10u64 {
        truncated += usize::from(sweep_one(seed, seed % 3 == 0));
    }
    assert!(
        truncated >= 4,
        "only {truncated} seeds truncated inside the compacted range"
    );
}

fn kafka_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kafka-broker")
        .join(name)
}

/// A producer's epoch, open transaction and window (last sequence, last offset, offset delta
/// of each batch).
type ProducerView = (i16, Option<i64>, Vec<(i32, i64, i32)>);

/// What a rebuild must leave as it was of each producer.
fn producer_states(log: &Log) -> BTreeMap<i64, ProducerView> {
    let mut pids = std::collections::BTreeSet::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in oncelog::format::BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            if b.producer_id() >= 0 {
                pids.insert(b.producer_id());
            }
            next = b.last_offset() + 1;
        }
    }
    pids.into_iter()
        .filter_map(|pid| {
            let e = log.producer(pid)?;
            let window = e
                .batches()
                .map(|b| (b.last_seq, b.last_offset, b.offset_delta))
                .collect();
            Some((pid, (e.epoch(), e.current_txn_first_offset(), window)))
        })
        .collect()
}

/// Kafka 4.4's own compacted partitions, and its transactional one, verify clean; the
/// transactional one compacted by oncelog verifies clean too, and a deep rebuild of it keeps
/// every producer's state and what read_committed returns.
#[test]
fn kafka_partitions_compacted_with_transactions_verify_clean_and_rebuild_the_same_state() {
    for name in ["compacted-0", "__transaction_state-0", "txn-0"] {
        verify_clean(&kafka_fixture(name), &format!("Kafka's {name}"));
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txn-0");
    copy_dir(&kafka_fixture("txn-0"), &dir);
    let cfg = LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = open_with(&dir, cfg.clone());
    let before = producer_states(&log);
    let r = log.maintenance().compact(T0 + 400 * DAY).unwrap();
    assert!(r.aborted_records_removed > 0, "{r:?}");
    assert_eq!(
        producer_states(&log),
        before,
        "compaction leaves producer state alone"
    );
    let view = committed_view(&log);
    log.close().unwrap();
    verify_clean(&dir, "txn-0 compacted by oncelog");
    let log = open_with(
        &dir,
        cfg.into_builder().deep_recovery(true).build().unwrap(),
    );
    assert_eq!(
        producer_states(&log),
        before,
        "deep recovery of compacted txn-0"
    );
    same_view(
        &committed_view(&log),
        &view,
        "deep recovery of compacted txn-0",
    );
    log.close().unwrap();
    verify_clean(&dir, "txn-0 compacted, after deep recovery");
}
