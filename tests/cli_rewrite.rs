//! `oncelog dump` of the leader-epoch checkpoint, on a real Kafka partition and on malformed
//! files.

mod common;
mod common_cli;

use std::fs;
use std::path::Path;

use common_cli::{contents, json_lines, run_path, stdout};
use serde_json::{json, Value};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/kafka-logdirs/userchic-mymicroservices/postCreated-0"
);

#[test]
fn dump_lists_the_leader_epoch_checkpoint_of_a_real_partition_last() {
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
