//! The mutation sweep: a multi-segment log in each state a broker meets it in (closed
//! cleanly, crashed in-process, a Kafka directory without oncelog's checkpoint, and after a
//! real SIGKILL of an appending process) gets one seeded mutation of its files: a flipped byte
//! in a batch header or body, an index, a snapshot, the checkpoint or a leftover, or a segment
//! file removed, cut, extended or added. Then `verify` and every recovery mode run on it, each
//! followed by retries and a fresh append, and the contract is checked:
//!
//! - nothing panics or hangs; every failure to open is a typed refusal that changed no byte;
//! - tolerate-tail and absolute never lose an offset below the durable end; absolute cuts
//!   nothing; every mode's log is a prefix of what was there, batch for batch, except for
//!   bytes the mutation itself touched (which may read back damaged, or as a typed error);
//! - no offset is assigned twice: offsets stay dense, a fresh batch takes the log end;
//! - a duplicate answer names offsets that hold that very batch.
//!
//! `ONCELOG_MUTATION_CASES` sets the number of cases (default 240); `ONCELOG_MUTATION_SEED`
//! replays one case (a failure prints it).

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{copy_dir, dir_contents};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::sim::SplitMix64;
use oncelog::io::RealFs;
use oncelog::log::checkpoint;
use oncelog::verify::verify_dir;
use oncelog::{AppendOutcome, Log, LogConfig, OpenError, ReadError, RecoveryMode};
use oncelog::{BadMetadataFile, MetadataFile};

const CHILD: &str = "ONCELOG_SWEEP_CHILD_DIR";
const BATCHES: usize = 120;
const RECORDS: usize = 6;
const PRODUCERS: i64 = 3;
const MODES: [RecoveryMode; 3] = [
    RecoveryMode::TolerateTailCorruption,
    RecoveryMode::AbsoluteConsistency,
    RecoveryMode::TolerateAnyCorruption,
];

fn config(mode: RecoveryMode) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(12 * 1024)
        .segment_index_bytes(1024)
        .index_interval_bytes(1024)
        .snapshot_interval_bytes(6 * 1024)
        .recovery_mode(mode)
        .build()
        .unwrap()
}

/// Batch `i` of the workload: producer `1 + i % 3`, the same bytes every time. In a fresh log
/// it gets offsets `[i * 6, i * 6 + 5]`.
fn client_batch(i: usize) -> Vec<u8> {
    let pid = 1 + (i as i64 % PRODUCERS);
    let seq = (i as i64 / PRODUCERS) as i32 * RECORDS as i32;
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    for r in 0..RECORDS {
        let value = format!("batch {i} record {r} {}", "v".repeat(40));
        b.append(
            1_700_000_000_000 + (i * RECORDS + r) as i64,
            Some(format!("k{}", i % 7).as_bytes()),
            Some(value.as_bytes()),
            &[],
        );
    }
    b.build().expect("batch")
}

fn append_fresh(log: &Log, i: usize) {
    match log.append(&client_batch(i)).expect("append") {
        AppendOutcome::Appended(a) => assert_eq!(a.first_offset, (i * RECORDS) as i64),
        AppendOutcome::Duplicate(d) => panic!("fresh batch {i} a duplicate: {d:?}"),
        other => panic!("unexpected outcome: {other:?}"),
    }
}

/// The child process of the killed state: appends the workload, flushing every ten batches,
/// until it is killed.
#[test]
fn sweep_child_process() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let log = Log::open(&dir, config(RecoveryMode::default())).expect("child open");
    for i in 0..BATCHES {
        append_fresh(&log, i);
        if i % 10 == 9 {
            log.flush().expect("child flush");
        }
        println!("ACK {i}");
    }
    // Wait to be killed with the last batches unflushed.
    std::thread::sleep(Duration::from_secs(60));
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Clean,
    Crashed,
    NoCheckpoint,
    Killed,
}

/// A batch of the unmutated log, where its bytes are.
#[derive(Debug, Clone)]
struct Stored {
    first: i64,
    last: i64,
    bytes: Vec<u8>,
    segment: i64,
    position: usize,
}

/// A state's directory and what an undamaged recovery of it holds.
struct Base {
    state: State,
    dir: tempfile::TempDir,
    batches: Vec<Stored>,
    /// Offsets below this were durable: tolerate-tail and absolute must keep them.
    durable_end: i64,
}

fn build(state: State) -> Base {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(RecoveryMode::default());
    match state {
        State::Clean | State::NoCheckpoint => {
            let log = Log::open(dir.path(), cfg.clone()).unwrap();
            (0..BATCHES).for_each(|i| append_fresh(&log, i));
            log.close().unwrap();
            if state == State::NoCheckpoint {
                std::fs::remove_file(dir.path().join(checkpoint::FILE_NAME)).unwrap();
            }
        }
        State::Crashed => {
            let log = Log::open(dir.path(), cfg.clone()).unwrap();
            (0..80).for_each(|i| append_fresh(&log, i));
            log.flush().unwrap();
            (80..BATCHES).for_each(|i| append_fresh(&log, i));
            log.abandon();
        }
        State::Killed => {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "mutation_sweep::sweep_child_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            for line in out.lines() {
                if line.unwrap().starts_with(&format!("ACK {}", BATCHES - 5)) {
                    break;
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
    // What an undamaged recovery holds, and where each batch is in the files.
    let positions = batch_positions(dir.path());
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let durable_end = match checkpoint::read(&RealFs, dir.path()).unwrap().unwrap() {
        Some(c) => c.recovery_point,
        // Without a checkpoint the default mode may cut only the last segment.
        None => *positions.keys().map(|(s, _)| s).max().unwrap(),
    };
    let log = Log::open(copy.path(), cfg).unwrap();
    let batches = read_all(&log)
        .0
        .into_iter()
        .map(|(first, last, bytes)| {
            let (&(segment, position), _) = positions
                .iter()
                .find(|(_, &(f, _))| f == first)
                .expect("a recovered batch is in the files");
            Stored {
                first,
                last,
                bytes,
                segment,
                position,
            }
        })
        .collect::<Vec<_>>();
    assert!(
        batches.len() >= 60,
        "{state:?}: only {} batches",
        batches.len()
    );
    Base {
        state,
        dir,
        batches,
        durable_end,
    }
}

/// (segment base, position) → (first, last offset) of every whole batch in the `.log` files.
fn batch_positions(dir: &Path) -> BTreeMap<(i64, usize), (i64, i64)> {
    let mut out = BTreeMap::new();
    for (base, path) in segment_files(dir) {
        let data = std::fs::read(path).unwrap();
        for (at, b) in BatchIter::new(&data).map_while(Result::ok) {
            out.insert((base, at), (b.base_offset(), b.last_offset()));
        }
    }
    out
}

fn segment_files(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut v: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let digits = name.strip_suffix(".log")?;
            (digits.len() == 20).then(|| (digits.parse().ok().unwrap(), p.clone()))
        })
        .collect();
    v.sort();
    v
}

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .collect();
    v.sort();
    v
}

/// What a mutation did, and which batches of the base it touched: those may come back
/// damaged (or as a typed read error), but never move.
#[derive(Debug)]
struct Mutation {
    kind: &'static str,
    what: String,
    /// Segment base and byte position from which its batches are touched.
    touched_from: Option<(i64, usize)>,
}

fn flip(path: &Path, at: usize, rng: &mut SplitMix64) {
    let mut data = std::fs::read(path).unwrap();
    data[at] ^= 1 + rng.below(255) as u8;
    std::fs::write(path, data).unwrap();
}

fn mutate(dir: &Path, base: &Base, rng: &mut SplitMix64) -> Mutation {
    let segments = segment_files(dir);
    let (seg_base, seg_path) = segments[rng.below(segments.len() as u64) as usize].clone();
    let in_segment: Vec<&Stored> = base
        .batches
        .iter()
        .filter(|b| b.segment == seg_base)
        .collect();
    let len = std::fs::metadata(&seg_path).unwrap().len() as usize;
    loop {
        let m = match rng.below(13) {
            0 | 1 if !in_segment.is_empty() => {
                let b = in_segment[rng.below(in_segment.len() as u64) as usize];
                let at = b.position + rng.below(61) as usize;
                flip(&seg_path, at, rng);
                Mutation {
                    kind: "header flip",
                    what: format!(
                        "flip header byte {} of batch {} in {seg_base}",
                        at - b.position,
                        b.first
                    ),
                    touched_from: Some((seg_base, b.position)),
                }
            }
            2 | 3 if len > 0 => {
                let at = rng.below(len as u64) as usize;
                flip(&seg_path, at, rng);
                let from = in_segment
                    .iter()
                    .rev()
                    .find(|b| b.position <= at)
                    .map_or(at, |b| b.position);
                Mutation {
                    kind: "body flip",
                    what: format!("flip byte {at} of {seg_base}.log"),
                    touched_from: Some((seg_base, from)),
                }
            }
            4 | 5 => {
                let ext = ["index", "timeindex", "snapshot"][rng.below(3) as usize];
                let files = files_with(dir, ext);
                if files.is_empty() {
                    continue;
                }
                let f = &files[rng.below(files.len() as u64) as usize];
                let flen = std::fs::metadata(f).unwrap().len();
                let at = rng.below(flen) as usize;
                flip(f, at, rng);
                Mutation {
                    kind: "index/snapshot flip",
                    what: format!("flip byte {at} of {}", f.display()),
                    touched_from: None,
                }
            }
            6 => {
                let cp = dir.join(checkpoint::FILE_NAME);
                let Ok(meta) = std::fs::metadata(&cp) else {
                    continue;
                };
                let at = rng.below(meta.len()) as usize;
                flip(&cp, at, rng);
                Mutation {
                    kind: "checkpoint flip",
                    what: format!("flip byte {at} of the checkpoint"),
                    touched_from: None,
                }
            }
            7 => {
                // A leftover: a copy of the segment as an interrupted swap, damaged or not, or a
                // garbage .cleaned / .deleted / .tmp.
                let kind = ["log.swap", "log.cleaned", "log.deleted", "snapshot.tmp"]
                    [rng.below(4) as usize];
                let path = dir.join(format!("{seg_base:020}.{kind}"));
                std::fs::copy(&seg_path, &path).unwrap();
                let damaged = len > 0 && rng.chance(1, 2);
                if damaged {
                    let at = rng.below(len as u64) as usize;
                    flip(&path, at, rng);
                }
                Mutation {
                    kind: "leftover",
                    what: format!("leftover {kind} of {seg_base} (damaged: {damaged})"),
                    touched_from: (kind == "log.swap").then_some((seg_base, 0)),
                }
            }
            8 => {
                std::fs::remove_file(&seg_path).unwrap();
                Mutation {
                    kind: "segment removed",
                    what: format!("remove {seg_base}.log"),
                    touched_from: Some((seg_base, 0)),
                }
            }
            9 if len > 0 => {
                let at = if rng.chance(1, 2) && !in_segment.is_empty() {
                    in_segment[rng.below(in_segment.len() as u64) as usize].position
                } else {
                    rng.below(len as u64) as usize
                };
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&seg_path)
                    .unwrap()
                    .set_len(at as u64)
                    .unwrap();
                Mutation {
                    kind: "segment cut",
                    what: format!("cut {seg_base}.log at {at}"),
                    touched_from: Some((seg_base, at)),
                }
            }
            10 => {
                let extra: Vec<u8> = if rng.chance(1, 2) {
                    vec![0; 1 + rng.below(8192) as usize]
                } else {
                    (0..1 + rng.below(300))
                        .map(|_| rng.below(256) as u8)
                        .collect()
                };
                let mut data = std::fs::read(&seg_path).unwrap();
                data.extend(&extra);
                std::fs::write(&seg_path, data).unwrap();
                Mutation {
                    kind: "segment extended",
                    what: format!("extend {seg_base}.log by {} bytes", extra.len()),
                    touched_from: Some((seg_base, len)),
                }
            }
            11 => {
                let end = base.batches.last().map_or(0, |b| b.last + 1);
                let at = if rng.chance(1, 2) {
                    end + rng.below(1000) as i64
                } else {
                    seg_base + 1 + rng.below(5) as i64
                };
                let path = dir.join(format!("{at:020}.log"));
                if path.exists() {
                    continue;
                }
                let content: Vec<u8> = (0..rng.below(200)).map(|_| rng.below(256) as u8).collect();
                std::fs::write(&path, content).unwrap();
                Mutation {
                    kind: "segment added",
                    what: format!("add {at}.log"),
                    touched_from: None,
                }
            }
            12 => {
                let ext = ["index", "timeindex", "snapshot"][rng.below(3) as usize];
                let files = files_with(dir, ext);
                if files.is_empty() {
                    continue;
                }
                let f = &files[rng.below(files.len() as u64) as usize];
                std::fs::remove_file(f).unwrap();
                Mutation {
                    kind: "index/snapshot removed",
                    what: format!("remove {}", f.display()),
                    touched_from: None,
                }
            }
            _ => continue,
        };
        return m;
    }
}

fn touched(m: &Mutation, b: &Stored) -> bool {
    m.touched_from
        .is_some_and(|(seg, from)| b.segment == seg && b.position + b.bytes.len() > from)
}

/// Every batch from the log start, and the read error that stopped the walk, if any.
#[allow(clippy::type_complexity)]
fn read_all(log: &Log) -> (Vec<(i64, i64, Vec<u8>)>, Option<(i64, ReadError)>) {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = match log.read(next, 64 * 1024) {
            Ok(b) => b,
            Err(e) => return (out, Some((next, e))),
        };
        if bytes.is_empty() {
            return (out, Some((next, ReadError::Closed)));
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.expect("reads return whole batches");
            out.push((b.base_offset(), b.last_offset(), b.as_bytes().to_vec()));
            // A gap or an overlap is judged by the caller, who knows the case.
            if b.base_offset() < next {
                return (out, None);
            }
            next = b.last_offset() + 1;
        }
    }
    (out, None)
}

/// Runs `f` on another thread and fails the case if it does not finish: recovery must never
/// wait on anything (a FIFO, a lock held by itself).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: no answer in 60 s (a hang)"))
}

/// How one recovery mode met one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Refused,
    OpenedAsIs,
    OpenedCut,
}

fn run_case(base: &Base, seed: u64) -> (&'static str, Vec<Outcome>) {
    let mut rng = SplitMix64::new(seed);
    let mutated = tempfile::tempdir().unwrap();
    copy_dir(base.dir.path(), mutated.path());
    let m = mutate(mutated.path(), base, &mut rng);
    let ctx = format!(
        "state {:?}, seed {seed}: {}\nreplay: ONCELOG_MUTATION_SEED={seed} cargo test --test crash mutation_sweep::",
        base.state, m.what
    );
    // A replay can keep the mutated directory to look at.
    if let Ok(keep) = std::env::var("ONCELOG_MUTATION_KEEP") {
        copy_dir(mutated.path(), Path::new(&keep));
    }
    let dir = mutated.path().to_path_buf();
    within(&ctx, move || verify_dir(&RealFs, &dir).map(|_| ()))
        .unwrap_or_else(|e| panic!("{ctx}\nverify: {e}"));
    let mut outcomes = Vec::new();
    for mode in MODES {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(mutated.path(), copy.path());
        let before = dir_contents(copy.path());
        let path = copy.path().to_path_buf();
        let opened = within(&ctx, move || Log::open(&path, config(mode)));
        match opened {
            Ok(log) => {
                let cut = !log.recovery_report().truncations.is_empty();
                check_open(base, &m, &log, mode, &ctx);
                outcomes.push(if cut {
                    Outcome::OpenedCut
                } else {
                    Outcome::OpenedAsIs
                });
            }
            Err(
                e @ (OpenError::Refused { .. }
                | OpenError::BadMetadataFile(BadMetadataFile {
                    file: MetadataFile::Checkpoint,
                    ..
                })),
            ) => {
                outcomes.push(Outcome::Refused);
                if dir_contents(copy.path()) != before {
                    panic!("{ctx}\n{mode:?}: the refusal ({e}) changed files");
                }
                if mode == RecoveryMode::TolerateAnyCorruption
                    && matches!(e, OpenError::Refused { .. })
                {
                    panic!("{ctx}\ntolerate-any refused instead of cutting: {e}");
                }
            }
            Err(e) => panic!("{ctx}\n{mode:?}: untyped failure to open: {e}"),
        }
    }
    (m.kind, outcomes)
}

fn check_open(base: &Base, m: &Mutation, log: &Log, mode: RecoveryMode, ctx: &str) {
    let fail = |msg: String| -> ! {
        panic!(
            "{ctx}\n{mode:?}: {msg}\nreport: {:?}",
            log.recovery_report()
        )
    };
    let (read, error) = read_all(log);
    // Without a checkpoint the log may start later (retention looks the same as a removed
    // first segment) and have gaps between segments (compaction's look the same as a lost
    // one's): its batches must then be a subsequence of the base's, each at its offsets. With a
    // checkpoint, offsets are dense and the log is a prefix of the base.
    let gaps_allowed = base.state == State::NoCheckpoint;
    let mut next = log.log_start_offset();
    for (first, last, _) in &read {
        if *first < next || (*first > next && !gaps_allowed) {
            fail(format!(
                "offsets not dense: {first} read where {next} was next"
            ));
        }
        next = last + 1;
    }
    if let Some((at, ReadError::Closed)) = &error {
        fail(format!("empty read at {at} below the log end"));
    }
    // What the mutation touched may read back different.
    let mut k = 0;
    for (first, last, bytes) in &read {
        while gaps_allowed && k < base.batches.len() && base.batches[k].first < *first {
            if !touched(m, &base.batches[k]) && base.batches[k].first >= log.log_start_offset() {
                fail(format!(
                    "batch at {} is missing though untouched",
                    base.batches[k].first
                ));
            }
            k += 1;
        }
        let Some(b) = base.batches.get(k) else {
            fail(format!("batch at {first} was never in the log"));
        };
        // Without a checkpoint a flipped base offset that moves a batch into a gap cannot be
        // told from a gap compaction left (no checksum covers it, and Kafka's own recovery does
        // not notice either): the batch may come back at other offsets, its other bytes intact.
        let moved = gaps_allowed
            && touched(m, b)
            && bytes.len() == b.bytes.len()
            && bytes[8..] == b.bytes[8..];
        if (b.first, b.last) != (*first, *last) && !moved {
            fail(format!(
                "batch {k} at {first}..={last}, was {}..={}",
                b.first, b.last
            ));
        }
        if *bytes != b.bytes && !touched(m, b) {
            fail(format!(
                "batch at {first} changed though the mutation did not touch it"
            ));
        }
        k += 1;
    }
    let skip = if gaps_allowed {
        base.batches
            .iter()
            .take_while(|b| b.first < log.log_start_offset())
            .count()
    } else {
        0
    };
    let batches = &base.batches[skip..];
    if let Some((at, e)) = &error {
        // A damaged header is found where its offsets stop making sense: at the batch itself
        // or at the one after it, in the same segment.
        let segment = base
            .batches
            .iter()
            .find(|b| b.first <= *at && *at <= b.last)
            .map(|b| b.segment);
        let damaged = base
            .batches
            .iter()
            .any(|b| Some(b.segment) == segment && touched(m, b));
        if !damaged {
            fail(format!(
                "read at {at} failed though the mutation touched nothing there: {e}"
            ));
        }
    }
    let end = log.log_end_offset();
    if mode != RecoveryMode::TolerateAnyCorruption && end < base.durable_end {
        fail(format!(
            "log end {end} below the durable end {}",
            base.durable_end
        ));
    }
    if mode == RecoveryMode::AbsoluteConsistency && !log.recovery_report().truncations.is_empty() {
        fail("absolute consistency cut damaged bytes".into());
    }
    // Retries: each batch still held is a duplicate of itself; a batch no longer held is never
    // answered as a duplicate.
    // The log holds the base's batches below its end (read back above, as far as a damaged
    // header let the walk go): the last of them are in their producers' windows.
    let held = batches.iter().take_while(|b| b.last < end).count();
    let readable = error.is_none();
    for b in batches.iter().skip(held.saturating_sub(4)).take(6) {
        let client = client_batch((b.first / RECORDS as i64) as usize);
        let present = read.iter().any(|r| r.0 == b.first) || (!readable && b.last < end);
        match log.append(&client) {
            Ok(AppendOutcome::Duplicate(d)) => {
                if !present && readable {
                    fail(format!(
                        "retry of the lost batch {} answered as a duplicate at {d:?}",
                        b.first
                    ));
                }
                if (d.first_offset, d.last_offset) != (b.first, b.last) {
                    fail(format!("retry of {} answered with {d:?}", b.first));
                }
            }
            Ok(AppendOutcome::Appended(a)) => {
                if present {
                    fail(format!(
                        "batch {} stored twice, again at {}",
                        b.first, a.first_offset
                    ));
                }
                break;
            }
            Err(e) => {
                if present {
                    fail(format!("retry of the held batch {} refused: {e}", b.first));
                }
                break;
            }
            Ok(other) => panic!("unexpected outcome: {other:?}"),
        }
    }
    let end = log.log_end_offset();
    let mut fresh = BatchBuilder::new();
    fresh.append(1_700_000_000_000, None, Some(b"fresh"), &[]);
    match log.append(&fresh.build().unwrap()) {
        Ok(AppendOutcome::Appended(a)) if a.first_offset == end => {}
        other => fail(format!("a fresh batch at log end {end}: {other:?}")),
    }
    if let Err(e) = log.close() {
        fail(format!("close: {e}"));
    }
}

#[test]
fn mutated_logs_keep_the_contract_in_every_recovery_mode() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let cases: u64 = std::env::var("ONCELOG_MUTATION_CASES")
        .map(|v| v.parse().expect("ONCELOG_MUTATION_CASES"))
        .unwrap_or(240);
    let only: Option<u64> = std::env::var("ONCELOG_MUTATION_SEED")
        .ok()
        .map(|v| v.parse().expect("ONCELOG_MUTATION_SEED"));
    let states = [
        State::Clean,
        State::Crashed,
        State::NoCheckpoint,
        State::Killed,
    ];
    let bases: Vec<Base> = states.iter().map(|&s| build(s)).collect();
    let mut states: BTreeMap<&'static str, u64> = BTreeMap::new();
    // Per mutation kind, per mode: refused, opened as it was, opened by cutting.
    let mut table: BTreeMap<&'static str, [[u64; 3]; 3]> = BTreeMap::new();
    // A replayed seed runs alone, whatever the case count.
    let seeds = match only {
        Some(seed) => seed..seed + 1,
        None => 0..cases,
    };
    for seed in seeds {
        let base = &bases[(seed % bases.len() as u64) as usize];
        let (kind, outcomes) = run_case(base, seed);
        *states.entry(state_name(base.state)).or_default() += 1;
        let row = table.entry(kind).or_default();
        for (mode, outcome) in outcomes.iter().enumerate() {
            row[mode][*outcome as usize] += 1;
        }
    }
    eprintln!(
        "mutation sweep: {} cases by state {states:?}",
        states.values().sum::<u64>()
    );
    eprintln!("kind | tolerate-tail (refused/as is/cut) | absolute | tolerate-any");
    for (kind, row) in &table {
        let cell = |m: usize| format!("{}/{}/{}", row[m][0], row[m][1], row[m][2]);
        eprintln!("{kind} | {} | {} | {}", cell(0), cell(1), cell(2));
    }
}

fn state_name(s: State) -> &'static str {
    match s {
        State::Clean => "clean",
        State::Crashed => "crashed",
        State::NoCheckpoint => "no checkpoint",
        State::Killed => "killed",
    }
}
