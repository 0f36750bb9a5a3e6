//! Cluster mode (docs/design.md, "A cluster of brokers"): this broker is one node of a cluster
//! whose partitions are raft groups of a [`Host`] over the data directory, and whose metadata
//! (the topics and their replicas) is the raft group [`METADATA_TOPIC`]`-0` of every node,
//! applied in offset order into an [`Image`]. The metadata group's leader is the controller.

pub mod coordinator;
pub mod image;
pub mod markers;
mod nodes;
pub mod rejoin;
pub mod remote;
mod retention;
mod topics;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncelog::format::{BatchBuilder, ConsumerRecordIter};
use oncelog::Environment;
use oncelog_raft::{GroupId, Host, HostError, Node, Replica, ReplicaConfig};
use parking_lot::RwLock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use image::{assign, topic_config, Applied, Image, MetadataRecord, TopicImage};
pub use nodes::{ClusterNodes, NodeAddress, NodesError, MAX_NODE_ID};
pub use topics::{Deletion, Wait, WriteRefused};

/// The metadata group's topic. Not KRaft's `__cluster_metadata`: the library never opens a
/// directory of that name (it is Kafka's own metadata log when a Kafka log dir is opened).
pub const METADATA_TOPIC: &str = "__oncelog_metadata";

/// The offsets group's topic: the coordinators' log (committed offsets and the classic
/// groups' records, Kafka's `__consumer_offsets` records, and the transaction states), one
/// partition replicated on every node, whose leader is the group coordinator and the
/// transaction coordinator (docs/design.md, "The transaction coordinator in a cluster").
pub const OFFSETS_TOPIC: &str = "__oncelog_offsets";

/// How often the image is brought up to the metadata log's high watermark, and leaders are
/// moved to the preferred replicas.
const APPLY_EVERY: Duration = Duration::from_millis(20);
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// How a node runs beyond who the nodes are.
#[derive(Debug, Clone, Copy)]
pub struct ClusterTuning {
    /// How often the node enforces retention on its replicas (`cluster::retention`).
    pub retention_check: Duration,
    /// raft's snapshot interval (in entries) and the entries it keeps after a snapshot: how
    /// far behind the log end raft's purge point trails, below which alone retention and
    /// DeleteRecords delete bytes.
    pub raft_snapshot_entries: u64,
    /// raft's heartbeat interval, which is also openraft's AppendEntries timeout; a follower
    /// stands for election after 6 to 12 of them without a word from its leader.
    pub raft_heartbeat: Duration,
}

impl Default for ClusterTuning {
    fn default() -> Self {
        ClusterTuning {
            retention_check: Duration::from_secs(300),
            raft_snapshot_entries: 4096,
            raft_heartbeat: Duration::from_millis(crate::config::DEFAULT_RAFT_HEARTBEAT_MS),
        }
    }
}

/// Why cluster mode did not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("the cluster's raft host in {dir}: {error}")]
    Host { dir: String, error: HostError },
    #[error("cannot listen for raft on {addr}: {error}")]
    Listen { addr: String, error: std::io::Error },
    #[error("rejoining after a data loss: {0}")]
    Rejoin(#[from] rejoin::RejoinError),
}

/// Why this node hands out no producer id now (docs/design.md, "A wiped node rejoins under
/// its id", producer ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerIdsUnavailable {
    /// The node rejoined and its metadata replica follows no leader of its rejoin term yet:
    /// retriable.
    NotYet,
    /// The rejoin's term leaves no room in a producer id.
    Exhausted(u64),
}

/// The ids of one incarnation: `n` (of `n * 1024 + node id`) within `[term << 32, (term + 1)
/// << 32)`, and below 2^53 so that the id fits an i64.
const INCARNATION_BITS: u32 = 32;
const MAX_INCARNATION: u64 = 1 << (53 - INCARNATION_BITS);

/// Where a partition's reads and appends go, as this node sees it.
pub enum Route {
    /// The topic or partition is not in the image.
    Unknown,
    /// This node's replica leads: appends and reads go to it.
    Leader(Arc<Replica>),
    /// Another node leads (or none is known): the client is sent there.
    Elsewhere(PartitionView),
}

/// A partition as this node sees it, for Metadata and NOT_LEADER answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// The leader, if known.
    pub leader: Option<i32>,
    /// Its term (Kafka's leader epoch); -1 if not known here.
    pub epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.nodes)
            .field("cluster_id", &self.cluster_id)
            .finish_non_exhaustive()
    }
}

/// One node of the cluster.
pub struct Cluster {
    pub nodes: ClusterNodes,
    pub cluster_id: String,
    host: Arc<Host>,
    image: RwLock<Image>,
    /// The image's next offset, for creators waiting for their record to be applied.
    applied: watch::Sender<i64>,
    /// One metadata write at a time on the controller: the check against the image and the
    /// append are one step.
    writing: tokio::sync::Mutex<()>,
    /// What the image changed that this node has not acted on yet ([`topics`]), in offset
    /// order.
    changes: parking_lot::Mutex<Vec<(i64, Applied)>>,
    /// Whether this node removed the partitions on disk the image no longer gives it, once
    /// after it started ([`topics`]): it has followed its whole image, so the retention job
    /// (`cluster::retention`) may run.
    reconciled: std::sync::atomic::AtomicBool,
    /// The leaders of the partitions this node holds no replica of, as their replicas said
    /// last ([`remote::keep_asking`]).
    remote: RwLock<std::collections::HashMap<GroupId, remote::RemoteLeader>>,
    /// The offsets group's term in which this node loaded the coordinator's state (0: not
    /// loaded; raft's terms start at 1).
    coordinating: AtomicU64,
    /// The metadata group's term in which this node, its leader, saw its image reach the
    /// metadata log's end ([`Cluster::check_controller`]; 0: not yet).
    controller_ready: AtomicU64,
    dir: PathBuf,
    /// Set when this node lost its data and rejoined ([`rejoin`]).
    rejoining: Option<rejoin::Rejoining>,
    tasks: parking_lot::Mutex<Vec<JoinHandle<()>>>,
}

impl Cluster {
    /// Opens the data directory `dir` as the node's raft host, listens for its peers, joins
    /// the metadata group and starts applying it.
    pub async fn start(
        dir: &Path,
        nodes: ClusterNodes,
        tuning: ClusterTuning,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let me = nodes.me;
        let peers: BTreeMap<u64, Node> = nodes
            .nodes
            .iter()
            .map(|(id, a)| (*id as u64, Node::new(a.raft_addr())))
            .collect();
        let host_error = |error| ClusterError::Host {
            dir: dir.display().to_string(),
            error,
        };
        let mut replica_config = ReplicaConfig::default();
        replica_config.raft.snapshot_policy =
            oncelog_raft::openraft::SnapshotPolicy::LogsSinceLast(tuning.raft_snapshot_entries);
        replica_config.raft.max_in_snapshot_log_to_keep = tuning.raft_snapshot_entries;
        // openraft purges only once this many entries can go at once.
        replica_config.raft.purge_batch_size = replica_config
            .raft
            .purge_batch_size
            .min(tuning.raft_snapshot_entries);
        let heartbeat = tuning.raft_heartbeat.as_millis() as u64;
        replica_config.raft.heartbeat_interval = heartbeat;
        replica_config.raft.election_timeout_min = 6 * heartbeat;
        replica_config.raft.election_timeout_max = 12 * heartbeat;
        let host = Host::start(
            dir,
            Environment::default(),
            me as u64,
            peers,
            replica_config,
        )
        .map_err(host_error)?;
        for (id, addr) in &nodes.dial {
            host.dial_through(*id as u64, addr.clone());
        }
        let host = Arc::new(host);
        let addr = nodes.own().raft_addr();
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|error| ClusterError::Listen {
                addr: addr.clone(),
                error,
            })?;
        let serving = host.serve_raft(listener);
        let members: Vec<u64> = nodes.ids().iter().map(|id| *id as u64).collect();
        let own = dir.join(crate::server::CLUSTER_NODE_DIR);
        let rejoining = match rejoin::load(&own)? {
            Some(record) => Some(rejoin::Rejoining::new(own, record)),
            None => Cluster::detect_rejoin(&host, &members, own).await?,
        };
        match &rejoining {
            Some(r) => {
                r.open(&host, metadata_group(), &members, Default::default())
                    .await?;
                r.open(&host, offsets_group(), &members, Default::default())
                    .await?;
            }
            None => {
                host.add_group(metadata_group(), &members)
                    .await
                    .map_err(host_error)?;
                host.add_group(offsets_group(), &members)
                    .await
                    .map_err(host_error)?;
            }
        }
        let (applied, _) = watch::channel(0);
        let cluster = Arc::new(Cluster {
            cluster_id: cluster_id(&nodes),
            nodes,
            host: Arc::clone(&host),
            image: RwLock::new(Image::default()),
            applied,
            writing: Default::default(),
            changes: Default::default(),
            reconciled: Default::default(),
            remote: Default::default(),
            coordinating: AtomicU64::new(0),
            controller_ready: AtomicU64::new(0),
            dir: dir.to_path_buf(),
            rejoining,
            tasks: Default::default(),
        });
        let applier = Arc::clone(&cluster);
        let applying = tokio::spawn(async move {
            loop {
                applier.apply_committed().await;
                tokio::time::sleep(APPLY_EVERY).await;
            }
        });
        let balancing = host.keep_balanced(BALANCE_EVERY);
        let asking = remote::keep_asking(Arc::clone(&cluster));
        let retaining = retention::keep_enforcing(Arc::clone(&cluster), tuning.retention_check);
        cluster
            .tasks
            .lock()
            .extend([serving, applying, balancing, asking, retaining]);
        Ok(cluster)
    }

    /// Whether this node lost its data (a metadata replica with no raft state while another
    /// node has one) and so rejoins: records the rejoin in `own` before any group opens. A new
    /// cluster (every other node answers it holds nothing) is not a rejoin; while a node does
    /// not answer and none that does holds state, this waits (docs/design.md, "A wiped node
    /// rejoins under its id").
    async fn detect_rejoin(
        host: &Host,
        members: &[u64],
        own: PathBuf,
    ) -> Result<Option<rejoin::Rejoining>, ClusterError> {
        let group = metadata_group();
        if !matches!(host.local_state(&group), Ok(s) if !s.holds_state()) {
            return Ok(None);
        }
        match rejoin::hear_every_member(host, &group, members).await {
            rejoin::Decision::Rejoin(_, metadata_end) => {
                let record = rejoin::RejoinRecord {
                    metadata_end,
                    floors: BTreeMap::new(),
                };
                rejoin::save(&own, &record)?;
                tracing::warn!(
                    metadata_end,
                    "node {} has no raft state while another node has: it rejoins as a member \
                     that lost its data (a wiped data directory, or a node new to a formed \
                     cluster)",
                    host.id()
                );
                Ok(Some(rejoin::Rejoining::new(own, record)))
            }
            _ => Ok(None),
        }
    }

    /// The range of `n` this node's producer ids (`n * 1024 + node id`) come from: its
    /// incarnation's (docs/design.md, "A wiped node rejoins under its id", producer ids).
    pub fn producer_id_range(&self) -> Result<std::ops::Range<i64>, ProducerIdsUnavailable> {
        let Some(r) = &self.rejoining else {
            return Ok(0..1 << INCARNATION_BITS);
        };
        let floor = r
            .record()
            .floors
            .get(&metadata_group().to_string())
            .copied();
        let Some(term) = floor.map(|f| f.term) else {
            return Err(ProducerIdsUnavailable::NotYet);
        };
        if term >= MAX_INCARNATION {
            return Err(ProducerIdsUnavailable::Exhausted(term));
        }
        match self.host.status(&metadata_group()) {
            Ok(s) if s.leader.is_some() && s.term >= term => {
                let n = (term as i64) << INCARNATION_BITS;
                Ok(n..n + (1 << INCARNATION_BITS))
            }
            _ => Err(ProducerIdsUnavailable::NotYet),
        }
    }

    /// This node's id.
    pub fn me(&self) -> i32 {
        self.nodes.me
    }

    /// The controller (the metadata group's leader), if known.
    pub fn controller(&self) -> Option<i32> {
        self.host
            .status(&metadata_group())
            .ok()
            .and_then(|s| s.leader)
            .map(|l| l as i32)
    }

    /// The group coordinator: the offsets group's leader, if known.
    pub fn coordinator(&self) -> Option<i32> {
        self.host
            .status(&offsets_group())
            .ok()
            .and_then(|s| s.leader)
            .map(|l| l as i32)
    }

    /// Whether this node answers as the group coordinator: it leads the offsets group and
    /// loaded the coordinator's state in its current term.
    pub fn coordinating(&self) -> bool {
        match self.host.status(&offsets_group()) {
            Ok(s) => {
                s.leader == Some(self.me() as u64)
                    && s.term == self.coordinating.load(Ordering::Acquire)
            }
            Err(_) => false,
        }
    }

    /// The term in which this node coordinates (it leads the offsets group and loaded the
    /// coordinators' state in that term); 0 when it does not. A transaction's markers are
    /// written for as long as it stays the same.
    pub fn coordinating_term(&self) -> u64 {
        if self.coordinating() {
            self.coordinating.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Whether this node's image has applied everything the metadata log committed before
    /// the call: the coordinator checks committed partitions against the image, so it waits
    /// for this before it loads.
    ///
    /// A read barrier through the controller ([`Host::settled_at`]): its last entry once it
    /// has applied all it holds, reached by this node's replica and then by its image. This
    /// node's own high watermark is no proof: written lazily, a restarted node's may miss a
    /// topic created long before, and openraft restores a restarted controller in its own
    /// term, with no entry of its own to commit first. A coordinator loaded on such an image
    /// answered a member's commits UNKNOWN_TOPIC_OR_PARTITION (seen in CI after a node
    /// restarted; `kills::a_restarted_cluster_coordinates_only_once_its_image_knows_the_topics`).
    pub async fn image_caught_up(&self) -> bool {
        let group = metadata_group();
        let (Ok(replica), Some(controller)) = (self.host.replica(&group), self.controller()) else {
            return false;
        };
        let settled = tokio::time::timeout(
            Duration::from_secs(1),
            self.host.settled_at(&group, controller as u64),
        )
        .await;
        let Ok(Ok(Some(settled))) = settled else {
            return false;
        };
        self.image_reached(&replica, settled)
    }

    /// Whether this node's replica of the metadata group applied entry `settled` and its
    /// image everything the replica applied.
    fn image_reached(&self, replica: &Replica, settled: u64) -> bool {
        let applied = self
            .host
            .status(&metadata_group())
            .ok()
            .and_then(|s| s.applied);
        applied >= Some(settled) && self.image.read().next_offset >= replica.log().high_watermark()
    }

    /// The coordinator's log on this node: its replica of the offsets group.
    pub fn offsets_log(&self) -> Result<crate::offsets_log::OffsetsLog, HostError> {
        let group = offsets_group();
        let replica = self.host.replica(&group)?;
        let path = self.dir.join(format!("{}-{}", OFFSETS_TOPIC, 0));
        Ok(crate::offsets_log::OffsetsLog::replicated(replica, path))
    }

    /// The transaction coordinator's log on this node: its replica of the offsets group,
    /// which the group coordinator's records share.
    pub fn transactions_log(&self) -> Result<crate::txn_coordinator::Txns, HostError> {
        let replica = self.host.replica(&offsets_group())?;
        let path = self.dir.join(format!("{}-{}", OFFSETS_TOPIC, 0));
        Ok(crate::txn_coordinator::Txns::replicated(replica, path))
    }

    /// The share coordinator's state log on this node: its replica of the offsets group,
    /// which the group coordinator's records share.
    pub fn share_state_log(&self) -> Result<crate::share::state_log::ShareStateLog, HostError> {
        let replica = self.host.replica(&offsets_group())?;
        let path = self.dir.join(format!("{}-{}", OFFSETS_TOPIC, 0));
        Ok(crate::share::state_log::ShareStateLog::replicated(
            replica, path,
        ))
    }

    /// Whether partition `index` of `topic` is in the image.
    pub fn partition_exists(&self, topic: &str, index: i32) -> bool {
        self.replicas_of(topic, index).is_some()
    }

    /// Runs `task` until the cluster closes.
    pub fn keep(&self, task: JoinHandle<()>) {
        self.tasks.lock().push(task);
    }

    /// The image now.
    pub fn image(&self) -> parking_lot::RwLockReadGuard<'_, Image> {
        self.image.read()
    }

    /// Applies what the metadata log committed beyond the image, in offset order, then has
    /// this node follow what changed ([`Cluster::follow_image`]).
    async fn apply_committed(&self) {
        let Ok(replica) = self.host.replica(&metadata_group()) else {
            return;
        };
        let log = replica.log();
        let mut next = self.image.read().next_offset;
        let mut changes = Vec::new();
        while next < log.high_watermark() {
            let read = match log.fetch(next, 1 << 20) {
                Ok(read) if !read.bytes.is_empty() => read,
                Ok(_) => break,
                Err(e) => {
                    tracing::error!(offset = next, error = %e, "cannot read the metadata log");
                    break;
                }
            };
            let mut image = self.image.write();
            for record in ConsumerRecordIter::new(read.bytes.clone(), next) {
                match record {
                    Ok(r) => match image.apply(r.offset, r.value.as_deref().unwrap_or_default()) {
                        Ok(Applied::Nothing) => {}
                        Ok(change) => changes.push((r.offset, change)),
                        // The same on every node: the record is left out of every image.
                        Err(e) => tracing::error!(error = %e, "metadata record not applied"),
                    },
                    Err(e) => {
                        tracing::error!(offset = next, error = %e, "a damaged metadata batch");
                        break;
                    }
                }
            }
            next = read.next_offset.max(next + 1);
            image.next_offset = next;
        }
        self.changes.lock().extend(changes);
        self.follow_image(next >= log.log_end_offset()).await;
        self.applied.send_replace(next);
    }

    /// Where partition `index` of `topic` is served from.
    pub fn route(&self, topic: &str, index: i32) -> Route {
        let Some(replicas) = self.replicas_of(topic, index) else {
            return Route::Unknown;
        };
        let group = GroupId::new(topic, index);
        if let Ok(status) = self.host.status(&group) {
            if status.leader == Some(self.me() as u64) {
                if let Ok(replica) = self.host.replica(&group) {
                    return Route::Leader(replica);
                }
            }
        }
        Route::Elsewhere(self.view(topic, index, replicas))
    }

    fn replicas_of(&self, topic: &str, index: i32) -> Option<Vec<i32>> {
        let image = self.image.read();
        let t = image.topic(topic)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| t.replicas.get(i))
            .cloned()
    }

    /// Partition `index` of `topic` with `replicas`, as this node's replica sees it: raft's
    /// leader and term, and the replicas in step. A node that holds no replica names the
    /// leader and term its replicas said last ([`remote`]), every replica as in sync (it does
    /// not know their progress); before they said, a partition of one replica is led by it
    /// and any other has no leader known (LEADER_NOT_AVAILABLE: clients ask again).
    pub fn view(&self, topic: &str, index: i32, replicas: Vec<i32>) -> PartitionView {
        let group = GroupId::new(topic, index);
        match self.host.status(&group) {
            Ok(s) => PartitionView {
                leader: s.leader.map(|l| l as i32),
                epoch: i32::try_from(s.term).unwrap_or(i32::MAX),
                isr: s.in_sync().iter().map(|m| *m as i32).collect(),
                replicas,
            },
            Err(_) => match self.remote.read().get(&group) {
                Some(r) => PartitionView {
                    leader: r.leader,
                    epoch: i32::try_from(r.term).unwrap_or(i32::MAX),
                    isr: replicas.clone(),
                    replicas,
                },
                None => PartitionView {
                    leader: (replicas.len() == 1).then(|| replicas[0]),
                    epoch: -1,
                    isr: replicas.clone(),
                    replicas,
                },
            },
        }
    }

    /// Stops every raft group and closes the data directory cleanly.
    pub async fn close(&self) -> Result<(), HostError> {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        self.host.close().await
    }

    /// The data directory: the raft host's log dir (DescribeLogDirs names it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The host (tests and status).
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }
}

/// The metadata group.
pub fn metadata_group() -> GroupId {
    GroupId::new(METADATA_TOPIC, 0)
}

/// The offsets group (the group coordinator's log).
pub fn offsets_group() -> GroupId {
    GroupId::new(OFFSETS_TOPIC, 0)
}

/// A metadata record as a Kafka record batch: no key, the record's JSON as the value, no
/// producer (the controller's raft leadership orders the records).
pub fn metadata_batch(record: &MetadataRecord) -> Result<Bytes, String> {
    let value = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let now = oncelog::Clock::now_ms(&oncelog::SystemClock);
    let mut b = BatchBuilder::new();
    b.append(now, None, Some(&value), &[]);
    b.build().map(Bytes::from).map_err(|e| e.to_string())
}

/// The cluster id Metadata answers: the same on every node (from the node list).
fn cluster_id(nodes: &ClusterNodes) -> String {
    // FNV-1a over the node list: stable across releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (id, a) in &nodes.nodes {
        for b in format!("{id}={}:{}:{};", a.host, a.kafka_port, a.raft_port).bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("oncelog-cluster-{hash:016x}")
}
