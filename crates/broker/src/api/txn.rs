//! The transactional APIs: InitProducerId with a `transactional.id`, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn, answered by [`crate::txn_coordinator`]. Each
//! coordinator step writes its log and fsyncs, and EndTxn writes a marker to every partition:
//! all of it runs off the reactor.
//!
//! Transaction version 2 (KIP-890 part 2) is chosen by the request's version, as Kafka
//! chooses it: EndTxn v5 bumps the epoch and answers the producer id and epoch to use next,
//! TxnOffsetCommit v5 adds its group to the transaction itself (no AddOffsetsToTxn), and the
//! Produce handler adds partitions for Produce v12+ ([`add_partitions_implicitly`]).
//! AddPartitionsToTxn v4 is the batched form Kafka's brokers send each other, with its
//! `verify_only` check.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
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
use crate::txn_coordinator::{write_ending_of, EPOCH_BUMPING_VERSION};

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
        let allocate = allocator(&b);
        let (granted, abort) = b.txns.init(&transactional_id, timeout_ms, allocate)?;
        if let Some(ending) = abort {
            // The open transaction of the fenced producer is aborted first.
            write_ending_of(&b, &ending)?;
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

/// Hands out a fresh producer id (for an id's first InitProducerId, and for a producer whose
/// epoch is exhausted): on a cluster node one unique across the cluster (`n * 1024 + node
/// id`, `n` from the node's incarnation: docs/design.md, "A wiped node rejoins under its id"),
/// which the replicated state then carries to every later coordinator. Blocking.
fn allocator(broker: &Broker) -> impl FnOnce() -> Result<i64, ResponseError> {
    let ids = Arc::clone(&broker.producer_ids);
    let store = Arc::clone(&broker.store);
    let cluster = broker.cluster.clone();
    let storage = |e: crate::producer_ids::ProducerIdError| {
        tracing::error!(error = %e, "cannot allocate a producer id");
        ResponseError::KafkaStorageError
    };
    move || {
        let Some(cluster) = cluster else {
            return ids
                .init(None, |id| store.producer_epoch(id))
                .map(|g| g.producer_id)
                .map_err(storage);
        };
        let range = cluster.producer_id_range().map_err(|e| match e {
            crate::cluster::ProducerIdsUnavailable::NotYet => {
                ResponseError::CoordinatorLoadInProgress
            }
            crate::cluster::ProducerIdsUnavailable::Exhausted(term) => {
                tracing::error!(term, "producer ids: no room for this node's incarnation");
                ResponseError::KafkaStorageError
            }
        })?;
        let granted = ids.allocate_in(range).map_err(storage)?.producer_id;
        granted
            .checked_mul(i64::from(crate::cluster::MAX_NODE_ID) + 1)
            .and_then(|id| id.checked_add(i64::from(cluster.me())))
            .ok_or(ResponseError::KafkaStorageError)
    }
}

/// Whether partition `index` of `topic` exists: in the store, or a cluster's image.
fn partition_known(broker: &Broker, topic: &str, index: i32) -> bool {
    match &broker.cluster {
        Some(cluster) => cluster.partition_exists(topic, index),
        None => broker.store.partition(topic, index).is_some(),
    }
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
    if request.version >= 4 {
        return add_partitions_batched(broker, request).await;
    }
    let body: AddPartitionsToTxnRequest = request.body()?;
    let id = body.v3_and_below_transactional_id.0.to_string();
    let (pid, epoch) = (
        body.v3_and_below_producer_id.0,
        body.v3_and_below_producer_epoch,
    );
    let wanted = wanted_partitions(&body.v3_and_below_topics);
    // Nothing is added when one partition is unknown.
    let errors = match refused_unknown(broker, &wanted) {
        Some(errors) => errors,
        None => {
            let b = Arc::clone(broker);
            let parts = wanted.clone();
            let added =
                blocking(move || b.txns.add_partitions(&id, pid, epoch, &parts, false)).await;
            vec![added.err().map(|e| fenced_for(request, e)); wanted.len()]
        }
    };
    let topics = topic_results(&body.v3_and_below_topics, &errors);
    let response = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// AddPartitionsToTxn v4: several transactions at once, each added or (`verify_only`) checked,
/// answered per transaction as Kafka's `handleAddPartitionsToTxnRequest` does: an unknown
/// partition refuses the whole transaction (the others OPERATION_NOT_ATTEMPTED); a verified
/// partition the transaction does not hold is TRANSACTION_ABORTABLE.
async fn add_partitions_batched(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: AddPartitionsToTxnRequest = request.body()?;
    let mut results = Vec::with_capacity(body.transactions.len());
    for txn in body.transactions {
        let id = txn.transactional_id.0.to_string();
        let (pid, epoch) = (txn.producer_id.0, txn.producer_epoch);
        let wanted = wanted_partitions(&txn.topics);
        let refused = refused_unknown(broker, &wanted);
        let errors: Vec<Option<ResponseError>> = if let Some(errors) = refused {
            errors
        } else if id.is_empty() {
            vec![Some(ResponseError::InvalidRequest); wanted.len()]
        } else if txn.verify_only {
            // Off the reactor: the coordinator's lock is held across a state write (an
            // fsync, or a cluster's raft commit).
            let b = Arc::clone(broker);
            let parts = wanted.clone();
            match blocking(move || b.txns.verify_partitions(&id, pid, epoch, &parts)).await {
                Ok(held) => held
                    .into_iter()
                    .map(|h| (!h).then_some(ResponseError::TransactionAbortable))
                    .collect(),
                Err(e) => vec![Some(e); wanted.len()],
            }
        } else {
            let b = Arc::clone(broker);
            let parts = wanted.clone();
            let added =
                blocking(move || b.txns.add_partitions(&id, pid, epoch, &parts, false)).await;
            vec![added.err(); wanted.len()]
        };
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id)
                .with_topic_results(topic_results(&txn.topics, &errors)),
        );
    }
    let response = AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    Ok(Reply::Now(respond(request, &response)?))
}

/// The (topic, partition) of every partition of `topics`, in request order.
fn wanted_partitions(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect()
}

/// When one of `wanted` is unknown, the whole request is refused as Kafka refuses it: the
/// unknown partitions UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED (both
/// AddPartitionsToTxn forms). `None` when every partition is known.
fn refused_unknown(
    broker: &Broker,
    wanted: &[(String, i32)],
) -> Option<Vec<Option<ResponseError>>> {
    let known: Vec<bool> = wanted
        .iter()
        .map(|(t, p)| partition_known(broker, t, *p))
        .collect();
    if !known.contains(&false) {
        return None;
    }
    let errors = known.iter().map(|&k| {
        Some(if k {
            ResponseError::OperationNotAttempted
        } else {
            ResponseError::UnknownTopicOrPartition
        })
    });
    Some(errors.collect())
}

/// The per-partition answer of `topics`, `errors` in the same order as their partitions.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    errors: &[Option<ResponseError>],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut errors = errors.iter();
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(crate::errors::code(
                            errors.next().copied().flatten(),
                        ))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(results)
        })
        .collect()
}

/// KIP-890 part 2: the first transactional Produce (v12+) to a partition adds it to the
/// transaction, as Kafka's broker does through `AddPartitionsToTxnManager` (here the
/// coordinator is local). Answers the error for the batches when it cannot be added: a stale
/// epoch (a zombie of an ended transaction) is INVALID_PRODUCER_EPOCH, as Kafka's manager
/// turns the coordinator's PRODUCER_FENCED into for the producer.
pub async fn add_partitions_implicitly(
    broker: &Arc<Broker>,
    transactional_id: &str,
    (producer_id, epoch): (i64, i16),
    partitions: Vec<(String, i32)>,
) -> Result<(), ResponseError> {
    if broker
        .txns
        .holds(transactional_id, producer_id, epoch, &partitions)
    {
        return Ok(());
    }
    let b = Arc::clone(broker);
    let id = transactional_id.to_string();
    blocking(move || {
        b.txns
            .add_partitions(&id, producer_id, epoch, &partitions, true)
    })
    .await
    .map_err(implicit_error)
}

/// The coordinator's refusal of an implicit add, as the producer is told it.
fn implicit_error(e: ResponseError) -> ResponseError {
    match e {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        e => e,
    }
}

pub async fn add_offsets(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: AddOffsetsToTxnRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let group = body.group_id.0.to_string();
    let (pid, epoch) = (body.producer_id.0, body.producer_epoch);
    let b = Arc::clone(broker);
    let result = blocking(move || b.txns.add_group(&id, pid, epoch, &group, false)).await;
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
    let now = crate::clock::now_ms();
    let mut offsets = Vec::new();
    let mut unknown = Vec::new();
    for t in &body.topics {
        for p in &t.partitions {
            if !partition_known(broker, &t.name, p.partition_index) {
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
            // v5 (transaction version 2) adds the group itself, instead of AddOffsetsToTxn.
            let implicit = request.version >= 5;
            blocking(move || {
                if implicit {
                    b.txns
                        .add_group(&id, pid, epoch, &group, true)
                        .map_err(implicit_error)?;
                }
                b.txns.add_offsets(&id, pid, epoch, offsets)
            })
            .await
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
                        result.err().map(|e| match e {
                            // A group never added: from v4 Kafka answers TRANSACTION_ABORTABLE
                            // (KIP-890 part 1's verification).
                            ResponseError::InvalidTxnState if request.version >= 4 => {
                                ResponseError::TransactionAbortable
                            }
                            e => fenced_for(request, e),
                        })
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
    // EndTxn v5 is transaction version 2: the epoch is bumped at every end.
    let version = if request.version >= 5 {
        EPOCH_BUMPING_VERSION
    } else {
        1
    };
    let b = Arc::clone(broker);
    let result = blocking(move || {
        let ended = b
            .txns
            .end(&id, pid, epoch, commit, version, allocator(&b))?;
        if let Some(ending) = &ended.ending {
            write_ending_of(&b, ending)?;
        }
        Ok((ended.producer_id, ended.epoch))
    })
    .await;
    let response = match result {
        Ok((producer_id, epoch)) if request.version >= 5 => EndTxnResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Ok(_) => EndTxnResponse::default(),
        Err(e) => EndTxnResponse::default().with_error_code(fenced_for(request, e).code()),
    };
    Ok(Reply::Now(respond(request, &response)?))
}
