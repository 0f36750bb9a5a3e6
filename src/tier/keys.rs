//! Where each object of a partition lives in the store (docs/format.md, "Tiered storage:
//! object keys and the manifest"). Pure functions over plain values.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::producer::snapshot_files;
use crate::segment::names;

/// The folder of a partition's manifests, under its prefix.
pub const MANIFEST_FOLDER: &str = "manifest";
/// The folder of a partition's segments, under its prefix.
pub const SEGMENTS_FOLDER: &str = "segments";
/// The leader-epoch object's name in a segment's folder (Kafka's file name).
pub const LEADER_EPOCHS_NAME: &str = "leader-epoch-checkpoint";

/// The id of one upload attempt: every attempt's objects get their own folder, so no attempt
/// overwrites an object a manifest names. 16 lowercase hex digits in keys and manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UploadId(pub u64);

impl UploadId {
    /// A fresh id: the process's random hash seed over the time and a counter (no two calls
    /// of a process collide; across processes and machines, 64 random bits).
    pub fn fresh() -> UploadId {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        h.write_u64(now);
        h.write_u32(std::process::id());
        UploadId(h.finish())
    }

    /// Parses the 16 hex digits of a key or a manifest.
    pub fn parse(s: &str) -> Option<UploadId> {
        (s.len() == 16
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then(|| u64::from_str_radix(s, 16).ok().map(UploadId))
        .flatten()
    }
}

impl std::fmt::Display for UploadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One of the six objects a remote segment is made of, in the manifest's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentObject {
    /// The `.log`.
    Log,
    /// The `.index`.
    OffsetIndex,
    /// The `.timeindex`.
    TimeIndex,
    /// The `.txnindex`.
    TxnIndex,
    /// The producer snapshot at the segment's end.
    ProducerSnapshot,
    /// The leader-epoch entries up to the segment's end.
    LeaderEpochs,
}

impl SegmentObject {
    /// All six, in the manifest's order.
    pub const ALL: [SegmentObject; 6] = [
        SegmentObject::Log,
        SegmentObject::OffsetIndex,
        SegmentObject::TimeIndex,
        SegmentObject::TxnIndex,
        SegmentObject::ProducerSnapshot,
        SegmentObject::LeaderEpochs,
    ];

    /// Its place in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// What error messages call it: `.log`, `.index`, `.timeindex`, `.txnindex`,
    /// `.snapshot`, `leader-epoch-checkpoint`.
    pub fn name(self) -> &'static str {
        match self {
            SegmentObject::Log => ".log",
            SegmentObject::OffsetIndex => ".index",
            SegmentObject::TimeIndex => ".timeindex",
            SegmentObject::TxnIndex => ".txnindex",
            SegmentObject::ProducerSnapshot => ".snapshot",
            SegmentObject::LeaderEpochs => LEADER_EPOCHS_NAME,
        }
    }

    /// Its key, for the segment `[base, end)` uploaded by `id` under `partition`.
    pub fn key(self, partition: &str, base: i64, end: i64, id: UploadId) -> String {
        let folder = segment_folder(partition, base, id);
        let name = match self {
            SegmentObject::Log => names::file_name(base, names::LOG_EXT),
            SegmentObject::OffsetIndex => names::file_name(base, names::INDEX_EXT),
            SegmentObject::TimeIndex => names::file_name(base, names::TIME_INDEX_EXT),
            SegmentObject::TxnIndex => names::file_name(base, names::TXN_INDEX_EXT),
            SegmentObject::ProducerSnapshot => snapshot_files::file_name(end),
            SegmentObject::LeaderEpochs => LEADER_EPOCHS_NAME.to_string(),
        };
        format!("{folder}/{name}")
    }
}

/// The folder of one upload's objects: `<partition>/segments/<base>-<id>`.
pub fn segment_folder(partition: &str, base: i64, id: UploadId) -> String {
    format!("{partition}/{SEGMENTS_FOLDER}/{base:020}-{id}")
}

/// The folder of a partition's manifests: `<partition>/manifest`.
pub fn manifest_folder(partition: &str) -> String {
    format!("{partition}/{MANIFEST_FOLDER}")
}

/// The key of manifest generation `generation`: `<partition>/manifest/<generation>`, 20 digits.
pub fn manifest_key(partition: &str, generation: u64) -> String {
    format!("{}/{generation:020}", manifest_folder(partition))
}

/// The generation a key under [`manifest_folder`] names, `None` if it names none.
pub fn parse_manifest_key(partition: &str, key: &str) -> Option<u64> {
    let name = key
        .strip_prefix(&manifest_folder(partition))?
        .strip_prefix('/')?;
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// Why a partition prefix is refused, or `None` if it is a good one: non-empty, at most 512
/// bytes, `/`-separated parts of ASCII letters, digits, `.`, `_` and `-`, none empty, `.` or
/// `..` (what every object store takes as a key, and a manifest line holds without quoting).
pub fn check_partition_prefix(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        return Some("empty");
    }
    if prefix.len() > 512 {
        return Some("longer than 512 bytes");
    }
    for part in prefix.split('/') {
        if part.is_empty() {
            return Some("an empty part (a leading, trailing or doubled '/')");
        }
        if part == "." || part == ".." {
            return Some("a '.' or '..' part");
        }
        if !part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Some("a character other than ASCII letters, digits, '.', '_', '-' and '/'");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let id = UploadId(0x8c1f_03a9_5e2b_7d40);
        assert_eq!(
            SegmentObject::Log.key("orders-0", 860, 1720, id),
            "orders-0/segments/00000000000000000860-8c1f03a95e2b7d40/00000000000000000860.log"
        );
        assert_eq!(
            SegmentObject::ProducerSnapshot.key("orders-0", 860, 1720, id),
            "orders-0/segments/00000000000000000860-8c1f03a95e2b7d40/00000000000000001720.snapshot"
        );
        assert_eq!(
            SegmentObject::LeaderEpochs.key("t/orders-0", 0, 1, id),
            "t/orders-0/segments/00000000000000000000-8c1f03a95e2b7d40/leader-epoch-checkpoint"
        );
        assert_eq!(
            manifest_key("orders-0", 7),
            "orders-0/manifest/00000000000000000007"
        );
        assert_eq!(
            parse_manifest_key("orders-0", &manifest_key("orders-0", 7)),
            Some(7)
        );
        assert_eq!(parse_manifest_key("orders-0", "orders-0/manifest/7"), None);
        assert_eq!(
            parse_manifest_key("orders-0", "orders-1/manifest/00000000000000000007"),
            None
        );
    }

    #[test]
    fn upload_ids_are_fresh_and_round_trip() {
        let (a, b) = (UploadId::fresh(), UploadId::fresh());
        assert_ne!(a, b);
        assert_eq!(UploadId::parse(&a.to_string()), Some(a));
        assert_eq!(UploadId::parse("8C1F03A95E2B7D40"), None);
        assert_eq!(UploadId::parse("8c1f03a95e2b7d4"), None);
    }

    #[test]
    fn partition_prefixes_that_keys_cannot_hold_are_refused() {
        assert_eq!(check_partition_prefix("tier/orders-0"), None);
        for bad in ["", "/a", "a/", "a//b", "a/../b", "a b", "a\nb", "é"] {
            assert!(check_partition_prefix(bad).is_some(), "{bad:?}");
        }
    }
}
