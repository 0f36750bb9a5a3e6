//! oncelog's cleaner on partitions Kafka 4.4's own cleaner compacted
//! (`tests/fixtures/kafka-broker`, README.md and MANIFEST.json): `compacted-0`
//! (`cleanup.policy=compact`, cleaned by Kafka up to 2650, 20 retained tombstones, a batch with
//! the delete-horizon flag, one idempotent producer) and `__transaction_state-0` (the
//! coordinator's compacted log).
//!
//! Compacting Kafka's output again keeps exactly what Kafka's cleaner kept: the same records
//! at the same offsets, which are what a librdkafka consumer received from that broker; the
//! batches without tombstones byte for byte; the tombstones' batches only gain their delete
//! horizon (what Kafka's next round would do); the producer's state untouched. Past every
//! horizon the tombstones go and every key keeps its latest value.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::copy_dir;
use oncelog::format::BatchIter;
use oncelog::{CleanupPolicy, Log, LogConfig};
use serde_json::Value;

const DAY: i64 = 24 * 60 * 60 * 1000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kafka-broker")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures().join("MANIFEST.json"))
        .expect("fixtures: MANIFEST.json (tests/fixtures)");
    serde_json::from_str(&text).expect("manifest JSON")
}

fn copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join(name), dir.path());
    // The fixture files are read-only; the cleaner renames and rewrites them.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    dir
}

fn config() -> LogConfig {
    LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

/// (offset, key, value) of a record.
type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Records, and (base, last, has tombstones, has delete horizon, bytes) of every batch.
#[allow(clippy::type_complexity)]
fn contents(log: &Log) -> (Vec<Rec>, Vec<(i64, i64, bool, bool, Vec<u8>)>, i64) {
    let (mut recs, mut batches, mut max_ts) = (Vec::new(), Vec::new(), -1);
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        assert!(!bytes.is_empty());
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid());
            max_ts = max_ts.max(b.max_timestamp());
            let buf = b.records_buf().unwrap();
            let mut tombstones = false;
            for r in b.iter_records(&buf) {
                let r = r.unwrap();
                if !b.is_control() {
                    tombstones |= r.value.is_none();
                    recs.push((
                        r.offset,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ));
                }
            }
            batches.push((
                b.base_offset(),
                b.last_offset(),
                tombstones,
                b.has_delete_horizon(),
                b.as_bytes().to_vec(),
            ));
            next = b.last_offset() + 1;
        }
    }
    (recs, batches, max_ts)
}

fn unhex(v: &Value) -> Option<Vec<u8>> {
    let s = v.as_str()?;
    Some(
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect(),
    )
}

/// The latest record of each key (`recs` in offset order).
fn latest(recs: &[Rec]) -> BTreeMap<Vec<u8>, Rec> {
    let mut m = BTreeMap::new();
    for r in recs {
        m.insert(r.1.clone().unwrap_or_default(), r.clone());
    }
    m
}

#[test]
fn compacting_kafkas_compacted_partition_again_keeps_what_kafkas_cleaner_kept() {
    let manifest = manifest();
    let view: Vec<Rec> = manifest["partitions"]["compacted-0"]["consumer_views"]
        ["read_uncommitted"]
        .as_array()
        .expect("consumer view")
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), unhex(&r[1]), unhex(&r[2])))
        .collect();
    assert_eq!(view.len(), 251);
    let dir = copy("compacted-0");
    let log = Log::open(dir.path(), config()).unwrap();
    let (before, before_batches, max_ts) = contents(&log);
    assert_eq!(before, view, "oncelog reads what librdkafka received");
    let producer = log.producer(12);
    assert!(producer.is_some());

    // Before any horizon: nothing Kafka kept goes.
    let now = max_ts + 1000;
    let c = log.maintenance().cleanable(now);
    assert_eq!(
        c.first_dirty_offset,
        log.log_start_offset(),
        "no cleaner offset of ours: the log start"
    );
    assert_eq!(
        c.first_uncleanable_offset, 2650,
        "the active segment's base"
    );
    let r = log.maintenance().compact(now).unwrap();
    assert_eq!(r.records_removed, 0, "{r:?}");
    assert_eq!(r.tombstones_kept, 20, "{r:?}");
    let (after, after_batches, _) = contents(&log);
    assert_eq!(after, view, "the same records at the same offsets");
    assert_eq!(before_batches.len(), after_batches.len());
    for (b, a) in before_batches.iter().zip(&after_batches) {
        assert_eq!(
            (b.0, b.1),
            (a.0, a.1),
            "batch offsets and lastOffsetDelta kept"
        );
        if !b.2 || b.3 {
            assert_eq!(b.4, a.4, "batch at {} copied byte for byte", b.0);
        } else {
            assert!(a.3, "the tombstones' batch at {} gains its horizon", b.0);
        }
    }
    assert_eq!(
        r.batches_rebuilt as usize,
        before_batches.iter().filter(|b| b.2 && !b.3).count()
    );
    assert_eq!(
        log.producer(12),
        producer,
        "the producer's state is not touched"
    );

    // Past every horizon: the tombstones go; every other key keeps its latest value.
    let r = log.maintenance().compact(now + 30 * DAY).unwrap();
    assert_eq!(r.passes, 0, "nothing new is dirty: {r:?}");
    log.close().unwrap();
    drop(log);
    // A fresh cleaner offset: clean the whole log again, as Kafka's cleaner would once new
    // data made the log dirty.
    std::fs::remove_file(dir.path().join(oncelog::CLEANER_OFFSET_FILE)).unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let r = log.maintenance().compact(now + 30 * DAY).unwrap();
    assert_eq!(r.tombstones_removed, 20, "{r:?}");
    let (gone, _, _) = contents(&log);
    let below: Vec<Rec> = view.iter().filter(|r| r.0 < 2650).cloned().collect();
    let mut want = latest(&below)
        .into_values()
        .filter(|r| r.2.is_some())
        .collect_by_offset();
    want.extend(
        view.iter()
            .filter(|r| r.0 >= 2650)
            .cloned()
            .collect_by_offset(),
    );
    assert_eq!(gone.into_iter().collect_by_offset(), want);
    // The reopened log rebuilt the producer from its batches: everything but when this process
    // loaded it (`last_append_ms`, its own clock, for expiry) is what it was.
    let reloaded = log.producer(12).expect("producer 12 after the reopen");
    let before = producer.expect("producer 12");
    let fields = |p: &oncelog::producer::ProducerEntry| {
        let batches: Vec<_> = p.batches().copied().collect();
        (
            p.producer_id(),
            p.epoch(),
            p.coordinator_epoch(),
            p.last_timestamp(),
            p.current_txn_first_offset(),
            batches,
        )
    };
    assert_eq!(fields(&reloaded), fields(&before));
}

trait IntoMapByOffset {
    fn collect_by_offset(self) -> BTreeMap<i64, Rec>;
}

impl<I: Iterator<Item = Rec>> IntoMapByOffset for I {
    fn collect_by_offset(self) -> BTreeMap<i64, Rec> {
        self.map(|r| (r.0, r)).collect()
    }
}

#[test]
fn the_coordinators_compacted_log_keeps_every_keys_latest_value() {
    let dir = copy("__transaction_state-0");
    let size = std::fs::metadata(dir.path().join(format!("{:020}.log", 0)))
        .unwrap()
        .len() as usize;
    // One segment, the active one, which no cleaner touches: a segment size just above it
    // makes the next append roll.
    let cfg = config()
        .into_builder()
        .segment_bytes(size + 100)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    let mut b = oncelog::format::BatchBuilder::new();
    b.append(0, Some(b"oncelog roll"), Some(&[0u8; 120]), &[]);
    log.append(&b.build().unwrap()).unwrap();
    assert_eq!(log.maintenance().segment_count(), 2);
    let (before, _, max_ts) = contents(&log);
    let active = *log.maintenance().segment_base_offsets().last().unwrap();
    let r = log.maintenance().compact(max_ts + 30 * DAY).unwrap();
    assert!(r.records_removed > 0, "{r:?}");
    let (after, _, _) = contents(&log);
    // Below the active segment, the latest of each key (tombstones past their horizon gone);
    // in it, everything.
    let below: Vec<Rec> = before.iter().filter(|r| r.0 < active).cloned().collect();
    let mut want = latest(&below)
        .into_values()
        .filter(|r| r.2.is_some())
        .collect_by_offset();
    want.extend(
        before
            .iter()
            .filter(|r| r.0 >= active)
            .cloned()
            .collect_by_offset(),
    );
    assert_eq!(after.into_iter().collect_by_offset(), want);
}
