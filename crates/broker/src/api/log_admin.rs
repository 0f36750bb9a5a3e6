//! The admin APIs on partition logs, each answered by the engine: DeleteRecords (the log's
//! `delete_records`, which raises the log start offset), OffsetForLeaderEpoch (the log's
//! leader-epoch cache, `end_offset_for_epoch`) and DescribeLogDirs (the data directory the
//! `LogManager` runs, each partition's size on disk).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::errors::code;
use crate::store::DeleteRecordsRefused;

/// The leader epoch this broker advertises for every partition (Metadata and ListOffsets
/// answer it): the epoch a client's `current_leader_epoch` is checked against.
const LEADER_EPOCH: i32 = 0;

/// Kafka's "no epoch" in a request: the current leader epoch is not checked.
const NO_EPOCH: i32 = -1;

/// The low watermark of a refused partition (`DeleteRecordsResponse.INVALID_LOW_WATERMARK`).
const INVALID_LOW_WATERMARK: i64 = -1;

/// The Kafka error for a refused DeleteRecords of one partition.
fn delete_records_error(refused: &DeleteRecordsRefused) -> ResponseError {
    match refused {
        DeleteRecordsRefused::OutOfRange { .. } => ResponseError::OffsetOutOfRange,
        DeleteRecordsRefused::Policy => ResponseError::PolicyViolation,
        DeleteRecordsRefused::Storage { .. } | DeleteRecordsRefused::Offline(_) => {
            ResponseError::KafkaStorageError
        }
        DeleteRecordsRefused::Closed => ResponseError::NotLeaderOrFollower,
    }
}

/// DeleteRecords, as Kafka's `ReplicaManager.deleteRecords`: per partition, the new low
/// watermark (the log start offset), or an error and -1. Durable before it is answered.
pub async fn delete_records(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteRecordsRequest = request.body()?;
    let b = Arc::clone(broker);
    let wanted: Vec<(TopicName, Vec<(i32, i64)>)> = body
        .topics
        .into_iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.offset))
                .collect();
            (t.name, parts)
        })
        .collect();
    let topics = tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .map(|(name, parts)| {
                let partitions = parts
                    .into_iter()
                    .map(|(index, offset)| {
                        let answer = match b.store.partition(&name, index) {
                            None => Err(ResponseError::UnknownTopicOrPartition),
                            Some(p) => p.delete_records(offset).map_err(|e| {
                                tracing::info!(partition = ?p, offset, error = %e, "delete records refused");
                                delete_records_error(&e)
                            }),
                        };
                        if let Ok(low_watermark) = answer {
                            tracing::info!(topic = %name.0, partition = index, low_watermark, "records deleted");
                        }
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(index)
                            .with_low_watermark(answer.unwrap_or(INVALID_LOW_WATERMARK))
                            .with_error_code(code(answer.err()))
                    })
                    .collect();
                DeleteRecordsTopicResult::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "delete records task failed");
        Vec::new()
    });
    let response = DeleteRecordsResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// OffsetForLeaderEpoch, as Kafka's `Partition.lastOffsetForLeaderEpoch` for a leader: the
/// client's current leader epoch is checked against this broker's (older: FENCED_LEADER_EPOCH,
/// newer: UNKNOWN_LEADER_EPOCH, -1: not checked), then the leader-epoch cache answers the
/// largest epoch at or below the one asked about and where it ended (-1 and -1 when it cannot
/// tell). Consumers (replica id -1) use it to detect a truncated log.
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    leader_epoch_answer(request, |topic, p| {
        let partition = broker
            .store
            .partition(topic, p.partition)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if partition.offline().is_some() {
            return Err(ResponseError::KafkaStorageError);
        }
        match p.current_leader_epoch {
            NO_EPOCH => {}
            e if e < LEADER_EPOCH => return Err(ResponseError::FencedLeaderEpoch),
            e if e > LEADER_EPOCH => return Err(ResponseError::UnknownLeaderEpoch),
            _ => {}
        }
        Ok(partition.end_offset_for_epoch(p.leader_epoch))
    })
}

/// OffsetForLeaderEpoch's answer, partition by partition in the request's order: `end_of`
/// answers the (leader epoch, end offset) of one partition asked about (its topic and the
/// request's line), or the error it is answered with (and -1, -1). The single broker's and a
/// cluster node's answer: they differ only in where a partition's leader-epoch cache is.
pub fn leader_epoch_answer(
    request: &Request,
    mut end_of: impl FnMut(&str, &OffsetForLeaderPartition) -> Result<(i32, i64), ResponseError>,
) -> Result<Reply, HandleError> {
    let body: OffsetForLeaderEpochRequest = request.body()?;
    let topics = body
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let answer = EpochEndOffset::default().with_partition(p.partition);
                    match end_of(&t.topic, p) {
                        Ok((epoch, end)) => answer.with_leader_epoch(epoch).with_end_offset(end),
                        Err(e) => answer.with_error_code(e.code()),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    let response = OffsetForLeaderEpochResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DescribeLogDirs, as Kafka's `ReplicaManager.describeLogDirs`: the one data directory (its
/// absolute path), and for each partition asked about (null: every one) its size on disk; the
/// offset lag is 0 and no partition is a future replica (this broker moves none between
/// directories). Topics none of whose partitions were asked about are left out.
pub fn describe_log_dirs(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let partitions = broker.store.topics().into_iter().flat_map(|topic| {
        topic
            .partitions
            .iter()
            .map(|p| (topic.name.clone(), p.index(), p.size_bytes()))
            .collect::<Vec<_>>()
    });
    log_dirs_answer(request, broker.store.dir(), partitions)
}

/// DescribeLogDirs' answer for the log directory `dir` holding `partitions` (topic, index,
/// bytes on disk): the single broker's store, or a cluster node's replicas.
pub fn log_dirs_answer(
    request: &Request,
    dir: &std::path::Path,
    partitions: impl IntoIterator<Item = (String, i32, u64)>,
) -> Result<Reply, HandleError> {
    let body: DescribeLogDirsRequest = request.body()?;
    let wanted: Option<BTreeSet<(String, i32)>> = body.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
            .collect()
    });
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for (topic, index, size) in partitions {
        let asked = wanted
            .as_ref()
            .is_none_or(|w| w.contains(&(topic.clone(), index)));
        if asked {
            by_topic.entry(topic).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(index)
                    .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
                    .with_offset_lag(0)
                    .with_is_future_key(false),
            );
        }
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            DescribeLogDirsTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(topics);
    let response = DescribeLogDirsResponse::default().with_results(vec![result]);
    Ok(Reply::Now(respond(request, &response)?))
}
