//! The transaction tooling of KIP-664 (`kafka-transactions`), each answered from the engine's
//! exact producer state or the broker's transaction coordinator:
//!
//! - DescribeProducers: per partition, every producer in the log's producer-state table
//!   (`Log::producers`): epoch, last sequence, last timestamp, coordinator epoch, and the first
//!   offset of its open transaction, which is what holds the last stable offset back.
//! - ListTransactions and DescribeTransactions: the coordinator's state per transactional id
//!   ([`crate::txn_coordinator::Txns::views`]).
//! - WriteTxnMarkers: a COMMIT or ABORT marker appended through the engine
//!   (`Log::append_marker`, made durable), which ends the producer's open transaction and moves
//!   the last stable offset. `kafka-transactions abort` sends it for a hanging transaction: one
//!   open in a partition with no coordinator state to ever end it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedTransaction,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TopicName, TransactionalId, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::ResponseError;
use oncelog::TxnMarker;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::codec::Request;
use crate::errors::{append_error, code};
use crate::store::{validate_topic_name, RESERVED_TOPICS};
use crate::txn_coordinator::TxnView;

/// Every state name Kafka's coordinator knows (`TransactionState.fromName`). A ListTransactions
/// state filter outside this list is answered in `unknown_state_filters`; one inside it that
/// this coordinator never holds (Dead, PrepareEpochFence) is known and matches nothing.
const KAFKA_STATES: &[&str] = &[
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// Kafka's `ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION).message`, which DescribeProducers
/// sends with a topic it does not know.
const UNKNOWN_TOPIC_MESSAGE: &str = "This server does not host this topic-partition.";

/// Decodes the request, answers it with `answer` on a blocking thread, and encodes the answer.
/// Off the reactor because the locks these answers read under can be held across an fsync:
/// a log's append lock (an append under the `always` flush policy) and the coordinator's
/// (every state change is fsynced before it is released).
async fn off_reactor<Req, Resp>(
    broker: &Arc<Broker>,
    request: &Request,
    answer: fn(&Broker, Req) -> Resp,
) -> Result<Reply, HandleError>
where
    Req: Decodable + Send + 'static,
    Resp: Encodable + HeaderVersion + Default + Send + 'static,
{
    let b = Arc::clone(broker);
    answered_off_reactor(request, move |body| answer(&b, body)).await
}

/// Decodes the request, answers it with `answer` on a blocking thread (see [`off_reactor`]),
/// and encodes the answer: the single broker's and a cluster node's transaction admin APIs.
pub async fn answered_off_reactor<Req, Resp>(
    request: &Request,
    answer: impl FnOnce(Req) -> Resp + Send + 'static,
) -> Result<Reply, HandleError>
where
    Req: Decodable + Send + 'static,
    Resp: Encodable + HeaderVersion + Default + Send + 'static,
{
    let body: Req = request.body()?;
    let response = tokio::task::spawn_blocking(move || answer(body))
        .await
        .unwrap_or_else(|e| {
            tracing::error!(api = ?request.api_key, error = %e, "transaction admin task failed");
            Resp::default()
        });
    Ok(Reply::Now(respond(request, &response)?))
}

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Why a whole topic of a DescribeProducers request is refused, as Kafka's
/// `KafkaApis.handleDescribeProducersRequest` checks it: a name Kafka's `Topic.validate`
/// refuses (INVALID_TOPIC_EXCEPTION), then a topic it does not have (`exists`: this broker's
/// store, or a cluster's image, has it). The broker's own internal
/// topics are valid names it does not serve as partitions.
fn topic_refusal(name: &str, exists: bool) -> Option<(ResponseError, String)> {
    if !RESERVED_TOPICS.contains(&name) {
        if let Err(e) = validate_topic_name(name) {
            return Some((ResponseError::InvalidTopicException, e.to_string()));
        }
    }
    if !exists {
        return Some((
            ResponseError::UnknownTopicOrPartition,
            UNKNOWN_TOPIC_MESSAGE.to_string(),
        ));
    }
    None
}

/// One producer-state entry as DescribeProducers shows it (Kafka's `UnifiedLog.activeProducers`).
fn producer_state(entry: &oncelog::producer::ProducerEntry) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(entry.producer_id()))
        .with_producer_epoch(i32::from(entry.epoch()))
        .with_last_sequence(entry.last_seq())
        .with_last_timestamp(entry.last_timestamp())
        .with_coordinator_epoch(entry.coordinator_epoch())
        .with_current_txn_start_offset(entry.current_txn_first_offset().unwrap_or(-1))
}

/// DescribeProducers (KIP-664): for each partition asked about, every producer its log's
/// producer-state table holds. A topic refused as a whole answers each of its partitions with
/// the error and a message; a partition the topic does not have answers
/// UNKNOWN_TOPIC_OR_PARTITION, an offline one KAFKA_STORAGE_ERROR (Kafka's answers for a
/// partition it does not host and one in a failed log dir).
pub async fn describe_producers(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    off_reactor(broker, request, answer_describe_producers).await
}

fn answer_describe_producers(
    broker: &Broker,
    body: DescribeProducersRequest,
) -> DescribeProducersResponse {
    producers_answer(
        body,
        |name| broker.store.topic(name).is_some(),
        |name, index| match broker.store.partition(name, index) {
            None => Err(ResponseError::UnknownTopicOrPartition),
            Some(p) if p.offline().is_some() => Err(ResponseError::KafkaStorageError),
            Some(p) => Ok(p.producers()),
        },
    )
}

/// DescribeProducers' answer: each topic refused as a whole where [`topic_refusal`] says
/// (`exists` tells whether the topic is known), else each partition's producers as
/// `producers` finds them (its log's producer-state table), or the error it answers.
/// Blocking (the log's append lock).
pub fn producers_answer(
    body: DescribeProducersRequest,
    exists: impl Fn(&str) -> bool,
    producers: impl Fn(&str, i32) -> Result<Vec<oncelog::producer::ProducerEntry>, ResponseError>,
) -> DescribeProducersResponse {
    let topics = body
        .topics
        .into_iter()
        .map(|t| {
            let refused = topic_refusal(&t.name, exists(&t.name));
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let answer = PartitionResponse::default().with_partition_index(index);
                    if let Some((error, message)) = &refused {
                        return answer
                            .with_error_code(error.code())
                            .with_error_message(Some(text(message.clone())));
                    }
                    match producers(&t.name, index) {
                        Err(error) => answer.with_error_code(code(Some(error))),
                        Ok(entries) => answer
                            .with_active_producers(entries.iter().map(producer_state).collect()),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

/// Whether `view` passes ListTransactions' filters, as Kafka's
/// `TransactionStateManager.listTransactionStates`: producer ids, state names, and (v1) the
/// duration filter, which leaves out transactions started `duration_ms` or less ago (a
/// transaction with no start, -1, has run "forever", as in Kafka).
fn listed(
    view: &TxnView,
    producer_ids: &BTreeSet<i64>,
    states: &BTreeSet<String>,
    duration_ms: i64,
    now_ms: i64,
) -> bool {
    (producer_ids.is_empty() || producer_ids.contains(&view.producer_id))
        && (states.is_empty() || states.contains(view.state.kafka_name()))
        && (duration_ms < 0 || now_ms.saturating_sub(view.start_ms) > duration_ms)
}

/// ListTransactions: every transactional id the coordinator holds that passes the filters,
/// with its producer id and state; state filters Kafka does not know are echoed back in
/// `unknown_state_filters`.
pub async fn list_transactions(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    off_reactor(broker, request, answer_list_transactions).await
}

fn answer_list_transactions(
    broker: &Broker,
    body: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let now = now_ms();
    transactions_listed(body, &broker.txns.views(now), now)
}

/// ListTransactions' answer over the coordinator's `views` at `now` (none on a cluster node
/// that does not coordinate: Kafka lists only the transactions a broker coordinates).
pub fn transactions_listed(
    body: ListTransactionsRequest,
    views: &[TxnView],
    now: i64,
) -> ListTransactionsResponse {
    let producer_ids: BTreeSet<i64> = body.producer_id_filters.iter().map(|p| p.0).collect();
    let states: BTreeSet<String> = body.state_filters.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<StrBytes> = body
        .state_filters
        .iter()
        .filter(|s| !KAFKA_STATES.contains(&s.as_str()))
        .cloned()
        .collect();
    let transaction_states = views
        .iter()
        .filter(|v| listed(v, &producer_ids, &states, body.duration_filter, now))
        .map(|v| {
            ListedTransaction::default()
                .with_transactional_id(TransactionalId(text(v.transactional_id.clone())))
                .with_producer_id(ProducerId(v.producer_id))
                .with_transaction_state(text(v.state.kafka_name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(transaction_states)
}

/// DescribeTransactions: per transactional id, the coordinator's state (Kafka's
/// `TransactionCoordinator.handleDescribeTransactions`): producer id and epoch, state, timeout,
/// start time (-1 when no transaction is open) and the partitions of the open transaction,
/// grouped by topic; an empty id is INVALID_REQUEST, one never seen TRANSACTIONAL_ID_NOT_FOUND.
pub async fn describe_transactions(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    off_reactor(broker, request, answer_describe_transactions).await
}

fn answer_describe_transactions(
    broker: &Broker,
    body: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let now = now_ms();
    transactions_described(body, |id| {
        broker
            .txns
            .view(id, now)
            .ok_or(ResponseError::TransactionalIdNotFound)
    })
}

/// DescribeTransactions' answer, each transactional id's state as `view` finds it, or the
/// error it answers (TRANSACTIONAL_ID_NOT_FOUND on the coordinator, a coordinator error on a
/// cluster node that does not coordinate); an empty id is INVALID_REQUEST first, as in Kafka.
pub fn transactions_described(
    body: DescribeTransactionsRequest,
    view: impl Fn(&str) -> Result<TxnView, ResponseError>,
) -> DescribeTransactionsResponse {
    let transaction_states = body
        .transactional_ids
        .into_iter()
        .map(|id| {
            let answer = DescribedTransaction::default().with_transactional_id(id.clone());
            if id.is_empty() {
                return answer.with_error_code(code(Some(ResponseError::InvalidRequest)));
            }
            let view = match view(&id) {
                Ok(view) => view,
                Err(error) => return answer.with_error_code(code(Some(error))),
            };
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, index) in &view.partitions {
                by_topic.entry(topic).or_default().push(*index);
            }
            let topics = by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicData::default()
                        .with_topic(TopicName(text(topic)))
                        .with_partitions(partitions)
                })
                .collect();
            answer
                .with_producer_id(ProducerId(view.producer_id))
                .with_producer_epoch(view.epoch)
                .with_transaction_state(text(view.state.kafka_name()))
                .with_transaction_timeout_ms(view.timeout_ms)
                .with_transaction_start_time_ms(view.start_ms)
                .with_topics(topics)
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(transaction_states)
}

/// WriteTxnMarkers, as Kafka's `KafkaApis.handleWriteTxnMarkersRequest`: each marker is
/// appended to each of its partitions through the engine (`Log::append_marker`, then made
/// durable), which checks it exactly as Kafka's producer state does (an epoch older than the
/// producer's: INVALID_PRODUCER_EPOCH; a coordinator epoch older than its last marker's:
/// TRANSACTION_COORDINATOR_FENCED). A partition this broker does not have, or has offline, is
/// UNKNOWN_TOPIC_OR_PARTITION. The results are grouped by producer id, in request order.
pub async fn write_txn_markers(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    off_reactor(broker, request, write_markers).await
}

/// One producer's results: per topic, in the order first seen, its partitions' results.
type ProducerResults = (i64, Vec<(TopicName, Vec<WritableTxnMarkerPartitionResult>)>);

/// The blocking body of [`write_txn_markers`].
fn write_markers(broker: &Broker, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    write_markers_with(body, |topic, index, marker| {
        match broker.store.partition(topic, index) {
            // Kafka's `getMagic` finds no online log for an offline partition either:
            // UNKNOWN_TOPIC_OR_PARTITION, not a storage error.
            None => Err(ResponseError::UnknownTopicOrPartition),
            Some(p) if p.offline().is_some() => Err(ResponseError::UnknownTopicOrPartition),
            Some(p) => p.append_marker(marker).map_err(|e| {
                tracing::info!(
                    partition = ?p, producer_id = marker.producer_id, error = %e.message,
                    "transaction marker refused"
                );
                append_error(&e)
            }),
        }
    })
}

/// WriteTxnMarkers' answer, each marker written by `write` (topic, partition, marker: its
/// offset, or why not): the single broker's partitions, or a cluster node's raft leaders.
/// Blocking.
pub fn write_markers_with(
    body: WriteTxnMarkersRequest,
    write: impl Fn(&str, i32, &TxnMarker) -> Result<i64, ResponseError>,
) -> WriteTxnMarkersResponse {
    // Per producer id, in the order first seen.
    let mut results: Vec<ProducerResults> = Vec::new();
    for m in body.markers {
        let producer_id = m.producer_id.0;
        let marker = if m.transaction_result {
            TxnMarker::commit(producer_id, m.producer_epoch, m.coordinator_epoch)
        } else {
            TxnMarker::abort(producer_id, m.producer_epoch, m.coordinator_epoch)
        };
        let topics = match results.iter().position(|(id, _)| *id == producer_id) {
            Some(i) => &mut results[i].1,
            None => {
                results.push((producer_id, Vec::new()));
                &mut results.last_mut().expect("pushed").1
            }
        };
        for t in m.topics {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let written = write(&t.name, index, &marker);
                    if let Ok(at) = written {
                        tracing::info!(
                            topic = %t.name.0, partition = index, producer_id,
                            epoch = m.producer_epoch, result = ?marker.result, at,
                            "transaction marker written by WriteTxnMarkers"
                        );
                    }
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code(written.err()))
                })
                .collect::<Vec<_>>();
            match topics.iter_mut().find(|(name, _)| *name == t.name) {
                Some((_, existing)) => existing.extend(partitions),
                None => topics.push((t.name, partitions)),
            }
        }
    }
    let markers = results
        .into_iter()
        .map(|(producer_id, topics)| {
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(producer_id))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            WritableTxnMarkerTopicResult::default()
                                .with_name(name)
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}
