//! Share-partition state, durable: an oncelog log at
//! `<data>/oncelog-broker-state/__share_group_state-0`, the broker's counterpart of Kafka's
//! `__share_group_state` topic. Every record is the whole state of one share-partition (Kafka's
//! `ShareSnapshot`), keyed by (group, topic id, partition), so the latest record per key is
//! the state, and the log is compacted like `__consumer_offsets`. A null value (tombstone)
//! removes a share-partition (DeleteGroups). A record is durable before the request that
//! changed the state (an acknowledgement, a release) is answered; on start the log is replayed.
//!
//! On a cluster node the same records go to its replica of the coordinators' raft group
//! (`__oncelog_offsets-0`), each key behind the two bytes of [`CLUSTER_KEY_VERSION`], and are
//! replayed by the node that becomes the coordinator ([`ShareStateLog::load`]).
//!
//! | part  | layout (big-endian)                                                          |
//! |-------|------------------------------------------------------------------------------|
//! | key   | version i16 = 0, group (i16 length + UTF-8), topic id (16 bytes), partition i32 |
//! | value | version i16 = 0, state epoch i32, start offset i64, count i32, then per run:   |
//! |       | first offset i64, last offset i64, state i8 (Kafka's RecordState id), delivery count i16 |
//!
//! A share group's dynamic configuration (IncrementalAlterConfigs on its GROUP resource, which
//! Kafka keeps in its metadata log) is kept here too, under its own key version:
//!
//! | part  | layout (big-endian)                                                          |
//! |-------|------------------------------------------------------------------------------|
//! | key   | version i16 = 1, group (i16 length + UTF-8)                                  |
//! | value | version i16 = 0, count i32, then per setting: name, value (i16 length + UTF-8 each) |
//!
//! A share group's membership (Kafka keeps it in `__consumer_offsets` as its
//! `ShareGroupMetadata` and `ShareGroupMemberMetadata` records), so a restart keeps the members
//! at their epochs; the assignment is recomputed from it:
//!
//! | part  | layout (big-endian; strings: i16 length + UTF-8, -1 for null)               |
//! |-------|------------------------------------------------------------------------------|
//! | key   | version i16 = 2, group                                                       |
//! | value | version i16 = 0, group epoch i32, assignment epoch i32; topics i32, per topic: |
//! |       | name, id (16 bytes), partitions i32; members i32, per member: member id, epoch i32, |
//! |       | rack id (nullable), client id, client host, subscribed names i32, then each name |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use oncelog::format::BatchBuilder;
use oncelog::Log;
use oncelog_raft::{Ack, Replica};
use uuid::Uuid;

use super::group::{ShareGroup, ShareMember};
use super::partition::{RecordState, Snapshot};
use crate::internal_log::{self, open_replayed, StateLogError};
use crate::record_codec::{put_string, Input};

/// The directory of the log under the data directory (never opened as a topic).
pub const DIR_NAME: &str = "oncelog-broker-state/__share_group_state-0";

/// (group, topic id, partition).
pub type ShareKey = (String, Uuid, i32);

/// A share group's configuration: setting name to value.
pub type GroupConfigs = BTreeMap<String, String>;

/// What the log holds: share-partition snapshots, group configurations and memberships.
#[derive(Debug, Default)]
pub struct Stored {
    pub states: BTreeMap<ShareKey, Snapshot>,
    pub configs: BTreeMap<String, GroupConfigs>,
    pub groups: BTreeMap<String, ShareGroup>,
}

impl Stored {
    /// Replays one record (its key without the cluster prefix): the latest value per key is
    /// the state, a null value removes it.
    fn apply(&mut self, key: &[u8], value: Option<&[u8]>, now: Instant) -> Result<(), String> {
        if key.starts_with(&GROUP_KEY_VERSION.to_be_bytes()) {
            let group = decode_config_key(key)?;
            match value {
                Some(value) => {
                    self.groups.insert(group, decode_group(value, now)?);
                }
                None => {
                    self.groups.remove(&group);
                }
            }
            return Ok(());
        }
        if key.starts_with(&CONFIG_KEY_VERSION.to_be_bytes()) {
            let group = decode_config_key(key)?;
            match value {
                Some(value) => {
                    self.configs.insert(group, decode_configs(value)?);
                }
                None => {
                    self.configs.remove(&group);
                }
            }
            return Ok(());
        }
        let key = decode_key(key)?;
        match value {
            Some(value) => {
                self.states.insert(key, decode_value(value)?);
            }
            None => {
                self.states.remove(&key);
            }
        }
        Ok(())
    }
}

/// The key version that marks a share record in a cluster's replicated coordinators' log
/// (`0x7368`, "sh"; beyond Kafka's 0 to 8 and apart from the transaction states' `0x7478`):
/// the single broker's key follows it.
pub const CLUSTER_KEY_VERSION: i16 = 0x7368;

/// The single broker's key inside a cluster's share record; `None` for another record.
fn cluster_key(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&CLUSTER_KEY_VERSION.to_be_bytes()[..])
}

/// Why the share state log could not be opened, read or written.
pub type ShareStateLogError = StateLogError;

pub struct ShareStateLog {
    log: Backing,
    path: PathBuf,
}

/// Where the records go: the single broker's own log, fsynced before an answer (boxed: a
/// `Log` is large), or a cluster node's replica of the coordinators' raft group, whose append
/// returns once a majority holds it.
enum Backing {
    Local(Box<Log>),
    Replicated(Arc<Replica>),
}

impl std::fmt::Debug for ShareStateLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareStateLog")
            .field("path", &self.path)
            .finish()
    }
}

impl ShareStateLog {
    /// Opens (or creates) the log under `data_dir` and replays it into the latest snapshot of
    /// every share-partition. Blocking.
    pub fn open(data_dir: &Path) -> Result<(ShareStateLog, Stored), ShareStateLogError> {
        let path = data_dir.join(DIR_NAME);
        let mut stored = Stored::default();
        // A restored member's session starts at the load, as Kafka's coordinator does.
        let now = Instant::now();
        let log = open_replayed(&path, |r| {
            stored.apply(
                r.key.as_deref().unwrap_or_default(),
                r.value.as_deref(),
                now,
            )
        })?;
        Ok((
            ShareStateLog {
                log: Backing::Local(Box::new(log)),
                path,
            },
            stored,
        ))
    }

    /// The share state of a cluster node: records of its replica of the coordinators' raft
    /// group (docs/design.md, "Share groups in a cluster"), each key behind
    /// [`CLUSTER_KEY_VERSION`]. Nothing is read here: the coordinator replays them
    /// ([`ShareStateLog::load`]) once the offsets' load committed its barrier. `path` names it
    /// in errors.
    pub fn replicated(replica: Arc<Replica>, path: PathBuf) -> ShareStateLog {
        ShareStateLog {
            log: Backing::Replicated(replica),
            path,
        }
    }

    /// Every share record of the replicated log, replayed in offset order (the other
    /// coordinators' records are skipped): what a node that becomes the coordinator loads.
    /// Nothing for the single broker's own log, replayed at open. Blocking.
    pub fn load(&self) -> Result<Stored, ShareStateLogError> {
        let mut stored = Stored::default();
        let Backing::Replicated(replica) = &self.log else {
            return Ok(stored);
        };
        let now = Instant::now();
        let log = replica.log();
        let mut next = log.log_start_offset();
        loop {
            let fetched = log
                .fetch(next, 1 << 20)
                .map_err(|e| ShareStateLogError::Log {
                    path: self.path.clone(),
                    source: e.into(),
                })?;
            if fetched.bytes.is_empty() {
                break;
            }
            for r in fetched.records() {
                let r = r.map_err(|e| ShareStateLogError::Record {
                    path: self.path.clone(),
                    offset: next,
                    problem: e.to_string(),
                })?;
                let Some(key) = r.key.as_deref().and_then(cluster_key) else {
                    continue;
                };
                stored
                    .apply(key, r.value.as_deref(), now)
                    .map_err(|problem| ShareStateLogError::Record {
                        path: self.path.clone(),
                        offset: r.offset,
                        problem,
                    })?;
            }
            next = fetched.next_offset;
        }
        Ok(stored)
    }

    /// Writes the records (from [`configs_record`], [`group_record`], [`state_records`]) as
    /// one batch, in order, and makes them durable; nothing when there are none. Blocking.
    pub fn write(&self, records: &[Record]) -> Result<(), ShareStateLogError> {
        if records.is_empty() {
            return Ok(());
        }
        self.append(records)
    }

    /// Appends the records as one batch and makes it durable: fsynced to the own log, or
    /// committed by the cluster's raft group (keys behind [`CLUSTER_KEY_VERSION`]). Blocking
    /// (a replicated append waits for raft; called off the reactor).
    fn append(&self, records: &[Record]) -> Result<(), ShareStateLogError> {
        let err = |source: oncelog::Error| ShareStateLogError::Log {
            path: self.path.clone(),
            source,
        };
        let now = crate::clock::now_ms();
        let mut b = BatchBuilder::new();
        for (key, value) in records {
            match &self.log {
                Backing::Local(_) => {
                    b.append(now, Some(key), value.as_deref(), &[]);
                }
                Backing::Replicated(_) => {
                    let mut prefixed = CLUSTER_KEY_VERSION.to_be_bytes().to_vec();
                    prefixed.extend_from_slice(key);
                    b.append(now, Some(&prefixed), value.as_deref(), &[]);
                }
            }
        }
        let bytes = b
            .build()
            .map_err(|e| err(oncelog::Error::Append(oncelog::AppendError::Batch(e))))?;
        match &self.log {
            Backing::Local(log) => {
                log.append(&bytes).map_err(|e| err(e.into()))?;
                log.flush().map_err(|e| err(e.into()))?;
                Ok(())
            }
            Backing::Replicated(replica) => {
                let appended = tokio::runtime::Handle::current()
                    .block_on(replica.append(bytes::Bytes::from(bytes)));
                match appended {
                    Ok(Ack::Appended { .. }) | Ok(Ack::Duplicate { .. }) => Ok(()),
                    Err(e) => Err(ShareStateLogError::Replica {
                        path: self.path.clone(),
                        error: e.to_string(),
                    }),
                }
            }
        }
    }

    /// Compacts the log if a round is due. Blocking.
    /// The replicated log is not compacted (raft's partitions delete only; docs/design.md).
    pub fn compact_if_due(&self, now_ms: i64) -> Result<u64, ShareStateLogError> {
        match &self.log {
            Backing::Local(log) => internal_log::compact_if_due(log, &self.path, now_ms),
            Backing::Replicated(_) => Ok(0),
        }
    }

    /// Flushes and closes the log. Blocking.
    /// A cluster node's replica is closed with its raft host.
    pub fn close(&self) -> Result<(), ShareStateLogError> {
        let Backing::Local(log) = &self.log else {
            return Ok(());
        };
        log.close().map_err(|e| ShareStateLogError::Log {
            path: self.path.clone(),
            source: e.into(),
        })
    }
}

/// One record of the log: key and value (`None`: a tombstone).
pub type Record = (Vec<u8>, Option<Vec<u8>>);

/// A group's configuration record (`None`: a tombstone).
pub fn configs_record(group: &str, configs: Option<&GroupConfigs>) -> Record {
    let mut key = CONFIG_KEY_VERSION.to_be_bytes().to_vec();
    put_string(&mut key, group);
    let value = configs.map(|c| {
        let mut out = 0i16.to_be_bytes().to_vec();
        out.extend_from_slice(&(c.len() as i32).to_be_bytes());
        for (name, value) in c {
            put_string(&mut out, name);
            put_string(&mut out, value);
        }
        out
    });
    (key, value)
}

/// A group's membership record (`None`: a tombstone).
pub fn group_record(group: &str, value: Option<&ShareGroup>) -> Record {
    let mut key = GROUP_KEY_VERSION.to_be_bytes().to_vec();
    put_string(&mut key, group);
    (key, value.map(encode_group))
}

/// Share-partition snapshot records (`None`: a tombstone).
pub fn state_records(states: &[(ShareKey, Option<Snapshot>)]) -> Vec<Record> {
    states
        .iter()
        .map(|(key, snapshot)| (encode_key(key), snapshot.as_ref().map(encode_value)))
        .collect()
}

/// The key version of a group configuration record.
const CONFIG_KEY_VERSION: i16 = 1;
/// The key version of a group membership record.
const GROUP_KEY_VERSION: i16 = 2;

fn put_nullable(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn take_string(input: &mut Input<'_>, what: &str) -> Result<Option<String>, String> {
    let len = input.i16(what)?;
    if len < 0 {
        return Ok(None);
    }
    input.utf8(len as usize, what).map(Some)
}

/// A group's membership, as the value of its key-version-2 record (the members' last-seen
/// times and assignments are not stored).
pub fn encode_group(g: &ShareGroup) -> Vec<u8> {
    let mut out = 0i16.to_be_bytes().to_vec();
    out.extend_from_slice(&g.group_epoch.to_be_bytes());
    out.extend_from_slice(&g.assignment_epoch.to_be_bytes());
    out.extend_from_slice(&(g.subscribed_partitions.len() as i32).to_be_bytes());
    for (name, (id, partitions)) in &g.subscribed_partitions {
        put_string(&mut out, name);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&partitions.to_be_bytes());
    }
    out.extend_from_slice(&(g.members.len() as i32).to_be_bytes());
    for m in g.members.values() {
        put_string(&mut out, &m.member_id);
        out.extend_from_slice(&m.member_epoch.to_be_bytes());
        put_nullable(&mut out, m.rack_id.as_deref());
        put_string(&mut out, &m.client_id);
        put_string(&mut out, &m.client_host);
        out.extend_from_slice(&(m.subscribed.len() as i32).to_be_bytes());
        for name in &m.subscribed {
            put_string(&mut out, name);
        }
    }
    out
}

fn decode_group(bytes: &[u8], now: Instant) -> Result<ShareGroup, String> {
    let mut input = Input(bytes);
    let version = input.i16("value version")?;
    if version != 0 {
        return Err(format!("share group value version {version}"));
    }
    let mut g = ShareGroup {
        group_epoch: input.i32("group epoch")?,
        assignment_epoch: input.i32("assignment epoch")?,
        ..ShareGroup::default()
    };
    for _ in 0..input.i32("topic count")?.max(0) {
        let name = take_string(&mut input, "topic name")?.unwrap_or_default();
        let id = Uuid::from_slice(input.take(16, "topic id")?).map_err(|e| e.to_string())?;
        let partitions = input.i32("partition count")?;
        g.subscribed_partitions.insert(name, (id, partitions));
    }
    for _ in 0..input.i32("member count")?.max(0) {
        let member_id = take_string(&mut input, "member id")?.unwrap_or_default();
        let member_epoch = input.i32("member epoch")?;
        let rack_id = take_string(&mut input, "rack id")?;
        let client_id = take_string(&mut input, "client id")?.unwrap_or_default();
        let client_host = take_string(&mut input, "client host")?.unwrap_or_default();
        let mut subscribed = std::collections::BTreeSet::new();
        for _ in 0..input.i32("subscription count")?.max(0) {
            subscribed.insert(take_string(&mut input, "subscribed topic")?.unwrap_or_default());
        }
        g.members.insert(
            member_id.clone(),
            ShareMember {
                member_id,
                member_epoch,
                rack_id,
                client_id,
                client_host,
                subscribed,
                assignment: Default::default(),
                last_seen: now,
            },
        );
    }
    if !input.is_empty() {
        return Err(format!("{} bytes after the members", input.len()));
    }
    g.assign_members();
    Ok(g)
}

fn decode_config_key(bytes: &[u8]) -> Result<String, String> {
    let mut input = Input(bytes);
    input.i16("key version")?;
    let len = input.i16("group length")?;
    input.utf8(len.max(0) as usize, "group")
}

fn decode_configs(bytes: &[u8]) -> Result<GroupConfigs, String> {
    let mut input = Input(bytes);
    let version = input.i16("value version")?;
    if version != 0 {
        return Err(format!("group config value version {version}"));
    }
    let count = input.i32("config count")?;
    let mut configs = GroupConfigs::new();
    for _ in 0..count.max(0) {
        let len = input.i16("name length")?;
        let name = input.utf8(len.max(0) as usize, "name")?;
        let len = input.i16("value length")?;
        let value = input.utf8(len.max(0) as usize, "value")?;
        configs.insert(name, value);
    }
    Ok(configs)
}

fn encode_key((group, topic_id, partition): &ShareKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + group.len());
    out.extend_from_slice(&0i16.to_be_bytes());
    put_string(&mut out, group);
    out.extend_from_slice(topic_id.as_bytes());
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

fn decode_key(bytes: &[u8]) -> Result<ShareKey, String> {
    let mut input = Input(bytes);
    let version = input.i16("key version")?;
    if version != 0 {
        return Err(format!("share state key version {version}"));
    }
    let len = input.i16("group length")?;
    let group = input.utf8(len.max(0) as usize, "group")?;
    let id = Uuid::from_slice(input.take(16, "topic id")?).map_err(|e| e.to_string())?;
    let partition = input.i32("partition")?;
    Ok((group, id, partition))
}

fn encode_value(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(22 + 19 * s.batches.len());
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&s.state_epoch.to_be_bytes());
    out.extend_from_slice(&s.start_offset.to_be_bytes());
    out.extend_from_slice(&(s.batches.len() as i32).to_be_bytes());
    for &(first, last, state, count) in &s.batches {
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&last.to_be_bytes());
        out.push(state.id() as u8);
        out.extend_from_slice(&count.to_be_bytes());
    }
    out
}

fn decode_value(bytes: &[u8]) -> Result<Snapshot, String> {
    let mut input = Input(bytes);
    let version = input.i16("value version")?;
    if version != 0 {
        return Err(format!("share state value version {version}"));
    }
    let state_epoch = input.i32("state epoch")?;
    let start_offset = input.i64("start offset")?;
    let count = input.i32("batch count")?;
    // Each run takes 19 bytes: a count the bytes cannot hold is damage, not an allocation.
    if count < 0 || count as usize > input.len() / 19 {
        return Err(format!("{count} state batches in {} bytes", input.len()));
    }
    let mut batches = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let first = input.i64("first offset")?;
        let last = input.i64("last offset")?;
        let id = input.take(1, "delivery state")?[0] as i8;
        let state = RecordState::from_id(id).ok_or(format!("delivery state {id}"))?;
        let delivery_count = input.i16("delivery count")?;
        batches.push((first, last, state, delivery_count));
    }
    if !input.is_empty() {
        return Err(format!("{} bytes after the state batches", input.len()));
    }
    Ok(Snapshot {
        start_offset,
        state_epoch,
        batches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster's share records are the single broker's behind their own key version, and
    /// replay into the same state; the other coordinators' records are not theirs.
    #[test]
    fn a_cluster_share_record_replays_as_the_single_brokers() {
        let key = ("g".to_string(), Uuid::from_u128(7), 3);
        let s = Snapshot {
            start_offset: 12,
            state_epoch: 0,
            batches: vec![(12, 14, RecordState::Acknowledged, 1)],
        };
        let mut cluster = CLUSTER_KEY_VERSION.to_be_bytes().to_vec();
        cluster.extend_from_slice(&encode_key(&key));
        let inner = cluster_key(&cluster).unwrap();
        let mut stored = Stored::default();
        stored
            .apply(inner, Some(&encode_value(&s)), Instant::now())
            .unwrap();
        assert_eq!(stored.states[&key], s);
        stored.apply(inner, None, Instant::now()).unwrap();
        assert!(stored.states.is_empty());
        let mut txn = crate::txn_coordinator::CLUSTER_KEY_VERSION
            .to_be_bytes()
            .to_vec();
        txn.extend_from_slice(b"tx");
        assert_eq!(cluster_key(&txn), None);
        assert_eq!(cluster_key(&encode_key(&key)), None);
    }

    #[test]
    fn key_and_value_round_trip() {
        let key = ("g".to_string(), Uuid::from_u128(7), 3);
        assert_eq!(decode_key(&encode_key(&key)).unwrap(), key);
        let s = Snapshot {
            start_offset: 12,
            state_epoch: 4,
            batches: vec![
                (12, 14, RecordState::Archived, 5),
                (15, 15, RecordState::Available, 1),
            ],
        };
        assert_eq!(decode_value(&encode_value(&s)).unwrap(), s);
        assert!(decode_value(&encode_value(&s)[..20]).is_err());
    }

    #[test]
    fn a_group_round_trips_with_its_assignment_recomputed() {
        use crate::consumer_group::TopicInfo;
        use crate::share::group::ShareHeartbeat;
        let topics = [TopicInfo {
            name: "t".into(),
            id: Uuid::from_u128(9),
            partitions: 2,
        }];
        let mut g = ShareGroup::default();
        let now = Instant::now();
        let join = ShareHeartbeat {
            member_id: "m".into(),
            member_epoch: 0,
            rack_id: Some("r".into()),
            subscribed_topic_names: Some(vec!["t".into()]),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        };
        g.heartbeat(join, &topics, now).unwrap();
        let back = decode_group(&encode_group(&g), now).unwrap();
        assert_eq!(back, g);
        assert!(decode_group(&encode_group(&g)[..30], now).is_err());
    }
}
