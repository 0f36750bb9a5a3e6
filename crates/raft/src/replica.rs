//! One replica of a partition (or of a partition set, docs/design.md "Partition sets": several
//! partitions replicated by one raft group): its logs, raft over them, and what a broker
//! calls.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::Instant;

use bytes::Bytes;
use oncelog::{
    AppendOutcome, AppendWrites, CleanupPolicy, Environment, FlushPolicy, HighWatermarkPolicy, Log,
    LogConfig, Preallocation,
};
use openraft::error::ClientWriteError;
use openraft::{RaftNetworkFactory, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::store::{LogStore, Partition, StateMachine, Written};
use crate::{Answer, Node, NodeId, Raft, Request, Response, TypeConfig};

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
    /// The most client batches' bytes one raft entry takes ([`Replica::append`]: the batches
    /// waiting when an entry is proposed go in it, up to this; a larger batch goes alone).
    pub max_entry_bytes: usize,
    /// How many entries of client batches may be proposed and not yet answered: while they
    /// are, new batches wait and go together in the next. One (the default) was the fastest
    /// measured: openraft 0.9 syncs each entry on the leader before it replicates it, so a
    /// second entry in flight only splits the batches over two syncs (docs/benchmarks.md).
    pub max_entries_in_flight: usize,
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
            max_entry_bytes: 1 << 20,
            max_entries_in_flight: 1,
        }
    }
}

/// What an acknowledged append answers: the library's [`AppendOutcome`] once a majority has
/// the batch, reduced to its offsets. The one answer of an append at every layer: the state
/// machine's ([`crate::Answer::Acked`]), [`Replica::append`]'s, and the client protocol's
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

impl ReplicaError {
    /// The same answer for another batch of the entry (only raft's answers are given to many).
    fn again(&self) -> ReplicaError {
        match self {
            ReplicaError::NotLeader { leader } => ReplicaError::NotLeader { leader: *leader },
            other => ReplicaError::Raft(other.to_string()),
        }
    }
}

/// One replica of a partition, or of a partition set.
pub struct Replica {
    id: NodeId,
    raft: Raft,
    partition: Arc<Partition>,
    /// To the task that proposes the waiting client batches as entries.
    proposals: mpsc::Sender<Proposal>,
}

/// A client batch waiting to go into an entry, and where its answers go.
struct Proposal {
    /// The partition of the group it is for (its place in the set).
    member: u32,
    batch: Bytes,
    answer: oneshot::Sender<Result<Ack, ReplicaError>>,
    /// The leader's own answer, once the entry is durable in its log.
    written: oneshot::Sender<Answer>,
}

/// A batch queued by [`Replica::submit`], whose answer is still to come.
pub struct Submitted {
    answered: oneshot::Receiver<Result<Ack, ReplicaError>>,
    written: oneshot::Receiver<Answer>,
}

impl Submitted {
    /// Raft's answer to the batch, as [`Replica::append`] gives it: once a majority holds it
    /// durably (Kafka's acks=all).
    pub async fn answer(self) -> Result<Ack, ReplicaError> {
        self.answered.await.map_err(|_| shutting_down())?
    }

    /// The leader's own answer to the batch, once the entry that holds it is durable in the
    /// leader's log, before any follower has it (Kafka's acks=1): the answer the commit gives
    /// too, unless the entry is lost with this leader (a new leader elected without it
    /// truncates it: an acknowledged batch lost, as with Kafka's acks=1). If this replica
    /// never wrote the entry (it was not the leader, raft failed first), raft's answer.
    pub async fn written(self) -> Result<Ack, ReplicaError> {
        match self.written.await {
            Ok(answer) => answer_result(answer),
            Err(_) => self.answered.await.map_err(|_| shutting_down())?,
        }
    }
}

/// A batch's answer as [`Replica::append`] gives it.
fn answer_result(answer: Answer) -> Result<Ack, ReplicaError> {
    match answer {
        Answer::Acked(ack) => Ok(ack),
        Answer::Refused { kind, message } => Err(ReplicaError::Refused { kind, message }),
    }
}

fn shutting_down() -> ReplicaError {
    ReplicaError::Raft("the replica is shutting down".into())
}

/// How many client batches may wait for an entry before [`Replica::append`] waits to queue.
const PROPOSALS_QUEUED: usize = 4096;

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
        Replica::open_dirs(id, &[dir.as_ref()], env, config, network).await
    }

    /// [`Replica::open`] for a partition set (docs/design.md, "Partition sets"): the logs in
    /// `dirs`, in the set's order (raft's files in the first), one raft group over them all.
    pub async fn open_dirs<N>(
        id: NodeId,
        dirs: &[&Path],
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
        let log_config = synced_every_entry(config.log.clone())
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .flush_policy(FlushPolicy::Manual)
            .build()
            .map_err(oncelog::OpenError::from)?;
        let fs = Arc::clone(&env.fs);
        let mut logs = Vec::with_capacity(dirs.len());
        for dir in dirs {
            logs.push(Arc::new(Log::open_in(
                env.clone(),
                dir,
                log_config.clone(),
            )?));
        }
        Replica::start(id, logs, fs, config, network, None).await
    }

    /// Starts raft on a partition log opened elsewhere (a `LogManager`'s, docs/design.md
    /// "Many partitions per process"), whose configuration must already be what
    /// [`Replica::open`] sets: [`HighWatermarkPolicy::SetByCaller`], [`FlushPolicy::Manual`]
    /// and the `delete` cleanup policy (a typed [`ReplicaError::Config`] otherwise).
    /// `config.log` is not used.
    pub async fn open_log<N>(
        id: NodeId,
        log: Arc<Log>,
        fs: Arc<dyn oncelog::io::FileSystem>,
        config: ReplicaConfig,
        network: N,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        Replica::open_set(id, vec![log], fs, config, network).await
    }

    /// [`Replica::open_log`] for a partition set (docs/design.md, "Partition sets"): one raft
    /// group over the logs of several partitions, in the set's order, which every replica of
    /// the set gives them (raft's files are in the first one's directory). Each log's
    /// configuration must be as [`Replica::open_log`] requires.
    pub async fn open_set<N>(
        id: NodeId,
        logs: Vec<Arc<Log>>,
        fs: Arc<dyn oncelog::io::FileSystem>,
        config: ReplicaConfig,
        network: N,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        for log in &logs {
            let c = log.config();
            let wrong = if c.high_watermark != HighWatermarkPolicy::SetByCaller {
                Some("the high watermark policy must be SetByCaller")
            } else if c.flush_policy != FlushPolicy::Manual {
                Some("the flush policy must be Manual")
            } else if c.cleanup_policy != CleanupPolicy::Delete {
                Some("the cleanup policy must be delete (compaction is not replicated)")
            } else {
                None
            };
            if let Some(why) = wrong {
                return Err(ReplicaError::Config(format!(
                    "the log in {}: {why}",
                    log.dir().display()
                )));
            }
        }
        Replica::start(id, logs, fs, config, network, None).await
    }

    /// [`Replica::open_log`] for a member that lost its data and rejoins (docs/design.md, "A
    /// wiped node rejoins under its id"): `vote` (a term above every term the member may have
    /// voted in) is saved before raft starts, unless a vote of that term or later is saved.
    pub async fn open_log_with_vote<N>(
        id: NodeId,
        log: Arc<Log>,
        fs: Arc<dyn oncelog::io::FileSystem>,
        config: ReplicaConfig,
        network: N,
        vote: openraft::Vote<NodeId>,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        Replica::start(id, vec![log], fs, config, network, Some(vote)).await
    }

    /// [`Replica::open_log_with_vote`] for a partition set ([`Replica::open_set`]).
    pub async fn open_set_with_vote<N>(
        id: NodeId,
        logs: Vec<Arc<Log>>,
        fs: Arc<dyn oncelog::io::FileSystem>,
        config: ReplicaConfig,
        network: N,
        vote: openraft::Vote<NodeId>,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        Replica::start(id, logs, fs, config, network, Some(vote)).await
    }

    async fn start<N>(
        id: NodeId,
        logs: Vec<Arc<Log>>,
        fs: Arc<dyn oncelog::io::FileSystem>,
        config: ReplicaConfig,
        network: N,
        vote: Option<openraft::Vote<NodeId>>,
    ) -> Result<Replica, ReplicaError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        let partition = Arc::new(Partition::open_set(logs, fs).map_err(ReplicaError::Storage)?);
        if let Some(vote) = vote {
            partition.raise_vote(vote).map_err(ReplicaError::Storage)?;
        }
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
        let (proposals, waiting) = mpsc::channel(PROPOSALS_QUEUED);
        tokio::spawn(propose(
            raft.clone(),
            partition.written(),
            waiting,
            proposals.downgrade(),
            config.max_entry_bytes,
            config.max_entries_in_flight.max(1),
        ));
        Ok(Replica {
            id,
            raft,
            partition,
            proposals,
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
    /// a batch its producer wrote before, under this leader or an earlier one. Batches appended
    /// while earlier ones are being replicated go together in one entry (docs/design.md,
    /// "Entries are runs of batches"), in the order they were appended.
    pub async fn append(&self, batch: Bytes) -> Result<Ack, ReplicaError> {
        self.submit(batch).await?.answer().await
    }

    /// [`Replica::append`] to partition `member` of a set (its place in the set's order; 0 for
    /// a partition of its own): batches for any partition of the set go together in one
    /// entry. A `member` the set does not have is refused.
    pub async fn append_to(&self, member: usize, batch: Bytes) -> Result<Ack, ReplicaError> {
        self.submit_to(member, batch).await?.answer().await
    }

    /// [`Replica::append`] in two steps: queues the batch (batches queued one after the other
    /// go into the log in that order, which a pipelining idempotent producer needs: a broker
    /// queues a connection's batches in request order and waits for the answers alongside),
    /// then [`Submitted::answer`] waits for raft's answer.
    pub async fn submit(&self, batch: Bytes) -> Result<Submitted, ReplicaError> {
        self.submit_to(0, batch).await
    }

    /// [`Replica::submit`] to partition `member` of a set ([`Replica::append_to`]).
    pub async fn submit_to(&self, member: usize, batch: Bytes) -> Result<Submitted, ReplicaError> {
        let member = self.member(member)?;
        let (answer, answered) = oneshot::channel();
        let (told, written) = oneshot::channel();
        self.proposals
            .send(Proposal {
                member,
                batch,
                answer,
                written: told,
            })
            .await
            .map_err(|_| shutting_down())?;
        Ok(Submitted { answered, written })
    }

    /// Writes a transaction coordinator's COMMIT or ABORT marker through the leader (Kafka's
    /// WriteTxnMarkers for this partition): an entry of its own, answered once a majority has
    /// it, with the marker's offset, or refused as the leader's log refuses it (a stale
    /// producer or coordinator epoch). An outcome raft does not know is safe to retry: a marker
    /// written twice completes nothing the second time.
    pub async fn append_marker(&self, marker: &oncelog::TxnMarker) -> Result<Ack, ReplicaError> {
        self.append_marker_to(0, marker).await
    }

    /// [`Replica::append_marker`] to partition `member` of a set.
    pub async fn append_marker_to(
        &self,
        member: usize,
        marker: &oncelog::TxnMarker,
    ) -> Result<Ack, ReplicaError> {
        let member = self.member(member)?;
        let written = self
            .raft
            .client_write(Request::Marker(member, crate::Marker::from(marker)))
            .await;
        match written {
            Ok(w) => match w.data {
                Response::Answers(mut a) if a.len() == 1 => match a.remove(0) {
                    Answer::Acked(ack) => Ok(ack),
                    Answer::Refused { kind, message } => {
                        Err(ReplicaError::Refused { kind, message })
                    }
                },
                _ => Err(ReplicaError::Raft(
                    "the marker was applied without the leader's answer (leadership changed)"
                        .into(),
                )),
            },
            Err(openraft::error::RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
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
        self.enforce_retention_in(0, now_ms)
    }

    /// [`Replica::enforce_retention`] on partition `member` of a set.
    pub fn enforce_retention_in(
        &self,
        member: usize,
        now_ms: i64,
    ) -> Result<oncelog::RetentionReport, ReplicaError> {
        let m = self.member(member)? as usize;
        let bound = self.partition.purge_end_in(m);
        self.partition.logs()[m]
            .maintenance()
            .enforce_retention_below(now_ms, bound)
            .map_err(|e| ReplicaError::Storage(e.to_string()))
    }

    /// Raises this replica's log start toward `offset` (Kafka's DeleteRecords, decided for the
    /// partition elsewhere and applied by every replica: docs/design.md, "Retention and
    /// DeleteRecords in a cluster"), as far as is safe now: never past raft's purge point
    /// (what openraft may still send to a lagging follower stays readable, and a restart
    /// finds the log starting at or below the purge point, as the store requires), and only
    /// to the start of a batch (a snapshot image starts at the log start, and its producer
    /// state is rebuilt at a batch boundary). Called again as the purge point moves, it
    /// reaches `offset` in the end. Durable before it returns ([`Log::delete_records`]); the
    /// segments wholly below the new start go at the next [`Replica::enforce_retention`].
    /// Answers the log start after.
    pub fn raise_log_start(&self, offset: i64) -> Result<i64, ReplicaError> {
        self.raise_log_start_in(0, offset)
    }

    /// [`Replica::raise_log_start`] on partition `member` of a set.
    pub fn raise_log_start_in(&self, member: usize, offset: i64) -> Result<i64, ReplicaError> {
        let m = self.member(member)? as usize;
        let log = &self.partition.logs()[m];
        let start = log.log_start_offset();
        let bound = offset.min(self.partition.purge_end_in(m));
        if bound <= start {
            return Ok(start);
        }
        let storage = |e: &dyn std::fmt::Display| {
            ReplicaError::Storage(format!(
                "raising the log start of {} to {bound}: {e}",
                log.dir().display()
            ))
        };
        // The batch that holds `bound` starts at or below it (the log end, when `bound` is
        // there, is a boundary too).
        let bytes = log.read(bound, 1).map_err(|e| storage(&e))?;
        let boundary = match oncelog::format::BatchIter::new(&bytes).next() {
            Some(Ok((_, batch))) => batch.base_offset().min(bound),
            Some(Err(e)) => return Err(storage(&format!("{e:?}"))),
            None => bound,
        };
        if boundary <= start {
            return Ok(start);
        }
        log.delete_records(boundary).map_err(|e| storage(&e))
    }

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The partition log (reads: [`Log::fetch`] serves what is committed); a set's first
    /// partition's.
    pub fn log(&self) -> &Log {
        self.partition.log()
    }

    /// The log of partition `member` of a set, if it has one.
    pub fn log_of(&self, member: usize) -> Option<&Log> {
        self.partition.logs().get(member).map(|l| &**l)
    }

    /// How many partitions the replica's group replicates (one, or a set's).
    pub fn members(&self) -> usize {
        self.partition.logs().len()
    }

    /// `member` as an entry names it, if the set has it.
    fn member(&self, member: usize) -> Result<u32, ReplicaError> {
        if member < self.members() {
            Ok(member as u32)
        } else {
            Err(ReplicaError::Config(format!(
                "partition {member} of a set of {}",
                self.members()
            )))
        }
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

/// How long an entry proposed right after one was answered waits for the batches it expects
/// ([`propose`]); tokio's timer rounds it up to its next millisecond.
const LINGER: Duration = Duration::from_micros(500);

/// Proposes the client batches waiting as entries, in the order they came: each entry takes
/// every batch waiting when a slot of `in_flight` frees (up to `max_bytes`), so under load one
/// durable write and one replication round serve many batches.
///
/// The entry proposed when an answered one gives its slot back also waits, for up to
/// [`LINGER`], until it holds as many batches as were waiting or being answered then: the
/// appenders just answered send their next batches after a hop (over a network, a round trip
/// to the client), and without the wait the entry would leave before them, they would wait
/// out its whole round for the next, and the appenders would settle in two cohorts, each
/// entry carrying half of them (docs/benchmarks.md, "Entries as runs of batches"). A closed
/// loop of appenders comes back within the hop, so the wait ends on the count, not the timer;
/// an appender that does not come back costs one wait, since the next entry expects only what
/// came.
async fn propose(
    raft: Raft,
    written: Written,
    mut waiting: mpsc::Receiver<Proposal>,
    queue: mpsc::WeakSender<Proposal>,
    max_bytes: usize,
    in_flight: usize,
) {
    let slots = Arc::new(Semaphore::new(in_flight));
    // How many batches the next entry expects: set when an entry is answered.
    let expected = Arc::new(AtomicUsize::new(0));
    // Each entry's notice: the key of its waiters for the leader's own answers.
    let mut notices = 0u64;
    let mut propose_run = |run, slot| {
        notices += 1;
        let returning = Returning {
            queue: queue.clone(),
            expected: Arc::clone(&expected),
        };
        propose_run(&raft, &written, notices, run, slot, returning)
    };
    while let Some(first) = waiting.recv().await {
        // A slot first: the batches that come while entries are in flight join this one.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let want = expected.swap(0, Ordering::Relaxed);
        let linger = Instant::now() + LINGER;
        let mut bytes = first.batch.len();
        let mut run = vec![first];
        while bytes < max_bytes {
            let next = match waiting.try_recv() {
                Ok(p) => p,
                Err(TryRecvError::Empty) if run.len() < want => {
                    match tokio::time::timeout_at(linger, waiting.recv()).await {
                        Ok(Some(p)) => p,
                        _ => break,
                    }
                }
                Err(_) => break,
            };
            if bytes + next.batch.len() <= max_bytes {
                bytes += next.batch.len();
                run.push(next);
            } else {
                // Too large for this entry: it leads the next (kept in order).
                propose_run(std::mem::replace(&mut run, vec![next]), None).await;
                bytes = run[0].batch.len();
            }
        }
        propose_run(run, Some(slot)).await;
    }
}

/// What an answered entry tells the next ([`propose`]): how many batches to expect.
struct Returning {
    /// The proposals' queue, to count the batches waiting in it.
    queue: mpsc::WeakSender<Proposal>,
    /// Where the count goes.
    expected: Arc<AtomicUsize>,
}

impl Returning {
    /// Sets the next entry's expectation: `answering` batches about to be answered and those
    /// waiting now (counted before the answers go out, so none is counted twice).
    fn expect(&self, answering: usize) {
        let waiting = self
            .queue
            .upgrade()
            .map_or(0, |q| q.max_capacity() - q.capacity());
        self.expected.store(answering + waiting, Ordering::Relaxed);
    }
}

/// Hands one entry of client batches to raft (in order: raft takes it before the next is
/// proposed) and answers each batch when raft answers the entry, holding `slot` until then.
async fn propose_run(
    raft: &Raft,
    waiters: &Written,
    notice: u64,
    run: Vec<Proposal>,
    slot: Option<OwnedSemaphorePermit>,
    returning: Returning,
) {
    let mut batches = Vec::with_capacity(run.len());
    let mut answers = Vec::with_capacity(run.len());
    let mut told = Vec::with_capacity(run.len());
    for p in run {
        batches.push((p.member, p.batch));
        answers.push(p.answer);
        told.push(p.written);
    }
    waiters.expect(notice, told);
    let written = match raft
        .client_write_ff(Request::Produce { batches, notice })
        .await
    {
        Ok(written) => written,
        Err(e) => {
            waiters.forget(notice);
            for a in answers {
                let _ = a.send(Err(ReplicaError::Raft(e.to_string())));
            }
            return;
        }
    };
    let waiters = waiters.clone();
    let mut metrics = raft.metrics();
    let (term, me) = {
        let m = metrics.borrow();
        (m.current_term, m.id)
    };
    tokio::spawn(async move {
        // The slot goes back with the answer, or as soon as this replica stops leading in the
        // term it proposed in: an entry of a deposed leader may never be answered (openraft
        // forgets the answer of an entry a snapshot install replaced), and a slot it held
        // would stop every later proposal.
        let mut slot = slot;
        tokio::pin!(written);
        let result = loop {
            tokio::select! {
                result = &mut written => break result,
                changed = metrics.changed(), if slot.is_some() => {
                    let leads = changed.is_ok() && {
                        let m = metrics.borrow();
                        m.current_term == term && m.current_leader == Some(me)
                    };
                    if !leads {
                        slot = None;
                    }
                }
            }
        };
        // Raft answered: the leader's own answers were given (or never will be).
        waiters.forget(notice);
        let reply: Result<Vec<Answer>, ReplicaError> = match result {
            Ok(Ok(w)) => match w.data {
                Response::Answers(a) if a.len() == answers.len() => Ok(a),
                Response::Answers(a) => Err(ReplicaError::Raft(format!(
                    "the leader answered {} batches of an entry of {}",
                    a.len(),
                    answers.len()
                ))),
                Response::Replicated => Err(ReplicaError::Raft(
                    "the entry was applied without the leader's answer (leadership changed)".into(),
                )),
            },
            Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(ReplicaError::NotLeader {
                leader: f.leader_id,
            }),
            Ok(Err(e)) => Err(ReplicaError::Raft(e.to_string())),
            Err(e) => Err(ReplicaError::Raft(format!(
                "the entry's answer was lost: {e}"
            ))),
        };
        if slot.is_some() && reply.is_ok() {
            returning.expect(answers.len());
        }
        match reply {
            Ok(each) => {
                for (a, answer) in answers.into_iter().zip(each) {
                    let _ = a.send(answer_result(answer));
                }
            }
            Err(e) => {
                for a in answers {
                    let _ = a.send(Err(e.again()));
                }
            }
        }
        // The slot goes back after the answers, and after the answered appenders had a turn
        // to queue their next batches: they go in the next entry, not one after it.
        if slot.is_some() {
            tokio::task::yield_now().await;
        }
        drop(slot);
    });
}

/// `log` with the choices a log synced at every entry wants, where they were left to
/// [`Preallocation::Auto`] and [`AppendWrites::Auto`]: raft's store syncs each entry before
/// it is reported persisted, as [`FlushPolicy::Always`] syncs each append, but under
/// [`FlushPolicy::Manual`], so `Auto` would resolve to what suits rare syncs. Zeroed steps
/// make a sync write only data (a reserved step's first sync also converts its extents, one
/// more device flush), and writes through the file spare each sync the page-table walk of a
/// map's write-back (docs/design.md, "Append writes" and "Segment space"; the gain is in
/// docs/benchmarks.md, "One device flush a round").
pub fn synced_every_entry(mut log: LogConfig) -> LogConfig {
    if log.preallocation == Preallocation::Auto {
        log.preallocation = Preallocation::Zeroed;
    }
    if log.append_writes == AppendWrites::Auto {
        log.append_writes = AppendWrites::File;
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_synced_every_entry_zeroes_ahead_and_writes_through_its_file_unless_told_otherwise() {
        let auto = synced_every_entry(LogConfig::default());
        assert_eq!(auto.preallocation, Preallocation::Zeroed);
        assert_eq!(auto.append_writes, AppendWrites::File);
        // Under raft's Manual flush, Auto alone would have chosen what suits rare syncs.
        let manual = LogConfig::default()
            .into_builder()
            .flush_policy(FlushPolicy::Manual)
            .build()
            .unwrap();
        assert!(!manual.zeroes_ahead() && !manual.writes_through_file());
        let resolved = synced_every_entry(manual);
        assert!(resolved.zeroes_ahead() && resolved.writes_through_file());
        // An explicit choice is the embedder's.
        let mut chosen = LogConfig::default();
        chosen.preallocation = Preallocation::Reserved;
        chosen.append_writes = AppendWrites::Map;
        let kept = synced_every_entry(chosen);
        assert_eq!(kept.preallocation, Preallocation::Reserved);
        assert_eq!(kept.append_writes, AppendWrites::Map);
    }

    /// 16 appenders in a closed loop, each coming back after a hop of its own length (its
    /// index in yields to the scheduler, so they come back one by one): every entry after the
    /// first waits for them all, where without the wait each would leave with the first few
    /// back and the rest would wait out its round. Counted in the leader's raft entries.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_entry_after_an_answered_one_waits_for_the_appenders_it_answered() {
        use oncelog::format::BatchBuilder;
        use openraft::BasicNode;

        const APPENDERS: i64 = 16;
        const EACH: i32 = 20;
        let router = crate::network::mem::Router::new(3);
        let replicas: BTreeMap<NodeId, Arc<Replica>> = router
            .open_replicas(&[1, 2, 3], &ReplicaConfig::default())
            .await
            .unwrap()
            .into_iter()
            .map(|(id, r)| (id, Arc::new(r)))
            .collect();
        let members = (1..=3).map(|i| (i, BasicNode::default())).collect();
        replicas[&1].initialize(members).await.unwrap();
        let leader = loop {
            if let Some(l) = replicas[&1].leader().await {
                if replicas[&l].raft().ensure_linearizable().await.is_ok() {
                    break Arc::clone(&replicas[&l]);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let entries = |r: &Replica| r.raft().metrics().borrow().last_log_index.unwrap();
        let before = entries(&leader);
        let appenders: Vec<_> = (0..APPENDERS)
            .map(|pid| {
                let leader = Arc::clone(&leader);
                tokio::spawn(async move {
                    for seq in 0..EACH {
                        let mut b = BatchBuilder::new().producer(pid, 0, seq);
                        b.append(1_000, None, Some(b"v"), &[]);
                        let ack = leader.append(Bytes::from(b.build().unwrap())).await;
                        assert!(matches!(ack, Ok(Ack::Appended { .. })), "{ack:?}");
                        for _ in 0..pid {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for a in appenders {
            a.await.unwrap();
        }
        let used = entries(&leader) - before;
        // One entry for each round of all 16, and a few while they first line up.
        assert!(
            used <= EACH as u64 + 4,
            "{used} entries for {EACH} rounds of {APPENDERS} appenders"
        );
    }
}
