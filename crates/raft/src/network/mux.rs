//! One TCP connection per peer node, shared by every raft group of a process
//! ([`crate::Host`]; docs/design.md, "Many partitions per process").
//!
//! Every frame carries a call id and its group. Each connection has a writer task that takes
//! every frame queued at the time, by any group, and writes them with one flush (so the
//! heartbeats of many groups leave in one write), and a reader task that hands each answer to
//! the call waiting for its id. The serving side dispatches each call to its group's `Raft`
//! in a task of its own and answers through a writer of the same kind. Frames as in
//! [`super::tcp`]: a 4-byte big-endian length, then bincode.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{RPCError, Unreachable};
use openraft::network::RaftNetworkFactory;
use openraft::raft::VoteResponse;
use openraft::{LogId, Vote};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::tcp::{encode_frame, read_frame, RaftRpc, RaftRpcReply};
use crate::{GroupId, Node, NodeId, Raft, TypeConfig};

/// How long a connect may take before the peer counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A raft RPC of one group, as it travels.
#[derive(Debug, Serialize, Deserialize)]
pub struct Call {
    /// Matches the answer to the call.
    pub id: u64,
    /// The group whose `Raft` takes it.
    pub group: GroupId,
    /// The RPC.
    pub rpc: MuxRpc,
}

/// What a call asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum MuxRpc {
    /// A raft RPC for the group's `Raft`.
    Raft(RaftRpc),
    /// The node's durable raft state of the group, hosted or not ([`GroupState`]): what a
    /// rejoining member hears from every other (docs/design.md, "A wiped node rejoins under
    /// its id").
    State,
}

/// A node's durable raft state of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupState {
    /// The saved vote.
    pub vote: Option<Vote<NodeId>>,
    /// The last log id (purged entries included).
    pub last_log_id: Option<LogId<NodeId>>,
    /// The partition log's end offset.
    pub log_end_offset: i64,
}

impl GroupState {
    /// The state of a replica that never held anything: no vote, no entry.
    pub const EMPTY: GroupState = GroupState {
        vote: None,
        last_log_id: None,
        log_end_offset: 0,
    };

    /// Whether the replica took part in the group beyond forming it: a vote in a term above
    /// 0 (every election is), or an entry after the membership entry `(0, 0)` that forming
    /// writes. A replica that only formed the group saw no election and no commit, so a
    /// member that lost its data has nothing to learn from it.
    pub fn holds_state(&self) -> bool {
        self.vote.is_some_and(|v| v.leader_id().term > 0)
            || self
                .last_log_id
                .is_some_and(|l| l.leader_id.term > 0 || l.index > 0)
    }
}

/// How a node reads its state of a group: `Err` with the reason while it cannot say (the
/// group's partition holds state but its raft is not open yet).
pub type StateReader = Arc<dyn Fn(&GroupId) -> Result<GroupState, String> + Send + Sync>;

/// The answer to a [`Call`].
#[derive(Debug, Serialize, Deserialize)]
pub struct CallAnswer {
    /// The call's id.
    pub id: u64,
    /// What its group answered.
    pub reply: MuxReply,
}

/// What a node answers a call.
#[derive(Debug, Serialize, Deserialize)]
pub enum MuxReply {
    /// The group's `Raft` answered (its error included).
    Rpc(RaftRpcReply),
    /// The node does not host this group (it was never created there, or it is shutting
    /// down).
    NotHosted(GroupId),
    /// The answer to [`MuxRpc::State`].
    State(Result<GroupState, String>),
}

/// A group as a peer's replica of it sees it: the answer to a [`RaftRpc::Leaders`] query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLeader {
    /// The group.
    pub group: GroupId,
    /// The leader the peer's replica knows of.
    pub leader: Option<NodeId>,
    /// The term the peer's replica is in.
    pub term: u64,
    /// When the peer leads the group and has applied every entry it holds: its last entry's
    /// index. A leader's log holds every committed entry, so everything committed when it
    /// answered is at or below it; `None` otherwise (ask again).
    pub settled: Option<u64>,
}

/// Frames and writes of one side of the connections, to see that frames are coalesced.
#[derive(Debug, Default)]
pub struct WriteCounts {
    frames: AtomicU64,
    writes: AtomicU64,
}

impl WriteCounts {
    /// Frames sent, and the flushed writes that carried them.
    pub fn get(&self) -> (u64, u64) {
        (
            self.frames.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }
}

/// Writes what `frames` brings: every frame waiting at the time, then one flush.
async fn write_coalesced(
    mut w: BufWriter<OwnedWriteHalf>,
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
    counts: Arc<WriteCounts>,
) -> io::Result<()> {
    while let Some(frame) = frames.recv().await {
        w.write_all(&frame).await?;
        let mut n = 1;
        while let Ok(frame) = frames.try_recv() {
            w.write_all(&frame).await?;
            n += 1;
        }
        w.flush().await?;
        counts.frames.fetch_add(n, Ordering::Relaxed);
        counts.writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<MuxReply>>>>;

/// One live connection to a peer node.
struct Conn {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Waiters,
    dead: Arc<AtomicBool>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Conn {
    async fn open(addr: &str, counts: Arc<WriteCounts>) -> io::Result<Conn> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let (frames, queued) = mpsc::unbounded_channel();
        let waiting: Waiters = Arc::default();
        let dead = Arc::new(AtomicBool::new(false));
        let die = {
            let (waiting, dead) = (Arc::clone(&waiting), Arc::clone(&dead));
            move || {
                dead.store(true, Ordering::SeqCst);
                // Every call waiting on this connection fails (its sender is dropped).
                waiting.lock().clear();
            }
        };
        let writer = {
            let die = die.clone();
            tokio::spawn(async move {
                let _ = write_coalesced(BufWriter::new(w), queued, counts).await;
                die();
            })
        };
        let reader = {
            let waiting = Arc::clone(&waiting);
            tokio::spawn(async move {
                let mut r = BufReader::new(r);
                while let Ok(Some(answer)) = read_frame::<_, CallAnswer>(&mut r).await {
                    // An abandoned call's answer finds no one: dropped.
                    if let Some(to) = waiting.lock().remove(&answer.id) {
                        let _ = to.send(answer.reply);
                    }
                }
                die();
            })
        };
        Ok(Conn {
            frames,
            waiting,
            dead,
            tasks: [writer, reader],
        })
    }
}

/// One peer node: its address and the connection to it (made on the first call, made again
/// after it failed).
struct Link {
    addr: String,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

struct MuxInner {
    backoff: Duration,
    links: Mutex<HashMap<NodeId, Arc<Link>>>,
    /// Peers dialed elsewhere than at their membership's address ([`Mux::dial_through`]).
    dial: Mutex<HashMap<NodeId, String>>,
    next_id: AtomicU64,
    counts: Arc<WriteCounts>,
}

/// A process's connections to its peer nodes, shared by all its groups: [`Mux::group`] is
/// the network factory each group's `Raft` gets.
#[derive(Clone)]
pub struct Mux(Arc<MuxInner>);

impl Mux {
    /// Connections that wait `backoff` between attempts to reach an unreachable peer.
    pub fn new(backoff: Duration) -> Mux {
        Mux(Arc::new(MuxInner {
            backoff,
            links: Mutex::new(HashMap::new()),
            dial: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            counts: Arc::default(),
        }))
    }

    /// The network factory of `group`.
    pub fn group(&self, group: GroupId) -> GroupNetwork {
        GroupNetwork {
            mux: self.clone(),
            group,
        }
    }

    /// The frames this side sent and the writes that carried them.
    pub fn counts(&self) -> (u64, u64) {
        self.0.counts.get()
    }

    /// Dials `target` at `addr` from now on, whatever address its groups' memberships hold
    /// (which stay as they are, the same on every node): a test puts a proxy there to cut
    /// the link.
    pub fn dial_through(&self, target: NodeId, addr: String) {
        self.0.dial.lock().insert(target, addr);
    }

    fn link(&self, target: NodeId, addr: &str) -> Arc<Link> {
        let dial = self.0.dial.lock().get(&target).cloned();
        let addr = dial.as_deref().unwrap_or(addr);
        let mut links = self.0.links.lock();
        let link = links.entry(target).or_insert_with(|| {
            Arc::new(Link {
                addr: addr.to_string(),
                conn: tokio::sync::Mutex::new(None),
            })
        });
        if link.addr != addr {
            // The peer moved: a new link to its new address.
            *link = Arc::new(Link {
                addr: addr.to_string(),
                conn: tokio::sync::Mutex::new(None),
            });
        }
        Arc::clone(link)
    }

    /// Asks node `target` at `addr` for its durable state of `group` ([`MuxRpc::State`]).
    pub async fn state_of(
        &self,
        target: NodeId,
        addr: &str,
        group: &GroupId,
    ) -> Result<GroupState, String> {
        let link = self.link(target, addr);
        match self.call(&link, group, MuxRpc::State).await {
            Ok(MuxReply::State(answer)) => answer,
            Ok(_) => Err(format!("node {target} at {addr} answered another call")),
            Err(e) => Err(format!("node {target} at {addr}: {e}")),
        }
    }

    async fn call(&self, link: &Link, group: &GroupId, rpc: MuxRpc) -> io::Result<MuxReply> {
        let conn = {
            let mut slot = link.conn.lock().await;
            match slot.as_ref() {
                Some(c) if !c.dead.load(Ordering::SeqCst) => Arc::clone(c),
                _ => {
                    *slot = None;
                    let c = Arc::new(Conn::open(&link.addr, Arc::clone(&self.0.counts)).await?);
                    *slot = Some(Arc::clone(&c));
                    c
                }
            }
        };
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_frame(&Call {
            id,
            group: group.clone(),
            rpc,
        })?;
        let (to, answered) = oneshot::channel();
        conn.waiting.lock().insert(id, to);
        // Forgets the call if it is abandoned (openraft's timeout drops this future).
        let _forget = Forget(&conn.waiting, id);
        let lost = || io::Error::new(io::ErrorKind::ConnectionReset, "the connection was lost");
        if conn.dead.load(Ordering::SeqCst) || conn.frames.send(frame).is_err() {
            return Err(lost());
        }
        answered.await.map_err(|_| lost())
    }
}

impl Mux {
    /// Asks node `target` at `addr` who leads each of `groups` as its replicas see them
    /// ([`RaftRpc::Leaders`]), over the connection the groups' raft calls share. The answer
    /// leaves out the groups the node does not host.
    pub async fn leaders(
        &self,
        target: NodeId,
        addr: &str,
        groups: Vec<GroupId>,
    ) -> io::Result<Vec<GroupLeader>> {
        let link = self.link(target, addr);
        // The call is no group's: the serving side answers it before it looks a group up.
        let none = GroupId::new(String::new(), -1);
        match self
            .call(&link, &none, MuxRpc::Raft(RaftRpc::Leaders(groups)))
            .await?
        {
            MuxReply::Rpc(RaftRpcReply::Leaders(leaders)) => Ok(leaders),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the peer answered another RPC to a leaders query",
            )),
        }
    }
}

struct Forget<'a>(&'a Waiters, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

/// The network factory of one group: connections to its members through the [`Mux`].
#[derive(Clone)]
pub struct GroupNetwork {
    mux: Mux,
    group: GroupId,
}

impl RaftNetworkFactory<TypeConfig> for GroupNetwork {
    type Network = GroupConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> GroupConnection {
        GroupConnection {
            link: self.mux.link(target, &node.addr),
            mux: self.mux.clone(),
            group: self.group.clone(),
            target,
        }
    }
}

/// One group's way to one peer node, over the connection to that node all groups share.
pub struct GroupConnection {
    mux: Mux,
    link: Arc<Link>,
    group: GroupId,
    target: NodeId,
}

impl GroupConnection {
    async fn call(&self, rpc: RaftRpc) -> io::Result<RaftRpcReply> {
        match self
            .mux
            .call(&self.link, &self.group, MuxRpc::Raft(rpc))
            .await?
        {
            MuxReply::Rpc(reply) => Ok(reply),
            MuxReply::NotHosted(group) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("the node does not host group {group}"),
            )),
            MuxReply::State(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the peer answered another call",
            )),
        }
    }

    fn unreachable<E: std::error::Error>(
        &self,
        what: &str,
        e: io::Error,
    ) -> RPCError<NodeId, Node, E> {
        RPCError::Unreachable(Unreachable::new(&io::Error::new(
            e.kind(),
            format!(
                "{what} of group {} to node {} at {}: {e}",
                self.group, self.target, self.link.addr
            ),
        )))
    }

    fn mismatch<E: std::error::Error>(&self, what: &str) -> RPCError<NodeId, Node, E> {
        self.unreachable(
            what,
            io::Error::new(io::ErrorKind::InvalidData, "the peer answered another RPC"),
        )
    }
}

raft_network_over_call!(GroupConnection, |c| c.mux.0.backoff);

/// The groups a node hosts, by id: where the serving side dispatches calls.
#[derive(Default)]
pub struct Groups {
    rafts: RwLock<HashMap<GroupId, Raft>>,
    /// Groups whose replica rejoined after losing its data: a vote request whose candidate's
    /// last log id is below the floor is not granted (docs/design.md, "A wiped node rejoins
    /// under its id").
    floors: RwLock<HashMap<GroupId, LogId<NodeId>>>,
    /// Answers [`MuxRpc::State`]; without one every group is [`GroupState::EMPTY`] unless hosted.
    states: RwLock<Option<StateReader>>,
    counts: Arc<WriteCounts>,
}

impl Groups {
    /// Calls for `group` go to `raft` from now on.
    pub fn add(&self, group: GroupId, raft: Raft) {
        self.rafts.write().insert(group, raft);
    }

    /// Calls for `group` are answered [`MuxReply::NotHosted`] from now on, and its floor
    /// is forgotten.
    pub fn remove(&self, group: &GroupId) {
        self.rafts.write().remove(group);
        self.floors.write().remove(group);
    }

    /// From now on a vote request of `group` whose candidate's last log id is below `floor`
    /// is answered not granted, before its `Raft` sees it.
    pub fn set_floor(&self, group: GroupId, floor: LogId<NodeId>) {
        self.floors.write().insert(group, floor);
    }

    /// [`MuxRpc::State`] calls are answered by `reader` from now on.
    pub fn set_state_reader(&self, reader: StateReader) {
        *self.states.write() = Some(reader);
    }

    fn state(&self, group: &GroupId) -> Result<GroupState, String> {
        let reader = self.states.read().clone();
        match reader {
            Some(reader) => reader(group),
            None => Err("this node answers no state calls".into()),
        }
    }

    /// The frames the serving side sent and the writes that carried them.
    pub fn counts(&self) -> (u64, u64) {
        self.counts.get()
    }

    /// Each of `asked` hosted here, as its replica sees it now (raft's metrics).
    pub fn leaders(&self, asked: &[GroupId]) -> Vec<GroupLeader> {
        let rafts = self.rafts.read();
        asked
            .iter()
            .filter_map(|group| {
                let m = rafts.get(group)?.metrics();
                let m = m.borrow();
                let leads = m.current_leader == Some(m.id);
                let applied = m.last_applied.map(|l| l.index);
                Some(GroupLeader {
                    group: group.clone(),
                    leader: m.current_leader,
                    term: m.current_term,
                    settled: applied.filter(|a| leads && Some(*a) == m.last_log_index),
                })
            })
            .collect()
    }
}

/// Serves the calls arriving on `listener` to the groups of `groups`, each connection in a
/// task of its own, until the returned task is aborted. A connection that sends a malformed
/// frame is closed.
pub fn serve(listener: TcpListener, groups: Arc<Groups>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("raft listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let groups = Arc::clone(&groups);
            // The connections stop with the listener (aborting this task drops the set).
            connections.spawn(async move {
                if let Err(e) = serve_connection(stream, groups).await {
                    tracing::debug!("raft connection from {peer}: {e}");
                }
            });
            while connections.try_join_next().is_some() {}
        }
    })
}

async fn serve_connection(stream: TcpStream, groups: Arc<Groups>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut r = BufReader::new(r);
    let (frames, queued) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_coalesced(
        BufWriter::new(w),
        queued,
        Arc::clone(&groups.counts),
    ));
    let mut calls = tokio::task::JoinSet::new();
    let result = loop {
        let call = match read_frame::<_, Call>(&mut r).await {
            Ok(Some(call)) => call,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let frames = frames.clone();
        if let MuxRpc::Raft(RaftRpc::Leaders(asked)) = &call.rpc {
            let reply = MuxReply::Rpc(RaftRpcReply::Leaders(groups.leaders(asked)));
            match encode_frame(&CallAnswer { id: call.id, reply }) {
                Ok(frame) => {
                    let _ = frames.send(frame);
                }
                Err(e) => tracing::warn!("raft answer to call {}: {e}", call.id),
            }
            continue;
        }
        let raft = groups.rafts.read().get(&call.group).cloned();
        let floor = groups.floors.read().get(&call.group).copied();
        let groups = Arc::clone(&groups);
        calls.spawn(async move {
            let reply = match (raft, call.rpc) {
                (_, MuxRpc::State) => MuxReply::State(groups.state(&call.group)),
                (None, MuxRpc::Raft(_)) => MuxReply::NotHosted(call.group),
                (Some(raft), MuxRpc::Raft(rpc)) => MuxReply::Rpc(match rpc {
                    RaftRpc::AppendEntries(req) => {
                        RaftRpcReply::AppendEntries(raft.append_entries(req).await)
                    }
                    RaftRpc::Vote(req) => match floor {
                        Some(floor) if req.last_log_id < Some(floor) => {
                            RaftRpcReply::Vote(Ok(below_floor(&raft, floor)))
                        }
                        _ => RaftRpcReply::Vote(raft.vote(req).await),
                    },
                    RaftRpc::InstallSnapshot(req) => {
                        RaftRpcReply::InstallSnapshot(raft.install_snapshot(req).await)
                    }
                    // Answered above, before the group's lookup: never here.
                    RaftRpc::Leaders(_) => RaftRpcReply::Leaders(Vec::new()),
                }),
            };
            match encode_frame(&CallAnswer { id: call.id, reply }) {
                Ok(frame) => {
                    let _ = frames.send(frame);
                }
                Err(e) => tracing::warn!("raft answer to call {}: {e}", call.id),
            }
        });
        while calls.try_join_next().is_some() {}
    };
    calls.abort_all();
    writer.abort();
    result
}

/// The answer to a vote request whose candidate's log is behind a rejoined replica's floor:
/// not granted, with the replica's vote and the floor as the greater log seen (which makes
/// the candidate wait before it stands again).
fn below_floor(raft: &Raft, floor: LogId<NodeId>) -> VoteResponse<NodeId> {
    let vote = raft.metrics().borrow().vote;
    VoteResponse::new(vote, Some(floor), false)
}

#[cfg(test)]
mod tests {
    use openraft::{LogId, Vote};

    use super::*;
    use openraft::network::{RPCOption, RaftNetwork};
    use openraft::raft::{VoteRequest, VoteResponse};

    fn vote_request() -> VoteRequest<NodeId> {
        VoteRequest::new(
            Vote::new(3, 1),
            Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 7)),
        )
    }

    fn option() -> RPCOption {
        RPCOption::new(Duration::from_secs(1))
    }

    /// A call for a group the node does not host is answered as such, and the peer is
    /// unreachable for that group with the reason; a closed port is unreachable too.
    #[tokio::test]
    async fn a_group_not_hosted_and_a_closed_port_are_typed_answers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = serve(listener, Arc::new(Groups::default()));
        let mux = Mux::new(Duration::from_millis(10));
        let mut c = mux
            .group(GroupId::new("t", 4))
            .new_client(2, &Node::new(addr))
            .await;
        match c.vote(vote_request(), option()).await {
            Err(RPCError::Unreachable(u)) => {
                let s = u.to_string();
                assert!(s.contains("does not host group t-4"), "{s}");
                assert!(s.contains("node 2"), "{s}");
            }
            other => panic!("{other:?}"),
        }
        server.abort();

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = mux
            .group(GroupId::new("t", 0))
            .new_client(3, &Node::new(format!("127.0.0.1:{port}")))
            .await;
        match c.vote(vote_request(), option()).await {
            Err(RPCError::Unreachable(u)) => assert!(u.to_string().contains("node 3"), "{u}"),
            other => panic!("{other:?}"),
        }
    }

    /// A frame that is not a call closes the connection: the peer reads its end.
    #[tokio::test]
    async fn a_malformed_frame_closes_the_connection() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = serve(listener, Arc::new(Groups::default()));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&4u32.to_be_bytes()).await.unwrap();
        s.write_all(&[0xff; 4]).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the server closes the connection")
            .unwrap_or(0);
        assert_eq!(n, 0, "no answer to a malformed frame");
        server.abort();
    }

    /// Answers are matched by id, not by order: a slow answer of one call does not become
    /// another's, and calls of many groups share one connection.
    #[tokio::test]
    async fn answers_are_matched_by_id_over_one_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicU64::new(0));
        let server = {
            let accepted = Arc::clone(&accepted);
            tokio::spawn(async move {
                loop {
                    let (s, _) = listener.accept().await.unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let (r, w) = s.into_split();
                        let mut r = BufReader::new(r);
                        let (frames, queued) = mpsc::unbounded_channel();
                        tokio::spawn(write_coalesced(BufWriter::new(w), queued, Arc::default()));
                        while let Ok(Some(call)) = read_frame::<_, Call>(&mut r).await {
                            let frames = frames.clone();
                            tokio::spawn(async move {
                                // Group 0 answers late; each answer names its group in the term.
                                if call.group.partition == 0 {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                                let term = call.group.partition as u64 + 10;
                                let answer = VoteResponse::new(Vote::new(term, 1), None, true);
                                let frame = encode_frame(&CallAnswer {
                                    id: call.id,
                                    reply: MuxReply::Rpc(RaftRpcReply::Vote(Ok(answer))),
                                })
                                .unwrap();
                                let _ = frames.send(frame);
                            });
                        }
                    });
                }
            })
        };
        let mux = Mux::new(Duration::from_millis(10));
        let mut calls = Vec::new();
        for p in 0..8 {
            let mut c = mux
                .group(GroupId::new("t", p))
                .new_client(2, &Node::new(addr.clone()))
                .await;
            calls.push(tokio::spawn(async move {
                c.vote(vote_request(), option()).await.unwrap().vote
            }));
        }
        for (p, call) in calls.into_iter().enumerate() {
            assert_eq!(call.await.unwrap(), Vote::new(p as u64 + 10, 1));
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for all groups"
        );
        let (frames, writes) = mux.counts();
        assert_eq!(frames, 8);
        assert!(writes <= frames);
        server.abort();
    }
}
