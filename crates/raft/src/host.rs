//! Many partitions' replicas in one process (docs/design.md, "Many partitions per process"):
//! one openraft group per partition over one `oncelog::LogManager`, one connection per peer
//! node shared by all groups ([`crate::network::mux`]), leaders spread over the nodes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oncelog::{Environment, FlushPolicy, HighWatermarkPolicy, LogConfig};
use oncelog::{JobIntervals, LogManager, ManagerConfig, ManagerError, PartitionConfig};
use openraft::error::{InitializeError, RaftError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::network::mux::{self, Groups, Mux};
use crate::{GroupId, Node, NodeId, Replica, ReplicaConfig, ReplicaError};

/// How long [`Host::balance`] waits before it asks for an election in the same group again.
const BALANCE_BACKOFF: Duration = Duration::from_secs(3);

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
    /// How many: the groups `topic-0` .. `topic-(partitions - 1)`.
    pub partitions: i32,
    /// Each replica's configuration (its `log` field is not used: the manager's is).
    pub replica: ReplicaConfig,
}

/// Many partitions' replicas in one process.
pub struct Host {
    config: HostConfig,
    /// When [`Host::balance`] last asked for an election, by group.
    asked: parking_lot::Mutex<std::collections::HashMap<GroupId, std::time::Instant>>,
    /// Set by the first [`Host::shutdown`].
    stopped: std::sync::atomic::AtomicBool,
    /// Until [`Host::close`].
    manager: parking_lot::Mutex<Option<LogManager>>,
    mux: Mux,
    groups: Arc<Groups>,
    replicas: BTreeMap<GroupId, Arc<Replica>>,
}

impl Host {
    /// The manager configuration raft needs: every partition's log with the high watermark set
    /// by raft, flushed by raft, `delete` only; the retention job off (retention must stop at
    /// raft's purge point: [`Replica::enforce_retention`]).
    pub fn manager_config() -> Result<ManagerConfig, HostError> {
        let log = LogConfig::default()
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .flush_policy(FlushPolicy::Manual)
            .build()
            .map_err(|e| HostError::Config(e.to_string()))?;
        let jobs = JobIntervals::default().with_retention(None);
        Ok(ManagerConfig::default().with_log(log).with_jobs(jobs))
    }

    /// Opens the log dir `dir` (created if missing) with [`Host::manager_config`], creates the
    /// partitions it lacks, and starts raft on each.
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
        let fs = Arc::clone(&env.fs);
        let dirs = [dir.as_ref().to_path_buf()];
        let manager = LogManager::open_in(env, &dirs, Host::manager_config()?)?;
        let mux = Mux::new(Duration::from_millis(200));
        let groups = Arc::new(Groups::default());
        let mut replicas = BTreeMap::new();
        for p in 0..config.partitions {
            let group = GroupId::new(config.topic.clone(), p);
            let log = match manager.get(&group.topic, p) {
                Ok(log) => log,
                Err(ManagerError::UnknownPartition { .. }) => {
                    manager.create(&group.topic, p, PartitionConfig::default())?
                }
                Err(e) => return Err(e.into()),
            };
            let replica = Replica::open_log(
                config.id,
                log,
                Arc::clone(&fs),
                config.replica.clone(),
                mux.group(group.clone()),
            )
            .await
            .map_err(|error| HostError::Replica {
                group: group.clone(),
                error: Box::new(error),
            })?;
            groups.add(group.clone(), replica.raft().clone());
            replicas.insert(group, Arc::new(replica));
        }
        Ok(Host {
            config,
            stopped: Default::default(),
            asked: Default::default(),
            manager: parking_lot::Mutex::new(Some(manager)),
            mux,
            groups,
            replicas,
        })
    }

    /// Forms every group with all peers as members (on one node, the first time); a group
    /// that already has a membership is left as it is.
    pub async fn initialize(&self) -> Result<(), HostError> {
        for (group, r) in &self.replicas {
            match r.raft().initialize(self.config.peers.clone()).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => {
                    return Err(HostError::Replica {
                        group: group.clone(),
                        error: Box::new(ReplicaError::Raft(e.to_string())),
                    })
                }
            }
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
        self.config.id
    }

    /// The replica of a partition.
    pub fn replica(&self, group: &GroupId) -> Result<&Arc<Replica>, HostError> {
        self.replicas
            .get(group)
            .ok_or_else(|| HostError::UnknownPartition(group.clone()))
    }

    /// Every replica, by partition.
    pub fn replicas(&self) -> &BTreeMap<GroupId, Arc<Replica>> {
        &self.replicas
    }

    /// The node a group prefers as its leader: partition `i` the `i mod n`-th of the peers.
    pub fn preferred(&self, group: &GroupId) -> NodeId {
        let ids: Vec<NodeId> = self.config.peers.keys().copied().collect();
        ids[group.partition.unsigned_abs() as usize % ids.len()]
    }

    /// Asks for an election in each group that prefers this node and is led by another, if
    /// this replica has applied all it holds and has not asked in that group for a few
    /// seconds; raft's vote decides. Returns how many it asked for.
    pub async fn balance(&self) -> usize {
        let mut asked = 0;
        for (group, r) in &self.replicas {
            if self.preferred(group) != self.config.id {
                continue;
            }
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
            if matches!(leader, Some(l) if l != self.config.id)
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
        for (group, r) in &self.replicas {
            self.groups.remove(group);
            r.shutdown().await.map_err(|error| HostError::Replica {
                group: group.clone(),
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
