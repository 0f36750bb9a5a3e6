//! Kafka's framing: every request and response is a big-endian int32 size, then that many
//! bytes.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why no frame could be read. Each one ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 0..={max}")]
    BadSize { size: i64, max: usize },
    #[error("connection closed inside a frame ({have} of {need} bytes)")]
    Truncated { have: usize, need: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads size-prefixed frames off a byte stream into one reusable buffer. Each frame comes out
/// as `Bytes`, so a produce request's records can be handed to the log without a copy.
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    max_frame: usize,
}

impl FrameReader {
    pub fn new(max_frame: usize) -> FrameReader {
        FrameReader {
            buf: BytesMut::with_capacity(64 << 10),
            max_frame,
        }
    }

    /// The next whole frame (without its size), or `None` at a clean end of stream.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
    ) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(frame) = self.split_frame()? {
                return Ok(Some(frame));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(64 << 10);
            }
            if stream.read_buf(&mut self.buf).await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(FrameError::Truncated {
                    have: self.buf.len(),
                    need: self.needed().unwrap_or(4),
                });
            }
        }
    }

    /// Whether a whole frame is already buffered (the next [`FrameReader::next`] will not
    /// wait for the stream).
    pub fn has_whole_frame(&self) -> bool {
        self.needed().is_some_and(|needed| self.buf.len() >= needed)
    }

    /// Bytes the frame at the front needs in all (size included), once its size is known.
    fn needed(&self) -> Option<usize> {
        let size: [u8; 4] = self.buf.get(..4)?.try_into().ok()?;
        Some(4 + i32::from_be_bytes(size).max(0) as usize)
    }

    fn split_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        let Some(size) = self.buf.get(..4) else {
            return Ok(None);
        };
        let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
        if size < 0 || size as usize > self.max_frame {
            return Err(FrameError::BadSize {
                size: size.into(),
                max: self.max_frame,
            });
        }
        let size = size as usize;
        if self.buf.len() < 4 + size {
            // Make room for the whole frame at once rather than growing step by step.
            self.buf.reserve(4 + size - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(4);
        Ok(Some(self.buf.split_to(size).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            out.extend_from_slice(&(p.len() as i32).to_be_bytes());
            out.extend_from_slice(p);
        }
        out
    }

    #[tokio::test]
    async fn frames_come_out_whole_and_in_order() {
        let bytes = framed(&[b"one", b"", b"three"]);
        let mut stream = &bytes[..];
        let mut reader = FrameReader::new(1 << 20);
        assert_eq!(reader.next(&mut stream).await.unwrap().unwrap(), "one");
        assert_eq!(reader.next(&mut stream).await.unwrap().unwrap(), "");
        assert_eq!(reader.next(&mut stream).await.unwrap().unwrap(), "three");
        assert!(reader.next(&mut stream).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_negative_or_oversized_frame_is_refused() {
        for size in [-1i32, 1025] {
            let bytes = size.to_be_bytes();
            let mut stream = &bytes[..];
            let mut reader = FrameReader::new(1024);
            assert!(matches!(
                reader.next(&mut stream).await,
                Err(FrameError::BadSize { .. })
            ));
        }
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_frame_is_truncated() {
        let mut bytes = framed(&[b"whole frame"]);
        bytes.truncate(8);
        let mut stream = &bytes[..];
        let mut reader = FrameReader::new(1024);
        assert!(matches!(
            reader.next(&mut stream).await,
            Err(FrameError::Truncated { have: 8, need: 15 })
        ));
    }
}
