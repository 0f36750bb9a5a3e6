//! The broker never serves a batch whose CRC fails.
//!
//! A sealed segment damaged after a clean shutdown is opened without a look at its batches (a
//! clean shutdown vouches for them); what a fetch is about to serve is checked instead. The
//! sweep flips one byte at every position of a stored batch that its CRC covers (and the
//! magic byte and the CRC itself) and checks that no read serves it, that the partition is
//! offline (produce and fetch refused with KAFKA_STORAGE_ERROR), and that another partition is
//! still served. The same through the wire, with Kafka's error code, is in `raw_protocol.rs`.

use std::fs;
use std::path::Path;

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog_broker::config::LogSettings;
use oncelog_broker::errors;
use oncelog_broker::store::{ReadRefused, Store};

fn settings() -> LogSettings {
    LogSettings {
        // Small segments: the first ones are sealed after a few batches.
        segment_bytes: 4096,
        prefault_bytes: 0,
        ..LogSettings::default()
    }
}

fn batch(sequence: i32, records: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new()
        .producer(9, 0, sequence)
        .partition_leader_epoch(0);
    for i in 0..records {
        builder.append(
            1_700_000_000_000 + i as i64,
            Some(format!("key-{i}").as_bytes()),
            Some(format!("value-{sequence}-{i}").as_bytes()),
            &[],
        );
    }
    builder.build().unwrap()
}

/// A data directory with topics `damaged` and `intact`, several segments each, closed cleanly.
fn pristine(dir: &Path) {
    let store = Store::open(dir, &settings(), 1).unwrap();
    for name in ["damaged", "intact"] {
        let partition = store.create_topic(name, 1).unwrap().partitions[0].clone();
        for n in 0..40 {
            partition.append(&batch(n * 5, 5)).unwrap();
        }
    }
    assert!(store.close().is_empty());
    let segments = fs::read_dir(dir.join("damaged-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(segments >= 2, "the first segment is sealed ({segments})");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

const FIRST_SEGMENT: &str = "damaged-0/00000000000000000000.log";

/// The size of the first batch of the first segment.
fn first_batch_size(dir: &Path) -> usize {
    let bytes = fs::read(dir.join(FIRST_SEGMENT)).unwrap();
    let (_, batch) = BatchIter::new(&bytes).next().unwrap().unwrap();
    batch.size()
}

fn is_storage_error(refused: &ReadRefused) -> bool {
    errors::read_error(refused).code() == 56
}

#[test]
fn a_flipped_byte_anywhere_the_crc_covers_is_never_served() {
    let root = tempfile::tempdir().unwrap();
    let pristine_dir = root.path().join("pristine");
    pristine(&pristine_dir);
    let size = first_batch_size(&pristine_dir);
    // The magic byte (16), the CRC (17..21) and everything it covers (21..): attributes,
    // lastOffsetDelta, timestamps, producer id, epoch, base sequence, count, records.
    let mut checked = 0;
    for position in 16..size {
        let dir = root.path().join(format!("flip-{position}"));
        copy_dir(&pristine_dir, &dir);
        let segment = dir.join(FIRST_SEGMENT);
        let mut bytes = fs::read(&segment).unwrap();
        bytes[position] ^= 0x10;
        fs::write(&segment, &bytes).unwrap();

        let store = Store::open(&dir, &settings(), 1).unwrap();
        let damaged = store.partition("damaged", 0).unwrap();
        for read in [
            damaged.read(0, 1 << 20),
            damaged.read_committed(0, 1 << 20).map(|(b, _, _)| b),
        ] {
            match read {
                Ok(served) => panic!(
                    "flip at byte {position}: {} bytes served from offset 0",
                    served.len()
                ),
                Err(refused) => assert!(
                    is_storage_error(&refused),
                    "flip at byte {position}: {refused}"
                ),
            }
        }
        // Damage found: the partition is offline, for later offsets and appends too.
        assert!(damaged.offline().is_some(), "flip at byte {position}");
        let later = damaged.read(100, 1 << 20).unwrap_err();
        assert!(matches!(later, ReadRefused::Offline(_)), "{later}");
        let refused = damaged.append(&batch(200, 1)).unwrap_err();
        assert_eq!(refused.kind, "offline");
        assert_eq!(errors::append_error(&refused).code(), 56);
        assert_eq!(
            damaged.log_end_offset(),
            200,
            "the refused append wrote nothing"
        );
        // Another partition is served as before.
        let intact = store.partition("intact", 0).unwrap();
        let served: Bytes = intact.read(0, 1 << 20).unwrap();
        assert_eq!(
            &served[..],
            &fs::read(dir.join("intact-0/00000000000000000000.log")).unwrap()[..served.len()]
        );
        intact.append(&batch(200, 1)).unwrap();
        assert!(store.close().is_empty());
        fs::remove_dir_all(&dir).unwrap();
        checked += 1;
    }
    assert!(checked > 60, "{checked} positions");
}

#[test]
fn an_undamaged_log_is_served_whole_and_stays_online() {
    let root = tempfile::tempdir().unwrap();
    pristine(root.path());
    let store = Store::open(root.path(), &settings(), 1).unwrap();
    let partition = store.partition("damaged", 0).unwrap();
    let mut offset = 0;
    while offset < partition.log_end_offset() {
        let served = partition.read(offset, 1000).unwrap();
        for item in BatchIter::new(&served) {
            let (_, batch) = item.unwrap();
            batch.verify_crc().unwrap();
            offset = batch.last_offset() + 1;
        }
    }
    assert_eq!(offset, 200);
    assert!(partition.offline().is_none());
    store.close();
}
