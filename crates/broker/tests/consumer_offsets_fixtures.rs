//! The offsets log's record schema against Kafka's own: every record of the real
//! `__consumer_offsets` partitions in the fixture sets (tests/fixtures/kafka-logdirs,
//! written by Kafka brokers in the wild) decodes with `offsets_log::decode`, and they hold
//! offset commits.

use std::path::Path;

use bytes::Bytes;
use oncelog::format::ConsumerRecordIter;
use oncelog_broker::offsets_log::{decode, OffsetRecord};

#[test]
fn kafkas_consumer_offsets_partitions_decode_with_the_brokers_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/kafka-logdirs");
    let mut partitions = 0;
    let (mut commits, mut deletions, mut group_records) = (0, 0, 0);
    for set in std::fs::read_dir(&root).expect("the fixture sets") {
        let set = set.unwrap().path();
        if !set.is_dir() {
            continue;
        }
        for dir in std::fs::read_dir(&set).unwrap() {
            let dir = dir.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            if !name.starts_with("__consumer_offsets-") {
                continue;
            }
            partitions += 1;
            for file in std::fs::read_dir(&dir).unwrap() {
                let file = file.unwrap().path();
                if file.extension().is_none_or(|e| e != "log") {
                    continue;
                }
                let bytes = Bytes::from(std::fs::read(&file).unwrap());
                for r in ConsumerRecordIter::new(bytes, 0) {
                    let r = r.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    match decode(r.key.as_ref(), r.value.as_ref()) {
                        Ok(OffsetRecord::Offset(key, Some(c))) => {
                            assert!(!key.0.is_empty() && !key.1.is_empty() && key.2 >= 0);
                            assert!(c.offset >= -1, "{key:?}: {c:?}");
                            commits += 1;
                        }
                        Ok(OffsetRecord::Offset(_, None)) => deletions += 1,
                        Ok(
                            OffsetRecord::GroupMetadata(group) | OffsetRecord::ConsumerGroup(group),
                        ) => {
                            assert!(!group.is_empty());
                            group_records += 1;
                        }
                        Err(e) => panic!("{} offset {}: {e}", file.display(), r.offset),
                    }
                }
            }
        }
    }
    eprintln!(
        "{partitions} partitions: {commits} offset commits, {deletions} deletions, \
         {group_records} group-metadata records"
    );
    assert!(
        partitions >= 3,
        "the fixture sets hold __consumer_offsets partitions"
    );
    assert!(commits > 0, "and offset commits in them");
}
