//! Writes RecordBatch v2 batches (layout in [`super::batch`] and [`super::record`]).
//!
//! Records are encoded as they are appended into one reusable buffer, so building a batch costs
//! no allocation per record, and [`BatchBuilder::clear`] + [`BatchBuilder::build_into`] let a
//! benchmark build many batches from the same buffers.
//!
//! Timestamps follow Kafka's `MemoryRecordsBuilder`: baseTimestamp is the first record's
//! timestamp (or the delete horizon when one is set), each record stores its delta to it, and
//! maxTimestamp is the largest record timestamp unless overridden (LogAppendTime batches carry
//! the broker's time there).

use super::batch::{
    rewrite_crc, Compression, TimestampType, ATTR_CONTROL, ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
};
use super::compression::compress;
use super::error::BatchError;
use super::record::Header;
use super::varint::{encode_varint, encode_varlong, varint_size, varlong_size};

/// Builds one batch at a time. Header fields default to "none" (−1), CreateTime, no
/// compression, base offset 0.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    timestamp_type: TimestampType,
    compression: Compression,
    delete_horizon: Option<i64>,
    max_timestamp_override: Option<i64>,
    /// The encoded records, uncompressed.
    records: Vec<u8>,
    count: i32,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        BatchBuilder::new()
    }
}

impl BatchBuilder {
    /// An empty batch with a client's header: base offset 0, no producer id (-1), no partition
    /// leader epoch (-1), `CreateTime`, uncompressed.
    pub fn new() -> BatchBuilder {
        BatchBuilder {
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            timestamp_type: TimestampType::CreateTime,
            compression: Compression::None,
            delete_horizon: None,
            max_timestamp_override: None,
            records: Vec::new(),
            count: 0,
            base_timestamp: None,
            max_timestamp: i64::MIN,
        }
    }

    /// The baseOffset to write (0 for a client's batch; a log assigns the real one).
    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }
    /// The partitionLeaderEpoch to write.
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }
    /// Producer id, epoch and the sequence of the first record (idempotent producers).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }
    /// Marks the batch as part of a transaction.
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }
    /// Marks the batch as a control batch (see [`super::end_txn_marker`] for a whole marker).
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }
    /// The timestamp type to write in the attributes.
    pub fn timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }
    /// Compresses the records with `compression` when the batch is built.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
    /// Writes maxTimestamp as given instead of the largest record timestamp: the broker time of
    /// a LogAppendTime batch.
    pub fn max_timestamp(mut self, max_timestamp: i64) -> Self {
        self.max_timestamp_override = Some(max_timestamp);
        self
    }
    /// Sets the delete-horizon attribute: baseTimestamp holds `horizon` and the record deltas
    /// are relative to it (docs/format.md, attributes). Must be set before the first record is
    /// appended, since the deltas are encoded on append; later calls only take effect after
    /// [`Self::clear`].
    pub fn delete_horizon(mut self, horizon: i64) -> Self {
        self.delete_horizon = Some(horizon);
        self
    }

    /// Records appended so far.
    pub fn len(&self) -> i32 {
        self.count
    }
    /// Whether no record was appended yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forgets the records but keeps the header settings and the buffer's capacity.
    pub fn clear(&mut self) {
        self.records.clear();
        self.count = 0;
        self.base_timestamp = None;
        self.max_timestamp = i64::MIN;
    }

    /// Appends a record with the next offset delta.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> &mut Self {
        let base = *self
            .base_timestamp
            .get_or_insert(self.delete_horizon.unwrap_or(timestamp));
        let timestamp_delta = timestamp.wrapping_sub(base);
        let offset_delta = self.count;
        let body_len = 1
            + varlong_size(timestamp_delta)
            + varint_size(offset_delta)
            + nullable_size(key)
            + nullable_size(value)
            + varint_size(headers.len() as i32)
            + headers
                .iter()
                .map(|h| nullable_size(Some(h.key)) + nullable_size(h.value))
                .sum::<usize>();
        let out = &mut self.records;
        out.reserve(body_len + 5);
        encode_varint(body_len as i32, out);
        out.push(0); // record attributes: unused
        encode_varlong(timestamp_delta, out);
        encode_varint(offset_delta, out);
        put_nullable(key, out);
        put_nullable(value, out);
        encode_varint(headers.len() as i32, out);
        for h in headers {
            put_nullable(Some(h.key), out);
            put_nullable(h.value, out);
        }
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self
    }

    /// The batch as a new buffer.
    pub fn build(&self) -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::new();
        self.build_into(&mut out)?;
        Ok(out)
    }

    /// Appends the batch to `out`. Fails only if the codec fails.
    pub fn build_into(&self, out: &mut Vec<u8>) -> Result<(), BatchError> {
        if self.compression == Compression::None {
            self.write_batch(&self.records, out);
        } else {
            let packed = compress(self.compression, &self.records)?;
            self.write_batch(&packed, out);
        }
        Ok(())
    }

    /// Appends the batch with its records stored raw, whatever the configured codec. Cannot
    /// fail, which is what control-record writers need.
    pub(crate) fn build_uncompressed_into(&self, out: &mut Vec<u8>) {
        let this = BatchBuilder {
            compression: Compression::None,
            ..self.clone()
        };
        this.write_batch(&self.records, out);
    }

    fn attributes(&self) -> i16 {
        let mut attrs = i16::from(self.compression.id());
        if self.timestamp_type == TimestampType::LogAppendTime {
            attrs |= ATTR_TIMESTAMP_TYPE;
        }
        if self.transactional {
            attrs |= ATTR_TRANSACTIONAL;
        }
        if self.control {
            attrs |= ATTR_CONTROL;
        }
        if self.delete_horizon.is_some() {
            attrs |= ATTR_DELETE_HORIZON;
        }
        attrs
    }

    fn write_batch(&self, records: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        let size = HEADER_SIZE + records.len();
        // The base the deltas were encoded against; the horizon when it was set before appending.
        let base_timestamp = self.base_timestamp.or(self.delete_horizon).unwrap_or(-1);
        let max_timestamp = self.max_timestamp_override.unwrap_or(if self.count == 0 {
            -1
        } else {
            self.max_timestamp
        });
        out.reserve(size);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&((size - LOG_OVERHEAD) as i32).to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0; 4]); // CRC, written last
        out.extend_from_slice(&self.attributes().to_be_bytes());
        out.extend_from_slice(&(self.count - 1).max(0).to_be_bytes());
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(records);
        rewrite_crc(&mut out[start..]);
    }
}

/// Re-encodes a stored record for a rebuilt batch (the log cleaner's): its attributes, its own
/// offset delta, key, value and headers as they were, and its timestamp as a delta to
/// `base_timestamp`, the rebuilt batch's baseTimestamp.
pub(crate) fn reencode_record(record: &super::record::Record<'_>, base_timestamp: i64, out: &mut Vec<u8>) {
    let timestamp_delta = record.timestamp.wrapping_sub(base_timestamp);
    let headers = record.header_bytes();
    let body_len = 1
        + varlong_size(timestamp_delta)
        + varint_size(record.offset_delta)
        + nullable_size(record.key)
        + nullable_size(record.value)
        + varint_size(record.header_count() as i32)
        + headers.len();
    encode_varint(body_len as i32, out);
    out.push(record.attributes as u8);
    encode_varlong(timestamp_delta, out);
    encode_varint(record.offset_delta, out);
    put_nullable(record.key, out);
    put_nullable(record.value, out);
    encode_varint(record.header_count() as i32, out);
    out.extend_from_slice(headers);
}

/// The header of a batch the log cleaner writes in place of `original`: everything the
/// original says (baseOffset, lastOffsetDelta, producer, partition leader epoch, flags)
/// except the codec-independent parts given here. `records` is the (compressed, if the
/// attributes say so) records stream, `count` its records. The CRC is computed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_cleaned_batch(
    original: &super::batch::RecordBatch<'_>,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: i32,
    records: &[u8],
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let size = HEADER_SIZE + records.len();
    out.reserve(size);
    out.extend_from_slice(&original.base_offset().to_be_bytes());
    out.extend_from_slice(&((size - LOG_OVERHEAD) as i32).to_be_bytes());
    out.extend_from_slice(&original.partition_leader_epoch().to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id().to_be_bytes());
    out.extend_from_slice(&original.producer_epoch().to_be_bytes());
    out.extend_from_slice(&original.base_sequence().to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(records);
    rewrite_crc(&mut out[start..]);
}

fn nullable_size(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => 1,
        Some(b) => varint_size(b.len() as i32) + b.len(),
    }
}

fn put_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        None => encode_varint(-1, out),
        Some(b) => {
            encode_varint(b.len() as i32, out);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::batch::RecordBatch;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn builder_reproduces_tv1_byte_for_byte() {
        let mut b = BatchBuilder::new();
        b.append(283_843, Some(b"key1"), Some(b"value1"), &[]);
        b.append(1_234, Some(b"key2"), Some(b"value2"), &[]);
        let bytes = b.build().unwrap();
        let expected = unhex(
            "0000000000000000 00000055 ffffffff 02 e58cf1ff 0000 00000001
             00000000000454c3 00000000000454c3 ffffffffffffffff ffff ffffffff 00000002
             20 00 00 00 08 6b657931 0c 76616c756531 00
             24 00 e1bf22 02 08 6b657932 0c 76616c756532 00",
        );
        assert_eq!(bytes, expected);
        assert_eq!(RecordBatch::parse(&bytes).unwrap().crc(), 0xE58C_F1FF);
    }

    #[test]
    fn builder_reproduces_tv6_byte_for_byte() {
        let mut b = BatchBuilder::new()
            .producer(1000, 0, 41)
            .partition_leader_epoch(2);
        b.append(
            1_700_000_000_000,
            Some(b"k"),
            Some(b"v"),
            &[Header {
                key: b"h",
                value: Some(b"x"),
            }],
        );
        b.append(1_700_000_000_005, None, Some(b"vv"), &[]);
        let bytes = b.build().unwrap();
        assert_eq!(bytes.len(), 83);
        assert_eq!(
            bytes,
            unhex("0000000000000000000000470000000202cd2375b40000000000010000018bcfe568000000018bcfe5680500000000000003e80000000000290000000218000000026b0276020268027810000a020104767600")
        );
    }

    #[test]
    fn max_timestamp_is_the_largest_record_timestamp() {
        let mut b = BatchBuilder::new();
        b.append(50, None, None, &[])
            .append(90, None, None, &[])
            .append(70, None, None, &[]);
        let bytes = b.build().unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!((batch.base_timestamp(), batch.max_timestamp()), (50, 90));
        assert_eq!((batch.last_offset_delta(), batch.records_count()), (2, 3));
    }

    // Needs every codec (a `--no-default-features` build has none).
    #[cfg(all(feature = "gzip", feature = "snappy", feature = "lz4", feature = "zstd"))]
    #[test]
    fn flags_land_in_the_attributes() {
        let bytes = BatchBuilder::new()
            .transactional(true)
            .control(true)
            .timestamp_type(TimestampType::LogAppendTime)
            .compression(Compression::Lz4)
            .delete_horizon(7)
            .build()
            .unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(batch.attributes(), 0x03 | 0x08 | 0x10 | 0x20 | 0x40);
        assert_eq!(batch.base_timestamp(), 7);
        assert!(batch.is_crc_valid());
    }

    #[test]
    fn cleared_builder_builds_the_same_batch_again() {
        let mut b = BatchBuilder::new();
        b.append(1, Some(b"a"), None, &[]);
        let first = b.build().unwrap();
        b.clear();
        b.append(1, Some(b"a"), None, &[]);
        let mut again = vec![0xee];
        b.build_into(&mut again).unwrap();
        assert_eq!(&again[1..], &first[..]);
    }
}
