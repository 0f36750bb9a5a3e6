//! Truncated batches never outlive the truncation on disk: after
//! `oncelog truncate` every `.log` holds exactly the log's batches, and `dump` lists only what
//! the log holds, naming a dead tail (one a reader held through close) as such.

use crate::common_cli;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use common_cli::{json_lines, of_type, run_path, stdout};
use oncelog::format::BatchIter;
use oncelog::{AppendOutcome, Log, LogConfig};

fn config() -> LogConfig {
    common_cli::small_config()
        .into_builder()
        .segment_bytes(4 * 1024)
        .build()
        .unwrap()
}

/// One test at a time (see cli_rewrite.rs: a child holds copies of a log's lock file).
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A log of 60 three-record batches (offsets 0..180) over several segments, left open.
fn log_of(dir: &Path) -> Log {
    let log = Log::open(dir, config()).expect("open");
    for _ in 0..60 {
        assert!(matches!(
            log.append(&common_cli::batch(3, None)).expect("append"),
            AppendOutcome::Appended(_)
        ));
    }
    log
}

/// The `.log` files' lengths and where their batches end.
fn log_files(dir: &Path) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".log") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let end = BatchIter::new(&bytes)
            .map_while(Result::ok)
            .map(|(at, b)| at + b.as_bytes().len())
            .last()
            .unwrap_or(0);
        out.push((name, bytes.len(), end));
    }
    out.sort();
    out
}

fn batch_last_offsets(o: &std::process::Output) -> Vec<i64> {
    of_type(&json_lines(o), "batch")
        .iter()
        .map(|b| b["last_offset"].as_i64().unwrap())
        .collect()
}

#[test]
fn truncate_leaves_no_removed_batch_on_disk_and_dump_lists_the_log() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    log_of(dir.path()).close().unwrap();
    for to in ["150", "100", "31"] {
        let o = run_path(&["truncate", "--to", to], dir.path());
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        for (name, len, end) in log_files(dir.path()) {
            assert_eq!(len, end, "{name} after truncate --to {to}");
        }
        let o = run_path(&["dump", "--json"], dir.path());
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        let to: i64 = to.parse().unwrap();
        let last = batch_last_offsets(&o);
        assert_eq!(last.last(), Some(&(to / 3 * 3 - 1)), "{}", stdout(&o));
        assert!(of_type(&json_lines(&o), "dead_tail").is_empty());
    }
}

#[test]
fn dump_names_a_dead_tail_a_reader_kept_through_close_and_lists_only_the_log() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path());
    let held = log.read(100, 4096).unwrap();
    log.replica().truncate_to(100).unwrap();
    log.close().unwrap();
    // The reader still holds bytes after the cut: the file keeps them, dead (listed below).
    assert!(!held.is_empty());
    let o = run_path(&["dump", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let last = batch_last_offsets(&o);
    assert!(last.iter().all(|&l| l < 99), "{last:?}");
    assert_eq!(last.last(), Some(&98));
    let lines = json_lines(&o);
    let dead = of_type(&lines, "dead_tail");
    assert_eq!(dead.len(), 1, "{}", stdout(&o));
    // From the end of batch 96..98 to the end of the file.
    let file = dead[0]["file"].as_str().unwrap();
    let batch_at_96 = of_type(&lines, "batch")
        .into_iter()
        .find(|b| b["base_offset"] == 96)
        .unwrap();
    let end = batch_at_96["position"].as_u64().unwrap() + batch_at_96["size"].as_u64().unwrap();
    assert_eq!(dead[0]["position"].as_u64(), Some(end));
    let len = std::fs::metadata(file).unwrap().len();
    assert_eq!(dead[0]["bytes"].as_u64(), Some(len - end));
    assert!(len > end);
    let text = stdout(&run_path(&["dump"], dir.path()));
    assert!(text.contains("dead tail"), "{text}");
    drop(held);
}
