//! Kafka's offset checkpoint files of a log dir (docs/kafka-format.md §8.1): one offset per
//! partition, in Kafka's text checkpoint layout.
//!
//! ```text
//! 0                  <- version, always 0
//! 2                  <- entry count
//! orders 0 12345     <- "<topic> <partition> <offset>"
//! orders 1 0
//! ```
//!
//! | file | offset |
//! |---|---|
//! | `recovery-point-offset-checkpoint` | every offset below it was flushed |
//! | `log-start-offset-checkpoint` | the log start, listed only when above the first segment's base (DeleteRecords) |
//! | `replication-offset-checkpoint` | the high watermark |
//! | `cleaner-offset-checkpoint` | where the log cleaner's dirty section starts |
//!
//! Written as Kafka writes them: temp file, fsync, rename, directory fsync. Read as Kafka reads
//! them (whitespace splits fields; a missing or empty file holds nothing), but every malformed
//! line is refused with its number instead of being taken for "offsets unknown": a lost log
//! start would make records deleted by DeleteRecords readable again.

use std::collections::BTreeMap;
use std::path::Path;

use super::topic::{validate_topic, TopicPartition};
use crate::io::{self, FileSystem, IoError};
use crate::log::metadata_file::{self, BadMetadataFile, Invalid, MetadataFile};
use crate::log::text_checkpoint::{self, field};

/// Kafka's name of the recovery points file.
pub const RECOVERY_POINTS: &str = "recovery-point-offset-checkpoint";
/// Kafka's name of the log start offsets file.
pub const LOG_START_OFFSETS: &str = "log-start-offset-checkpoint";
/// Kafka's name of the high watermarks file.
pub const HIGH_WATERMARKS: &str = "replication-offset-checkpoint";
/// Kafka's name of the log cleaner's file.
pub const CLEANER_OFFSETS: &str = "cleaner-offset-checkpoint";

const VERSION: i32 = 0;

/// One offset per partition.
pub type Offsets = BTreeMap<TopicPartition, i64>;

/// Parses a checkpoint's text; the error names the line.
pub fn decode(text: &str) -> Result<Offsets, Invalid> {
    let entries = text_checkpoint::parse(text, VERSION, |f| {
        if f.len() != 3 {
            return Err(format!(
                "expected \"<topic> <partition> <offset>\", found {} fields",
                f.len()
            ));
        }
        validate_topic(f[0]).map_err(|e| format!("topic {:?}: {e}", f[0]))?;
        let partition: i32 = field(f, 1, "partition")?;
        let offset: i64 = field(f, 2, "offset")?;
        if partition < 0 || offset < 0 {
            return Err(format!("negative partition or offset in {:?}", f.join(" ")));
        }
        Ok((TopicPartition::new(f[0], partition), offset))
    })?;
    let mut out = Offsets::new();
    for (i, (tp, offset)) in entries.into_iter().enumerate() {
        if out.insert(tp.clone(), offset).is_some() {
            // Entries start on line 3. Two offsets for one partition: which is right?
            return Err(Invalid::at(i + 3, format!("{tp} is listed twice")));
        }
    }
    Ok(out)
}

/// The text of a checkpoint holding `offsets`, in partition order.
pub fn encode(offsets: &Offsets) -> String {
    text_checkpoint::encode(
        VERSION,
        offsets
            .iter()
            .map(|(tp, o)| format!("{} {} {o}", tp.topic, tp.partition)),
    )
}

/// Reads the checkpoint `name` of the log dir `dir`; a missing file holds nothing.
pub fn read(
    fs: &dyn FileSystem,
    dir: &Path,
    name: &str,
) -> Result<Result<Offsets, BadMetadataFile>, IoError> {
    let read = metadata_file::read(fs, &dir.join(name), MetadataFile::OffsetCheckpoint, decode)?;
    Ok(read.map(Option::unwrap_or_default))
}

/// Parses the bytes of an offset checkpoint read from `path` (which errors name).
pub fn decode_file(path: &Path, bytes: &[u8]) -> Result<Offsets, BadMetadataFile> {
    metadata_file::decode_bytes(path, bytes, MetadataFile::OffsetCheckpoint, decode)
}

/// Replaces the checkpoint `name` of `dir` with `offsets`, atomically.
pub fn write(fs: &dyn FileSystem, dir: &Path, name: &str, offsets: &Offsets) -> Result<(), IoError> {
    io::write_file_atomically(fs, &dir.join(name), encode(offsets).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn reads_what_kafka_wrote() {
        // The kafka-broker fixture's recovery points, in Kafka's (hash) order.
        let text = "0\n3\nlz4 0 400\ncompacted 0 2651\nharness-0 0 150\n";
        let offsets = decode(text).unwrap();
        assert_eq!(offsets[&tp("harness-0", 0)], 150);
        assert_eq!(offsets.len(), 3);
        assert_eq!(decode(""), Ok(Offsets::new()));
        assert_eq!(decode("0\n0\n"), Ok(Offsets::new()));
        assert_eq!(decode("0\n1\nt  7\t9\n").unwrap()[&tp("t", 7)], 9);
    }

    #[test]
    fn round_trips_in_partition_order() {
        let offsets: Offsets = [(tp("b", 0), 5), (tp("a", 1), 0), (tp("a", 0), 12_345)].into();
        let text = encode(&offsets);
        assert_eq!(text, "0\n3\na 0 12345\na 1 0\nb 0 5\n");
        assert_eq!(decode(&text), Ok(offsets));
    }

    #[test]
    fn every_malformed_line_is_refused_with_its_number() {
        for (text, line) in [
            ("1\n0\n", Some(1)),
            ("zero\n0\n", Some(1)),
            ("0\nmany\n", Some(2)),
            ("0\n2\na 0 1\n", None),
            ("0\n1\na 0 1\nb 0 2\n", Some(4)),
            ("0\n1\na 0\n", Some(3)),
            ("0\n1\na 0 1 2\n", Some(3)),
            ("0\n1\na x 1\n", Some(3)),
            ("0\n1\na 0 x\n", Some(3)),
            ("0\n1\na -1 5\n", Some(3)),
            ("0\n1\na 0 -5\n", Some(3)),
            ("0\n1\na 0 99999999999999999999\n", Some(3)),
            ("0\n1\na/b 0 1\n", Some(3)),
            ("0\n1\n.. 0 1\n", Some(3)),
            ("0\n2\na 0 1\na 0 2\n", Some(4)),
        ] {
            match decode(text) {
                Ok(v) => panic!("accepted {text:?} as {v:?}"),
                Err(e) => assert_eq!(e.line, line, "{text:?}: {}", e.reason),
            }
        }
    }
}
