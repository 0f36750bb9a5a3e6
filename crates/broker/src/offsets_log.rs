//! Committed offsets, durable: an oncelog log at
//! `<data>/oncelog-broker-state/__consumer_offsets-0` (a directory Kafka never writes, so a
//! Kafka log dir's own `__consumer_offsets-N` partitions are left alone) holding Kafka's
//! own `__consumer_offsets` records (key version 1: group, topic, partition; value version 3:
//! offset, leader epoch, metadata, commit time), one batch per OffsetCommit request, fsynced
//! before the commit is answered. On start the log is replayed into memory; a tombstone (null
//! value) deletes an offset. Group-metadata records (key version 2) and the consumer-protocol
//! group records (key versions 3 to 8, [`crate::consumer_group_records`]), which Kafka writes
//! to the same partitions, are skipped by that replay and read by their own
//! ([`OffsetsLog::stored_groups`], [`OffsetsLog::stored_consumer_groups`]), so a Kafka
//! `__consumer_offsets` partition replays too.
//!
//! The log grows by one record per committed partition: Kafka bounds it by key compaction
//! (`cleanup.policy=compact`), which the broker does not run on it yet. The seam is the
//! key: every record's key is Kafka's, so compacting this log keeps the latest per partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use oncelog::format::BatchBuilder;
use oncelog::Log;
use oncelog_raft::{Ack, Replica};

use crate::internal_log::{self, open_replayed, StateLogError};

use crate::consumer_group_records::{RecordKey, RecordValue};
use crate::group_metadata::{self, GroupMetadata};
use crate::record_codec::{put_string, reader_derefs, Input};

/// The directory of the log under the data directory (never opened as a topic).
pub const DIR_NAME: &str = "oncelog-broker-state/__consumer_offsets-0";

/// One committed position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// (group, topic, partition).
pub type OffsetKey = (String, String, i32);

/// Why the offsets log could not be opened, read or written.
pub type OffsetsLogError = StateLogError;

/// What one stored record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetRecord {
    /// An offset commit (`None`: the offset was deleted).
    Offset(OffsetKey, Option<Committed>),
    /// A group-metadata record (membership, Kafka's key version 2): not used here.
    GroupMetadata(String),
    /// A consumer-protocol group's record (key versions 3 to 8): not used here.
    ConsumerGroup(String),
}

pub struct OffsetsLog {
    log: Backing,
    path: PathBuf,
}

/// Where the records go and are read from: the one seam between the single broker and a
/// cluster (docs/design.md, "The group coordinator in a cluster").
enum Backing {
    /// The broker's own log, fsynced before an answer (boxed: a `Log` is large).
    Local(Box<Log>),
    /// This node's replica of the cluster's offsets group: an append returns once a majority
    /// holds it (raft's commit); reads see what is committed.
    Replicated(Arc<Replica>),
}

impl Backing {
    fn log(&self) -> &Log {
        match self {
            Backing::Local(log) => log,
            Backing::Replicated(replica) => replica.log(),
        }
    }
}

impl std::fmt::Debug for OffsetsLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetsLog")
            .field("path", &self.path)
            .finish()
    }
}

impl OffsetsLog {
    /// Opens (or creates) the log under `data_dir` and replays it. Blocking.
    pub fn open(
        data_dir: &Path,
    ) -> Result<(OffsetsLog, BTreeMap<OffsetKey, Committed>), OffsetsLogError> {
        let path = data_dir.join(DIR_NAME);
        let mut offsets = BTreeMap::new();
        let log = open_replayed(&path, |r| {
            replay(&mut offsets, decode(r.key.as_ref(), r.value.as_ref())?);
            Ok(())
        })?;
        Ok((
            OffsetsLog {
                log: Backing::Local(Box::new(log)),
                path,
            },
            offsets,
        ))
    }

    /// The offsets log of a cluster node: its replica of the offsets group. Nothing is read
    /// here: the node that leads the group replays it ([`OffsetsLog::stored_offsets`]) once
    /// everything committed before its term is in its log.
    /// `path` names it in errors (the replica's directory).
    pub fn replicated(replica: Arc<Replica>, path: PathBuf) -> OffsetsLog {
        OffsetsLog {
            log: Backing::Replicated(replica),
            path,
        }
    }

    /// On a cluster node, appends a record with no key (every replay skips it) and returns
    /// once it is committed: everything a previous leader committed is then in this node's
    /// log, to replay. A no-op for the single broker's own log. Blocking.
    pub fn barrier(&self) -> Result<(), OffsetsLogError> {
        if matches!(self.log, Backing::Local(_)) {
            return Ok(());
        }
        let mut b = BatchBuilder::new();
        b.append(crate::clock::now_ms(), None, None, &[]);
        let bytes = b.build().map_err(|e| OffsetsLogError::Log {
            path: self.path.clone(),
            source: oncelog::Error::Append(oncelog::AppendError::Batch(e)),
        })?;
        self.append_bytes(Bytes::from(bytes))
    }

    /// Every committed offset the log holds, replayed in offset order (tombstones remove):
    /// what a cluster node loads when it becomes the coordinator. Blocking.
    pub fn stored_offsets(&self) -> Result<BTreeMap<OffsetKey, Committed>, OffsetsLogError> {
        let mut offsets = BTreeMap::new();
        self.scan(|_, key, value| {
            let key = Bytes::copy_from_slice(key);
            let value = value.map(Bytes::copy_from_slice);
            replay(&mut offsets, decode(Some(&key), value.as_ref())?);
            Ok(())
        })?;
        Ok(offsets)
    }

    /// Appends a whole batch: fsynced to the own log, or committed by the offsets group.
    fn append_bytes(&self, bytes: Bytes) -> Result<(), OffsetsLogError> {
        let err = |source: oncelog::Error| OffsetsLogError::Log {
            path: self.path.clone(),
            source,
        };
        match &self.log {
            Backing::Local(log) => {
                log.append(&bytes).map_err(|e| err(e.into()))?;
                log.flush().map_err(|e| err(e.into()))?;
                Ok(())
            }
            Backing::Replicated(replica) => {
                // Called off the reactor (every writer runs in `spawn_blocking`).
                let appended = tokio::runtime::Handle::current().block_on(replica.append(bytes));
                match appended {
                    Ok(Ack::Appended { .. }) | Ok(Ack::Duplicate { .. }) => Ok(()),
                    Err(e) => Err(OffsetsLogError::Replica {
                        path: self.path.clone(),
                        error: e.to_string(),
                    }),
                }
            }
        }
    }

    /// Writes the commits as one batch and makes it durable. Blocking.
    pub fn append(&self, commits: &[(OffsetKey, Committed)]) -> Result<(), OffsetsLogError> {
        self.write_batch(
            commits
                .iter()
                .map(|(key, c)| (c.commit_timestamp, encode_key(key), Some(encode_value(c)))),
        )
    }

    /// Writes Kafka's tombstones as one batch and makes it durable: a null value under the
    /// `OffsetCommitKey` of each offset (OffsetDelete, DeleteGroups) and under the
    /// `GroupMetadataKey` of each group (DeleteGroups), so neither a replay nor a compaction
    /// brings them back. Blocking.
    pub fn append_tombstones(
        &self,
        offsets: &[OffsetKey],
        groups: &[String],
        now_ms: i64,
    ) -> Result<(), OffsetsLogError> {
        let offsets = offsets.iter().map(|key| (now_ms, encode_key(key), None));
        let groups = groups
            .iter()
            .map(|group| (now_ms, encode_group_key(group), None));
        self.write_batch(offsets.chain(groups))
    }

    /// Writes Kafka's group-metadata records (key version 2, value version 3, see
    /// [`crate::group_metadata`]) as one batch and makes it durable. Blocking.
    pub fn append_groups(
        &self,
        groups: &[(String, GroupMetadata)],
        now_ms: i64,
    ) -> Result<(), OffsetsLogError> {
        self.write_batch(groups.iter().map(|(group, value)| {
            (
                now_ms,
                encode_group_key(group),
                Some(group_metadata::encode_value(value)),
            )
        }))
    }

    /// Writes consumer-protocol group records ([`crate::consumer_group_records`]; `None`: a
    /// tombstone) as one batch, in the order given, and makes it durable. Blocking.
    pub fn append_consumer_records(
        &self,
        records: &[(RecordKey, Option<RecordValue>)],
        now_ms: i64,
    ) -> Result<(), OffsetsLogError> {
        self.write_batch(records.iter().map(|(key, value)| {
            (
                now_ms,
                key.encode(),
                value.as_ref().map(RecordValue::encode),
            )
        }))
    }

    /// Writes (timestamp, key, value; `None`: a tombstone) records as one batch, in the order
    /// given, and makes it durable; nothing at all when there are none. What every `append*`
    /// shares: they differ only in the records' encodings. Blocking.
    fn write_batch(
        &self,
        records: impl IntoIterator<Item = (i64, Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<(), OffsetsLogError> {
        let err = |source: oncelog::Error| OffsetsLogError::Log {
            path: self.path.clone(),
            source,
        };
        let mut b = BatchBuilder::new();
        let mut empty = true;
        for (timestamp, key, value) in records {
            b.append(timestamp, Some(&key), value.as_deref(), &[]);
            empty = false;
        }
        if empty {
            return Ok(());
        }
        let bytes = b
            .build()
            .map_err(|e| err(oncelog::Error::Append(oncelog::AppendError::Batch(e))))?;
        self.append_bytes(Bytes::from(bytes))
    }

    /// Calls `each` with the offset, key and value of every record, oldest first. Blocking.
    fn scan(
        &self,
        mut each: impl FnMut(i64, &[u8], Option<&[u8]>) -> Result<(), String>,
    ) -> Result<(), OffsetsLogError> {
        let log = self.log.log();
        let mut next = log.log_start_offset();
        loop {
            let fetched = log.fetch(next, 1 << 20).map_err(|e| OffsetsLogError::Log {
                path: self.path.clone(),
                source: e.into(),
            })?;
            if fetched.bytes.is_empty() {
                break;
            }
            for r in fetched.records() {
                let r = r.map_err(|e| OffsetsLogError::Record {
                    path: self.path.clone(),
                    offset: next,
                    problem: e.to_string(),
                })?;
                let Some(key) = r.key.as_ref() else { continue };
                // A cluster's transaction coordinator shares the log: its records are its own.
                if key.starts_with(&crate::txn_coordinator::CLUSTER_KEY_VERSION.to_be_bytes()) {
                    continue;
                }
                // And so does its share coordinator.
                if key.starts_with(&crate::share::state_log::CLUSTER_KEY_VERSION.to_be_bytes()) {
                    continue;
                }
                each(r.offset, key, r.value.as_deref()).map_err(|problem| {
                    OffsetsLogError::Record {
                        path: self.path.clone(),
                        offset: r.offset,
                        problem,
                    }
                })?;
            }
            next = fetched.next_offset;
        }
        Ok(())
    }

    /// The latest group-metadata record of every group that has one and no later tombstone:
    /// what the coordinator reloads at start. Blocking.
    pub fn stored_groups(&self) -> Result<BTreeMap<String, GroupMetadata>, OffsetsLogError> {
        self.latest(
            |key| match decode(Some(&Bytes::copy_from_slice(key)), None) {
                Ok(OffsetRecord::GroupMetadata(group)) => Ok(Some(group)),
                _ => Ok(None),
            },
            |_, value| group_metadata::decode_value(value),
        )
    }

    /// The latest consumer-protocol group record of every key that has one and no later
    /// tombstone (key versions 3 to 8): what the coordinator reloads at start
    /// ([`crate::consumer_group::ConsumerGroups::restore`]). Blocking.
    pub fn stored_consumer_groups(
        &self,
    ) -> Result<BTreeMap<RecordKey, RecordValue>, OffsetsLogError> {
        self.latest(RecordKey::decode, RecordValue::decode)
    }

    /// The latest value of every key `decode_key` takes (`Some`) and no later tombstone
    /// removed, decoded by `decode_value`: the one replay both `stored_*` readers share.
    /// Blocking.
    fn latest<K: Ord, V>(
        &self,
        mut decode_key: impl FnMut(&[u8]) -> Result<Option<K>, String>,
        mut decode_value: impl FnMut(&K, &[u8]) -> Result<V, String>,
    ) -> Result<BTreeMap<K, V>, OffsetsLogError> {
        let mut latest = BTreeMap::new();
        self.scan(|_, key, value| {
            let Some(key) = decode_key(key)? else {
                return Ok(());
            };
            match value {
                None => {
                    latest.remove(&key);
                }
                Some(value) => {
                    let value = decode_value(&key, value)?;
                    latest.insert(key, value);
                }
            }
            Ok(())
        })?;
        Ok(latest)
    }

    /// Compacts the log if a round is due (its dirty ratio, Kafka's rules), keeping the
    /// latest record of every key. Answers the records removed. Blocking.
    /// The replicated log is not compacted (raft's partitions delete only; docs/design.md).
    pub fn compact_if_due(&self, now_ms: i64) -> Result<u64, OffsetsLogError> {
        match &self.log {
            Backing::Local(log) => internal_log::compact_if_due(log, &self.path, now_ms),
            Backing::Replicated(_) => Ok(0),
        }
    }

    /// Flushes and closes the log. Blocking.
    /// A cluster node's replica is closed with its raft host.
    pub fn close(&self) -> Result<(), OffsetsLogError> {
        let Backing::Local(log) = &self.log else {
            return Ok(());
        };
        log.close().map_err(|e| OffsetsLogError::Log {
            path: self.path.clone(),
            source: e.into(),
        })
    }
}

/// Kafka's `OffsetCommitKey`, version 1.
pub fn encode_key((group, topic, partition): &OffsetKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + group.len() + topic.len());
    out.extend_from_slice(&1i16.to_be_bytes());
    put_string(&mut out, group);
    put_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

/// Kafka's `GroupMetadataKey` (key version 2): the group id.
pub fn encode_group_key(group: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + group.len());
    out.extend_from_slice(&2i16.to_be_bytes());
    put_string(&mut out, group);
    out
}

/// Kafka's `OffsetCommitValue`, version 3.
pub fn encode_value(c: &Committed) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + c.metadata.len());
    out.extend_from_slice(&3i16.to_be_bytes());
    out.extend_from_slice(&c.offset.to_be_bytes());
    out.extend_from_slice(&c.leader_epoch.to_be_bytes());
    put_string(&mut out, &c.metadata);
    out.extend_from_slice(&c.commit_timestamp.to_be_bytes());
    out
}

struct Reader<'a>(Input<'a>);

reader_derefs!(Reader, 0);

impl Reader<'_> {
    /// A string (null read as empty).
    fn string(&mut self, what: &str) -> Result<String, String> {
        let len = self.i16(what)?;
        if len < 0 {
            return Ok(String::new());
        }
        self.utf8(len as usize, what)
    }
    /// A compact string (length + 1 as an unsigned varint; 0 is null, read as empty).
    fn compact_string(&mut self, what: &str) -> Result<String, String> {
        let Some(len) = (self.varint(what)? as usize).checked_sub(1) else {
            return Ok(String::new());
        };
        self.utf8(len, what)
    }
    /// Tagged fields (Kafka 4.4 writes the topic id as tag 0): skipped.
    fn tagged_fields(&mut self, what: &str) -> Result<(), String> {
        for _ in 0..self.varint(what)? {
            self.varint(what)?;
            let size = self.varint(what)? as usize;
            self.take(size, what)?;
        }
        Ok(())
    }
}

/// The replay rule of committed offsets, the same for the single broker's log at start and a
/// cluster coordinator's load of its replica: a commit sets its key's offset (the later one
/// wins), a tombstone deletes it, and the groups' own records leave the offsets as they are
/// (their replays are [`OffsetsLog::stored_groups`] and [`OffsetsLog::stored_consumer_groups`]).
fn replay(offsets: &mut BTreeMap<OffsetKey, Committed>, record: OffsetRecord) {
    match record {
        OffsetRecord::Offset(key, Some(c)) => {
            offsets.insert(key, c);
        }
        OffsetRecord::Offset(key, None) => {
            offsets.remove(&key);
        }
        OffsetRecord::GroupMetadata(_) | OffsetRecord::ConsumerGroup(_) => {}
    }
}

/// Decodes one record of a `__consumer_offsets` partition (Kafka's key versions 0 to 8, offset
/// value versions 0 to 4; the group records' values are read elsewhere).
pub fn decode(key: Option<&Bytes>, value: Option<&Bytes>) -> Result<OffsetRecord, String> {
    let key = key.ok_or("a record without a key")?;
    let mut k = Reader(Input(key));
    let version = k.i16("the key version")?;
    match version {
        0 | 1 => {
            let group = k.string("the group")?;
            let topic = k.string("the topic")?;
            let partition = k.i32("the partition")?;
            let key = (group, topic, partition);
            let Some(value) = value else {
                return Ok(OffsetRecord::Offset(key, None));
            };
            let mut v = Reader(Input(value));
            let vv = v.i16("the value version")?;
            let committed = match vv {
                0..=2 => {
                    let offset = v.i64("the offset")?;
                    let metadata = v.string("the metadata")?;
                    let commit_timestamp = v.i64("the commit timestamp")?;
                    // v1's expire timestamp is not used.
                    Committed {
                        offset,
                        leader_epoch: -1,
                        metadata,
                        commit_timestamp,
                    }
                }
                3 => {
                    let offset = v.i64("the offset")?;
                    let leader_epoch = v.i32("the leader epoch")?;
                    let metadata = v.string("the metadata")?;
                    let commit_timestamp = v.i64("the commit timestamp")?;
                    Committed {
                        offset,
                        leader_epoch,
                        metadata,
                        commit_timestamp,
                    }
                }
                4 => {
                    // The flexible version Kafka 4.4 writes: v3's fields, compact metadata,
                    // tagged fields after.
                    let offset = v.i64("the offset")?;
                    let leader_epoch = v.i32("the leader epoch")?;
                    let metadata = v.compact_string("the metadata")?;
                    let commit_timestamp = v.i64("the commit timestamp")?;
                    v.tagged_fields("the tagged fields")?;
                    Committed {
                        offset,
                        leader_epoch,
                        metadata,
                        commit_timestamp,
                    }
                }
                other => return Err(format!("offset value version {other}, 0 to 4 are known")),
            };
            Ok(OffsetRecord::Offset(key, Some(committed)))
        }
        2 => Ok(OffsetRecord::GroupMetadata(k.string("the group")?)),
        3..=8 => Ok(OffsetRecord::ConsumerGroup(k.string("the group")?)),
        other => Err(format!("key version {other}, 0 to 8 are known")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster's transaction and share coordinators write their states into the same
    /// replicated log (key versions [`crate::txn_coordinator::CLUSTER_KEY_VERSION`] and
    /// [`crate::share::state_log::CLUSTER_KEY_VERSION`]): every offsets replay passes over
    /// them, where any other unknown key version is refused.
    #[test]
    fn the_transaction_and_share_states_sharing_the_log_are_passed_over_by_every_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = OffsetsLog::open(dir.path()).unwrap();
        let commit = Committed {
            offset: 5,
            leader_epoch: 0,
            metadata: String::new(),
            commit_timestamp: 1,
        };
        log.append(&[(("g".into(), "t".into(), 0), commit.clone())])
            .unwrap();
        let mut key = crate::txn_coordinator::CLUSTER_KEY_VERSION
            .to_be_bytes()
            .to_vec();
        key.extend_from_slice(b"copier-0");
        let mut b = BatchBuilder::new();
        b.append(1, Some(&key), Some(br#"{"state":"ongoing"}"#), &[]);
        // And so does the share coordinator (docs/design.md, "Share groups in a cluster").
        let mut share = crate::share::state_log::CLUSTER_KEY_VERSION
            .to_be_bytes()
            .to_vec();
        share.extend_from_slice(&[0, 0, 0, 1, b's']);
        b.append(1, Some(&share), Some(&[0, 0]), &[]);
        log.append_bytes(Bytes::from(b.build().unwrap())).unwrap();
        let offsets = log.stored_offsets().unwrap();
        assert_eq!(offsets.len(), 1);
        assert_eq!(offsets[&("g".into(), "t".into(), 0)], commit);
        assert!(log.stored_groups().unwrap().is_empty());
        assert!(log.stored_consumer_groups().unwrap().is_empty());
        // Any other key version beyond Kafka's is refused, with its offset.
        let mut b = BatchBuilder::new();
        b.append(1, Some(&[0x7f, 0x00, 0, 0]), None, &[]);
        log.append_bytes(Bytes::from(b.build().unwrap())).unwrap();
        assert!(matches!(
            log.stored_offsets(),
            Err(OffsetsLogError::Record { offset: 3, .. })
        ));
    }

    /// What a cluster's new coordinator replays ([`OffsetsLog::stored_offsets`], over the scan
    /// a replica's log shares) is what the single broker's open replays: commits, tombstones
    /// and group records alike (a barrier is a no-op on the own log, which is compacted and
    /// takes no keyless record); a damaged record is refused with its offset.
    #[test]
    fn the_coordinator_load_replays_as_the_open_does_and_names_a_damaged_record() {
        let dir = tempfile::tempdir().unwrap();
        let commit = |offset| Committed {
            offset,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
        };
        let key = |p| ("g".to_string(), "t".to_string(), p);
        let (log, _) = OffsetsLog::open(dir.path()).unwrap();
        log.append(&[(key(0), commit(5)), (key(1), commit(6))])
            .unwrap();
        log.append_groups(&[], 0).unwrap();
        log.append(&[(key(0), commit(7)), (key(2), commit(8))])
            .unwrap();
        log.append_tombstones(&[key(1)], &["gone".to_string()], 0)
            .unwrap();
        log.barrier().unwrap();
        let loaded = log.stored_offsets().unwrap();
        log.close().unwrap();
        let (log, opened) = OffsetsLog::open(dir.path()).unwrap();
        assert_eq!(loaded, opened);
        assert_eq!(
            loaded
                .iter()
                .map(|(k, c)| (k.2, c.offset))
                .collect::<Vec<_>>(),
            vec![(0, 7), (2, 8)]
        );
        // A key of version 1 cut short.
        let end = log.log.log().high_watermark();
        let mut b = BatchBuilder::new();
        b.append(
            0,
            Some(&[0, 1, 0, 9, b'g']),
            Some(&encode_value(&commit(1))),
            &[],
        );
        log.append_bytes(Bytes::from(b.build().unwrap())).unwrap();
        match log.stored_offsets() {
            Err(OffsetsLogError::Record { offset, .. }) => assert_eq!(offset, end),
            other => panic!("{other:?}"),
        }
        log.close().unwrap();
    }

    #[test]
    fn a_commit_reads_back_as_written_and_a_restart_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = ("g".to_string(), "orders".to_string(), 3);
        let c = Committed {
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
        };
        {
            let (log, offsets) = OffsetsLog::open(dir.path()).unwrap();
            assert!(offsets.is_empty());
            log.append(&[(key.clone(), c.clone())]).unwrap();
            let c2 = Committed {
                offset: 43,
                ..c.clone()
            };
            log.append(&[(key.clone(), c2)]).unwrap();
            log.close().unwrap();
        }
        let (log, offsets) = OffsetsLog::open(dir.path()).unwrap();
        assert_eq!(
            offsets.get(&key).map(|c| c.offset),
            Some(43),
            "the latest wins"
        );
        log.close().unwrap();
    }

    #[test]
    fn compaction_keeps_the_latest_commit_of_every_key_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let commit = |offset| Committed {
            offset,
            leader_epoch: 0,
            metadata: String::new(),
            commit_timestamp: 1_700_000_000_000,
        };
        let keys: Vec<OffsetKey> = (0..4)
            .map(|p| ("g".to_string(), "t".to_string(), p))
            .collect();
        let (log, _) = OffsetsLog::open(dir.path()).unwrap();
        // Enough commits to seal segments (4 MiB each): most are superseded.
        for round in 0..60_000i64 {
            let batch: Vec<_> = keys.iter().map(|k| (k.clone(), commit(round))).collect();
            log.log
                .log()
                .append(&{
                    let mut b = oncelog::format::BatchBuilder::new();
                    for (k, c) in &batch {
                        b.append(
                            c.commit_timestamp,
                            Some(&encode_key(k)),
                            Some(&encode_value(c)),
                            &[],
                        );
                    }
                    b.build().unwrap()
                })
                .unwrap();
        }
        log.log.log().flush().unwrap();
        let before = log.log.log().size_bytes();
        let removed = log.compact_if_due(1_700_000_000_000).unwrap();
        assert!(removed > 100_000, "{removed}");
        assert!(log.log.log().size_bytes() < before / 2);
        assert_eq!(
            log.compact_if_due(1_700_000_000_000).unwrap(),
            0,
            "not due again"
        );
        log.close().unwrap();
        let (log, offsets) = OffsetsLog::open(dir.path()).unwrap();
        for k in &keys {
            assert_eq!(offsets.get(k).map(|c| c.offset), Some(59_999), "{k:?}");
        }
        log.close().unwrap();
    }

    #[test]
    fn tombstones_remove_offsets_across_a_restart_and_decode_as_kafkas() {
        let dir = tempfile::tempdir().unwrap();
        let c = Committed {
            offset: 7,
            leader_epoch: 0,
            metadata: String::new(),
            commit_timestamp: 1_700_000_000_000,
        };
        let kept = ("g".to_string(), "t".to_string(), 0);
        let gone = ("g".to_string(), "t".to_string(), 1);
        {
            let (log, _) = OffsetsLog::open(dir.path()).unwrap();
            log.append(&[(kept.clone(), c.clone()), (gone.clone(), c.clone())])
                .unwrap();
            log.append_tombstones(
                std::slice::from_ref(&gone),
                &["g".to_string()],
                1_700_000_000_001,
            )
            .unwrap();
            log.close().unwrap();
        }
        let (log, offsets) = OffsetsLog::open(dir.path()).unwrap();
        assert_eq!(offsets.get(&kept), Some(&c));
        assert_eq!(
            offsets.get(&gone),
            None,
            "the tombstone wins after a restart"
        );
        log.close().unwrap();
        assert_eq!(
            decode(Some(&Bytes::from(encode_group_key("g"))), None).unwrap(),
            OffsetRecord::GroupMetadata("g".into())
        );
        assert_eq!(encode_group_key("g"), b"\x00\x02\x00\x01g");
    }

    #[test]
    fn kafkas_layout_and_its_older_versions_decode() {
        let key = ("group-1".to_string(), "t".to_string(), 7);
        let kb = Bytes::from(encode_key(&key));
        // Byte layout of OffsetCommitKey v1: version, group, topic, partition.
        assert_eq!(
            &kb[..],
            b"\x00\x01\x00\x07group-1\x00\x01t\x00\x00\x00\x07".as_slice()
        );
        // OffsetCommitValue v1: offset, metadata, commit ts, expire ts.
        let mut v1 = vec![0, 1];
        v1.extend_from_slice(&9i64.to_be_bytes());
        v1.extend_from_slice(b"\x00\x00");
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&6i64.to_be_bytes());
        let got = decode(Some(&kb), Some(&Bytes::from(v1))).unwrap();
        assert_eq!(
            got,
            OffsetRecord::Offset(
                key.clone(),
                Some(Committed {
                    offset: 9,
                    leader_epoch: -1,
                    metadata: String::new(),
                    commit_timestamp: 5
                })
            )
        );
        assert_eq!(
            decode(Some(&kb), None).unwrap(),
            OffsetRecord::Offset(key, None)
        );
        let gm = Bytes::from_static(b"\x00\x02\x00\x01g");
        assert_eq!(
            decode(Some(&gm), Some(&Bytes::from_static(b"x"))).unwrap(),
            OffsetRecord::GroupMetadata("g".into())
        );
    }

    #[test]
    fn kafka_4_4s_flexible_offset_value_decodes() {
        // An OffsetCommit record from a Kafka 4.4.0 broker's `__consumer_offsets-0` (group
        // gp-static, topic gpt, partition 0, offset 1), with its topic id as tagged field 0.
        let hex = |t: &str| -> Bytes {
            (0..t.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
                .into()
        };
        let key = hex("0001000967702d737461746963000367707400000000");
        let value = hex(
            "000400000000000000010000000001000001a249d87d0e010010b6c71054d21d482e8536f8a390b83b8f",
        );
        assert_eq!(
            decode(Some(&key), Some(&value)).unwrap(),
            OffsetRecord::Offset(
                ("gp-static".into(), "gpt".into(), 0),
                Some(Committed {
                    offset: 1,
                    leader_epoch: 0,
                    metadata: String::new(),
                    commit_timestamp: 0x0000_01a2_49d8_7d0e,
                })
            )
        );
        for end in 2..value.len() {
            assert!(
                decode(Some(&key), Some(&value.slice(..end))).is_err(),
                "cut at {end}"
            );
        }
    }

    #[test]
    fn records_that_are_not_offsets_are_named() {
        assert!(decode(None, None).unwrap_err().contains("without a key"));
        let k9 = Bytes::from_static(b"\x00\x09");
        assert!(decode(Some(&k9), None)
            .unwrap_err()
            .contains("key version 9"));
        let short = Bytes::from_static(b"\x00\x01\x00\x05ab");
        assert!(decode(Some(&short), None)
            .unwrap_err()
            .contains("the group"));
        let kb = Bytes::from(encode_key(&("g".into(), "t".into(), 0)));
        let v9 = Bytes::from_static(b"\x00\x09");
        assert!(decode(Some(&kb), Some(&v9))
            .unwrap_err()
            .contains("value version 9"));
    }
}
