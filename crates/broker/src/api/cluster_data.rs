//! Produce, Fetch and ListOffsets in cluster mode (docs/design.md, "A cluster of brokers"):
//! served by a partition's raft leader only, appends through `Replica::submit` (acks=all
//! answered once a majority has the batch durably, acks=1 once the leader's own log has it),
//! reads capped at the high watermark (raft's commit).
//! Elsewhere NOT_LEADER_OR_FOLLOWER, with the leader where the version carries it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::fetch_response::{self, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::produce_response::{
    self, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use oncelog::format::BatchIter;
use oncelog::{IsolationLevel, ReadError};
use oncelog_raft::{Ack, Replica, ReplicaError, Submitted};

use super::{fetch, log_admin, respond, HandleError, Reply};
use crate::cluster::{Cluster, PartitionView, Route};
use crate::codec::{self, Request};
use crate::errors;

const ACKS_ALL: i16 = -1;
const READ_COMMITTED: i8 = 1;
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
/// How often a long-polling fetch looks at its partitions' high watermarks again (raft's
/// state machine moves them; no append signal reaches the fetchers here).
const FETCH_POLL: Duration = Duration::from_millis(10);

/// The leaders named in an answer's NOT_LEADER lines, with where clients reach them.
#[derive(Default)]
struct Leaders(std::collections::BTreeSet<i32>);

impl Leaders {
    fn note(&mut self, view: &PartitionView) {
        if let Some(l) = view.leader {
            self.0.insert(l);
        }
    }

    fn endpoints(&self, cluster: &Cluster) -> Vec<(i32, String, i32)> {
        self.0
            .iter()
            .filter_map(|id| {
                let a = cluster.nodes.nodes.get(id)?;
                Some((*id, a.host.clone(), i32::from(a.kafka_port)))
            })
            .collect()
    }
}

/// One partition's batch: queued on the leader, or answered at once.
enum Pending {
    Queued(Arc<Replica>, Submitted),
    Failed {
        error: ResponseError,
        message: Option<String>,
        leader: Option<PartitionView>,
    },
}

pub async fn produce(cluster: &Arc<Cluster>, request: &Request) -> Result<Reply, HandleError> {
    let body: ProduceRequest = request.body()?;
    let acks = body.acks;
    // A transactional batch is appended as any other: the leader's log checks its producer
    // epoch (a fenced producer is refused) and tracks its open transaction for the LSO. Cluster
    // mode runs transaction version 1 (ApiVersions), so the client added the partition to its
    // transaction with AddPartitionsToTxn first.
    let refuse_all: Option<(ResponseError, Option<&str>)> = if !matches!(acks, 0 | 1 | ACKS_ALL) {
        Some((ResponseError::InvalidRequiredAcks, None))
    } else {
        None
    };
    let mut leaders = Leaders::default();
    let mut topics = Vec::with_capacity(body.topic_data.len());
    // Queued in request order, one after the other: the log takes them in that order.
    for topic in body.topic_data {
        // From v13 a topic is named by its id (KIP-516), and answered by it.
        let name = if request.version >= 13 {
            cluster
                .image()
                .topic_by_id(topic.topic_id)
                .map(|t| t.name.clone())
                .ok_or(ResponseError::UnknownTopicId)
        } else {
            Ok(topic.name.0.to_string())
        };
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let failed = |error, message: Option<&str>, leader| Pending::Failed {
                error,
                message: message.map(str::to_string),
                leader,
            };
            let pending = if let Some((error, message)) = refuse_all {
                failed(error, message, None)
            } else if let Err(error) = &name {
                failed(*error, None, None)
            } else {
                let name = name.as_deref().unwrap_or_default();
                match (cluster.route(name, data.index), data.records) {
                    (Route::Unknown, _) => {
                        failed(ResponseError::UnknownTopicOrPartition, None, None)
                    }
                    (Route::Elsewhere(view), _) => {
                        leaders.note(&view);
                        failed(ResponseError::NotLeaderOrFollower, None, Some(view))
                    }
                    (Route::Leader(_), None) => failed(ResponseError::InvalidRecord, None, None),
                    (Route::Leader(replica), Some(records)) => {
                        match replica.submit(records).await {
                            Ok(submitted) => Pending::Queued(replica, submitted),
                            Err(e) => failed(
                                ResponseError::NotLeaderOrFollower,
                                Some(&e.to_string()),
                                None,
                            ),
                        }
                    }
                }
            };
            partitions.push((data.index, pending));
        }
        topics.push((
            topic.name,
            topic.topic_id,
            name.unwrap_or_default(),
            partitions,
        ));
    }
    if acks == 0 {
        let failed = topics.iter().flat_map(|t| &t.3).find_map(|(_, p)| match p {
            Pending::Failed { error, .. } => Some(*error),
            Pending::Queued(..) => None,
        });
        return Ok(match failed {
            None => Reply::Nothing,
            Some(error) => Reply::Close(format!("acks=0 produce failed with {error:?}")),
        });
    }
    let request = request.clone();
    let cluster = Arc::clone(cluster);
    Ok(Reply::Later(tokio::spawn(async move {
        let version = request.version;
        let mut responses = Vec::with_capacity(topics.len());
        for (asked_name, topic_id, name, partitions) in topics {
            let mut answered = Vec::with_capacity(partitions.len());
            for (index, pending) in partitions {
                let line = PartitionProduceResponse::default()
                    .with_index(index)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(-1);
                let (error, message, leader) = match pending {
                    Pending::Failed {
                        error,
                        message,
                        leader,
                    } => (error, message, leader),
                    // acks=1: the leader's own durable write answers (Kafka's), before any
                    // follower has the batch; acks=all: raft's commit.
                    Pending::Queued(replica, submitted) => match if acks == 1 {
                        submitted.written().await
                    } else {
                        submitted.answer().await
                    } {
                        Ok(Ack::Appended { first_offset, .. })
                        | Ok(Ack::Duplicate { first_offset, .. }) => {
                            answered.push(
                                line.with_base_offset(first_offset).with_log_start_offset(
                                    cluster.log_start(&name, index, &replica),
                                ),
                            );
                            continue;
                        }
                        Err(e) => {
                            let (error, leader) = replica_error(&cluster, &name, index, &e);
                            if let Some(view) = &leader {
                                leaders.note(view);
                            }
                            (error, Some(e.to_string()), leader)
                        }
                    },
                };
                let mut line = line
                    .with_error_code(error.code())
                    .with_base_offset(-1)
                    .with_error_message(message.map(StrBytes::from_string));
                if let (Some(view), true) = (leader, version >= 10) {
                    line = line.with_current_leader(
                        produce_response::LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(view.leader.unwrap_or(-1)))
                            .with_leader_epoch(view.epoch),
                    );
                }
                answered.push(line);
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(asked_name)
                    .with_topic_id(topic_id)
                    .with_partition_responses(answered),
            );
        }
        let mut response = ProduceResponse::default().with_responses(responses);
        if version >= 10 {
            response = response.with_node_endpoints(
                leaders
                    .endpoints(&cluster)
                    .into_iter()
                    .map(|(id, host, port)| {
                        produce_response::NodeEndpoint::default()
                            .with_node_id(BrokerId(id))
                            .with_host(StrBytes::from_string(host))
                            .with_port(port)
                    })
                    .collect(),
            );
        }
        respond(&request, &response)
    })))
}

/// The Kafka error for a failed replicated append, and the partition's leader to name for a
/// NOT_LEADER answer. A refusal of the leader's log gets the single broker's code; an outcome
/// raft does not know (a leader deposed while the entry was in flight, a lost answer) is
/// REQUEST_TIMED_OUT, which an idempotent producer retries with the same sequence: the retry
/// is then answered as a duplicate if the first was written.
fn replica_error(
    cluster: &Cluster,
    topic: &str,
    index: i32,
    e: &ReplicaError,
) -> (ResponseError, Option<PartitionView>) {
    match e {
        ReplicaError::NotLeader { .. } => {
            let view = match cluster.route(topic, index) {
                Route::Elsewhere(view) => Some(view),
                _ => None,
            };
            (ResponseError::NotLeaderOrFollower, view)
        }
        ReplicaError::Refused { kind, .. } => (errors::append_error_kind(kind), None),
        _ => (ResponseError::RequestTimedOut, None),
    }
}

/// Kafka's check of the leader epoch a client names (KIP-320): -1 names none; one below the
/// leader's term is FENCED_LEADER_EPOCH (the client missed a leader change: it refreshes its
/// metadata and validates its position), one above it UNKNOWN_LEADER_EPOCH (the client's
/// metadata is ahead of this replica: it retries).
fn check_epoch(replica: &Replica, current_leader_epoch: i32) -> Result<(), ResponseError> {
    let term = replica.raft().metrics().borrow().current_term;
    let term = i32::try_from(term).unwrap_or(i32::MAX);
    match current_leader_epoch {
        -1 => Ok(()),
        e if e < term => Err(ResponseError::FencedLeaderEpoch),
        e if e > term => Err(ResponseError::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

/// One partition a fetch asked for.
struct Wanted {
    index: i32,
    fetch_offset: i64,
    /// The partition's log start as clients see it (DeleteRecords' included), when led here.
    log_start: i64,
    max_bytes: usize,
    route: Result<Arc<Replica>, (ResponseError, Option<PartitionView>)>,
}

pub fn fetch(cluster: &Arc<Cluster>, request: &Request) -> Result<Reply, HandleError> {
    let body: FetchRequest = request.body()?;
    let wanted: Vec<Vec<Wanted>> = body
        .topics
        .iter()
        .map(|t| resolve_fetch(cluster, request.version, t))
        .collect();
    let request = request.clone();
    let cluster = Arc::clone(cluster);
    Ok(Reply::Later(tokio::spawn(async move {
        if let Some(refused) = fetch::refused_session(&request, &body) {
            return refused;
        }
        let deadline = Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
        let isolation = if body.isolation_level == READ_COMMITTED {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        };
        loop {
            let (read, bytes, failed) =
                read_all(&wanted, body.max_bytes.max(0) as usize, isolation);
            if bytes >= body.min_bytes.max(0) as usize || failed || Instant::now() >= deadline {
                return answer_fetch(&cluster, &request, &body, &wanted, read);
            }
            tokio::time::sleep(FETCH_POLL).await;
        }
    })))
}

fn resolve_fetch(cluster: &Cluster, version: i16, t: &FetchTopic) -> Vec<Wanted> {
    // Up to v12 topics are named; from v13 they are identified by id.
    let name = if version >= 13 {
        cluster
            .image()
            .topic_by_id(t.topic_id)
            .map(|t| t.name.clone())
            .ok_or(ResponseError::UnknownTopicId)
    } else {
        Ok(t.topic.0.to_string())
    };
    t.partitions
        .iter()
        .map(|p| {
            let route = match &name {
                Err(e) => Err((*e, None)),
                Ok(name) => match cluster.route(name, p.partition) {
                    Route::Leader(replica) => match check_epoch(&replica, p.current_leader_epoch) {
                        Ok(()) => Ok(replica),
                        Err(e) => Err((e, None)),
                    },
                    Route::Elsewhere(view) => Err((ResponseError::NotLeaderOrFollower, Some(view))),
                    Route::Unknown => Err((ResponseError::UnknownTopicOrPartition, None)),
                },
            };
            let log_start = match (&name, &route) {
                (Ok(name), Ok(replica)) => cluster.log_start(name, p.partition, replica),
                _ => 0,
            };
            Wanted {
                index: p.partition,
                fetch_offset: p.fetch_offset,
                log_start,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                route,
            }
        })
        .collect()
}

type Piece = Result<oncelog::FetchResult, ResponseError>;

/// Reads every led partition below its high watermark, within the fetch's limits (at least
/// one batch for the first data of the answer, KIP-74). Answers the pieces, their bytes, and
/// whether one failed.
fn read_all(
    wanted: &[Vec<Wanted>],
    max_bytes: usize,
    isolation: IsolationLevel,
) -> (Vec<Vec<Option<Piece>>>, usize, bool) {
    let (mut left, mut bytes, mut failed) = (max_bytes, 0, false);
    let read = wanted
        .iter()
        .map(|topic| {
            topic
                .iter()
                .map(|w| {
                    let Ok(replica) = &w.route else {
                        failed = true;
                        return None;
                    };
                    // Below the log start DeleteRecords set (the bytes may still be on disk
                    // until raft lets them go): out of range, as Kafka answers.
                    if w.fetch_offset < w.log_start {
                        failed = true;
                        return Some(Err(ResponseError::OffsetOutOfRange));
                    }
                    let limit = w.max_bytes.min(left);
                    if limit == 0 && bytes > 0 {
                        return None;
                    }
                    let read = replica
                        .log()
                        .fetch_isolated(w.fetch_offset, limit.max(1), isolation)
                        .map_err(|e| read_error(&e))
                        .and_then(|r| check_served(&r.bytes).map(|()| r));
                    match read {
                        Ok(r) if r.bytes.len() > limit && bytes > 0 => None,
                        Ok(r) => {
                            bytes += r.bytes.len();
                            left = left.saturating_sub(r.bytes.len());
                            Some(Ok(r))
                        }
                        Err(e) => {
                            failed = true;
                            Some(Err(e))
                        }
                    }
                })
                .collect()
        })
        .collect();
    (read, bytes, failed)
}

fn read_error(e: &ReadError) -> ResponseError {
    match e {
        ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadError::Closed => ResponseError::NotLeaderOrFollower,
        _ => ResponseError::KafkaStorageError,
    }
}

/// Every batch about to be served is whole and matches its CRC-32C (a client must never be
/// handed damage as data).
fn check_served(bytes: &[u8]) -> Result<(), ResponseError> {
    for item in BatchIter::new(bytes) {
        match item {
            Ok((_, batch)) if batch.verify_crc().is_ok() => {}
            _ => {
                tracing::error!("a replicated batch failed its check on the way out");
                return Err(ResponseError::KafkaStorageError);
            }
        }
    }
    Ok(())
}

fn answer_fetch(
    cluster: &Cluster,
    request: &Request,
    body: &FetchRequest,
    wanted: &[Vec<Wanted>],
    read: Vec<Vec<Option<Piece>>>,
) -> Result<codec::ResponseFrame, codec::EncodeError> {
    let version = request.version;
    let mut leaders = Leaders::default();
    let (responses, pass_through) = fetch::answer_topics(&body.topics, wanted, read, |w, piece| {
        let data = PartitionData::default()
            .with_partition_index(w.index)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1)
            .with_records(Some(Bytes::new()));
        match (&w.route, piece) {
            (Err((error, view)), _) => {
                let mut data = data.with_error_code(error.code());
                if let (Some(view), true) = (view, version >= 12) {
                    leaders.note(view);
                    data = data.with_current_leader(
                        fetch_response::LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(view.leader.unwrap_or(-1)))
                            .with_leader_epoch(view.epoch),
                    );
                }
                data
            }
            (Ok(replica), None) => {
                let log = replica.log();
                data.with_high_watermark(log.high_watermark())
                    .with_last_stable_offset(log.last_stable_offset().min(log.high_watermark()))
                    .with_log_start_offset(log.log_start_offset().max(w.log_start))
            }
            (Ok(_), Some(Err(error))) => data.with_error_code(error.code()),
            (Ok(_), Some(Ok(r))) => {
                let aborted = r.aborted_transactions.map(|a| {
                    fetch::aborted_transactions(
                        a.into_iter().map(|t| (t.producer_id, t.first_offset)),
                    )
                });
                data.with_high_watermark(r.high_watermark)
                    .with_last_stable_offset(r.last_stable_offset)
                    .with_log_start_offset(r.log_start_offset.max(w.log_start))
                    .with_aborted_transactions(aborted)
                    .with_records(Some(r.bytes))
            }
        }
    });
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 16 {
        response = response.with_node_endpoints(
            leaders
                .endpoints(cluster)
                .into_iter()
                .map(|(id, host, port)| {
                    fetch_response::NodeEndpoint::default()
                        .with_node_id(BrokerId(id))
                        .with_host(StrBytes::from_string(host))
                        .with_port(port)
                })
                .collect(),
        );
    }
    codec::encode(request.correlation_id, version, &response, &pass_through)
}

pub fn list_offsets(cluster: &Arc<Cluster>, request: &Request) -> Result<Reply, HandleError> {
    let body: ListOffsetsRequest = request.body()?;
    let read_committed = body.isolation_level == READ_COMMITTED;
    let topics = body
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let line = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    let replica = match cluster.route(&topic.name, p.partition_index) {
                        Route::Leader(replica) => {
                            match check_epoch(&replica, p.current_leader_epoch) {
                                Ok(()) => replica,
                                Err(e) => return line.with_error_code(e.code()),
                            }
                        }
                        Route::Elsewhere(_) => {
                            return line.with_error_code(ResponseError::NotLeaderOrFollower.code())
                        }
                        Route::Unknown => {
                            return line
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        }
                    };
                    let log = replica.log();
                    let high_watermark = log.high_watermark();
                    match p.timestamp {
                        LATEST if read_committed => {
                            line.with_offset(log.last_stable_offset().min(high_watermark))
                        }
                        LATEST => line.with_offset(high_watermark),
                        EARLIEST | EARLIEST_LOCAL => line.with_offset(cluster.log_start(
                            &topic.name,
                            p.partition_index,
                            &replica,
                        )),
                        // Nothing is tiered in cluster mode.
                        LATEST_TIERED => line,
                        t if t >= 0 => match log.offset_for_timestamp(t) {
                            Ok(Some(found)) if found.offset < high_watermark => line
                                .with_offset(found.offset.max(cluster.log_start(
                                    &topic.name,
                                    p.partition_index,
                                    &replica,
                                )))
                                .with_timestamp(found.timestamp),
                            Ok(_) => line,
                            Err(e) => line.with_error_code(read_error(&e).code()),
                        },
                        // MAX_TIMESTAMP (-3) and anything else.
                        _ => line.with_error_code(ResponseError::InvalidRequest.code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    let response = ListOffsetsResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// OffsetForLeaderEpoch on the partition's leader, from its leader-epoch cache (the raft terms
/// its batches carry), so a consumer detects a log truncated under it. A current epoch older
/// than the leader's term is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (the
/// client's metadata is ahead of this node), as Kafka answers.
pub fn offset_for_leader_epoch(
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    log_admin::leader_epoch_answer(request, |topic, p| {
        let replica = match cluster.route(topic, p.partition) {
            Route::Leader(replica) => replica,
            Route::Elsewhere(_) => return Err(ResponseError::NotLeaderOrFollower),
            Route::Unknown => return Err(ResponseError::UnknownTopicOrPartition),
        };
        check_epoch(&replica, p.current_leader_epoch)?;
        let e = replica.log().replica().end_offset_for_epoch(p.leader_epoch);
        Ok((e.leader_epoch, e.end_offset))
    })
}
