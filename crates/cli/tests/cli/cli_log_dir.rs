//! `oncelog dump`, `verify` and `recover` of a whole log dir (the Kafka 4.4 broker's of
//! `tests/fixtures/kafka-broker`), and `oncelog bench --partitions`.

use crate::common;
use crate::common_cli;

use std::path::{Path, PathBuf};

use common_cli::{json_lines, of_type, run, run_path, stdout};

const BROKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/kafka-broker"
);

fn log_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    common::copy_tree(Path::new(BROKER), &dir);
    for extra in ["MANIFEST.json", "README.md"] {
        std::fs::remove_file(dir.join(extra)).unwrap();
    }
    (tmp, dir)
}

fn partition_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("PARTITION "))
        .collect()
}

#[test]
fn verify_of_a_log_dir_checks_every_partition_and_the_dir_s_own_files() {
    let (_tmp, dir) = log_dir();
    let before = common::tree_digest(&dir);
    let o = run_path(&["verify"], &dir);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let lines = partition_lines(&text);
    assert_eq!(lines.len(), 10, "{text}");
    assert!(lines.iter().all(|l| l.contains(": clean: ")), "{text}");
    assert!(
        lines[6].starts_with("PARTITION rolled-0: clean: 18 segments, 150 batches"),
        "{text}"
    );
    assert!(
        text.contains("recovery-point-offset-checkpoint: 10 entries"),
        "{text}"
    );
    assert!(text.ends_with("10 partitions, 10 clean, 0 not\n"), "{text}");
    assert_eq!(common::tree_digest(&dir), before, "verify changed a file");

    let o = run_path(&["verify", "--json"], &dir);
    let lines = json_lines(&o);
    assert_eq!(of_type(&lines, "partition").len(), 10);
    assert_eq!(of_type(&lines, "offset_checkpoint").len(), 4);
    let summary = of_type(&lines, "summary")[0];
    assert_eq!(
        (summary["partitions"].as_u64(), summary["failed"].as_u64()),
        (Some(10), Some(0))
    );
}

#[test]
fn verify_reports_a_malformed_checkpoint_and_a_damaged_partition_and_looks_at_the_rest() {
    let (_tmp, dir) = log_dir();
    std::fs::write(dir.join("log-start-offset-checkpoint"), "0\n1\nidem 0\n").unwrap();
    let segment = dir.join("gzip-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[200] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let o = run_path(&["verify"], &dir);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "PROBLEM {}: line 3: ",
            dir.join("log-start-offset-checkpoint").display()
        )),
        "{text}"
    );
    let lines = partition_lines(&text);
    assert_eq!(lines.len(), 10);
    // The CRC mismatch, and the bytes to the next valid batch that could not be checked.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("PARTITION gzip-0: 2 problems")),
        "{text}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains(": clean: ")).count(),
        9,
        "{text}"
    );
    assert!(text.ends_with("10 partitions, 9 clean, 1 not\n"), "{text}");
}

#[test]
fn dump_of_a_log_dir_lists_every_partition_s_files() {
    let (_tmp, dir) = log_dir();
    let o = run_path(&["dump"], &dir);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(partition_lines(&text).len(), 10);
    // Its files with its two .txnindex files.
    assert!(text.contains("PARTITION txn-0: intact, 19 files"), "{text}");
    let o = run_path(&["dump", "--json"], &dir);
    let lines = json_lines(&o);
    let batches = of_type(&lines, "batch");
    assert!(batches
        .iter()
        .any(|b| b["file"].as_str().unwrap().contains("/lz4-0/")));
    assert_eq!(of_type(&lines, "partition").len(), 10);
    assert_eq!(of_type(&lines, "summary")[0]["failed"], 0);
}

#[test]
fn recover_of_a_log_dir_opens_every_partition_in_parallel_and_reports_each() {
    let (_tmp, dir) = log_dir();
    let o = run_path(&["recover", "--threads", "3"], &dir);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let lines = partition_lines(&text);
    assert_eq!(lines.len(), 10);
    assert!(
        lines.iter().any(|l| l.starts_with(
            "PARTITION rolled-0: clean: offsets 0..2000, 18 segments, 0 validated, 18 vouched"
        )),
        "{text}"
    );
    assert!(text.contains("opened on 3 threads"), "{text}");
    assert!(
        text.contains("0 segments validated (0 bytes), 34 segments trusted"),
        "{text}"
    );
    assert!(dir.join(".kafka_cleanshutdown").exists(), "closed cleanly");

    // A partition the mode refuses is reported and changed in nothing; the others recover.
    // Without the marker, Kafka's recovery point (450, the log end) vouches for the first two
    // segments only: the damage goes into the last, which is validated.
    let segment = dir.join("idem-0/00000000000000000390.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[300] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    std::fs::remove_file(dir.join("idem-0/oncelog.checkpoint")).unwrap();
    std::fs::remove_file(dir.join(".kafka_cleanshutdown")).unwrap();
    let before = common::tree_digest(&dir.join("idem-0"));
    let o = run_path(&["recover", "--mode", "absolute", "--json"], &dir);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let lines = json_lines(&o);
    let parts = of_type(&lines, "partition");
    let failed: Vec<_> = parts.iter().filter(|p| p["recovered"] == false).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (failed[0]["partition"].as_str(), failed[0]["kind"].as_str()),
        (Some("idem-0"), Some("refused"))
    );
    assert_eq!(parts.len(), 10);
    let mut after = common::tree_digest(&dir.join("idem-0"));
    after.remove("oncelog.lock");
    let mut before = before;
    before.remove("oncelog.lock");
    assert_eq!(after, before, "the refused partition was changed");
}

#[test]
fn bench_across_partitions_from_several_threads() {
    let o = run(&[
        "bench",
        "--partitions",
        "3",
        "--threads",
        "2",
        "--messages",
        "3000",
        "--batch-size",
        "10",
        "--producers",
        "2",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = &json_lines(&o)[0];
    assert_eq!(
        (s["partitions"].as_u64(), s["threads"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(s["messages"], 3000);
    assert_eq!(s["read_bytes"], s["bytes"]);
    assert_eq!(s["read_crc_failures"], 0);
    // Created in one batch; reopened after a crash with every partition and record back (the
    // bench fails otherwise).
    assert!(s["create_seconds"].as_f64().is_some(), "{s}");
    assert!(s["open_after_crash_seconds"].as_f64().is_some(), "{s}");
    let o = run(&["bench", "--partitions", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bench_with_fewer_partitions_than_threads_shares_them() {
    let o = run(&[
        "bench",
        "--partitions",
        "1",
        "--threads",
        "4",
        "--flush",
        "always",
        "--messages",
        "2000",
        "--batch-size",
        "10",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = &json_lines(&o)[0];
    assert_eq!(
        (s["partitions"].as_u64(), s["threads"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(s["messages"], 2000);
    assert_eq!(s["read_bytes"], s["bytes"]);
    assert_eq!(s["read_crc_failures"], 0);
    // A producer's batches must go in order: not from several threads.
    let o = run(&[
        "bench",
        "--partitions",
        "1",
        "--threads",
        "2",
        "--producers",
        "1",
        "--messages",
        "100",
    ]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--producers with more threads"), "{err}");
}
