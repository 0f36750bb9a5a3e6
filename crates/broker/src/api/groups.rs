//! Consumer groups: FindCoordinator names this broker; JoinGroup, SyncGroup, Heartbeat and
//! LeaveGroup run the classic protocol ([`crate::coordinator`]); OffsetCommit stores positions
//! durably in the `__consumer_offsets` log ([`crate::offsets_log`]) before it answers, and
//! OffsetFetch returns them, across restarts. The coordinator's group-metadata records
//! (generations, members, assignments) go to the same log, written here
//! ([`CommittedOffsets::store_groups`]) before the requests that wait for them are answered.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::{self, Request};
use crate::consumer_group::{ConsumerGroups, TopicInfo};
use crate::coordinator::{Groups, JoinRequest, Joined, Synced};
use crate::group_metadata::GroupMetadata;
use crate::offsets_log::{Committed, OffsetKey, OffsetsLog, OffsetsLogError};

/// FindCoordinator's key types.
const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

/// Kafka's `offset.metadata.max.bytes` default.
const MAX_METADATA_BYTES: usize = 4096;

/// Committed offsets by (group, topic, partition): in memory, and in the durable log.
#[derive(Debug)]
pub struct CommittedOffsets {
    by_key: Mutex<BTreeMap<OffsetKey, Committed>>,
    log: OffsetsLog,
    /// Held across a write to the log and its application in memory, so the two see commits
    /// and deletions in the same order (a commit racing a deletion of the same key must not
    /// win in memory and lose in the log). Readers take only `by_key`.
    writing: Mutex<()>,
}

impl CommittedOffsets {
    /// Opens the offsets log under `data_dir` and replays it. Blocking.
    pub fn open(data_dir: &std::path::Path) -> Result<CommittedOffsets, OffsetsLogError> {
        let (log, by_key) = OffsetsLog::open(data_dir)?;
        Ok(CommittedOffsets {
            by_key: Mutex::new(by_key),
            log,
            writing: Mutex::new(()),
        })
    }

    /// A cluster node's committed offsets: its replica of the offsets group, nothing in memory
    /// until it leads the group and [`CommittedOffsets::load`]s them.
    pub fn replicated(log: OffsetsLog) -> CommittedOffsets {
        CommittedOffsets {
            by_key: Mutex::new(BTreeMap::new()),
            log,
            writing: Mutex::new(()),
        }
    }

    /// Becomes the coordinator of a cluster: once everything committed before is in the log
    /// ([`OffsetsLog::barrier`]), replays it into memory (the offsets) and into `groups` (the
    /// classic groups' last records, and the consumer-protocol groups' with their epochs and
    /// assignments resolved against `topics`, as the single broker restores both at open).
    /// Blocking.
    pub fn load(&self, groups: &Groups, topics: &[TopicInfo]) -> Result<(), OffsetsLogError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        self.log.barrier()?;
        let offsets = self.log.stored_offsets()?;
        let now = std::time::Instant::now();
        let restored = Groups::restore(self.log.stored_groups()?, now);
        let consumer = ConsumerGroups::restore(self.log.stored_consumer_groups()?, topics, now);
        *self.lock() = offsets;
        groups.replace(restored);
        groups.set_consumer_groups(consumer);
        Ok(())
    }

    /// Stops being the coordinator of a cluster: forgets the offsets and the groups of both
    /// protocols (the next leader answers for them).
    pub fn unload(&self, groups: &Groups) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        self.lock().clear();
        groups.replace(Groups::default());
        groups.set_consumer_groups(ConsumerGroups::default());
    }

    /// The groups of the log's group-metadata records, for the coordinator to reload
    /// ([`Groups::restore`]). Blocking.
    pub fn stored_groups(&self) -> Result<BTreeMap<String, GroupMetadata>, OffsetsLogError> {
        self.log.stored_groups()
    }

    /// The consumer-protocol groups' latest records, for the coordinator to reload
    /// ([`crate::consumer_group::ConsumerGroups::restore`]). Blocking.
    pub fn stored_consumer_groups(
        &self,
    ) -> Result<
        BTreeMap<
            crate::consumer_group_records::RecordKey,
            crate::consumer_group_records::RecordValue,
        >,
        OffsetsLogError,
    > {
        self.log.stored_consumer_groups()
    }

    /// Writes the group records the coordinator queued, durably and in the order they were
    /// made, then tells the coordinator, which answers what waited for them (a failed write
    /// is COORDINATOR_NOT_AVAILABLE to them, as Kafka maps a failed append). Blocking.
    pub fn store_groups(&self, groups: &Groups) {
        // The consumer-protocol groups' changes made outside a heartbeat (expiries).
        if let Err(e) = self.store_consumer_groups(groups, || ()).1 {
            tracing::error!(error = %e, "cannot store consumer group records");
        }
        if !groups.has_unstored() {
            return;
        }
        // One writer at a time, across the write and the report: records of one group are
        // never reordered, and a DeleteGroups tombstone is never overtaken.
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let records = groups.take_unstored();
        if records.is_empty() {
            return;
        }
        let batch: Vec<(String, GroupMetadata)> = records
            .iter()
            .map(|(_, group, value)| (group.clone(), value.clone()))
            .collect();
        let now_ms = crate::clock::now_ms();
        let error = match self.log.append_groups(&batch, now_ms) {
            Ok(()) => None,
            Err(e) => {
                tracing::error!(error = %e, "cannot store group metadata");
                Some(ResponseError::CoordinatorNotAvailable)
            }
        };
        groups.stored(&records, error);
    }

    /// Runs `change` (of the consumer-protocol groups) and writes the records of every change
    /// the groups have not stored yet, durably, before answering, so what `change` answers is
    /// never told before it is stored (Kafka's coordinator: records, then the response). One
    /// writer at a time across both, so records of a group are written in the order of its
    /// changes. A failed write leaves the records to the next call
    /// ([`Groups::unstore_consumer_changes`]). Blocking.
    pub fn store_consumer_groups<T>(
        &self,
        groups: &Groups,
        change: impl FnOnce() -> T,
    ) -> (T, Result<(), OffsetsLogError>) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let answer = change();
        let changes = groups.take_consumer_changes();
        if changes.is_empty() {
            return (answer, Ok(()));
        }
        let records: Vec<_> = changes
            .iter()
            .map(|(key, _, value)| (key.clone(), value.clone()))
            .collect();
        let now_ms = crate::clock::now_ms();
        let stored = self.log.append_consumer_records(&records, now_ms);
        if stored.is_err() {
            groups.unstore_consumer_changes(&changes);
        }
        (answer, stored)
    }

    /// Compacts the offsets log if a round is due (see [`OffsetsLog::compact_if_due`]).
    pub fn compact_if_due(&self, now_ms: i64) -> Result<u64, OffsetsLogError> {
        self.log.compact_if_due(now_ms)
    }

    /// Stores the commits durably, then in memory. Blocking.
    pub fn commit(&self, commits: Vec<(OffsetKey, Committed)>) -> Result<(), OffsetsLogError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        self.log.append(&commits)?;
        let mut map = self.lock();
        for (k, c) in commits {
            map.insert(k, c);
        }
        Ok(())
    }

    /// Deletes the committed offsets of `keys` that exist (OffsetDelete): Kafka's tombstones
    /// are durable in the log before the offsets leave memory. Answers the keys deleted.
    /// Blocking.
    pub fn delete(&self, keys: &[OffsetKey], now_ms: i64) -> Result<usize, OffsetsLogError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let present: Vec<OffsetKey> = {
            let map = self.lock();
            keys.iter()
                .filter(|k| map.contains_key(*k))
                .cloned()
                .collect()
        };
        self.log.append_tombstones(&present, &[], now_ms)?;
        let mut map = self.lock();
        for k in &present {
            map.remove(k);
        }
        Ok(present.len())
    }

    /// Deletes every committed offset of `group` and the group itself (DeleteGroups): the
    /// tombstones of its offsets and of its group metadata, durable before the offsets leave
    /// memory. Answers the offsets deleted. Blocking.
    pub fn delete_group(&self, group: &str, now_ms: i64) -> Result<usize, OffsetsLogError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let keys: Vec<OffsetKey> = self
            .lock()
            .keys()
            .filter(|(g, _, _)| g == group)
            .cloned()
            .collect();
        self.log
            .append_tombstones(&keys, &[group.to_string()], now_ms)?;
        let mut map = self.lock();
        for k in &keys {
            map.remove(k);
        }
        Ok(keys.len())
    }

    /// Whether `group` has a committed offset (Kafka keeps such a group, a "simple" one, even
    /// with no member).
    pub fn has_group(&self, group: &str) -> bool {
        self.lock().keys().any(|(g, _, _)| g == group)
    }

    /// Every group with a committed offset, in order.
    pub fn groups(&self) -> std::collections::BTreeSet<String> {
        self.lock().keys().map(|(g, _, _)| g.clone()).collect()
    }

    fn get(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        self.lock()
            .get(&(group.to_string(), topic.to_string(), partition))
            .cloned()
    }

    /// Every (topic, partition) the group committed, in order.
    fn all(&self, group: &str) -> Vec<(String, i32)> {
        self.lock()
            .keys()
            .filter(|(g, _, _)| g == group)
            .map(|(_, t, p)| (t.clone(), *p))
            .collect()
    }

    /// Closes the log. Blocking.
    pub fn close(&self) -> Result<(), OffsetsLogError> {
        self.log.close()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<OffsetKey, Committed>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn s(v: &StrBytes) -> String {
    v.to_string()
}

/// Has the coordinator's queued group records written (off the reactor: an fsync).
pub async fn store_group_records(broker: &Arc<Broker>) {
    if !broker.groups.has_unstored() {
        return;
    }
    let b = Arc::clone(broker);
    if let Err(e) = tokio::task::spawn_blocking(move || b.offsets.store_groups(&b.groups)).await {
        tracing::error!(error = %e, "group metadata task failed");
    }
}

fn opt(v: Option<String>) -> Option<StrBytes> {
    v.map(StrBytes::from_string)
}

pub fn join_group(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: JoinGroupRequest = request.body()?;
    let client_id = request
        .client_id
        .as_ref()
        .map(s)
        .unwrap_or_else(|| "consumer".into());
    // Before v1 there is no rebalance timeout: it is the session timeout.
    let rebalance_timeout_ms = if request.version >= 1 {
        body.rebalance_timeout_ms
    } else {
        body.session_timeout_ms
    };
    if broker.shares.is_share_group(&body.group_id.0) {
        // Kafka's `classicGroupJoin` on a group of another type: no member id, this error.
        let response = JoinGroupResponse::default()
            .with_error_code(ResponseError::InconsistentGroupProtocol.code())
            .with_member_id(StrBytes::from_static_str(""));
        return Ok(Reply::Now(respond(request, &response)?));
    }
    let rx = broker.groups.join(JoinRequest {
        group: s(&body.group_id.0),
        member_id: s(&body.member_id),
        instance_id: body.group_instance_id.as_ref().map(s),
        client_id,
        client_host: request.client_host.clone().unwrap_or_default(),
        session_timeout_ms: body.session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type: s(&body.protocol_type),
        protocols: body
            .protocols
            .iter()
            .map(|p| (s(&p.name), p.metadata.clone()))
            .collect(),
        supports_skip_assignment: request.version >= 9,
    });
    let (correlation_id, version) = (request.correlation_id, request.version);
    let asked_member_id = s(&body.member_id);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        // A static member's replacement is answered once stored.
        store_group_records(&broker).await;
        // No answer (the waiting join was dropped): the coordinator's groups were unloaded,
        // in a cluster when this node stopped leading the offsets group. Kafka answers the
        // joins of a group it unloads NOT_COORDINATOR; a default answer would read as joined
        // with no error, generation 0 and no member id or protocol.
        let joined = rx.await.unwrap_or_else(|_| Joined {
            error: Some(ResponseError::NotCoordinator),
            generation: -1,
            member_id: asked_member_id,
            ..Joined::default()
        });
        let members = joined
            .members
            .into_iter()
            .map(|(id, instance, meta)| {
                JoinGroupResponseMember::default()
                    .with_member_id(StrBytes::from_string(id))
                    .with_group_instance_id(opt(instance))
                    .with_metadata(meta)
            })
            .collect();
        let response = JoinGroupResponse::default()
            .with_error_code(crate::errors::code(joined.error))
            .with_generation_id(joined.generation)
            .with_protocol_type(opt(joined.protocol_type))
            .with_protocol_name(opt(joined.protocol_name))
            .with_leader(StrBytes::from_string(joined.leader))
            .with_member_id(StrBytes::from_string(joined.member_id))
            .with_skip_assignment(joined.skip_assignment)
            .with_members(members);
        codec::encode(correlation_id, version, &response, &[])
    })))
}

pub fn sync_group(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: SyncGroupRequest = request.body()?;
    let rx = broker.groups.sync(
        &body.group_id.0,
        &body.member_id,
        body.group_instance_id.as_deref(),
        body.generation_id,
        body.assignments
            .iter()
            .map(|a| (s(&a.member_id), a.assignment.clone()))
            .collect(),
    );
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        // The leader's assignment is answered to every member once stored.
        store_group_records(&broker).await;
        // No answer: the groups were unloaded (see join_group).
        let synced = rx.await.unwrap_or_else(|_| Synced {
            error: Some(ResponseError::NotCoordinator),
            ..Synced::default()
        });
        let response = SyncGroupResponse::default()
            .with_error_code(crate::errors::code(synced.error))
            .with_protocol_type(opt(synced.protocol_type))
            .with_protocol_name(opt(synced.protocol_name))
            .with_assignment(synced.assignment);
        codec::encode(correlation_id, version, &response, &[])
    })))
}

pub fn heartbeat(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: HeartbeatRequest = request.body()?;
    let error = broker.groups.heartbeat(
        &body.group_id.0,
        &body.member_id,
        body.group_instance_id.as_deref(),
        body.generation_id,
    );
    let response = HeartbeatResponse::default().with_error_code(crate::errors::code(error));
    Ok(Reply::Now(respond(request, &response)?))
}

pub fn leave_group(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: LeaveGroupRequest = request.body()?;
    let response = if request.version >= 3 {
        // From v3 a request names several members, each answered on its own.
        let members = body
            .members
            .iter()
            .map(|m| {
                let error = broker.groups.leave(
                    &body.group_id.0,
                    &m.member_id,
                    m.group_instance_id.as_deref(),
                );
                MemberResponse::default()
                    .with_member_id(m.member_id.clone())
                    .with_group_instance_id(m.group_instance_id.clone())
                    .with_error_code(crate::errors::code(error))
            })
            .collect();
        LeaveGroupResponse::default().with_members(members)
    } else {
        let error = broker.groups.leave(&body.group_id.0, &body.member_id, None);
        LeaveGroupResponse::default().with_error_code(crate::errors::code(error))
    };
    // A group left empty is stored so (its empty generation) before the answer.
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        store_group_records(&broker).await;
        codec::encode(correlation_id, version, &response, &[])
    })))
}

pub fn find_coordinator(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: FindCoordinatorRequest = request.body()?;
    let endpoint = &broker.endpoint;
    let error =
        (!matches!(body.key_type, GROUP | TRANSACTION)).then_some(ResponseError::InvalidRequest);
    let message = error.map(|_| {
        StrBytes::from_static_str("group and transaction coordinators only: no share groups")
    });
    let (node_id, host, port) = match error {
        None => (
            endpoint.node_id,
            StrBytes::from_string(endpoint.host.clone()),
            i32::from(endpoint.port),
        ),
        Some(_) => (-1, StrBytes::default(), -1),
    };
    let code = crate::errors::code(error);
    let response = if request.version >= 4 {
        // From v4 a request names several keys and gets one coordinator each.
        let coordinators = body
            .coordinator_keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(node_id))
                    .with_host(host.clone())
                    .with_port(port)
                    .with_error_code(code)
                    .with_error_message(message.clone())
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(node_id))
            .with_host(host)
            .with_port(port)
            .with_error_code(code)
            // Error messages exist from v1.
            .with_error_message(message.filter(|_| request.version >= 1))
    };
    Ok(Reply::Now(respond(request, &response)?))
}

/// A partition of an OffsetCommit and its refusal, if any.
type PartitionAnswer = (i32, Option<ResponseError>);

pub async fn offset_commit(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: OffsetCommitRequest = request.body()?;
    let group = s(&body.group_id.0);
    // A member commits in its generation; a consumer outside any group (`assign()`) sends -1,
    // accepted while the group has no members.
    // A consumer-protocol group (KIP-848) checks the member epoch instead, from v9.
    let group_error = broker
        .groups
        .consumer_commit_check(
            &group,
            &body.member_id,
            body.generation_id_or_member_epoch,
            request.version >= 9,
        )
        .unwrap_or_else(|| {
            broker.groups.check_member_commit(
                &group,
                &body.member_id,
                body.group_instance_id.as_deref(),
                body.generation_id_or_member_epoch,
            )
        });
    // A share group holds no committed offsets (Kafka's `ShareGroup.validateOffsetCommit`).
    let group_error = if broker.shares.is_share_group(&group) {
        Some(ResponseError::GroupIdNotFound)
    } else {
        group_error
    };
    let now = crate::clock::now_ms();
    let mut commits = Vec::new();
    let mut answers: Vec<(TopicName, Vec<PartitionAnswer>)> = Vec::new();
    for topic in body.topics {
        let known = broker.store.topic(&topic.name);
        let mut parts = Vec::new();
        for p in topic.partitions {
            let error = group_error.or_else(|| {
                let exists = match &broker.cluster {
                    // A cluster's partitions are in its image, not in this node's store.
                    Some(cluster) => cluster.partition_exists(&topic.name, p.partition_index),
                    None => known
                        .as_ref()
                        .and_then(|t| t.partition(p.partition_index))
                        .is_some(),
                };
                if !exists {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else if p.committed_metadata.as_ref().map_or(0, |m| m.len()) > MAX_METADATA_BYTES
                {
                    Some(ResponseError::OffsetMetadataTooLarge)
                } else {
                    None
                }
            });
            if error.is_none() {
                commits.push((
                    (group.clone(), s(&topic.name.0), p.partition_index),
                    Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(s).unwrap_or_default(),
                        commit_timestamp: now,
                    },
                ));
            }
            parts.push((p.partition_index, error));
        }
        answers.push((topic.name, parts));
    }
    // Durable before it is answered: off the reactor (an fsync).
    let stored = if commits.is_empty() {
        Ok(())
    } else {
        let b = Arc::clone(broker);
        tokio::task::spawn_blocking(move || b.offsets.commit(commits))
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "offset commit task failed");
                Ok(())
            })
    };
    let write_error = match stored {
        Ok(()) => None,
        // A cluster node that stopped leading the offsets group: the client finds the new
        // coordinator.
        Err(OffsetsLogError::Replica { .. }) => Some(ResponseError::NotCoordinator),
        Err(e) => {
            tracing::error!(error = %e, "cannot store committed offsets");
            Some(ResponseError::KafkaStorageError)
        }
    };
    let topics = answers
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(index, error)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(index)
                        .with_error_code(crate::errors::code(error.or(write_error)))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    let response = OffsetCommitResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

pub fn offset_fetch(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: OffsetFetchRequest = request.body()?;
    let offsets = &broker.offsets;
    let response = if request.version >= 8 {
        // From v8 a request asks for several groups.
        let groups = body
            .groups
            .into_iter()
            .map(|group| {
                let wanted = match group.topics {
                    Some(topics) => topics
                        .into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect(),
                    None => group_partitions(offsets, &group.group_id),
                };
                let topics = wanted
                    .into_iter()
                    .map(|(name, partitions)| {
                        let partitions = partitions
                            .into_iter()
                            .map(|index| {
                                let c =
                                    committed_or_none(offsets.get(&group.group_id, &name, index));
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(c.offset)
                                    .with_committed_leader_epoch(c.leader_epoch)
                                    .with_metadata(Some(StrBytes::from_string(c.metadata)))
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(StrBytes::from_string(name)))
                            .with_partitions(partitions)
                    })
                    .collect();
                // v9: a member of a consumer-protocol group fetches in its current epoch.
                let error = broker
                    .groups
                    .consumer_fetch_check(
                        &group.group_id,
                        group.member_id.as_deref(),
                        group.member_epoch,
                    )
                    .flatten()
                    // Nor does a share group answer for offsets (`validateOffsetFetch`).
                    .or_else(|| {
                        broker
                            .shares
                            .is_share_group(&group.group_id)
                            .then_some(ResponseError::GroupIdNotFound)
                    });
                match error {
                    Some(e) => OffsetFetchResponseGroup::default()
                        .with_group_id(group.group_id)
                        .with_error_code(e.code()),
                    None => OffsetFetchResponseGroup::default()
                        .with_group_id(group.group_id)
                        .with_topics(topics),
                }
            })
            .collect();
        OffsetFetchResponse::default().with_groups(groups)
    } else {
        let wanted = match body.topics {
            Some(topics) => topics
                .into_iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                .collect(),
            None => group_partitions(offsets, &body.group_id),
        };
        let topics = wanted
            .into_iter()
            .map(|(name, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|index| {
                        let c = committed_or_none(offsets.get(&body.group_id, &name, index));
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(index)
                            .with_committed_offset(c.offset)
                            .with_committed_leader_epoch(c.leader_epoch)
                            .with_metadata(Some(StrBytes::from_string(c.metadata)))
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partitions(partitions)
            })
            .collect();
        OffsetFetchResponse::default().with_topics(topics)
    };
    Ok(Reply::Now(respond(request, &response)?))
}

/// "No committed offset", as Kafka answers it: offset -1, no epoch, empty metadata.
fn committed_or_none(committed: Option<Committed>) -> Committed {
    committed.unwrap_or(Committed {
        offset: -1,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp: -1,
    })
}

/// The group's committed partitions, by topic.
fn group_partitions(offsets: &CommittedOffsets, group: &str) -> Vec<(String, Vec<i32>)> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in offsets.all(group) {
        by_topic.entry(topic).or_default().push(partition);
    }
    by_topic.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer_group::{Heartbeat, Partitions};

    /// A cluster node's coordinator load restores the consumer-protocol groups as the single
    /// broker's open does (same epoch, same assignment), and its unload forgets them, as it
    /// forgets the classic groups and the offsets.
    #[test]
    fn load_restores_and_unload_forgets_the_consumer_groups() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = CommittedOffsets::open(dir.path()).unwrap();
        let groups = Groups::default();
        let topics = [TopicInfo {
            name: "t".into(),
            id: uuid::Uuid::from_u128(7),
            partitions: 2,
        }];
        let (joined, stored) = offsets.store_consumer_groups(&groups, || {
            groups.consumer_heartbeat(
                Heartbeat {
                    group: "g".into(),
                    member_id: "m".into(),
                    rebalance_timeout_ms: 1_000,
                    subscribed_topic_names: Some(vec!["t".into()]),
                    owned: Some(Partitions::new()),
                    version: 1,
                    ..Heartbeat::default()
                },
                &topics,
            )
        });
        stored.unwrap();
        assert_eq!((joined.error, joined.member_epoch), (None, 1));
        let before = groups.consumer_describe("g").unwrap();

        offsets.unload(&groups);
        assert!(groups.consumer_describe("g").is_err(), "unload forgets it");
        assert!(
            groups.take_consumer_changes().is_empty(),
            "nothing left to write"
        );

        offsets.load(&groups, &topics).unwrap();
        let after = groups.consumer_describe("g").unwrap();
        assert_eq!(
            (after.group_epoch, after.assignment_epoch),
            (before.group_epoch, before.assignment_epoch)
        );
        assert_eq!(after.members.len(), 1);
        assert_eq!(after.members[0].member_epoch, 1);
        assert_eq!(after.members[0].assignment, before.members[0].assignment);
        assert!(
            groups.take_consumer_changes().is_empty(),
            "a load writes nothing"
        );
    }
}
