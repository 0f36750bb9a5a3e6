//! The `oncelog` binary, run as a user would: dump of fresh, real-Kafka and damaged files,
//! append from a file and from stdin, and a tiny bench.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use oncelog::format::BatchBuilder;
use oncelog::producer::snapshot::{self, SnapshotVersion};
use oncelog::producer::{BatchMetadata, ProducerEntry};
use oncelog::{AppendOutcome, Log, LogConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_oncelog");
const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/kafka-logdirs"
);
const TS: i64 = 1_700_000_000_000;

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run oncelog")
}

fn run_path(args: &[&str], path: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg(path)
        .output()
        .expect("run oncelog")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

fn batch(records: usize, producer: Option<(i64, i16, i32)>) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some((pid, epoch, seq)) = producer {
        b = b.producer(pid, epoch, seq);
    }
    for i in 0..records {
        b.append(TS + i as i64, Some(b"k"), Some(&[b'v'; 100][..]), &[]);
    }
    b.build().expect("build batch")
}

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 * 1024,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    }
}

/// A closed log with three batches: 2 records of producer 7 (epoch 2, seq 0), 3 records
/// without a producer, 1 record of producer 7 (seq 2). Returns the batches as appended.
fn fresh_log(dir: &Path) -> Vec<Vec<u8>> {
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

fn segment_log(dir: &Path) -> PathBuf {
    dir.join("00000000000000000000.log")
}

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
    let config = LogConfig {
        segment_bytes: 8 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 4096,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config).unwrap();
    for _ in 0..40 {
        log.append(&batch(5, None)).unwrap();
    }
    let segments = log.segment_base_offsets();
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

/// Every file of a directory, by name, with its bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
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
    fs::write(&path, snapshot::encode([&entry], SnapshotVersion::V2)).unwrap();

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
fn dump_refuses_a_path_it_cannot_read_with_exit_1() {
    let o = run(&["dump", "/nonexistent/00000000000000000000.log"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("oncelog:"));
}

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
fn bench_with_tiny_options_reports_positive_throughput() {
    let s = bench_json(&[]);
    assert_eq!(s["messages"], 2000);
    assert_eq!(s["batches"], 20);
    assert!(s["mb_per_s"].as_f64().unwrap() > 0.0);
    assert!(s["records_per_s"].as_f64().unwrap() > 0.0);
    assert!(s["read_mb_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(s["read_bytes"], s["bytes"]);
    assert!(s["segments"].as_u64().unwrap() > 1, "rolled: {s}");
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
    assert_eq!(o.status.code(), Some(1));
}

/// A log left as a crash leaves it: `flushed` batches of producer 9 made durable, `more` after
/// them only in the page cache, then dropped without closing (files untrimmed, the checkpoint
/// not marked clean). Returns every batch appended.
fn crashed_log(dir: &Path, flushed: usize, more: usize) -> Vec<Vec<u8>> {
    let batches: Vec<Vec<u8>> = (0..flushed + more)
        .map(|i| batch(5, Some((9, 0, 5 * i as i32))))
        .collect();
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
    assert!(text.contains("1 segments, 3 batches"), "{text}");
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
    assert!(text.contains("problem(s)"), "{text}");
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
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let r = json_object(&o);
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
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("last shutdown: unclean"), "{text}");
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

    // The tolerant modes cut it.
    let o = run_path(&["recover", "--mode", "tolerate-any"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn recover_and_verify_refuse_a_missing_directory_without_creating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-partition");
    for cmd in ["recover", "verify"] {
        let o = run_path(&[cmd], &missing);
        assert_eq!(o.status.code(), Some(1), "{cmd}");
        assert!(!missing.exists(), "{cmd} created the directory");
    }
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

#[test]
fn demo_exits_0_and_tells_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let o = Command::new(BIN)
        .arg("demo")
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for step in 1..=6 {
        assert!(
            text.contains(&format!("step {step}: ")),
            "step {step}: {text}"
        );
    }
    for expected in [
        "appended at offsets 0..2",
        "duplicate, the original offsets 9..11",
        "killed by signal 9 (SIGKILL)",
        "unclean shutdown",
        "out_of_order_sequence: expected 21, got 24",
        "invalid_producer_epoch: current 1, got 0",
        "exactly once",
        "demo passed",
    ] {
        assert!(text.contains(expected), "missing `{expected}`: {text}");
    }
    assert_eq!(text.matches("-> duplicate").count(), 1 + 5, "{text}");
    // The kept directory is a clean log.
    assert_eq!(run_path(&["verify"], &dir).status.code(), Some(0));
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
