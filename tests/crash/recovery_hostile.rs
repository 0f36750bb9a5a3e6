//! Recovery against a hostile disk and a careless operator: each rule that recovery keeps, as
//! the damage that broke it. The log is the one the reproductions were found on (`oncelog
//! bench --messages 3000 --batch-size 10 --segment-bytes 100000 --producers 2`: segments 0,
//! 860, 1720, 2580, log end 3000), built through the library so each batch can be retried.
//! "Unclean" is the checkpoint's clean flag set to 0, the state a crash leaves.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{dir_contents, read_all};
use oncelog::format::{BatchBuilder, RecordBatch};
use oncelog::io::RealFs;
use oncelog::log::checkpoint::reseal;
use oncelog::verify::verify_dir;
use oncelog::{AppendError, AppendOutcome, FlushPolicy, Log, LogConfig, OpenError, RecoveryMode};
use oncelog::{BadMetadataFile, MetadataFile};
use oncelog::{BatchProblem, Damage, ReadError};

const MODES: [RecoveryMode; 3] = [
    RecoveryMode::TolerateTailCorruption,
    RecoveryMode::AbsoluteConsistency,
    RecoveryMode::TolerateAnyCorruption,
];

fn config(mode: RecoveryMode) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(100_000)
        .recovery_mode(mode)
        .build()
        .unwrap()
}

/// One appended client batch: what the producer sent and where it went.
#[derive(Clone)]
struct Sent {
    client: Vec<u8>,
    first: i64,
    last: i64,
}

struct Fixture {
    dir: tempfile::TempDir,
    sent: Vec<Sent>,
}

impl Fixture {
    /// The issue's log, closed cleanly.
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), config(RecoveryMode::default())).unwrap();
        let mut sent = Vec::new();
        for i in 0..300 {
            let pid = 1 + (i % 2);
            let seq = (i / 2) as i32 * 10;
            let mut b = BatchBuilder::new().producer(pid, 0, seq);
            for r in 0..10 {
                b.append(
                    1_700_000_000_000 + i * 10 + r,
                    None,
                    Some(&[b'v'; 100][..]),
                    &[],
                );
            }
            let client = b.build().unwrap();
            let AppendOutcome::Appended(info) = log.append(&client).unwrap() else {
                panic!("fresh batch not appended");
            };
            sent.push(Sent {
                client,
                first: info.first_offset,
                last: info.last_offset,
            });
        }
        assert_eq!(
            log.maintenance().segment_base_offsets(),
            vec![0, 860, 1720, 2580]
        );
        log.close().unwrap();
        Fixture { dir, sent }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn segment(&self, base: i64) -> PathBuf {
        self.path().join(format!("{base:020}.log"))
    }

    fn unclean(&self) -> &Self {
        let p = self.path().join("oncelog.checkpoint");
        let text = std::fs::read_to_string(&p).unwrap();
        // An edit, not damage: the checksum line is made again.
        std::fs::write(
            &p,
            reseal(&text.replace("clean_shutdown 1", "clean_shutdown 0")),
        )
        .unwrap();
        self
    }

    /// Byte positions of the batches of a segment.
    fn batch_positions(&self, base: i64) -> Vec<usize> {
        let data = std::fs::read(self.segment(base)).unwrap();
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            out.push(pos);
            pos += RecordBatch::parse(&data[pos..]).unwrap().size();
        }
        out
    }

    fn patch(&self, base: i64, at: usize, f: impl FnOnce(&mut [u8])) {
        let path = self.segment(base);
        let mut data = std::fs::read(&path).unwrap();
        f(&mut data[at..]);
        std::fs::write(&path, data).unwrap();
    }

    fn open(&self, mode: RecoveryMode) -> Result<Log, OpenError> {
        Log::open(self.path(), config(mode))
    }

    /// Opens in every mode that must refuse and checks that each refusal names the damage and
    /// changes nothing, then opens under tolerate-any, which must succeed by cutting.
    fn refused_then_cut(&self, expect: impl Fn(&OpenError) -> bool) -> Log {
        let before = dir_contents(self.path());
        for mode in [
            RecoveryMode::TolerateTailCorruption,
            RecoveryMode::AbsoluteConsistency,
        ] {
            match self.open(mode) {
                Err(e) if expect(&e) => assert_eq!(e.kind(), "refused", "{e}"),
                Err(e) => panic!("{mode:?}: unexpected refusal {e}"),
                Ok(log) => panic!("{mode:?}: opened at log end {}", log.log_end_offset()),
            }
            assert_eq!(
                dir_contents(self.path()),
                before,
                "{mode:?}: a refusal changed files"
            );
        }
        let log = self.open(RecoveryMode::TolerateAnyCorruption).unwrap();
        assert!(
            !log.recovery_report().truncations.is_empty(),
            "nothing reported cut"
        );
        log
    }
}

fn refused_with(e: &OpenError, file: &Path, damage: impl Fn(&Damage) -> bool) -> bool {
    matches!(e, OpenError::Refused { path, damage: d, .. } if path == file && damage(d))
}

/// After any open: offsets dense from the log start, every batch either one that was sent, at
/// its original offsets, or gone with everything after it; a retry of every batch still held
/// is a duplicate at its offsets, and the next new batch gets the next offset.
fn check_contract(log: &Log, sent: &[Sent]) {
    let batches = read_all(log, usize::MAX);
    let mut next = log.log_start_offset();
    let mut held: usize = 0;
    for (i, stored) in batches.iter().enumerate() {
        let b = RecordBatch::parse(stored).unwrap();
        assert_eq!(b.base_offset(), next, "offsets not dense");
        if let Some(s) = sent.get(i) {
            assert_eq!((b.base_offset(), b.last_offset()), (s.first, s.last));
            held += 1;
        }
        next = b.last_offset() + 1;
    }
    assert_eq!(next, log.log_end_offset());
    for s in &sent[held.saturating_sub(6)..held] {
        match log.append(&s.client).unwrap() {
            AppendOutcome::Duplicate(d) => {
                assert_eq!((d.first_offset, d.last_offset), (s.first, s.last))
            }
            AppendOutcome::Appended(a) => {
                panic!("batch at {} stored twice, at {}", s.first, a.first_offset)
            }
            other => panic!("unexpected outcome: {other:?}"),
        }
    }
    let fresh = BatchBuilder::new().build_single(1_700_000_000_000, b"fresh");
    let AppendOutcome::Appended(a) = log.append(&fresh).unwrap() else {
        panic!("fresh batch a duplicate");
    };
    assert_eq!(
        a.first_offset, next,
        "a new batch did not take the next offset"
    );
}

trait BuildSingle {
    fn build_single(self, ts: i64, value: &[u8]) -> Vec<u8>;
}

impl BuildSingle for BatchBuilder {
    fn build_single(mut self, ts: i64, value: &[u8]) -> Vec<u8> {
        self.append(ts, None, Some(value), &[]);
        self.build().unwrap()
    }
}

// 1. A directory has one writer.

#[test]
fn a_second_open_of_a_live_directory_is_refused_naming_it() {
    let f = Fixture::new();
    let first = f.open(RecoveryMode::default()).unwrap();
    for _ in 0..2 {
        match f.open(RecoveryMode::default()) {
            Err(e @ OpenError::Locked { .. }) => {
                assert_eq!(e.kind(), "locked");
                let text = e.to_string();
                assert!(text.contains(&f.path().display().to_string()), "{text}");
                assert!(text.contains("this process"), "{text}");
            }
            other => panic!("second open: {:?}", other.map(|l| l.log_end_offset())),
        }
    }
    // The refused handles changed nothing the first one relies on.
    check_contract(&first, &f.sent);
    first.close().unwrap();
    let again = f.open(RecoveryMode::default()).unwrap();
    assert_eq!(again.log_end_offset(), 3001);
}

/// Set in the child that [`another_process_cannot_open_a_live_directory`] spawns: the
/// directory it tries to open.
const LOCK_CHILD_DIR: &str = "ONCELOG_LOCK_CHILD_DIR";

/// The child's side: open the directory and print how the open ended. Run in-process (no
/// variable set) it is a plain smoke test of an open that nobody contends.
#[test]
fn lock_child_process() {
    let (dir, _temp) = match std::env::var(LOCK_CHILD_DIR) {
        Ok(dir) => (PathBuf::from(dir), None),
        Err(_) => {
            let t = tempfile::tempdir().unwrap();
            (t.path().to_path_buf(), Some(t))
        }
    };
    match Log::open(&dir, config(RecoveryMode::default())) {
        Ok(log) => println!("OPENED {}", log.log_end_offset()),
        Err(e) => println!("REFUSED {}: {e}", e.kind()),
    }
}

#[test]
fn another_process_cannot_open_a_live_directory() {
    let f = Fixture::new();
    let log = f.open(RecoveryMode::default()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "recovery_hostile::lock_child_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(LOCK_CHILD_DIR, f.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    // The harness prints "test lock_child_process ... " on the same line.
    let line = said
        .lines()
        .find_map(|l| {
            l.find("OPENED")
                .or_else(|| l.find("REFUSED"))
                .map(|at| &l[at..])
        })
        .unwrap_or_else(|| panic!("the child said nothing: {said}"));
    assert!(line.starts_with("REFUSED locked: "), "{line}");
    assert!(line.contains("in use by another log"), "{line}");
    assert!(
        line.contains(&format!("process {}", std::process::id())),
        "the holder is named: {line}"
    );
    assert_eq!(log.log_end_offset(), 3000, "the other process wrote");
    check_contract(&log, &f.sent);
}

// 2. Offsets are facts to check, not to believe.

#[test]
fn a_flipped_base_offset_below_the_recovery_point_cuts_nothing_and_moves_no_log_end() {
    let f = Fixture::new();
    f.unclean();
    let at = f.batch_positions(860)[41];
    f.patch(860, at + 5, |b| b[0] ^= 0x10);
    let log = f.open(RecoveryMode::default()).unwrap();
    assert_eq!(log.log_end_offset(), 3000);
    assert!(log.recovery_report().truncations.is_empty());
    // The segment is vouched for by the checkpoint, so it is not read on open; a reader of the
    // damaged batch gets a typed error, never a batch claiming offsets it does not hold.
    let damaged = f.sent.iter().find(|s| s.first >= 860).unwrap().first + 41 * 10;
    match log.read(damaged, 1 << 20) {
        Err(ReadError::Corrupt(c)) => {
            assert_eq!(c.path, f.segment(860));
            assert_eq!(c.position, at);
        }
        other => panic!("read of a damaged base offset: {other:?}"),
    }
    drop(log);
    let report = verify_dir(&RealFs, f.path()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == f.segment(860) && p.position == Some(at)),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_zeroed_last_base_offset_never_lets_an_append_reuse_offsets() {
    // After a crash the last recorded segment's tail is walked: the damage is found at open.
    let f = Fixture::new();
    f.unclean();
    let at = *f.batch_positions(2580).last().unwrap();
    f.patch(2580, at, |b| b[..8].fill(0));
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(2580), |d| {
            matches!(d, Damage::Invalid(BatchProblem::OffsetNotIncreasing { .. }))
        })
    });
    assert_eq!(
        log.log_end_offset(),
        2990,
        "cut at the damaged batch, not before"
    );
    check_contract(&log, &f.sent);
}

#[test]
fn after_a_clean_close_a_zeroed_last_base_offset_is_found_before_the_first_append() {
    // A clean open reads no batch: the damage is found by the read that reaches
    // it, and by the tail check the log makes before its first change, which refuses the
    // change and leaves the log unclean, so the next open judges the damage as a crash's
    // open would have.
    let f = Fixture::new();
    let at = *f.batch_positions(2580).last().unwrap();
    f.patch(2580, at, |b| b[..8].fill(0));
    for mode in MODES {
        let log = f.open(mode).unwrap();
        assert_eq!(log.log_end_offset(), 3000, "{mode:?}");
        let report = log.recovery_report();
        assert!(
            report.clean_shutdown && report.truncations.is_empty(),
            "{mode:?}"
        );
        assert_eq!(report.segments_validated, 0, "{mode:?}");
        match log.read(2990, 1 << 20) {
            Err(ReadError::Corrupt(c)) => {
                assert_eq!(c.path, f.segment(2580));
                assert_eq!(c.position, at);
            }
            other => panic!("{mode:?}: read of a zeroed base offset: {other:?}"),
        }
        log.abandon();
    }
    let before = dir_contents(f.path());
    let log = f.open(RecoveryMode::default()).unwrap();
    let fresh = BatchBuilder::new().build_single(1_700_000_000_000, b"fresh");
    match log.append(&fresh) {
        Err(AppendError::Io(e)) => {
            assert_eq!(e.path, f.segment(2580));
            assert!(e.to_string().contains(&format!("at byte {at}")), "{e}");
        }
        other => panic!("an append after a damaged tail: {other:?}"),
    }
    assert!(matches!(
        log.append(&fresh),
        Err(AppendError::ReadOnly { .. })
    ));
    assert_eq!(log.log_end_offset(), 3000);
    drop(log);
    // Only the checkpoint changed (now unclean): not a byte of a segment.
    let after = dir_contents(f.path());
    for (name, bytes) in &before {
        if name.ends_with(".log") {
            assert_eq!(after.get(name), Some(bytes), "{name} changed");
        }
    }
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(2580), |d| {
            matches!(d, Damage::Invalid(BatchProblem::OffsetNotIncreasing { .. }))
        })
    });
    assert_eq!(log.log_end_offset(), 2990);
    check_contract(&log, &f.sent);
}

#[test]
fn bogus_offsets_in_a_sealed_segment_never_reach_producer_state() {
    let f = Fixture::new();
    f.unclean();
    // No snapshot after the sealed segment: producer state is replayed over its batches.
    for name in std::fs::read_dir(f.path()).unwrap() {
        let p = name.unwrap().path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let at = *f.batch_positions(1720).last().unwrap();
    f.patch(1720, at + 7, |b| b[0] ^= 0x01);
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(1720), |d| matches!(d, Damage::Invalid(_)))
    });
    // Tolerate-any validated everything once the replay found the damage, and cut there.
    assert!(log.recovery_report().deep);
    assert_eq!(log.log_end_offset(), 2570);
    check_contract(&log, &f.sent);
}

// 3. The checkpoint vouches for every sealed segment.

#[test]
fn a_missing_middle_segment_is_refused() {
    let f = Fixture::new();
    std::fs::remove_file(f.segment(860)).unwrap();
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(860), |d| {
            matches!(
                d,
                Damage::SegmentMissing {
                    base_offset: 860,
                    next_offset: 1720,
                    ..
                }
            )
        })
    });
    assert_eq!(log.log_end_offset(), 860);
    check_contract(&log, &f.sent);
}

#[test]
fn a_missing_first_or_last_segment_is_refused() {
    for base in [0, 2580] {
        let f = Fixture::new();
        std::fs::remove_file(f.segment(base)).unwrap();
        let log = f.refused_then_cut(|e| {
            refused_with(e, &f.segment(base), |d| {
                matches!(d, Damage::SegmentMissing { .. })
            })
        });
        if base == 0 {
            assert_eq!(log.maintenance().segment_count(), 1);
        } else {
            check_contract(&log, &f.sent);
        }
    }
}

#[test]
fn a_sealed_segment_cut_at_a_batch_boundary_is_refused() {
    let f = Fixture::new();
    let at = f.batch_positions(860)[50];
    std::fs::OpenOptions::new()
        .write(true)
        .open(f.segment(860))
        .unwrap()
        .set_len(at as u64)
        .unwrap();
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(860), |d| {
            matches!(
                d,
                Damage::SizeMismatch {
                    expected: 98986,
                    ..
                }
            )
        })
    });
    assert_eq!(log.log_end_offset(), 860 + 500);
    check_contract(&log, &f.sent);
}

#[test]
fn an_extra_segment_above_the_end_is_refused() {
    for state in ["clean", "unclean"] {
        let f = Fixture::new();
        if state == "unclean" {
            f.unclean();
        }
        std::fs::write(f.segment(5000), b"").unwrap();
        if state == "clean" {
            let log = f.refused_then_cut(|e| {
                refused_with(e, &f.segment(5000), |d| {
                    matches!(d, Damage::UnrecordedSegment { .. })
                })
            });
            check_contract(&log, &f.sent);
        } else {
            // After a crash the tail is unflushed territory: a segment past it whose offsets do
            // not follow is cut like a lost tail.
            let log = f.open(RecoveryMode::default()).unwrap();
            assert_eq!(log.log_end_offset(), 3000);
            assert!(!f.segment(5000).exists());
            check_contract(&log, &f.sent);
        }
    }
}

// 4. The checkpoint's own numbers are checked.

#[test]
fn a_checkpoint_that_contradicts_itself_is_refused_in_every_mode_and_deletes_nothing() {
    for (from, to) in [
        ("log_start_offset 0", "log_start_offset 999999"),
        ("recovery_point 3000", "recovery_point 999999"),
        // A full truncation's commit point with segments still recorded.
        ("dense_from 0", "dense_from 0\nstart_over_at 0"),
        ("860 1720 98986", "860 1720 10"),
    ] {
        let f = Fixture::new();
        let p = f.path().join("oncelog.checkpoint");
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from));
        std::fs::write(&p, reseal(&text.replace(from, to))).unwrap();
        let before = dir_contents(f.path());
        for mode in MODES {
            match f.open(mode) {
                Err(
                    e @ OpenError::BadMetadataFile(BadMetadataFile {
                        file: MetadataFile::Checkpoint,
                        ..
                    }),
                ) => {
                    assert_eq!(e.kind(), "bad_checkpoint");
                    assert!(e.to_string().contains("oncelog.checkpoint"), "{e}");
                }
                other => panic!("{to}: {mode:?}: {:?}", other.map(|l| l.log_end_offset())),
            }
            assert_eq!(
                dir_contents(f.path()),
                before,
                "{to}: a refusal changed files"
            );
        }
    }
}

#[test]
fn a_recorded_end_that_disagrees_with_the_segment_is_refused() {
    let f = Fixture::new();
    let p = f.path().join("oncelog.checkpoint");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        reseal(&text.replace("860 1720 98986", "860 1700 98986")),
    )
    .unwrap();
    // The segment's time index names offset 1719, beyond the record: the indexes are rebuilt by
    // a walk over the frames, which finds where the batches really end.
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(860), |d| {
            matches!(
                d,
                Damage::EndDisagrees {
                    expected_next: 1700,
                    found_next: 1720
                }
            )
        })
    });
    check_contract(&log, &f.sent);
}

#[test]
fn the_last_recorded_end_is_checked_against_the_segment_after_a_crash() {
    // After a crash the record ends at the last sealed segment and nothing in it vouches for
    // that segment's end (the others' ends are the next one's base): an end flipped up or down
    // is found by walking its tail, in every state the log can be in.
    for wrong in [2590, 2570] {
        let f = Fixture::new();
        let p = f.path().join("oncelog.checkpoint");
        let text = std::fs::read_to_string(&p).unwrap();
        let record_1720 = text
            .lines()
            .find(|l| l.starts_with("1720 2580 "))
            .unwrap()
            .to_string();
        // What a crash leaves: the active segment 2580 unrecorded, the durable end inside it.
        let crashed: String = text
            .lines()
            .filter(|l| !l.starts_with("2580 "))
            .map(|l| match l {
                "clean_shutdown 1" => "clean_shutdown 0".to_string(),
                "segments 4" => "segments 3".to_string(),
                // (The filter took 2580's digest line too.)
                "digests 4" => "digests 3".to_string(),
                l if l.starts_with("recovery_point ") => "recovery_point 2600".to_string(),
                l if l == record_1720 => l.replacen("2580", &wrong.to_string(), 1),
                l => l.to_string(),
            })
            .map(|l| l + "\n")
            .collect();
        assert!(crashed.contains(&format!("1720 {wrong} ")), "{crashed}");
        std::fs::write(&p, reseal(&crashed)).unwrap();
        let log = f.refused_then_cut(|e| {
            refused_with(e, &f.segment(1720), |d| {
                matches!(
                    d,
                    Damage::EndDisagrees {
                        expected_next,
                        found_next: 2580
                    } if *expected_next == wrong
                )
            })
        });
        check_contract(&log, &f.sent);
    }
}

#[test]
fn a_malformed_checkpoint_is_refused_naming_its_line() {
    let f = Fixture::new();
    let p = f.path().join("oncelog.checkpoint");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        reseal(&text.replace("recovery_point 3000", "recovery_point 3x00")),
    )
    .unwrap();
    match f.open(RecoveryMode::default()) {
        Err(OpenError::BadMetadataFile(
            bad @ BadMetadataFile {
                file: MetadataFile::Checkpoint,
                ..
            },
        )) => assert_eq!(bad.line, Some(3), "{bad}"),
        other => panic!("{:?}", other.map(|l| l.log_end_offset())),
    }
    // The way out the error names: without the checkpoint everything is validated.
    std::fs::remove_file(&p).unwrap();
    let log = f.open(RecoveryMode::default()).unwrap();
    assert_eq!(log.recovery_report().segments_validated, 4);
    check_contract(&log, &f.sent);
}

// 5. A snapshot is checked against its name.

#[test]
fn an_older_snapshot_renamed_to_the_newest_offset_is_set_aside() {
    let f = Fixture::new();
    std::fs::copy(
        f.path().join(format!("{:020}.snapshot", 2580)),
        f.path().join(format!("{:020}.snapshot", 3000)),
    )
    .unwrap();
    let log = f.open(RecoveryMode::default()).unwrap();
    let p = log.producer_load_report();
    assert_eq!(p.snapshot_offset, Some(2580), "{p:?}");
    assert_eq!(p.quarantined.len(), 1, "{p:?}");
    // Every retry of the window is still a duplicate: nothing is appended twice.
    check_contract(&log, &f.sent);
}

// 6. Leftovers are validated before they replace anything; a refusal changes nothing.

#[test]
fn a_garbage_swap_never_replaces_a_good_segment() {
    let f = Fixture::new();
    let swap = f.path().join(format!("{:020}.log.swap", 860));
    std::fs::write(&swap, vec![0xA5u8; 5000]).unwrap();
    // The refusals leave every byte as it was, the checkpoint's clean flag included.
    let log = f.refused_then_cut(|e| refused_with(e, &swap, |d| matches!(d, Damage::Invalid(_))));
    // Tolerate-any gave the swap up and kept the segment it would have replaced.
    assert!(!swap.exists());
    assert_eq!(log.log_end_offset(), 3000);
    check_contract(&log, &f.sent);
}

#[test]
fn a_valid_swap_is_completed_over_the_segments_it_replaces() {
    let f = Fixture::new();
    // A swap holding exactly the batches of segment 860, as a compaction that kept
    // everything would write it.
    let swap = f.path().join(format!("{:020}.log.swap", 860));
    std::fs::copy(f.segment(860), &swap).unwrap();
    let log = f.open(RecoveryMode::default()).unwrap();
    assert!(!swap.exists());
    assert!(log.recovery_report().leftovers.contains(&swap));
    assert_eq!(log.log_end_offset(), 3000);
    check_contract(&log, &f.sent);
}

// 8. Every file is checked for its kind and size before it is opened or read.

#[test]
fn a_fifo_named_like_a_segment_is_refused_without_blocking() {
    let f = Fixture::new();
    let fifo = f.segment(5000);
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let log = f.refused_then_cut(|e| refused_with(e, &fifo, |_| true));
    assert!(!fifo.exists());
    check_contract(&log, &f.sent);
    drop(log);
    // Within the log's range it is a hole in what the checkpoint vouches for.
    let f = Fixture::new();
    std::fs::remove_file(f.segment(860)).unwrap();
    assert!(Command::new("mkfifo")
        .arg(f.segment(860))
        .status()
        .unwrap()
        .success());
    f.refused_then_cut(|e| {
        refused_with(e, &f.segment(860), |d| {
            matches!(d, Damage::NotAFile { kind: "FIFO" })
        })
    });
}

#[test]
fn huge_sparse_metadata_files_are_never_read() {
    for name in [
        format!("{:020}.index", 860),
        format!("{:020}.timeindex", 860),
        format!("{:020}.snapshot", 3000),
        "oncelog.checkpoint".to_string(),
    ] {
        let f = Fixture::new();
        f.unclean();
        let path = f.path().join(&name);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
            .set_len(64 << 30)
            .unwrap();
        let report = verify_dir(&RealFs, f.path()).unwrap();
        assert!(
            report.problems.iter().any(|p| p.file == path),
            "{name}: {:?}",
            report.problems
        );
        match f.open(RecoveryMode::default()) {
            Ok(log) if name != "oncelog.checkpoint" => {
                check_contract(&log, &f.sent);
                let meta = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                assert!(meta < 1 << 30, "{name}: still {meta} bytes");
            }
            Err(OpenError::BadMetadataFile(
                bad @ BadMetadataFile {
                    file: MetadataFile::Checkpoint,
                    ..
                },
            )) if name == "oncelog.checkpoint" => {
                assert!(bad.reason.contains("more than any checkpoint"), "{bad}");
            }
            other => panic!("{name}: {:?}", other.map(|l| l.log_end_offset())),
        }
    }
}

// 9. Every refusal is typed; tolerate-any can always open by cutting; index damage is never
// blamed on the log.

#[test]
fn a_batch_length_flip_in_a_trusted_sealed_segment_is_found_by_verify_and_read() {
    let f = Fixture::new();
    let at = f.batch_positions(860)[10];
    f.patch(860, at + 9, |b| b[0] ^= 0x40);
    // Not read on open (vouched for); the readers and `verify` find it.
    let log = f.open(RecoveryMode::default()).unwrap();
    assert!(log.read(860 + 100, 1 << 20).is_err());
    drop(log);
    assert!(!verify_dir(&RealFs, f.path()).unwrap().is_clean());
    // A deep open validates it and, under tolerate-any, cuts it.
    let deep = (config(RecoveryMode::TolerateTailCorruption))
        .into_builder()
        .deep_recovery(true)
        .build()
        .unwrap();
    match Log::open(f.path(), deep.clone()) {
        Err(e) => assert!(refused_with(&e, &f.segment(860), |_| true), "{e}"),
        Ok(_) => panic!("deep open accepted a damaged durable segment"),
    }
    let log = Log::open(
        f.path(),
        deep.into_builder()
            .recovery_mode(RecoveryMode::TolerateAnyCorruption)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(log.log_end_offset(), 860 + 100);
    check_contract(&log, &f.sent);
}

#[test]
fn a_flipped_bit_in_an_index_is_rebuilt_and_never_blamed_on_the_log() {
    let f = Fixture::new();
    let index = f.path().join(format!("{:020}.index", 860));
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[13] ^= 0x08; // the position of the second entry
    std::fs::write(&index, &bytes).unwrap();
    for mode in MODES {
        let log = f.open(mode).unwrap();
        assert!(log.recovery_report().truncations.is_empty());
        check_contract(&log, &f.sent);
        log.close().unwrap();
        std::fs::write(&index, &bytes).unwrap();
    }
    let report = verify_dir(&RealFs, f.path()).unwrap();
    assert!(
        report.problems.iter().all(|p| p.file == index),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_mid_batch_cut_with_a_clean_checkpoint_is_refused_and_cut_by_tolerate_any() {
    let f = Fixture::new();
    let len = std::fs::metadata(f.segment(2580)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(f.segment(2580))
        .unwrap()
        .set_len(len - 30)
        .unwrap();
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(2580), |d| {
            matches!(d, Damage::SizeMismatch { .. })
        })
    });
    assert_eq!(log.log_end_offset(), 2990);
    check_contract(&log, &f.sent);
}

#[test]
fn a_sealed_segment_extended_with_zeros_is_refused_and_trimmed_by_tolerate_any() {
    let f = Fixture::new();
    let len = std::fs::metadata(f.segment(860)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(f.segment(860))
        .unwrap()
        .set_len(len + 4096)
        .unwrap();
    let log = f.refused_then_cut(|e| {
        refused_with(e, &f.segment(860), |d| {
            matches!(d, Damage::SizeMismatch { .. })
        })
    });
    assert_eq!(log.log_end_offset(), 3000, "zeros are cut, no batch");
    assert_eq!(std::fs::metadata(f.segment(860)).unwrap().len(), len);
    check_contract(&log, &f.sent);
}

// 10. Without a checkpoint, only the last segment's tail may be cut.

#[test]
fn damage_in_an_early_segment_of_a_kafka_directory_is_refused_not_cut_to_zero() {
    let f = Fixture::new();
    std::fs::remove_file(f.path().join("oncelog.checkpoint")).unwrap();
    let at = f.batch_positions(0)[3];
    f.patch(0, at + 100, |b| b[0] ^= 0xFF);
    let log =
        f.refused_then_cut(|e| refused_with(e, &f.segment(0), |d| matches!(d, Damage::Invalid(_))));
    assert_eq!(log.log_end_offset(), 30);
    drop(log);
    // Damage in the last segment is a tail, cut in the default mode.
    let f = Fixture::new();
    std::fs::remove_file(f.path().join("oncelog.checkpoint")).unwrap();
    let at = f.batch_positions(2580)[3];
    f.patch(2580, at + 100, |b| b[0] ^= 0xFF);
    let log = f.open(RecoveryMode::default()).unwrap();
    assert_eq!(log.log_end_offset(), 2580 + 30);
    check_contract(&log, &f.sent);
}

// Also fixed.

#[test]
fn verify_goes_on_after_a_damaged_batch_and_says_what_it_skipped() {
    let f = Fixture::new();
    let positions = f.batch_positions(860);
    f.patch(860, positions[5] + 200, |b| b[0] ^= 1);
    f.patch(860, positions[40] + 200, |b| b[0] ^= 1);
    let report = verify_dir(&RealFs, f.path()).unwrap();
    let crc: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.kind == "invalid_batch")
        .map(|p| p.position)
        .collect();
    assert_eq!(crc, vec![Some(positions[5]), Some(positions[40])]);
    assert_eq!(report.batches, 298);
    assert_eq!(report.unchecked_bytes, 2 * 1151);
    assert!(
        report.problems.iter().all(|p| p.file == f.segment(860)),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_deep_open_validates_a_cleanly_closed_log() {
    let f = Fixture::new();
    let shallow = f.open(RecoveryMode::AbsoluteConsistency).unwrap();
    assert_eq!(shallow.recovery_report().segments_validated, 0);
    shallow.close().unwrap();
    let log = Log::open(
        f.path(),
        (config(RecoveryMode::AbsoluteConsistency))
            .into_builder()
            .deep_recovery(true)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(log.recovery_report().segments_validated, 4);
    assert_eq!(log.recovery_report().bytes_validated, 345_300);
    check_contract(&log, &f.sent);
}

#[test]
fn append_replicated_follows_the_flush_policy() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogConfig::builder()
            .flush_policy(FlushPolicy::Always)
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut b = BatchBuilder::new().base_offset(0);
    b.append(1, None, Some(b"r"), &[]);
    log.replica().append(&b.build().unwrap()).unwrap();
    assert_eq!(
        log.recovery_point(),
        1,
        "a replicated append under Always is durable"
    );
}

#[test]
fn append_replicated_says_what_it_wrote_before_it_failed() {
    use oncelog::io::sim::OpKind;
    use oncelog::io::SimFs;
    let fs = SimFs::new();
    let env = oncelog::Environment::default().with_fs(fs.as_dyn());
    let config = LogConfig::builder().segment_bytes(4096).build().unwrap();
    let log = Log::open_in(env, "/d/p-0", config).unwrap();
    let mut input = Vec::new();
    for base in [0, 1, 2] {
        let mut b = BatchBuilder::new().base_offset(base);
        b.append(1, None, Some(&[b'r'; 1500][..]), &[]);
        input.extend(b.build().unwrap());
    }
    // The third batch needs a new segment, and the disk is full when the roll allocates it:
    // the first batch allocates the first segment's `.log` and its two indexes (allocations
    // 1-3, the whole 4 KiB segment in one step), the roll's `.log` is the fourth.
    fs.fail_next(OpKind::Allocate, 4, libc::ENOSPC);
    match log.replica().append(&input) {
        Err(AppendError::PartiallyWritten { written, cause }) => {
            assert_eq!((written.first_offset, written.last_offset), (0, 1));
            assert_eq!(cause.kind(), "io");
            assert!(
                cause.to_string().contains("00000000000000000002.log"),
                "{cause}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn every_roll_between_two_flushes_keeps_its_snapshot() {
    let f = Fixture::new();
    let names: Vec<String> = std::fs::read_dir(f.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    for base in [860, 1720, 2580, 3000] {
        assert!(names.contains(&format!("{base:020}.snapshot")), "{names:?}");
    }
}
