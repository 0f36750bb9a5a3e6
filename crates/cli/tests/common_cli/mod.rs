//! Helpers of the tests that run the `oncelog` binary as a user would: running it, reading its
//! JSON lines, and building logs (fresh, crashed) for it to look at.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oncelog::format::BatchBuilder;
use oncelog::{AppendOutcome, Log, LogConfig};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_oncelog");
pub const TS: i64 = 1_700_000_000_000;

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run oncelog")
}

pub fn run_path(args: &[&str], path: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg(path)
        .output()
        .expect("run oncelog")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

pub fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

pub fn batch(records: usize, producer: Option<(i64, i16, i32)>) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some((pid, epoch, seq)) = producer {
        b = b.producer(pid, epoch, seq);
    }
    for i in 0..records {
        b.append(TS + i as i64, Some(b"k"), Some(&[b'v'; 100][..]), &[]);
    }
    b.build().expect("build batch")
}

pub fn small_config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(64 * 1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap()
}

/// A closed log with three batches: 2 records of producer 7 (epoch 2, seq 0), 3 records
/// without a producer, 1 record of producer 7 (seq 2). Returns the batches as appended.
pub fn fresh_log(dir: &Path) -> Vec<Vec<u8>> {
    let batches = vec![
        batch(2, Some((7, 2, 0))),
        batch(3, None),
        batch(1, Some((7, 2, 2))),
    ];
    let log = Log::open(dir, small_config()).expect("open");
    for b in &batches {
        assert!(matches!(
            log.append(b).expect("append"),
            AppendOutcome::Appended(_)
        ));
    }
    log.close().expect("close");
    batches
}

pub fn segment_log(dir: &Path) -> PathBuf {
    dir.join("00000000000000000000.log")
}

/// Every file of a directory, by name, with its length and CRC-32C (a before/after picture
/// that prints short when it differs). The lock file is not part of the log: every open, even
/// a refused one, holds it.
pub fn contents(dir: &Path) -> BTreeMap<String, (usize, u32)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != oncelog::log::LOCK_FILE_NAME)
        .map(|e| {
            let bytes = fs::read(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes.len(), crc32c::crc32c(&bytes)),
            )
        })
        .collect()
}

/// A log left as a crash leaves it: `flushed` batches of producer 9 made durable, `more` after
/// them only in the page cache, then dropped without closing (files untrimmed, the checkpoint
/// not marked clean). Returns every batch appended.
pub fn crashed_log(dir: &Path, flushed: usize, more: usize) -> Vec<Vec<u8>> {
    let batches: Vec<Vec<u8>> = (0..flushed + more)
        .map(|i| batch(5, Some((9, 0, 5 * i as i32))))
        .collect();
    // Opened and closed once first, as a log that ran before: its appends then replace a
    // clean checkpoint with an unclean one (a fresh log's appends to its first segment write
    // none, and a crash leaves it with no checkpoint at all).
    Log::open(dir, small_config())
        .expect("open")
        .close()
        .expect("close");
    let log = Log::open(dir, small_config()).expect("open");
    for (i, b) in batches.iter().enumerate() {
        assert!(matches!(
            log.append(b).expect("append"),
            AppendOutcome::Appended(_)
        ));
        if i + 1 == flushed {
            log.flush().expect("flush");
        }
    }
    log.abandon();
    batches
}
