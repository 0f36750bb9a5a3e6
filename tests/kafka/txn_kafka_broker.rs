//! Transactions in partition directories written by a real Apache Kafka 4.4 broker
//! (`tests/fixtures/kafka-broker`, its README.md and MANIFEST.json): every partition opens
//! with the manifest's batches and markers; the `.txnindex` files rebuilt from the log are the
//! broker's byte for byte; the producer state rebuilt from the log is the broker's last
//! snapshot in every field (coordinator epoch and open transaction included); and the records
//! read under read_committed and read_uncommitted are what a real librdkafka consumer received
//! from that broker.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::copy_dir;
use oncelog::format::{decode_txn_marker, BatchIter, ControlType};
use oncelog::producer::{snapshot, ProducerEntry};
use oncelog::{IsolationLevel, Log, LogConfig};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kafka-broker")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures().join("MANIFEST.json"))
        .expect("fixtures: MANIFEST.json (tests/fixtures)");
    serde_json::from_str(&text).expect("manifest JSON")
}

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("field {field} in {v}"))
}

/// A copy of partition `name` in a temporary directory, without the files `drop` says.
fn copy(name: &str, drop: impl Fn(&str) -> bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join(name), dir.path());
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        if drop(&file) {
            std::fs::remove_file(path).unwrap();
        }
    }
    dir
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(&format!(".{ext}")))
        .collect();
    v.sort();
    v
}

/// (offset, producer id, producer epoch, type, coordinator epoch) of every marker.
type MarkerRow = (i64, i64, i64, String, i64);

#[test]
fn every_partition_opens_with_the_manifests_batches_and_markers() {
    let manifest = manifest();
    let partitions = manifest["partitions"].as_object().expect("partitions");
    assert_eq!(partitions.len(), 10, "the README's ten partitions");
    let mut markers_seen = 0;
    for (name, p) in partitions {
        let mut expected_batches = Vec::new();
        let mut expected_markers: Vec<MarkerRow> = Vec::new();
        for (file, f) in p["files"].as_object().unwrap() {
            if !file.ends_with(".log") {
                continue;
            }
            for b in f["batches"].as_array().unwrap() {
                expected_batches.push((
                    int(b, "baseOffset"),
                    int(b, "lastOffset"),
                    int(b, "producerId"),
                    int(b, "crc"),
                ));
            }
            for c in f["controlBatches"].as_array().unwrap() {
                expected_markers.push((
                    int(c, "offset"),
                    int(c, "producerId"),
                    int(c, "producerEpoch"),
                    c["type"].as_str().unwrap().to_string(),
                    int(c, "coordinatorEpoch"),
                ));
            }
        }
        expected_batches.sort();
        expected_markers.sort();
        let dir = copy(name, |_| false);
        let log =
            Log::open(dir.path(), LogConfig::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (mut batches, mut markers) = (Vec::new(), Vec::<MarkerRow>::new());
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let bytes = log.read(next, 1 << 20).unwrap();
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                batches.push((
                    b.base_offset(),
                    b.last_offset(),
                    b.producer_id(),
                    i64::from(b.crc()),
                ));
                if let Some(m) = decode_txn_marker(&b).unwrap() {
                    let kind = match m.control_type {
                        ControlType::Abort => "ABORT",
                        ControlType::Commit => "COMMIT",
                        other => panic!("{name}: marker type {other:?}"),
                    };
                    markers.push((
                        b.base_offset(),
                        b.producer_id(),
                        i64::from(b.producer_epoch()),
                        kind.to_string(),
                        i64::from(m.coordinator_epoch),
                    ));
                }
                next = b.last_offset() + 1;
            }
        }
        assert_eq!(batches, expected_batches, "{name}: batches");
        assert_eq!(markers, expected_markers, "{name}: markers");
        let summary = &p["summary"];
        let count = |t: &str| markers.iter().filter(|m| m.3 == t).count() as i64;
        assert_eq!(count("COMMIT"), int(summary, "commitMarkers"), "{name}");
        assert_eq!(count("ABORT"), int(summary, "abortMarkers"), "{name}");
        markers_seen += markers.len();
        log.close().unwrap();
    }
    assert_eq!(markers_seen, 22, "txn-0's 13 COMMIT and 9 ABORT markers");
}

#[test]
fn the_txnindex_rebuilt_from_the_log_is_the_brokers_byte_for_byte() {
    let original = fixtures().join("txn-0");
    let kafkas = files_with_ext(&original, "txnindex");
    assert_eq!(
        kafkas,
        [
            "00000000000000000000.txnindex",
            "00000000000000000274.txnindex"
        ]
    );
    // With the broker's own indexes present (recovery of a directory without an oncelog
    // checkpoint rebuilds them all), and with every index and snapshot deleted: a replay from
    // the log start alone.
    let with_files = copy("txn-0", |_| false);
    let from_log_only = copy("txn-0", |f| {
        f.ends_with(".txnindex") || f.ends_with(".snapshot") || f.ends_with(".index")
    });
    for dir in [&with_files, &from_log_only] {
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(files_with_ext(dir.path(), "txnindex"), kafkas);
        for name in &kafkas {
            let ours = std::fs::read(dir.path().join(name)).unwrap();
            let theirs = std::fs::read(original.join(name)).unwrap();
            assert_eq!(ours, theirs, "{name}");
        }
        log.close().unwrap();
        // A clean reopen trusts them and still has them.
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert!(log.recovery_report().clean_shutdown);
        for name in &kafkas {
            let ours = std::fs::read(dir.path().join(name)).unwrap();
            assert_eq!(ours, std::fs::read(original.join(name)).unwrap(), "{name}");
        }
    }
}

#[test]
fn the_txnindex_entry_whose_transaction_began_in_the_previous_segment_is_read_back() {
    let bytes = std::fs::read(fixtures().join("txn-0/00000000000000000274.txnindex")).unwrap();
    let entries: Vec<_> = oncelog::files::decode_txn_index(&bytes)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].producer_id, entries[0].first_offset),
        (4, 223),
        "first offset in segment 209"
    );
    assert_eq!(
        (entries[0].last_offset, entries[0].last_stable_offset),
        (343, 344)
    );
}

#[derive(Debug, PartialEq, Eq)]
struct Fields {
    epoch: i16,
    last_sequence: i32,
    last_offset: i64,
    offset_delta: i32,
    timestamp: i64,
    coordinator_epoch: i32,
    current_txn_first_offset: Option<i64>,
}

impl Fields {
    /// Every field of a Kafka snapshot entry.
    fn of(e: &ProducerEntry) -> Fields {
        let (last_offset, offset_delta) = e
            .newest_batch()
            .map_or((-1, 0), |b| (b.last_offset, b.offset_delta));
        Fields {
            epoch: e.epoch(),
            last_sequence: e.last_seq(),
            last_offset,
            offset_delta,
            timestamp: e.last_timestamp(),
            coordinator_epoch: e.coordinator_epoch(),
            current_txn_first_offset: e.current_txn_first_offset(),
        }
    }
}

#[test]
fn producer_state_rebuilt_from_the_log_is_the_brokers_last_snapshot_in_every_field() {
    let manifest = manifest();
    let mut checked = 0;
    for name in manifest["partitions"].as_object().unwrap().keys() {
        let original = fixtures().join(name);
        let Some(newest) = files_with_ext(&original, "snapshot").pop() else {
            continue;
        };
        let bytes = std::fs::read(original.join(&newest)).unwrap();
        let expected: BTreeMap<i64, Fields> = snapshot::decode(&bytes)
            .unwrap()
            .entries
            .iter()
            .map(|e| (e.producer_id(), Fields::of(e)))
            .collect();
        let dir = copy(name, |f| f.ends_with(".snapshot"));
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.producer_load_report().snapshot_offset, None, "{name}");
        assert_eq!(log.producer_count(), expected.len(), "{name}");
        for (pid, want) in &expected {
            let e = log
                .producer(*pid)
                .unwrap_or_else(|| panic!("{name}: pid {pid}"));
            assert_eq!(&Fields::of(&e), want, "{name} pid {pid}");
        }
        checked += 1;
    }
    assert!(checked >= 8, "{checked} partitions with snapshots");
    // The fields that matter most here, spelled out: txn-0's producers 4 and 5 carry the
    // markers' coordinator epoch 0, producer 18 the open transaction from 355.
    let dir = copy("txn-0", |f| f.ends_with(".snapshot"));
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    for pid in [4, 5] {
        assert_eq!(
            log.producer(pid).unwrap().coordinator_epoch(),
            0,
            "pid {pid}"
        );
    }
    let open = log.producer(18).unwrap();
    assert_eq!(open.current_txn_first_offset(), Some(355));
    assert_eq!(open.coordinator_epoch(), -1);
}

#[test]
fn the_brokers_snapshot_with_an_open_transaction_is_loaded_and_holds_the_lso() {
    let dir = copy("txn-0", |_| false);
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.flush().unwrap();
    assert_eq!(log.high_watermark(), 361);
    assert_eq!(log.first_unstable_offset(), Some(355));
    assert_eq!(log.last_stable_offset(), 355);
    log.close().unwrap();
    // Reopened from oncelog's own snapshot of that state: the transaction is still open.
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.producer_load_report().snapshot_offset, Some(361));
    assert_eq!(log.producer_load_report().batches_replayed, 0);
    assert_eq!(log.last_stable_offset(), 355);
    // The transaction times out on the broker: its coordinator aborts it.
    let info = log
        .append_marker(&oncelog::TxnMarker::abort(18, 0, 0))
        .unwrap();
    assert_eq!(info.first_offset, 361);
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(), 362);
}

/// One record as the manifest's consumer views list it: offset, key and value in hex (or
/// null), headers as `[name, value hex or null]` (or null when there are none).
fn view_of(r: &oncelog::format::ConsumerRecord) -> Value {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let headers: Vec<Value> = r
        .headers()
        .map(|h| {
            Value::Array(vec![
                Value::String(String::from_utf8(h.key.to_vec()).unwrap()),
                h.value.map_or(Value::Null, |v| Value::String(hex(v))),
            ])
        })
        .collect();
    Value::Array(vec![
        Value::from(r.offset),
        r.key
            .as_deref()
            .map_or(Value::Null, |k| Value::String(hex(k))),
        r.value
            .as_deref()
            .map_or(Value::Null, |v| Value::String(hex(v))),
        if headers.is_empty() {
            Value::Null
        } else {
            Value::Array(headers)
        },
    ])
}

/// Every record from the log start under `isolation`, fetched as a consumer fetches.
fn consume(log: &Log, isolation: IsolationLevel) -> Vec<Value> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let fetched = log.fetch_isolated(next, 16 * 1024, isolation).unwrap();
        if fetched.bytes.is_empty() {
            let bound = match isolation {
                IsolationLevel::ReadCommitted => fetched.last_stable_offset,
                IsolationLevel::ReadUncommitted => fetched.high_watermark,
            };
            assert_eq!(next, bound, "a consumer stops at its bound");
            return out;
        }
        for r in fetched.records() {
            out.push(view_of(&r.unwrap()));
        }
        next = fetched.next_offset;
    }
}

#[test]
fn read_committed_and_read_uncommitted_equal_what_librdkafka_received() {
    let manifest = manifest();
    let mut checked = 0;
    for (name, p) in manifest["partitions"].as_object().unwrap() {
        let views = &p["consumer_views"];
        if views.is_null() {
            continue;
        }
        let dir = copy(name, |_| false);
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        // A log used alone commits what is durable: everything, once flushed, which is the
        // broker's high watermark for these single-replica partitions.
        log.flush().unwrap();
        let watermarks = &views["watermarks"];
        assert_eq!(
            log.high_watermark(),
            int(watermarks, "high_watermark"),
            "{name}"
        );
        assert_eq!(
            log.last_stable_offset(),
            int(watermarks, "last_stable_offset"),
            "{name}"
        );
        for (isolation, key) in [
            (IsolationLevel::ReadCommitted, "read_committed"),
            (IsolationLevel::ReadUncommitted, "read_uncommitted"),
        ] {
            let got = consume(&log, isolation);
            let want = views[key].as_array().unwrap();
            assert_eq!(got.len() as i64, int(&views["counts"], key), "{name} {key}");
            assert_eq!(&got, want, "{name} {key}");
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

#[test]
fn read_committed_returns_the_aborted_transactions_kafkas_fetch_collects() {
    // From offset 0 with a small fetch: the batches of the first segment up to the first index
    // entry (position 4653, offset 64) bound the fetch, so the aborted transactions whose
    // markers are at or after 0 and that start below 64 are listed: 8..21 (producer 5) and
    // 23..43 (producer 4), and 53..66 (producer 5), whose first offset is below the bound.
    let dir = copy("txn-0", |_| false);
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.flush().unwrap();
    let fetched = log
        .fetch_isolated(0, 4000, IsolationLevel::ReadCommitted)
        .unwrap();
    let aborted: Vec<(i64, i64)> = fetched
        .aborted_transactions
        .unwrap()
        .iter()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(aborted, [(5, 8), (4, 23), (5, 53)]);
    let plain = log.fetch(0, 4000).unwrap();
    assert_eq!(plain.aborted_transactions, None);
    assert_eq!(
        plain.bytes, fetched.bytes,
        "the same batches, below the LSO"
    );
}
