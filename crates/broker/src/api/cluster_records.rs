//! DeleteRecords in a cluster (docs/design.md, "Retention and DeleteRecords in a cluster").
//! Kafka's admin client sends it to each partition's leader, which checks it as Kafka's
//! `ReplicaManager.deleteRecords` does (-1 is the high watermark; past the high watermark
//! OFFSET_OUT_OF_RANGE; NOT_LEADER_OR_FOLLOWER on a node that does not lead). The new log
//! starts are then a `delete_records` record of the metadata log, written by the controller
//! (the leader forwards them to it, [`super::to_controller`]) and applied by every node: reads
//! honour them at once, and each replica deletes the bytes below them once raft no longer
//! needs them (cluster/retention.rs). The leader answers once its own image holds them, with
//! each partition's low watermark as its reads now see it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use oncelog_raft::Replica;

use super::to_controller::{self, Forwarded};
use super::{respond, HandleError, Reply};
use crate::cluster::{Cluster, Route, WriteRefused};
use crate::codec::Request;

/// The low watermark of a refused partition (`DeleteRecordsResponse.INVALID_LOW_WATERMARK`).
const INVALID_LOW_WATERMARK: i64 = -1;

/// The least and the most a DeleteRecords waits for the controller and its record.
const LEAST_WAIT: Duration = Duration::from_secs(1);
const MOST_WAIT: Duration = Duration::from_secs(60);

/// What DeleteRecords does with one partition on its leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Refused with this error.
    Refused(ResponseError),
    /// Nothing to raise: the log already starts at or above the offset (Kafka answers the
    /// current low watermark).
    Answered(i64),
    /// The log start goes up to this offset.
    Raise(i64),
}

/// Kafka's rules for one partition: `offset` -1 is the high watermark; an offset below 0 or
/// past the high watermark is OFFSET_OUT_OF_RANGE; one at or below the log start changes
/// nothing.
fn decide(offset: i64, high_watermark: i64, log_start: i64) -> Decision {
    let offset = if offset == -1 { high_watermark } else { offset };
    if !(0..=high_watermark).contains(&offset) {
        Decision::Refused(ResponseError::OffsetOutOfRange)
    } else if offset <= log_start {
        Decision::Answered(log_start)
    } else {
        Decision::Raise(offset)
    }
}

/// One partition's line while the request is worked on.
enum Line {
    Done(Result<i64, ResponseError>),
    /// To raise to this offset on this node's leading replica.
    Raise(Arc<Replica>, i64),
}

pub fn delete_records(cluster: &Arc<Cluster>, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteRecordsRequest = request.body()?;
    let (cluster, request) = (Arc::clone(cluster), request.clone());
    let within = Duration::from_millis(body.timeout_ms.max(0) as u64).clamp(LEAST_WAIT, MOST_WAIT);
    Ok(Reply::Later(tokio::spawn(async move {
        let topics = if to_controller::forwarded(&request) {
            on_controller(&cluster, &body, within).await
        } else {
            on_leader(&cluster, &request, &body, within).await
        };
        respond(
            &request,
            &DeleteRecordsResponse::default().with_topics(topics),
        )
    })))
}

/// The client's request, on the node it reached (each partition's leader, as Kafka's admin
/// client sends it).
async fn on_leader(
    cluster: &Cluster,
    request: &Request,
    body: &DeleteRecordsRequest,
    within: Duration,
) -> Vec<DeleteRecordsTopicResult> {
    let mut lines: Vec<Vec<(i32, Line)>> = body
        .topics
        .iter()
        .map(|t| {
            t.partitions
                .iter()
                .map(|p| {
                    let line = match cluster.route(&t.name, p.partition_index) {
                        Route::Unknown => Line::Done(Err(ResponseError::UnknownTopicOrPartition)),
                        Route::Elsewhere(_) => Line::Done(Err(ResponseError::NotLeaderOrFollower)),
                        Route::Leader(replica) => {
                            let start = cluster.log_start(&t.name, p.partition_index, &replica);
                            match decide(p.offset, replica.log().high_watermark(), start) {
                                Decision::Refused(e) => Line::Done(Err(e)),
                                Decision::Answered(low) => Line::Done(Ok(low)),
                                Decision::Raise(offset) => Line::Raise(replica, offset),
                            }
                        }
                    };
                    (p.partition_index, line)
                })
                .collect()
        })
        .collect();
    // The raises, by topic, for the controller.
    let raises: Vec<(usize, Vec<(i32, i64)>)> = lines
        .iter()
        .enumerate()
        .map(|(t, parts)| {
            let offsets = parts
                .iter()
                .filter_map(|(p, l)| match l {
                    Line::Raise(_, offset) => Some((*p, *offset)),
                    Line::Done(_) => None,
                })
                .collect::<Vec<_>>();
            (t, offsets)
        })
        .filter(|(_, offsets)| !offsets.is_empty())
        .collect();
    if !raises.is_empty() {
        let written = written_by_controller(cluster, request.version, body, &raises, within).await;
        for ((t, offsets), outcome) in raises.iter().zip(written) {
            let name = body.topics[*t].name.0.as_str();
            let ok: Vec<(i32, i64)> = offsets
                .iter()
                .filter(|(p, _)| outcome.get(p).is_some_and(|o| o.is_ok()))
                .copied()
                .collect();
            // Answered once this node's own reads honour the new starts.
            cluster.wait_log_starts(name, &ok, within).await;
            for (p, line) in lines[*t].iter_mut() {
                if let Line::Raise(replica, _) = line {
                    let answer = match outcome.get(p) {
                        Some(Ok(())) => Ok(cluster.log_start(name, *p, replica)),
                        Some(Err(e)) => Err(*e),
                        None => Err(ResponseError::UnknownServerError),
                    };
                    if let Ok(low_watermark) = answer {
                        tracing::info!(topic = %name, partition = *p, low_watermark, "records deleted");
                    }
                    *line = Line::Done(answer);
                }
            }
        }
    }
    body.topics
        .iter()
        .zip(lines)
        .map(|(t, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, line)| {
                    let answer = match line {
                        Line::Done(a) => a,
                        Line::Raise(..) => Err(ResponseError::UnknownServerError),
                    };
                    result(p, answer)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect()
}

/// Has the controller write the raises (`(topic's index in body, [(partition, offset)])`):
/// itself when this node is the controller, else through a forward. Per raise, each
/// partition's outcome.
async fn written_by_controller(
    cluster: &Cluster,
    version: i16,
    body: &DeleteRecordsRequest,
    raises: &[(usize, Vec<(i32, i64)>)],
    within: Duration,
) -> Vec<BTreeMap<i32, Result<(), ResponseError>>> {
    let forward = DeleteRecordsRequest::default()
        .with_timeout_ms(within.as_millis().min(i32::MAX as u128) as i32)
        .with_topics(
            raises
                .iter()
                .map(|(t, offsets)| {
                    DeleteRecordsTopic::default()
                        .with_name(body.topics[*t].name.clone())
                        .with_partitions(
                            offsets
                                .iter()
                                .map(|(p, o)| {
                                    DeleteRecordsPartition::default()
                                        .with_partition_index(*p)
                                        .with_offset(*o)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let moved = |r: &DeleteRecordsResponse| {
        r.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .all(|p| p.error_code == ResponseError::NotController.code())
    };
    let answered = match to_controller::send(cluster, version, &forward, within, moved).await {
        Forwarded::Here => on_controller(cluster, &forward, within).await,
        Forwarded::Answered(r) => r.topics,
        Forwarded::Failed(why) => {
            tracing::info!(reason = %why, "DeleteRecords: no controller took the new log starts");
            Vec::new()
        }
    };
    raises
        .iter()
        .enumerate()
        .map(|(i, (_, offsets))| {
            let topic = answered.get(i);
            offsets
                .iter()
                .map(|(p, _)| {
                    let code = topic
                        .and_then(|t| t.partitions.iter().find(|r| r.partition_index == *p))
                        .map(|r| r.error_code);
                    let outcome = match code {
                        Some(0) => Ok(()),
                        Some(c) => Err(ResponseError::try_from_code(c)
                            .unwrap_or(ResponseError::UnknownServerError)),
                        None => Err(ResponseError::RequestTimedOut),
                    };
                    (*p, outcome)
                })
                .collect()
        })
        .collect()
}

/// A forwarded request (or this node's own raises) on the controller: each topic's new log
/// starts as one `delete_records` record, its partitions' offsets as the leaders checked
/// them. Low watermarks are the image's, once applied (the leader answers its own).
async fn on_controller(
    cluster: &Cluster,
    body: &DeleteRecordsRequest,
    within: Duration,
) -> Vec<DeleteRecordsTopicResult> {
    // A node that no longer controls answers so before it looks at its image (which may lag):
    // the forwarding node then asks the controller it learns of next.
    if cluster.controller() != Some(cluster.me()) {
        return body
            .topics
            .iter()
            .map(|t| {
                DeleteRecordsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| result(p.partition_index, Err(ResponseError::NotController)))
                            .collect(),
                    )
            })
            .collect();
    }
    let mut topics = Vec::with_capacity(body.topics.len());
    for t in &body.topics {
        let name = t.name.0.as_str();
        let count = cluster
            .image()
            .topic(name)
            .map_or(0, |topic| topic.replicas.len() as i32);
        let mut answers: BTreeMap<i32, Result<i64, ResponseError>> = BTreeMap::new();
        let mut offsets = Vec::new();
        for p in &t.partitions {
            if !(0..count).contains(&p.partition_index) {
                answers.insert(
                    p.partition_index,
                    Err(ResponseError::UnknownTopicOrPartition),
                );
            } else if p.offset < 0 {
                answers.insert(p.partition_index, Err(ResponseError::OffsetOutOfRange));
            } else {
                offsets.push((p.partition_index, p.offset));
            }
        }
        if !offsets.is_empty() {
            let written = cluster.delete_records(name, offsets.clone(), within).await;
            for (p, _) in offsets {
                let answer = match &written {
                    Ok(topic) => Ok(topic.log_start(p)),
                    Err(WriteRefused::NotController(_)) => Err(ResponseError::NotController),
                    Err(WriteRefused::Unknown) => Err(ResponseError::UnknownTopicOrPartition),
                    Err(WriteRefused::Invalid(e, _)) => Err(*e),
                    Err(WriteRefused::Raft(_) | WriteRefused::Timeout) => {
                        Err(ResponseError::RequestTimedOut)
                    }
                    Err(WriteRefused::Exists) => Err(ResponseError::UnknownServerError),
                };
                answers.insert(p, answer);
            }
        }
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                let answer = answers
                    .get(&p.partition_index)
                    .copied()
                    .unwrap_or(Err(ResponseError::UnknownServerError));
                result(p.partition_index, answer)
            })
            .collect();
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    topics
}

fn result(partition: i32, answer: Result<i64, ResponseError>) -> DeleteRecordsPartitionResult {
    let line = DeleteRecordsPartitionResult::default().with_partition_index(partition);
    match answer {
        Ok(low_watermark) => line.with_low_watermark(low_watermark),
        Err(e) => line
            .with_low_watermark(INVALID_LOW_WATERMARK)
            .with_error_code(e.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_one_is_the_high_watermark_and_past_it_is_out_of_range() {
        assert_eq!(decide(-1, 50, 0), Decision::Raise(50));
        assert_eq!(decide(20, 50, 0), Decision::Raise(20));
        assert_eq!(decide(50, 50, 0), Decision::Raise(50));
        assert_eq!(
            decide(51, 50, 0),
            Decision::Refused(ResponseError::OffsetOutOfRange)
        );
        assert_eq!(
            decide(-2, 50, 0),
            Decision::Refused(ResponseError::OffsetOutOfRange)
        );
    }

    #[test]
    fn an_offset_at_or_below_the_log_start_answers_the_start_and_writes_nothing() {
        assert_eq!(decide(10, 50, 30), Decision::Answered(30));
        assert_eq!(decide(30, 50, 30), Decision::Answered(30));
        assert_eq!(decide(-1, 30, 30), Decision::Answered(30));
        assert_eq!(decide(31, 50, 30), Decision::Raise(31));
    }
}
