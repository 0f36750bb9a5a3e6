//! One client connection: requests are read and handled in order, and their responses are
//! written in the same order, while slow ones (a flush, a long poll) wait in a queue.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use crate::api::{self, Reply};
use crate::broker::Broker;
use crate::codec::{self, FrameLimits, FrameReader, Request};
use crate::stats::Stats;

/// Responses queued behind a slow one before the connection stops reading: Kafka clients keep
/// at most 5 requests in flight by default, so this only bounds a misbehaving client.
const MAX_QUEUED_REPLIES: usize = 64;

/// How often a connection's reader has caught up with its client: handled every request the
/// client had sent, so that its next read (or its wait for the request budget) must wait. An
/// acks=all produce waits for the
/// reader to catch up before it flushes, so that when a client sends several requests at once
/// (up to five in flight), one fsync covers the batches of all of them instead of the first.
#[derive(Debug, Clone)]
pub struct CaughtUp(watch::Receiver<u64>);

impl CaughtUp {
    /// The count now; [`CaughtUp::past`] waits until it moves on.
    pub fn now(&self) -> u64 {
        *self.0.borrow()
    }

    /// Waits until the reader caught up after `mark`, or stopped reading.
    pub async fn past(&mut self, mark: u64) {
        let _ = self.0.wait_for(|count| *count > mark).await;
    }
}

/// Serves `stream` until the client leaves, sends something unparseable, stays idle or sends
/// a request too slowly (`limits`), or the broker shuts down (then requests already read are
/// still answered).
pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    limits: FrameLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    Stats::add(&broker.stats.connections);
    // Responses are written whole; waiting for more to coalesce would only add latency.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(client = %peer, error = %e, "cannot set TCP_NODELAY");
    }
    let (mut read_half, mut write_half) = stream.into_split();
    let (replies, mut queued) = mpsc::channel::<Reply>(MAX_QUEUED_REPLIES);
    let writer = tokio::spawn(async move {
        while let Some(reply) = queued.recv().await {
            let frame = match reply {
                Reply::Now(frame) => frame,
                Reply::Later(task) => match task.await {
                    Ok(Ok(frame)) => frame,
                    Ok(Err(e)) => {
                        tracing::error!(client = %peer, error = %e, "response not encodable; closing the connection");
                        return;
                    }
                    Err(e) => {
                        tracing::error!(client = %peer, error = %e, "request task failed; closing the connection");
                        return;
                    }
                },
                Reply::Nothing => continue,
                Reply::Close(reason) => {
                    tracing::info!(client = %peer, reason, "closing the connection");
                    return;
                }
            };
            if let Err(e) = codec::write_frame(&mut write_half, frame).await {
                tracing::debug!(client = %peer, error = %e, "client went away");
                return;
            }
        }
    });

    let mut frames = FrameReader::new(limits, Arc::clone(&broker.request_memory));
    let (caught_up_now, caught_up) = watch::channel(0u64);
    let caught_up = CaughtUp(caught_up);
    loop {
        if *shutdown.borrow() {
            break;
        }
        let frame = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            // Caught up: nothing the client sent is left unread.
            frame = frames.next(&mut read_half, || caught_up_now.send_modify(|count| *count += 1)) => frame,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) if e.is_timeout() => {
                Stats::add(&broker.stats.connections_timed_out);
                tracing::info!(client = %peer, reason = %e, "closing the connection");
                break;
            }
            Err(e) => {
                refuse(&broker, peer, &e);
                break;
            }
        };
        // The frame's share of the request budget is given back once its request is handled.
        let _frame_memory = frame.memory;
        let mut request = match Request::parse(frame.bytes) {
            Ok(request) => request,
            Err(e) => {
                refuse(&broker, peer, &e);
                break;
            }
        };
        request.client_host = Some(format!("/{}", peer.ip()));
        tracing::trace!(client = %peer, api = ?request.api_key, version = request.version, correlation_id = request.correlation_id, "request");
        let reply = match api::handle(&broker, request, &caught_up).await {
            Ok(reply) => reply,
            Err(e) => {
                refuse(&broker, peer, &e);
                break;
            }
        };
        let close = matches!(reply, Reply::Close(_));
        match replies.try_send(reply) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(reply)) => {
                // The queue waits on replies that may wait for this reader to catch up: it
                // reads nothing more until there is room, so it has caught up.
                caught_up_now.send_modify(|count| *count += 1);
                if replies.send(reply).await.is_err() {
                    break;
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => break,
        }
        if close {
            break;
        }
    }
    // The writer answers what was queued, then the connection closes.
    drop(replies);
    let _ = writer.await;
}

/// A request this broker cannot answer: the connection is closed, and nothing of the request
/// was applied (it is refused before any handler runs, or by the handler's decoding).
fn refuse(broker: &Broker, peer: SocketAddr, error: &dyn std::error::Error) {
    Stats::add(&broker.stats.malformed_requests);
    tracing::warn!(client = %peer, error = %error, "malformed or unsupported request; closing the connection");
}
