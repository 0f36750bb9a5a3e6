//! The CLI and transactions: `append --marker`, `read` under both isolation levels, `dump` of
//! control batches and `.txnindex` files, and `verify` / `recover --deep` of a `.txnindex`,
//! on logs the library writes and on the partition a real Kafka 4.4 broker wrote.

use crate::common_cli;

use std::fs;
use std::path::{Path, PathBuf};

use common_cli::{json_lines, of_type, run, run_path, stdout, TS};
use oncelog::format::BatchBuilder;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kafka-broker")
        .join(name)
}

fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    dir
}

fn manifest_partition(name: &str) -> Value {
    let text = fs::read_to_string(fixture("MANIFEST.json")).unwrap();
    let m: Value = serde_json::from_str(&text).unwrap();
    m["partitions"][name].clone()
}

fn txn_batch(pid: i64, seq: i32, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(true);
    for i in 0..n {
        b.append(
            TS,
            Some(b"k"),
            Some(format!("v{}", seq + i as i32).as_bytes()),
            &[],
        );
    }
    b.build().unwrap()
}

fn marker(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["append", dir.to_str().unwrap(), "--marker"];
    all.extend_from_slice(args);
    run(&all)
}

#[test]
fn append_writes_markers_and_refuses_stale_ones_with_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("batches");
    let mut bytes = txn_batch(7, 0, 2);
    bytes.extend(txn_batch(8, 0, 1));
    fs::write(&input, &bytes).unwrap();
    let log = dir.path().join("p-0");
    let out = run(&["append", log.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));

    let out = marker(
        &log,
        &[
            "abort",
            "--producer",
            "7",
            "--epoch",
            "0",
            "--coordinator-epoch",
            "3",
        ],
    );
    assert!(out.status.success());
    let lines = json_lines(&out);
    assert_eq!(lines[0]["outcome"], "appended");
    assert_eq!(
        (
            lines[0]["first_offset"].as_i64(),
            lines[0]["last_offset"].as_i64()
        ),
        (Some(3), Some(3))
    );

    let out = marker(
        &log,
        &[
            "commit",
            "--producer",
            "7",
            "--epoch",
            "0",
            "--coordinator-epoch",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_lines(&out)[0]["error"], "coordinator_fenced");

    let out = marker(&log, &["commit", "--producer", "-1", "--epoch", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_lines(&out)[0]["error"], "invalid_marker");

    let out = marker(
        &log,
        &[
            "commit",
            "--producer",
            "8",
            "--epoch",
            "0",
            "--transaction-version",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "TV2 wants a bumped epoch");
    assert_eq!(json_lines(&out)[0]["error"], "invalid_producer_epoch");
    let out = marker(
        &log,
        &[
            "commit",
            "--producer",
            "8",
            "--epoch",
            "1",
            "--transaction-version",
            "2",
        ],
    );
    assert!(out.status.success());

    // Not a marker type, or a marker without its producer: the command cannot run.
    assert_eq!(
        marker(&log, &["rollback", "--producer", "7", "--epoch", "0"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        marker(&log, &["commit", "--epoch", "0"]).status.code(),
        Some(2)
    );
    let both = run(&[
        "append",
        log.to_str().unwrap(),
        input.to_str().unwrap(),
        "--marker",
        "commit",
        "--producer",
        "7",
        "--epoch",
        "0",
    ]);
    assert_eq!(both.status.code(), Some(2));

    // What is in the log now, as `read` shows it: 7's aborted records are gone under
    // read_committed, 8's committed one is there.
    let out = run(&[
        "read",
        "--json",
        "--isolation",
        "read_committed",
        log.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let lines = json_lines(&out);
    let offsets: Vec<i64> = of_type(&lines, "record")
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, [2]);
    let out = run(&["read", "--json", log.to_str().unwrap()]);
    let lines = json_lines(&out);
    assert_eq!(
        of_type(&lines, "record").len(),
        3,
        "read_uncommitted: every record"
    );
}

/// The records of `read --json` as the manifest's consumer views list them.
fn as_view(r: &Value) -> Value {
    let headers = r["headers"].as_array().unwrap();
    Value::Array(vec![
        r["offset"].clone(),
        r["key"].clone(),
        r["value"].clone(),
        if headers.is_empty() {
            Value::Null
        } else {
            Value::Array(headers.clone())
        },
    ])
}

#[test]
fn read_prints_what_librdkafka_received_from_kafka() {
    let part = manifest_partition("txn-0");
    let views = &part["consumer_views"];
    let dir = copy_of("txn-0");
    for isolation in ["read_committed", "read_uncommitted"] {
        let out = run_path(&["read", "--json", "--isolation", isolation], dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = json_lines(&out);
        let records: Vec<Value> = of_type(&lines, "record").into_iter().map(as_view).collect();
        assert_eq!(
            &records,
            views[isolation].as_array().unwrap(),
            "{isolation}"
        );
        let end = of_type(&lines, "end")[0];
        assert_eq!(end["isolation"], isolation);
        assert_eq!(end["high_watermark"], 361);
        assert_eq!(end["last_stable_offset"], 355);
        let bound = if isolation == "read_committed" {
            355
        } else {
            361
        };
        assert_eq!(end["next_offset"], bound);
    }
    // From an offset, a few records, in text.
    let out = run_path(&["read", "--from", "300", "--max-records", "2"], dir.path());
    assert!(out.status.success());
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("offset 300 timestamp "), "{text}");
    assert!(
        lines[2].starts_with("2 records (read_uncommitted), next offset 302"),
        "{text}"
    );
    // An offset outside the log.
    let out = run_path(&["read", "--from", "9999"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("offset_out_of_range"));
}

#[test]
fn dump_shows_markers_with_their_coordinator_epoch_and_the_txnindex() {
    let part = manifest_partition("txn-0");
    let dir = fixture("txn-0");
    let out = run_path(&["dump", "--json"], &dir);
    assert!(out.status.success());
    let lines = json_lines(&out);
    let markers: Vec<(i64, String, i64)> = of_type(&lines, "batch")
        .iter()
        .filter(|b| b["is_control"] == true)
        .map(|b| {
            (
                b["base_offset"].as_i64().unwrap(),
                b["control_type"].as_str().unwrap().to_string(),
                b["coordinator_epoch"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    let mut txn_expected = Vec::new();
    for (file, f) in part["files"].as_object().unwrap() {
        if file.ends_with(".log") {
            for c in f["controlBatches"].as_array().unwrap() {
                expected.push((
                    c["offset"].as_i64().unwrap(),
                    c["type"].as_str().unwrap().to_string(),
                    c["coordinatorEpoch"].as_i64().unwrap(),
                ));
            }
        }
        if file.ends_with(".txnindex") {
            for e in f["entries"].as_array().unwrap() {
                txn_expected.push((
                    e["producerId"].as_i64().unwrap(),
                    e["firstOffset"].as_i64().unwrap(),
                    e["lastOffset"].as_i64().unwrap(),
                    e["lastStableOffset"].as_i64().unwrap(),
                ));
            }
        }
    }
    expected.sort();
    assert_eq!(markers, expected);
    assert_eq!(markers.len(), 22);
    let txn: Vec<(i64, i64, i64, i64)> = of_type(&lines, "txn_index")
        .iter()
        .map(|e| {
            (
                e["producer_id"].as_i64().unwrap(),
                e["first_offset"].as_i64().unwrap(),
                e["last_offset"].as_i64().unwrap(),
                e["last_stable_offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(txn, txn_expected);
    assert_eq!(txn.len(), 9);
    // Data batches have no control fields.
    let data = of_type(&lines, "batch")
        .into_iter()
        .find(|b| b["is_control"] == false)
        .unwrap();
    assert!(data.get("control_type").is_none());

    // One file, in text.
    let out = run_path(&["dump"], &dir.join("00000000000000000274.txnindex"));
    assert!(out.status.success());
    assert!(
        stdout(&out).contains(
            "txnindex producer 4 first_offset 223 last_offset 343 last_stable_offset 344"
        ),
        "{}",
        stdout(&out)
    );
    let out = run_path(&["dump"], &dir.join("00000000000000000000.log"));
    assert!(
        stdout(&out).contains(" ABORT coordinator_epoch 0"),
        "{}",
        stdout(&out)
    );

    // A damaged one: an entry of version 1, then a partial entry.
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = fs::read(dir.join("00000000000000000000.txnindex")).unwrap();
    bytes[34 + 1] = 1;
    let bad = tmp.path().join("00000000000000000000.txnindex");
    fs::write(&bad, &bytes).unwrap();
    let out = run_path(&["dump", "--json"], &bad);
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    assert_eq!(of_type(&lines, "txn_index").len(), 1);
    assert_eq!(of_type(&lines, "error")[0]["position"], 34);
    fs::write(
        &bad,
        &fs::read(dir.join("00000000000000000000.txnindex")).unwrap()[..40],
    )
    .unwrap();
    let out = run_path(&["dump", "--json"], &bad);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(of_type(&json_lines(&out), "error")[0]["position"], 34);
}

fn verify(dir: &Path) -> (Option<i32>, Value) {
    let out = run_path(&["verify", "--json"], dir);
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    (out.status.code(), report)
}

fn kinds(report: &Value) -> Vec<String> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn verify_finds_a_deleted_or_wrong_txnindex_and_recover_deep_rebuilds_it() {
    let dir = copy_of("txn-0");
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["txn_index_entries"], 9);
    // Opened once, so that the checkpoint vouches for every segment: a plain recover then
    // trusts the indexes without reading the log.
    assert!(run_path(&["recover"], dir.path()).status.success());
    let first = dir.path().join("00000000000000000000.txnindex");
    let original = fs::read(&first).unwrap();

    fs::remove_file(&first).unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(1));
    assert_eq!(
        kinds(&report),
        ["txn_index_digest_mismatch", "txn_index_missing"],
        "{report}"
    );
    // The checkpoint recorded the file's length and CRC when the segment was sealed: even a
    // plain open, which reads no batch, notices it is gone and rebuilds it from the log.
    assert!(run_path(&["recover"], dir.path()).status.success());
    assert_eq!(fs::read(&first).unwrap(), original);
    assert_eq!(verify(dir.path()).0, Some(0));
    fs::remove_file(&first).unwrap();
    let out = run_path(&["recover", "--deep", "--json"], dir.path());
    assert!(out.status.success());
    assert_eq!(fs::read(&first).unwrap(), original);
    assert_eq!(verify(dir.path()).0, Some(0));

    // An entry whose last stable offset is wrong (it passes the sanity check).
    let mut bytes = original.clone();
    bytes[34 + 33] ^= 1;
    fs::write(&first, &bytes).unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(1));
    // Found twice: against the checkpoint's record and against the log's markers.
    assert_eq!(
        kinds(&report),
        ["txn_index_digest_mismatch", "bad_txn_index"]
    );
    assert_eq!(report["problems"][1]["position"], 34);
    // An entry of a version Kafka does not know.
    let mut bytes = original.clone();
    bytes[1] = 1;
    fs::write(&first, &bytes).unwrap();
    let (_, report) = verify(dir.path());
    assert_eq!(
        kinds(&report),
        ["txn_index_digest_mismatch", "bad_txn_index"]
    );
    // Recovery's own check finds that one on a plain open and rebuilds it.
    let out = run_path(&["recover", "--json"], dir.path());
    assert!(out.status.success());
    let recovered: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        recovered["indexes_rebuilt"]
            .to_string()
            .contains("txn index"),
        "{recovered}"
    );
    assert_eq!(fs::read(&first).unwrap(), original);
    assert_eq!(verify(dir.path()).0, Some(0));
}
