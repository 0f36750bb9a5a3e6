//! Kafka's framing: every request and response is a big-endian int32 size, then that many
//! bytes.
//!
//! What a connection may hold of requests not yet handled is bounded three ways, as Kafka
//! bounds it:
//! - a frame larger than `socket.request.max.bytes` ([`FrameLimits::max_frame`]) is refused;
//! - a frame's buffer grows with the bytes actually received, never to the announced size up
//!   front, so a client announcing 100 MiB and sending 10 bytes holds a few KiB;
//! - the frames all connections are receiving share one budget, `queued.max.request.bytes`
//!   ([`RequestMemory`]): a connection whose next frame does not fit waits, reading nothing
//!   more, until handled requests give their bytes back.
//!
//! And in time: a connection with no request under way is closed after
//! `connections.max.idle.ms`, and a request must arrive whole within the read deadline of its
//! first byte (time spent waiting for the budget is not counted against it).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What is read past a frame when nothing says how long the next one is: enough for the
/// small requests a client pipelines to arrive in one read. Also how much a frame's buffer
/// grows by at least.
const READ_AHEAD: usize = 4 << 10;

/// Why no frame could be read. Each one ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 0..={max}")]
    BadSize { size: i64, max: usize },
    #[error("connection closed inside a frame ({have} of {need} bytes)")]
    Truncated { have: usize, need: usize },
    #[error("no request for {0:?} (connections.max.idle.ms)")]
    Idle(Duration),
    #[error(
        "request not received whole within {limit:?} of its first byte ({have} of {need} bytes)"
    )]
    TooSlow {
        limit: Duration,
        have: usize,
        need: usize,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// Whether the connection ends for a limit of the broker's rather than for bytes it
    /// cannot parse.
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Idle(_) | FrameError::TooSlow { .. })
    }
}

/// The limits every connection's reader applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// The largest frame accepted (`socket.request.max.bytes`).
    pub max_frame: usize,
    /// A connection with no request under way is closed after this long.
    pub idle: Duration,
    /// A request must arrive whole within this long of its first byte.
    pub read_deadline: Duration,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_frame: 100 << 20,
            idle: Duration::from_secs(600),
            read_deadline: Duration::from_secs(30),
        }
    }
}

/// The budget of bytes all connections together may hold in requests received but not yet
/// handled (`queued.max.request.bytes`), and counters of the read buffers' memory.
#[derive(Debug)]
pub struct RequestMemory {
    budget: Arc<Semaphore>,
    limit: usize,
    /// Bytes the connections' read buffers hold now (their allocated capacity), and the most
    /// they held at once.
    buffered: AtomicU64,
    peak: AtomicU64,
}

impl RequestMemory {
    /// A budget of `limit` bytes; a frame larger than it is never admitted, so it must be at
    /// least the largest frame.
    pub fn new(limit: usize) -> Arc<RequestMemory> {
        let limit = limit.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        Arc::new(RequestMemory {
            budget: Arc::new(Semaphore::new(limit)),
            limit,
            buffered: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    /// Bytes the read buffers of every connection hold now.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed)
    }

    /// The most bytes the read buffers held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn grew(&self, by: usize) {
        let now = self.buffered.fetch_add(by as u64, Ordering::Relaxed) + by as u64;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn shrank(&self, by: usize) {
        self.buffered.fetch_sub(by as u64, Ordering::Relaxed);
    }
}

/// The memory a frame taken off a connection still holds: its share of the budget and of the
/// buffer counter, given back when this is dropped (once its request is handled).
#[derive(Debug)]
pub struct FrameMemory {
    memory: Arc<RequestMemory>,
    buffered: usize,
    _budget: Option<OwnedSemaphorePermit>,
}

impl Drop for FrameMemory {
    fn drop(&mut self) {
        self.memory.shrank(self.buffered);
    }
}

/// One request frame, without its size, and the memory it holds.
#[derive(Debug)]
pub struct Frame {
    pub bytes: Bytes,
    pub memory: FrameMemory,
}

/// Reads size-prefixed frames off a byte stream. A frame that fills its buffer exactly comes
/// out as `Bytes` over it, so a produce request's records reach the log without a copy.
#[derive(Debug)]
pub struct FrameReader {
    /// Bytes received and not yet returned: the frame at the front, and perhaps the start of
    /// the next ones.
    buf: Vec<u8>,
    limits: FrameLimits,
    memory: Arc<RequestMemory>,
    /// The budget granted to the frame at the front, once its size is known.
    budget: Option<OwnedSemaphorePermit>,
    /// When the request at the front must be whole (set at its first byte, and again once its
    /// budget is granted).
    deadline: Option<Instant>,
    /// When the connection last finished a request (or opened).
    idle_since: Instant,
}

impl FrameReader {
    pub fn new(limits: FrameLimits, memory: Arc<RequestMemory>) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            limits,
            memory,
            budget: None,
            deadline: None,
            idle_since: Instant::now(),
        }
    }

    /// The next whole frame, or `None` at a clean end of stream. `caught_up` is called each
    /// time the reader is about to wait: for the client (nothing it sent is left unread) or
    /// for the budget.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
        mut caught_up: impl FnMut(),
    ) -> Result<Option<Frame>, FrameError> {
        loop {
            let needed = self.needed()?;
            if let Some(needed) = needed {
                if self.budget.is_none() {
                    // Waiting for the budget pauses the read deadline: the delay is the
                    // broker's, not the client's.
                    let size = needed as u32 - 4;
                    let budget = Arc::clone(&self.memory.budget);
                    let permit = match Arc::clone(&budget).try_acquire_many_owned(size) {
                        Ok(permit) => permit,
                        Err(_) => {
                            caught_up();
                            budget
                                .acquire_many_owned(size)
                                .await
                                .expect("the request budget is never closed")
                        }
                    };
                    self.budget = Some(permit);
                    self.deadline = Some(Instant::now() + self.limits.read_deadline);
                }
                if self.buf.len() >= needed {
                    return Ok(Some(self.split_frame(needed)));
                }
            }
            self.make_room(needed);
            let limit = match self.deadline {
                Some(deadline) => deadline,
                None => self.idle_since + self.limits.idle,
            };
            let mut read = std::pin::pin!(stream.read_buf(&mut self.buf));
            // Whatever the client already sent is read at once; only a read that must wait
            // means the reader has caught up with it.
            let ready = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
            let read = match ready {
                Poll::Ready(n) => Ok(n),
                Poll::Pending => {
                    caught_up();
                    tokio::time::timeout_at(limit, read).await
                }
            };
            let n = match read {
                Ok(n) => n?,
                Err(_) if self.buf.is_empty() => return Err(FrameError::Idle(self.limits.idle)),
                Err(_) => {
                    return Err(FrameError::TooSlow {
                        limit: self.limits.read_deadline,
                        have: self.buf.len(),
                        need: needed.unwrap_or(4),
                    })
                }
            };
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(FrameError::Truncated {
                    have: self.buf.len(),
                    need: needed.unwrap_or(4),
                });
            }
            if self.deadline.is_none() {
                self.deadline = Some(Instant::now() + self.limits.read_deadline);
            }
        }
    }

    /// Bytes the frame at the front needs in all (size included), once its size is known.
    fn needed(&self) -> Result<Option<usize>, FrameError> {
        let Some(size) = self.buf.get(..4) else {
            return Ok(None);
        };
        let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
        if size < 0 || size as usize > self.limits.max_frame {
            return Err(FrameError::BadSize {
                size: size.into(),
                max: self.limits.max_frame,
            });
        }
        Ok(Some(4 + size as usize))
    }

    /// Grows the buffer for the next read: by what was received so far (doubling), at least
    /// [`READ_AHEAD`], never past the frame at the front once its size is known.
    fn make_room(&mut self, needed: Option<usize>) {
        let len = self.buf.len();
        let capacity = self.buf.capacity();
        let wanted = match needed {
            Some(needed) => needed.min((2 * len).max(len + READ_AHEAD)),
            None => len + READ_AHEAD,
        };
        if wanted > capacity {
            self.buf.reserve_exact(wanted - len);
            self.memory.grew(self.buf.capacity() - capacity);
        }
    }

    /// Takes the frame of `needed` bytes (size included) off the front.
    fn split_frame(&mut self, needed: usize) -> Frame {
        let (bytes, buffered) = if self.buf.len() == needed {
            // The buffer is the frame: hand it over whole.
            let buffered = self.buf.capacity();
            let bytes = Bytes::from(std::mem::take(&mut self.buf)).slice(4..);
            (bytes, buffered)
        } else {
            let bytes = Bytes::copy_from_slice(&self.buf[4..needed]);
            self.buf.drain(..needed);
            let capacity = self.buf.capacity();
            // What is left is the start of the next frames; keep it, in a buffer no larger
            // than it needs.
            self.buf.shrink_to(self.buf.len().max(READ_AHEAD));
            self.memory.shrank(capacity - self.buf.capacity());
            let len = bytes.len();
            self.memory.grew(len);
            (bytes, len)
        };
        self.idle_since = Instant::now();
        // Bytes of the next request already here start its deadline.
        self.deadline = (!self.buf.is_empty()).then(|| self.idle_since + self.limits.read_deadline);
        Frame {
            bytes,
            memory: FrameMemory {
                memory: Arc::clone(&self.memory),
                buffered,
                _budget: self.budget.take(),
            },
        }
    }
}

impl Drop for FrameReader {
    fn drop(&mut self) {
        self.memory.shrank(self.buf.capacity());
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

    fn reader(max_frame: usize) -> FrameReader {
        FrameReader::new(
            FrameLimits {
                max_frame,
                ..FrameLimits::default()
            },
            RequestMemory::new(1 << 30),
        )
    }

    #[tokio::test]
    async fn frames_come_out_whole_and_in_order() {
        let bytes = framed(&[b"one", b"", b"three"]);
        let mut stream = &bytes[..];
        let mut reader = reader(1 << 20);
        for want in ["one", "", "three"] {
            assert_eq!(
                reader
                    .next(&mut stream, || {})
                    .await
                    .unwrap()
                    .unwrap()
                    .bytes,
                want
            );
        }
        assert!(reader.next(&mut stream, || {}).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_large_frame_comes_out_whole_and_its_memory_is_given_back() {
        let big = vec![7u8; 300_000];
        let bytes = framed(&[&big, b"after"]);
        let mut stream = &bytes[..];
        let mut reader = reader(1 << 20);
        let memory = Arc::clone(&reader.memory);
        let frame = reader.next(&mut stream, || {}).await.unwrap().unwrap();
        assert_eq!(frame.bytes, big);
        assert!(memory.buffered() >= big.len() as u64);
        drop(frame);
        assert_eq!(
            reader
                .next(&mut stream, || {})
                .await
                .unwrap()
                .unwrap()
                .bytes,
            "after"
        );
        drop(reader);
        assert_eq!(memory.buffered(), 0, "every buffer byte is accounted back");
        assert!(memory.peak() < 2 * big.len() as u64, "{}", memory.peak());
    }

    #[tokio::test]
    async fn a_negative_or_oversized_frame_is_refused() {
        for size in [-1i32, 1025] {
            let bytes = size.to_be_bytes();
            let mut stream = &bytes[..];
            assert!(matches!(
                reader(1024).next(&mut stream, || {}).await,
                Err(FrameError::BadSize { .. })
            ));
        }
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_frame_is_truncated() {
        let mut bytes = framed(&[b"whole frame"]);
        bytes.truncate(8);
        let mut stream = &bytes[..];
        assert!(matches!(
            reader(1024).next(&mut stream, || {}).await,
            Err(FrameError::Truncated { have: 8, need: 15 })
        ));
    }

    #[tokio::test]
    async fn an_announced_size_reserves_nothing_until_bytes_arrive() {
        // 100 MiB announced, ten bytes sent, then the stream ends.
        let mut bytes = (100i32 << 20).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 10]);
        let mut stream = &bytes[..];
        let mut reader = reader(100 << 20);
        let memory = Arc::clone(&reader.memory);
        assert!(matches!(
            reader.next(&mut stream, || {}).await,
            Err(FrameError::Truncated { have: 14, .. })
        ));
        assert!(memory.peak() <= 2 * READ_AHEAD as u64, "{}", memory.peak());
    }
}
