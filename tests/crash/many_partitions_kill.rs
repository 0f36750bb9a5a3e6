//! Real crashes of a log manager over 1,000 partitions (issue 28, item 4): a child process,
//! held to `ulimit -n` 1024, opens the log dir, creates the 1,000 partitions with
//! `LogManager::create_many` (its first round; later rounds reopen the same dir, recovering all
//! of them after the last kill), and, with every background job running every 50 ms, runs 8
//! appender threads under `FlushPolicy::Always`, each owning an eighth of the partitions and
//! appending an idempotent batch to each in turn, so many partitions sync at once and each
//! append returns only once its batch is durable (its recovery point past the batch, which the
//! child checks: a SIGKILL keeps the page cache, synced or not). The child prints a line per
//! acknowledged batch; the parent kills it with SIGKILL at a random moment, by round: while
//! creating the partitions (first round) or starting its appenders, in the middle of the
//! appends, or while it opens and recovers the dir. Every other cycle of four rounds the child
//! reserves its segments' space (`Preallocation::Reserved`) instead of having zeros written
//! ahead of its appenders (`Zeroed`, what `FlushPolicy::Always` picks).
//!
//! The parent then reopens the dir and checks every partition: it opens; its batches are dense
//! from offset 0 and are the ones its producer sent, in order, each once (a batch's offsets are
//! its producer's sequence numbers); every acknowledged batch is there at its offsets; a retry
//! of each batch still in its producer's dedup window is a duplicate with the original offsets;
//! neither the partition's own checkpoint nor the log dir's `recovery-point-offset-checkpoint`
//! (read before the reopen) puts its recovery point past its data, and recovery found no damage
//! below it; a partition appended in the round is not taken for cleanly closed. The reopen's
//! `ManagerOpenReport` must agree with the dir (every partition, none failed, its segments and
//! offsets, the clean marker), and the reopened manager holds a handful of descriptors, not one
//! per partition. The parent closes cleanly after even rounds and drops (a crash) after odd ones.
//!
//! `ONCELOG_MANY_KILL_ROUNDS` sets the rounds (default 8), `ONCELOG_MANY_KILL_PARTITIONS` the
//! partitions (default 1,000).

use crate::common;
use crate::common_sim::{env_u64, DEDUP_WINDOW};

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncelog::format::RecordBatch;
use oncelog::io::sim::SplitMix64;
use oncelog::{
    AppendOutcome, FlushPolicy, Log, LogConfig, LogManager, ManagerConfig, ManagerOpenReport,
    PartitionConfig, Preallocation, TopicPartition,
};

const TOPIC: &str = "many";
const THREADS: usize = 8;
const RECORDS: i32 = 2;
/// The child's soft limit on open files: the default of most systems.
const FD_LIMIT: u64 = 1024;
const CHILD_DIR: &str = "ONCELOG_MANY_KILL_DIR";
const CHILD_PARTITIONS: &str = "ONCELOG_MANY_KILL_CHILD_PARTITIONS";
/// Where each appender thread starts in its list of partitions (so rounds killed early in the
/// appends do not always reach the same ones).
const CHILD_START: &str = "ONCELOG_MANY_KILL_CHILD_START";
/// `1`: the child reserves segment space (`Preallocation::Reserved`) instead of writing zeros
/// ahead of its appenders (`Zeroed`, what `FlushPolicy::Always` picks).
const CHILD_RESERVED: &str = "ONCELOG_MANY_KILL_CHILD_RESERVED";

fn config(jobs: bool, reserved: bool) -> ManagerConfig {
    // Small segments, so partitions roll and their flushes write checkpoints with recovery
    // points. In the child every background job runs every 50 ms over the 1,000 partitions
    // (the checkpoint job writing the log dir's recovery points among them).
    let every = jobs.then_some(Duration::from_millis(50));
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(2 << 10)
                .segment_index_bytes(1024)
                .snapshot_interval_bytes(1 << 10)
                .prefault_bytes(0)
                .preallocation(if reserved {
                    Preallocation::Reserved
                } else {
                    Preallocation::Auto
                })
                .flush_policy(FlushPolicy::Always)
                .build()
                .unwrap(),
        )
        .with_jobs(common::every_job(every))
        .with_recovery_threads(4)
}

/// The batch producer `partition + 1` sends at `seq` into its partition (the same bytes every
/// time, so a retry is exact; in 2096, so the child's retention job deletes nothing).
fn batch(partition: i32, seq: i32) -> Vec<u8> {
    common::producer_batch_in_2096(partition, seq, RECORDS)
}

/// The child's soft limit on open files, from `/proc/self/limits`.
fn open_files_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// One appender thread: its partitions in turn, from `start`, a batch each, for ever.
fn append_forever(logs: &[Arc<Log>], mine: &[i32], start: usize) {
    let mut next: BTreeMap<i32, i32> = mine
        .iter()
        .map(|&p| {
            let seq = logs[p as usize]
                .producer(p as i64 + 1)
                .map_or(0, |e| e.last_seq() + 1);
            (p, seq)
        })
        .collect();
    for i in start.. {
        let p = mine[i % mine.len()];
        let seq = next[&p];
        let log = &logs[p as usize];
        match log.append(&batch(p, seq)).expect("child append") {
            AppendOutcome::Appended(info) => {
                // A SIGKILL keeps what is in the page cache, synced or not: that the batch was
                // synced before the append returned is the recovery point's to say.
                assert!(
                    log.recovery_point() > info.last_offset,
                    "p{p} seq {seq}: acknowledged at {}..={} under FlushPolicy::Always with the \
                     recovery point at {}",
                    info.first_offset,
                    info.last_offset,
                    log.recovery_point()
                );
                println!("ACK {p} {seq} {} {}", info.first_offset, info.last_offset)
            }
            other => panic!("p{p} seq {seq}: unexpected outcome {other:?}"),
        }
        next.insert(p, seq + RECORDS);
    }
}

fn run_child(dir: &Path, partitions: i32, start: usize, reserved: bool) {
    // A panic anywhere ends the process, so the parent sees it (the other appenders would
    // otherwise go on acknowledging until the kill).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    assert!(
        open_files_limit() <= FD_LIMIT,
        "the child runs under ulimit -n {FD_LIMIT}"
    );
    println!("STARTED");
    let m = LogManager::open(&[dir], config(true, reserved)).expect("child opens");
    if let Some((tp, f)) = m.open_report().failures().next() {
        panic!("child: {tp} did not open: {f}");
    }
    println!("OPENED");
    let missing: Vec<(TopicPartition, PartitionConfig)> = (0..partitions)
        .filter(|&p| m.get(TOPIC, p).is_err())
        .map(|p| (TopicPartition::new(TOPIC, p), PartitionConfig::default()))
        .collect();
    m.create_many(&missing).expect("child creates");
    let logs: Vec<Arc<Log>> = (0..partitions)
        .map(|p| m.get(TOPIC, p).expect("child gets"))
        .collect();
    println!("READY");
    let threads = THREADS.min(partitions as usize);
    std::thread::scope(|s| {
        for t in 0..threads {
            let mine: Vec<i32> = (0..partitions)
                .filter(|p| *p as usize % threads == t)
                .collect();
            let logs = &logs;
            s.spawn(move || append_forever(logs, &mine, start));
        }
    });
}

/// Entry point of the child; without the variable it does nothing.
#[test]
fn many_partitions_child_process() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let partitions = env_u64(CHILD_PARTITIONS).unwrap() as i32;
        let start = env_u64(CHILD_START).unwrap() as usize;
        let reserved = env_u64(CHILD_RESERVED) == Some(1);
        run_child(Path::new(&dir), partitions, start, reserved);
    }
}

/// A line of the child. libtest prints `test <name> ... ` without a newline before the child's
/// first line, so a marker may follow other text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Started,
    Opened,
    Ready,
    Ack(Ack),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ack {
    partition: i32,
    seq: i32,
    first: i64,
    last: i64,
}

fn parse(line: &str) -> Option<Line> {
    if line.ends_with("STARTED") {
        return Some(Line::Started);
    }
    if line.ends_with("OPENED") {
        return Some(Line::Opened);
    }
    if line.ends_with("READY") {
        return Some(Line::Ready);
    }
    let f: Vec<i64> = line[line.find("ACK ")? + 4..]
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 4).then(|| {
        Line::Ack(Ack {
            partition: f[0] as i32,
            seq: f[1] as i32,
            first: f[2],
            last: f[3],
        })
    })
}

/// A random duration below `d`.
fn below(rng: &mut SplitMix64, d: Duration) -> Duration {
    Duration::from_micros(rng.below((d.as_micros() as u64).max(1)))
}

/// When a round's kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// After the open: in the first round while the partitions are created, later while the
    /// appenders look up their producers and start.
    Creating,
    /// After a random number of acknowledged batches.
    Appending,
    /// At a random moment of its open (while it recovers the partitions), or just after.
    Opening,
}

impl Moment {
    fn of(round: usize) -> Moment {
        match round % 4 {
            0 => Moment::Creating,
            2 => Moment::Opening,
            _ => Moment::Appending,
        }
    }
}

/// Whether the child of `round` reserves segment space: every other cycle of the moments.
fn reserved(round: usize) -> bool {
    (round / 4) % 2 == 1
}

/// How long the phases of the child take: where the next early kills aim.
#[derive(Debug, Clone, Copy)]
struct Phases {
    /// The open, with the recovery of every partition: the parent's last reopen of the same
    /// dir, which the parent then closed or dropped (so a crash's when the next child recovers).
    open: Duration,
    /// From `OPENED` to `READY`, the latest: creating the partitions missing (all of them in
    /// the first round, none once they are all there) and getting their logs.
    create: Duration,
}

/// What one round's child did before it was killed.
struct Round {
    /// When the kill was sent, from the spawn.
    killed_at: Duration,
    started: bool,
    opened: Option<Instant>,
    ready: bool,
    acks: Vec<Ack>,
}

impl Round {
    /// Takes in a line of the child, timing its phases.
    fn take(&mut self, line: &str, phases: &mut Phases) {
        let now = Instant::now();
        match parse(line) {
            Some(Line::Started) => self.started = true,
            Some(Line::Opened) => self.opened = Some(now),
            Some(Line::Ready) => {
                if let Some(at) = self.opened {
                    phases.create = now - at;
                }
                self.ready = true;
            }
            Some(Line::Ack(a)) => self.acks.push(a),
            None => {}
        }
    }
}

fn spawn_child(dir: &Path, partitions: i32, start: usize, reserved: bool, stderr: &Path) -> Child {
    let exe = std::env::current_exe().unwrap();
    // The shell lowers the soft limit and becomes the child (`exec`), so the pid killed is the
    // test binary's.
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -Sn {FD_LIMIT} && exec \"$@\""))
        .arg("sh")
        .arg(exe)
        .args([
            "--exact",
            "many_partitions_kill::many_partitions_child_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_PARTITIONS, partitions.to_string())
        .env(CHILD_START, start.to_string())
        .env(CHILD_RESERVED, (reserved as u8).to_string())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("spawn child")
}

/// Runs one child and kills it at `moment`: what it printed, and when it was killed. Updates
/// `phases` with the times it took.
fn run_round(
    dir: &Path,
    partitions: i32,
    round: usize,
    moment: Moment,
    rng: &mut SplitMix64,
    phases: &mut Phases,
    stderr: &Path,
) -> Round {
    let start = rng.below(1_000) as usize;
    let aim = *phases;
    let spawned = Instant::now();
    let mut child = spawn_child(dir, partitions, start, reserved(round), stderr);
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut r = Round {
        killed_at: Duration::ZERO,
        started: false,
        opened: None,
        ready: false,
        acks: Vec::new(),
    };
    // Reads lines until `done` says the moment has come (or the child's output ends).
    let mut read_until = |r: &mut Round, done: &dyn Fn(&Round) -> bool| {
        while !done(r) {
            let Some(Ok(line)) = out.next() else { break };
            r.take(&line, phases);
        }
    };
    match moment {
        Moment::Opening => {
            read_until(&mut r, &|r| r.started);
            std::thread::sleep(below(rng, aim.open));
        }
        Moment::Creating => {
            read_until(&mut r, &|r| r.opened.is_some());
            std::thread::sleep(below(rng, aim.create));
        }
        Moment::Appending => {
            let kill_after = 1 + rng.below(2 * partitions as u64) as usize;
            read_until(&mut r, &|r| r.acks.len() >= kill_after);
            // Land the kill at a random moment, often in the middle of appends and syncs.
            std::thread::sleep(below(rng, Duration::from_millis(5)));
        }
    }
    r.killed_at = spawned.elapsed();
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    // Lines the child printed before dying are acknowledged too.
    for line in out.map_while(Result::ok) {
        r.take(&line, phases);
    }
    if status.signal() != Some(libc::SIGKILL) {
        panic!(
            "round {round}: the child ended before the kill, {status}:\n{}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    }
    if moment == Moment::Appending {
        assert!(!r.acks.is_empty(), "round {round}: nothing acknowledged");
    }
    r
}

/// What the parent learnt of one reopen, for the round's summary line.
struct Checked {
    partitions: usize,
    records: i64,
    open: Duration,
    check: Duration,
    clean: usize,
    validated: u64,
    /// Retries answered as duplicates.
    retried: usize,
}

/// Names the round and partition of a failing check that panics without them (the shared
/// helpers').
struct Context(usize, i32);

impl Drop for Context {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("(round {}, partition {TOPIC}-{})", self.0, self.1);
        }
    }
}

/// Reopens the dir and checks every partition and the open's report against `acked` (every
/// acknowledged batch so far, by partition); `acked_now` are the partitions appended in this
/// round, `created` whether some child has created every partition.
fn check(
    dir: &Path,
    partitions: i32,
    acked: &BTreeMap<i32, Vec<Ack>>,
    acked_now: &BTreeSet<i32>,
    created: bool,
    round: usize,
) -> Checked {
    let points_file = dir.join(oncelog::log_dir::RECOVERY_POINTS);
    let dir_points = match std::fs::read(&points_file) {
        Ok(bytes) => oncelog::log_dir::decode_offset_checkpoint(&points_file, &bytes)
            .unwrap_or_else(|e| panic!("round {round}: {e}")),
        Err(_) => Default::default(),
    };
    let m = LogManager::open(&[dir], config(false, false))
        .unwrap_or_else(|e| panic!("round {round}: reopen: {e}"));
    let started = Instant::now();
    let report = m.open_report();
    let present = check_report(dir, &m, report, acked_now, round);
    if created {
        assert_eq!(present.len(), partitions as usize, "round {round}");
    }
    let (mut records, mut retried) = (0, 0);
    for p in 0..partitions {
        let _context = Context(round, p);
        let Some(opened) = present.get(&p) else {
            // A create the kill interrupted: never acknowledged.
            assert!(!acked.contains_key(&p), "round {round}: {TOPIC}-{p} lost");
            continue;
        };
        let log = m.get(TOPIC, p).unwrap();
        let end = log.log_end_offset();
        records += end;
        // What the log holds: its producer's batches from sequence 0, each once, at the
        // offsets of their sequence numbers, byte for byte as sent.
        let held = common::read_all(&log, 1 << 20);
        for (k, stored) in held.iter().enumerate() {
            let b = common::parse(stored);
            let seq = k as i32 * RECORDS;
            assert!(
                b.base_offset() == seq as i64
                    && b.producer_id() == p as i64 + 1
                    && b.base_sequence() == seq
                    && common::same_except_offset_and_epoch(stored, &batch(p, seq)),
                "round {round}: {TOPIC}-{p}'s batch {k} is not producer {}'s sequence {seq} at \
                 offset {seq}: {}",
                p + 1,
                describe(&b)
            );
        }
        assert_eq!(
            end,
            held.len() as i64 * RECORDS as i64,
            "round {round}: {TOPIC}-{p}"
        );
        for a in acked.get(&p).into_iter().flatten() {
            assert!(
                a.first == a.seq as i64 && a.last == a.first + RECORDS as i64 - 1 && a.last < end,
                "round {round}: acknowledged {a:?} is not in {TOPIC}-{p}, which ends at {end}"
            );
        }
        // A retry of each batch in the window (acknowledged, or durable before the kill took
        // the acknowledgement) is a duplicate with its offsets.
        let window = (held.len() as i32).min(DEDUP_WINDOW as i32);
        for k in held.len() as i32 - window..held.len() as i32 {
            let seq = k * RECORDS;
            match log.append(&batch(p, seq)) {
                Ok(AppendOutcome::Duplicate(d)) => {
                    assert_eq!(
                        (d.first_offset, d.last_offset),
                        (seq as i64, (seq + RECORDS - 1) as i64),
                        "round {round}: {TOPIC}-{p} retry of seq {seq}"
                    );
                    retried += 1;
                }
                other => panic!("round {round}: {TOPIC}-{p} retry of seq {seq}: {other:?}"),
            }
        }
        // No recovery point passes the durable data: not the partition's checkpoint's, not
        // the log dir's, not the reopened log's.
        let recovery = log.recovery_report();
        let tp = TopicPartition::new(TOPIC, p);
        let dir_point = dir_points.get(&tp).copied().unwrap_or(0);
        assert!(
            recovery.recovery_point <= end && dir_point <= end && log.recovery_point() <= end,
            "round {round}: {TOPIC}-{p} ends at {end}, its checkpoint's recovery point is {}, \
             the log dir's {dir_point}, the log's {}",
            recovery.recovery_point,
            log.recovery_point()
        );
        assert!(
            !recovery.deep && recovery.checkpoint_damaged.is_none(),
            "round {round}: {TOPIC}-{p}: damage below the recovery point: {recovery:?}"
        );
        if acked_now.contains(&p) {
            assert!(
                !recovery.clean_shutdown,
                "round {round}: {TOPIC}-{p} was appended to, yet found closed cleanly"
            );
        }
        assert_eq!(
            (opened.log_start_offset, opened.log_end_offset),
            (0, end),
            "round {round}: {TOPIC}-{p}: the open report's offsets"
        );
    }
    let checked = Checked {
        partitions: present.len(),
        records,
        open: report.duration,
        check: started.elapsed(),
        clean: report.clean(),
        validated: report.bytes_validated(),
        retried,
    };
    // Both ways out for the next child: a clean close, or a crash of the parent.
    if round.is_multiple_of(2) {
        m.close()
            .unwrap_or_else(|e| panic!("round {round}: close: {e}"));
    } else {
        drop(m);
    }
    checked
}

fn describe(b: &RecordBatch<'_>) -> String {
    format!(
        "offsets {}..={}, producer {} sequence {}",
        b.base_offset(),
        b.last_offset(),
        b.producer_id(),
        b.base_sequence()
    )
}

/// Checks the open report against the dir and the manager, and returns each partition's
/// opening by number.
fn check_report<'a>(
    dir: &Path,
    m: &LogManager,
    report: &'a ManagerOpenReport,
    acked_now: &BTreeSet<i32>,
    round: usize,
) -> BTreeMap<i32, &'a oncelog::PartitionOpened> {
    if let Some((tp, f)) = report.failures().next() {
        panic!("round {round}: {tp} did not open: {f}");
    }
    let [log_dir] = &report.log_dirs[..] else {
        panic!("round {round}: {:?}", report.log_dirs)
    };
    assert!(
        log_dir.deleted.is_empty() && log_dir.ignored.is_empty() && !log_dir.meta_written,
        "round {round}: {log_dir:?}"
    );
    // The child removes the clean-shutdown marker before it changes anything.
    assert!(
        acked_now.is_empty() || !log_dir.clean_shutdown,
        "round {round}: the child appended, and the log dir was found closed cleanly"
    );
    // Every partition directory on disk, opened, and no other.
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let reported: BTreeSet<String> = report
        .partitions
        .iter()
        .map(|r| r.partition.dir_name())
        .collect();
    assert_eq!(reported, on_disk, "round {round}: partitions opened");
    assert_eq!(report.opened(), report.partitions.len(), "round {round}");
    assert_eq!(m.list().len(), report.partitions.len(), "round {round}");
    assert_eq!(
        report.threads,
        m.config().recovery_threads.clamp(1, on_disk.len().max(1)),
        "round {round}"
    );
    assert!(
        report
            .partitions
            .windows(2)
            .all(|w| w[0].partition < w[1].partition),
        "round {round}: the report's partitions are in order"
    );
    let mut opened = BTreeMap::new();
    for r in &report.partitions {
        assert_eq!(r.partition.topic, TOPIC, "round {round}");
        assert_eq!(r.dir, dir.join(r.partition.dir_name()), "round {round}");
        let o = r.outcome.as_ref().unwrap();
        let segments = common::log_files(&r.dir).len();
        assert_eq!(
            o.segments, segments,
            "round {round}: {} has {segments} segments",
            r.partition
        );
        opened.insert(r.partition.partition, o);
    }
    // Idle partitions hold no descriptor: a handful for the whole dir, not one a partition.
    let held = common::descriptors_under(dir);
    assert!(
        held < 32,
        "round {round}: {held} descriptors held under the log dir"
    );
    opened
}

#[test]
fn sigkill_over_a_thousand_partitions_loses_no_acknowledged_batch() {
    let rounds = env_u64("ONCELOG_MANY_KILL_ROUNDS").unwrap_or(8) as usize;
    let partitions = env_u64("ONCELOG_MANY_KILL_PARTITIONS").unwrap_or(1_000) as i32;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let stderr = tmp.path().join("child.stderr");
    let mut rng = SplitMix64::new(0x1000);
    let mut phases = Phases {
        open: Duration::from_millis(300),
        create: Duration::from_secs(2),
    };
    let mut acked: BTreeMap<i32, Vec<Ack>> = BTreeMap::new();
    let mut created = false;
    let mut total_acks = 0;
    let started = Instant::now();
    for round in 0..rounds {
        let moment = Moment::of(round);
        let r = run_round(
            &dir,
            partitions,
            round,
            moment,
            &mut rng,
            &mut phases,
            &stderr,
        );
        created |= r.ready;
        let acks = r.acks.len();
        total_acks += acks;
        let acked_now: BTreeSet<i32> = r.acks.iter().map(|a| a.partition).collect();
        for a in r.acks {
            acked.entry(a.partition).or_default().push(a);
        }
        let c = check(&dir, partitions, &acked, &acked_now, created, round);
        phases.open = c.open;
        eprintln!(
            "round {round} ({moment:?}{}): child killed at {:.3} s (opened: {}, ready: {}), {} batches \
             acknowledged over {} partitions; reopen of {} partitions {:.2} s ({} clean, {} \
             bytes validated), {} records, {} retries duplicates, checks {:.2} s",
            if reserved(round) { ", space reserved" } else { "" },
            r.killed_at.as_secs_f64(),
            r.opened.is_some(),
            r.ready,
            acks,
            acked_now.len(),
            c.partitions,
            c.open.as_secs_f64(),
            c.clean,
            c.validated,
            c.records,
            c.retried,
            c.check.as_secs_f64(),
        );
    }
    eprintln!(
        "{rounds} rounds over {partitions} partitions in {:.1} s, {total_acks} batches acknowledged",
        started.elapsed().as_secs_f64()
    );
    assert!(created, "some child created every partition");
    assert!(total_acks > 0, "something was acknowledged");
}
