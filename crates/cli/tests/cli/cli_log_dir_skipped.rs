//! An operator tool names what it skips: `dump` of a whole Kafka log dir
//! silently left out `__cluster_metadata-0`. Every kind of entry `dump`, `verify` and `recover`
//! of a log dir leave out, and every file `dump` of a partition leaves out, is named with why.
//! And `recover` of a log dir whose recovery removed data exits 3.

use crate::common;
use crate::common_cli;

use std::fs;
use std::path::{Path, PathBuf};

use common_cli::{json_lines, of_type, run_path, stdout};

const BROKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/kafka-broker"
);

/// The broker's log dir with one entry of every kind the tools leave out.
fn log_dir_with_extras() -> (
    tempfile::TempDir,
    PathBuf,
    Vec<(&'static str, &'static str)>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    common::copy_tree(Path::new(BROKER), &dir);
    for extra in ["MANIFEST.json", "README.md"] {
        fs::remove_file(dir.join(extra)).unwrap();
    }
    common::copy_tree(&dir.join("gzip-0"), &dir.join("__cluster_metadata-0"));
    for d in [
        "orders-0.9f8e7d6c5b4a39281716151413121110-delete",
        "orders-1.9f8e7d6c5b4a39281716151413121110-future",
        "orders-2.9f8e7d6c5b4a39281716151413121110-stray",
        "lost+found",
    ] {
        fs::create_dir(dir.join(d)).unwrap();
    }
    fs::write(dir.join("notes.txt"), b"not Kafka's\n").unwrap();
    let expected = vec![
        ("__cluster_metadata-0", "Kafka's metadata log"),
        (
            "orders-0.9f8e7d6c5b4a39281716151413121110-delete",
            "a deleted partition",
        ),
        (
            "orders-1.9f8e7d6c5b4a39281716151413121110-future",
            "-future",
        ),
        ("orders-2.9f8e7d6c5b4a39281716151413121110-stray", "-stray"),
        ("lost+found", "not of the form <topic>-<partition>"),
        ("notes.txt", "not a file of a Kafka log dir"),
    ];
    (tmp, dir, expected)
}

fn assert_names_each(text: &str, dir: &Path, expected: &[(&str, &str)]) {
    for (name, why) in expected {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("SKIPPED {}: ", dir.join(name).display())))
            .unwrap_or_else(|| panic!("{name} not named in\n{text}"));
        assert!(line.contains(why), "{line}");
    }
}

#[test]
fn dump_verify_and_recover_of_a_log_dir_name_every_entry_they_skip() {
    let (_tmp, dir, expected) = log_dir_with_extras();
    for cmd in ["dump", "verify", "recover"] {
        let o = run_path(&[cmd], &dir);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", stdout(&o));
        assert_names_each(&stdout(&o), &dir, &expected);
    }
    let o = run_path(&["dump", "--json"], &dir);
    let lines = json_lines(&o);
    let skipped = of_type(&lines, "skipped");
    let metadata = skipped
        .iter()
        .find(|s| {
            s["file"]
                .as_str()
                .unwrap()
                .ends_with("__cluster_metadata-0")
        })
        .unwrap_or_else(|| panic!("{skipped:?}"));
    assert_eq!(metadata["reason"], "Kafka's metadata log");
    // Each partition's files the dump leaves out, named too.
    assert!(skipped.iter().any(|s| s["file"]
        .as_str()
        .unwrap()
        .ends_with("txn-0/partition.metadata")));
}

#[test]
fn dump_of_a_partition_names_the_files_it_does_not_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    common_cli::fresh_log(&dir);
    fs::write(dir.join("00000000000000000000.log.deleted"), b"old").unwrap();
    fs::write(dir.join("stray.bin"), b"?").unwrap();
    let o = run_path(&["dump"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    for (name, why) in [
        ("oncelog.checkpoint", "the engine's checkpoint"),
        (
            "00000000000000000000.log.deleted",
            "a leftover of an interrupted operation",
        ),
        ("stray.bin", "not a file of a partition"),
    ] {
        let line = format!("SKIPPED {}: {why}", dir.join(name).display());
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
}

#[test]
fn recover_of_a_log_dir_that_removed_data_exits_3_and_names_the_partition() {
    let (_tmp, dir, _) = log_dir_with_extras();
    // As in cli_log_dir: without the marker and the partition's checkpoint, Kafka's recovery
    // point vouches for idem-0's first two segments and the damage goes into the last.
    let segment = dir.join("idem-0/00000000000000000390.log");
    let mut bytes = fs::read(&segment).unwrap();
    bytes[300] ^= 0x40;
    fs::write(&segment, &bytes).unwrap();
    fs::remove_file(dir.join("idem-0/oncelog.checkpoint")).ok();
    fs::remove_file(dir.join(".kafka_cleanshutdown")).unwrap();
    let o = run_path(&["recover", "--mode", "tolerate-any"], &dir);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("idem-0: DATA REMOVED: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("the log now ends at offset 390"), "{line}");
    // Once cut, nothing more goes: exit 0.
    let o = run_path(&["recover"], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}
