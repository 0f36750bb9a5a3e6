//! One replica of a partition: its log, raft over it, and what a broker calls.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncelog::{
    AppendOutcome, CleanupPolicy, Environment, FlushPolicy, HighWatermarkPolicy, Log, LogConfig,
};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{RaftNetworkFactory, SnapshotPolicy};
use serde::{Deserialize, Serialize};

use crate::store::{LogStore, Partition, StateMachine};
use crate::{Node, NodeId, Raft, Request, Response, TypeConfig};

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// The partition log's configuration. The replica sets three fields itself: the high
    /// watermark is raft's commit point ([`HighWatermarkPolicy::SetByCaller`]), appends are
    /// made durable by raft's storage once per group of entries ([`FlushPolicy::Manual`]), and
    /// the cleanup policy must be `delete` (compaction is not replicated).
    pub log: LogConfig,
    /// openraft's configuration ([`ReplicaConfig::default`] tunes it for a partition).
    pub raft: openraft::Config,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            log: LogConfig::default(),
            raft: openraft::Config {
                cluster_name: "oncelog".into(),
                heartbeat_interval: 50,
                election_timeout_min: 300,
                election_timeout_max: 600,
                // A snapshot records only where it is (its image is read when a follower
                // needs one), so they can be frequent: each lets raft forget the entries it
                // covers, which bounds the index of live entries kept in memory.
                snapshot_policy: SnapshotPolicy::LogsSinceLast(4096),
                max_in_snapshot_log_to_keep: 4096,
                purge_batch_size: 256,
                max_payload_entries: 256,
                ..openraft::Config::default()
            },
        }
    }
}

/// What an acknowledged append answers: the library's [`AppendOutcome`] once a majority has
/// the batch, reduced to its offsets. The one answer of an append at every layer: the state
/// machine's ([`crate::Response::Acked`]), [`Replica::append`]'s, and the client protocol's
/// ([`crate::client::ClientReply::Acked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Written and committed at these offsets.
    Appended {
        /// First offset.
        first_offset: i64,
        /// Last offset.
        last_offset: i64,
    },
    /// A retry of a committed batch: the original's offsets.
    Duplicate {
        /// First offset.
        first_offset: i64,
        /// Last offset.
        last_offset: i64,
    },
}

impl From<&AppendOutcome> for Ack {
    fn from(outcome: &AppendOutcome) -> Ack {
        let (first_offset, last_offset) = outcome.offsets();
        if outcome.is_duplicate() {
            Ack::Duplicate {
                first_offset,
                last_offset,
            }
        } else {
            Ack::Appended {
                first_offset,
                last_offset,
            }
        }
    }
}

impl Ack {
    /// The batch's first and last offsets.
    pub fn offsets(self) -> (i64, i64) {
        match self {
            Ack::Appended {
                first_offset,
                last_offset,
            }
            | Ack::Duplicate {
                first_offset,
                last_offset,
            } => (first_offset, last_offset),
        }
    }
}

/// Why a replica refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// Appends go to the leader (Kafka's NOT_LEADER_OR_FOLLOWER); it is named when known.
    #[error("not the leader (the leader is {leader:?})")]
    NotLeader {
        /// The current leader, if this replica knows it.
        leader: Option<NodeId>,
    },
    /// The leader's log refused the batch; nothing was written for it.
    #[error("the leader's log refused the batch ({kind}): {message}")]
    Refused {
        /// [`oncelog::AppendError::kind`].
        kind: String,
        /// The error's message.
        message: String,
    },
    /// The partition log did not open.
    #[error("{0}")]
    Open(#[from] oncelog::OpenError),
    /// raft's view of the partition did not open (a malformed `raft-state.json`, a log that
    /// lost entries raft holds).
    #[error("{0}")]
    Storage(String),
    /// A configuration the replica cannot run with.
    #[error("configuration: {0}")]
    Config(String),
    /// openraft failed (a fatal storage error, a shut-down node) or the write's outcome is
    /// unknown: a retry of the same batch is answered as a duplicate if it was written.
    #[error("raft: {0}")]
    Raft(String),
}

/// One replica of a partition.
pub struct Replica {
    id: NodeId,
    raft: Raft,
    partition: Arc<Partition>,
}

impl Replica {
    /// Opens (or creates) the replica `id` whose log is in `dir`, and starts raft on it with
    /// `network` to reach the others. A new group is formed by [`Replica::initialize`] on one
    /// of its members.
    pub async fn open<N>(
        id: NodeId,
        dir: impl AsRef<Path>,
        env: Environment,
        config: ReplicaConfig,
        network: N,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        if config.log.cleanup_policy != CleanupPolicy::Delete {
            return Err(ReplicaError::Config(format!(
                "cleanup_policy {} is not replicated: only delete",
                config.log.cleanup_policy.name()
            )));
        }
        let log_config = config
            .log
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .flush_policy(FlushPolicy::Manual)
            .build()
            .map_err(oncelog::OpenError::from)?;
        let fs = Arc::clone(&env.fs);
        let log = Log::open_in(env, dir, log_config)?;
        let partition = Arc::new(Partition::open(log, fs).map_err(ReplicaError::Storage)?);
        let raft_config = Arc::new(
            config
                .raft
                .validate()
                .map_err(|e| ReplicaError::Config(e.to_string()))?,
        );
        let raft = Raft::new(
            id,
            raft_config,
            network,
            LogStore(Arc::clone(&partition)),
            StateMachine(Arc::clone(&partition)),
        )
        .await
        .map_err(|e| ReplicaError::Raft(e.to_string()))?;
        Ok(Replica {
            id,
            raft,
            partition,
        })
    }

    /// Forms a new group of `members` (on one of them, once): the first entry of its log.
    pub async fn initialize(&self, members: BTreeMap<NodeId, Node>) -> Result<(), ReplicaError> {
        self.raft
            .initialize(members)
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))
    }

    /// Appends a client batch (as a Kafka producer sends it) through the leader: answered once
    /// a majority has it durably, with its offsets, or with the original's if it is a retry of
    /// a batch its producer wrote before, under this leader or an earlier one.
    pub async fn append(&self, batch: Bytes) -> Result<Ack, ReplicaError> {
        match self.raft.client_write(Request::Produce(batch)).await {
            Ok(written) => match written.data {
                Response::Acked(ack) => Ok(ack),
                Response::Refused { kind, message } => Err(ReplicaError::Refused { kind, message }),
                Response::Replicated => Err(ReplicaError::Raft(
                    "the entry was applied without the leader's answer (leadership changed)".into(),
                )),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ReplicaError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(e) => Err(ReplicaError::Raft(e.to_string())),
        }
    }

    /// Deletes what the log's retention rules (`retention_bytes`, `retention_ms`) let go,
    /// never past raft's purge point: what openraft may still send a lagging follower stays.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<oncelog::RetentionReport, ReplicaError> {
        let bound = self.partition.purge_end();
        self.partition
            .log()
            .maintenance()
            .enforce_retention_below(now_ms, bound)
            .map_err(|e| ReplicaError::Storage(e.to_string()))
    }

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The partition log (reads: [`Log::fetch`] serves what is committed).
    pub fn log(&self) -> &Log {
        self.partition.log()
    }

    /// raft's view of the partition.
    pub fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// openraft's handle (metrics, membership changes, leadership).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The leader this replica knows of.
    pub async fn leader(&self) -> Option<NodeId> {
        self.raft.current_leader().await
    }

    /// Stops raft; the log closes when the last handle goes.
    pub async fn shutdown(&self) -> Result<(), ReplicaError> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| ReplicaError::Raft(e.to_string()))
    }

    /// A wait of at most `timeout` until this replica has applied `index` (tests).
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), ReplicaError> {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "applied")
            .await
            .map(|_| ())
            .map_err(|e| ReplicaError::Raft(e.to_string()))
    }
}
