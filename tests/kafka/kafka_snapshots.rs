//! Kafka compatibility of the snapshot codec: every real `.snapshot` written by a Kafka broker
//! (in `tests/fixtures/kafka-logdirs`, described by its MANIFEST.json) decodes to the entries
//! the manifest lists, and re-encoding those entries as version 1, in file order, reproduces
//! the file byte for byte.

use std::path::{Path, PathBuf};

use oncelog::io::RealFs;
use oncelog::producer::snapshot::{decode, encode, SnapshotVersion};
use oncelog::producer::snapshot_files;
use oncelog::producer::ProducerEntry;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kafka-logdirs");

/// (file path, manifest "snapshot" object) for every snapshot in the manifest.
fn manifest_snapshots() -> Vec<(PathBuf, Value)> {
    let path = Path::new(FIXTURES).join("MANIFEST.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let manifest: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    let mut found = Vec::new();
    for set in manifest["sets"].as_array().into_iter().flatten() {
        let dir = set["dir"].as_str().unwrap_or_default();
        for file in set["files"].as_array().into_iter().flatten() {
            let rel = file["path"].as_str().unwrap_or_default();
            if rel.ends_with(".snapshot") {
                found.push((
                    Path::new(FIXTURES).join(dir).join(rel),
                    file["snapshot"].clone(),
                ));
            }
        }
    }
    found
}

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("manifest field {field} missing in {v}"))
}

/// The manifest's view of an entry, in v1's terms.
fn manifest_entry(v: &Value) -> [i64; 8] {
    [
        "producer_id",
        "epoch",
        "last_sequence",
        "last_offset",
        "offset_delta",
        "timestamp",
        "coordinator_epoch",
        "current_txn_first_offset",
    ]
    .map(|f| int(v, f))
}

/// A decoded entry, in v1's terms.
fn v1_view(e: &ProducerEntry) -> [i64; 8] {
    let newest = e.newest_batch();
    [
        e.producer_id(),
        i64::from(e.epoch()),
        newest.map_or(-1, |b| i64::from(b.last_seq)),
        newest.map_or(-1, |b| b.last_offset),
        newest.map_or(0, |b| i64::from(b.offset_delta)),
        e.last_timestamp(),
        i64::from(e.coordinator_epoch()),
        e.current_txn_first_offset().unwrap_or(-1),
    ]
}

#[test]
fn the_fixtures_hold_real_snapshots_with_producers() {
    let snaps = manifest_snapshots();
    assert!(snaps.len() >= 10, "found {}", snaps.len());
    assert!(snaps
        .iter()
        .any(|(_, s)| s["entries"].as_array().is_some_and(|e| e.len() > 10)));
}

#[test]
fn every_real_kafka_snapshot_decodes_as_the_manifest_says() {
    for (path, expected) in manifest_snapshots() {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let snapshot = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(snapshot.version, SnapshotVersion::V1, "{}", path.display());
        assert_eq!(
            i64::from(snapshot.version.number()),
            int(&expected, "version")
        );
        assert_eq!(
            i64::from(u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]])),
            int(&expected, "crc")
        );
        let want: Vec<[i64; 8]> = expected["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(manifest_entry)
            .collect();
        let got: Vec<[i64; 8]> = snapshot.entries.iter().map(v1_view).collect();
        assert_eq!(got, want, "{}", path.display());
    }
}

#[test]
fn re_encoding_real_snapshots_as_v1_reproduces_them_byte_for_byte() {
    for (path, _) in manifest_snapshots() {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let snapshot = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            encode(&snapshot.entries, SnapshotVersion::V1, 0),
            bytes,
            "{}",
            path.display()
        );
    }
}

#[test]
fn real_kafka_snapshots_survive_a_v2_round_trip() {
    for (path, _) in manifest_snapshots() {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let snapshot = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v2 = encode(&snapshot.entries, SnapshotVersion::V2, 0);
        assert_eq!(
            decode(&v2).map(|s| s.entries),
            Ok(snapshot.entries),
            "{}",
            path.display()
        );
    }
}

#[test]
fn a_real_partition_directory_loads_its_newest_snapshot() {
    let dir = Path::new(FIXTURES).join("makaksik13-yanwit/posts-0");
    let listed: Vec<i64> = snapshot_files::list(&RealFs, &dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(listed, vec![73, 80]);
    let loaded =
        snapshot_files::load_newest(&RealFs, &dir, i64::MAX).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.quarantined.is_empty());
    assert_eq!(
        loaded.newest.map(|(o, s)| (o, s.entries.len())),
        Some((80, 27))
    );
    let older = snapshot_files::load_newest(&RealFs, &dir, 79).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(older.newest.map(|(o, _)| o), Some(73));
}
