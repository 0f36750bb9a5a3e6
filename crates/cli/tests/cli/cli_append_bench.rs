//! `oncelog append` (from a file and from stdin) and `oncelog bench`, run as a user would.

use crate::common_cli;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common_cli::{batch, json_lines, of_type, run, run_path, BIN};
use oncelog::{Log, LogConfig};
use serde_json::Value;

fn write_input(dir: &Path, batches: &[Vec<u8>]) -> PathBuf {
    let path = dir.join("input.bin");
    fs::write(&path, batches.concat()).unwrap();
    path
}

fn append(dir: &Path, input: &Path) -> (Option<i32>, Vec<Value>) {
    let o = Command::new(BIN)
        .arg("append")
        .arg(dir)
        .arg(input)
        .output()
        .unwrap();
    (o.status.code(), json_lines(&o))
}

fn outcome(first: i64, last: i64, kind: &str) -> Value {
    serde_json::json!({"outcome": kind, "first_offset": first, "last_offset": last})
}

#[test]
fn append_prints_offsets_and_continues_after_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("log");
    let input = write_input(
        tmp.path(),
        &[batch(10, None), batch(5, None), batch(1, None)],
    );

    let (code, lines) = append(&log_dir, &input);
    assert_eq!(code, Some(0));
    assert_eq!(
        lines,
        [
            outcome(0, 9, "appended"),
            outcome(10, 14, "appended"),
            outcome(15, 15, "appended")
        ]
    );
    // The log was closed cleanly and reopens where it ended.
    let (code, lines) = append(&log_dir, &input);
    assert_eq!(code, Some(0));
    assert_eq!(lines[0], outcome(16, 25, "appended"));
    let log = Log::open(&log_dir, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 32);
    assert!(log.recovery_report().clean_shutdown);
}

#[test]
fn append_reports_a_corrupt_batch_by_kind_and_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = batch(3, None);
    let n = bad.len();
    bad[n - 1] ^= 0xff; // the CRC no longer matches
    let input = write_input(tmp.path(), &[batch(2, None), bad, batch(2, None)]);
    let (code, lines) = append(&tmp.path().join("log"), &input);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], outcome(0, 1, "appended"));
    assert_eq!(lines[1]["outcome"], "error");
    assert_eq!(lines[1]["error"], "corrupt_batch");
    assert!(lines[1]["message"].as_str().unwrap().contains("CRC"));
    assert_eq!(lines[2], outcome(2, 3, "appended"));
}

#[test]
fn append_stops_at_truncated_input() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = batch(2, None);
    let torn = batch(2, None)[..50].to_vec();
    let input = write_input(tmp.path(), &[whole, torn]);
    let (code, lines) = append(&tmp.path().join("log"), &input);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], outcome(0, 1, "appended"));
    assert_eq!(lines[1]["outcome"], "error");
    assert_eq!(lines[1]["error"], "truncated_input");
}

#[test]
fn append_reads_standard_input() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .arg("append")
        .arg(tmp.path().join("log"))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = [batch(4, Some((42, 0, 0))), batch(4, Some((42, 0, 4)))].concat();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        json_lines(&o),
        [outcome(0, 3, "appended"), outcome(4, 7, "appended")]
    );
}

/// A retried idempotent batch after a restart. Producer-state dedup is being wired into
/// `Log::append`: until it lands the retry is appended again at the next offsets; once it has,
/// it must be a duplicate carrying the *original* offsets. Either way the offsets are exact.
#[test]
fn append_of_a_retried_idempotent_batch_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("log");
    let input = write_input(tmp.path(), &[batch(5, Some((9, 0, 0)))]);
    let (code, lines) = append(&log_dir, &input);
    assert_eq!(code, Some(0));
    assert_eq!(lines, [outcome(0, 4, "appended")]);
    let (code, lines) = append(&log_dir, &input);
    assert_eq!(code, Some(0));
    assert!(
        lines == [outcome(0, 4, "duplicate")] || lines == [outcome(5, 9, "appended")],
        "{lines:?}"
    );
}

fn bench_json(extra: &[&str]) -> Value {
    let mut args = vec![
        "bench",
        "--messages",
        "2000",
        "--segment-bytes",
        "100000",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1);
    lines[0].clone()
}

#[test]
fn bench_reports_append_flush_and_durable_figures_apart() {
    let s = bench_json(&[]);
    assert_eq!(s["messages"], 2000);
    assert_eq!(s["batches"], 20);
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert!(f("append_mb_per_s") > 0.0 && f("durable_mb_per_s") > 0.0);
    assert!(f("durable_records_per_s") > 0.0 && f("read_mb_per_s") > 0.0);
    // Durable is the appends plus the final flush, so never faster than the appends alone.
    let sum = f("append_seconds") + f("flush_seconds");
    assert!((f("durable_seconds") - sum).abs() < 1e-9, "{s}");
    assert!(f("durable_mb_per_s") <= f("append_mb_per_s"), "{s}");
    let mb = s["bytes"].as_f64().unwrap() / 1e6;
    assert!(
        (f("durable_mb_per_s") - mb / f("durable_seconds")).abs() < 1e-6,
        "MB = 10^6 B"
    );
    assert_eq!(s["read_bytes"], s["bytes"]);
    assert_eq!(s["read_crc_failures"], 0);
    assert!(s["segments"].as_u64().unwrap() > 1, "rolled: {s}");
}

#[test]
fn bench_text_names_the_figures_and_pluralises() {
    let o = run(&["bench", "--messages", "100", "--batch-size", "100"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("in 1 batch of 100 records (no producer id"),
        "{text}"
    );
    assert!(text.contains("(1 segment)"), "{text}");
    assert!(
        text.contains("durable: ") && text.contains("final flush"),
        "{text}"
    );
    assert!(text.contains("every batch's CRC-32C checked"), "{text}");
    assert!(text.contains("MB = 10^6 bytes"), "{text}");
    let o = run(&["bench", "--messages", "10", "--producers", "1"]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("(1 idempotent producer,"), "{text}");
}

#[test]
fn bench_refuses_impossible_options_with_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--batch-size", "0"], "--batch-size must be at least 1"),
        (&["--messages", "0"], "--messages must be at least 1"),
        (
            &["--message-size", "100000000000"],
            "larger than the log accepts",
        ),
        (
            &["--batch-size", "1000", "--message-size", "2000"],
            "lower --batch-size or --message-size",
        ),
        (&["--segment-bytes", "100"], "cannot hold one batch"),
        (
            &["--segment-bytes", "5"],
            "--segment-bytes: invalid segment_bytes",
        ),
        (&["--producers", "-1"], "--producers"),
        (&["--flush", "every:0"], "every:N with N"),
    ];
    for (extra, message) in cases {
        let mut args = vec!["bench"];
        args.extend_from_slice(extra);
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(message), "{extra:?}: {err}");
        assert!(o.stdout.is_empty(), "{extra:?} ran anyway");
    }
}

#[test]
fn bench_with_idempotent_producers_and_flush_policy() {
    let s = bench_json(&[
        "--producers",
        "3",
        "--flush",
        "every:500",
        "--batch-size",
        "7",
    ]);
    assert_eq!(s["messages"], 2000);
    assert_eq!(s["batches"], 286);
    assert_eq!(s["producers"], 3);
    assert_eq!(s["flush"], "every:500");
    assert_eq!(s["duplicates"], 0);
    assert_eq!(s["read_bytes"], s["bytes"]);
}

#[test]
fn bench_into_a_given_directory_leaves_a_dumpable_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bench");
    let dir_arg = dir.to_str().unwrap();
    let s = bench_json(&["--dir", dir_arg, "--producers", "2"]);
    let o = run_path(&["dump", "--json"], &dir);
    assert_eq!(o.status.code(), Some(0));
    let lines = json_lines(&o);
    assert_eq!(
        of_type(&lines, "batch").len() as u64,
        s["batches"].as_u64().unwrap()
    );
    // A second run refuses the now non-empty directory rather than mixing into it.
    let o = run(&["bench", "--messages", "10", "--dir", dir_arg]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn append_reports_a_client_rule_violation_as_invalid_record() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = batch(2, None);
    bad[7] = 5; // baseOffset 5: a client must send 0 (the CRC does not cover it)
    let input = write_input(tmp.path(), &[bad]);
    let (code, lines) = append(&tmp.path().join("log"), &input);
    assert_eq!(code, Some(1));
    assert_eq!(lines[0]["outcome"], "error");
    assert_eq!(lines[0]["error"], "invalid_record");
}
