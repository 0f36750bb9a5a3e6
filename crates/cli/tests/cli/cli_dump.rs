//! `oncelog dump`, run as a user would: fresh, real-Kafka, damaged and crashed segment files,
//! indexes and snapshots, file by file or a whole directory.

use crate::common_cli;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common_cli::{
    batch, contents, crashed_log, fresh_log, json_lines, of_type, run, run_path, segment_log,
    stdout, TS,
};
use oncelog::producer::snapshot::{self, SnapshotVersion};
use oncelog::producer::{BatchMetadata, ProducerEntry};
use oncelog::{Log, LogConfig};
use serde_json::Value;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/kafka-logdirs"
);

fn crc_of(batch: &[u8]) -> u64 {
    u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]) as u64
}

#[test]
fn dump_json_of_a_fresh_log_has_every_header_field_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let batches = fresh_log(dir.path());
    let o = run_path(&["dump", "--json"], &segment_log(dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 3);
    let first = &lines[0];
    assert_eq!(first["type"], "batch");
    assert_eq!(first["base_offset"], 0);
    assert_eq!(first["last_offset"], 1);
    assert_eq!(first["position"], 0);
    assert_eq!(first["size"], batches[0].len() as u64);
    assert_eq!(first["magic"], 2);
    assert_eq!(first["crc"], crc_of(&batches[0]));
    assert_eq!(first["crc_valid"], true);
    assert_eq!(first["attributes"], 0);
    assert_eq!(first["compression"], "none");
    assert_eq!(first["timestamp_type"], "CreateTime");
    assert_eq!(first["is_transactional"], false);
    assert_eq!(first["is_control"], false);
    assert_eq!(first["partition_leader_epoch"], 0);
    assert_eq!(first["base_timestamp"], TS);
    assert_eq!(first["max_timestamp"], TS + 1);
    assert_eq!(first["producer_id"], 7);
    assert_eq!(first["producer_epoch"], 2);
    assert_eq!(first["base_sequence"], 0);
    assert_eq!(first["records_count"], 2);

    let second = &lines[1];
    assert_eq!(second["base_offset"], 2);
    assert_eq!(second["last_offset"], 4);
    assert_eq!(second["position"], batches[0].len() as u64);
    assert_eq!(second["producer_id"], -1);
    assert_eq!(second["base_sequence"], -1);
    assert_eq!(second["records_count"], 3);
    let third = &lines[2];
    assert_eq!(third["base_offset"], 5);
    assert_eq!(third["last_offset"], 5);
    assert_eq!(third["base_sequence"], 2);
}

#[test]
fn dump_text_of_a_fresh_log_is_one_line_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    fresh_log(dir.path());
    let o = run_path(&["dump"], &segment_log(dir.path()));
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    let batch_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("batch ")).collect();
    assert_eq!(batch_lines.len(), 3, "{text}");
    assert!(batch_lines[0].starts_with("batch offsets 0..1 position 0 "));
    assert!(batch_lines[0].contains(" ok "));
    assert!(batch_lines[0].contains("producer 7 epoch 2 seq 0 records 2"));
    assert!(batch_lines[1].starts_with("batch offsets 2..4 "));
}

#[test]
fn dump_of_a_directory_lists_log_then_indexes_with_absolute_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::builder()
        .segment_bytes(8 * 1024)
        .index_interval_bytes(1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for _ in 0..40 {
        log.append(&batch(5, None)).unwrap();
    }
    let segments = log.maintenance().segment_base_offsets();
    log.close().unwrap();
    assert!(segments.len() > 2, "rolled: {segments:?}");

    let o = run_path(&["dump", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    assert_eq!(of_type(&lines, "batch").len(), 40);
    let offsets: Vec<i64> = of_type(&lines, "batch")
        .iter()
        .map(|l| l["base_offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, (0..40).map(|i| i * 5).collect::<Vec<_>>());
    // The second segment's index entries are absolute offsets inside that segment.
    let second = format!("{:020}.index", segments[1]);
    let index: Vec<_> = of_type(&lines, "offset_index")
        .into_iter()
        .filter(|l| l["file"].as_str().unwrap().ends_with(&second))
        .collect();
    assert!(!index.is_empty());
    for e in &index {
        // Kafka indexes a batch by its last offset, at the position where the batch starts.
        assert!(e["offset"].as_i64().unwrap() > segments[1]);
        assert_eq!(e["offset"].as_i64().unwrap() % 5, 4);
    }
    assert!(!of_type(&lines, "time_index").is_empty());
    // Each segment's .log comes before its .index and .timeindex.
    let files: Vec<&str> = lines.iter().map(|l| l["file"].as_str().unwrap()).collect();
    let first_of = |name: &str| files.iter().position(|f| f.ends_with(name));
    let log1 = first_of(&format!("{:020}.log", segments[1])).unwrap();
    assert!(first_of(&second).unwrap() > log1);
    assert!(first_of(&format!("{:020}.log", segments[0])).unwrap() < log1);
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        fs::copy(e.path(), &dest).unwrap();
        // Writable copies: if dump tried to write, the comparison below would see it.
        let mut perms = fs::metadata(&dest).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&dest, perms).unwrap();
    }
}

#[test]
fn dump_of_every_real_kafka_partition_matches_the_manifest_and_changes_nothing() {
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(format!("{FIXTURES}/MANIFEST.json")).unwrap())
            .unwrap();
    let mut partitions = 0;
    for set in manifest["sets"].as_array().unwrap() {
        let set_dir = Path::new(FIXTURES).join(set["dir"].as_str().unwrap());
        // What the manifest says of each file, by "<partition>/<file name>".
        let files: BTreeMap<&str, &Value> = set["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["path"].as_str().unwrap(), f))
            .collect();
        for partition in fs::read_dir(&set_dir).unwrap() {
            let partition = partition.unwrap();
            if !partition.file_type().unwrap().is_dir() {
                continue;
            }
            partitions += 1;
            let name = partition.file_name().to_string_lossy().into_owned();
            let tmp = tempfile::tempdir().unwrap();
            let copy = tmp.path().join(&name);
            copy_dir(&partition.path(), &copy);
            let before = contents(&copy);

            let o = run_path(&["dump", "--json"], &copy);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", stdout(&o));
            let lines = json_lines(&o);
            let count = |file: &str, t: &str| {
                lines
                    .iter()
                    .filter(|l| l["type"] == t && l["file"].as_str().unwrap().ends_with(file))
                    .count()
            };
            let mut checked = 0;
            for file in before.keys() {
                let Some(m) = files.get(format!("{name}/{file}").as_str()) else {
                    continue;
                };
                if file.ends_with(".log") {
                    assert_eq!(
                        count(file, "batch") as u64,
                        m["batch_count"].as_u64().unwrap(),
                        "{name}/{file}"
                    );
                    checked += 1;
                } else if file.ends_with(".timeindex") {
                    assert_eq!(
                        count(file, "time_index") as u64,
                        m["entry_count"].as_u64().unwrap(),
                        "{name}/{file}"
                    );
                } else if file.ends_with(".index") {
                    assert_eq!(
                        count(file, "offset_index") as u64,
                        m["entry_count"].as_u64().unwrap(),
                        "{name}/{file}"
                    );
                } else if file.ends_with(".snapshot") {
                    let entries = m["snapshot"]["entries"].as_array().unwrap();
                    assert_eq!(
                        count(file, "producer_snapshot"),
                        entries.len(),
                        "{name}/{file}"
                    );
                }
            }
            assert!(checked > 0, "{name}: no .log in the manifest");
            assert!(of_type(&lines, "error").is_empty(), "{name}");
            assert_eq!(contents(&copy), before, "{name}: dump changed a file");
        }
    }
    assert!(partitions >= 10, "found only {partitions} partitions");
}

#[test]
fn dump_shows_real_batch_fields_as_the_manifest_decodes_them() {
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(format!("{FIXTURES}/MANIFEST.json")).unwrap())
            .unwrap();
    let set = &manifest["sets"][0];
    let set_dir = Path::new(FIXTURES).join(set["dir"].as_str().unwrap());
    let file = set["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(".log"))
        .unwrap();
    let o = run_path(
        &["dump", "--json"],
        &set_dir.join(file["path"].as_str().unwrap()),
    );
    assert_eq!(o.status.code(), Some(0));
    let lines = json_lines(&o);
    let expected = file["batches"].as_array().unwrap();
    assert_eq!(lines.len(), expected.len());
    for (got, want) in lines.iter().zip(expected) {
        for field in [
            "position",
            "base_offset",
            "last_offset",
            "partition_leader_epoch",
            "crc",
            "attributes",
            "max_timestamp",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "records_count",
        ] {
            assert_eq!(got[field], want[field], "{field}");
        }
        assert_eq!(got["base_timestamp"], want["first_timestamp"]);
        assert_eq!(
            got["size"].as_u64().unwrap(),
            want["batch_length"].as_u64().unwrap() + 12
        );
    }
}

#[test]
fn flipped_byte_is_listed_with_crc_valid_false_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let batches = fresh_log(dir.path());
    let path = segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    bytes[batches[0].len() + 100] ^= 0x40; // a record byte of the second batch
    fs::write(&path, &bytes).unwrap();

    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    let valid: Vec<&Value> = lines.iter().map(|l| &l["crc_valid"]).collect();
    assert_eq!(valid, [true, false, true]);
    let text = stdout(&run_path(&["dump"], &path));
    assert!(text.contains(" BAD "), "{text}");
}

#[test]
fn truncated_tail_gives_one_error_line_with_its_position_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let batches = fresh_log(dir.path());
    let path = segment_log(dir.path());
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();

    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    assert_eq!(of_type(&lines, "batch").len(), 2);
    let errors = of_type(&lines, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0]["position"],
        (batches[0].len() + batches[1].len()) as u64
    );
    assert!(errors[0]["file"].as_str().unwrap().ends_with(".log"));
    assert!(errors[0]["error"].as_str().unwrap().contains("truncated"));
}

#[test]
fn zeros_of_preallocated_space_are_one_line_and_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    fresh_log(dir.path());
    let path = segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let end = bytes.len();
    bytes.resize(end + 100_000, 0);
    fs::write(&path, &bytes).unwrap();

    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3]["type"], "preallocated");
    assert_eq!(lines[3]["position"], end as u64);
    assert_eq!(lines[3]["bytes"], 100_000);
    let text = stdout(&run_path(&["dump"], &path));
    assert!(text.contains(&format!(
        "100000 zero bytes of preallocated space from position {end}"
    )));
}

#[test]
fn garbage_after_the_batches_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    fresh_log(dir.path());
    let path = segment_log(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let end = bytes.len();
    bytes.extend((0..500u32).map(|i| (i * 7 + 1) as u8));
    fs::write(&path, &bytes).unwrap();

    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    let errors = of_type(&lines, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["position"], end as u64);
}

#[test]
fn index_with_a_partial_entry_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000100.index");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&5i32.to_be_bytes());
    bytes.extend_from_slice(&4200i32.to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0]);
    fs::write(&path, &bytes).unwrap();
    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    assert_eq!(lines[0]["type"], "offset_index");
    assert_eq!(lines[0]["offset"], 105);
    assert_eq!(lines[0]["position"], 4200);
    assert_eq!(lines[1]["type"], "error");
    assert_eq!(lines[1]["position"], 8);
}

#[test]
fn version_2_snapshot_shows_every_retained_batch() {
    let dir = tempfile::tempdir().unwrap();
    let window = vec![
        BatchMetadata {
            last_seq: 4,
            last_offset: 14,
            offset_delta: 4,
            timestamp: TS,
        },
        BatchMetadata {
            last_seq: 9,
            last_offset: 60,
            offset_delta: 4,
            timestamp: TS + 5,
        },
    ];
    let entry = ProducerEntry::restore(7, 2, 4, TS + 5, None, 123_456, window);
    let path = dir.path().join("00000000000000000061.snapshot");
    fs::write(&path, snapshot::encode([&entry], SnapshotVersion::V2, 0)).unwrap();

    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(0));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1);
    let e = &lines[0];
    assert_eq!(e["type"], "producer_snapshot");
    assert_eq!(e["snapshot_version"], 2);
    assert_eq!(e["producer_id"], 7);
    assert_eq!(e["producer_epoch"], 2);
    assert_eq!(e["last_sequence"], 9);
    assert_eq!(e["last_offset"], 60);
    assert_eq!(e["offset_delta"], 4);
    assert_eq!(e["timestamp"], TS + 5);
    assert_eq!(e["coordinator_epoch"], 4);
    assert_eq!(e["current_txn_first_offset"], -1);
    assert_eq!(e["last_append_ms"], 123_456);
    let batches = e["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0]["first_sequence"], 0);
    assert_eq!(batches[0]["last_sequence"], 4);
    assert_eq!(batches[0]["first_offset"], 10);
    assert_eq!(batches[0]["last_offset"], 14);
    assert_eq!(batches[1]["first_sequence"], 5);
    assert_eq!(batches[1]["first_offset"], 56);
    assert_eq!(batches[1]["timestamp"], TS + 5);

    // One flipped byte fails the snapshot's CRC: an error line, exit 1.
    let mut bytes = fs::read(&path).unwrap();
    bytes[20] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let o = run_path(&["dump", "--json"], &path);
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    assert_eq!(lines[0]["type"], "error");
    assert!(lines[0]["error"].as_str().unwrap().contains("CRC"));
}

#[test]
fn dump_of_a_missing_path_says_no_such_file_and_exits_2() {
    let o = run(&["dump", "/nonexistent/00000000000000000000.log"]);
    assert_eq!(o.status.code(), Some(2), "could not run, not damage found");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("oncelog: /nonexistent/00000000000000000000.log: no such file or directory"),
        "{err}"
    );
}

#[test]
fn dump_after_a_crash_shows_exactly_the_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let batches = crashed_log(dir.path(), 3, 2);
    let o = run_path(&["dump", "--json"], &segment_log(dir.path()));
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    let found: Vec<(i64, i64)> = of_type(&lines, "batch")
        .iter()
        .map(|b| {
            assert_eq!(b["crc_valid"], true);
            (
                b["base_offset"].as_i64().unwrap(),
                b["last_offset"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(i64, i64)> = (0..batches.len() as i64)
        .map(|i| (5 * i, 5 * i + 4))
        .collect();
    assert_eq!(found, expected);
    let preallocated = of_type(&lines, "preallocated");
    assert_eq!(preallocated.len(), 1, "{lines:?}");
    assert_eq!(preallocated[0]["position"], batches.concat().len() as u64);
    assert_eq!(
        lines.len(),
        batches.len() + 1,
        "garbage or errors: {lines:?}"
    );

    // The whole directory: nothing damaged, only batches, index entries and preallocated space.
    let o = run_path(&["dump", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let lines = json_lines(&o);
    assert!(of_type(&lines, "error").is_empty(), "{lines:?}");
    assert_eq!(of_type(&lines, "batch").len(), batches.len());
}
