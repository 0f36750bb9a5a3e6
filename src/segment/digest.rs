//! What the checkpoint records of a sealed segment beyond its offsets and size, so that bytes
//! no checksum of Kafka's covers can be checked (docs/format.md "Checkpoint", docs/design.md
//! "What the checkpoint vouches for").
//!
//! - **Header digest**: a batch's CRC covers bytes 21.. of it, not its `baseOffset`,
//!   `batchLength`, `partitionLeaderEpoch`, `magic` or the CRC field itself (the log rewrites
//!   the first and third in place). In a dense segment a changed `baseOffset` breaks the
//!   offsets' order, but in a compacted one (gaps are legal) a batch moved into the gap before
//!   it still looks valid. The digest chains CRC-32C over the first 21 bytes of every batch,
//!   in order: with each batch's own CRC it covers every byte of the segment, yet it reads
//!   21 bytes a batch. It is computed when a segment becomes durable (off the append path),
//!   and checked by `verify` and deep recovery.
//! - **`.txnindex` length and CRC-32C**: Kafka's aborted-transaction index has no checksum,
//!   and a missing or altered one changes what read_committed returns. Its files are small,
//!   so every open checks them against the record.

use crate::format::HEADER_SIZE;

use super::txn_index::AbortedTxn;

/// Bytes of a batch's header the digest covers: baseOffset, batchLength,
/// partitionLeaderEpoch, magic and crc (docs/format.md "RecordBatch v2 header").
pub const DIGEST_HEADER_BYTES: usize = 21;

/// What the checkpoint records of a sealed segment's bytes (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SealDigest {
    /// The chained CRC-32C of the first 21 bytes of each of its batches.
    pub headers: u32,
    /// The length of its `.txnindex` (0 without the file).
    pub txn_len: u64,
    /// The CRC-32C of its `.txnindex` (0 without the file).
    pub txn_crc: u32,
}

impl SealDigest {
    /// The digest of a segment whose batches have `headers` as their header digest, with
    /// these aborted transactions in its `.txnindex`.
    pub fn new(headers: u32, txn: &[AbortedTxn]) -> SealDigest {
        let (txn_len, txn_crc) = txn_digest(txn);
        SealDigest {
            headers,
            txn_len,
            txn_crc,
        }
    }
}

/// Adds one batch's header to a running header digest (start from 0).
pub fn chain_header(digest: u32, batch: &[u8]) -> u32 {
    let end = batch.len().min(DIGEST_HEADER_BYTES);
    crc32c::crc32c_append(digest, &batch[..end])
}

/// The header digest of `data`, a segment's batches back to back, following each batch's
/// `batchLength`; `None` if they do not frame `data` exactly (the digest of damaged bytes
/// would vouch for nothing).
pub fn header_digest(data: &[u8]) -> Option<u32> {
    let mut digest = 0;
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        if rest.len() < HEADER_SIZE {
            return None;
        }
        let length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let size = usize::try_from(length).ok()?.checked_add(12)?;
        if size < HEADER_SIZE || size > rest.len() {
            return None;
        }
        digest = chain_header(digest, rest);
        at += size;
    }
    Some(digest)
}

/// The header digest of the batches of `data` that start at `positions` (in order).
pub fn header_digest_at(data: &[u8], positions: impl IntoIterator<Item = usize>) -> u32 {
    positions.into_iter().fold(0, |d, at| {
        chain_header(d, data.get(at..).unwrap_or(&[]))
    })
}

/// The length and CRC-32C of a `.txnindex` holding `entries` ((0, 0) for none: no file).
pub fn txn_digest(entries: &[AbortedTxn]) -> (u64, u32) {
    let crc = entries
        .iter()
        .fold(0, |crc, e| crc32c::crc32c_append(crc, &e.encode()));
    ((entries.len() * super::txn_index::ENTRY_SIZE) as u64, crc)
}

/// The length and CRC-32C of a `.txnindex` file's bytes.
pub fn txn_file_digest(bytes: &[u8]) -> (u64, u32) {
    (bytes.len() as u64, crc32c::crc32c(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::BatchBuilder;

    fn batches(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let mut b = BatchBuilder::new();
            b.append(i as i64, Some(b"k"), Some(b"v"), &[]);
            out.extend(b.build().unwrap());
        }
        out
    }

    #[test]
    fn a_file_digest_and_an_entry_digest_agree() {
        let e = AbortedTxn {
            producer_id: 7,
            first_offset: 1000,
            last_offset: 1010,
            last_stable_offset: 1011,
        };
        let bytes: Vec<u8> = [e, e].iter().flat_map(|e| e.encode()).collect();
        assert_eq!(txn_digest(&[e, e]), txn_file_digest(&bytes));
        assert_eq!(txn_digest(&[]), txn_file_digest(&[]));
    }

    #[test]
    fn every_header_bit_outside_the_batch_crc_changes_the_digest() {
        let data = batches(3);
        let good = header_digest(&data).unwrap();
        let second = crate::format::RecordBatch::parse(&data).unwrap().size();
        assert_eq!(header_digest_at(&data, [0, second, 2 * second]), good);
        for at in [0, second] {
            for byte in 0..DIGEST_HEADER_BYTES {
                for bit in 0..8 {
                    let mut d = data.clone();
                    d[at + byte] ^= 1 << bit;
                    // A changed length may stop framing: no digest at all, also not `good`.
                    assert_ne!(header_digest(&d), Some(good), "byte {byte} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn bytes_that_do_not_frame_have_no_digest() {
        let data = batches(2);
        assert_eq!(header_digest(&data[..data.len() - 1]), None);
        assert_eq!(header_digest(&[0u8; 61]), None);
        assert_eq!(header_digest(&[]), Some(0));
    }
}
