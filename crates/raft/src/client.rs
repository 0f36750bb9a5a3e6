//! The client protocol of a replica process (`oncelog-raft-node`): produce a batch, read what
//! is committed, ask for the replica's status. Frames as between replicas
//! ([`crate::network::tcp::write_frame`]): a 4-byte big-endian length, then bincode.
//!
//! One request at a time per connection, answered in order; a client that wants several
//! requests in flight opens several connections.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::network::tcp::{read_frame, write_frame, MAX_FRAME};
use crate::{Ack, GroupId, Host, NodeId, Replica, ReplicaError};

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Append one Kafka batch (v2, as a producer sends it) through the leader; answered once
    /// it is committed.
    Produce(Bytes),
    /// Committed batches from the one holding `offset`, up to `max_bytes` (at least one whole
    /// batch; at most half of [`MAX_FRAME`]): [`oncelog::Log::fetch`], bounded by the high
    /// watermark.
    Read {
        /// Where to read from.
        offset: i64,
        /// How much at most.
        max_bytes: u32,
    },
    /// The replica's view of the partition.
    Status,
    /// `request` for partition `partition` of `topic`, to a node that hosts many
    /// ([`crate::Host`]); answered [`ClientReply::UnknownPartition`] by a node that does not
    /// host it. A request without it goes to the node's only partition.
    To {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// What is asked of it (not another `To`).
        request: Box<ClientRequest>,
    },
}

/// What a replica answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientReply {
    /// The batch was committed at these offsets, or was a retry of a committed batch (nothing
    /// written; the original's offsets).
    Acked(Ack),
    /// This replica is not the leader; the leader, if it knows it.
    NotLeader {
        /// The leader's id.
        leader: Option<NodeId>,
    },
    /// The leader's log refused the batch; nothing was written.
    Refused {
        /// [`oncelog::AppendError::kind`].
        kind: String,
        /// Its message.
        message: String,
    },
    /// The request failed, and for a produce its outcome is unknown: a retry of the same
    /// batch is answered as a duplicate if it was written.
    Error(String),
    /// Committed batches.
    Batches {
        /// Whole batches, the one holding the offset asked for first; empty at the high
        /// watermark.
        bytes: Bytes,
        /// Where the next read starts.
        next_offset: i64,
        /// The high watermark when the read was served.
        high_watermark: i64,
        /// The log's first offset.
        log_start_offset: i64,
    },
    /// The replica's status.
    Status(Status),
    /// This node does not host the partition the request named (or, for a request that names
    /// none, hosts many).
    UnknownPartition {
        /// The topic asked for (empty if none was named).
        topic: String,
        /// The partition asked for (-1 if none was named).
        partition: i32,
    },
}

/// A replica's view of its partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Its id.
    pub id: NodeId,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// Its current raft term.
    pub term: u64,
    /// The raft index it has applied.
    pub applied_index: Option<u64>,
    /// The high watermark: the end of what it knows committed.
    pub high_watermark: i64,
    /// The end of its log (committed or not).
    pub log_end_offset: i64,
    /// The first offset of its log.
    pub log_start_offset: i64,
    /// Whether its log had been closed cleanly when this process opened it (false after a
    /// crash: a SIGKILL, a power cut).
    pub opened_clean: bool,
}

impl From<Result<Ack, ReplicaError>> for ClientReply {
    fn from(r: Result<Ack, ReplicaError>) -> ClientReply {
        match r {
            Ok(ack) => ClientReply::Acked(ack),
            Err(ReplicaError::NotLeader { leader }) => ClientReply::NotLeader { leader },
            Err(ReplicaError::Refused { kind, message }) => ClientReply::Refused { kind, message },
            Err(e) => ClientReply::Error(e.to_string()),
        }
    }
}

/// What serves client requests: one replica, or a [`Host`] of many partitions.
pub trait Serves: Send + Sync + 'static {
    /// The answer to `request`.
    fn answer(&self, request: ClientRequest) -> impl Future<Output = ClientReply> + Send;
}

impl Serves for Replica {
    async fn answer(&self, request: ClientRequest) -> ClientReply {
        handle(self, request).await
    }
}

impl Serves for Host {
    async fn answer(&self, request: ClientRequest) -> ClientReply {
        let (group, request) = match request {
            ClientRequest::To {
                topic,
                partition,
                request,
            } => (GroupId::new(topic, partition), *request),
            request if self.replicas().len() == 1 => {
                let only = self.replicas().keys().next().cloned();
                match only {
                    Some(group) => (group, request),
                    None => return ClientReply::Error("no partition hosted".into()),
                }
            }
            _ => {
                return ClientReply::UnknownPartition {
                    topic: String::new(),
                    partition: -1,
                }
            }
        };
        match self.route(&group) {
            Ok((replica, member)) => handle_in(&replica, member, request).await,
            Err(_) => ClientReply::UnknownPartition {
                topic: group.topic,
                partition: group.partition,
            },
        }
    }
}

/// Answers one request on `replica`.
pub async fn handle(replica: &Replica, request: ClientRequest) -> ClientReply {
    handle_in(replica, 0, request).await
}

/// Answers one request for partition `member` of `replica`'s set (0 for a partition of its
/// own).
pub async fn handle_in(replica: &Replica, member: usize, request: ClientRequest) -> ClientReply {
    let Some(log) = replica.log_of(member) else {
        return ClientReply::Error(format!(
            "partition {member} of a set of {}",
            replica.members()
        ));
    };
    match request {
        ClientRequest::To { .. } => {
            ClientReply::Error("a request for a partition to a node of one replica".into())
        }
        ClientRequest::Produce(batch) => replica.append_to(member, batch).await.into(),
        // At most half a frame, so the answer always fits in one.
        ClientRequest::Read { offset, max_bytes } => {
            match log.fetch(offset, max_bytes.min(MAX_FRAME / 2) as usize) {
                Ok(f) => ClientReply::Batches {
                    bytes: f.bytes,
                    next_offset: f.next_offset,
                    high_watermark: f.high_watermark,
                    log_start_offset: f.log_start_offset,
                },
                Err(e) => ClientReply::Error(format!("read at offset {offset}: {e}")),
            }
        }
        ClientRequest::Status => ClientReply::Status(status_of(replica, log)),
    }
}

/// `replica`'s status now.
pub fn status(replica: &Replica) -> Status {
    status_of(replica, replica.log())
}

/// `replica`'s status now, with the offsets of `log` (the partition of its set asked about).
fn status_of(replica: &Replica, log: &oncelog::Log) -> Status {
    let m = replica.raft().metrics().borrow().clone();
    Status {
        id: replica.id(),
        leader: m.current_leader,
        term: m.current_term,
        applied_index: m.last_applied.map(|l| l.index),
        high_watermark: log.high_watermark(),
        log_end_offset: log.log_end_offset(),
        log_start_offset: log.log_start_offset(),
        opened_clean: log.recovery_report().clean_shutdown,
    }
}

/// Serves client requests arriving on `listener` to `replica` (a [`Replica`] or a [`Host`]),
/// each connection in a task of its own, until the returned task is aborted.
pub fn serve<S: Serves>(listener: TcpListener, replica: Arc<S>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("client listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let replica = Arc::clone(&replica);
            tokio::spawn(async move {
                if let Err(e) = serve_connection(stream, replica.as_ref()).await {
                    tracing::debug!("client connection from {peer}: {e}");
                }
            });
        }
    })
}

async fn serve_connection<S: Serves>(stream: TcpStream, replica: &S) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let (mut r, mut w) = (BufReader::new(r), BufWriter::new(w));
    while let Some(request) = read_frame::<_, ClientRequest>(&mut r).await? {
        let reply = replica.answer(request).await;
        write_frame(&mut w, &reply).await?;
    }
    Ok(())
}

/// A connection to a replica's client port.
pub struct Client {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: BufWriter<tokio::net::tcp::OwnedWriteHalf>,
}

impl Client {
    /// Connects to `addr`.
    pub async fn connect(addr: &str) -> io::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        Ok(Client {
            r: BufReader::new(r),
            w: BufWriter::new(w),
        })
    }

    /// Sends `request` and reads its answer. After an error (or a call abandoned midway) the
    /// connection is in an unknown state: drop it and connect again.
    pub async fn call(&mut self, request: &ClientRequest) -> io::Result<ClientReply> {
        write_frame(&mut self.w, request).await?;
        read_frame(&mut self.r).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the replica closed the connection",
            )
        })
    }
}
