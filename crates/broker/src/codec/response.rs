//! Encoding a response frame, with fetched records passed through without a copy.
//!
//! kafka-protocol encodes a `records: Option<Bytes>` field by writing its length and then
//! `put_slice` of its bytes, which into a `BytesMut` would copy every fetched batch. The
//! encoder here writes into a [`ChainWriter`] instead: it is told beforehand which `Bytes` are
//! to be passed through (the ones `Log::read` returned, over the segment's map), recognises
//! them when `put_slice` is handed exactly their memory, and splices the `Bytes` itself into the
//! chain of buffers that is written to the socket with one vectored write.

use std::collections::HashMap;
use std::io::{self, IoSlice};

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A response could not be encoded: a field set that its version does not have. A bug of this
/// broker, reported instead of sending bytes the client cannot parse.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the v{version} response: {reason}")]
pub struct EncodeError {
    pub version: i16,
    pub reason: String,
}

/// An encoded response: its bytes as a chain of buffers, size prefix first.
#[derive(Debug, Clone, Default)]
pub struct ResponseFrame {
    pieces: Vec<Bytes>,
}

impl ResponseFrame {
    /// Total bytes on the wire, size prefix included.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffers in order; those passed through are the caller's own `Bytes`.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// All bytes in one buffer (tests).
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }
}

/// Encodes `body` at `version` with its response header. Every non-empty `Bytes` in
/// `pass_through` that the body holds is spliced into the frame instead of copied.
pub fn encode<R: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &R,
    pass_through: &[Bytes],
) -> Result<ResponseFrame, EncodeError> {
    let fail = |e: anyhow::Error| EncodeError {
        version,
        reason: e.to_string(),
    };
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = R::header_version(version);
    let size = header.compute_size(header_version).map_err(fail)?
        + body.compute_size(version).map_err(fail)?;
    let size = i32::try_from(size).map_err(|_| EncodeError {
        version,
        reason: format!("{size} bytes do not fit a frame"),
    })?;
    let mut writer = ChainWriter::new(pass_through);
    writer.put_i32(size);
    header.encode(&mut writer, header_version).map_err(fail)?;
    body.encode(&mut writer, version).map_err(fail)?;
    Ok(writer.finish())
}

/// Writes `frame` to `stream`, with vectored writes.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    stream: &mut W,
    frame: ResponseFrame,
) -> io::Result<()> {
    let mut pieces = frame.pieces;
    pieces.retain(|p| !p.is_empty());
    let mut first = 0;
    while first < pieces.len() {
        let written = {
            let slices: Vec<IoSlice<'_>> = pieces[first..]
                .iter()
                .take(64)
                .map(|p| IoSlice::new(p))
                .collect();
            stream.write_vectored(&slices).await?
        };
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut left = written;
        while left > 0 {
            let piece = &mut pieces[first];
            if left >= piece.len() {
                left -= piece.len();
                first += 1;
            } else {
                piece.advance(left);
                left = 0;
            }
        }
    }
    Ok(())
}

/// A `BufMut` that appends into a head buffer and splices known `Bytes` in whole.
struct ChainWriter {
    /// Pass-through candidates, by address and length.
    shared: HashMap<(usize, usize), Bytes>,
    pieces: Vec<Bytes>,
    head: BytesMut,
    /// Bytes in `pieces` (the head's offset in the whole frame).
    sealed: usize,
}

impl ChainWriter {
    fn new(pass_through: &[Bytes]) -> ChainWriter {
        ChainWriter {
            shared: pass_through
                .iter()
                .filter(|b| !b.is_empty())
                .map(|b| ((b.as_ptr() as usize, b.len()), b.clone()))
                .collect(),
            pieces: Vec::new(),
            head: BytesMut::with_capacity(1024),
            sealed: 0,
        }
    }

    fn finish(mut self) -> ResponseFrame {
        if !self.head.is_empty() {
            self.pieces.push(self.head.freeze());
        }
        ResponseFrame {
            pieces: self.pieces,
        }
    }
}

// SAFETY: every method delegates to the `BytesMut` head, which upholds `BufMut`'s contract
// (`chunk_mut` is the head's spare capacity, `advance_mut` moves over bytes the caller
// initialised in it). `put_slice` never hands out memory: it either copies into the head or
// moves a whole `Bytes` into the chain. Defended by the tests below, which compare every frame
// with kafka-protocol's own encoding into a plain `BytesMut`.
#[allow(unsafe_code)]
unsafe impl BufMut for ChainWriter {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller guarantees that `cnt` bytes of the chunk returned by `chunk_mut`,
        // which is the head's, were initialised; that is `BytesMut::advance_mut`'s contract.
        unsafe { self.head.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.head.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if let Some(bytes) = self.shared.get(&(src.as_ptr() as usize, src.len())) {
            // `src` is exactly the memory of this `Bytes`, so the bytes are the same.
            let bytes = bytes.clone();
            if !self.head.is_empty() {
                self.sealed += self.head.len();
                self.pieces.push(self.head.split().freeze());
            }
            self.sealed += bytes.len();
            self.pieces.push(bytes);
        } else {
            self.head.extend_from_slice(src);
        }
    }
}

// kafka-protocol uses offsets, seeks and ranges only for gaps, which record-batch encoding
// needs and message encoding never does; they are served from the head, where the bytes still
// are writable.
impl ByteBufMut for ChainWriter {
    fn offset(&self) -> usize {
        self.sealed + self.head.len()
    }

    fn seek(&mut self, offset: usize) {
        let at = offset
            .checked_sub(self.sealed)
            .expect("seek into a sealed piece");
        self.head.resize(at, 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        let start = r
            .start
            .checked_sub(self.sealed)
            .expect("range in a sealed piece");
        &mut self.head[start..r.end - self.sealed]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, TopicName};

    fn fetch_response(records: &[Bytes]) -> FetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_high_watermark(10)
                    .with_records(Some(r.clone()))
            })
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName::from(
                kafka_protocol::protocol::StrBytes::from_static_str("t"),
            ))
            .with_partitions(partitions)])
    }

    fn plain(correlation_id: i32, version: i16, body: &FetchResponse) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let header = ResponseHeader::default().with_correlation_id(correlation_id);
        header
            .encode(&mut buf, FetchResponse::header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        let mut out = (buf.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&buf);
        out
    }

    #[test]
    fn fetched_records_are_spliced_not_copied_and_the_bytes_are_kafkas() {
        let records = vec![
            Bytes::from(vec![7u8; 5000]),
            Bytes::new(),
            Bytes::from(vec![9u8; 300]),
        ];
        for version in [4, 11, 12, 16] {
            let body = fetch_response(&records);
            let frame = encode(5, version, &body, &records).unwrap();
            assert_eq!(frame.to_vec(), plain(5, version, &body), "v{version}");
            for r in records.iter().filter(|r| !r.is_empty()) {
                assert!(
                    frame.pieces().iter().any(|p| p.as_ptr() == r.as_ptr()),
                    "v{version}: the records went out as the log's own Bytes"
                );
            }
        }
    }

    #[test]
    fn without_pass_through_everything_is_one_buffer() {
        let records = vec![Bytes::from_static(b"abc")];
        let body = fetch_response(&records);
        let frame = encode(1, 12, &body, &[]).unwrap();
        assert_eq!(frame.pieces().len(), 1);
        assert_eq!(frame.to_vec(), plain(1, 12, &body));
    }

    #[tokio::test]
    async fn a_chain_is_written_whole() {
        let records = vec![Bytes::from(vec![1u8; 100_000]), Bytes::from(vec![2u8; 10])];
        let body = fetch_response(&records);
        let frame = encode(3, 12, &body, &records).unwrap();
        let expected = frame.to_vec();
        let (mut a, mut b) = tokio::io::duplex(4096);
        let writer = tokio::spawn(async move { write_frame(&mut a, frame).await });
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got)
            .await
            .unwrap();
        writer.await.unwrap().unwrap();
        assert_eq!(got, expected);
    }
}
