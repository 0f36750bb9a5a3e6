//! Many partitions' replicas in one process (docs/design.md, "Many partitions per process"):
//! one openraft group per partition, or per partition set (docs/design.md, "Partition sets"),
//! over one `oncelog::LogManager`, one connection per peer node shared by all groups
//! ([`crate::network::mux`]), leaders spread over the nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oncelog::{Environment, FlushPolicy, HighWatermarkPolicy, LogConfig};
use oncelog::{JobIntervals, LogManager, ManagerConfig, ManagerError, PartitionConfig};
use openraft::error::{InitializeError, RaftError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::network::mux::{self, GroupState, Groups, Mux};
use crate::{GroupId, Node, NodeId, Replica, ReplicaConfig, ReplicaError};

/// How long [`Host::balance`] waits before it asks for an election in the same group again.
const BALANCE_BACKOFF: Duration = Duration::from_secs(3);
/// How long the other replicas of a new group leave its first election to the preferred one.
const FIRST_ELECTION_WINDOW: Duration = Duration::from_millis(1500);

/// Why a host refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The log dir (or a partition in it) did not open or could not be created.
    #[error("{0}")]
    Manager(#[from] ManagerError),
    /// A group's replica did not start.
    #[error("partition {group}: {error}")]
    Replica {
        /// The group.
        group: GroupId,
        /// Why.
        error: Box<ReplicaError>,
    },
    /// This host does not host the partition.
    #[error("partition {0} is not hosted here")]
    UnknownPartition(GroupId),
    /// A configuration the host cannot run with.
    #[error("configuration: {0}")]
    Config(String),
}

/// What a host is.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// This node's id (one of `peers`).
    pub id: NodeId,
    /// Every node, this one included: each group's members.
    pub peers: BTreeMap<NodeId, Node>,
    /// The topic whose partitions are hosted.
    pub topic: String,
    /// How many: the partitions `topic-0` .. `topic-(partitions - 1)`.
    pub partitions: i32,
    /// The most partitions one raft group replicates (docs/design.md, "Partition sets"): 1,
    /// a group per partition; more, the partitions that prefer the same leader go in sets of
    /// up to this many (partition `p` with `p mod n` on `n` nodes), each set one group named
    /// by its first partition, whose entries carry the batches of all of them.
    pub set_size: usize,
    /// Each replica's configuration (its `log` field is not used: the manager's is).
    pub replica: ReplicaConfig,
}

/// A group this host holds a replica of.
struct Hosted {
    replica: Arc<Replica>,
    /// Its members in assignment order: the first is the preferred leader.
    members: Vec<NodeId>,
    /// The partitions it replicates, in the set's order (the first names the group).
    partitions: Vec<GroupId>,
}

/// The partitions of `topic` that [`Host::open`] puts in each group: those that prefer the
/// same node (`p mod nodes`), in order, in sets of at most `set_size`.
pub fn partition_sets(
    topic: &str,
    partitions: i32,
    nodes: usize,
    set_size: usize,
) -> Vec<Vec<GroupId>> {
    let (nodes, set_size) = (nodes.max(1), set_size.max(1));
    let mut sets = Vec::new();
    for residue in 0..nodes.min(partitions.max(0) as usize) {
        let preferring: Vec<GroupId> = (0..partitions)
            .filter(|p| p.unsigned_abs() as usize % nodes == residue)
            .map(|p| GroupId::new(topic, p))
            .collect();
        sets.extend(preferring.chunks(set_size).map(|c| c.to_vec()));
    }
    sets.sort_by_key(|set| set[0].partition);
    sets
}

/// A group as this node's replica sees it now (from raft's metrics), for answers such as
/// Kafka's Metadata: who leads, in which term, and how far each member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The leader this replica knows of.
    pub leader: Option<NodeId>,
    /// The term this replica is in (the leader epoch).
    pub term: u64,
    /// The members in assignment order (the first is the preferred leader).
    pub members: Vec<NodeId>,
    /// On the leader, the last entry index each member is known to hold (`None`: not known
    /// yet); empty elsewhere.
    pub matched: BTreeMap<NodeId, Option<u64>>,
    /// The last entry this replica applied (on the leader: committed).
    pub applied: Option<u64>,
}

impl GroupStatus {
    /// The members in step with the leader: on the leader, those whose matched entry reaches
    /// what it applied (the leader itself included); elsewhere every member (this replica
    /// does not know the others' progress).
    pub fn in_sync(&self) -> Vec<NodeId> {
        if self.matched.is_empty() {
            return self.members.clone();
        }
        self.members
            .iter()
            .copied()
            .filter(|m| match self.matched.get(m) {
                Some(matched) => *matched >= self.applied,
                None => Some(*m) == self.leader,
            })
            .collect()
    }
}

/// Many partitions' replicas in one process.
pub struct Host {
    id: NodeId,
    peers: BTreeMap<NodeId, Node>,
    replica_config: ReplicaConfig,
    fs: Arc<dyn oncelog::io::FileSystem>,
    /// When [`Host::balance`] last asked for an election, by group.
    asked: parking_lot::Mutex<std::collections::HashMap<GroupId, std::time::Instant>>,
    /// Set by the first [`Host::shutdown`].
    stopped: std::sync::atomic::AtomicBool,
    /// Until [`Host::close`].
    manager: Arc<parking_lot::Mutex<Option<LogManager>>>,
    mux: Mux,
    groups: Arc<Groups>,
    replicas: Arc<parking_lot::RwLock<BTreeMap<GroupId, Hosted>>>,
    /// Each hosted partition's group and its place in the group's set.
    routes: parking_lot::RwLock<BTreeMap<GroupId, (GroupId, usize)>>,
    /// Held while a group is added: two adds of one group open one replica.
    adding: tokio::sync::Mutex<()>,
}

impl Host {
    /// The manager configuration raft needs: every partition's log with the high watermark set
    /// by raft, flushed by raft at every entry (zeroed steps, writes through the file:
    /// [`crate::synced_every_entry`]), `delete` only; the retention job off (retention must stop at
    /// raft's purge point: [`Replica::enforce_retention`]).
    pub fn manager_config() -> Result<ManagerConfig, HostError> {
        let log = crate::replica::synced_every_entry(LogConfig::default())
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .flush_policy(FlushPolicy::Manual)
            .build()
            .map_err(|e| HostError::Config(e.to_string()))?;
        let jobs = JobIntervals::default().with_retention(None);
        Ok(ManagerConfig::default().with_log(log).with_jobs(jobs))
    }

    /// Opens the log dir `dir` (created if missing) with [`Host::manager_config`], creates the
    /// partitions `config.topic-0 .. config.topic-(partitions - 1)` it lacks, and starts raft
    /// on each, every peer a member (partition `i` prefers the `i mod n`-th peer in id order).
    /// The groups are formed by [`Host::initialize`].
    pub async fn open(
        dir: impl AsRef<Path>,
        env: Environment,
        config: HostConfig,
    ) -> Result<Host, HostError> {
        if !config.peers.contains_key(&config.id) {
            return Err(HostError::Config(format!(
                "node {} is not among the peers",
                config.id
            )));
        }
        if config.partitions < 1 {
            return Err(HostError::Config(format!(
                "{} partitions: at least one",
                config.partitions
            )));
        }
        if config.set_size < 1 || config.set_size > crate::entry::MAX_SPANS {
            return Err(HostError::Config(format!(
                "a set size of {}: from 1 to {}",
                config.set_size,
                crate::entry::MAX_SPANS
            )));
        }
        let host = Host::start(dir, env, config.id, config.peers, config.replica)?;
        let ids: Vec<NodeId> = host.peers.keys().copied().collect();
        for set in partition_sets(&config.topic, config.partitions, ids.len(), config.set_size) {
            let first = set[0].partition.unsigned_abs() as usize % ids.len();
            let members: Vec<NodeId> = ids[first..].iter().chain(&ids[..first]).copied().collect();
            host.open_group(set, &members, Opening::Join, PartitionConfig::default())
                .await?;
        }
        Ok(host)
    }

    /// Opens the log dir `dir` (created if missing) with [`Host::manager_config`] and hosts no
    /// group yet: [`Host::add_group`] adds them. `peers` is every node this host may share a
    /// group with, this one included (where each is reached).
    pub fn start(
        dir: impl AsRef<Path>,
        env: Environment,
        id: NodeId,
        peers: BTreeMap<NodeId, Node>,
        replica: ReplicaConfig,
    ) -> Result<Host, HostError> {
        if !peers.contains_key(&id) {
            return Err(HostError::Config(format!(
                "node {id} is not among the peers"
            )));
        }
        let fs = Arc::clone(&env.fs);
        let dirs = [dir.as_ref().to_path_buf()];
        let manager = LogManager::open_in(env, &dirs, Host::manager_config()?)?;
        let host = Host {
            id,
            peers,
            replica_config: replica,
            fs,
            stopped: Default::default(),
            asked: Default::default(),
            manager: Arc::new(parking_lot::Mutex::new(Some(manager))),
            mux: Mux::new(Duration::from_millis(200)),
            groups: Arc::new(Groups::default()),
            replicas: Default::default(),
            routes: Default::default(),
            adding: Default::default(),
        };
        let (replicas, manager, fs) = (
            Arc::clone(&host.replicas),
            Arc::clone(&host.manager),
            Arc::clone(&host.fs),
        );
        host.groups
            .set_state_reader(Arc::new(move |group: &GroupId| {
                local_state(&replicas, &manager, fs.as_ref(), group)
            }));
        Ok(host)
    }

    /// This node's durable raft state of `group`, hosted or not (`Err` while its partition
    /// holds state but raft is not open on it yet: the last log id is known once it is).
    pub fn local_state(&self, group: &GroupId) -> Result<GroupState, String> {
        local_state(&self.replicas, &self.manager, self.fs.as_ref(), group)
    }

    /// Node `peer`'s durable raft state of `group` (docs/design.md, "A wiped node rejoins
    /// under its id"); `Err` says why it is not known (unreachable, not open yet).
    pub async fn peer_state(&self, peer: NodeId, group: &GroupId) -> Result<GroupState, String> {
        let Some(node) = self.peers.get(&peer) else {
            return Err(format!("node {peer} is not among the peers"));
        };
        tokio::time::timeout(
            Duration::from_secs(2),
            self.mux.state_of(peer, &node.addr, group),
        )
        .await
        .unwrap_or_else(|_| Err(format!("node {peer} at {} did not answer", node.addr)))
    }

    /// Hosts `group` as a member that lost its data and rejoins (docs/design.md, "A wiped node
    /// rejoins under its id"): saves a vote in `floor.term` before raft starts (unless one of
    /// that term or later is saved), never forms the group, answers "not granted" to every
    /// candidate whose last log id is below `floor.last_log_id`, and stands for no election
    /// until it applied an entry at or above it. A group already hosted is left as it is.
    pub async fn add_group_rejoining(
        &self,
        group: GroupId,
        members: &[NodeId],
        floor: RejoinFloor,
    ) -> Result<(), HostError> {
        self.add_group_rejoining_with(group, members, floor, PartitionConfig::default())
            .await
    }

    /// [`Host::add_group_rejoining`] whose partition, if it must be created, gets `config`
    /// over the host's defaults (as [`Host::add_group_with`]).
    pub async fn add_group_rejoining_with(
        &self,
        group: GroupId,
        members: &[NodeId],
        floor: RejoinFloor,
        config: PartitionConfig,
    ) -> Result<(), HostError> {
        self.open_group(vec![group], members, Opening::Rejoin(floor), config)
            .await
    }

    /// Hosts `group` with `members` (in assignment order: the first is its preferred leader;
    /// this node among them): creates its partition in the log dir if missing, starts raft on
    /// it over the shared connections, and forms the group if it is new. A group already
    /// hosted is left as it is (its members are not changed: membership changes are not
    /// built).
    ///
    /// Every member forms the group when it opens it, so a group forms even while one of its
    /// replicas is down. openraft 0.9.25 allows that: `Raft::initialize` writes the membership
    /// as the entry at the log id `(0, 0)` on the node that calls it, and only on a node that
    /// has neither a log nor a vote (`Engine::check_initialize`; else `NotAllowed`, which is
    /// ignored here), so members that initialize with the same membership hold the same entry
    /// under the same log id ("More than one node performing `initialize()` with the same
    /// config is safe", `Raft::initialize`'s documentation). The membership is built from the
    /// same `peers` and `members` on every node, so it is the same; its head batch carries no
    /// clock, so the bytes are too.
    pub async fn add_group(&self, group: GroupId, members: &[NodeId]) -> Result<(), HostError> {
        self.add_group_with(group, members, PartitionConfig::default())
            .await
    }

    /// [`Host::add_group`] whose partition, if it must be created, gets `config` over the
    /// host's defaults ([`Host::manager_config`]; kept in its `oncelog.properties`, so a
    /// restart opens it with the same). Every member must give the same `config`: each
    /// replica's log checks the entries it applies against its own (a batch over
    /// `max.message.bytes` is refused on every replica alike). Its cleanup policy must stay
    /// `delete` ([`Replica::open_log`]).
    pub async fn add_group_with(
        &self,
        group: GroupId,
        members: &[NodeId],
        config: PartitionConfig,
    ) -> Result<(), HostError> {
        self.open_group(vec![group], members, Opening::Form, config)
            .await
    }

    /// Hosts the group of the partition set `partitions` (docs/design.md, "Partition sets";
    /// in the set's order, which every member must give alike: the group is named by the
    /// first) with `members`, as [`Host::add_group_with`] hosts one partition's: each
    /// partition created if missing with `config`, raft started on their logs, the group
    /// formed if it is new. A group already hosted is left as it is; a partition hosted in
    /// another group is refused.
    pub async fn add_set_with(
        &self,
        partitions: Vec<GroupId>,
        members: &[NodeId],
        config: PartitionConfig,
    ) -> Result<(), HostError> {
        self.open_group(partitions, members, Opening::Form, config)
            .await
    }

    async fn open_group(
        &self,
        partitions: Vec<GroupId>,
        members: &[NodeId],
        opening: Opening,
        config: PartitionConfig,
    ) -> Result<(), HostError> {
        let Some(group) = partitions.first().cloned() else {
            return Err(HostError::Config("a partition set of no partition".into()));
        };
        let distinct: BTreeSet<&GroupId> = partitions.iter().collect();
        if distinct.len() != partitions.len() || partitions.len() > crate::entry::MAX_SPANS {
            return Err(HostError::Config(format!(
                "partition set {partitions:?}: its partitions must be distinct, at most {}",
                crate::entry::MAX_SPANS
            )));
        }
        let unique: BTreeSet<NodeId> = members.iter().copied().collect();
        if unique.len() != members.len() || !unique.contains(&self.id) {
            return Err(HostError::Config(format!(
                "partition {group}: members {members:?} must be distinct and include node {}",
                self.id
            )));
        }
        if let Some(unknown) = unique.iter().find(|m| !self.peers.contains_key(m)) {
            return Err(HostError::Config(format!(
                "partition {group}: member {unknown} is not among the peers"
            )));
        }
        let _adding = self.adding.lock().await;
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(HostError::Config("the host is shutting down".into()));
        }
        if self.replicas.read().contains_key(&group) {
            return Ok(());
        }
        if let Some((p, (other, _))) = partitions
            .iter()
            .find_map(|p| self.routes.read().get(p).map(|r| (p.clone(), r.clone())))
        {
            return Err(HostError::Config(format!(
                "partition {p} is replicated by the group of {other} already"
            )));
        }
        let mut logs = Vec::with_capacity(partitions.len());
        {
            let manager = self.manager.lock();
            let Some(manager) = manager.as_ref() else {
                return Err(HostError::Config("the host is closed".into()));
            };
            for p in &partitions {
                logs.push(match manager.get(&p.topic, p.partition) {
                    Ok(log) => log,
                    Err(ManagerError::UnknownPartition { .. }) => {
                        manager.create(&p.topic, p.partition, config.clone())?
                    }
                    Err(e) => return Err(e.into()),
                });
            }
        }
        let (fs, config, network) = (
            Arc::clone(&self.fs),
            self.replica_config.clone(),
            self.mux.group(group.clone()),
        );
        let opened = match &opening {
            Opening::Rejoin(floor) => {
                let vote = openraft::Vote::new(floor.term, self.id);
                Replica::open_set_with_vote(self.id, logs, fs, config, network, vote).await
            }
            _ => Replica::open_set(self.id, logs, fs, config, network).await,
        };
        let replica = opened.map_err(|error| HostError::Replica {
            group: group.clone(),
            error: Box::new(error),
        })?;
        match opening {
            Opening::Form => self.form(&group, &replica, members).await?,
            Opening::Join => {}
            Opening::Rejoin(floor) => {
                if let Some(last) = floor.last_log_id {
                    self.groups.set_floor(group.clone(), last);
                    campaign_once_at(&replica, last);
                }
            }
        }
        self.groups.add(group.clone(), replica.raft().clone());
        {
            let mut routes = self.routes.write();
            for (m, p) in partitions.iter().enumerate() {
                routes.insert(p.clone(), (group.clone(), m));
            }
        }
        self.replicas.write().insert(
            group,
            Hosted {
                replica: Arc::new(replica),
                members: members.to_vec(),
                partitions,
            },
        );
        Ok(())
    }

    /// Stops hosting `group` and deletes its partition (a deleted topic's, docs/design.md,
    /// "Deleting topics and adding partitions in a cluster"): its raft stops, calls for it
    /// are answered not hosted from then on, and its partition's directory is renamed to
    /// Kafka's `-delete` form (durably, so no later open brings it back) for the log dir's
    /// deletion job to remove. A partition on disk that is not hosted (a node that restarts
    /// after the deletion) is deleted too. Answers whether there was anything to remove; removing a group twice
    /// does nothing the second time.
    pub async fn remove_group(&self, group: &GroupId) -> Result<bool, HostError> {
        // One add or remove at a time: an add racing this one would open the log deleted here.
        let _adding = self.adding.lock().await;
        let hosted = self.replicas.write().remove(group);
        self.groups.remove(group);
        self.asked.lock().remove(group);
        let partitions = hosted
            .as_ref()
            .map_or_else(|| vec![group.clone()], |h| h.partitions.clone());
        {
            let mut routes = self.routes.write();
            for p in &partitions {
                routes.remove(p);
            }
        }
        if let Some(hosted) = &hosted {
            hosted
                .replica
                .shutdown()
                .await
                .map_err(|error| HostError::Replica {
                    group: group.clone(),
                    error: Box::new(error),
                })?;
        }
        let manager = self.manager.lock();
        let Some(manager) = manager.as_ref() else {
            return Err(HostError::Config("the host is closed".into()));
        };
        let mut removed = hosted.is_some();
        for p in &partitions {
            match manager.delete(&p.topic, p.partition) {
                Ok(()) => removed = true,
                Err(ManagerError::UnknownPartition { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(removed)
    }

    /// Replaces the settings of this node's partition of `group` (hosted or only on disk) with
    /// `config`, as Kafka applies a topic's altered configuration: its `oncelog.properties` is
    /// rewritten durably and the open log takes them live (`LogManager::alter_config`; only
    /// settings [`oncelog::Log::reconfigure`] lets change, which are every topic setting a
    /// broker takes). The cleanup policy must stay `delete` ([`Replica::open_log`]): a
    /// compacting config is refused and changes nothing. A partition that already runs with
    /// these settings is left as it is (no file written). Answers whether the partition is
    /// here.
    pub fn alter_group_config(
        &self,
        group: &GroupId,
        config: PartitionConfig,
    ) -> Result<bool, HostError> {
        if config
            .cleanup_policy
            .is_some_and(|p| p != oncelog::CleanupPolicy::Delete)
        {
            return Err(HostError::Config(format!(
                "partition {group}: the cleanup policy must stay delete (compaction is not \
                 replicated)"
            )));
        }
        let manager = self.manager.lock();
        let Some(manager) = manager.as_ref() else {
            return Err(HostError::Config("the host is closed".into()));
        };
        let wanted = config.resolve(manager.config());
        if manager
            .partition_config(&group.topic, group.partition)
            .is_ok_and(|now| now == wanted)
        {
            return Ok(true);
        }
        match manager.alter_config(&group.topic, group.partition, config) {
            Ok(_) => Ok(true),
            Err(ManagerError::UnknownPartition { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The partitions in the log dir, hosted or not (a node reconciles them with what its
    /// groups should be when it starts).
    pub fn partitions_on_disk(&self) -> Result<Vec<GroupId>, HostError> {
        let manager = self.manager.lock();
        let Some(manager) = manager.as_ref() else {
            return Err(HostError::Config("the host is closed".into()));
        };
        Ok(manager
            .list()
            .into_iter()
            .map(|p| GroupId::new(p.partition.topic, p.partition.partition))
            .collect())
    }

    /// Forms `group` with `members` unless this replica already holds a log or a vote.
    async fn form(
        &self,
        group: &GroupId,
        replica: &Replica,
        members: &[NodeId],
    ) -> Result<(), HostError> {
        let nodes: BTreeMap<NodeId, Node> = members
            .iter()
            .filter_map(|m| self.peers.get(m).map(|n| (*m, n.clone())))
            .collect();
        match replica.raft().initialize(nodes).await {
            Ok(()) => {
                first_leader_preferred(replica, members.first() == Some(&self.id));
                Ok(())
            }
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(HostError::Replica {
                group: group.clone(),
                error: Box::new(ReplicaError::Raft(e.to_string())),
            }),
        }
    }

    /// Forms every group with its members (on one node, the first time); a group that already
    /// has a membership is left as it is.
    pub async fn initialize(&self) -> Result<(), HostError> {
        let hosted: Vec<(GroupId, Arc<Replica>, Vec<NodeId>)> = self
            .replicas
            .read()
            .iter()
            .map(|(g, h)| (g.clone(), Arc::clone(&h.replica), h.members.clone()))
            .collect();
        for (group, replica, members) in hosted {
            self.form(&group, &replica, &members).await?;
        }
        Ok(())
    }

    /// Serves the raft calls of every group arriving on `listener` (the peers' one connection
    /// each), until the returned task is aborted.
    pub fn serve_raft(&self, listener: TcpListener) -> JoinHandle<()> {
        mux::serve(listener, Arc::clone(&self.groups))
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Every node this host may share a group with, and where each is reached.
    pub fn peers(&self) -> &BTreeMap<NodeId, Node> {
        &self.peers
    }

    /// The group that replicates `partition` and the partition's place in its set (0 for a
    /// partition of its own).
    pub fn route(&self, partition: &GroupId) -> Result<(Arc<Replica>, usize), HostError> {
        let (group, member) = self
            .routes
            .read()
            .get(partition)
            .cloned()
            .ok_or_else(|| HostError::UnknownPartition(partition.clone()))?;
        Ok((self.replica(&group)?, member))
    }

    /// The partitions each hosted group replicates, by group (a set's in its order).
    pub fn sets(&self) -> BTreeMap<GroupId, Vec<GroupId>> {
        self.replicas
            .read()
            .iter()
            .map(|(g, h)| (g.clone(), h.partitions.clone()))
            .collect()
    }

    /// The replica of a group (of a partition of its own, or of a set, named by its first
    /// partition: [`Host::route`] finds any partition's).
    pub fn replica(&self, group: &GroupId) -> Result<Arc<Replica>, HostError> {
        self.replicas
            .read()
            .get(group)
            .map(|h| Arc::clone(&h.replica))
            .ok_or_else(|| HostError::UnknownPartition(group.clone()))
    }

    /// Every replica, by partition.
    pub fn replicas(&self) -> BTreeMap<GroupId, Arc<Replica>> {
        self.replicas
            .read()
            .iter()
            .map(|(g, h)| (g.clone(), Arc::clone(&h.replica)))
            .collect()
    }

    /// The node a group prefers as its leader: the first of its members in assignment order
    /// (with [`Host::open`], partition `i` the `i mod n`-th of the peers).
    pub fn preferred(&self, group: &GroupId) -> Option<NodeId> {
        self.replicas
            .read()
            .get(group)
            .and_then(|h| h.members.first().copied())
    }

    /// A group as this node's replica sees it now: its leader, term, members and, on the
    /// leader, each member's matched entry. For a partition of a set, its set's group.
    pub fn status(&self, group: &GroupId) -> Result<GroupStatus, HostError> {
        let group = match self.routes.read().get(group) {
            Some((g, _)) => g.clone(),
            None => group.clone(),
        };
        let (replica, members) = {
            let replicas = self.replicas.read();
            let h = replicas
                .get(&group)
                .ok_or_else(|| HostError::UnknownPartition(group.clone()))?;
            (Arc::clone(&h.replica), h.members.clone())
        };
        let m = replica.raft().metrics();
        let m = m.borrow();
        let matched = match (&m.replication, m.current_leader == Some(self.id)) {
            (Some(replication), true) => replication
                .iter()
                .map(|(id, l)| (*id, l.map(|l| l.index)))
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok(GroupStatus {
            leader: m.current_leader,
            term: m.current_term,
            members,
            matched,
            applied: m.last_applied.map(|l| l.index),
        })
    }

    /// Asks for an election in each group that prefers this node and is led by another, if
    /// this replica has applied all it holds and has not asked in that group for a few
    /// seconds; raft's vote decides. Returns how many it asked for.
    pub async fn balance(&self) -> usize {
        let mut asked = 0;
        let preferring_me: Vec<(GroupId, Arc<Replica>)> = self
            .replicas
            .read()
            .iter()
            .filter(|(_, h)| h.members.first() == Some(&self.id))
            .map(|(g, h)| (g.clone(), Arc::clone(&h.replica)))
            .collect();
        for (group, r) in &preferring_me {
            let (leader, caught_up) = {
                let m = r.raft().metrics();
                let m = m.borrow();
                (
                    m.current_leader,
                    m.last_log_index.is_some()
                        && m.last_applied.map(|l| l.index) == m.last_log_index,
                )
            };
            // Only a replica that has applied all it holds asks (one behind would lose the
            // vote and only disturb the group), and not again before an election timeout or
            // two went by.
            let now = std::time::Instant::now();
            let recently = self
                .asked
                .lock()
                .get(group)
                .is_some_and(|t| now.duration_since(*t) < BALANCE_BACKOFF);
            if matches!(leader, Some(l) if l != self.id)
                && caught_up
                && !recently
                && r.raft().trigger().elect().await.is_ok()
            {
                self.asked.lock().insert(group.clone(), now);
                asked += 1;
            }
        }
        asked
    }

    /// Runs [`Host::balance`] every `every` until the returned task is aborted.
    pub fn keep_balanced(self: &Arc<Host>, every: Duration) -> JoinHandle<()> {
        let host = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                host.balance().await;
            }
        })
    }

    /// Asks peer `node` who leads each of `groups` as its replicas see them (the groups it
    /// does not host are left out of the answer), over the connection the groups' raft calls
    /// share: how a node learns the leaders of partitions it holds no replica of.
    pub async fn peer_leaders(
        &self,
        node: NodeId,
        groups: Vec<GroupId>,
    ) -> std::io::Result<Vec<crate::network::mux::GroupLeader>> {
        let Some(peer) = self.peers.get(&node) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("node {node} is not among the peers"),
            ));
        };
        self.mux.leaders(node, &peer.addr, groups).await
    }

    /// An index at or past every entry of `group` committed before the call, as `leader`
    /// (this node or a peer) vouches for it: its last entry, if it leads the group and has
    /// applied every entry it holds ([`GroupLeader::settled`]); `None` otherwise (ask again).
    /// A replica that applied up to it applied everything committed before the call: a read
    /// barrier, where this replica's own high watermark is no proof (written lazily, a
    /// restarted replica's lags what it knew; and a leader openraft restores in its own term
    /// after a restart appends no entry of its own to commit).
    ///
    /// [`GroupLeader::settled`]: crate::network::mux::GroupLeader::settled
    pub async fn settled_at(
        &self,
        group: &GroupId,
        leader: NodeId,
    ) -> std::io::Result<Option<u64>> {
        if leader == self.id {
            return Ok(self.settled_here(group));
        }
        let answers = self.peer_leaders(leader, vec![group.clone()]).await?;
        Ok(answers
            .into_iter()
            .find(|a| &a.group == group && a.leader == Some(leader))
            .and_then(|a| a.settled))
    }

    /// [`Host::settled_at`] with this node as the leader: its last entry of `group`, if it
    /// leads the group and has applied every entry it holds.
    pub fn settled_here(&self, group: &GroupId) -> Option<u64> {
        self.groups
            .leaders(std::slice::from_ref(group))
            .into_iter()
            .find(|a| a.leader == Some(self.id))
            .and_then(|a| a.settled)
    }

    /// Dials peer `node` at `addr` instead of the address its groups' memberships name (a
    /// test's proxy in between, to cut the link); the memberships, replicated and the same
    /// on every node, stay as they are.
    pub fn dial_through(&self, node: NodeId, addr: String) {
        self.mux.dial_through(node, addr);
    }

    /// The frames this node sent to its peers, and the writes that carried them.
    pub fn sent(&self) -> (u64, u64) {
        self.mux.counts()
    }

    /// Stops every group's raft (calls for them are answered not hosted from then on); a
    /// second call does nothing.
    pub async fn shutdown(&self) -> Result<(), HostError> {
        if self.stopped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let _adding = self.adding.lock().await;
        for (group, r) in self.replicas() {
            self.groups.remove(&group);
            r.shutdown().await.map_err(|error| HostError::Replica {
                group,
                error: Box::new(error),
            })?;
        }
        Ok(())
    }

    /// [`Host::shutdown`], then closes the log dir cleanly (checkpoints and the clean-shutdown
    /// marker); the replicas' logs answer `closed` from then on. A second call does nothing.
    pub async fn close(&self) -> Result<(), HostError> {
        self.shutdown().await?;
        let manager = self.manager.lock().take();
        if let Some(manager) = manager {
            manager.close()?;
        }
        Ok(())
    }
}

/// What a member that lost its data must respect when it rejoins a group (docs/design.md, "A
/// wiped node rejoins under its id"), from the durable states of every other member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RejoinFloor {
    /// A term above every other member's vote: the vote saved before raft starts.
    pub term: u64,
    /// The greatest last log id among the other members: no vote for a candidate below it,
    /// and no election of its own until it applied an entry at or above it.
    pub last_log_id: Option<openraft::LogId<NodeId>>,
}

impl RejoinFloor {
    /// The floor the other members' states give.
    pub fn from_states<'a>(states: impl IntoIterator<Item = &'a GroupState>) -> RejoinFloor {
        let mut floor = RejoinFloor {
            term: 1,
            last_log_id: None,
        };
        for s in states {
            let voted = s.vote.map_or(0, |v| v.leader_id().term);
            floor.term = floor.term.max(voted.saturating_add(1));
            floor.last_log_id = floor.last_log_id.max(s.last_log_id);
        }
        floor
    }
}

/// How [`Host::open_group`] starts a group's raft.
enum Opening {
    /// Forms the group if this replica holds neither a log nor a vote.
    Form,
    /// Joins a group formed by [`Host::initialize`].
    Join,
    /// Rejoins after losing its data.
    Rejoin(RejoinFloor),
}

/// Makes a new group's first leader its preferred replica, as Kafka's controller names a new
/// partition's leader: the preferred one stands at once, and again each election timeout
/// (openraft's `election_timeout_min`) while no leader is known (the others may not host the
/// group yet when it first asks); the others do not stand until a leader is known or the
/// window ([`FIRST_ELECTION_WINDOW`], or three election timeouts if longer) went by (the
/// preferred one may be down). Without it the first replica to time out leads, and the
/// balancer moves the leadership a second later, while clients already use the partition.
///
/// Each candidacy is given a whole election timeout to gather its votes. Standing again at the
/// first change of raft's metrics (which the candidacy itself makes: a new term) cancelled each
/// candidacy a millisecond after it began, before any peer could answer: on a loaded node the
/// preferred replica then stood hundreds of times a second and never won, and its ever higher
/// terms kept the others from winning too (docs/design.md, "Heartbeats and elections").
fn first_leader_preferred(replica: &Replica, preferred: bool) {
    let raft = replica.raft().clone();
    let retry = Duration::from_millis(raft.config().election_timeout_min);
    let window = FIRST_ELECTION_WINDOW.max(3 * retry);
    if !preferred {
        raft.runtime_config().elect(false);
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + window;
        let mut metrics = raft.metrics();
        loop {
            if preferred {
                let _ = raft.trigger().elect().await;
            }
            let until = if preferred {
                (tokio::time::Instant::now() + retry).min(deadline)
            } else {
                deadline
            };
            match leader_known_by(&mut metrics, until).await {
                Some(false) if tokio::time::Instant::now() < deadline => {}
                Some(_) => break,
                None => return,
            }
        }
        if !preferred {
            raft.runtime_config().elect(true);
        }
    });
}

/// Waits until raft knows a leader (`Some(true)`) or `until` (`Some(false)`); `None` once the
/// raft is gone.
async fn leader_known_by(
    metrics: &mut tokio::sync::watch::Receiver<openraft::RaftMetrics<NodeId, Node>>,
    until: tokio::time::Instant,
) -> Option<bool> {
    loop {
        if metrics.borrow_and_update().current_leader.is_some() {
            return Some(true);
        }
        match tokio::time::timeout_at(until, metrics.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return None,
            Err(_) => return Some(false),
        }
    }
}

/// Keeps `replica` from standing for election until it applied an entry at or above `floor`
/// (its own log is behind until then: it would only lose the vote and bump the term).
fn campaign_once_at(replica: &Replica, floor: openraft::LogId<NodeId>) {
    let raft = replica.raft().clone();
    let caught_up = move |m: &openraft::RaftMetrics<NodeId, Node>| m.last_applied >= Some(floor);
    if caught_up(&raft.metrics().borrow()) {
        return;
    }
    raft.runtime_config().elect(false);
    tokio::spawn(async move {
        let mut metrics = raft.metrics();
        while !caught_up(&metrics.borrow_and_update()) {
            if metrics.changed().await.is_err() {
                return;
            }
        }
        raft.runtime_config().elect(true);
        tracing::info!(floor = %floor, "the rejoined replica caught up: it may stand for election");
    });
}

/// A node's durable raft state of `group`: from its replica if hosted, else from the partition
/// on disk (none: never held).
fn local_state(
    replicas: &parking_lot::RwLock<BTreeMap<GroupId, Hosted>>,
    manager: &parking_lot::Mutex<Option<LogManager>>,
    fs: &dyn oncelog::io::FileSystem,
    group: &GroupId,
) -> Result<GroupState, String> {
    if let Some(h) = replicas.read().get(group) {
        let (vote, last_log_id) = h.replica.partition().durable_state();
        return Ok(GroupState {
            vote,
            last_log_id,
            log_end_offset: h.replica.log().log_end_offset(),
        });
    }
    let log = {
        let manager = manager.lock();
        let Some(manager) = manager.as_ref() else {
            return Err("the host is closed".into());
        };
        match manager.get(&group.topic, group.partition) {
            Ok(log) => log,
            Err(ManagerError::UnknownPartition { .. }) => return Ok(GroupState::EMPTY),
            Err(e) => return Err(e.to_string()),
        }
    };
    let state = crate::state_file::read(fs, log.dir()).map_err(|e| e.to_string())?;
    let on_disk = GroupState {
        vote: state.vote,
        last_log_id: state.purged.map(|p| p.log_id),
        log_end_offset: log.log_end_offset(),
    };
    // Its last log id is known once raft indexed the log; only a replica that at most formed
    // the group (one entry) can answer without.
    if on_disk.holds_state() || on_disk.log_end_offset > 1 {
        return Err(format!("partition {group} is not open yet"));
    }
    Ok(on_disk)
}
