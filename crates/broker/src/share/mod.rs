//! Share groups (KIP-932), as Kafka 4.4 serves them: the group coordinator's share groups
//! ([`group`]), the share-partitions their members consume through ([`partition`]), the share
//! sessions of ShareFetch and ShareAcknowledge, and the durable share-partition state
//! ([`state_log`], the broker's `__share_group_state`).
//!
//! [`ShareGroups`] holds all of it behind one lock. A change that must outlive a restart (an
//! acknowledgement, a release, an expired lock, a new share-partition, a membership change, a
//! group setting) is made under that lock and written to the state log right after it is let
//! go, within a writer's turn taken before it, so two records of one key are never written
//! out of order and readers never wait for a write (in a cluster a write waits for raft);
//! callers run these operations off the reactor. A restart keeps
//! every group with its members at their epochs (their session timers start at the load) and
//! every share-partition's state; share sessions, like Kafka's, live in memory only.
//!
//! Share sessions, as Kafka's `ShareSessionCache`: keyed by (group, member id); a ShareFetch with
//! epoch 0 opens one (replacing any), with -1 closes it (releasing the member's records), and
//! any other epoch must be the session's next (INVALID_SHARE_SESSION_EPOCH), on a session that
//! exists (SHARE_SESSION_NOT_FOUND). Each request moves the epoch on by one.

pub mod group;
pub mod partition;
pub mod state_log;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::consumer_group::TopicInfo;
use group::{ShareGroup, ShareHeartbeat, ShareHeartbeatAnswer};
use partition::{AckType, Acquired, FetchedBatch, Limits, SharePartition, Snapshot};
use state_log::{GroupConfigs, ShareKey, ShareStateLog, ShareStateLogError};

/// Kafka's `group.share.record.lock.duration.ms` default.
pub const DEFAULT_LOCK_DURATION_MS: u64 = 30_000;
/// Kafka's `group.share.delivery.count.limit` default.
pub const DEFAULT_DELIVERY_COUNT_LIMIT: i16 = 5;
/// Kafka's `group.share.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 45_000;
/// Kafka's `group.share.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 5_000;

/// Kafka's message for an acknowledgement of another member's records.
pub const NOT_OWNER: &str = "Member is not the owner of batch record";

/// What separates a member id from the node a forwarded session came through.
const FORWARDED_SEPARATOR: &str = "\u{0}via-node-";

/// The name of the share session a cluster node `via` forwards for `member` (docs/design.md,
/// "Share groups in a cluster"): a client keeps one session per broker it fetches from, so
/// the coordinator keeps one per (member, forwarding node), not one per member.
pub fn forwarded_session(member: &str, via: i32) -> String {
    format!("{member}{FORWARDED_SEPARATOR}{via}")
}

/// The member a session name belongs to.
fn session_member(session: &str) -> &str {
    session
        .split_once(FORWARDED_SEPARATOR)
        .map_or(session, |(member, _)| member)
}

/// The ShareFetch and ShareAcknowledge epoch that opens a share session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch that closes it.
pub const FINAL_EPOCH: i32 = -1;

/// The broker settings of share groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    /// `group.share.record.lock.duration.ms`.
    pub lock_duration: Duration,
    /// `group.share.delivery.count.limit`.
    pub delivery_count_limit: i16,
    /// `group.share.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.share.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
}

impl Default for ShareSettings {
    fn default() -> Self {
        ShareSettings {
            lock_duration: Duration::from_millis(DEFAULT_LOCK_DURATION_MS),
            delivery_count_limit: DEFAULT_DELIVERY_COUNT_LIMIT,
            session_timeout: Duration::from_millis(DEFAULT_SESSION_TIMEOUT_MS),
            heartbeat_interval: Duration::from_millis(DEFAULT_HEARTBEAT_INTERVAL_MS),
        }
    }
}

impl ShareSettings {
    fn limits(&self) -> Limits {
        Limits {
            lock_duration: self.lock_duration,
            delivery_count_limit: self.delivery_count_limit,
        }
    }
}

/// One member's share session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShareSession {
    /// The epoch the next request must carry.
    epoch: i32,
    partitions: BTreeSet<(Uuid, i32)>,
}

/// Kafka's `ShareRequestMetadata.nextEpoch`: 1 after the initial request, then up by one,
/// wrapping to 1.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX || epoch < 0 {
        1
    } else {
        epoch + 1
    }
}

/// A group as ListGroups and ShareGroupDescribe show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedShareGroup {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<group::ShareMember>,
}

/// What a ShareFetch's session check answers: the session's partitions after the request's
/// additions and removals, and whether the request closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub partitions: BTreeSet<(Uuid, i32)>,
    pub closing: bool,
}

#[derive(Debug, Default)]
struct Inner {
    groups: BTreeMap<String, ShareGroup>,
    partitions: BTreeMap<ShareKey, SharePartition>,
    sessions: HashMap<(String, String), ShareSession>,
    /// Group configurations set with IncrementalAlterConfigs (GROUP resources).
    configs: BTreeMap<String, GroupConfigs>,
    /// The records of the changes made under the lock, written once it is let go
    /// ([`ShareGroups::write_pending`]).
    pending: Vec<state_log::Record>,
}

impl Inner {
    /// The state a replay of the state log left.
    fn restored(stored: state_log::Stored) -> Inner {
        let mut inner = Inner {
            configs: stored.configs,
            groups: stored.groups,
            ..Inner::default()
        };
        for (key, snapshot) in stored.states {
            inner.groups.entry(key.0.clone()).or_default();
            inner
                .partitions
                .insert(key, SharePartition::restore(&snapshot));
        }
        inner
    }
}

/// What a failed state write answers: a cluster node whose replicated append failed is no
/// longer (or not yet) the coordinator (NOT_COORDINATOR: the client looks it up again); the
/// single broker's own log failed (KAFKA_STORAGE_ERROR).
fn write_failed(e: &ShareStateLogError) -> ResponseError {
    match e {
        ShareStateLogError::Replica { .. } => ResponseError::NotCoordinator,
        _ => ResponseError::KafkaStorageError,
    }
}

/// A group's `share.auto.offset.reset`.
pub const AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
/// A group's `share.record.lock.duration.ms`.
pub const RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";

/// Every share group of the broker, their share-partitions and sessions, and the state log.
#[derive(Debug)]
pub struct ShareGroups {
    inner: Mutex<Inner>,
    /// Taken by every change before `inner` and held until its records are written, so the
    /// records of one key go to the log in the order of the changes, while `inner` itself is
    /// let go before the write: in a cluster the write waits for raft, which needs the
    /// reactor, and readers of `inner` run there (a session check, ListGroups, a classic
    /// group's type check); holding `inner` across the write could block every worker.
    writing: Mutex<()>,
    log: ShareStateLog,
    settings: ShareSettings,
}

impl ShareGroups {
    /// Opens the state log under `data_dir` and restores every group, its members and its
    /// share-partitions from it. Blocking.
    pub fn open(
        data_dir: &Path,
        settings: ShareSettings,
    ) -> Result<ShareGroups, ShareStateLogError> {
        let (log, stored) = ShareStateLog::open(data_dir)?;
        Ok(ShareGroups {
            inner: Mutex::new(Inner::restored(stored)),
            writing: Mutex::new(()),
            log,
            settings,
        })
    }

    /// The share groups of a cluster node, kept in its replica of the coordinators' raft
    /// group ([`ShareStateLog::replicated`]): empty until the node becomes the coordinator
    /// and loads them ([`ShareGroups::load`]).
    pub fn replicated(log: ShareStateLog, settings: ShareSettings) -> ShareGroups {
        ShareGroups {
            inner: Mutex::new(Inner::default()),
            writing: Mutex::new(()),
            log,
            settings,
        }
    }

    /// Replays the replicated log into every group, its members at their epochs and its
    /// share-partitions, as the single broker's open does: a record acquired under the
    /// previous coordinator comes back Available with its delivery count (the members'
    /// share sessions, kept in memory, are gone: SHARE_SESSION_NOT_FOUND has them open new
    /// ones). Called by a node that became the coordinator, after the offsets' load committed
    /// the barrier that puts every earlier coordinator's record in its log. Blocking.
    pub fn load(&self) -> Result<(), ShareStateLogError> {
        let _turn = self.turn();
        let stored = self.log.load()?;
        *self.lock() = Inner::restored(stored);
        Ok(())
    }

    /// Forgets every group, share-partition and session: this node stopped coordinating.
    pub fn unload(&self) {
        *self.lock() = Inner::default();
    }

    /// The writer's turn (see `writing`): taken before `inner`.
    fn turn(&self) -> MutexGuard<'_, ()> {
        self.writing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets `inner` go and writes the records its changes queued, in order, durable before it
    /// returns (the caller holds its turn). A write failure is logged and answered: the
    /// caller refuses the request as Kafka refuses one whose state write failed.
    fn write_pending(&self, mut inner: MutexGuard<'_, Inner>) -> Result<(), ResponseError> {
        let records = std::mem::take(&mut inner.pending);
        drop(inner);
        self.log.write(&records).map_err(|e| {
            tracing::error!(error = %e, "cannot write the share state");
            write_failed(&e)
        })
    }

    pub fn settings(&self) -> ShareSettings {
        self.settings
    }

    /// The limits of `group`'s share-partitions: the broker's, with the group's
    /// `share.record.lock.duration.ms` if it has one.
    fn limits(&self, inner: &Inner, group: &str) -> Limits {
        let mut limits = self.settings.limits();
        if let Some(ms) = inner
            .configs
            .get(group)
            .and_then(|c| c.get(RECORD_LOCK_DURATION_MS))
            .and_then(|v| v.parse::<u64>().ok())
        {
            limits.lock_duration = Duration::from_millis(ms);
        }
        limits
    }

    /// Where a new share-partition of `group` starts: the log end (`latest`, Kafka's
    /// default), or the log start for `share.auto.offset.reset=earliest`.
    fn start_offset(inner: &Inner, group: &str, log_start: i64, log_end: i64) -> i64 {
        match inner
            .configs
            .get(group)
            .and_then(|c| c.get(AUTO_OFFSET_RESET))
        {
            Some(reset) if reset == "earliest" => log_start,
            _ => log_end,
        }
    }

    /// The acquisition lock duration of `group`'s records (ShareFetch answers it).
    pub fn lock_duration(&self, group: &str) -> Duration {
        let inner = self.lock();
        self.limits(&inner, group).lock_duration
    }

    /// The configuration set on `group`.
    pub fn configs(&self, group: &str) -> GroupConfigs {
        self.lock().configs.get(group).cloned().unwrap_or_default()
    }

    /// Replaces `group`'s configuration (already validated), durable before it returns.
    /// Blocking.
    pub fn set_configs(&self, group: &str, configs: GroupConfigs) -> Result<(), ResponseError> {
        let _turn = self.turn();
        // Written first: a setting refused by the log is not applied.
        let stored = (!configs.is_empty()).then_some(&configs);
        self.log
            .write(&[state_log::configs_record(group, stored)])
            .map_err(|e| {
                tracing::error!(error = %e, "cannot write the group configuration");
                write_failed(&e)
            })?;
        let mut inner = self.lock();
        if configs.is_empty() {
            inner.configs.remove(group);
        } else {
            inner.configs.insert(group.to_string(), configs);
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the snapshots of `keys` (tombstones for those gone), written by
    /// [`Self::write_pending`].
    fn persist(&self, inner: &mut Inner, keys: &[ShareKey]) {
        for key in keys {
            let Some(p) = inner.partitions.get_mut(key) else {
                continue;
            };
            // A record archived at the delivery limit is never delivered again: a consumer
            // waiting for it waits for ever, so say which (Kafka warns of a last delivery).
            let exhausted = p.take_exhausted();
            if let (Some(first), Some(last)) = (exhausted.iter().min(), exhausted.iter().max()) {
                tracing::warn!(
                    group = %key.0,
                    topic_id = %key.1,
                    partition = key.2,
                    records = exhausted.len(),
                    first,
                    last,
                    "share records archived at the delivery count limit"
                );
            }
        }
        let states: Vec<(ShareKey, Option<Snapshot>)> = keys
            .iter()
            .map(|k| (k.clone(), inner.partitions.get_mut(k).map(|p| p.snapshot())))
            .collect();
        let records = state_log::state_records(&states);
        inner.pending.extend(records);
    }

    /// Queues `group`'s membership (a tombstone once it is gone), as [`Self::persist`].
    fn persist_group(&self, inner: &mut Inner, group: &str) {
        let record = state_log::group_record(group, inner.groups.get(group));
        inner.pending.push(record);
    }

    pub fn is_share_group(&self, group: &str) -> bool {
        self.lock().groups.contains_key(group)
    }

    /// Every share group: id and state.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.lock()
            .groups
            .iter()
            .map(|(id, g)| (id.clone(), g.state()))
            .collect()
    }

    pub fn describe(&self, group: &str) -> Option<DescribedShareGroup> {
        self.lock().groups.get(group).map(|g| DescribedShareGroup {
            state: g.state(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            members: g.members.values().cloned().collect(),
        })
    }

    /// A ShareGroupHeartbeat (validated by the caller). A share-partition the new assignment
    /// holds for the first time starts at `log_end` of its partition
    /// (`share.auto.offset.reset=latest`), durable before the member learns of it. Blocking.
    pub fn heartbeat(
        &self,
        group_id: &str,
        hb: ShareHeartbeat,
        topics: &[TopicInfo],
        log_range: impl Fn(Uuid, i32) -> Option<(i64, i64)>,
    ) -> Result<ShareHeartbeatAnswer, (ResponseError, Option<String>)> {
        let now = Instant::now();
        let _turn = self.turn();
        let mut inner = self.lock();
        let leaving = hb.member_epoch == group::LEAVE_EPOCH;
        let member = hb.member_id.clone();
        let existed = inner.groups.contains_key(group_id);
        // Only a join creates a group (Kafka's `getOrMaybeCreatePersistedShareGroup`).
        if !existed && hb.member_epoch != 0 {
            return Err((
                ResponseError::GroupIdNotFound,
                Some(format!("Share group {group_id} not found.")),
            ));
        }
        let group = inner.groups.entry(group_id.to_string()).or_default();
        let before = existed.then(|| state_log::encode_group(group));
        let answer = group.heartbeat(hb, topics, now);
        if !existed && answer.is_err() {
            inner.groups.remove(group_id);
        }
        let answer = answer.map_err(|r| (r.error(), Some(r.message(group_id, &member))))?;
        // The membership is durable before the member learns of it, as Kafka's records are.
        let after = inner.groups.get(group_id).map(state_log::encode_group);
        if before != after {
            self.persist_group(&mut inner, group_id);
        }
        if leaving {
            self.member_gone(&mut inner, group_id, &member);
            self.write_pending(inner).map_err(|e| (e, None))?;
            return Ok(answer);
        }
        let mut new = Vec::new();
        for &(topic_id, index) in &answer.assigned {
            let key = (group_id.to_string(), topic_id, index);
            if !inner.partitions.contains_key(&key) {
                if let Some((log_start, log_end)) = log_range(topic_id, index) {
                    let start = Self::start_offset(&inner, group_id, log_start, log_end);
                    inner
                        .partitions
                        .insert(key.clone(), SharePartition::new(start));
                    new.push(key);
                }
            }
        }
        self.persist(&mut inner, &new);
        self.write_pending(inner).map_err(|e| (e, None))?;
        Ok(answer)
    }

    /// A member left or was removed: its sessions close and its records are released.
    fn member_gone(&self, inner: &mut Inner, group: &str, member: &str) {
        inner
            .sessions
            .retain(|(g, s), _| g != group || session_member(s) != member);
        let limits = self.limits(inner, group);
        let released: Vec<ShareKey> = inner
            .partitions
            .iter_mut()
            .filter(|(k, _)| k.0 == group)
            .filter_map(|(k, p)| p.release_member(member, limits).then(|| k.clone()))
            .collect();
        self.persist(inner, &released);
    }

    /// The session check of a ShareFetch (Kafka's `SharePartitionManager.newContext`).
    pub fn fetch_session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        fetch: &[(Uuid, i32)],
        forget: &[(Uuid, i32)],
        has_acks: bool,
    ) -> Result<SessionView, ResponseError> {
        let mut inner = self.lock();
        let key = (group.to_string(), member.to_string());
        match epoch {
            FINAL_EPOCH => {
                // Partitions listed in a closing request carry acknowledgements only; Kafka
                // 4.4 answers them and fetches nothing.
                let Some(session) = inner.sessions.get(&key) else {
                    return Err(ResponseError::ShareSessionNotFound);
                };
                Ok(SessionView {
                    partitions: session.partitions.clone(),
                    closing: true,
                })
            }
            INITIAL_EPOCH => {
                if has_acks {
                    return Err(ResponseError::InvalidRequest);
                }
                let partitions: BTreeSet<(Uuid, i32)> = fetch.iter().copied().collect();
                inner.sessions.insert(
                    key,
                    ShareSession {
                        epoch: next_epoch(INITIAL_EPOCH),
                        partitions: partitions.clone(),
                    },
                );
                Ok(SessionView {
                    partitions,
                    closing: false,
                })
            }
            _ => {
                let Some(session) = inner.sessions.get_mut(&key) else {
                    return Err(ResponseError::ShareSessionNotFound);
                };
                if session.epoch != epoch {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                session.epoch = next_epoch(epoch);
                session.partitions.extend(fetch.iter().copied());
                for p in forget {
                    session.partitions.remove(p);
                }
                Ok(SessionView {
                    partitions: session.partitions.clone(),
                    closing: false,
                })
            }
        }
    }

    /// The session check of a ShareAcknowledge (Kafka's `acknowledgeSessionUpdate`): epoch 0
    /// is INVALID_SHARE_SESSION_EPOCH (acknowledging needs a session); -1 closes the session.
    pub fn acknowledge_session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
    ) -> Result<bool, ResponseError> {
        let mut inner = self.lock();
        let key = (group.to_string(), member.to_string());
        match epoch {
            INITIAL_EPOCH => Err(ResponseError::InvalidShareSessionEpoch),
            FINAL_EPOCH => {
                if inner.sessions.contains_key(&key) {
                    Ok(true)
                } else {
                    Err(ResponseError::ShareSessionNotFound)
                }
            }
            _ => {
                let Some(session) = inner.sessions.get_mut(&key) else {
                    return Err(ResponseError::ShareSessionNotFound);
                };
                if session.epoch != epoch {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                session.epoch = next_epoch(epoch);
                Ok(false)
            }
        }
    }

    /// Closes a member's session (epoch -1, after its acknowledgements): what it still holds
    /// of the session's partitions is released, as Kafka's `SharePartitionManager
    /// .releaseSession` releases only the partitions of the session closed. Blocking.
    ///
    /// `session` names the session: the member id itself for a client's own, or
    /// [`forwarded_session`]'s name for one a cluster node forwards. Either way the member's
    /// other sessions, and what they hold, go on: in a cluster a client keeps one session per
    /// node and closes them one at a time, and the one on the coordinator's own node is no more
    /// the member's last than any other (ending them all with it would refuse the other
    /// sessions' closing acknowledgements, and hand their records out again).
    pub fn close_session(&self, group: &str, member: &str, session: &str) {
        let _turn = self.turn();
        let mut inner = self.lock();
        let Some(closed) = inner
            .sessions
            .remove(&(group.to_string(), session.to_string()))
        else {
            return;
        };
        let limits = self.limits(&inner, group);
        let released: Vec<ShareKey> = inner
            .partitions
            .iter_mut()
            .filter(|(k, _)| k.0 == group && closed.partitions.contains(&(k.1, k.2)))
            .filter_map(|(k, p)| p.release_member(member, limits).then(|| k.clone()))
            .collect();
        self.persist(&mut inner, &released);
        let _ = self.write_pending(inner);
    }

    /// Applies one partition's acknowledgement batches for `member`, `(first, last, types)`;
    /// the state is durable before this returns. The first refused batch's error is answered,
    /// with Kafka's message when another member holds its records (the batches before it stay
    /// applied, as Kafka applies each batch on its own). Blocking.
    pub fn acknowledge(
        &self,
        key: &ShareKey,
        member: &str,
        batches: &[(i64, i64, Vec<i8>)],
    ) -> Result<(), (ResponseError, Option<&'static str>)> {
        let now = Instant::now();
        let _turn = self.turn();
        let mut inner = self.lock();
        let limits = self.limits(&inner, &key.0);
        let Some(p) = inner.partitions.get_mut(key) else {
            return Err((ResponseError::InvalidRecordState, None));
        };
        let mut result = Ok(());
        for (first, last, types) in batches {
            let types: Option<Vec<AckType>> = types.iter().map(|&t| AckType::from_id(t)).collect();
            let Some(types) = types else {
                result = Err((ResponseError::InvalidRequest, None));
                break;
            };
            if let Err(e) = p.acknowledge(member, *first, *last, &types, limits, now) {
                let message = (e == ResponseError::InvalidRecordState
                    && p.held_by_another(member, *first, *last))
                .then_some(NOT_OWNER);
                result = Err((e, message));
                break;
            }
        }
        self.persist(&mut inner, std::slice::from_ref(key));
        self.write_pending(inner).map_err(|e| (e, None))?;
        result
    }

    /// Where a fetch of `key` reads the log from (initializing the share-partition at
    /// `log_end` if the group never had it), or `None` when nothing is to be acquired.
    /// Blocking (a new share-partition's state is written).
    pub fn fetch_offset(&self, key: &ShareKey, log_start: i64, log_end: i64) -> Option<i64> {
        if !self.lock().partitions.contains_key(key) {
            let _turn = self.turn();
            let mut inner = self.lock();
            if !inner.partitions.contains_key(key) {
                let start = Self::start_offset(&inner, &key.0, log_start, log_end);
                inner
                    .partitions
                    .insert(key.clone(), SharePartition::new(start));
                self.persist(&mut inner, std::slice::from_ref(key));
                let _ = self.write_pending(inner);
            }
        }
        let mut inner = self.lock();
        let p = inner.partitions.get_mut(key)?;
        p.truncate_to(log_start);
        p.fetch_offset(log_end)
    }

    /// Acquires for `member` what the read `batches` hold (see [`SharePartition::acquire`]).
    pub fn acquire(
        &self,
        key: &ShareKey,
        member: &str,
        batches: &[FetchedBatch],
        max_records: usize,
        strict: bool,
    ) -> Acquired {
        let mut inner = self.lock();
        let limits = self.limits(&inner, &key.0);
        match inner.partitions.get_mut(key) {
            Some(p) => p.acquire(member, batches, max_records, strict, limits, Instant::now()),
            None => Vec::new(),
        }
    }

    /// The start offset and in-flight records' state of a share-partition, for describes and
    /// tests.
    pub fn partition_state(&self, key: &ShareKey) -> Option<SharePartition> {
        self.lock().partitions.get(key).cloned()
    }

    /// Deletes an Empty share group and its state (DeleteGroups). `Ok(false)`: no such share
    /// group. A group with members is NON_EMPTY_GROUP. Blocking.
    pub fn delete(&self, group: &str) -> Result<bool, ResponseError> {
        let _turn = self.turn();
        let mut inner = self.lock();
        match inner.groups.get(group) {
            None => return Ok(false),
            Some(g) if !g.members.is_empty() => return Err(ResponseError::NonEmptyGroup),
            Some(_) => {}
        }
        let keys: Vec<ShareKey> = inner
            .partitions
            .keys()
            .filter(|k| k.0 == group)
            .cloned()
            .collect();
        for k in &keys {
            inner.partitions.remove(k);
        }
        inner.sessions.retain(|(g, _), _| g != group);
        self.persist(&mut inner, &keys);
        inner.groups.remove(group);
        self.persist_group(&mut inner, group);
        self.write_pending(inner)?;
        Ok(true)
    }

    /// AlterShareGroupOffsets: each share-partition of `offsets` starts over at its offset
    /// (nothing in flight), durable before it returns; an unknown group is created, Empty. A
    /// group with members is NON_EMPTY_GROUP. Blocking.
    pub fn alter_offsets(
        &self,
        group: &str,
        offsets: &[(ShareKey, i64)],
    ) -> Result<(), ResponseError> {
        let _turn = self.turn();
        let mut inner = self.lock();
        if inner
            .groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
        {
            return Err(ResponseError::NonEmptyGroup);
        }
        if !inner.groups.contains_key(group) {
            inner
                .groups
                .insert(group.to_string(), ShareGroup::default());
            self.persist_group(&mut inner, group);
        }
        for (key, offset) in offsets {
            inner
                .partitions
                .insert(key.clone(), SharePartition::new(*offset));
        }
        let keys: Vec<ShareKey> = offsets.iter().map(|(k, _)| k.clone()).collect();
        self.persist(&mut inner, &keys);
        self.write_pending(inner)
    }

    /// DescribeShareGroupOffsets: every share-partition of `group` with its start offset and
    /// the records done with above it; `None` for no such share group.
    pub fn describe_offsets(&self, group: &str) -> Option<BTreeMap<(Uuid, i32), (i64, i64)>> {
        let inner = self.lock();
        inner.groups.get(group)?;
        Some(
            inner
                .partitions
                .iter()
                .filter(|(k, _)| k.0 == group)
                .map(|(k, p)| ((k.1, k.2), (p.start_offset(), p.delivery_complete_count())))
                .collect(),
        )
    }

    /// DeleteShareGroupOffsets: the share-partitions of `topics` go (tombstones, durable
    /// before it returns). `Ok(false)`: no such share group; a group with members is
    /// NON_EMPTY_GROUP. Blocking.
    pub fn delete_offsets(&self, group: &str, topics: &[Uuid]) -> Result<bool, ResponseError> {
        let _turn = self.turn();
        let mut inner = self.lock();
        match inner.groups.get(group) {
            None => return Ok(false),
            Some(g) if !g.members.is_empty() => return Err(ResponseError::NonEmptyGroup),
            Some(_) => {}
        }
        let keys: Vec<ShareKey> = inner
            .partitions
            .keys()
            .filter(|k| k.0 == group && topics.contains(&k.1))
            .cloned()
            .collect();
        for k in &keys {
            inner.partitions.remove(k);
        }
        self.persist(&mut inner, &keys);
        self.write_pending(inner)?;
        Ok(true)
    }

    /// Expires acquisition locks and members past their session timeout. Blocking (their
    /// releases are written).
    pub fn tick(&self, topics: &[TopicInfo]) {
        let now = Instant::now();
        let _turn = self.turn();
        let mut inner = self.lock();
        let limits: BTreeMap<String, Limits> = inner
            .groups
            .keys()
            .map(|g| (g.clone(), self.limits(&inner, g)))
            .collect();
        let default = self.settings.limits();
        let expired: Vec<ShareKey> = inner
            .partitions
            .iter_mut()
            .filter_map(|(k, p)| {
                let limits = limits.get(&k.0).copied().unwrap_or(default);
                p.expire_locks(limits, now).then(|| k.clone())
            })
            .collect();
        self.persist(&mut inner, &expired);
        let timeout = self.settings.session_timeout;
        let mut gone = Vec::new();
        for (id, g) in inner.groups.iter_mut() {
            for member in g.expire(now, timeout, topics) {
                tracing::info!(group = %id, member, "share group member's session timed out");
                gone.push((id.clone(), member));
            }
        }
        let changed: BTreeSet<String> = gone.iter().map(|(g, _)| g.clone()).collect();
        for (group, member) in gone {
            self.member_gone(&mut inner, &group, &member);
        }
        for group in changed {
            self.persist_group(&mut inner, &group);
        }
        let _ = self.write_pending(inner);
    }

    /// Compacts the state log if a round is due. Blocking.
    pub fn compact_if_due(&self, now_ms: i64) -> Result<u64, ShareStateLogError> {
        self.log.compact_if_due(now_ms)
    }

    /// Flushes and closes the state log. Blocking.
    pub fn close(&self) -> Result<(), ShareStateLogError> {
        self.log.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's sessions through different cluster nodes are distinct, and each names its
    /// member (so a member's leave closes every one of them).
    #[test]
    fn forwarded_sessions_are_apart_and_name_their_member() {
        let via_1 = forwarded_session("m", 1);
        let via_2 = forwarded_session("m", 2);
        assert_ne!(via_1, via_2);
        assert_ne!(via_1, "m");
        assert_eq!(session_member(&via_1), "m");
        assert_eq!(session_member(&via_2), "m");
        assert_eq!(session_member("m"), "m");
    }
}
