//! The transaction coordinator: a `transactional.id` gets a producer id and an epoch
//! (InitProducerId; a new init bumps the epoch, fences the older producer, and aborts its open
//! transaction), collects the partitions and groups of its transaction (AddPartitionsToTxn,
//! AddOffsetsToTxn) and its offsets (TxnOffsetCommit, visible only once committed), and ends
//! it (EndTxn): COMMIT or ABORT markers written through the engine's `append_marker` to every
//! partition, each made durable. A transaction open longer than its timeout is aborted, with
//! an epoch bump that fences its producer. Once its markers are written a transaction stays
//! `CompleteCommit` or `CompleteAbort`, with its start time, until the next one begins, as
//! Kafka's coordinator keeps it (ListTransactions and DescribeTransactions show it).
//!
//! Two transaction versions are served side by side, chosen per request as Kafka does:
//! version 1 (clients up to Kafka 3.x: AddPartitionsToTxn before the first record of each
//! partition, EndTxn up to v4, the epoch fixed for the producer's life), and version 2
//! (KIP-890 part 2, the feature `transaction.version=2` that ApiVersions finalizes): the
//! first transactional Produce (v12+) to a partition adds it to the transaction, TxnOffsetCommit
//! v5 adds the group, and every EndTxn v5 bumps the producer epoch (a new producer id once the
//! epoch is exhausted). Its markers carry the bumped epoch, so a batch of the ended transaction
//! that arrives late is refused by the log as a stale epoch instead of slipping into the next
//! transaction: the defence Kafka added after the Jepsen findings on the protocol.
//!
//! Its state is durable in an oncelog log at
//! `<data>/oncelog-broker-state/__transaction_state-0`: one record per
//! change (key: the transactional id; value: JSON with the producer id, epoch, state,
//! timeout, partitions and pending offsets), fsynced before the request is answered. At start
//! the log is replayed and every transaction is settled: one whose commit was decided
//! (`prepare_commit` written) is completed (markers and offsets), one that was not is
//! aborted; any transaction still open in a partition without a coordinator record is
//! aborted too. Like `__consumer_offsets`, the log is laid out for key compaction
//! and grows until then.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use oncelog::format::BatchBuilder;
use oncelog::{Log, TxnMarker};
use oncelog_raft::{Ack, Replica};
use serde_json::{json, Value};

use crate::internal_log::{self, open_replayed, InternalLogError};
use crate::offsets_log::{Committed, OffsetKey};
use crate::store::Store;

/// The log's directory under the data directory.
pub const DIR_NAME: &str = "oncelog-broker-state/__transaction_state-0";
/// Kafka's `transaction.max.timeout.ms` default.
pub const MAX_TIMEOUT_MS: i32 = 900_000;
/// The coordinator epoch stamped on the single broker's markers (one coordinator, never
/// moved). A cluster's coordinator stamps the term of the raft group it leads.
const COORDINATOR_EPOCH: i32 = 0;
/// In a cluster, the key version of a transaction state record in the coordinators' shared
/// log (`__oncelog_offsets-0`), after which the transactional id's bytes follow: beyond
/// Kafka's `__consumer_offsets` key versions (0 to 8), which the offsets replay reads, so
/// each replay skips the other's records (docs/design.md, "The transaction coordinator in a
/// cluster").
pub const CLUSTER_KEY_VERSION: i16 = 0x7478;
/// How long one replicated write of a state record may wait for raft's commit: past it the
/// request is answered with an error (the client retries, on this coordinator or the next).
const REPLICATED_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    /// The markers of a commit are written; kept until the next transaction begins.
    CompleteCommit,
    /// The markers of an abort are written; kept until the next transaction begins.
    CompleteAbort,
}

impl TxnState {
    fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "empty",
            TxnState::Ongoing => "ongoing",
            TxnState::PrepareCommit => "prepare_commit",
            TxnState::PrepareAbort => "prepare_abort",
            TxnState::CompleteCommit => "complete_commit",
            TxnState::CompleteAbort => "complete_abort",
        }
    }
    /// The state's name as Kafka's coordinator answers it in ListTransactions and
    /// DescribeTransactions (and `kafka-transactions` prints).
    pub fn kafka_name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }
    fn parse(s: &str) -> Option<TxnState> {
        Some(match s {
            "empty" => TxnState::Empty,
            "ongoing" => TxnState::Ongoing,
            "prepare_commit" => TxnState::PrepareCommit,
            "prepare_abort" => TxnState::PrepareAbort,
            "complete_commit" => TxnState::CompleteCommit,
            "complete_abort" => TxnState::CompleteAbort,
            _ => return None,
        })
    }

    /// No transaction is open: a new one may begin.
    fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Kafka's `transaction.version` from which every EndTxn bumps the producer epoch.
pub const EPOCH_BUMPING_VERSION: i8 = 2;

#[derive(Debug, Clone)]
struct Txn {
    producer_id: i64,
    epoch: i16,
    state: TxnState,
    timeout_ms: i32,
    partitions: BTreeSet<(String, i32)>,
    groups: BTreeSet<String>,
    offsets: BTreeMap<OffsetKey, Committed>,
    started: Instant,
    /// Wall-clock milliseconds at which the current (or last) transaction began; -1 before
    /// the first one (Kafka's `txnStartTimestamp`).
    start_ms: i64,
    /// The transaction version the transaction runs under: 2 when a request of KIP-890 part 2
    /// began it (an implicit add) or ended it (EndTxn v5), 1 when a version 1 request did.
    /// It chooses the checks of a retried EndTxn, as Kafka's stored `clientTransactionVersion`.
    version: i8,
    /// Under version 2, the producer id that takes over once the markers of a transaction
    /// that exhausted the epoch are written; -1 otherwise.
    next_producer_id: i64,
    /// The producer id before the last such change, to recognise a retried EndTxn; -1 if none.
    previous_producer_id: i64,
}

impl Txn {
    fn to_json(&self) -> Value {
        json!({
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "state": self.state.name(),
            "timeout_ms": self.timeout_ms,
            "partitions": self.partitions.iter().map(|(t, p)| json!([t, p])).collect::<Vec<_>>(),
            "groups": self.groups.iter().collect::<Vec<_>>(),
            "offsets": self.offsets.iter().map(|((g, t, p), c)| {
                json!([g, t, p, c.offset, c.leader_epoch, c.metadata, c.commit_timestamp])
            }).collect::<Vec<_>>(),
            "start_ms": self.start_ms,
            "transaction_version": self.version,
            "next_producer_id": self.next_producer_id,
            "previous_producer_id": self.previous_producer_id,
        })
    }

    fn from_json(v: &Value) -> Option<Txn> {
        let partitions = v["partitions"]
            .as_array()?
            .iter()
            .map(|p| Some((p[0].as_str()?.to_string(), p[1].as_i64()? as i32)))
            .collect::<Option<_>>()?;
        let groups = v["groups"]
            .as_array()?
            .iter()
            .map(|g| g.as_str().map(str::to_string))
            .collect::<Option<_>>()?;
        let offsets = v["offsets"]
            .as_array()?
            .iter()
            .map(|o| {
                Some((
                    (
                        o[0].as_str()?.to_string(),
                        o[1].as_str()?.to_string(),
                        o[2].as_i64()? as i32,
                    ),
                    Committed {
                        offset: o[3].as_i64()?,
                        leader_epoch: o[4].as_i64()? as i32,
                        metadata: o[5].as_str()?.to_string(),
                        commit_timestamp: o[6].as_i64()?,
                    },
                ))
            })
            .collect::<Option<_>>()?;
        Some(Txn {
            producer_id: v["producer_id"].as_i64()?,
            epoch: v["epoch"].as_i64()? as i16,
            state: TxnState::parse(v["state"].as_str()?)?,
            timeout_ms: v["timeout_ms"].as_i64()? as i32,
            partitions,
            groups,
            offsets,
            started: Instant::now(),
            // Absent from the records written before transaction version 2 was served.
            start_ms: v["start_ms"].as_i64().unwrap_or(-1),
            version: v["transaction_version"].as_i64().map_or(1, |v| v as i8),
            next_producer_id: v["next_producer_id"].as_i64().unwrap_or(-1),
            previous_producer_id: v["previous_producer_id"].as_i64().unwrap_or(-1),
        })
    }

    /// A new transaction begins: the last one's partitions, groups and offsets are gone.
    fn begin(&mut self, version: i8) {
        self.state = TxnState::Ongoing;
        self.partitions.clear();
        self.groups.clear();
        self.offsets.clear();
        self.started = Instant::now();
        self.start_ms = crate::clock::now_ms();
        self.version = version;
    }
}

/// One transactional id as the admin APIs (ListTransactions, DescribeTransactions) show it:
/// a copy of the coordinator's state, taken under its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    /// Wall-clock milliseconds at which the open (or last completed) transaction began (its
    /// first partition or group added); -1 when there is none (`Empty`), as Kafka's
    /// `txnStartTimestamp`.
    pub start_ms: i64,
    /// The partitions of the open transaction, in order (none once it is complete).
    pub partitions: Vec<(String, i32)>,
}

impl TxnView {
    fn of(id: &str, t: &Txn, now_ms: i64) -> TxnView {
        let start_ms = match t.state {
            TxnState::Empty => -1,
            _ if t.start_ms >= 0 => t.start_ms,
            // A record from before the start time was kept: `started` is a monotonic
            // instant, and its age gives the wall-clock start.
            _ => now_ms.saturating_sub(t.started.elapsed().as_millis() as i64),
        };
        TxnView {
            transactional_id: id.to_string(),
            producer_id: t.producer_id,
            epoch: t.epoch,
            state: t.state,
            timeout_ms: t.timeout_ms,
            start_ms,
            partitions: t.partitions.iter().cloned().collect(),
        }
    }
}

/// Why the coordinator's log could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum TxnLogError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}", path = .path.display())]
    Log {
        path: PathBuf,
        source: oncelog::Error,
    },
    #[error("{path}: record at offset {offset} is not a transaction state", path = .path.display())]
    Record { path: PathBuf, offset: i64 },
}

impl InternalLogError for TxnLogError {
    fn io(path: PathBuf, source: std::io::Error) -> Self {
        TxnLogError::Io { path, source }
    }
    fn log(path: PathBuf, source: oncelog::Error) -> Self {
        TxnLogError::Log { path, source }
    }
    /// Whatever is wrong, the record is not a transaction state.
    fn record(path: PathBuf, offset: i64, _problem: String) -> Self {
        TxnLogError::Record { path, offset }
    }
}

/// What a transactional request is refused with, or what it must wait for.
pub type TxnResult<T> = Result<T, ResponseError>;

/// Every transactional id this broker coordinates.
pub struct Txns {
    txns: Mutex<HashMap<String, Txn>>,
    log: Backing,
    path: PathBuf,
    /// The coordinator epoch the markers are written with: 0 on the single broker, the raft
    /// term of the load on a cluster node, so a deposed coordinator's late marker is refused
    /// by a partition that took its successor's (Kafka's `coordinatorEpoch`).
    coordinator_epoch: AtomicI32,
}

/// Where the state records go: the single broker's own log, or (a cluster node) its replica
/// of the coordinators' raft group, shared with the offsets ([`CLUSTER_KEY_VERSION`]).
enum Backing {
    /// Fsynced before an answer (boxed: a `Log` is large).
    Local(Box<Log>),
    /// Answered once a majority holds the record (raft's commit).
    Replicated(Arc<Replica>),
}

impl std::fmt::Debug for Txns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txns").field("path", &self.path).finish()
    }
}

/// What ending a transaction must write: the markers, and (on commit) the offsets.
pub struct Ending {
    pub transactional_id: String,
    /// The state once it is written: CompleteCommit or CompleteAbort, or Empty for the
    /// abort of a transaction that an InitProducerId fenced.
    pub complete_as: TxnState,
    /// The marker: under transaction version 2, with the bumped epoch.
    pub marker: TxnMarker,
    pub partitions: Vec<(String, i32)>,
    pub offsets: Vec<(OffsetKey, Committed)>,
}

impl Txns {
    /// Opens the log under `data_dir` and replays it; the transactions left unsettled by a
    /// crash are returned, each with the marker it ends with, to be written. Blocking.
    pub fn open(data_dir: &Path) -> Result<(Txns, Vec<Ending>), TxnLogError> {
        let path = data_dir.join(DIR_NAME);
        let mut txns = HashMap::new();
        let log = open_replayed(&path, |r| {
            let id = r.key.as_ref().and_then(|k| std::str::from_utf8(k).ok());
            let txn = r
                .value
                .as_ref()
                .and_then(|v| serde_json::from_slice::<Value>(v).ok())
                .and_then(|v| Txn::from_json(&v));
            let (Some(id), Some(txn)) = (id, txn) else {
                return Err("not a transaction state".into());
            };
            txns.insert(id.to_string(), txn);
            Ok(())
        })?;
        let coordinator = Txns {
            txns: Mutex::new(txns),
            log: Backing::Local(Box::new(log)),
            path,
            coordinator_epoch: AtomicI32::new(COORDINATOR_EPOCH),
        };
        let unsettled = coordinator
            .lock()
            .iter_mut()
            .filter_map(|(id, t)| settle(id, t, COORDINATOR_EPOCH))
            .collect();
        Ok((coordinator, unsettled))
    }

    /// The transaction coordinator of a cluster node over its replica of the coordinators'
    /// raft group: empty until this node leads the group and [`Txns::load`]s it. `path` names
    /// it in errors (the replica's directory).
    pub fn replicated(replica: Arc<Replica>, path: PathBuf) -> Txns {
        Txns {
            txns: Mutex::new(HashMap::new()),
            log: Backing::Replicated(replica),
            path,
            coordinator_epoch: AtomicI32::new(COORDINATOR_EPOCH),
        }
    }

    /// Becomes a cluster's transaction coordinator in raft term `term`, once everything
    /// committed before the term is in this node's log (the caller committed a barrier):
    /// replays every state record, and answers the transactions whose end was decided
    /// (PrepareCommit, PrepareAbort) to be completed, with the markers stamped with `term`.
    /// An open transaction stays open, as Kafka's coordinator loads it: its producer goes on
    /// with the new coordinator (or its timeout aborts it). Blocking.
    pub fn load(&self, term: u64) -> Result<Vec<Ending>, TxnLogError> {
        let Backing::Replicated(replica) = &self.log else {
            return Ok(Vec::new());
        };
        let epoch = i32::try_from(term).unwrap_or(i32::MAX);
        let log = replica.log();
        let mut loaded = HashMap::new();
        let mut next = log.log_start_offset();
        loop {
            let fetched = log.fetch(next, 1 << 20).map_err(|e| TxnLogError::Log {
                path: self.path.clone(),
                source: e.into(),
            })?;
            if fetched.bytes.is_empty() {
                break;
            }
            for r in fetched.records() {
                let r = r.map_err(|_| TxnLogError::Record {
                    path: self.path.clone(),
                    offset: next,
                })?;
                let Some(id) = r.key.as_deref().and_then(cluster_key_id) else {
                    continue;
                };
                let txn = r
                    .value
                    .as_ref()
                    .and_then(|v| serde_json::from_slice::<Value>(v).ok())
                    .and_then(|v| Txn::from_json(&v))
                    .ok_or(TxnLogError::Record {
                        path: self.path.clone(),
                        offset: r.offset,
                    })?;
                loaded.insert(id, txn);
            }
            next = fetched.next_offset;
        }
        let endings = loaded
            .iter()
            .filter(|(_, t)| t.state.is_preparing())
            .map(|(id, t)| ending(id, t, t.state == TxnState::PrepareCommit, epoch))
            .collect();
        let mut txns = self.lock();
        *txns = loaded;
        self.coordinator_epoch.store(epoch, Ordering::Release);
        Ok(endings)
    }

    /// Stops being a cluster's transaction coordinator: forgets every state (the next leader
    /// of the group answers for them).
    pub fn unload(&self) {
        self.lock().clear();
    }

    fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Txn>> {
        self.txns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the state of `id` durably: fsynced to the own log, or committed by the
    /// cluster's raft group. Blocking (off the reactor: a replicated write blocks on raft).
    fn persist(&self, id: &str, txn: &Txn) -> Result<(), ResponseError> {
        let mut b = BatchBuilder::new();
        let value = serde_json::to_vec(&txn.to_json()).expect("JSON of plain values");
        let now = crate::clock::now_ms();
        let key = match &self.log {
            Backing::Local(_) => id.as_bytes().to_vec(),
            Backing::Replicated(_) => cluster_key(id),
        };
        b.append(now, Some(&key), Some(&value), &[]);
        let bytes = b.build().map_err(|e| {
            tracing::error!(error = %e, transactional_id = id, "cannot encode transaction state");
            ResponseError::KafkaStorageError
        })?;
        match &self.log {
            Backing::Local(log) => log
                .append(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|_| log.flush().map_err(|e| e.to_string()))
                .map_err(|e| {
                    tracing::error!(error = %e, transactional_id = id, "cannot store transaction state");
                    ResponseError::KafkaStorageError
                }),
            Backing::Replicated(replica) => {
                let append = replica.append(Bytes::from(bytes));
                let appended = tokio::runtime::Handle::current()
                    .block_on(tokio::time::timeout(REPLICATED_WRITE_TIMEOUT, append));
                match appended {
                    Ok(Ok(Ack::Appended { .. } | Ack::Duplicate { .. })) => Ok(()),
                    // Deposed, or raft failed: the client finds the coordinator again.
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, transactional_id = id, "transaction state not replicated");
                        Err(ResponseError::NotCoordinator)
                    }
                    Err(_) => Err(ResponseError::RequestTimedOut),
                }
            }
        }
    }

    /// InitProducerId with a transactional id. `allocate` hands out a fresh producer id.
    /// Returns the id and epoch, and the open transaction to abort first, if any. Blocking.
    pub fn init(
        &self,
        id: &str,
        timeout_ms: i32,
        allocate: impl FnOnce() -> Result<i64, ResponseError>,
    ) -> TxnResult<((i64, i16), Option<Ending>)> {
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let mut txns = self.lock();
        let mut abort = None;
        let txn = match txns.get(id).cloned() {
            Some(mut t) => {
                if t.state.is_preparing() {
                    return Err(ResponseError::ConcurrentTransactions);
                }
                if t.state == TxnState::Ongoing {
                    // The open transaction is aborted with a bumped epoch, which fences the
                    // producer that held the id before (Kafka's `prepareFenceProducerEpoch`).
                    t.epoch = t.epoch.saturating_add(1);
                    t.state = TxnState::PrepareAbort;
                    let mut fenced = ending(id, &t, false, self.coordinator_epoch());
                    // As Kafka leaves it once the client's retried InitProducerId is done.
                    fenced.complete_as = TxnState::Empty;
                    abort = Some(fenced);
                }
                // Under version 1 the fencing bump is the epoch granted, as before. Under
                // version 2 the epoch is bumped once more, as Kafka's client gets it (its first
                // InitProducerId is answered CONCURRENT_TRANSACTIONS while the abort is
                // written, its retry bumps again): a zombie that retries its EndTxn with the
                // epoch before the fence must not pass for the retry of the abort, and learn
                // the new producer's epoch.
                let bump =
                    abort.is_none() || t.version >= EPOCH_BUMPING_VERSION || t.epoch == i16::MAX;
                if bump {
                    if t.epoch >= i16::MAX - 1 {
                        t.producer_id = allocate()?;
                        t.epoch = 0;
                    } else {
                        t.epoch += 1;
                    }
                }
                if abort.is_none() {
                    // Kafka's InitProducerId leaves a completed transaction `Empty`.
                    t.state = TxnState::Empty;
                    t.partitions.clear();
                    t.groups.clear();
                    t.offsets.clear();
                    t.start_ms = -1;
                }
                t.next_producer_id = -1;
                t.timeout_ms = timeout_ms;
                t
            }
            None => Txn {
                producer_id: allocate()?,
                epoch: 0,
                state: TxnState::Empty,
                timeout_ms,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                offsets: BTreeMap::new(),
                started: Instant::now(),
                start_ms: -1,
                version: 1,
                next_producer_id: -1,
                previous_producer_id: -1,
            },
        };
        self.persist(id, &txn)?;
        let granted = (txn.producer_id, txn.epoch);
        txns.insert(id.to_string(), txn);
        Ok((granted, abort))
    }

    fn checked<'a>(
        txns: &'a mut HashMap<String, Txn>,
        id: &str,
        producer_id: i64,
        epoch: i16,
    ) -> TxnResult<&'a mut Txn> {
        let t = txns
            .get_mut(id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if t.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if epoch != t.epoch {
            // An older epoch is a zombie the bump fenced.
            return Err(ResponseError::ProducerFenced);
        }
        if t.state.is_preparing() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        Ok(t)
    }

    /// AddPartitionsToTxn (`implicit`: the first transactional Produce of transaction
    /// version 2 to these partitions): the partitions join the transaction (durably); one
    /// begins if none is open. Blocking.
    pub fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        implicit: bool,
    ) -> TxnResult<()> {
        let mut txns = self.lock();
        let t = Self::checked(&mut txns, id, producer_id, epoch)?;
        if t.state == TxnState::Ongoing && partitions.iter().all(|p| t.partitions.contains(p)) {
            // Already there (as Kafka, answered without a write). A version 1 client that
            // sends Produce v12+ after its AddPartitionsToTxn lands here.
            return Ok(());
        }
        let before = t.clone();
        if t.state.is_idle() {
            t.begin(if implicit { EPOCH_BUMPING_VERSION } else { 1 });
        }
        t.partitions.extend(partitions.iter().cloned());
        let snapshot = t.clone();
        if let Err(e) = self.persist(id, &snapshot) {
            txns.insert(id.to_string(), before);
            return Err(e);
        }
        Ok(())
    }

    /// Whether the open transaction of `id` by this producer already holds every partition:
    /// then a Produce of transaction version 2 has nothing to add. Read only.
    pub fn holds(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> bool {
        self.lock().get(id).is_some_and(|t| {
            t.producer_id == producer_id
                && t.epoch == epoch
                && t.state == TxnState::Ongoing
                && partitions.iter().all(|p| t.partitions.contains(p))
        })
    }

    /// Which of `partitions` the open transaction of `id` holds (AddPartitionsToTxn v4's
    /// `verify_only`, KIP-890 part 1): Kafka answers the others TRANSACTION_ABORTABLE. Read
    /// only.
    pub fn verify_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> TxnResult<Vec<bool>> {
        let mut txns = self.lock();
        let t = Self::checked(&mut txns, id, producer_id, epoch)?;
        Ok(partitions
            .iter()
            .map(|p| t.state == TxnState::Ongoing && t.partitions.contains(p))
            .collect())
    }

    /// AddOffsetsToTxn (`implicit`: TxnOffsetCommit v5 of transaction version 2): the group's
    /// offsets will be committed with the transaction; one begins if none is open. Blocking.
    pub fn add_group(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        implicit: bool,
    ) -> TxnResult<()> {
        let mut txns = self.lock();
        let t = Self::checked(&mut txns, id, producer_id, epoch)?;
        if implicit && t.state == TxnState::Ongoing && t.groups.contains(group) {
            return Ok(());
        }
        let before = t.clone();
        if t.state.is_idle() {
            t.begin(if implicit { EPOCH_BUMPING_VERSION } else { 1 });
        }
        t.groups.insert(group.to_string());
        let snapshot = t.clone();
        if let Err(e) = self.persist(id, &snapshot) {
            txns.insert(id.to_string(), before);
            return Err(e);
        }
        Ok(())
    }

    /// TxnOffsetCommit: offsets held with the transaction until it commits. Blocking.
    pub fn add_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        offsets: Vec<(OffsetKey, Committed)>,
    ) -> TxnResult<()> {
        let mut txns = self.lock();
        let t = Self::checked(&mut txns, id, producer_id, epoch)?;
        if offsets.iter().any(|((g, _, _), _)| !t.groups.contains(g)) {
            // The group was never added with AddOffsetsToTxn.
            return Err(ResponseError::InvalidTxnState);
        }
        let before = t.clone();
        t.offsets.extend(offsets);
        let snapshot = t.clone();
        if let Err(e) = self.persist(id, &snapshot) {
            txns.insert(id.to_string(), before);
            return Err(e);
        }
        Ok(())
    }

    /// EndTxn: decides (durably) and returns what to write, if anything. `version` is the
    /// transaction version of the request (2 from EndTxn v5): under 2 the decision bumps the
    /// epoch, and `allocate` hands out the next producer id once the epoch is exhausted; the
    /// id and epoch the producer holds once the ending is written are in [`Ended`]. The checks
    /// are Kafka's `TransactionCoordinator.endTransaction`. Blocking.
    pub fn end(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        version: i8,
        allocate: impl FnOnce() -> Result<i64, ResponseError>,
    ) -> TxnResult<Ended> {
        let mut txns = self.lock();
        let t = txns
            .get_mut(id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let bumping = t.version >= EPOCH_BUMPING_VERSION;
        // A retry of an EndTxn whose bump is already recorded (or whose bump moved the
        // producer to a new id).
        let retry_on_bump =
            bumping && t.producer_id == producer_id && t.epoch == epoch.wrapping_add(1);
        let retry_on_overflow = bumping
            && t.previous_producer_id == producer_id
            && epoch == i16::MAX - 1
            && t.epoch == 0;
        let retry = retry_on_bump || retry_on_overflow;
        if t.producer_id != producer_id && !retry_on_overflow {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        let valid_epoch = if bumping {
            match t.state {
                TxnState::Ongoing | TxnState::Empty => epoch == t.epoch,
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
                TxnState::CompleteCommit | TxnState::CompleteAbort => retry || epoch == t.epoch,
            }
        } else {
            epoch == t.epoch
        };
        if !valid_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        let held = Ended {
            producer_id: t.producer_id,
            epoch: t.epoch,
            ending: None,
        };
        match (t.state, commit) {
            (TxnState::Ongoing, _) => {}
            // A retry of the EndTxn that completed it: answered as it was.
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false)
                if retry || !bumping =>
            {
                return Ok(held)
            }
            // Under version 2 the producer cannot know whether a Produce added a partition
            // before it failed, so it may abort a transaction the coordinator never saw begin:
            // the epoch is bumped all the same and there is nothing to write.
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
                if version >= EPOCH_BUMPING_VERSION && !retry =>
            {
                t.partitions.clear();
                t.groups.clear();
                t.offsets.clear();
                t.start_ms = crate::clock::now_ms();
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            _ => return Err(ResponseError::InvalidTxnState),
        }
        let before = t.clone();
        t.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        // The ending's markers are of the version of the request that decides it: a version 1
        // EndTxn bumps nothing, so its markers must not claim a bump.
        t.version = version.clamp(1, EPOCH_BUMPING_VERSION);
        if version >= EPOCH_BUMPING_VERSION {
            if t.epoch >= i16::MAX - 1 {
                // The epoch is exhausted: the markers take the last one, and the producer
                // moves on to a new id once they are written.
                match allocate() {
                    Ok(next) => t.next_producer_id = next,
                    Err(e) => {
                        *t = before;
                        return Err(e);
                    }
                }
            }
            t.epoch += 1;
        }
        let snapshot = t.clone();
        if let Err(e) = self.persist(id, &snapshot) {
            txns.insert(id.to_string(), before);
            return Err(e);
        }
        let (producer_id, epoch) = match snapshot.next_producer_id {
            next if next >= 0 => (next, 0),
            _ => (snapshot.producer_id, snapshot.epoch),
        };
        Ok(Ended {
            producer_id,
            epoch,
            ending: Some(ending(id, &snapshot, commit, self.coordinator_epoch())),
        })
    }

    /// Records that an ending was written: the transaction is `CompleteCommit` or
    /// `CompleteAbort` until the next one begins (`Empty` after a fencing InitProducerId),
    /// and under version 2 a producer whose epoch was exhausted moves to its next id.
    /// Blocking.
    pub fn completed(&self, id: &str, state: TxnState) -> TxnResult<()> {
        let mut txns = self.lock();
        let Some(t) = txns.get_mut(id) else {
            return Ok(());
        };
        t.state = state;
        if state == TxnState::Empty {
            t.start_ms = -1;
        }
        if t.next_producer_id >= 0 {
            t.previous_producer_id = t.producer_id;
            t.producer_id = t.next_producer_id;
            t.next_producer_id = -1;
            t.epoch = 0;
        }
        t.partitions.clear();
        t.groups.clear();
        t.offsets.clear();
        let snapshot = t.clone();
        self.persist(id, &snapshot)
    }

    /// The transactions open past their timeout, set to abort with a bumped epoch (which
    /// fences their producer). Blocking.
    pub fn expired(&self) -> Vec<Ending> {
        let now = Instant::now();
        let mut txns = self.lock();
        let mut out = Vec::new();
        let ids: Vec<String> = txns
            .iter()
            .filter(|(_, t)| {
                t.state == TxnState::Ongoing
                    && now - t.started > Duration::from_millis(t.timeout_ms.max(0) as u64)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let t = txns.get_mut(&id).expect("listed");
            t.epoch = t.epoch.saturating_add(1);
            t.state = TxnState::PrepareAbort;
            let snapshot = t.clone();
            if self.persist(&id, &snapshot).is_ok() {
                tracing::info!(transactional_id = %id, "transaction timed out; aborting it");
                out.push(ending(&id, &snapshot, false, self.coordinator_epoch()));
            }
        }
        out
    }

    /// The state of `id`, if this coordinator has ever seen it. Read only.
    pub fn view(&self, id: &str, now_ms: i64) -> Option<TxnView> {
        self.lock().get(id).map(|t| TxnView::of(id, t, now_ms))
    }

    /// The state of every transactional id, ordered by id. Read only.
    pub fn views(&self, now_ms: i64) -> Vec<TxnView> {
        let mut all: Vec<TxnView> = self
            .lock()
            .iter()
            .map(|(id, t)| TxnView::of(id, t, now_ms))
            .collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all
    }

    /// Compacts the state log if a round is due, keeping the latest state of every
    /// transactional id. Answers the records removed. Blocking.
    /// The replicated log is not compacted (raft's partitions delete only).
    pub fn compact_if_due(&self, now_ms: i64) -> Result<u64, TxnLogError> {
        match &self.log {
            Backing::Local(log) => internal_log::compact_if_due(log, &self.path, now_ms),
            Backing::Replicated(_) => Ok(0),
        }
    }

    /// Closes the log. Blocking. A cluster node's replica is closed with its raft host.
    pub fn close(&self) -> Result<(), TxnLogError> {
        let Backing::Local(log) = &self.log else {
            return Ok(());
        };
        log.close().map_err(|e| TxnLogError::Log {
            path: self.path.clone(),
            source: e.into(),
        })
    }
}

/// What a transaction found in the log at start still needs (none if it is not open): one
/// whose commit was decided is completed; any other is aborted, with an epoch bump that
/// fences its producer unless version 2's decision already bumped it.
fn settle(id: &str, t: &mut Txn, coordinator_epoch: i32) -> Option<Ending> {
    match t.state {
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => None,
        TxnState::PrepareCommit => Some(ending(id, t, true, coordinator_epoch)),
        TxnState::PrepareAbort if t.version >= EPOCH_BUMPING_VERSION => {
            Some(ending(id, t, false, coordinator_epoch))
        }
        TxnState::Ongoing | TxnState::PrepareAbort => {
            t.epoch = t.epoch.saturating_add(1);
            t.state = TxnState::PrepareAbort;
            Some(ending(id, t, false, coordinator_epoch))
        }
    }
}

/// The key of `id`'s state record in a cluster's shared coordinator log.
fn cluster_key(id: &str) -> Vec<u8> {
    let mut key = CLUSTER_KEY_VERSION.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// The transactional id of a record of the shared coordinator log, if it is a transaction
/// state (the offsets' records have other key versions).
fn cluster_key_id(key: &[u8]) -> Option<String> {
    let (version, id) = key.split_at_checked(2)?;
    if version != CLUSTER_KEY_VERSION.to_be_bytes() {
        return None;
    }
    std::str::from_utf8(id).ok().map(str::to_string)
}

/// What EndTxn leaves: the producer id and epoch to use next (EndTxn v5 answers them), and the
/// ending to write, if there is one.
pub struct Ended {
    pub producer_id: i64,
    pub epoch: i16,
    pub ending: Option<Ending>,
}

fn ending(id: &str, t: &Txn, commit: bool, coordinator_epoch: i32) -> Ending {
    let marker = if commit {
        TxnMarker::commit(t.producer_id, t.epoch, coordinator_epoch)
    } else {
        TxnMarker::abort(t.producer_id, t.epoch, coordinator_epoch)
    };
    // Version 2 markers carry an epoch the coordinator bumped (at EndTxn, at a timeout, at a
    // fencing InitProducerId), which the log checks is newer than the transaction's batches.
    let marker = marker.with_transaction_version(if t.version >= EPOCH_BUMPING_VERSION {
        EPOCH_BUMPING_VERSION
    } else {
        0
    });
    Ending {
        transactional_id: id.to_string(),
        complete_as: if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        },
        marker,
        partitions: t.partitions.iter().cloned().collect(),
        offsets: if commit {
            t.offsets
                .iter()
                .map(|(k, c)| (k.clone(), c.clone()))
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Writes an ending: the marker to every partition (each durable), then the offsets on
/// commit, then the coordinator's record that it is complete. Blocking.
pub fn write_ending(
    store: &Store,
    offsets: &crate::api::CommittedOffsets,
    txns: &Txns,
    ending: &Ending,
) -> TxnResult<()> {
    write_ending_with(
        |(topic, index), marker| {
            let Some(partition) = store.partition(topic, *index) else {
                return Ok(());
            };
            partition.append_marker(marker).map(drop).map_err(|e| {
                tracing::error!(partition = ?partition, error = %e.message, "cannot write a marker");
                crate::errors::append_error(&e)
            })
        },
        offsets,
        txns,
        ending,
    )
}

/// [`write_ending`] with the markers written by `write_marker` (a cluster node writes them
/// through each partition's raft leader): the transaction is complete only once every marker
/// is written. Blocking.
pub fn write_ending_with(
    write_marker: impl Fn(&(String, i32), &TxnMarker) -> TxnResult<()>,
    offsets: &crate::api::CommittedOffsets,
    txns: &Txns,
    ending: &Ending,
) -> TxnResult<()> {
    for partition in &ending.partitions {
        write_marker(partition, &ending.marker)?;
    }
    if !ending.offsets.is_empty() {
        offsets.commit(ending.offsets.clone()).map_err(|e| {
            tracing::error!(error = %e, "cannot store transactional offsets");
            ResponseError::KafkaStorageError
        })?;
    }
    tracing::info!(
        transactional_id = %ending.transactional_id,
        producer_id = ending.marker.producer_id,
        epoch = ending.marker.producer_epoch,
        result = ?ending.marker.result,
        partitions = ending.partitions.len(),
        "transaction ended"
    );
    txns.completed(&ending.transactional_id, ending.complete_as)
}

/// Writes an ending where this broker's partitions are: the single broker's store, or (a
/// cluster node) each partition's raft leader, for as long as this node coordinates in the
/// term it began in. Blocking.
pub fn write_ending_of(broker: &crate::broker::Broker, ending: &Ending) -> TxnResult<()> {
    let Some(cluster) = &broker.cluster else {
        return write_ending(&broker.store, &broker.offsets, &broker.txns, ending);
    };
    let term = cluster.coordinating_term();
    if term == 0 {
        return Err(ResponseError::NotCoordinator);
    }
    write_ending_with(
        |partition, marker| {
            crate::cluster::markers::write(cluster, partition, marker, || {
                cluster.coordinating_term() == term
            })
        },
        &broker.offsets,
        &broker.txns,
        ending,
    )
    // Deposed on the way (the offsets' or the state's replicated write refused): the client
    // goes to the successor, which completes the transaction from the replicated state.
    .map_err(|e| {
        if cluster.coordinating_term() == term {
            e
        } else {
            ResponseError::NotCoordinator
        }
    })
}

/// Aborts every transaction still open in the store's partitions once the coordinator's own
/// were settled: a producer writes to a partition only after its AddPartitionsToTxn record is
/// durable, so these come from logs written elsewhere, and nothing will ever end them.
/// Blocking.
pub fn abort_orphans(store: &Store) {
    for topic in store.topics() {
        for partition in &topic.partitions {
            for (_, producer_id) in partition.ongoing_transactions() {
                let epoch = partition.epoch_of(producer_id).unwrap_or(0);
                let marker = TxnMarker::abort(producer_id, epoch, COORDINATOR_EPOCH);
                match partition.append_marker(&marker) {
                    Ok(at) => tracing::info!(
                        partition = ?partition, producer_id, at,
                        "open transaction without a coordinator record aborted"
                    ),
                    Err(e) => tracing::warn!(
                        partition = ?partition, producer_id, error = %e.message,
                        "cannot abort an orphaned transaction"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_state_key_names_its_transactional_id_and_no_other_record_does() {
        assert_eq!(
            cluster_key_id(&cluster_key("copier-0")).as_deref(),
            Some("copier-0")
        );
        assert_eq!(cluster_key_id(&cluster_key("")).as_deref(), Some(""));
        // The offsets' keys (Kafka's versions 0 to 8), a short key, a key not UTF-8.
        assert_eq!(cluster_key_id(&[0, 1, 0, 1, b'g']), None);
        assert_eq!(cluster_key_id(&[0x74]), None);
        let mut bad = CLUSTER_KEY_VERSION.to_be_bytes().to_vec();
        bad.push(0xff);
        assert_eq!(cluster_key_id(&bad), None);
    }

    fn parts() -> Vec<(String, i32)> {
        vec![("orders".to_string(), 0), ("orders".to_string(), 1)]
    }

    #[test]
    fn a_decided_commit_is_completed_after_a_crash_and_an_undecided_one_aborted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (txns, unsettled) = Txns::open(dir.path()).unwrap();
            assert!(unsettled.is_empty());
            let ((decided, e1), _) = txns.init("decided", 10_000, || Ok(7)).unwrap();
            txns.add_partitions("decided", decided, e1, &parts(), false)
                .unwrap();
            txns.add_group("decided", decided, e1, "g", false).unwrap();
            txns.add_offsets(
                "decided",
                decided,
                e1,
                vec![(
                    ("g".into(), "in".into(), 0),
                    Committed {
                        offset: 5,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_timestamp: 1,
                    },
                )],
            )
            .unwrap();
            // The commit is decided (durably), then the broker dies before the markers.
            txns.end("decided", decided, e1, true, 1, || Ok(0)).unwrap();
            let ((open, e2), _) = txns.init("open", 10_000, || Ok(8)).unwrap();
            txns.add_partitions("open", open, e2, &parts(), false)
                .unwrap();
            let ((_, _), _) = txns.init("idle", 10_000, || Ok(9)).unwrap();
        }
        let (_txns, unsettled) = Txns::open(dir.path()).unwrap();
        let mut by_id: BTreeMap<String, &Ending> = BTreeMap::new();
        for e in &unsettled {
            by_id.insert(e.transactional_id.clone(), e);
        }
        assert_eq!(by_id.len(), 2, "the idle id has nothing to settle");
        let decided = by_id["decided"];
        assert_eq!(decided.marker.result, oncelog::TxnResult::Commit);
        assert_eq!(decided.marker.producer_epoch, 0);
        assert_eq!(decided.partitions, parts());
        assert_eq!(decided.offsets.len(), 1, "its offsets are applied with it");
        let open = by_id["open"];
        assert_eq!(open.marker.result, oncelog::TxnResult::Abort);
        assert_eq!(
            open.marker.producer_epoch, 1,
            "aborted with a bump that fences it"
        );
        assert!(open.offsets.is_empty());
    }

    #[test]
    fn refusals_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (txns, _) = Txns::open(dir.path()).unwrap();
        assert_eq!(
            txns.init("x", 0, || Ok(1)).err(),
            Some(ResponseError::InvalidTransactionTimeout)
        );
        let ((pid, epoch), _) = txns.init("x", 1_000, || Ok(1)).unwrap();
        assert_eq!(
            txns.add_offsets(
                "x",
                pid,
                epoch,
                vec![(
                    ("g".into(), "t".into(), 0),
                    Committed {
                        offset: 1,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_timestamp: 0,
                    }
                )]
            )
            .err(),
            Some(ResponseError::InvalidTxnState),
            "offsets of a group never added"
        );
        assert_eq!(
            txns.end("x", pid, epoch, true, 1, || Ok(0)).err(),
            Some(ResponseError::InvalidTxnState),
            "nothing to end: the refused offsets were not kept"
        );
        assert_eq!(
            txns.add_partitions("x", pid, epoch + 1, &parts(), false)
                .err(),
            Some(ResponseError::ProducerFenced)
        );
        drop(txns);
        let (_, unsettled) = Txns::open(dir.path()).unwrap();
        assert!(
            unsettled.is_empty(),
            "nothing was opened by the refused calls"
        );
    }

    #[test]
    fn an_exhausted_epoch_moves_a_version_2_producer_to_a_new_id_once_its_markers_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let (txns, _) = Txns::open(dir.path()).unwrap();
        let ((pid, _), _) = txns.init("x", 1_000, || Ok(1)).unwrap();
        let last = i16::MAX - 1;
        txns.lock().get_mut("x").unwrap().epoch = last;
        txns.add_partitions("x", pid, last, &parts(), true).unwrap();
        let ended = txns.end("x", pid, last, true, 2, || Ok(77)).unwrap();
        let ending = ended.ending.expect("markers to write");
        assert_eq!(
            (ending.marker.producer_id, ending.marker.producer_epoch),
            (pid, i16::MAX),
            "the markers take the last epoch of the old id"
        );
        assert_eq!(ending.marker.transaction_version, 2);
        assert_eq!(
            (ended.producer_id, ended.epoch),
            (77, 0),
            "answered the new id"
        );
        txns.completed("x", TxnState::CompleteCommit).unwrap();
        let view = txns.view("x", 0).unwrap();
        assert_eq!(
            (view.producer_id, view.epoch, view.state),
            (77, 0, TxnState::CompleteCommit)
        );
        // The retry of that EndTxn, with the old id and epoch, is answered with the new ones.
        let retried = txns.end("x", pid, last, true, 2, || Ok(78)).unwrap();
        assert!(retried.ending.is_none());
        assert_eq!((retried.producer_id, retried.epoch), (77, 0));
        drop(txns);
        let (txns, unsettled) = Txns::open(dir.path()).unwrap();
        assert!(unsettled.is_empty());
        assert_eq!(txns.view("x", 0).unwrap().producer_id, 77, "persisted");
    }
}
