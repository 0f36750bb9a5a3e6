//! Control records and transaction markers (docs/format.md, "Control batches and transaction
//! markers").
//!
//! Control record key, 4 bytes:
//!
//! | off | size | field   | notes                                        |
//! |----:|-----:|---------|----------------------------------------------|
//! |   0 |    2 | version | 0; higher versions are read as 0; < 0 corrupt |
//! |   2 |    2 | type    | [`ControlType`]                               |
//!
//! End-txn marker value (the value of an ABORT or COMMIT record), 6 bytes:
//!
//! | off | size | field            | notes                                        |
//! |----:|-----:|------------------|----------------------------------------------|
//! |   0 |    2 | version          | 0; higher versions are read as 0; < 0 corrupt |
//! |   2 |    4 | coordinatorEpoch |                                              |
//!
//! Extra bytes after either are ignored, which is how Kafka reads newer versions.

use super::batch::be_i16;
use super::batch::be_i32;
use super::batch::{RecordBatch, HEADER_SIZE};
use super::builder::BatchBuilder;
use super::error::{BatchError, ControlRecordError};
use super::record::Record;

/// What a control record says. Unknown types are kept, not refused: Kafka ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// A transaction was aborted (type 0).
    Abort,
    /// A transaction was committed (type 1).
    Commit,
    /// A KRaft leader change (type 2).
    LeaderChange,
    /// The start of a KRaft snapshot (type 3).
    SnapshotHeader,
    /// The end of a KRaft snapshot (type 4).
    SnapshotFooter,
    /// A KRaft version record (type 5).
    KraftVersion,
    /// A KRaft voters record (type 6).
    KraftVoters,
    /// A type this version does not know, with its id.
    Unknown(i16),
}

impl ControlType {
    /// The type for a key's type id.
    pub fn from_id(id: i16) -> ControlType {
        match id {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            2 => ControlType::LeaderChange,
            3 => ControlType::SnapshotHeader,
            4 => ControlType::SnapshotFooter,
            5 => ControlType::KraftVersion,
            6 => ControlType::KraftVoters,
            other => ControlType::Unknown(other),
        }
    }

    /// The type id written in a key.
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::LeaderChange => 2,
            ControlType::SnapshotHeader => 3,
            ControlType::SnapshotFooter => 4,
            ControlType::KraftVersion => 5,
            ControlType::KraftVoters => 6,
            ControlType::Unknown(id) => id,
        }
    }

    /// Kafka's name of the type (`ControlRecordType`): `ABORT`, `COMMIT`, `LEADER_CHANGE`,
    /// ..., `UNKNOWN` for an id it does not define.
    pub fn name(self) -> &'static str {
        match self {
            ControlType::Abort => "ABORT",
            ControlType::Commit => "COMMIT",
            ControlType::LeaderChange => "LEADER_CHANGE",
            ControlType::SnapshotHeader => "SNAPSHOT_HEADER",
            ControlType::SnapshotFooter => "SNAPSHOT_FOOTER",
            ControlType::KraftVersion => "KRAFT_VERSION",
            ControlType::KraftVoters => "KRAFT_VOTERS",
            ControlType::Unknown(_) => "UNKNOWN",
        }
    }

    /// Whether the record ends a transaction, so its value is an [`EndTxnMarker`].
    pub fn is_end_txn(self) -> bool {
        matches!(self, ControlType::Abort | ControlType::Commit)
    }
}

/// The key of a control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecordKey {
    /// The key's version (0; a higher one is read as 0).
    pub version: i16,
    /// What the record says.
    pub control_type: ControlType,
}

impl ControlRecordKey {
    /// Bytes of an encoded key: version and type, two big-endian int16s.
    pub const SIZE: usize = 4;

    /// Reads a key; bytes after the first [`Self::SIZE`] are ignored, as Kafka does.
    pub fn decode(key: &[u8]) -> Result<ControlRecordKey, ControlRecordError> {
        if key.len() < Self::SIZE {
            return Err(ControlRecordError::KeyTooShort { len: key.len() });
        }
        let version = be_i16(key, 0);
        if version < 0 {
            return Err(ControlRecordError::NegativeKeyVersion { version });
        }
        Ok(ControlRecordKey {
            version,
            control_type: ControlType::from_id(be_i16(key, 2)),
        })
    }

    /// The key's bytes.
    pub fn encode(&self) -> [u8; 4] {
        let [v0, v1] = self.version.to_be_bytes();
        let [t0, t1] = self.control_type.id().to_be_bytes();
        [v0, v1, t0, t1]
    }
}

/// The value of an ABORT or COMMIT control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    /// The value's version (0; a higher one is read as 0).
    pub version: i16,
    /// The epoch of the transaction coordinator that wrote the marker.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// Bytes of an encoded value: version (int16) and coordinator epoch (int32), big-endian.
    pub const SIZE: usize = 6;

    /// Reads a marker's value; bytes after the first [`Self::SIZE`] are ignored, as Kafka does.
    pub fn decode(value: &[u8]) -> Result<EndTxnMarker, ControlRecordError> {
        if value.len() < Self::SIZE {
            return Err(ControlRecordError::ValueTooShort { len: value.len() });
        }
        let version = be_i16(value, 0);
        if version < 0 {
            return Err(ControlRecordError::NegativeValueVersion { version });
        }
        Ok(EndTxnMarker {
            version,
            coordinator_epoch: be_i32(value, 2),
        })
    }

    /// The value's bytes.
    pub fn encode(&self) -> [u8; 6] {
        let mut out = [0u8; 6];
        out[..2].copy_from_slice(&self.version.to_be_bytes());
        out[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        out
    }
}

/// Reads the key of a record from a control batch; and its end-txn marker when the type is
/// ABORT or COMMIT.
pub fn decode_control_record(
    record: &Record<'_>,
) -> Result<(ControlRecordKey, Option<EndTxnMarker>), ControlRecordError> {
    let key = ControlRecordKey::decode(
        record
            .key
            .ok_or(ControlRecordError::Null { field: "key" })?,
    )?;
    if !key.control_type.is_end_txn() {
        return Ok((key, None));
    }
    let value = record
        .value
        .ok_or(ControlRecordError::Null { field: "value" })?;
    Ok((key, Some(EndTxnMarker::decode(value)?)))
}

/// The most a control batch's records may decompress to when its marker is read.
pub const MAX_MARKER_RECORDS_BYTES: usize = 64 * 1024;

/// What a transaction marker says: how the transaction ended, which coordinator ended it, and
/// when (the control record's timestamp, which becomes the producer's last timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarkerRecord {
    /// [`ControlType::Abort`] or [`ControlType::Commit`].
    pub control_type: ControlType,
    /// The epoch of the transaction coordinator that wrote it.
    pub coordinator_epoch: i32,
    /// The control record's timestamp.
    pub timestamp: i64,
}

impl TxnMarkerRecord {
    /// Whether the marker aborts its transaction.
    pub fn is_abort(&self) -> bool {
        self.control_type == ControlType::Abort
    }
}

/// The transaction marker of a producer's control batch, read as Kafka's producer state reads
/// it: the first record, whose key must say ABORT or COMMIT and whose value must be an end-txn
/// marker. `Ok(None)` for a control batch without records (what compaction leaves once a
/// transaction is gone: nothing to do) and for a batch that is not a control batch of a
/// producer (producer id ≥ 0); a KRaft control batch (producer id −1) may hold any type.
///
/// The CRC is not checked here; records after the first are not read (Kafka ignores them).
pub fn decode_txn_marker(batch: &RecordBatch<'_>) -> Result<Option<TxnMarkerRecord>, BatchError> {
    if !batch.is_control() || batch.producer_id() < 0 || batch.records_count() == 0 {
        return Ok(None);
    }
    let producer_id = batch.producer_id();
    // Kafka never compresses a marker (17 bytes of record): a compressed control batch may be
    // read, but never made to inflate more than this.
    let buf = batch.records_buf_limited(MAX_MARKER_RECORDS_BYTES)?;
    let record = match batch.iter_records(&buf).next() {
        Some(record) => record?,
        // A negative count: the iterator says so as the first item.
        None => {
            return Err(BatchError::InvalidRecord {
                index: 0,
                position: HEADER_SIZE,
                reason: super::error::RecordError::Truncated,
            })
        }
    };
    let invalid = |reason| BatchError::InvalidMarker {
        producer_id,
        reason,
    };
    let (key, value) = decode_control_record(&record).map_err(invalid)?;
    let Some(value) = value else {
        return Err(invalid(ControlRecordError::NotEndTxnMarker {
            control_type: key.control_type.id(),
        }));
    };
    Ok(Some(TxnMarkerRecord {
        control_type: key.control_type,
        coordinator_epoch: value.coordinator_epoch,
        timestamp: record.timestamp,
    }))
}

/// A complete transaction-marker batch: control + transactional (attributes 0x30), no
/// sequence, one record with key (0, `control_type`) and value (0, `coordinator_epoch`), as the
/// transaction coordinator's WriteTxnMarkers produces it (78 bytes).
pub fn end_txn_marker(
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    timestamp: i64,
    control_type: ControlType,
    coordinator_epoch: i32,
) -> Vec<u8> {
    let key = ControlRecordKey {
        version: 0,
        control_type,
    }
    .encode();
    let value = EndTxnMarker {
        version: 0,
        coordinator_epoch,
    }
    .encode();
    let mut builder = BatchBuilder::new()
        .base_offset(base_offset)
        .partition_leader_epoch(partition_leader_epoch)
        .producer(producer_id, producer_epoch, -1)
        .transactional(true)
        .control(true);
    builder.append(timestamp, Some(&key), Some(&value), &[]);
    let mut out = Vec::with_capacity(78);
    builder.build_uncompressed_into(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::batch::RecordBatch;

    #[test]
    fn end_txn_marker_reproduces_tv5_byte_for_byte() {
        let bytes = end_txn_marker(
            5,
            0,
            123_456_789,
            3,
            1_700_000_000_000,
            ControlType::Commit,
            7,
        );
        let expected = "000000000000000500000042000000000282629a5f0030000000000000018bcfe568000000018bcfe5680000000000075bcd150003ffffffff00000001\
                        2000000008000000010c00000000000700";
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        assert_eq!(bytes.len(), 78);
        assert_eq!(RecordBatch::parse(&bytes).unwrap().crc(), 0x8262_9A5F);
    }

    #[test]
    fn marker_batch_decodes_back_to_its_key_and_value() {
        let bytes = end_txn_marker(0, 1, 9, 2, 10, ControlType::Abort, 44);
        let batch = RecordBatch::parse(&bytes).unwrap();
        let buf = batch.records_buf().unwrap();
        let record = batch.iter_records(&buf).next().unwrap().unwrap();
        let (key, marker) = decode_control_record(&record).unwrap();
        assert_eq!(key.control_type, ControlType::Abort);
        assert_eq!(
            marker,
            Some(EndTxnMarker {
                version: 0,
                coordinator_epoch: 44
            })
        );
    }

    #[test]
    fn a_marker_batch_reads_back_as_its_type_epoch_and_timestamp() {
        let bytes = end_txn_marker(3, 0, 9, 2, 1_234, ControlType::Abort, 44);
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(
            decode_txn_marker(&batch),
            Ok(Some(TxnMarkerRecord {
                control_type: ControlType::Abort,
                coordinator_epoch: 44,
                timestamp: 1_234,
            }))
        );
    }

    /// A record's key and value.
    type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

    /// A producer's control batch of `records`.
    fn control_batch(producer_id: i64, records: &[KeyValue<'_>]) -> Vec<u8> {
        let mut b = BatchBuilder::new()
            .producer(producer_id, 0, -1)
            .transactional(true)
            .control(true);
        for (key, value) in records {
            b.append(5, *key, *value, &[]);
        }
        b.build().unwrap()
    }

    #[test]
    fn a_producers_control_batch_of_another_type_is_not_a_marker() {
        let leader_change: &[u8] = &[0, 0, 0, 2];
        let bytes = control_batch(7, &[(Some(leader_change), Some(&[0, 0]))]);
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(
            decode_txn_marker(&batch),
            Err(BatchError::InvalidMarker {
                producer_id: 7,
                reason: ControlRecordError::NotEndTxnMarker { control_type: 2 }
            })
        );
        // The same record in a KRaft control batch (no producer) is not a marker to read.
        let kraft = control_batch(-1, &[(Some(leader_change), Some(&[0, 0]))]);
        assert_eq!(decode_txn_marker(&RecordBatch::parse(&kraft).unwrap()), Ok(None));
    }

    #[test]
    fn a_marker_with_a_short_value_or_key_is_invalid() {
        let commit: &[u8] = &[0, 0, 0, 1];
        let bytes = control_batch(7, &[(Some(commit), Some(&[0, 0, 0, 0, 1]))]);
        assert_eq!(
            decode_txn_marker(&RecordBatch::parse(&bytes).unwrap()),
            Err(BatchError::InvalidMarker {
                producer_id: 7,
                reason: ControlRecordError::ValueTooShort { len: 5 }
            })
        );
        let bytes = control_batch(7, &[(Some(&[0, 0, 1]), Some(&[0; 6]))]);
        assert_eq!(
            decode_txn_marker(&RecordBatch::parse(&bytes).unwrap()),
            Err(BatchError::InvalidMarker {
                producer_id: 7,
                reason: ControlRecordError::KeyTooShort { len: 3 }
            })
        );
    }

    #[test]
    fn an_empty_control_batch_says_nothing() {
        let bytes = control_batch(7, &[]);
        assert_eq!(decode_txn_marker(&RecordBatch::parse(&bytes).unwrap()), Ok(None));
    }

    #[test]
    fn control_types_round_trip_through_their_ids() {
        for id in [0, 1, 2, 3, 4, 5, 6, 7, 128, -1] {
            assert_eq!(ControlType::from_id(id).id(), id);
        }
        assert_eq!(ControlType::from_id(128), ControlType::Unknown(128));
        assert_eq!(ControlType::from_id(0).name(), "ABORT");
        assert_eq!(ControlType::from_id(6).name(), "KRAFT_VOTERS");
        assert_eq!(ControlType::from_id(9).name(), "UNKNOWN");
    }

    #[test]
    fn key_shorter_than_four_bytes_is_corrupt() {
        assert_eq!(
            ControlRecordKey::decode(&[0, 0, 0]),
            Err(ControlRecordError::KeyTooShort { len: 3 })
        );
    }

    #[test]
    fn negative_key_version_is_corrupt() {
        assert_eq!(
            ControlRecordKey::decode(&[0xff, 0xff, 0, 1]),
            Err(ControlRecordError::NegativeKeyVersion { version: -1 })
        );
    }

    #[test]
    fn higher_key_version_is_read_as_version_zero() {
        let key = ControlRecordKey::decode(&[0, 3, 0, 1, 0xaa]).unwrap();
        assert_eq!((key.version, key.control_type), (3, ControlType::Commit));
    }

    #[test]
    fn marker_value_shorter_than_six_bytes_is_corrupt() {
        assert_eq!(
            EndTxnMarker::decode(&[0, 0, 0, 0, 7]),
            Err(ControlRecordError::ValueTooShort { len: 5 })
        );
    }

    #[test]
    fn negative_marker_value_version_is_corrupt() {
        assert_eq!(
            EndTxnMarker::decode(&[0x80, 0, 0, 0, 0, 7]),
            Err(ControlRecordError::NegativeValueVersion { version: i16::MIN })
        );
    }

    #[test]
    fn higher_marker_value_version_is_read_as_version_zero() {
        let m = EndTxnMarker::decode(&[0, 1, 0, 0, 0, 9, 1, 2, 3]).unwrap();
        assert_eq!((m.version, m.coordinator_epoch), (1, 9));
    }
}
