//! Partition directories written by real Kafka brokers (`tests/fixtures/kafka-logdirs`, see its
//! `MANIFEST.json`): opened, read back batch by batch and compared with the manifest, their
//! indexes rebuilt with Kafka's 4096-byte rule and compared with the broker's files.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{batch, batch_layout, copy_dir, expected_index, read_all};
use oncelog::format::{BatchIter, RecordBatch};
use oncelog::segment::{offset_index, time_index};
use oncelog::{AppendOutcome, Log, LogConfig};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kafka-logdirs");

/// Partitions whose `.index` the broker wrote within one run, so rebuilding it with the
/// 4096-byte rule must give the very same bytes (the manifest's description of the set).
const INDEX_REPRODUCIBLE: &[&str] = &[
    "volodymyrzee-kafka/__consumer_offsets-12",
    "volodymyrzee-kafka/__consumer_offsets-18",
    "volodymyrzee-kafka/__consumer_offsets-32",
];

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(1 << 20)
        .segment_index_bytes(4096)
        .build()
        .unwrap()
}

/// One partition directory of the manifest, with its files' entries keyed by file name.
struct Partition {
    /// `set/partition`, relative to the fixtures directory.
    name: String,
    files: BTreeMap<String, Value>,
}

fn partitions() -> Vec<Partition> {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("MANIFEST.json"))
        .expect("fixtures: MANIFEST.json (tests/fixtures)");
    let manifest: Value = serde_json::from_str(&text).expect("manifest JSON");
    let mut out: BTreeMap<String, Partition> = BTreeMap::new();
    for set in manifest["sets"].as_array().expect("sets") {
        let set_dir = set["dir"].as_str().expect("dir");
        for file in set["files"].as_array().expect("files") {
            let path = file["path"].as_str().expect("path");
            let Some((part, name)) = path.rsplit_once('/') else {
                continue;
            };
            let key = format!("{set_dir}/{part}");
            out.entry(key.clone())
                .or_insert_with(|| Partition {
                    name: key,
                    files: BTreeMap::new(),
                })
                .files
                .insert(name.to_string(), file.clone());
        }
    }
    let parts: Vec<Partition> = out
        .into_values()
        .filter(|p| p.files.keys().any(|n| n.ends_with(".log")))
        .collect();
    assert!(
        parts.len() >= 10,
        "manifest lists {} partitions",
        parts.len()
    );
    parts
}

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("field {field} in {v}"))
}

/// The segments of a partition in offset order: (file stem, base offset, original bytes).
fn segments(dir: &Path) -> Vec<(String, i64, Vec<u8>)> {
    common::log_files(dir)
        .into_iter()
        .map(|name| {
            let stem = name.trim_end_matches(".log").to_string();
            let base = stem.parse().expect("20-digit name");
            let data = std::fs::read(dir.join(&name)).expect("read log");
            (stem, base, data)
        })
        .collect()
}

fn check_batch_against_manifest(part: &str, b: &RecordBatch<'_>, position: usize, m: &Value) {
    let ctx = format!("{part} batch at {position}");
    assert_eq!(position as i64, int(m, "position"), "{ctx}: position");
    assert_eq!(b.base_offset(), int(m, "base_offset"), "{ctx}: base_offset");
    assert_eq!(b.last_offset(), int(m, "last_offset"), "{ctx}: last_offset");
    assert_eq!(b.batch_length() as i64, int(m, "batch_length"), "{ctx}");
    assert_eq!(
        b.partition_leader_epoch() as i64,
        int(m, "partition_leader_epoch"),
        "{ctx}: partition_leader_epoch"
    );
    assert_eq!(b.crc() as i64, int(m, "crc"), "{ctx}: crc");
    assert!(b.is_crc_valid(), "{ctx}: CRC");
    assert_eq!(b.attributes() as i64, int(m, "attributes"), "{ctx}");
    assert_eq!(b.base_timestamp(), int(m, "first_timestamp"), "{ctx}");
    assert_eq!(b.max_timestamp(), int(m, "max_timestamp"), "{ctx}");
    assert_eq!(b.producer_id(), int(m, "producer_id"), "{ctx}");
    assert_eq!(b.producer_epoch() as i64, int(m, "producer_epoch"), "{ctx}");
    assert_eq!(b.base_sequence() as i64, int(m, "base_sequence"), "{ctx}");
    assert_eq!(b.records_count() as i64, int(m, "records_count"), "{ctx}");
}

/// The time index Kafka's rules give for a segment written in one run: at each offset-index
/// moment the running maximum (timestamp, offset of the batch that carried it) if it grew,
/// and the final entry at close.
fn expected_time_index(data: &[u8], interval: usize) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    let mut since = 0usize;
    let mut max: Option<(i64, i64)> = None;
    let push = |out: &mut Vec<(i64, i64)>, e: (i64, i64)| {
        if out.last().is_none_or(|l| e.0 > l.0) {
            out.push(e);
        }
    };
    for item in BatchIter::new(data) {
        let (_, b) = item.expect("batch");
        if max.is_none_or(|(ts, _)| b.max_timestamp() > ts) {
            max = Some((b.max_timestamp(), b.last_offset()));
        }
        if since > interval {
            push(&mut out, max.expect("set above"));
            since = 0;
        }
        since += b.size();
    }
    if let Some(m) = max {
        push(&mut out, m);
    }
    out
}

fn open_copy(part: &Partition) -> (tempfile::TempDir, PathBuf, Log) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(part.name.rsplit('/').next().expect("name"));
    copy_dir(&Path::new(FIXTURES).join(&part.name), &dir);
    let log = Log::open(&dir, config()).unwrap_or_else(|e| panic!("{}: open: {e}", part.name));
    (tmp, dir, log)
}

#[test]
fn every_fixture_partition_reads_back_exactly_as_kafka_wrote_it() {
    for part in partitions() {
        let (_tmp, dir, log) = open_copy(&part);
        let name = &part.name;
        let originals = segments(&Path::new(FIXTURES).join(name));
        let report = log.recovery_report();
        assert!(!report.checkpoint_found, "{name}: {report:?}");
        assert_eq!(
            report.segments_validated,
            originals.len(),
            "{name}: {report:?}"
        );
        assert!(report.truncations.is_empty(), "{name}: {report:?}");

        // The manifest's own description of each log file.
        let mut expected_first = None;
        let mut expected_end = 0;
        let mut all_batches: Vec<Vec<u8>> = Vec::new();
        for (stem, base, data) in &originals {
            let m = &part.files[&format!("{stem}.log")];
            assert_eq!(data.len() as i64, int(m, "size"), "{name}");
            let parsed: Vec<(usize, RecordBatch<'_>)> =
                BatchIter::new(data).map(|i| i.expect("batch")).collect();
            assert_eq!(parsed.len() as i64, int(m, "batch_count"), "{name}");
            let records: i64 = parsed.iter().map(|(_, b)| b.records_count() as i64).sum();
            assert_eq!(records, int(m, "record_count"), "{name}");
            if let Some(list) = m["batches"].as_array() {
                assert_eq!(list.len(), parsed.len(), "{name}");
                for ((pos, b), mb) in parsed.iter().zip(list) {
                    check_batch_against_manifest(name, b, *pos, mb);
                }
            }
            assert!(int(m, "first_offset") >= *base, "{name}");
            expected_first.get_or_insert(int(m, "first_offset"));
            expected_end = int(m, "last_offset") + 1;
            all_batches.extend(parsed.iter().map(|(_, b)| b.as_bytes().to_vec()));
        }
        assert_eq!(log.log_end_offset(), expected_end, "{name}: log end");
        assert_eq!(log.log_start_offset(), originals[0].1, "{name}: log start");
        assert_eq!(
            log.maintenance().segment_base_offsets(),
            originals.iter().map(|s| s.1).collect::<Vec<_>>(),
            "{name}"
        );
        // Read back in small and large fetches: the same bytes as the broker's files.
        for max_bytes in [1, 5000, 1 << 20] {
            assert_eq!(
                read_all(&log, max_bytes),
                all_batches,
                "{name}: max {max_bytes}"
            );
        }
        // A read at every offset starts with the batch that holds it.
        for offset in log.log_start_offset()..log.log_end_offset() {
            let bytes = log.read(offset, 1).expect("read");
            let b = RecordBatch::parse(&bytes).expect("batch");
            assert!(
                b.base_offset() <= offset && offset <= b.last_offset(),
                "{name}"
            );
            assert_eq!(bytes.len(), b.size(), "{name}: max_bytes 1 gives one batch");
        }

        // offset_for_timestamp: the first batch whose max timestamp reaches the target, then
        // its first record that does (Kafka's ListOffsets).
        let stamps: Vec<(i64, i64)> = all_batches
            .iter()
            .map(|b| {
                let b = RecordBatch::parse(b).expect("batch");
                (b.max_timestamp(), b.base_offset())
            })
            .collect();
        let first_record_at_or_after = |t: i64| -> Option<(i64, i64)> {
            let raw = all_batches
                .iter()
                .find(|b| RecordBatch::parse(b).expect("batch").max_timestamp() >= t)?;
            let b = RecordBatch::parse(raw).expect("batch");
            let buf = b.records_buf().expect("records");
            let found = b
                .iter_records(&buf)
                .map(|r| r.expect("record"))
                .find(|r| r.timestamp >= t)
                .map(|r| (r.timestamp, r.offset));
            Some(found.unwrap_or((b.max_timestamp(), b.base_offset())))
        };
        let global_max = stamps.iter().map(|s| s.0).max().expect("non-empty");
        let mut targets: Vec<i64> = stamps.iter().map(|s| s.0).collect();
        targets.extend(stamps.iter().map(|s| s.0 - 1));
        targets.push(i64::MIN);
        for t in targets {
            let want = first_record_at_or_after(t).expect("some batch");
            let got = log.offset_for_timestamp(t).expect("lookup").expect("found");
            assert_eq!((got.timestamp, got.offset), want, "{name}: timestamp {t}");
        }
        assert_eq!(
            log.offset_for_timestamp(global_max + 1).expect("lookup"),
            None
        );
        log.close().expect("close");

        // After close: logs untouched, indexes rebuilt by Kafka's rule.
        for (stem, base, data) in &originals {
            assert_eq!(
                &std::fs::read(dir.join(format!("{stem}.log"))).unwrap(),
                data
            );
            let index = std::fs::read(dir.join(format!("{stem}.index"))).expect(".index");
            let entries: Vec<(i64, u32)> = offset_index::decode(&index, *base)
                .map(|e| (e.offset, e.position))
                .collect();
            let rule = expected_index(&batch_layout(data), 4096);
            assert_eq!(
                entries, rule,
                "{name}: {stem}.index against the 4096-byte rule"
            );
            if let Some(m) = part.files.get(&format!("{stem}.index")) {
                let stored: Vec<(i64, u32)> = m["entries_offset_position"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .map(|e| (e[0].as_i64().unwrap(), e[1].as_u64().unwrap() as u32))
                    .collect();
                let must_match = INDEX_REPRODUCIBLE.contains(&name.as_str());
                if must_match || stored == rule {
                    let original =
                        std::fs::read(Path::new(FIXTURES).join(format!("{name}/{stem}.index")))
                            .expect("original index");
                    assert_eq!(index, original, "{name}: {stem}.index byte for byte");
                }
            }
            let time = std::fs::read(dir.join(format!("{stem}.timeindex"))).expect(".timeindex");
            let entries: Vec<(i64, i64)> = time_index::decode(&time, *base)
                .map(|e| (e.timestamp, e.offset))
                .collect();
            assert_eq!(
                entries,
                expected_time_index(data, 4096),
                "{name}: {stem}.timeindex"
            );
            if INDEX_REPRODUCIBLE.contains(&name.as_str()) {
                let m = &part.files[&format!("{stem}.timeindex")];
                let stored: Vec<(i64, i64)> = m["entries_timestamp_offset"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .map(|e| (e[0].as_i64().unwrap(), e[1].as_i64().unwrap()))
                    .collect();
                // Kafka 2.x's append path stored the offset of the *record* with the largest
                // timestamp; the rule (and Kafka's own recovery) uses the last offset of its
                // batch. Same timestamps; each broker offset lies in the batch we name.
                assert_eq!(entries.len(), stored.len(), "{name}: {stem}.timeindex");
                for (ours, theirs) in entries.iter().zip(&stored) {
                    assert_eq!(ours.0, theirs.0, "{name}: {stem}.timeindex timestamp");
                    let holder = BatchIter::new(data)
                        .map(|i| i.expect("batch").1)
                        .find(|b| b.base_offset() <= theirs.1 && theirs.1 <= b.last_offset())
                        .expect("broker offset in the log");
                    assert_eq!(ours.1, holder.last_offset(), "{name}: {stem}.timeindex");
                }
            }
        }

        // The copy takes new appends after the broker's data.
        let log = Log::open(&dir, config()).expect("reopen");
        assert!(log.recovery_report().clean_shutdown, "{name}");
        let next = batch(3, global_max + 10, 50);
        match log.append(&next).expect("append") {
            AppendOutcome::Appended(info) => {
                assert_eq!(info.first_offset, expected_end, "{name}");
                assert_eq!(info.last_offset, expected_end + 2, "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        let back = read_all(&log, 1 << 20);
        assert_eq!(back.len(), all_batches.len() + 1, "{name}");
        assert_eq!(&back[..all_batches.len()], &all_batches[..], "{name}");
        let last = RecordBatch::parse(back.last().unwrap()).unwrap();
        assert_eq!(last.base_offset(), expected_end);
        assert!(common::same_except_offset_and_epoch(
            back.last().unwrap(),
            &next
        ));
        log.close().expect("close");
    }
}

#[test]
fn opening_a_copy_leaves_the_fixture_untouched() {
    // The test above works on copies; this pins that the fixture is intact for the next run.
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("MANIFEST.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    for set in manifest["sets"].as_array().unwrap() {
        for file in set["files"].as_array().unwrap() {
            let path = Path::new(FIXTURES)
                .join(set["dir"].as_str().unwrap())
                .join(file["path"].as_str().unwrap());
            let len = std::fs::metadata(&path).unwrap().len();
            assert_eq!(len as i64, int(file, "size"), "{}", path.display());
        }
    }
}
