//! The transactional APIs: InitProducerId with a `transactional.id`, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn, answered by [`crate::txn_coordinator`]. Each
//! coordinator step writes its log and fsyncs, and EndTxn writes a marker to every partition:
//! all of it runs off the reactor.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdResponse, ProducerId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::offsets_log::Committed;
use crate::txn_coordinator::write_ending;

/// Runs a blocking coordinator step off the reactor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ResponseError> + Send + 'static,
) -> Result<T, ResponseError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "transaction task failed");
        Err(ResponseError::UnknownServerError)
    })
}

pub async fn init_producer_id(
    broker: &Arc<Broker>,
    request: &Request,
    transactional_id: String,
    timeout_ms: i32,
) -> Result<Reply, HandleError> {
    let b = Arc::clone(broker);
    let granted = blocking(move || {
        let ids = Arc::clone(&b.producer_ids);
        let store = Arc::clone(&b.store);
        let allocate = move || {
            ids.init(None, |id| store.producer_epoch(id))
                .map(|g| g.producer_id)
                .map_err(|e| {
                    tracing::error!(error = %e, "cannot allocate a producer id");
                    ResponseError::KafkaStorageError
                })
        };
        let (granted, abort) = b.txns.init(&transactional_id, timeout_ms, allocate)?;
        if let Some(ending) = abort {
            // The open transaction of the fenced producer is aborted first.
            write_ending(&b.store, &b.offsets, &b.txns, &ending)?;
        }
        Ok(granted)
    })
    .await;
    let response = match granted {
        Ok((producer_id, epoch)) => {
            tracing::info!(producer_id, epoch, "transactional producer id granted");
            InitProducerIdResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch)
        }
        Err(e) => InitProducerIdResponse::default()
            .with_error_code(fenced_for(request, e).code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    Ok(Reply::Now(respond(request, &response)?))
}

/// PRODUCER_FENCED exists from the versions of KIP-588; older ones get INVALID_PRODUCER_EPOCH.
fn fenced_for(request: &Request, e: ResponseError) -> ResponseError {
    use kafka_protocol::messages::ApiKey;
    let new_enough = match request.api_key {
        ApiKey::InitProducerId => request.version >= 4,
        ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn | ApiKey::EndTxn => {
            request.version >= 2
        }
        ApiKey::TxnOffsetCommit => request.version >= 3,
        _ => true,
    };
    if e == ResponseError::ProducerFenced && !new_enough {
        ResponseError::InvalidProducerEpoch
    } else {
        e
    }
}

pub async fn add_partitions(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: AddPartitionsToTxnRequest = request.body()?;
    let id = body.v3_and_below_transactional_id.0.to_string();
    let (pid, epoch) = (
        body.v3_and_below_producer_id.0,
        body.v3_and_below_producer_epoch,
    );
    let mut wanted = Vec::new();
    let mut unknown = false;
    for t in &body.v3_and_below_topics {
        for p in &t.partitions {
            unknown |= broker.store.partition(&t.name, *p).is_none();
            wanted.push((t.name.0.to_string(), *p));
        }
    }
    let result = if unknown {
        // Nothing is added when one partition is unknown (Kafka answers the others
        // OPERATION_NOT_ATTEMPTED).
        Err(ResponseError::UnknownTopicOrPartition)
    } else {
        let b = Arc::clone(broker);
        let parts = wanted.clone();
        blocking(move || b.txns.add_partitions(&id, pid, epoch, &parts)).await
    };
    let topics = body
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|p| {
                    let error = match result {
                        Ok(()) => None,
                        Err(ResponseError::UnknownTopicOrPartition) => {
                            if broker.store.partition(&t.name, *p).is_none() {
                                Some(ResponseError::UnknownTopicOrPartition)
                            } else {
                                Some(ResponseError::OperationNotAttempted)
                            }
                        }
                        Err(e) => Some(fenced_for(request, e)),
                    };
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(crate::errors::code(error))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(results)
        })
        .collect();
    let response = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

pub async fn add_offsets(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: AddOffsetsToTxnRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let group = body.group_id.0.to_string();
    let (pid, epoch) = (body.producer_id.0, body.producer_epoch);
    let b = Arc::clone(broker);
    let result = blocking(move || b.txns.add_group(&id, pid, epoch, &group)).await;
    let response = AddOffsetsToTxnResponse::default().with_error_code(crate::errors::code(
        result.err().map(|e| fenced_for(request, e)),
    ));
    Ok(Reply::Now(respond(request, &response)?))
}

pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: TxnOffsetCommitRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let group = body.group_id.0.to_string();
    let (pid, epoch) = (body.producer_id.0, body.producer_epoch);
    // From v3 the member's generation is checked as for OffsetCommit (KIP-447).
    let group_error = (request.version >= 3)
        .then(|| {
            broker
                .groups
                .check_commit(&group, &body.member_id, body.generation_id)
        })
        .flatten();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut offsets = Vec::new();
    let mut unknown = Vec::new();
    for t in &body.topics {
        for p in &t.partitions {
            if broker.store.partition(&t.name, p.partition_index).is_none() {
                unknown.push((t.name.0.to_string(), p.partition_index));
                continue;
            }
            offsets.push((
                (group.clone(), t.name.0.to_string(), p.partition_index),
                Committed {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    commit_timestamp: now,
                },
            ));
        }
    }
    let result = match group_error {
        Some(e) => Err(e),
        None => {
            let b = Arc::clone(broker);
            blocking(move || b.txns.add_offsets(&id, pid, epoch, offsets)).await
        }
    };
    let topics = body
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = if unknown.contains(&(t.name.0.to_string(), p.partition_index)) {
                        Some(ResponseError::UnknownTopicOrPartition)
                    } else {
                        result.err().map(|e| fenced_for(request, e))
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(crate::errors::code(error))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let response = TxnOffsetCommitResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

pub async fn end_txn(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: EndTxnRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let (pid, epoch, commit) = (body.producer_id.0, body.producer_epoch, body.committed);
    let b = Arc::clone(broker);
    let result = blocking(move || {
        let ending = b.txns.end(&id, pid, epoch, commit)?;
        write_ending(&b.store, &b.offsets, &b.txns, &ending)
    })
    .await;
    let response = EndTxnResponse::default().with_error_code(crate::errors::code(
        result.err().map(|e| fenced_for(request, e)),
    ));
    Ok(Reply::Now(respond(request, &response)?))
}
