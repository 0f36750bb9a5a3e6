//! Zero-copy view over one Kafka RecordBatch v2 (docs/format.md, "RecordBatch v2 header").
//!
//! | off | size | field                 | notes                                        |
//! |----:|-----:|-----------------------|----------------------------------------------|
//! |   0 |    8 | baseOffset            | rewritten by the broker on append            |
//! |   8 |    4 | batchLength           | bytes after this field; size = 12 + length   |
//! |  12 |    4 | partitionLeaderEpoch  | stamped by the leader; not covered by CRC    |
//! |  16 |    1 | magic                 | 2                                            |
//! |  17 |    4 | crc                   | CRC-32C of [21, end)                         |
//! |  21 |    2 | attributes            | flags in the low byte                        |
//! |  23 |    4 | lastOffsetDelta       |                                              |
//! |  27 |    8 | baseTimestamp         |                                              |
//! |  35 |    8 | maxTimestamp          |                                              |
//! |  43 |    8 | producerId            | -1 = none                                    |
//! |  51 |    2 | producerEpoch         |                                              |
//! |  53 |    4 | baseSequence          |                                              |
//! |  57 |    4 | recordsCount          |                                              |
//! |  61 |    … | records               | raw or one compressed stream                 |

use super::error::{BatchError, BatchErrorAt};

/// Size of the fixed header (`RECORD_BATCH_OVERHEAD`).
pub const HEADER_SIZE: usize = 61;
/// baseOffset + batchLength, shared by every magic (`LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// Bytes a reader needs before it knows the magic.
pub const MAGIC_PREFIX: usize = 17;
/// Smallest batchLength of any magic: a v0 message (crc, magic, attributes, key and value
/// lengths), Kafka's `LegacyRecord.RECORD_OVERHEAD_V0`.
const LEGACY_MIN_LENGTH: i32 = 14;
/// The only magic this crate stores.
pub const MAGIC_V2: i8 = 2;

pub(crate) const OFF_BASE_OFFSET: usize = 0;
pub(crate) const OFF_BATCH_LENGTH: usize = 8;
pub(crate) const OFF_PARTITION_LEADER_EPOCH: usize = 12;
pub(crate) const OFF_MAGIC: usize = 16;
pub(crate) const OFF_CRC: usize = 17;
pub(crate) const OFF_ATTRIBUTES: usize = 21;
pub(crate) const OFF_LAST_OFFSET_DELTA: usize = 23;
pub(crate) const OFF_BASE_TIMESTAMP: usize = 27;
pub(crate) const OFF_MAX_TIMESTAMP: usize = 35;
pub(crate) const OFF_PRODUCER_ID: usize = 43;
pub(crate) const OFF_PRODUCER_EPOCH: usize = 51;
pub(crate) const OFF_BASE_SEQUENCE: usize = 53;
pub(crate) const OFF_RECORDS_COUNT: usize = 57;

/// Attribute bits (low byte of the int16 attributes, docs/format.md, attributes).
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Compression codec of a batch (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Records stored as they are (id 0).
    None,
    /// gzip (id 1).
    Gzip,
    /// Snappy, raw or in the xerial framing Kafka's Java client writes (id 2).
    Snappy,
    /// LZ4 frames (id 3).
    Lz4,
    /// Zstandard (id 4).
    Zstd,
}

impl Compression {
    /// The codec for attribute bits 0-2, or `None` for the unassigned values 5-7.
    pub fn from_id(id: u8) -> Option<Compression> {
        Some(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }

    /// The codec's id in attribute bits 0-2.
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Kafka's name for the codec (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// How a batch's timestamps are to be read (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// The producer's timestamps (bit clear).
    CreateTime,
    /// The broker's append time, stored in maxTimestamp, stands for every record's (bit set).
    LogAppendTime,
}

impl TimestampType {
    /// Kafka's name for the type (`message.timestamp.type`).
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

#[inline]
pub(crate) fn be_i16(b: &[u8], off: usize) -> i16 {
    i16::from_be_bytes([b[off], b[off + 1]])
}
#[inline]
pub(crate) fn be_i32(b: &[u8], off: usize) -> i32 {
    i32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub(crate) fn be_u32(b: &[u8], off: usize) -> u32 {
    be_i32(b, off) as u32
}
#[inline]
pub(crate) fn be_i64(b: &[u8], off: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    i64::from_be_bytes(a)
}

/// What the first bytes of a buffer say about the batch that starts there, before any
/// checksum is looked at. Used by scanners (recovery, dump, reads) to step from batch to batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFrame {
    /// A whole batch is in the buffer.
    Complete {
        /// The batch's size in bytes, 12 + batchLength.
        size: usize,
    },
    /// The buffer ends before the batch does: a torn tail if this is the end of a file.
    Incomplete {
        /// Bytes needed: the batch's size, or enough of its header to read the size and magic.
        needed: usize,
        /// Bytes in the buffer.
        available: usize,
    },
}

/// Reads the frame of the batch at the start of `buf`: the declared size and magic.
///
/// Errors are the bytes that can never start a valid v2 batch: a declared size below the
/// 61-byte header (a zero-filled tail lands here), or a magic other than 2 (reported as such
/// whenever the declared size could hold a legacy v0/v1 message).
pub fn frame(buf: &[u8]) -> Result<BatchFrame, BatchError> {
    if buf.len() < MAGIC_PREFIX {
        return Ok(BatchFrame::Incomplete {
            needed: MAGIC_PREFIX,
            available: buf.len(),
        });
    }
    let batch_length = be_i32(buf, OFF_BATCH_LENGTH);
    // Kafka's order (ByteBufferLogInputStream): below the smallest legacy message no magic can
    // be trusted (a zero-filled tail lands here); otherwise the magic decides the format, so a
    // v0/v1 message is reported as such rather than as a short v2 batch.
    if batch_length < LEGACY_MIN_LENGTH {
        return Err(BatchError::SizeTooSmall { batch_length });
    }
    let magic = buf[OFF_MAGIC] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic { magic });
    }
    if batch_length < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
        return Err(BatchError::SizeTooSmall { batch_length });
    }
    let size = LOG_OVERHEAD + batch_length as usize;
    if buf.len() < size {
        return Ok(BatchFrame::Incomplete {
            needed: size,
            available: buf.len(),
        });
    }
    Ok(BatchFrame::Complete { size })
}

/// A zero-copy view of exactly one v2 batch. Constructing it checks only the frame (declared
/// size ≥ 61, magic 2, the whole batch present); checksum and contents are checked by
/// [`RecordBatch::verify_crc`], by iterating its records, and by the log's validation on append.
#[derive(Clone, Copy)]
pub struct RecordBatch<'a> {
    bytes: &'a [u8],
}

impl<'a> RecordBatch<'a> {
    /// The batch at the start of `buf` (which may hold more bytes after it).
    pub fn parse(buf: &'a [u8]) -> Result<RecordBatch<'a>, BatchError> {
        match frame(buf)? {
            BatchFrame::Complete { size } => Ok(RecordBatch {
                bytes: &buf[..size],
            }),
            BatchFrame::Incomplete { needed, available } => {
                Err(BatchError::Truncated { needed, available })
            }
        }
    }

    /// Exactly the batch's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Total size in bytes, 12 + batchLength.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
    /// The offset of the first record.
    pub fn base_offset(&self) -> i64 {
        be_i64(self.bytes, OFF_BASE_OFFSET)
    }
    /// The batchLength field: the bytes after it, [12, end).
    pub fn batch_length(&self) -> i32 {
        be_i32(self.bytes, OFF_BATCH_LENGTH)
    }
    /// The leader epoch of the partition when the batch was appended.
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(self.bytes, OFF_PARTITION_LEADER_EPOCH)
    }
    /// The format version, 2 for every batch a [`RecordBatch`] views.
    pub fn magic(&self) -> i8 {
        self.bytes[OFF_MAGIC] as i8
    }
    /// The stored CRC-32C.
    pub fn crc(&self) -> u32 {
        be_u32(self.bytes, OFF_CRC)
    }
    /// The CRC-32C of bytes [21, end), what [`Self::crc`] should be.
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[OFF_ATTRIBUTES..])
    }
    /// Whether the stored CRC matches the bytes.
    pub fn is_crc_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }
    /// Checks the stored CRC against the bytes.
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored == computed {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch { stored, computed })
        }
    }
    /// The attributes field: codec, timestamp type, transactional, control, delete horizon.
    pub fn attributes(&self) -> i16 {
        be_i16(self.bytes, OFF_ATTRIBUTES)
    }
    /// The codec, or `None` for an unassigned codec id (5-7).
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_id((self.attributes() & ATTR_COMPRESSION_MASK) as u8)
    }
    /// How the records' timestamps are to be read (attributes bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Whether the batch is part of a transaction (attributes bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }
    /// Whether the batch holds a control record, such as a transaction marker (attributes bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }
    /// Whether baseTimestamp holds a compacted topic's delete horizon (attributes bit 6).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & ATTR_DELETE_HORIZON != 0
    }
    /// The last record's offset minus [`Self::base_offset`].
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(self.bytes, OFF_LAST_OFFSET_DELTA)
    }
    /// The timestamp the records' deltas count from: the first record's, or the delete horizon
    /// ([`Self::has_delete_horizon`]).
    pub fn base_timestamp(&self) -> i64 {
        be_i64(self.bytes, OFF_BASE_TIMESTAMP)
    }
    /// The largest timestamp of the records (the append time under `LogAppendTime`).
    pub fn max_timestamp(&self) -> i64 {
        be_i64(self.bytes, OFF_MAX_TIMESTAMP)
    }
    /// The producer id, -1 for a producer that is not idempotent.
    pub fn producer_id(&self) -> i64 {
        be_i64(self.bytes, OFF_PRODUCER_ID)
    }
    /// The producer's epoch, -1 without a producer id.
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.bytes, OFF_PRODUCER_EPOCH)
    }
    /// The first record's sequence number, -1 without a producer id.
    pub fn base_sequence(&self) -> i32 {
        be_i32(self.bytes, OFF_BASE_SEQUENCE)
    }
    /// The number of records the header declares.
    pub fn records_count(&self) -> i32 {
        be_i32(self.bytes, OFF_RECORDS_COUNT)
    }
    /// baseOffset + lastOffsetDelta.
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .wrapping_add(self.last_offset_delta() as i64)
    }
    /// The sequence of the last record (wrapping at i32::MAX, docs/format.md, "Sequence numbers"),
    /// or -1 without one.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base < 0 {
            return -1;
        }
        crate::format::sequence::add(base, self.last_offset_delta())
    }
    /// Whether the batch belongs to an idempotent or transactional producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() >= 0
    }
    /// The bytes after the 61-byte header: raw records, or one compressed stream.
    pub fn records_data(&self) -> &'a [u8] {
        &self.bytes[HEADER_SIZE..]
    }
}

impl std::fmt::Debug for RecordBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("size", &self.size())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("producer_id", &self.producer_id())
            .field("producer_epoch", &self.producer_epoch())
            .field("base_sequence", &self.base_sequence())
            .field("records_count", &self.records_count())
            .finish()
    }
}

/// Iterates over the whole batches at the start of a buffer, stopping at the first frame that is
/// incomplete or invalid (the iterator then yields that error once and ends).
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> BatchIter<'a> {
    /// Iterates over the batches at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        BatchIter {
            buf,
            pos: 0,
            done: false,
        }
    }
    /// Byte position of the next batch.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// (position, batch), or the frame error with the position of the bad batch.
    type Item = Result<(usize, RecordBatch<'a>), BatchErrorAt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        match RecordBatch::parse(&self.buf[self.pos..]) {
            Ok(b) => {
                let at = self.pos;
                self.pos += b.size();
                Some(Ok((at, b)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(BatchErrorAt {
                    position: self.pos,
                    error: e,
                }))
            }
        }
    }
}

/// Overwrites baseOffset in a batch's bytes. The CRC does not cover it (docs/format.md,
/// "RecordBatch v2 header").
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[OFF_BASE_OFFSET..OFF_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Overwrites partitionLeaderEpoch. The CRC does not cover it (docs/format.md, "RecordBatch v2
/// header").
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[OFF_PARTITION_LEADER_EPOCH..OFF_PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// Sets maxTimestamp and the timestamp-type bit to LogAppendTime, then recomputes the CRC
/// (both are covered by it). Kafka's in-place path for `LogAppendTime` topics (docs/design.md,
/// "Append").
pub fn stamp_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attrs = be_i16(batch, OFF_ATTRIBUTES) | ATTR_TIMESTAMP_TYPE;
    batch[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
    batch[OFF_MAX_TIMESTAMP..OFF_MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    rewrite_crc(batch);
}

/// Sets maxTimestamp (CreateTime) and recomputes the CRC.
pub fn set_max_timestamp(batch: &mut [u8], max_timestamp: i64) {
    batch[OFF_MAX_TIMESTAMP..OFF_MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    rewrite_crc(batch);
}

/// Recomputes and stores the CRC of a batch whose covered bytes changed.
pub fn rewrite_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[OFF_ATTRIBUTES..]);
    batch[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(batch_length: i32, magic: u8) -> Vec<u8> {
        let mut buf = vec![0u8; 80];
        buf[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
        buf[OFF_MAGIC] = magic;
        buf
    }

    #[test]
    fn zero_filled_tail_is_too_small() {
        assert_eq!(
            frame(&[0u8; 64]),
            Err(BatchError::SizeTooSmall { batch_length: 0 })
        );
    }

    #[test]
    fn legacy_message_is_reported_by_its_magic_even_when_short() {
        // A v0/v1 message of 30 bytes is shorter than a v2 header but is not a torn v2 batch.
        for magic in [0, 1] {
            assert_eq!(
                frame(&header(30, magic)),
                Err(BatchError::UnsupportedMagic { magic: magic as i8 })
            );
        }
    }

    #[test]
    fn short_v2_batch_is_too_small() {
        assert_eq!(
            frame(&header(30, 2)),
            Err(BatchError::SizeTooSmall { batch_length: 30 })
        );
    }

    #[test]
    fn fewer_than_seventeen_bytes_are_incomplete() {
        assert_eq!(
            frame(&[0u8; 16]),
            Ok(BatchFrame::Incomplete {
                needed: 17,
                available: 16
            })
        );
    }

    #[test]
    fn batch_iter_stops_at_the_first_bad_frame() {
        let mut buf = header(49, 2);
        buf.truncate(61);
        buf.extend_from_slice(&header(60, 1)[..20]);
        let items: Vec<_> = BatchIter::new(&buf).collect();
        assert_eq!(items.len(), 2);
        assert!(matches!(items[0], Ok((0, _))));
        assert_eq!(
            items[1].as_ref().err(),
            Some(&BatchErrorAt {
                position: 61,
                error: BatchError::UnsupportedMagic { magic: 1 }
            })
        );
    }
}
