//! `oncelog truncate`, `oncelog delete-records` and `oncelog retention`, run as a user would on
//! a three-segment log: what each removes and reports, what the log is afterwards (read back
//! through the library), the refusals that change nothing, a directory another process holds,
//! and `dump` of the leader-epoch checkpoint.

use crate::common;
use crate::common_cli;

use std::fs;
use std::path::Path;
use std::process::Output;
use std::sync::{Mutex, MutexGuard};

use common_cli::{contents, json_lines, run, run_path, stdout, TS};
use oncelog::format::BatchBuilder;
use oncelog::{AppendOutcome, Log, LogConfig, ReadError};
use serde_json::{json, Value};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/kafka-logdirs/userchic-mymicroservices/postCreated-0"
);

const PID: i64 = 3;
const RECORDS: i32 = 5;
const BATCHES_PER_SEGMENT: usize = 4;
const HOUR: i64 = 3_600_000;

/// Batch `n` of producer `PID`: sequence `5n`, timestamps an hour apart per segment, so each
/// segment's newest timestamp is `TS + segment * HOUR + 3004`.
fn producer_batch(n: usize) -> Vec<u8> {
    let segment = (n / BATCHES_PER_SEGMENT) as i64;
    let ts = TS + segment * HOUR + (n % BATCHES_PER_SEGMENT) as i64 * 1000;
    let mut b = BatchBuilder::new().producer(PID, 0, n as i32 * RECORDS);
    for i in 0..RECORDS {
        b.append(ts + i as i64, Some(b"k"), Some(&[b'v'; 100][..]), &[]);
    }
    b.build().expect("build batch")
}

/// Every batch is the same size: segments sized for exactly four of them.
fn config() -> LogConfig {
    common_cli::small_config()
        .into_builder()
        .segment_bytes(BATCHES_PER_SEGMENT * producer_batch(0).len() + 10)
        .build()
        .unwrap()
}

/// A closed log of three segments (bases 0, 20, 40) of four 5-record batches each, offsets
/// 0..60. Returns the size of one batch.
fn three_segment_log(dir: &Path) -> u64 {
    let log = Log::open(dir, config()).expect("open");
    for n in 0..3 * BATCHES_PER_SEGMENT {
        assert!(matches!(
            log.append(&producer_batch(n)).expect("append"),
            AppendOutcome::Appended(_)
        ));
    }
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 20, 40]);
    log.close().expect("close");
    producer_batch(0).len() as u64
}

/// One test at a time. A child process spawned by one test thread holds copies of every
/// descriptor of the process from its fork to its exec, the lock file of a log another thread
/// has open among them, and a `flock` lasts while any copy does: that other thread's close
/// would not free the directory for its own next command until the child has exec'd.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn json_object(o: &Output) -> Value {
    let lines = json_lines(o);
    assert_eq!(lines.len(), 1, "{}", stdout(o));
    lines.into_iter().next().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn snapshot_files(dir: &Path) -> Vec<String> {
    contents(dir)
        .into_keys()
        .filter(|n| n.ends_with(".snapshot"))
        .collect()
}

#[test]
fn truncate_into_the_middle_of_a_batch_ends_the_log_at_that_batch_and_rebuilds_producers() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    let o = run_path(&["truncate", "--to", "27", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["operation"], "truncate_to");
    assert_eq!(r["offset"], 27);
    assert_eq!(r["old_log_end"], 60);
    assert_eq!(r["new_log_end"], 25, "the batch 25..29 went whole");
    assert_eq!(r["log_start_offset"], 0);
    assert_eq!(r["segments_removed"], json!([40]));
    // Segment 20 loses its batches 25..39, segment 40 all four.
    assert_eq!(r["bytes_removed"], 7 * batch);
    assert_eq!(r["snapshots_removed"], json!([40, 60]));
    assert_eq!(r["producer_state"]["snapshot_offset"], 20);
    assert_eq!(r["producer_state"]["batches_replayed"], 1);
    assert_eq!(r["producer_state"]["producers"], 1);
    assert_eq!(r["leader_epochs"], json!([{"epoch": 0, "start_offset": 0}]));
    // 0, 20 (cut at 25) and the new active segment at 25.
    assert_eq!(r["segments"], 3);

    // The removed files are gone, not left as `.deleted`.
    let names: Vec<String> = contents(dir.path()).into_keys().collect();
    assert!(
        !names.iter().any(|n| n.starts_with("00000000000000000040")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.ends_with(".deleted")), "{names:?}");

    // The log ends at 25, and the retry of the batch that started there is appended again.
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_end_offset(), 25);
    assert_eq!(log.producer(PID).unwrap().last_seq(), 24);
    match log.append(&producer_batch(5)).unwrap() {
        AppendOutcome::Appended(info) => assert_eq!(info.first_offset, 25),
        other => panic!("the truncated batch's retry must be appended again: {other:?}"),
    }
    log.close().unwrap();
}

#[test]
fn truncate_text_says_where_the_log_ends_and_why() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    let o = run_path(&["truncate", "--to", "27"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    let expected = [
        format!(
            "truncated {} to offset 27: the log ended at 60 and now ends at 25",
            dir.path().display()
        ),
        "the batch holding offset 27 starts at 25 and went whole".to_string(),
        format!(
            "removed {} bytes of batches; 1 segment removed whole (base offset 40)",
            7 * batch
        ),
        "removed 2 snapshots (offsets 40, 60)".to_string(),
        "producer state rebuilt: snapshot at offset 20; 1 batch header replayed; 1 producer"
            .to_string(),
        "leader epochs: 0 from 0".to_string(),
        "log: offsets 0..25, 3 segments; closed cleanly".to_string(),
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{text}");

    // At the end already: nothing to do, nothing removed.
    let before = contents(dir.path());
    let o = run_path(&["truncate", "--to", "25"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).starts_with("nothing to truncate: "),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        contents(dir.path()).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
}

#[test]
fn truncate_start_at_removes_every_segment_and_starts_the_log_over() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    let o = run_path(&["truncate", "--start-at", "100", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["operation"], "truncate_fully_and_start_at");
    assert_eq!(r["old_log_end"], 60);
    assert_eq!(r["new_log_end"], 100);
    assert_eq!(r["old_log_start"], 0);
    assert_eq!(r["log_start_offset"], 100);
    assert_eq!(r["segments_removed"], json!([0, 20, 40]));
    assert_eq!(r["bytes_removed"], 12 * batch);
    assert_eq!(r["producer_state"], Value::Null);
    assert_eq!(r["leader_epochs"], json!([]));
    assert_eq!(r["segments"], 1);

    let text = stdout(&run_path(&["truncate", "--start-at", "150"], dir.path()));
    assert!(
        text.contains("fully: the log ended at 100 and starts over, empty, at 150"),
        "{text}"
    );
    assert!(text.contains("producer state cleared"), "{text}");
    assert!(
        text.ends_with("log: offsets 150..150, 1 segment; closed cleanly\n"),
        "{text}"
    );

    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (150, 150));
    assert_eq!(log.producer_count(), 0);
    match log.append(&producer_batch(0)).unwrap() {
        AppendOutcome::Appended(info) => assert_eq!(info.first_offset, 150),
        other => panic!("{other:?}"),
    }
    log.close().unwrap();
}

#[test]
fn refused_offsets_exit_1_name_the_kind_and_change_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    three_segment_log(dir.path());
    let before = contents(dir.path());
    for (args, kind) in [
        (&["truncate", "--to", "61"][..], "above_log_end"),
        (
            &["delete-records", "--before", "61"][..],
            "above_high_watermark",
        ),
    ] {
        let o = run_path(&[args, &["--json"]].concat(), dir.path());
        assert_eq!(
            o.status.code(),
            Some(1),
            "{args:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        let r = json_object(&o);
        assert_eq!(r["refused"], true, "{args:?}");
        assert_eq!(r["error"], kind, "{args:?}");
        assert_eq!(r["offset"], 61, "{args:?}");
        assert_eq!(r["log_end_offset"], 60, "{args:?}");
        assert_eq!(r["high_watermark"], 60, "{args:?}");
        assert_eq!(
            contents(dir.path()),
            before,
            "{args:?} changed the directory"
        );

        let o = run_path(args, dir.path());
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let text = stdout(&o);
        assert!(
            text.starts_with(&format!("REFUSED {}: ", args.join(" "))),
            "{text}"
        );
        assert!(text.contains(&format!("({kind})")), "{text}");
        assert!(text.ends_with("nothing was changed\n"), "{text}");
        assert_eq!(
            contents(dir.path()),
            before,
            "{args:?} changed the directory"
        );
    }

    // Below the log start, once it was raised.
    assert_eq!(
        run_path(&["delete-records", "--before", "30"], dir.path())
            .status
            .code(),
        Some(0)
    );
    let before = contents(dir.path());
    let o = run_path(&["truncate", "--to", "10", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["error"], "below_log_start");
    assert_eq!(r["log_start_offset"], 30);
    assert_eq!(
        contents(dir.path()),
        before,
        "a refused truncation changed the directory"
    );
}

#[test]
fn delete_records_raises_the_log_start_and_deletes_the_segments_wholly_below_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    let o = run_path(&["delete-records", "--before", "45", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["operation"], "delete_records");
    assert_eq!(r["offset"], 45);
    assert_eq!(r["old_log_start"], 0);
    assert_eq!(r["log_start_offset"], 45);
    assert_eq!(r["log_end_offset"], 60);
    assert_eq!(
        r["deleted"],
        json!([
            {"base_offset": 0, "next_offset": 20, "bytes": 4 * batch, "reason": "log_start"},
            {"base_offset": 20, "next_offset": 40, "bytes": 4 * batch, "reason": "log_start"},
        ])
    );
    assert_eq!(r["bytes_removed"], 8 * batch);
    assert_eq!(r["rolled"], false);
    assert_eq!(r["producers"], 1);
    assert_eq!(
        r["leader_epochs"],
        json!([{"epoch": 0, "start_offset": 45}])
    );
    assert_eq!(r["segments"], 1);
    assert_eq!(r["first_segment_base"], 40);
    let removed: Vec<i64> = r["snapshots_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    for offset in &removed {
        assert!(
            !snapshot_files(dir.path()).contains(&format!("{offset:020}.snapshot")),
            "{offset} reported removed but still there"
        );
    }
    assert!(
        !removed.is_empty() && removed.iter().all(|&o| o < 45),
        "{removed:?}"
    );

    let names: Vec<String> = contents(dir.path()).into_keys().collect();
    for base in ["00000000000000000000", "00000000000000000020"] {
        assert!(
            !names.iter().any(|n| n.starts_with(base)),
            "{base}: {names:?}"
        );
    }
    assert!(!names.iter().any(|n| n.ends_with(".deleted")), "{names:?}");

    // Reads below the new start are out of range; the producer is still known, so a retry of
    // a batch whose records are gone is still a duplicate.
    let log = Log::open(dir.path(), config()).unwrap();
    match log.read(44, 1 << 20) {
        Err(ReadError::OffsetOutOfRange {
            log_start_offset, ..
        }) => assert_eq!(log_start_offset, 45),
        other => panic!("a read below the log start: {other:?}"),
    }
    assert!(!log.read(45, 1 << 20).unwrap().is_empty());
    assert!(matches!(
        log.append(&producer_batch(8)).unwrap(),
        AppendOutcome::Duplicate(d) if d.first_offset == 40
    ));
    log.close().unwrap();

    // Text, and a start already above the offset: nothing moves.
    let o = run_path(&["delete-records", "--before", "30"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("no segment deleted\nthe log start stays at 45\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "the segment from offset 40 is kept: its offsets below 45 are no longer readable"
        ),
        "{text}"
    );
    assert!(text.contains("producer state kept: 1 producer "), "{text}");
    assert!(
        text.ends_with("log: offsets 45..60, 1 segment; closed cleanly\n"),
        "{text}"
    );
}

#[test]
fn delete_records_text_lists_each_deleted_segment() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    let o = run_path(&["delete-records", "--before", "20"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            format!(
                "delete-records in {} before offset 20",
                dir.path().display()
            )
            .as_str(),
            format!(
                "DELETED segment 0 (offsets 0..20, {} bytes): wholly below the log start",
                4 * batch
            )
            .as_str(),
            format!("deleted 1 segment, {} bytes", 4 * batch).as_str(),
            "the log start moved from 0 to 20",
        ],
        "{text}"
    );
    assert!(text.contains("leader epochs: 0 from 20\n"), "{text}");
}

#[test]
fn retention_by_bytes_deletes_the_oldest_whole_segments_and_raises_the_log_start() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    // 12 batches on disk, 8 allowed: the first segment goes, the second would take the log
    // below the limit and is spared.
    let limit = (8 * batch).to_string();
    let o = run_path(
        &["retention", "--bytes", &limit, "--ms", "-1", "--json"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["operation"], "retention");
    assert_eq!(r["retention_bytes"], 8 * batch);
    assert_eq!(r["retention_ms"], Value::Null);
    assert_eq!(r["defaults"], json!([]));
    assert_eq!(
        r["deleted"],
        json!([{"base_offset": 0, "next_offset": 20, "bytes": 4 * batch, "reason": "size"}])
    );
    assert_eq!(r["old_log_start"], 0);
    assert_eq!(r["log_start_offset"], 20);
    assert_eq!(r["log_end_offset"], 60);
    assert_eq!(r["rolled"], false);
    assert_eq!(r["segments"], 2);
    assert!(r["now_ms"].as_i64().unwrap() > TS, "the wall clock: {r}");

    // Gone, not left as `.deleted` for the next open.
    let names: Vec<String> = contents(dir.path()).into_keys().collect();
    assert!(
        !names.iter().any(|n| n.starts_with("00000000000000000000")),
        "{names:?}"
    );
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.maintenance().segment_base_offsets(), vec![20, 40]);
    assert!(matches!(
        log.read(0, 1 << 20),
        Err(ReadError::OffsetOutOfRange {
            log_start_offset: 20,
            ..
        })
    ));
    assert!(!log.read(20, 1 << 20).unwrap().is_empty());
    log.close().unwrap();
}

#[test]
fn retention_by_time_deletes_the_segments_whose_newest_record_is_too_old() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path());
    // Newest records: segment 0 at TS + 3004, 20 at TS + 1h + 3004, 40 at TS + 2h + 3004. At
    // TS + 3h with a 90-minute limit the first two are too old.
    let now = (TS + 3 * HOUR).to_string();
    let ms = (3 * HOUR / 2).to_string();
    let o = run_path(
        &["retention", "--ms", &ms, "--now", &now, "--json"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["now_ms"], TS + 3 * HOUR);
    assert_eq!(r["retention_ms"], 3 * HOUR / 2);
    assert_eq!(r["retention_bytes"], Value::Null);
    assert_eq!(r["defaults"], json!(["retention_bytes"]));
    assert_eq!(
        r["deleted"],
        json!([
            {"base_offset": 0, "next_offset": 20, "bytes": 4 * batch, "reason": "time"},
            {"base_offset": 20, "next_offset": 40, "bytes": 4 * batch, "reason": "time"},
        ])
    );
    assert_eq!(r["log_start_offset"], 40);

    let log = Log::open(dir.path(), config()).unwrap();
    assert!(matches!(
        log.read(39, 1 << 20),
        Err(ReadError::OffsetOutOfRange {
            log_start_offset: 40,
            ..
        })
    ));
    log.close().unwrap();

    // The text says which limit each segment broke.
    let dir = tempfile::tempdir().unwrap();
    three_segment_log(dir.path());
    let text = stdout(&run_path(
        &["retention", "--ms", &ms, "--now", &now],
        dir.path(),
    ));
    assert!(
        text.starts_with(&format!(
            "retention of {} at {now} ms: retention.bytes none (library default), retention.ms \
             {ms}\n",
            dir.path().display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "DELETED segment 20 (offsets 20..40, {} bytes): older than retention.ms\n",
            4 * batch
        )),
        "{text}"
    );
    assert!(
        text.contains("the log start moved from 0 to 40\n"),
        "{text}"
    );
}

#[test]
fn retention_without_limits_uses_the_library_defaults_and_says_so() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    three_segment_log(dir.path());
    let before = contents(dir.path());
    // An hour after the newest record: within the default 7 days.
    let now = (TS + 3 * HOUR).to_string();
    let o = run_path(&["retention", "--now", &now], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        text.lines().next().unwrap().ends_with(
            "retention.bytes none (library default), retention.ms 604800000 (library default)"
        ),
        "{text}"
    );
    assert!(
        text.contains("no segment deleted\nthe log start stays at 0\n"),
        "{text}"
    );
    assert_eq!(
        contents(dir.path()).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
}

#[test]
fn retention_by_the_wall_clock_deletes_every_old_segment_rolling_first_and_keeps_producers() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    three_segment_log(dir.path());
    // The records are from 2023: older than the default 7 days by the system clock.
    let o = run_path(&["retention", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["defaults"], json!(["retention_bytes", "retention_ms"]));
    assert_eq!(r["retention_ms"], 7 * 24 * HOUR);
    assert_eq!(r["rolled"], true);
    let bases: Vec<&Value> = r["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["base_offset"])
        .collect();
    assert_eq!(bases, [0, 20, 40]);
    assert_eq!(r["log_start_offset"], 60);
    assert_eq!(r["segments"], 1);

    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (60, 60));
    assert!(matches!(
        log.append(&producer_batch(11)).unwrap(),
        AppendOutcome::Duplicate(d) if d.first_offset == 55
    ));
    match log.append(&producer_batch(12)).unwrap() {
        AppendOutcome::Appended(info) => assert_eq!(info.first_offset, 60),
        other => panic!("the producer's next batch, in sequence: {other:?}"),
    }
    log.close().unwrap();
}

#[test]
fn a_directory_another_process_has_open_is_refused_naming_the_holder_with_exit_2() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    three_segment_log(dir.path());
    let held = Log::open(dir.path(), config()).unwrap();
    let before = contents(dir.path());
    for args in [
        &["truncate", "--to", "10"][..],
        &["truncate", "--start-at", "0"],
        &["delete-records", "--before", "10"],
        &["retention", "--bytes", "0"],
    ] {
        let o = run_path(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "{}: the log is open in another process (process {})",
                dir.path().display(),
                std::process::id()
            )),
            "{args:?}: {err}"
        );
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
    assert_eq!(contents(dir.path()), before);
    held.close().unwrap();
}

#[test]
fn a_missing_directory_is_refused_with_exit_2_and_not_created() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-partition");
    for args in [
        &["truncate", "--to", "0"][..],
        &["delete-records", "--before", "0"],
        &["retention"],
    ] {
        let o = run_path(args, &missing);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("no such file or directory"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert!(!missing.exists(), "{args:?} created the directory");
    }
}

/// A rewrite does not also run a recovery that cuts: a log with a torn tail is refused as it
/// is, for `oncelog recover` to settle first.
#[test]
fn a_log_that_needs_recovery_is_refused_with_exit_1_and_changes_no_byte() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batches = common_cli::crashed_log(dir.path(), 2, 2);
    let start: usize = batches[..3].iter().map(Vec::len).sum();
    let end = start + batches[3].len();
    let path = common_cli::segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    bytes[end - 20..end].fill(0);
    fs::write(&path, &bytes).unwrap();
    let before = contents(dir.path());

    let o = run_path(&["truncate", "--to", "5", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["refused"], true);
    assert_eq!(r["error"], "refused");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("00000000000000000000.log"),
        "{r}"
    );
    assert_eq!(r["log_end_offset"], Value::Null);
    assert_eq!(
        contents(dir.path()),
        before,
        "a refused open changed the directory"
    );

    let o = run_path(&["retention", "--bytes", "0"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("`oncelog recover "), "{}", stdout(&o));
    assert_eq!(
        contents(dir.path()),
        before,
        "a refused open changed the directory"
    );
}

#[test]
fn truncate_of_a_real_kafka_partition_cuts_its_leader_epochs() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("postCreated-0");
    common::copy_dir(Path::new(FIXTURE), &dir);
    let o = run_path(&["truncate", "--to", "16", "--json"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(
        (r["old_log_end"].as_i64(), r["new_log_end"].as_i64()),
        (Some(17), Some(16))
    );
    assert_eq!(r["log_start_offset"], 11);
    assert_eq!(r["segments_removed"], json!([16]));
    assert_eq!(r["snapshots_removed"], json!([17]));
    assert_eq!(
        r["leader_epochs"],
        json!([
            {"epoch": 60, "start_offset": 11},
            {"epoch": 64, "start_offset": 12},
            {"epoch": 66, "start_offset": 13},
        ])
    );
    // The file on disk says the same.
    let o = run_path(&["dump", "--json"], &dir.join("leader-epoch-checkpoint"));
    let epochs: Vec<(i64, i64)> = json_lines(&o)
        .iter()
        .map(|l| {
            (
                l["epoch"].as_i64().unwrap(),
                l["start_offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(epochs, [(60, 11), (64, 12), (66, 13)]);
}

#[test]
fn dump_lists_the_leader_epoch_checkpoint_of_a_real_partition_last() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("postCreated-0");
    common::copy_dir(Path::new(FIXTURE), &dir);
    let before = contents(&dir);
    let o = run_path(&["dump", "--json"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    let file = dir.join("leader-epoch-checkpoint").display().to_string();
    let expected: Vec<Value> = [(60, 11), (64, 12), (66, 13), (68, 16)]
        .iter()
        .map(|&(epoch, start)| {
            json!({"type": "leader_epoch", "file": file, "epoch": epoch, "start_offset": start})
        })
        .collect();
    // The files it does not dump are named after the dumped ones.
    let skipped = common_cli::of_type(&lines, "skipped");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0]["file"]
        .as_str()
        .unwrap()
        .ends_with("partition.metadata"));
    let lines: Vec<Value> = lines
        .into_iter()
        .filter(|l| l["type"] != "skipped")
        .collect();
    assert_eq!(lines[lines.len() - 4..], expected[..]);
    assert_eq!(common_cli::of_type(&lines, "leader_epoch").len(), 4);
    assert_eq!(contents(&dir), before, "dump changed a file");

    // The file itself, as text.
    let o = run_path(&["dump"], &dir.join("leader-epoch-checkpoint"));
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!(
            "== {file} (28 bytes)\nleader-epoch checkpoint with 4 entries\n\
             leader_epoch 60 start_offset 11\nleader_epoch 64 start_offset 12\n\
             leader_epoch 66 start_offset 13\nleader_epoch 68 start_offset 16\n"
        )
    );
}

#[test]
fn dump_of_a_malformed_leader_epoch_checkpoint_names_the_line_and_exits_1() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("postCreated-0");
    common::copy_dir(Path::new(FIXTURE), &dir);
    let path = dir.join("leader-epoch-checkpoint");
    for (text, line, says) in [
        (
            "0\n2\n60 11\nsixty 12\n",
            Some(4),
            "epoch is not a valid integer",
        ),
        ("0\n2\n60 11\n59 12\n", Some(4), "does not follow epoch 60"),
        ("1\n0\n", Some(1), "unsupported version 1"),
        ("0\n3\n60 11\n", None, "3 entries declared, 1 found"),
    ] {
        fs::write(&path, text).unwrap();
        let o = run_path(&["dump", "--json"], &path);
        assert_eq!(o.status.code(), Some(1), "{text:?}: {}", stdout(&o));
        let lines = json_lines(&o);
        assert_eq!(lines.len(), 1, "{text:?}: {lines:?}");
        assert_eq!(lines[0]["type"], "error");
        assert_eq!(
            lines[0]["line"].as_u64(),
            line.map(|l| l as u64),
            "{text:?}"
        );
        assert!(lines[0].get("position").is_none(), "{text:?}: {}", lines[0]);
        assert!(
            lines[0]["error"].as_str().unwrap().contains(says),
            "{text:?}: {}",
            lines[0]
        );

        let o = run_path(&["dump"], &path);
        assert_eq!(o.status.code(), Some(1));
        let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
        assert!(
            stdout(&o).contains(&format!("ERROR {}: {at}", path.display())),
            "{}",
            stdout(&o)
        );
        // Damage in one file of a directory fails the whole dump.
        assert_eq!(run_path(&["dump"], &dir).status.code(), Some(1), "{text:?}");
    }
}

#[test]
fn each_rewrite_command_has_a_short_help_line_and_its_long_text() {
    let _serial = serial();
    let help = stdout(&run(&["--help"]));
    for cmd in ["truncate", "delete-records", "retention"] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("{cmd} missing from\n{help}"));
        assert!(line.len() <= 100, "too long for a summary: {line}");
        assert_eq!(
            run(&[cmd, "--no-such-option"]).status.code(),
            Some(2),
            "{cmd}"
        );
    }
    for (cmd, long) in [
        (
            "truncate",
            "Exits 1 (changing nothing) when the offset is refused",
        ),
        ("delete-records", "the producer state is kept"),
        ("retention", "the library's default (no size limit, 7 days)"),
    ] {
        let o = run(&[cmd, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{cmd}");
        let text = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains(long), "{cmd} --help:\n{text}");
        assert!(
            text.contains("not left as .deleted"),
            "{cmd} --help:\n{text}"
        );
    }
    // --to and --start-at: exactly one.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run_path(&["truncate"], dir.path()).status.code(), Some(2));
    assert_eq!(
        run_path(&["truncate", "--to", "1", "--start-at", "1"], dir.path())
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run_path(&["retention", "--bytes", "-2"], dir.path())
            .status
            .code(),
        Some(2)
    );
}

/// A clean checkpoint vouches for the sealed segments, so the open does not read them; the
/// truncation does, walking to the batch that holds the offset, and stops at damage there.
#[test]
fn truncate_into_a_damaged_vouched_for_segment_exits_1_naming_the_byte() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let batch = three_segment_log(dir.path()) as usize;
    let path = common_cli::segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    // The second batch's length field: it now runs past the end of the file.
    bytes[batch + 8..batch + 12].copy_from_slice(&0x7fff_0000u32.to_be_bytes());
    fs::write(&path, &bytes).unwrap();

    let o = run_path(&["truncate", "--to", "10", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let r = json_object(&o);
    assert_eq!(r["refused"], false);
    assert_eq!(r["error"], "corrupt_segment");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("00000000000000000000.log at byte {batch}")),
        "{message}"
    );

    let o = run_path(&["truncate", "--to", "10"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(text.starts_with("FAILED truncate --to 10: "), "{text}");
    assert!(text.contains("`oncelog verify "), "{text}");
}
