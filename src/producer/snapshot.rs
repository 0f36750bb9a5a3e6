//! The producer snapshot codec: Kafka's version 1 and oncelog's versions 2 and 3
//! (docs/format.md "Producer snapshots"). A file `<offset>.snapshot` holds the producer state
//! after applying every offset below `offset`.
//!
//! Versions 1 and 2 share the header:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | version int16 (1 or 2) |
//! | 2 | 4 | crc uint32: CRC-32C of bytes [6, EOF), which includes the count |
//! | 6 | 4 | entry count int32 (≥ 0) |
//! | 10 | … | entries |
//!
//! Version 3 (oncelog's default) is version 2 with the offset it was taken at in its header,
//! so a snapshot copied or renamed to another offset is recognised ([`Snapshot::check_at`]):
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | version int16 = 3 |
//! | 2 | 4 | crc uint32: CRC-32C of bytes [6, EOF) |
//! | 6 | 8 | offset int64: the log offset of the file name |
//! | 14 | 4 | entry count int32 (≥ 0) |
//! | 18 | … | entries, as in version 2 |
//!
//! **Version 1** (Kafka's, 46 bytes per entry; only the newest batch of each producer):
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 8 | producer id int64 |
//! | 8 | 2 | epoch int16 |
//! | 10 | 4 | last sequence int32 (-1 with no batch) |
//! | 14 | 8 | last offset int64 (-1 with no batch) |
//! | 22 | 4 | offset delta int32 (0 with no batch) |
//! | 26 | 8 | last timestamp int64 |
//! | 34 | 4 | coordinator epoch int32 |
//! | 38 | 8 | current txn first offset int64 (-1 = none) |
//!
//! Version 1 has no append wall clock: a decoded v1 entry takes its last timestamp as
//! `last_append_ms`, which is what Kafka expires by. Its one batch carries that timestamp too.
//!
//! **Version 2** (and 3; oncelog's: the whole window and the append wall clock). Per producer, a
//! 42-byte fixed part followed by its retained batches, oldest first, 24 bytes each:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 8 | producer id int64 |
//! | 8 | 2 | epoch int16 |
//! | 10 | 4 | coordinator epoch int32 |
//! | 14 | 8 | last timestamp int64 |
//! | 22 | 8 | current txn first offset int64 (-1 = none) |
//! | 30 | 8 | last append wall-clock ms int64 |
//! | 38 | 4 | batch count int32, 0..=[`MAX_WINDOW`] |
//! | 42 | 24×n | batches |
//!
//! Batch (24 bytes):
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 4 | last sequence int32 |
//! | 4 | 8 | last offset int64 |
//! | 12 | 4 | offset delta int32 (≥ 0) |
//! | 16 | 8 | timestamp int64 |
//!
//! All integers are big-endian. The file ends right after the last entry. Checks, in order:
//! length ≥ 10, known version, CRC, then structure; every count is checked against the bytes
//! that remain before anything is allocated, so hostile input cannot make the decoder
//! allocate more than a small multiple of the file's length.

use super::config::MAX_WINDOW;
use super::entry::{ProducerEntry, NO_TXN};
use super::window::BatchMetadata;

/// Bytes before the first entry (versions 1 and 2; version 3 adds the 8-byte offset).
pub const HEADER_SIZE: usize = 10;
/// Bytes before the first entry of a version-3 snapshot.
pub const V3_HEADER_SIZE: usize = 18;
/// Bytes of one version-1 entry.
pub const V1_ENTRY_SIZE: usize = 46;
/// Bytes of the fixed part of one version-2 entry.
pub const V2_ENTRY_FIXED_SIZE: usize = 42;
/// Bytes of one version-2 batch.
pub const V2_BATCH_SIZE: usize = 24;
const CRC_START: usize = 6;

/// A snapshot format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SnapshotVersion {
    /// Kafka's: readable by Kafka, keeps one batch per producer.
    V1,
    /// oncelog's first: keeps the whole window and the append wall clock.
    V2,
    /// oncelog's: version 2 plus the offset it was taken at, checked against its file name.
    #[default]
    V3,
}

impl SnapshotVersion {
    /// The version number in a snapshot's header.
    pub fn number(self) -> i16 {
        match self {
            SnapshotVersion::V1 => 1,
            SnapshotVersion::V2 => 2,
            SnapshotVersion::V3 => 3,
        }
    }
    /// The version with that number, if known.
    pub fn from_number(n: i16) -> Option<SnapshotVersion> {
        match n {
            1 => Some(SnapshotVersion::V1),
            2 => Some(SnapshotVersion::V2),
            3 => Some(SnapshotVersion::V3),
            _ => None,
        }
    }
    /// Whether the format keeps a producer's whole dedup window (2 and 3) or only its newest
    /// batch (Kafka's 1).
    pub fn keeps_window(self) -> bool {
        self != SnapshotVersion::V1
    }
}

/// A decoded snapshot: the entries in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The format it was written in.
    pub version: SnapshotVersion,
    /// The offset stored in the header (version 3).
    pub offset: Option<i64>,
    /// One entry per producer.
    pub entries: Vec<ProducerEntry>,
}

impl Snapshot {
    /// Checks the snapshot against the offset its file is named after: the offset in its header
    /// (version 3) must be that one, and no entry may know an offset at or above it (a snapshot
    /// holds the state of the offsets below its name). Versions 1 and 2 are checked by their
    /// entries only.
    pub fn check_at(&self, name_offset: i64) -> Result<(), SnapshotError> {
        if let Some(header) = self.offset.filter(|o| *o != name_offset) {
            return Err(SnapshotError::OffsetMismatch {
                header,
                name: name_offset,
            });
        }
        for e in &self.entries {
            let newest = e.batches().map(|b| b.last_offset).max();
            let known = newest.max(e.current_txn_first_offset());
            if let Some(offset) = known.filter(|o| *o >= name_offset) {
                return Err(SnapshotError::EntryBeyondOffset {
                    producer_id: e.producer_id(),
                    offset,
                    snapshot_offset: name_offset,
                });
            }
        }
        Ok(())
    }
}

/// Why bytes are not a valid snapshot; positions are byte offsets in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Shorter than its version's header.
    #[error("snapshot too short: {len} bytes, the header alone is {min}")]
    TooShort {
        /// The file's length.
        len: usize,
        /// The header's size.
        min: usize,
    },
    /// A version this oncelog does not read.
    #[error("unsupported snapshot version {version} (known: 1, 2, 3)")]
    UnsupportedVersion {
        /// The version in the header.
        version: i16,
    },
    /// The CRC-32C of the bytes after the header's CRC field does not match it.
    #[error("snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A negative entry count.
    #[error("invalid snapshot entry count {count}")]
    InvalidCount {
        /// The count found.
        count: i32,
    },
    /// The file ends inside an entry.
    #[error("snapshot truncated in entry {entry} at byte {position}: {needed} more bytes needed, file is {len} bytes")]
    Truncated {
        /// The entry's index, from 0.
        entry: usize,
        /// Where the missing bytes start.
        position: usize,
        /// How many more bytes the entry needs.
        needed: usize,
        /// The file's length.
        len: usize,
    },
    /// The declared entries do not end where the file does.
    #[error("snapshot declares {declared} entries, which end at byte {position}, but the file is {len} bytes")]
    CountMismatch {
        /// The entry count in the header.
        declared: usize,
        /// Where those entries end.
        position: usize,
        /// The file's length.
        len: usize,
    },
    /// A field outside its valid range (a batch count above the largest window, a negative
    /// offset delta).
    #[error("snapshot entry {entry}: invalid {field} {value} at byte {position}")]
    InvalidField {
        /// The entry's index, from 0.
        entry: usize,
        /// Where the field is.
        position: usize,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// The offset in a version-3 header is not the one in the file's name.
    #[error("snapshot header says offset {header}, but the file is named after offset {name}")]
    OffsetMismatch {
        /// The offset in the header.
        header: i64,
        /// The offset in the name.
        name: i64,
    },
    /// An entry knows an offset the snapshot cannot have seen: at or above the one it is named
    /// after.
    #[error("producer {producer_id} knows offset {offset}, not below the snapshot's offset {snapshot_offset}")]
    EntryBeyondOffset {
        /// The entry's producer id.
        producer_id: i64,
        /// The offset it knows (a batch's last offset or its open transaction's first).
        offset: i64,
        /// The offset the snapshot is named after.
        snapshot_offset: i64,
    },
    /// The file is larger than any snapshot can be; it was not read.
    #[error("snapshot file of {len} bytes is larger than any snapshot ({max})")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The largest a snapshot can be.
        max: u64,
    },
    /// Not a regular file; it was not opened.
    #[error("snapshot is a {kind}, not a regular file")]
    NotAFile {
        /// What it is: `"directory"`, `"FIFO"`, ...
        kind: &'static str,
    },
}

impl SnapshotError {
    /// A stable snake_case name for the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            SnapshotError::TooShort { .. } => "too_short",
            SnapshotError::UnsupportedVersion { .. } => "unsupported_version",
            SnapshotError::CrcMismatch { .. } => "crc_mismatch",
            SnapshotError::InvalidCount { .. } => "invalid_count",
            SnapshotError::Truncated { .. } => "truncated",
            SnapshotError::CountMismatch { .. } => "count_mismatch",
            SnapshotError::InvalidField { .. } => "invalid_field",
            SnapshotError::OffsetMismatch { .. } => "offset_mismatch",
            SnapshotError::EntryBeyondOffset { .. } => "entry_beyond_offset",
            SnapshotError::TooLarge { .. } => "too_large",
            SnapshotError::NotAFile { .. } => "not_a_file",
        }
    }
}

/// Encodes entries in the given order, as the snapshot taken at `offset` (its file name; stored
/// in the header from version 3). Version 1 keeps only each producer's newest batch.
pub fn encode<'a>(
    entries: impl IntoIterator<Item = &'a ProducerEntry>,
    version: SnapshotVersion,
    offset: i64,
) -> Vec<u8> {
    let entries = entries.into_iter();
    let per_entry = match version {
        SnapshotVersion::V1 => V1_ENTRY_SIZE,
        SnapshotVersion::V2 | SnapshotVersion::V3 => V2_ENTRY_FIXED_SIZE + V2_BATCH_SIZE,
    };
    let header = match version {
        SnapshotVersion::V3 => V3_HEADER_SIZE,
        _ => HEADER_SIZE,
    };
    let mut out = Vec::with_capacity(header + per_entry * entries.size_hint().0);
    out.extend_from_slice(&version.number().to_be_bytes());
    out.extend_from_slice(&[0; 4]); // crc, patched below
    if version == SnapshotVersion::V3 {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(&[0; 4]); // count, patched below
    let mut count: u32 = 0;
    for e in entries {
        count += 1;
        match version {
            SnapshotVersion::V1 => encode_v1_entry(&mut out, e),
            SnapshotVersion::V2 | SnapshotVersion::V3 => encode_v2_entry(&mut out, e),
        }
    }
    out[header - 4..header].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[2..6].copy_from_slice(&crc.to_be_bytes());
    out
}

fn encode_v1_entry(out: &mut Vec<u8>, e: &ProducerEntry) {
    let (last_seq, last_offset, delta) = e
        .newest_batch()
        .map_or((-1, -1, 0), |b| (b.last_seq, b.last_offset, b.offset_delta));
    out.extend_from_slice(&e.producer_id().to_be_bytes());
    out.extend_from_slice(&e.epoch().to_be_bytes());
    out.extend_from_slice(&last_seq.to_be_bytes());
    out.extend_from_slice(&last_offset.to_be_bytes());
    out.extend_from_slice(&delta.to_be_bytes());
    out.extend_from_slice(&e.last_timestamp().to_be_bytes());
    out.extend_from_slice(&e.coordinator_epoch().to_be_bytes());
    out.extend_from_slice(&e.current_txn_first_offset().unwrap_or(NO_TXN).to_be_bytes());
}

fn encode_v2_entry(out: &mut Vec<u8>, e: &ProducerEntry) {
    out.extend_from_slice(&e.producer_id().to_be_bytes());
    out.extend_from_slice(&e.epoch().to_be_bytes());
    out.extend_from_slice(&e.coordinator_epoch().to_be_bytes());
    out.extend_from_slice(&e.last_timestamp().to_be_bytes());
    out.extend_from_slice(&e.current_txn_first_offset().unwrap_or(NO_TXN).to_be_bytes());
    out.extend_from_slice(&e.last_append_ms().to_be_bytes());
    out.extend_from_slice(&(e.batches().len() as i32).to_be_bytes());
    for b in e.batches() {
        out.extend_from_slice(&b.last_seq.to_be_bytes());
        out.extend_from_slice(&b.last_offset.to_be_bytes());
        out.extend_from_slice(&b.offset_delta.to_be_bytes());
        out.extend_from_slice(&b.timestamp.to_be_bytes());
    }
}

/// Decodes a whole snapshot file, checking length, version, CRC and structure.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    if bytes.len() < HEADER_SIZE {
        return Err(SnapshotError::TooShort {
            len: bytes.len(),
            min: HEADER_SIZE,
        });
    }
    let mut r = Reader { bytes, pos: 0 };
    let raw_version = r.i16();
    let version =
        SnapshotVersion::from_number(raw_version).ok_or(SnapshotError::UnsupportedVersion {
            version: raw_version,
        })?;
    let stored = r.i32() as u32;
    let computed = crc32c::crc32c(&bytes[CRC_START..]);
    if stored != computed {
        return Err(SnapshotError::CrcMismatch { stored, computed });
    }
    let offset = if version == SnapshotVersion::V3 {
        if bytes.len() < V3_HEADER_SIZE {
            return Err(SnapshotError::TooShort {
                len: bytes.len(),
                min: V3_HEADER_SIZE,
            });
        }
        Some(r.i64())
    } else {
        None
    };
    let count = r.i32();
    let count = usize::try_from(count).map_err(|_| SnapshotError::InvalidCount { count })?;
    let entries = match version {
        SnapshotVersion::V1 => decode_v1(&mut r, count)?,
        SnapshotVersion::V2 | SnapshotVersion::V3 => decode_v2(&mut r, count)?,
    };
    if r.pos != bytes.len() {
        return Err(SnapshotError::CountMismatch {
            declared: count,
            position: r.pos,
            len: bytes.len(),
        });
    }
    Ok(Snapshot {
        version,
        offset,
        entries,
    })
}

fn decode_v1(r: &mut Reader<'_>, count: usize) -> Result<Vec<ProducerEntry>, SnapshotError> {
    let mut entries = Vec::with_capacity(count.min(r.remaining() / V1_ENTRY_SIZE));
    for i in 0..count {
        r.need(i, V1_ENTRY_SIZE)?;
        let producer_id = r.i64();
        let epoch = r.i16();
        let last_seq = r.i32();
        let last_offset = r.i64();
        let offset_delta = r.i32();
        let timestamp = r.i64();
        let coordinator_epoch = r.i32();
        let txn = r.i64();
        // Kafka restores a batch only when there was one (lastOffset ≥ 0).
        let batches = if last_offset >= 0 {
            vec![BatchMetadata {
                last_seq,
                last_offset,
                offset_delta,
                timestamp,
            }]
        } else {
            Vec::new()
        };
        entries.push(ProducerEntry::restore(
            producer_id,
            epoch,
            coordinator_epoch,
            timestamp,
            Some(txn),
            timestamp,
            batches,
        ));
    }
    Ok(entries)
}

fn decode_v2(r: &mut Reader<'_>, count: usize) -> Result<Vec<ProducerEntry>, SnapshotError> {
    let mut entries = Vec::with_capacity(count.min(r.remaining() / V2_ENTRY_FIXED_SIZE));
    for i in 0..count {
        r.need(i, V2_ENTRY_FIXED_SIZE)?;
        let producer_id = r.i64();
        let epoch = r.i16();
        let coordinator_epoch = r.i32();
        let last_timestamp = r.i64();
        let txn = r.i64();
        let last_append_ms = r.i64();
        let count_pos = r.pos;
        let raw_batches = r.i32();
        let n = usize::try_from(raw_batches)
            .ok()
            .filter(|n| *n <= MAX_WINDOW)
            .ok_or(SnapshotError::InvalidField {
                entry: i,
                position: count_pos,
                field: "batch count",
                value: i64::from(raw_batches),
            })?;
        r.need(i, n * V2_BATCH_SIZE)?;
        let mut batches = Vec::with_capacity(n);
        for _ in 0..n {
            let delta_pos = r.pos + 12;
            let b = BatchMetadata {
                last_seq: r.i32(),
                last_offset: r.i64(),
                offset_delta: r.i32(),
                timestamp: r.i64(),
            };
            if b.offset_delta < 0 {
                return Err(SnapshotError::InvalidField {
                    entry: i,
                    position: delta_pos,
                    field: "offset delta",
                    value: i64::from(b.offset_delta),
                });
            }
            batches.push(b);
        }
        entries.push(ProducerEntry::restore(
            producer_id,
            epoch,
            coordinator_epoch,
            last_timestamp,
            Some(txn),
            last_append_ms,
            batches,
        ));
    }
    Ok(entries)
}

/// Big-endian reads; callers check the length first with [`Reader::need`] (or the header
/// length check), so the reads themselves cannot run past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
    fn need(&self, entry: usize, n: usize) -> Result<(), SnapshotError> {
        if self.remaining() < n {
            return Err(SnapshotError::Truncated {
                entry,
                position: self.pos,
                needed: n - self.remaining(),
                len: self.bytes.len(),
            });
        }
        Ok(())
    }
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.bytes.get(self.pos..self.pos + N) {
            out.copy_from_slice(src);
        }
        self.pos += N;
        out
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
