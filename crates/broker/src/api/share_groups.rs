//! The share group APIs (KIP-932), on [`crate::share`]: ShareGroupHeartbeat and
//! ShareGroupDescribe (membership), ShareFetch (acquire records, with acknowledgements
//! piggybacked) and ShareAcknowledge, each within a share session.
//!
//! A group id names one group of one type: a share group's id is refused by the classic and
//! consumer protocols, and a classic or consumer group's by ShareGroupHeartbeat
//! (GROUP_ID_NOT_FOUND, "Group X is not a share group.", as Kafka's `shareGroup`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData as AckPartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopic,
};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::share_logs::{ShareLog, ShareLogs, REPLICA_POLL};
use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::{self, Request};
use crate::consumer_group::Partitions;
use crate::errors;
use crate::share::group::ShareHeartbeat;
use crate::share::partition::{Acquired, FetchedBatch};
use crate::share::state_log::ShareKey;
use crate::share::{forwarded_session, SessionView, ShareGroups};
use crate::wait;

/// The operations a client may do on a group without an authorizer (READ, DELETE, DESCRIBE).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);
/// The schema's "not asked for" value of `authorized_operations`.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;
/// The assignor ShareGroupDescribe names (Kafka's `group.share.assignors` default).
const SIMPLE_ASSIGNOR: &str = "simple";
/// A ShareFetch's `max_records` when it asks for none (Kafka's `share.max.fetch.records`
/// default is unbounded; 500 is the consumer's `max.poll.records` default).
const DEFAULT_MAX_RECORDS: usize = 500;

fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Whether `group` is a classic or consumer-protocol group (by members or committed offsets),
/// which a share group's id may not name.
pub(super) fn other_group_type(broker: &Broker, group: &str) -> bool {
    broker.groups.is_consumer_group(group)
        || broker.offsets.has_group(group)
        || broker.groups.list().iter().any(|g| g.group_id == group)
}

pub fn heartbeat(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ShareGroupHeartbeatRequest = request.body()?;
    let group = body.group_id.0.to_string();
    let refuse = |error: ResponseError, message: String| -> Result<Reply, HandleError> {
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)));
        Ok(Reply::Now(respond(request, &response)?))
    };
    // Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`.
    if group.is_empty() {
        return refuse(
            ResponseError::InvalidRequest,
            "GroupId can't be empty.".into(),
        );
    }
    if body.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
        return refuse(
            ResponseError::InvalidRequest,
            "RackId can't be empty.".into(),
        );
    }
    if body.member_id.is_empty() {
        // Kafka refuses it before its coordinator sees it: no message.
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code());
        return Ok(Reply::Now(respond(request, &response)?));
    }
    match body.member_epoch {
        0 if body
            .subscribed_topic_names
            .as_ref()
            .is_none_or(|names| names.is_empty()) =>
        {
            return refuse(
                ResponseError::InvalidRequest,
                "SubscribedTopicNames must be set in first request.".into(),
            )
        }
        e if e < -1 => {
            return refuse(
                ResponseError::InvalidRequest,
                "MemberEpoch is invalid.".into(),
            )
        }
        _ => {}
    }
    if other_group_type(broker, &group) {
        return refuse(
            ResponseError::GroupIdNotFound,
            format!("Group {group} is not a share group."),
        );
    }
    let hb = ShareHeartbeat {
        member_id: body.member_id.to_string(),
        member_epoch: body.member_epoch,
        rack_id: body.rack_id.map(|s| s.to_string()),
        subscribed_topic_names: body
            .subscribed_topic_names
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        client_id: request
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        client_host: request.client_host.clone().unwrap_or_default(),
    };
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        let member_id = hb.member_id.clone();
        let interval = broker.shares.settings().heartbeat_interval.as_millis() as i32;
        // A new share-partition's state is durable before it is answered: off the reactor.
        let answer = tokio::task::spawn_blocking(move || {
            let logs = ShareLogs::of(&broker);
            let topics = logs.topic_infos();
            broker.shares.heartbeat(&group, hb, &topics, |id, index| {
                let partition = logs.partition(id, index).ok()?;
                Some((partition.log_start_offset(), partition.log_end_offset()))
            })
        })
        .await
        .unwrap_or(Err((ResponseError::UnknownServerError, None)));
        let response = match answer {
            Ok(answer) => ShareGroupHeartbeatResponse::default()
                .with_member_id(Some(str_bytes(member_id)))
                .with_member_epoch(answer.member_epoch)
                .with_heartbeat_interval_ms(interval)
                .with_assignment(answer.assignment.map(assignment)),
            Err((error, message)) => ShareGroupHeartbeatResponse::default()
                .with_error_code(error.code())
                .with_error_message(message.map(str_bytes))
                .with_member_id(Some(str_bytes(member_id))),
        };
        codec::encode(correlation_id, version, &response, &[])
    })))
}

fn assignment(partitions: Partitions) -> Assignment {
    Assignment::default().with_topic_partitions(
        partitions
            .into_iter()
            .map(|(id, ps)| {
                TopicPartitions::default()
                    .with_topic_id(id)
                    .with_partitions(ps.into_iter().collect())
            })
            .collect(),
    )
}

pub fn describe(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ShareGroupDescribeRequest = request.body()?;
    let operations = if body.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        OPERATIONS_NOT_ASKED
    };
    let logs = ShareLogs::of(broker);
    let groups = body
        .group_ids
        .into_iter()
        .map(|group_id| {
            let id = group_id.0.to_string();
            let Some(g) = broker.shares.describe(&id) else {
                let message = if other_group_type(broker, &id) {
                    format!("Group {id} is not a share group.")
                } else {
                    format!("Group {id} not found.")
                };
                return DescribedGroup::default()
                    .with_group_id(group_id)
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(message)))
                    .with_authorized_operations(operations);
            };
            let members = g
                .members
                .into_iter()
                .map(|m| {
                    let topics = m
                        .assignment
                        .into_iter()
                        .filter_map(|(tid, ps)| {
                            let name = logs.topic_name(tid)?;
                            Some(
                                DescribedTopic::default()
                                    .with_topic_id(tid)
                                    .with_topic_name(TopicName(str_bytes(name)))
                                    .with_partitions(ps.into_iter().collect()),
                            )
                        })
                        .collect();
                    Member::default()
                        .with_member_id(str_bytes(m.member_id))
                        .with_rack_id(m.rack_id.map(str_bytes))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(str_bytes(m.client_id))
                        .with_client_host(str_bytes(m.client_host))
                        .with_subscribed_topic_names(
                            m.subscribed
                                .into_iter()
                                .map(|n| TopicName(str_bytes(n)))
                                .collect(),
                        )
                        .with_assignment(
                            DescribedAssignment::default().with_topic_partitions(topics),
                        )
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(group_id)
                .with_group_state(str_bytes(g.state))
                .with_group_epoch(g.group_epoch)
                .with_assignment_epoch(g.assignment_epoch)
                .with_assignor_name(str_bytes(SIMPLE_ASSIGNOR))
                .with_members(members)
                .with_authorized_operations(operations)
        })
        .collect();
    let response = ShareGroupDescribeResponse::default().with_groups(groups);
    Ok(Reply::Now(respond(request, &response)?))
}

/// The acquisition lock duration of `group` in milliseconds, as ShareFetch and
/// ShareAcknowledge answer it.
fn lock_ms(broker: &Broker, group: Option<&str>) -> i32 {
    let duration = match group {
        Some(g) => broker.shares.lock_duration(g),
        None => broker.shares.settings().lock_duration,
    };
    duration.as_millis().min(i32::MAX as u128) as i32
}

/// The acknowledgement batches of one partition: `(first, last, types)`.
type AckBatches = Vec<(i64, i64, Vec<i8>)>;

/// Checks one partition's acknowledgement batches as Kafka's `validateAcknowledgementBatches`:
/// each batch's range is ordered and after the one before, its types are one for the whole
/// range or one per offset, and each type is known (RENEW, 4, only with `is_renew_ack`). A
/// partition that fails has none of its acknowledgements applied and answers INVALID_REQUEST.
fn valid_acks(batches: &AckBatches, renew_allowed: bool) -> bool {
    let mut after = i64::MIN;
    batches.iter().all(|(first, last, types)| {
        let ordered = first <= last && *first > after;
        after = *last;
        let len = last.saturating_sub(*first).saturating_add(1);
        let counted = types.len() == 1 || types.len() as i64 == len;
        let known = types
            .iter()
            .all(|&t| (0..=3).contains(&t) || (t == 4 && renew_allowed));
        ordered && counted && known
    })
}

/// One partition of a ShareFetch: the log partition (or why none), its acknowledgements.
struct SharePart {
    topic_id: Uuid,
    index: i32,
    partition: Result<ShareLog, ResponseError>,
    acks: AckBatches,
    /// Whether `acks` passed [`valid_acks`].
    acks_valid: bool,
}

/// The name of the share session a request is in: the member's own, or where a cluster node
/// forwarded it for a client ([`FORWARD_CLIENT_ID`]), the one that node keeps for the member
/// ([`forwarded_session`]).
fn session_name(request: &Request, member: &str) -> String {
    let via = request
        .client_id
        .as_deref()
        .and_then(|c| c.strip_prefix(FORWARD_CLIENT_ID))
        .and_then(|n| n.parse::<i32>().ok());
    match via {
        Some(node) => forwarded_session(member, node),
        None => member.to_string(),
    }
}

/// The client id a cluster node forwards a ShareFetch or ShareAcknowledge to the coordinator
/// with, followed by its node id.
pub const FORWARD_CLIENT_ID: &str = "oncelog-share-forward-";

/// The group and member a ShareFetch or ShareAcknowledge names: an empty group is
/// INVALID_GROUP_ID, an empty member INVALID_REQUEST, as Kafka answers them.
fn session_owner(
    group: &Option<GroupId>,
    member: &Option<StrBytes>,
) -> Result<(String, String), ResponseError> {
    let group = group.as_ref().map(|g| g.0.to_string()).unwrap_or_default();
    let member = member.as_ref().map(|m| m.to_string()).unwrap_or_default();
    if group.is_empty() {
        return Err(ResponseError::InvalidGroupId);
    }
    if member.is_empty() {
        return Err(ResponseError::InvalidRequest);
    }
    Ok((group, member))
}

/// What one partition answers in a ShareFetch.
#[derive(Default)]
struct Piece {
    error: Option<ResponseError>,
    ack_error: Option<ResponseError>,
    records: Bytes,
    acquired: Acquired,
}

pub fn fetch(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ShareFetchRequest = request.body()?;
    let lock_ms = lock_ms(broker, body.group_id.as_ref().map(|g| g.0.as_str()));
    let refuse = |error: ResponseError| -> Result<Reply, HandleError> {
        let response = ShareFetchResponse::default()
            .with_error_code(error.code())
            .with_acquisition_lock_timeout_ms(lock_ms);
        Ok(Reply::Now(respond(request, &response)?))
    };
    let (group, member) = match session_owner(&body.group_id, &body.member_id) {
        Ok(owner) => owner,
        Err(error) => return refuse(error),
    };
    // KIP-1206's acquire modes: 0 batch-optimized, 1 record-limit.
    if !(0..=1).contains(&body.share_acquire_mode) {
        return refuse(ResponseError::InvalidRequest);
    }
    // KIP-1222: a ShareFetch that carries RENEW acknowledgements fetches nothing, and says so
    // with every fetch parameter 0.
    if body.is_renew_ack
        && (body.max_wait_ms != 0
            || body.min_bytes != 0
            || body.max_bytes != 0
            || body.max_records != 0
            || body.batch_size != 0)
    {
        return refuse(ResponseError::InvalidRequest);
    }
    let logs = ShareLogs::of(broker);
    let session_member = session_name(request, &member);
    let mut parts = Vec::new();
    let mut fetch_keys = Vec::new();
    let mut has_acks = false;
    for t in &body.topics {
        for p in &t.partitions {
            let acks: AckBatches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            has_acks |= !acks.is_empty();
            let acks_valid = valid_acks(&acks, body.is_renew_ack);
            // From v1 every listed partition is fetched (`PartitionMaxBytes` is v0's).
            fetch_keys.push((t.topic_id, p.partition_index));
            parts.push(SharePart {
                topic_id: t.topic_id,
                index: p.partition_index,
                partition: logs.partition(t.topic_id, p.partition_index),
                acks,
                acks_valid,
            });
        }
    }
    let forget: Vec<(Uuid, i32)> = body
        .forgotten_topics_data
        .iter()
        .flat_map(|f| f.partitions.iter().map(move |p| (f.topic_id, *p)))
        .collect();
    let session = match broker.shares.fetch_session(
        &group,
        &session_member,
        body.share_session_epoch,
        &fetch_keys,
        &forget,
        has_acks,
    ) {
        Ok(session) => session,
        Err(e) => return refuse(e),
    };
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        let owner = Owner {
            group,
            member,
            session: session_member,
        };
        let response = share_fetch(broker, logs, owner, body, parts, session, lock_ms).await;
        codec::encode(correlation_id, version, &response, &[])
    })))
}

/// Who a ShareFetch or ShareAcknowledge is for: the group, the member (who owns what it
/// acquires) and the share session's name ([`session_name`]).
struct Owner {
    group: String,
    member: String,
    session: String,
}

async fn share_fetch(
    broker: Arc<Broker>,
    logs: ShareLogs,
    owner: Owner,
    body: ShareFetchRequest,
    mut parts: Vec<SharePart>,
    session: SessionView,
    lock_ms: i32,
) -> ShareFetchResponse {
    // The session's partitions the request did not list are fetched too (an incremental
    // request lists only what changed), answered only when they bring records.
    let listed: std::collections::BTreeSet<(Uuid, i32)> =
        parts.iter().map(|p| (p.topic_id, p.index)).collect();
    let listed_count = parts.len();
    let Owner {
        group,
        member,
        session: session_member,
    } = owner;
    if !session.closing {
        for &(topic_id, index) in session.partitions.difference(&listed) {
            parts.push(SharePart {
                topic_id,
                index,
                partition: logs.partition(topic_id, index),
                acks: Vec::new(),
                acks_valid: true,
            });
        }
    }
    let max_records = if body.max_records > 0 {
        body.max_records as usize
    } else {
        DEFAULT_MAX_RECORDS
    };
    let max_bytes = body.max_bytes.max(1) as usize;
    let deadline = Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
    let parts = Arc::new(parts);
    // Acknowledgements first (their state durable), then acquisition, waiting for records up
    // to `max_wait_ms`: appends wake the wait; a lock that expires or a release by another
    // member is seen at the next poll.
    let (b, g, m, ps) = (
        Arc::clone(&broker),
        group.clone(),
        member.clone(),
        Arc::clone(&parts),
    );
    let ack_errors = tokio::task::spawn_blocking(move || acknowledge_all(&b.shares, &g, &m, &ps))
        .await
        .unwrap_or_else(|_| vec![Some((ResponseError::UnknownServerError, None)); parts.len()]);
    let mut pieces: Vec<Piece>;
    loop {
        let mut listeners: Vec<_> = parts
            .iter()
            .filter_map(|p| p.partition.as_ref().ok().and_then(|p| p.listen()))
            .collect();
        // A replica has no append signal: it is looked at again every REPLICA_POLL.
        let polled = parts
            .iter()
            .any(|p| matches!(p.partition, Ok(ShareLog::Replica(..))));
        let (b, g, m, ps) = (
            Arc::clone(&broker),
            group.clone(),
            member.clone(),
            Arc::clone(&parts),
        );
        // A closing request and a renewal acquire nothing.
        let acquiring = !session.closing && !body.is_renew_ack;
        let strict = body.share_acquire_mode == 1;
        pieces = tokio::task::spawn_blocking(move || {
            // `MaxRecords` is the whole request's: each partition gets what is left of it.
            let mut left = max_records;
            ps.iter()
                .map(|p| {
                    if !acquiring {
                        return Piece::default();
                    }
                    let piece = acquire_one(&b.shares, &g, &m, p, left, strict, max_bytes);
                    let taken: i64 = piece.acquired.iter().map(|(f, l, _)| l - f + 1).sum();
                    left = left.saturating_sub(taken as usize);
                    piece
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        let got = pieces
            .iter()
            .any(|p| !p.acquired.is_empty() || p.error.is_some());
        let now = Instant::now();
        if got || !acquiring || now >= deadline {
            break;
        }
        if polled {
            tokio::time::sleep_until(deadline.min(now + REPLICA_POLL).into()).await;
        } else {
            let poll = deadline.min(now + Duration::from_millis(100));
            wait::any_append(&mut listeners, poll).await;
        }
    }
    if session.closing {
        let b = Arc::clone(&broker);
        let (g, m) = (group.clone(), member.clone());
        let _ =
            tokio::task::spawn_blocking(move || b.shares.close_session(&g, &m, &session_member))
                .await;
    }
    let mut topics: Vec<ShareFetchableTopicResponse> = Vec::new();
    for (i, (part, piece)) in parts
        .iter()
        .zip(
            pieces
                .into_iter()
                .chain(std::iter::repeat_with(Piece::default)),
        )
        .enumerate()
    {
        let (ack_error, ack_message) = match ack_errors.get(i).copied().flatten() {
            Some((error, message)) => (Some(error), message),
            None => (piece.ack_error, None),
        };
        // An unlisted session partition is answered only when it has something to say.
        if i >= listed_count && piece.acquired.is_empty() && piece.error.is_none() {
            continue;
        }
        let data = PartitionData::default()
            .with_partition_index(part.index)
            .with_error_code(errors::code(piece.error))
            .with_acknowledge_error_code(errors::code(ack_error))
            .with_acknowledge_error_message(ack_message.map(str_bytes))
            .with_current_leader(
                kafka_protocol::messages::share_fetch_response::LeaderIdAndEpoch::default()
                    .with_leader_id(broker.endpoint.node_id)
                    .with_leader_epoch(0),
            )
            .with_records(Some(piece.records))
            .with_acquired_records(
                piece
                    .acquired
                    .into_iter()
                    .map(|(first, last, count)| {
                        AcquiredRecords::default()
                            .with_first_offset(first)
                            .with_last_offset(last)
                            .with_delivery_count(count)
                    })
                    .collect(),
            );
        match topics.iter_mut().find(|t| t.topic_id == part.topic_id) {
            Some(t) => t.partitions.push(data),
            None => topics.push(
                ShareFetchableTopicResponse::default()
                    .with_topic_id(part.topic_id)
                    .with_partitions(vec![data]),
            ),
        }
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(topics)
}

/// A partition's acknowledgement error, with its message if Kafka gives one.
type AckError = (ResponseError, Option<&'static str>);

/// Applies every partition's acknowledgements. Blocking.
fn acknowledge_all(
    shares: &ShareGroups,
    group: &str,
    member: &str,
    parts: &[SharePart],
) -> Vec<Option<AckError>> {
    parts
        .iter()
        .map(|p| {
            if p.acks.is_empty() {
                return None;
            }
            if !p.acks_valid {
                return Some((ResponseError::InvalidRequest, None));
            }
            if let Err(e) = &p.partition {
                return Some((*e, None));
            }
            let key: ShareKey = (group.to_string(), p.topic_id, p.index);
            shares.acknowledge(&key, member, &p.acks).err()
        })
        .collect()
}

/// Acquires records of one partition for the member: reads the log from the share-partition's
/// fetch offset and acquires what the batches hold. Blocking.
fn acquire_one(
    shares: &ShareGroups,
    group: &str,
    member: &str,
    part: &SharePart,
    max_records: usize,
    strict: bool,
    max_bytes: usize,
) -> Piece {
    let partition = match &part.partition {
        Ok(p) => p,
        Err(e) => {
            return Piece {
                error: Some(*e),
                ..Piece::default()
            }
        }
    };
    let key: ShareKey = (group.to_string(), part.topic_id, part.index);
    if max_records == 0 {
        return Piece::default();
    }
    let Some(offset) = shares.fetch_offset(
        &key,
        partition.log_start_offset(),
        partition.log_end_offset(),
    ) else {
        return Piece::default();
    };
    let bytes = match partition.read(offset, max_bytes) {
        Ok(bytes) => bytes,
        Err(error) => {
            return Piece {
                error: Some(error),
                ..Piece::default()
            }
        }
    };
    // The batches read, with where each sits in `bytes`.
    let mut batches = Vec::new();
    let mut spans = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Ok(batch) = oncelog::format::RecordBatch::parse(&bytes[at..]) else {
            break;
        };
        batches.push(FetchedBatch {
            first: batch.base_offset(),
            last: batch.last_offset(),
            control: batch.is_control(),
        });
        spans.push((at, at + batch.size()));
        at += batch.size();
    }
    let acquired = shares.acquire(&key, member, &batches, max_records, strict);
    // The batches from the first to the last holding an acquired record; the client keeps
    // only the acquired offsets of them.
    let holds = |b: &FetchedBatch| {
        acquired
            .iter()
            .any(|&(first, last, _)| first <= b.last && last >= b.first)
    };
    let first = batches.iter().position(holds);
    let last = batches.iter().rposition(holds);
    let records = match (first, last) {
        (Some(f), Some(l)) => bytes.slice(spans[f].0..spans[l].1),
        _ => Bytes::new(),
    };
    Piece {
        records,
        acquired,
        ..Piece::default()
    }
}

pub fn acknowledge(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ShareAcknowledgeRequest = request.body()?;
    let lock_ms = lock_ms(broker, body.group_id.as_ref().map(|g| g.0.as_str()));
    let refuse = |error: ResponseError| -> Result<Reply, HandleError> {
        let response = ShareAcknowledgeResponse::default()
            .with_error_code(error.code())
            .with_acquisition_lock_timeout_ms(lock_ms);
        Ok(Reply::Now(respond(request, &response)?))
    };
    let (group, member) = match session_owner(&body.group_id, &body.member_id) {
        Ok(owner) => owner,
        Err(error) => return refuse(error),
    };
    let logs = ShareLogs::of(broker);
    let session_member = session_name(request, &member);
    let mut parts = Vec::new();
    for t in &body.topics {
        for p in &t.partitions {
            let acks: AckBatches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            let acks_valid = valid_acks(&acks, body.is_renew_ack);
            parts.push(SharePart {
                topic_id: t.topic_id,
                index: p.partition_index,
                partition: logs.partition(t.topic_id, p.partition_index),
                acks,
                acks_valid,
            });
        }
    }
    let closing =
        match broker
            .shares
            .acknowledge_session(&group, &session_member, body.share_session_epoch)
        {
            Ok(closing) => closing,
            Err(e) => return refuse(e),
        };
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        let b = Arc::clone(&broker);
        let (g, m) = (group.clone(), member.clone());
        let (parts, errors) = tokio::task::spawn_blocking(move || {
            let errors = acknowledge_all(&b.shares, &g, &m, &parts);
            if closing {
                b.shares.close_session(&g, &m, &session_member);
            }
            (parts, errors)
        })
        .await
        .unwrap_or_default();
        let mut topics: Vec<ShareAcknowledgeTopicResponse> = Vec::new();
        for (part, error) in parts.iter().zip(errors) {
            let data = AckPartitionData::default()
                .with_partition_index(part.index)
                .with_error_code(errors::code(error.map(|e| e.0)))
                .with_error_message(error.and_then(|e| e.1).map(str_bytes))
                .with_current_leader(
                    kafka_protocol::messages::share_acknowledge_response::LeaderIdAndEpoch::default()
                        .with_leader_id(broker.endpoint.node_id)
                        .with_leader_epoch(0),
                );
            match topics.iter_mut().find(|t| t.topic_id == part.topic_id) {
                Some(t) => t.partitions.push(data),
                None => topics.push(
                    ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(part.topic_id)
                        .with_partitions(vec![data]),
                ),
            }
        }
        let response = ShareAcknowledgeResponse::default()
            .with_acquisition_lock_timeout_ms(lock_ms)
            .with_responses(topics);
        codec::encode(correlation_id, version, &response, &[])
    })))
}
