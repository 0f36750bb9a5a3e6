//! Produce: each partition's batch is appended as the client sent it; the answer waits for
//! durability when the client asked for acks=all.
//!
//! Order matters to an idempotent producer: the batches of one connection must reach the log
//! in the order they were sent, or pipelined requests would see their own sequence gaps. So a
//! request's appends finish before the next request is read; only the wait for the flush (and
//! the answer) is left to run alongside later requests, which also lets the batches of several
//! in-flight requests share one fsync.
//!
//! From v12 a transactional batch adds its partition to the transaction (KIP-890 part 2,
//! transaction version 2) before it is appended: the coordinator's step is awaited here, so
//! it too is done before the next request is read.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::connection::CaughtUp;
use crate::errors;
use crate::stats::Stats;
use crate::store::{self, AppendRefused, Appended, BatchProducer, Partition, Topic};

/// acks=all: answer once the batch is durable.
const ACKS_ALL: i16 = -1;

/// What happened to one partition's batch.
enum Outcome {
    Appended {
        partition: Arc<Partition>,
        appended: Appended,
        /// Who sent the batch (for the duplicate log line).
        producer: Option<BatchProducer>,
    },
    Failed {
        error: ResponseError,
        message: Option<String>,
    },
}

/// One partition's line of the answer.
struct PartitionResult {
    index: i32,
    outcome: Outcome,
}

struct TopicResult {
    request: TopicProduceData,
    partitions: Vec<PartitionResult>,
}

pub async fn handle(
    broker: &Arc<Broker>,
    request: &Request,
    caught_up: &CaughtUp,
) -> Result<Reply, HandleError> {
    let body: ProduceRequest = request.body()?;
    let acks = body.acks;
    // Before v12 a transactional produce needs no check here: the log refuses a
    // transactional batch of a fenced epoch, and the coordinator only lets a producer add
    // partitions in its epoch.
    let refuse_all = if !matches!(acks, 0 | 1 | ACKS_ALL) {
        Some(ResponseError::InvalidRequiredAcks)
    } else {
        None
    };
    let topics: Vec<_> = body
        .topic_data
        .iter()
        .map(|t| resolve_topic(broker, request.version, t))
        .collect();
    let refused = match (&body.transactional_id, refuse_all) {
        (Some(id), None) if request.version >= 12 && !id.0.is_empty() => {
            add_to_transaction(broker, &id.0, &topics, &body.topic_data).await
        }
        _ => HashMap::new(),
    };
    let mut results = Vec::with_capacity(body.topic_data.len());
    for (mut topic_data, topic) in body.topic_data.into_iter().zip(topics) {
        let partitions = std::mem::take(&mut topic_data.partition_data);
        let mut appends = Vec::with_capacity(partitions.len());
        for data in partitions {
            let refusal = refuse_all.or_else(|| {
                let name = topic.as_ref().map(|t| t.name.clone()).unwrap_or_default();
                refused.get(&(name, data.index)).copied()
            });
            appends.push(start_append(&topic, refusal, data));
        }
        let mut partitions = Vec::with_capacity(appends.len());
        for (index, append) in appends {
            let outcome = match append {
                PendingAppend::Done {
                    partition,
                    producer,
                    result,
                } => appended_outcome(partition, producer, result),
                PendingAppend::Running {
                    partition,
                    producer,
                    task,
                } => match task.await {
                    Ok(result) => appended_outcome(partition, producer, result),
                    Err(e) => Outcome::Failed {
                        error: ResponseError::UnknownServerError,
                        message: Some(format!("append task failed: {e}")),
                    },
                },
                PendingAppend::Failed(error) => Outcome::Failed {
                    error,
                    message: None,
                },
            };
            account(broker, request, &outcome, index);
            partitions.push(PartitionResult { index, outcome });
        }
        results.push(TopicResult {
            request: topic_data,
            partitions,
        });
    }

    match acks {
        0 => {
            let failed =
                results
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .find_map(|p| match &p.outcome {
                        Outcome::Failed { error, .. } => Some(*error),
                        Outcome::Appended { .. } => None,
                    });
            Ok(match failed {
                None => Reply::Nothing,
                Some(error) => Reply::Close(format!("acks=0 produce failed with {error:?}")),
            })
        }
        ACKS_ALL if broker.acks_all_flushes => {
            let request = request.clone();
            let log_append_time = broker.log_append_time;
            let store = Arc::clone(&broker.store);
            let (mut caught_up, mark) = (caught_up.clone(), caught_up.now());
            Ok(Reply::Later(tokio::spawn(async move {
                // Let the requests that arrived with this one be appended first: then the
                // syncs below cover them too, and theirs find nothing left to do.
                caught_up.past(mark).await;
                make_durable(&store, &mut results).await;
                respond(
                    &request,
                    &response(request.version, results, log_append_time),
                )
            })))
        }
        // acks=1, and acks=all under the `never` flush policy: answered once appended.
        _ => Ok(Reply::Now(respond(
            request,
            &response(request.version, results, broker.log_append_time),
        )?)),
    }
}

/// acks=all: makes every partition the request appended to durable, in one call that issues
/// their syncs together (`Store::make_durable`, the log manager's `flush_many`); a partition
/// whose sync failed is answered KAFKA_STORAGE_ERROR, the others are answered as appended.
async fn make_durable(store: &Arc<crate::store::Store>, results: &mut [TopicResult]) {
    let mut waiting = Vec::new();
    for (t, topic) in results.iter().enumerate() {
        for (r, result) in topic.partitions.iter().enumerate() {
            if let Outcome::Appended {
                partition,
                appended,
                ..
            } = &result.outcome
            {
                let end = appended.last_offset() + 1;
                if !partition.is_durable_to(end) {
                    waiting.push(((t, r), (Arc::clone(partition), end)));
                }
            }
        }
    }
    if waiting.is_empty() {
        return;
    }
    let (places, targets): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
    let store = Arc::clone(store);
    let count = targets.len();
    let answers = match tokio::task::spawn_blocking(move || store.make_durable(&targets)).await {
        Ok(answers) => answers,
        Err(e) => vec![Err(store::FlushRefused(format!("flush task failed: {e}"))); count],
    };
    for ((t, r), answer) in places.into_iter().zip(answers) {
        if let Err(e) = answer {
            let result = &mut results[t].partitions[r];
            if let Outcome::Appended { partition, .. } = &result.outcome {
                tracing::error!(partition = ?partition, error = %e, "flush for acks=all failed");
            }
            result.outcome = Outcome::Failed {
                error: ResponseError::KafkaStorageError,
                message: Some(e.to_string()),
            };
        }
    }
}

/// Transaction version 2: adds the partitions of the request's transactional batches to the
/// transaction of `transactional_id`, one coordinator step per producer in the request
/// (normally one). Answers the partitions refused, with the error their batches get.
async fn add_to_transaction(
    broker: &Arc<Broker>,
    transactional_id: &str,
    topics: &[Result<Arc<Topic>, ResponseError>],
    topic_data: &[TopicProduceData],
) -> HashMap<(String, i32), ResponseError> {
    let mut by_producer: HashMap<(i64, i16), Vec<(String, i32)>> = HashMap::new();
    for (topic, data) in topics.iter().zip(topic_data) {
        let Ok(topic) = topic else { continue };
        for p in &data.partition_data {
            let Some(records) = &p.records else { continue };
            let Ok(batch) = oncelog::format::RecordBatch::parse(records) else {
                continue;
            };
            if batch.is_transactional() && topic.partition(p.index).is_some() {
                by_producer
                    .entry((batch.producer_id(), batch.producer_epoch()))
                    .or_default()
                    .push((topic.name.clone(), p.index));
            }
        }
    }
    let mut refused = HashMap::new();
    for (producer, partitions) in by_producer {
        let added = super::txn::add_partitions_implicitly(
            broker,
            transactional_id,
            producer,
            partitions.clone(),
        )
        .await;
        if let Err(error) = added {
            tracing::debug!(
                transactional_id,
                ?producer,
                code = error.code(),
                "transactional batch refused by the coordinator"
            );
            refused.extend(partitions.into_iter().map(|p| (p, error)));
        }
    }
    refused
}

enum PendingAppend {
    /// Appended on the reactor (no fsync inside the append).
    Done {
        partition: Arc<Partition>,
        producer: Option<BatchProducer>,
        result: Result<Appended, AppendRefused>,
    },
    /// Appending on a blocking thread (the append may fsync).
    Running {
        partition: Arc<Partition>,
        producer: Option<BatchProducer>,
        task: tokio::task::JoinHandle<Result<Appended, AppendRefused>>,
    },
    Failed(ResponseError),
}

/// Starts the append of one partition's batch: on a blocking thread when the append may
/// fsync (the `always` and `every:N` policies), so the reactor never waits for a disk;
/// otherwise right here, since handing a copy of a few kilobytes to another thread costs more
/// than the copy (and on a loaded machine, the context switches are what a broker spends its
/// CPU on).
fn start_append(
    topic: &Result<Arc<Topic>, ResponseError>,
    refuse_all: Option<ResponseError>,
    data: PartitionProduceData,
) -> (i32, PendingAppend) {
    let index = data.index;
    if let Some(error) = refuse_all {
        return (index, PendingAppend::Failed(error));
    }
    let topic = match topic {
        Ok(topic) => topic,
        Err(error) => return (index, PendingAppend::Failed(*error)),
    };
    let Some(partition) = topic.partition(index).cloned() else {
        return (
            index,
            PendingAppend::Failed(ResponseError::UnknownTopicOrPartition),
        );
    };
    let Some(records) = data.records else {
        return (index, PendingAppend::Failed(ResponseError::InvalidRecord));
    };
    let producer = store::batch_producer(&records);
    if !partition.append_may_sync() {
        let result = partition.append(&records);
        return (
            index,
            PendingAppend::Done {
                partition,
                producer,
                result,
            },
        );
    }
    let appender = Arc::clone(&partition);
    let task = tokio::task::spawn_blocking(move || appender.append(&records));
    (
        index,
        PendingAppend::Running {
            partition,
            producer,
            task,
        },
    )
}

fn resolve_topic(
    broker: &Broker,
    version: i16,
    data: &TopicProduceData,
) -> Result<Arc<Topic>, ResponseError> {
    if version >= 13 {
        broker
            .store
            .topic_by_id(data.topic_id)
            .ok_or(ResponseError::UnknownTopicId)
    } else {
        broker
            .store
            .topic(&data.name)
            .ok_or(ResponseError::UnknownTopicOrPartition)
    }
}

fn appended_outcome(
    partition: Arc<Partition>,
    producer: Option<BatchProducer>,
    result: Result<Appended, AppendRefused>,
) -> Outcome {
    match result {
        Ok(appended) => Outcome::Appended {
            partition,
            appended,
            producer,
        },
        Err(refused) => refused_outcome(&partition, &refused),
    }
}

fn refused_outcome(partition: &Partition, refused: &AppendRefused) -> Outcome {
    let error = errors::append_error(refused);
    tracing::debug!(partition = ?partition, kind = refused.kind, code = error.code(), error = %refused, "batch refused");
    Outcome::Failed {
        error,
        message: Some(refused.message.clone()),
    }
}

/// Counts the outcome and logs each duplicate: the retry, and the offsets it was answered with.
fn account(broker: &Broker, request: &Request, outcome: &Outcome, index: i32) {
    match outcome {
        Outcome::Appended {
            appended: Appended::Written { .. },
            ..
        } => Stats::add(&broker.stats.batches_appended),
        Outcome::Appended {
            partition,
            appended:
                Appended::Duplicate {
                    first_offset,
                    last_offset,
                },
            producer,
        } => {
            Stats::add(&broker.stats.duplicates);
            let producer = producer.unwrap_or_default();
            tracing::info!(
                topic = partition.topic(),
                partition = index,
                producer_id = producer.producer_id,
                producer_epoch = producer.epoch,
                base_sequence = producer.base_sequence,
                first_offset,
                last_offset,
                client_id = request.client_id.as_deref().unwrap_or(""),
                "duplicate batch answered with its original offsets"
            );
        }
        Outcome::Failed { .. } => Stats::add(&broker.stats.batches_refused),
    }
}

fn response(version: i16, results: Vec<TopicResult>, log_append_time: bool) -> ProduceResponse {
    let responses = results
        .into_iter()
        .map(|topic| {
            let partition_responses = topic
                .partitions
                .into_iter()
                .map(|p| partition_response(version, p, log_append_time))
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.request.name)
                .with_topic_id(topic.request.topic_id)
                .with_partition_responses(partition_responses)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

fn partition_response(
    version: i16,
    result: PartitionResult,
    log_append_time: bool,
) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(result.index);
    match result.outcome {
        Outcome::Appended {
            partition,
            appended,
            ..
        } => {
            let (base_offset, append_time) = match appended {
                Appended::Written {
                    first_offset,
                    append_time_ms,
                    ..
                } => (first_offset, append_time_ms),
                // As Kafka answers a duplicate: no error, the original base offset, and no
                // append time (it is not kept).
                Appended::Duplicate { first_offset, .. } => (first_offset, -1),
            };
            response
                .with_base_offset(base_offset)
                .with_log_append_time_ms(if log_append_time { append_time } else { -1 })
                .with_log_start_offset(partition.log_start_offset())
        }
        Outcome::Failed { error, message } => response
            .with_error_code(error.code())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
            // Error messages exist from v8.
            .with_error_message(message.filter(|_| version >= 8).map(StrBytes::from_string)),
    }
}
