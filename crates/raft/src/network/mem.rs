//! An in-process network between replicas, with faults driven by a seed: messages dropped,
//! delayed (and so reordered), links cut by a partition, healed. Each RPC is a call on the
//! target's `Raft` after the fault plan has decided its fate.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use parking_lot::Mutex;

use crate::{Node, NodeId, Raft, TypeConfig};

/// The seeded generator of the faults: the library's, which drives its simulated file system
/// too, so one seed replays a run's network and disk faults alike.
pub type Rng = oncelog::io::sim::SplitMix64;

/// The faults in force.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Requests (and, as often, responses) lost, per thousand.
    pub drop_per_mille: u64,
    /// Each message waits up to this long (uniformly), so later ones may overtake it.
    pub max_delay: Duration,
    /// Links cut, both ways.
    pub cut: HashSet<(NodeId, NodeId)>,
}

struct Inner {
    nodes: Mutex<HashMap<NodeId, Raft>>,
    faults: Mutex<Faults>,
    rng: Mutex<Rng>,
    sent: std::sync::atomic::AtomicU64,
    dropped: std::sync::atomic::AtomicU64,
}

/// The network: every replica's `Raft`, by id, and the faults between them.
#[derive(Clone)]
pub struct Router(Arc<Inner>);

impl Router {
    /// A network without faults whose later faults follow `seed`.
    pub fn new(seed: u64) -> Router {
        Router(Arc::new(Inner {
            nodes: Mutex::new(HashMap::new()),
            faults: Mutex::new(Faults::default()),
            rng: Mutex::new(Rng::new(seed)),
            sent: Default::default(),
            dropped: Default::default(),
        }))
    }

    /// The network handle replica `id` gives its `Raft`.
    pub fn endpoint(&self, id: NodeId) -> Endpoint {
        Endpoint {
            from: id,
            router: self.clone(),
        }
    }

    /// Makes `raft` reachable as `id` (after it started, or restarted).
    pub fn add(&self, id: NodeId, raft: Raft) {
        self.0.nodes.lock().insert(id, raft);
    }

    /// Opens a replica of partition `/sim/t-0` for each of `ids`, each on a simulated disk of
    /// its own, with `config`, and makes it reachable here: a group the caller initializes.
    /// They open 7 ms apart: on a paused clock, replicas started at the same instant tick
    /// together, and openraft 0.9 draws each one's election timeout once, so two with the
    /// same draw would split every vote forever (real replicas never start in the same
    /// microsecond).
    pub async fn open_replicas(
        &self,
        ids: &[NodeId],
        config: &crate::ReplicaConfig,
    ) -> Result<BTreeMap<NodeId, crate::Replica>, crate::ReplicaError> {
        let mut replicas = BTreeMap::new();
        for &id in ids {
            tokio::time::sleep(Duration::from_millis(7)).await;
            let env = oncelog::Environment::default()
                .with_fs(oncelog::io::SimFs::new().as_dyn())
                .with_clock(Arc::new(oncelog::SystemClock));
            let r = crate::Replica::open(id, "/sim/t-0", env, config.clone(), self.endpoint(id))
                .await?;
            self.add(id, r.raft().clone());
            replicas.insert(id, r);
        }
        Ok(replicas)
    }

    /// Makes `id` unreachable (it crashed or stopped).
    pub fn remove(&self, id: NodeId) {
        self.0.nodes.lock().remove(&id);
    }

    /// Replaces the faults.
    pub fn set_faults(&self, faults: Faults) {
        *self.0.faults.lock() = faults;
    }

    /// Cuts every link between `side` and the other nodes of `all`.
    pub fn partition(&self, side: &[NodeId], all: &[NodeId]) {
        let mut f = self.0.faults.lock();
        for &a in side {
            for &b in all.iter().filter(|b| !side.contains(b)) {
                f.cut.insert((a, b));
                f.cut.insert((b, a));
            }
        }
    }

    /// Restores every link and removes drops and delays.
    pub fn heal(&self) {
        *self.0.faults.lock() = Faults::default();
    }

    /// Messages sent and dropped so far.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.0.sent.load(Relaxed), self.0.dropped.load(Relaxed))
    }

    /// What happens to one message from `from` to `to`: `None` if it is lost, or its delay.
    fn fate(&self, from: NodeId, to: NodeId) -> Option<Duration> {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.sent.fetch_add(1, Relaxed);
        let f = self.0.faults.lock();
        let mut rng = self.0.rng.lock();
        if f.cut.contains(&(from, to)) || rng.below(1000) < f.drop_per_mille {
            self.0.dropped.fetch_add(1, Relaxed);
            return None;
        }
        let max = f.max_delay.as_micros() as u64;
        Some(Duration::from_micros(rng.below(max + 1)))
    }

    async fn deliver<T, E, F, Fut>(
        &self,
        from: NodeId,
        to: NodeId,
        call: F,
    ) -> Result<T, RPCError<NodeId, Node, E>>
    where
        E: std::error::Error,
        F: FnOnce(Raft) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let unreachable = |why: &str| {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
                "{from} -> {to}: {why}"
            ))))
        };
        let Some(delay) = self.fate(from, to) else {
            return Err(unreachable("message lost"));
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let raft = self.0.nodes.lock().get(&to).cloned();
        let Some(raft) = raft else {
            return Err(unreachable("node down"));
        };
        let answer = call(raft)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(to, e)))?;
        // The answer travels back over the same link.
        match self.fate(to, from) {
            None => Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other(format!("{to} -> {from}: answer lost")),
            ))),
            Some(delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(answer)
            }
        }
    }
}

/// One replica's side of the network.
#[derive(Clone)]
pub struct Endpoint {
    from: NodeId,
    router: Router,
}

/// A connection from one replica to another.
pub struct Connection {
    from: NodeId,
    to: NodeId,
    router: Router,
}

impl RaftNetworkFactory<TypeConfig> for Endpoint {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &Node) -> Connection {
        Connection {
            from: self.from,
            to: target,
            router: self.router.clone(),
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.router
            .deliver(self.from, self.to, |raft| async move {
                raft.append_entries(rpc).await
            })
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.router
            .deliver(self.from, self.to, |raft| async move {
                raft.install_snapshot(rpc).await
            })
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.router
            .deliver(
                self.from,
                self.to,
                |raft| async move { raft.vote(rpc).await },
            )
            .await
    }
}
