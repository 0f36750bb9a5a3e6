//! Operator tools that cannot hurt a directory: every command that
//! opens an existing partition refuses a directory that holds none and creates nothing in it;
//! `recover --dry-run` shows what recovery would cut and remove and changes nothing, with the
//! same totals the recovery then reports; a recovery that removes data says so and exits 3;
//! `--backup` keeps a copy that restores the directory.

use crate::common_cli;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Output;

use common_cli::{batch, contents, json_lines, run, run_path, stdout};
use oncelog::{AppendOutcome, Log, LogConfig};
use serde_json::Value;

/// Every entry under `path`, the lock file included, with its length and CRC-32C; `None` when
/// nothing is there. What "created nothing, changed nothing" is checked against.
fn listing(path: &Path) -> Option<BTreeMap<String, (usize, u32)>> {
    let entries = fs::read_dir(path).ok()?;
    Some(
        entries
            .map(|e| e.unwrap())
            .map(|e| {
                let bytes = fs::read(e.path()).unwrap_or_default();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    (bytes.len(), crc32c::crc32c(&bytes)),
                )
            })
            .collect(),
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_object(o: &Output) -> Value {
    let lines = json_lines(o);
    assert_eq!(lines.len(), 1, "{}", stdout(o));
    lines.into_iter().next().unwrap()
}

/// The commands that open an existing partition, with the arguments each needs.
const OPENING_COMMANDS: &[&[&str]] = &[
    &["read"],
    &["recover"],
    &["recover", "--dry-run"],
    &["truncate", "--to", "0"],
    &["truncate", "--start-at", "0"],
    &["delete-records", "--before", "0"],
    &["retention"],
    &["compact"],
    &["compact", "--dry-run"],
    &["verify"],
    &["dump"],
];

#[test]
fn every_opening_command_refuses_a_directory_without_a_partition_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let unrelated = tmp.path().join("notes");
    fs::create_dir(&unrelated).unwrap();
    fs::write(unrelated.join("todo.txt"), b"buy milk\n").unwrap();
    fs::create_dir(unrelated.join("drafts")).unwrap();
    let missing = tmp.path().join("no-such-partition");
    for dir in [&empty, &unrelated, &missing] {
        for args in OPENING_COMMANDS {
            let before = listing(dir);
            let o = run_path(args, dir);
            let err = stderr(&o);
            assert_eq!(
                o.status.code(),
                Some(2),
                "{args:?} {}: {err}",
                dir.display()
            );
            let said = if dir == &missing {
                "no such file or directory"
            } else {
                "not a partition directory"
            };
            assert!(err.contains(said), "{args:?} {}: {err}", dir.display());
            assert_eq!(listing(dir), before, "{args:?} changed {}", dir.display());
        }
    }
    // `truncate` and `delete-records` no longer claim "nothing was changed" over a new log.
    let o = run_path(&["truncate", "--to", "0", "--json"], &empty);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

#[test]
fn verify_and_dump_call_a_kafka_named_directory_without_a_log_no_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    fs::create_dir(&dir).unwrap();
    for cmd in ["verify", "dump"] {
        let o = run_path(&[cmd], &dir);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stdout(&o));
        assert!(stderr(&o).contains("no log in"), "{cmd}: {}", stderr(&o));
        assert_eq!(listing(&dir), Some(BTreeMap::new()));
    }
}

#[test]
fn the_library_open_existing_refuses_with_a_typed_error_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("notes");
    fs::create_dir(&dir).unwrap();
    match Log::open_existing(&dir, LogConfig::default()) {
        Err(oncelog::OpenError::NotAPartition { reason, .. }) => {
            assert_eq!(reason, oncelog::NotAPartitionReason::NoLog)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(listing(&dir), Some(BTreeMap::new()));
    match Log::open_existing(tmp.path().join("missing"), LogConfig::default()) {
        Err(e @ oncelog::OpenError::NotAPartition { .. }) => {
            assert_eq!(e.kind(), "not_a_partition")
        }
        other => panic!("{other:?}"),
    }
    assert!(!tmp.path().join("missing").exists());
    // A log that is there opens.
    let log_dir = tmp.path().join("p-0");
    common_cli::fresh_log(&log_dir);
    Log::open_existing(&log_dir, LogConfig::default())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn bench_with_dir_says_where_it_kept_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bench-log");
    let d = dir.to_str().unwrap();
    let o = run(&["bench", "--messages", "200", "--dir", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("log kept in {d}")),
        "{}",
        stdout(&o)
    );
    let dir2 = tmp.path().join("bench-log-2");
    let d2 = dir2.to_str().unwrap();
    let o = run(&["bench", "--messages", "200", "--json", "--dir", d2]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_object(&o)["kept_in"], d2);
    assert!(dir2.join("00000000000000000000.log").exists());
}

/// A closed log of 45 batches of 10 records in several segments: 450 records.
fn log_of_450(dir: &Path) -> Vec<Vec<u8>> {
    let config = LogConfig::builder()
        .segment_bytes(16 * 1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap();
    let batches: Vec<Vec<u8>> = (0..45).map(|_| batch(10, None)).collect();
    let log = Log::open(dir, config).unwrap();
    for b in &batches {
        assert!(matches!(log.append(b).unwrap(), AppendOutcome::Appended(_)));
    }
    assert!(log.maintenance().segment_count() > 2);
    log.close().unwrap();
    batches
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    fs::write(path, &bytes).unwrap();
}

/// The reproduction: one flipped byte in the first batch, `--deep --mode
/// tolerate-any`, cut a 450-record log to nothing and exited 0 without a word of it.
#[test]
fn deep_tolerant_recovery_of_a_flipped_first_batch_previews_then_exits_3_with_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let batches = log_of_450(dir.path());
    let all_bytes: usize = batches.iter().map(Vec::len).sum();
    flip(&segment_files(dir.path())[0], 100);
    let before = listing(dir.path());
    let args = ["recover", "--deep", "--mode", "tolerate-any"];

    let o = run_path(&[&args[..], &["--dry-run", "--json"]].concat(), dir.path());
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let preview = json_object(&o);
    assert_eq!(preview["dry_run"], true);
    assert_eq!(preview["data_removed"], true);
    assert_eq!(
        preview["removed_totals"],
        serde_json::json!({"batches": 45, "records": 450, "bytes": all_bytes})
    );
    assert_eq!(preview["log_end_offset"], 0);
    assert_eq!(
        listing(dir.path()),
        before,
        "the dry run changed the directory"
    );

    let o = run_path(&[&args[..], &["--dry-run"]].concat(), dir.path());
    assert_eq!(o.status.code(), Some(3));
    let text = stdout(&o);
    assert!(text.starts_with("DRY RUN: "), "{text}");
    assert!(
        text.contains(&format!(
            "DATA REMOVED: 45 batches, 450 records, {all_bytes} bytes; the log would end at offset 0"
        )),
        "{text}"
    );
    assert!(text.contains("CUT "), "{text}");
    assert!(text.contains("DELETED "), "{text}");
    assert_eq!(
        listing(dir.path()),
        before,
        "the dry run changed the directory"
    );

    let o = run_path(&[&args[..], &["--json"]].concat(), dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    let done = json_object(&o);
    assert_eq!(done["dry_run"], false);
    assert_eq!(done["removed_totals"], preview["removed_totals"]);
    assert_eq!(done["removed"], preview["removed"]);
    assert_eq!(done["truncations"], preview["truncations"]);
    assert_eq!(done["segments_deleted"], preview["segments_deleted"]);
    assert_eq!(done["log_end_offset"], 0);

    // Nothing is left to remove: a second recovery is clean and exits 0.
    let o = run_path(&["recover"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("data removed: none"), "{}", stdout(&o));
}

/// One way of damaging a closed log, and the recovery arguments that cut it.
struct Case {
    name: &'static str,
    damage: fn(&Path),
    args: &'static [&'static str],
    /// Records the damage itself took away (a deleted file), which recovery cannot count.
    lost: u64,
}

const CASES: &[Case] = &[
    Case {
        name: "flip in a middle segment, tolerate-any deep",
        damage: |d| flip(&segment_files(d)[1], 200),
        args: &["--deep", "--mode", "tolerate-any"],
        lost: 0,
    },
    Case {
        name: "garbage appended to the last segment",
        damage: |d| {
            let last = segment_files(d).pop().unwrap();
            let mut bytes = fs::read(&last).unwrap();
            bytes.extend_from_slice(&[0x5a; 300]);
            fs::write(&last, bytes).unwrap();
        },
        args: &["--mode", "tolerate-any"],
        lost: 0,
    },
    Case {
        name: "middle segment deleted",
        damage: |d| fs::remove_file(&segment_files(d)[1]).unwrap(),
        args: &["--mode", "tolerate-any"],
        // 14 batches of 10 records fill a 16 KiB segment.
        lost: 140,
    },
    Case {
        name: "last segment cut short",
        damage: |d| {
            let last = segment_files(d).pop().unwrap();
            let len = fs::metadata(&last).unwrap().len();
            fs::OpenOptions::new()
                .write(true)
                .open(&last)
                .unwrap()
                .set_len(len - 50)
                .unwrap();
        },
        args: &["--mode", "tolerate-any"],
        lost: 0,
    },
    Case {
        name: "flip in the first segment, tolerate-any deep: every later segment deleted",
        damage: |d| flip(&segment_files(d)[0], 100),
        args: &["--deep", "--mode", "tolerate-any"],
        lost: 0,
    },
    Case {
        name: "stray leftovers and an orphan index",
        damage: |d| {
            fs::write(d.join("00000000000000000010.snapshot.tmp"), b"half").unwrap();
            fs::write(d.join("00000000000000099999.index"), [0u8; 8]).unwrap();
            fs::write(d.join("00000000000000000000.log.deleted"), b"old").unwrap();
        },
        args: &[],
        lost: 0,
    },
    Case {
        name: "checkpoint removed, index removed",
        damage: |d| {
            fs::remove_file(d.join("oncelog.checkpoint")).unwrap();
            fs::remove_file(d.join("00000000000000000000.index")).unwrap();
        },
        args: &[],
        lost: 0,
    },
];

/// For every kind of damage: the dry run changes no byte and reports exactly what the
/// recovery then does (cuts, deletions, rebuilds, data removed, bounds) with the same exit
/// code, 3 when data goes.
#[test]
fn dry_run_reports_what_the_recovery_then_does_for_every_kind_of_damage() {
    for case in CASES {
        let dir = tempfile::tempdir().unwrap();
        log_of_450(dir.path());
        (case.damage)(dir.path());
        let before = listing(dir.path());
        let mut args = vec!["recover", "--json"];
        args.extend_from_slice(case.args);
        let o = run_path(&[&args[..], &["--dry-run"]].concat(), dir.path());
        let preview = json_object(&o);
        let preview_code = o.status.code();
        assert_eq!(
            listing(dir.path()),
            before,
            "{}: dry run changed it",
            case.name
        );

        let o = run_path(&args, dir.path());
        let done = json_object(&o);
        assert_eq!(o.status.code(), preview_code, "{}: {done}", case.name);
        for field in [
            "truncations",
            "segments_deleted",
            "indexes_rebuilt",
            "leftovers",
            "removed",
            "removed_totals",
            "data_removed",
            "log_start_offset",
            "log_end_offset",
            "segments",
        ] {
            assert_eq!(done[field], preview[field], "{}: {field}", case.name);
        }
        for field in ["snapshot_offset", "removed_above_end", "producers"] {
            assert_eq!(
                done["producer_state"][field], preview["producer_state"][field],
                "{}: producer_state.{field}",
                case.name
            );
        }
        let removed = done["removed_totals"]["records"].as_u64().unwrap();
        let expected_code = if done["data_removed"] == true { 3 } else { 0 };
        assert_eq!(preview_code, Some(expected_code), "{}: {done}", case.name);
        assert_eq!(
            removed + done["log_end_offset"].as_u64().unwrap() + case.lost,
            450,
            "{}: every record is either kept or counted as removed: {done}",
            case.name
        );
    }
}

#[test]
fn recover_that_removes_nothing_exits_0_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    log_of_450(dir.path());
    let before = contents(dir.path());
    let o = run_path(&["recover", "--dry-run"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("recovery would write no file"),
        "{}",
        stdout(&o)
    );
    let o = run_path(&["recover"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("data removed: none"), "{}", stdout(&o));
    assert_eq!(contents(dir.path()), before);
}

#[test]
fn recover_backup_holds_the_directory_as_it_was_and_restores_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    log_of_450(&dir);
    flip(&segment_files(&dir)[0], 100);
    let before = contents(&dir);
    let backup = tmp.path().join("backup");

    // A backup is never written over something, nor inside the partition.
    fs::create_dir(&backup).unwrap();
    fs::write(backup.join("keep"), b"x").unwrap();
    let args = ["recover", "--deep", "--mode", "tolerate-any", "--backup"];
    for to in [backup.clone(), dir.join("inside")] {
        let o = run(&[&args[..], &[to.to_str().unwrap(), dir.to_str().unwrap()]].concat());
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("nothing was changed"), "{}", stderr(&o));
        assert_eq!(contents(&dir), before);
    }
    fs::remove_dir_all(&backup).unwrap();

    let o = run(&[
        &args[..],
        &[backup.to_str().unwrap(), dir.to_str().unwrap()],
    ]
    .concat());
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("backed up "), "{}", stdout(&o));
    assert_ne!(contents(&dir), before, "recovery cut the log");
    assert_eq!(
        contents(&backup),
        before,
        "the backup is the directory as it was"
    );

    // Restoring the backup brings the damaged log back, byte for byte.
    for e in fs::read_dir(&dir).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    for e in fs::read_dir(&backup).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    assert_eq!(contents(&dir), before);
    let o = run_path(
        &["recover", "--deep", "--mode", "tolerate-any", "--dry-run"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    assert!(stdout(&o).contains("450 records"), "{}", stdout(&o));
}

#[test]
fn dry_run_of_a_log_another_process_holds_could_not_run_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    log_of_450(dir.path());
    let live = Log::open_existing(dir.path(), LogConfig::default()).unwrap();
    let before = listing(dir.path());
    for args in [&["recover", "--dry-run"][..], &["recover"]] {
        let o = run_path(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains("in use"), "{args:?}: {}", stderr(&o));
        assert_eq!(listing(dir.path()), before, "{args:?}");
    }
    live.close().unwrap();
}
