//! `oncelog verify` and `oncelog recover`, run as a user would: clean, damaged and crashed
//! logs, each recovery mode, and what a refused recovery leaves on disk.

use crate::common_cli;

use std::fs;
use std::path::Path;
use std::process::Output;

use common_cli::{contents, crashed_log, fresh_log, json_lines, run_path, segment_log, stdout};
use serde_json::Value;

/// Zeros the last 20 bytes of the last batch, as a torn page write leaves it; returns the
/// position where that batch starts.
fn tear_last_batch(dir: &Path, batches: &[Vec<u8>]) -> usize {
    let start: usize = batches[..batches.len() - 1].iter().map(Vec::len).sum();
    let end = start + batches[batches.len() - 1].len();
    let path = segment_log(dir);
    let mut bytes = fs::read(&path).unwrap();
    bytes[end - 20..end].fill(0);
    fs::write(&path, &bytes).unwrap();
    start
}

fn json_object(o: &Output) -> Value {
    let lines = json_lines(o);
    assert_eq!(lines.len(), 1, "{}", stdout(o));
    lines.into_iter().next().unwrap()
}

#[test]
fn verify_of_a_cleanly_closed_log_is_clean_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let batches = fresh_log(dir.path());
    let o = run_path(&["verify", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["clean"], true);
    assert_eq!(r["segments"], 1);
    assert_eq!(r["batches"], 3);
    assert_eq!(r["bytes"], batches.concat().len() as u64);
    assert_eq!(r["snapshots"], 1);
    assert_eq!(r["problems"], serde_json::json!([]));

    let o = run_path(&["verify"], dir.path());
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.contains("1 segment, 3 batches"), "{text}");
    assert!(text.ends_with("clean\n"), "{text}");
}

#[test]
fn verify_lists_each_problem_with_file_and_byte_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let batches = fresh_log(dir.path());
    let path = segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let second = batches[0].len();
    bytes[second + 70] ^= 0x01; // inside the second batch's records: its CRC no longer matches
    fs::write(&path, &bytes).unwrap();
    let before = contents(dir.path());

    let o = run_path(&["verify", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["clean"], false);
    let problems = r["problems"].as_array().unwrap();
    let crc = problems
        .iter()
        .find(|p| p["reason"].as_str().unwrap().contains("CRC"))
        .unwrap_or_else(|| panic!("no CRC problem in {problems:?}"));
    assert!(crc["file"]
        .as_str()
        .unwrap()
        .ends_with("00000000000000000000.log"));
    assert_eq!(crc["position"], second as u64);

    let text = stdout(&run_path(&["verify"], dir.path()));
    assert!(
        text.contains(&format!("00000000000000000000.log: byte {second}: CRC")),
        "{text}"
    );
    assert!(
        text.ends_with(" problem\n") || text.ends_with(" problems\n"),
        "{text}"
    );
    assert_eq!(
        contents(dir.path()),
        before,
        "verify must not change a byte"
    );
}

#[test]
fn recover_cuts_a_torn_tail_and_reports_file_position_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let batches = crashed_log(dir.path(), 2, 2);
    let torn_at = tear_last_batch(dir.path(), &batches);
    let file_len = fs::metadata(segment_log(dir.path())).unwrap().len();
    assert_eq!(run_path(&["verify"], dir.path()).status.code(), Some(1));

    let o = run_path(&["recover", "--json"], dir.path());
    // Exit 3: recovered, and data (the torn batch) removed.
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["data_removed"], true);
    assert_eq!(
        (
            r["removed_totals"]["batches"].as_u64(),
            r["removed_totals"]["records"].as_u64()
        ),
        (Some(1), Some(5))
    );
    assert_eq!(r["mode"], "tolerate-tail");
    assert_eq!(r["clean_shutdown"], false);
    assert_eq!(r["checkpoint_found"], true);
    assert_eq!(r["bytes_validated"], torn_at as u64);
    let cuts = r["truncations"].as_array().unwrap();
    assert_eq!(cuts.len(), 1, "{cuts:?}");
    assert!(cuts[0]["file"]
        .as_str()
        .unwrap()
        .ends_with("00000000000000000000.log"));
    assert_eq!(cuts[0]["position"], torn_at as u64);
    assert_eq!(cuts[0]["file_len"], file_len);
    assert_eq!(cuts[0]["bytes_cut"], file_len - torn_at as u64);
    assert!(
        cuts[0]["damage"].as_str().unwrap().contains("CRC"),
        "{cuts:?}"
    );
    assert_eq!(r["log_end_offset"], 15);
    assert_eq!(r["producer_state"]["producers"], 1);

    // Closed cleanly: the directory now verifies clean and dumps without damage.
    let o = run_path(&["verify"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(run_path(&["dump"], dir.path()).status.code(), Some(0));
    let text = stdout(&run_path(&["recover"], dir.path()));
    assert!(text.contains("last shutdown: clean"), "{text}");
}

#[test]
fn recover_text_names_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let batches = crashed_log(dir.path(), 1, 2);
    let torn_at = tear_last_batch(dir.path(), &batches);
    let o = run_path(&["recover"], dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("last shutdown: unclean"), "{text}");
    assert!(
        text.contains("DATA REMOVED: 1 batch, 5 records, "),
        "{text}"
    );
    assert!(
        text.contains(&format!("00000000000000000000.log at byte {torn_at}: ")),
        "{text}"
    );
    assert!(text.contains("producer state: "), "{text}");
    assert!(text.contains("closed cleanly"), "{text}");
}

#[test]
fn recover_refused_by_its_mode_exits_1_and_changes_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let batches = crashed_log(dir.path(), 2, 2);
    let torn_at = tear_last_batch(dir.path(), &batches);
    let before = contents(dir.path());

    let o = run_path(&["recover", "--mode", "absolute", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["refused"], true);
    assert_eq!(r["mode"], "absolute");
    assert!(r["file"]
        .as_str()
        .unwrap()
        .ends_with("00000000000000000000.log"));
    assert_eq!(r["position"], torn_at as u64);
    assert!(r["damage"].as_str().unwrap().contains("CRC"), "{r}");
    assert_eq!(
        contents(dir.path()),
        before,
        "a refused recovery changed the directory"
    );

    let o = run_path(&["recover", "--mode", "absolute"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(&format!("00000000000000000000.log: byte {torn_at}: ")),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        contents(dir.path()),
        before,
        "a refused recovery changed the directory"
    );

    // The tolerant modes cut it, and say so with exit 3.
    let o = run_path(&["recover", "--mode", "tolerate-any"], dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
}

#[test]
fn recover_and_verify_refuse_a_missing_directory_without_creating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-partition");
    for cmd in ["recover", "verify"] {
        let o = run_path(&[cmd], &missing);
        assert_eq!(o.status.code(), Some(2), "{cmd} could not run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no such file or directory"), "{cmd}: {err}");
        assert!(!missing.exists(), "{cmd} created the directory");
    }
}

/// Leftover temporary files are removed only once recovery has decided to go ahead, so a mode
/// that refuses leaves them, and every other byte, in place.
#[test]
fn recover_refused_with_leftover_files_changes_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let batches = crashed_log(dir.path(), 2, 2);
    tear_last_batch(dir.path(), &batches);
    fs::write(
        dir.path().join("00000000000000000010.snapshot.tmp"),
        b"half",
    )
    .unwrap();
    let before = contents(dir.path());
    let o = run_path(&["recover", "--mode", "absolute"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(
        contents(dir.path()).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "a refused recovery removed files"
    );
}

#[test]
fn verify_after_a_crash_lists_the_untrimmed_indexes_until_recover_rebuilds_them() {
    let dir = tempfile::tempdir().unwrap();
    crashed_log(dir.path(), 30, 10);
    let o = run_path(&["verify", "--json"], dir.path());
    let r = json_object(&o);
    let problems = r["problems"].as_array().unwrap();
    assert_eq!(o.status.code(), Some(1), "{r}");
    assert!(
        problems
            .iter()
            .all(|p| p["file"].as_str().unwrap().ends_with("index")
                && p["reason"].as_str().unwrap().contains("preallocated")),
        "{problems:?}"
    );
    assert_eq!(r["batches"], 40);
    assert!(r["preallocated_bytes"].as_u64().unwrap() > 0);

    let o = run_path(&["recover", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let r = json_object(&o);
    assert_eq!(r["truncations"], serde_json::json!([]));
    assert_eq!(r["log_end_offset"], 200);
    let o = run_path(&["verify"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn a_damaged_checkpoint_is_reported_by_verify_refused_by_absolute_and_repaired_by_recover() {
    let dir = tempfile::tempdir().unwrap();
    fresh_log(dir.path());
    let p = dir.path().join("oncelog.checkpoint");
    let mut bytes = fs::read(&p).unwrap();
    let at = String::from_utf8_lossy(&bytes)
        .find("log_start_offset 0")
        .unwrap()
        + "log_start_offset ".len();
    bytes[at] ^= 1; // '0' -> '1': would hide offset 0
    fs::write(&p, &bytes).unwrap();

    let o = run_path(&["verify", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let r = json_object(&o);
    let kinds: Vec<&str> = r["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["damaged_checkpoint"], "{r}");

    let before = contents(dir.path());
    let o = run_path(&["recover", "--mode", "absolute", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(json_object(&o)["damage_kind"], "damaged_checkpoint");
    assert_eq!(contents(dir.path()), before);

    let o = run_path(&["recover"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("DAMAGED checkpoint"), "{text}");
    assert!(text.contains("log: offsets 0..6"), "{text}");
    assert_eq!(run_path(&["verify"], dir.path()).status.code(), Some(0));
}
