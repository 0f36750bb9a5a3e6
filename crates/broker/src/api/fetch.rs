//! Fetch: whole batches straight from the log's mapped segments, with Kafka's long poll.
//!
//! A fetch is answered at once if it has `min_bytes`, hits an error, or asks not to wait;
//! otherwise it waits until an append to one of its partitions brings enough, or until
//! `max_wait_ms`. Fetch sessions (KIP-227) are not kept: every answer says session 0, which
//! tells the client to send full fetch requests, as Kafka does when its session cache is full.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{HandleError, Reply};
use crate::broker::Broker;
use crate::codec::{self, EncodeError, Request, ResponseFrame};
use crate::errors;
use crate::store::{Partition, ReadRefused};
use crate::wait;

/// Kafka's isolation level READ_COMMITTED.
const READ_COMMITTED: i8 = 1;

pub fn handle(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: FetchRequest = request.body()?;
    let wanted = resolve(broker, request.version, &body.topics);
    let request = request.clone();
    Ok(Reply::Later(tokio::spawn(fetch(request, body, wanted))))
}

/// One partition asked for.
struct Wanted {
    partition: Result<Arc<Partition>, ResponseError>,
    index: i32,
    fetch_offset: i64,
    max_bytes: usize,
}

fn resolve(broker: &Broker, version: i16, topics: &[FetchTopic]) -> Vec<Vec<Wanted>> {
    topics
        .iter()
        .map(|t| {
            // Up to v12 topics are named; from v13 they are identified by id.
            let topic = if version >= 13 {
                broker
                    .store
                    .topic_by_id(t.topic_id)
                    .ok_or(ResponseError::UnknownTopicId)
            } else {
                broker
                    .store
                    .topic(&t.topic)
                    .ok_or(ResponseError::UnknownTopicOrPartition)
            };
            t.partitions
                .iter()
                .map(|p: &FetchPartition| Wanted {
                    partition: topic.clone().and_then(|topic| {
                        topic
                            .partition(p.partition)
                            .cloned()
                            .ok_or(ResponseError::UnknownTopicOrPartition)
                    }),
                    index: p.partition,
                    fetch_offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes.max(0) as usize,
                })
                .collect()
        })
        .collect()
}

/// Whether a partition asked for is read below its local log start, from the object store.
fn reads_remote(wanted: &[Vec<Wanted>]) -> bool {
    wanted.iter().flatten().any(|w| {
        w.partition
            .as_ref()
            .is_ok_and(|p| p.below_local(w.fetch_offset).is_some())
    })
}

/// A read in which every partition failed for `reason`.
fn failed_read(wanted: &[Vec<Wanted>], reason: &str) -> Read {
    Read {
        results: wanted
            .iter()
            .map(|t| {
                t.iter()
                    .map(|_| Err(ReadRefused::Storage(reason.to_string())))
                    .collect()
            })
            .collect(),
        bytes: 0,
        failed: true,
    }
}

async fn fetch(
    request: Request,
    body: FetchRequest,
    wanted: Vec<Vec<Wanted>>,
) -> Result<ResponseFrame, EncodeError> {
    let wanted = Arc::new(wanted);
    if let Some(refused) = refused_session(&request, &body) {
        return refused;
    }
    let deadline = Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
    let min_bytes = body.min_bytes.max(0) as usize;
    // The response-wide limit exists from v3; every version answered here has it.
    let max_bytes = body.max_bytes.max(0) as usize;
    loop {
        // Listen before reading: an append between the read and the wait still wakes us.
        let mut listeners: Vec<_> = wanted
            .iter()
            .flatten()
            .filter_map(|w| w.partition.as_ref().ok().map(|p| p.listen()))
            .collect();
        let read_committed = body.isolation_level == READ_COMMITTED;
        let read = if reads_remote(&wanted) {
            // A read below a tiered partition's local log start waits on the object store
            // (whose calls block their thread): off the reactor.
            let all = Arc::clone(&wanted);
            tokio::task::spawn_blocking(move || read_all(&all, max_bytes, read_committed))
                .await
                .unwrap_or_else(|e| failed_read(&wanted, &format!("the read task failed: {e}")))
        } else {
            read_all(&wanted, max_bytes, read_committed)
        };
        if read.bytes >= min_bytes || read.failed || Instant::now() >= deadline {
            return answer(&request, &body, &wanted, read);
        }
        wait::any_append(&mut listeners, deadline).await;
    }
}

/// The records read from one partition; under read_committed, with the last stable offset
/// and the aborted transactions (producer id, first offset) among them.
struct Piece {
    records: Bytes,
    committed: Option<(i64, Vec<(i64, i64)>)>,
}

impl Piece {
    fn empty() -> Piece {
        Piece {
            records: Bytes::new(),
            committed: None,
        }
    }
}

/// What one pass over the partitions read.
struct Read {
    /// Per topic, per partition: the records, or why none.
    results: Vec<Vec<Result<Piece, ReadRefused>>>,
    bytes: usize,
    failed: bool,
}

fn read_all(wanted: &[Vec<Wanted>], max_bytes: usize, read_committed: bool) -> Read {
    let mut left = max_bytes;
    let mut bytes = 0;
    let mut failed = false;
    let results = wanted
        .iter()
        .map(|topic| {
            topic
                .iter()
                .map(|w| {
                    let Ok(partition) = &w.partition else {
                        failed = true;
                        return Ok(Piece::empty());
                    };
                    let limit = w.max_bytes.min(left);
                    if limit == 0 && bytes > 0 {
                        return Ok(Piece::empty());
                    }
                    let read = if read_committed {
                        partition.read_committed(w.fetch_offset, limit.max(1)).map(
                            |(records, lso, aborted)| Piece {
                                records,
                                committed: Some((lso, aborted)),
                            },
                        )
                    } else {
                        partition
                            .read(w.fetch_offset, limit.max(1))
                            .map(|records| Piece {
                                records,
                                committed: None,
                            })
                    };
                    match read {
                        // The log returns at least one whole batch. Past the limit, that is
                        // allowed only for the first data of the response (KIP-74), so a
                        // batch larger than the limits can still be consumed.
                        Ok(piece) if piece.records.len() > limit && bytes > 0 => Ok(Piece::empty()),
                        Ok(piece) => {
                            bytes += piece.records.len();
                            left = left.saturating_sub(piece.records.len());
                            Ok(piece)
                        }
                        Err(e) => {
                            failed = true;
                            Err(e)
                        }
                    }
                })
                .collect()
        })
        .collect();
    Read {
        results,
        bytes,
        failed,
    }
}

/// The answer to a fetch that names an incremental session (KIP-227): none is kept, so every
/// such session is one this broker never created, FETCH_SESSION_ID_NOT_FOUND, and the client
/// falls back to full fetches. `None` for a full fetch.
pub fn refused_session(
    request: &Request,
    body: &FetchRequest,
) -> Option<Result<ResponseFrame, EncodeError>> {
    (body.session_id != 0 && body.session_epoch > 0).then(|| {
        let response =
            FetchResponse::default().with_error_code(ResponseError::FetchSessionIdNotFound.code());
        codec::encode(request.correlation_id, request.version, &response, &[])
    })
}

fn answer(
    request: &Request,
    body: &FetchRequest,
    wanted: &[Vec<Wanted>],
    read: Read,
) -> Result<ResponseFrame, EncodeError> {
    let (responses, pass_through) =
        answer_topics(&body.topics, wanted, read.results, partition_data);
    let response = FetchResponse::default().with_responses(responses);
    codec::encode(
        request.correlation_id,
        request.version,
        &response,
        &pass_through,
    )
}

/// Fetch's answer to every topic asked for, in the request's order, and the records it hands
/// out (passed through without a copy): `partition` answers one partition from its line of
/// `wanted` and what was read of it. The single broker's and a cluster node's Fetch share it;
/// they differ only in where a partition is read.
pub fn answer_topics<W, R>(
    topics: &[FetchTopic],
    wanted: &[Vec<W>],
    read: Vec<Vec<R>>,
    mut partition: impl FnMut(&W, R) -> PartitionData,
) -> (Vec<FetchableTopicResponse>, Vec<Bytes>) {
    let mut pass_through = Vec::new();
    let responses = topics
        .iter()
        .zip(wanted)
        .zip(read)
        .map(|((topic, wanted), results)| {
            let partitions = wanted
                .iter()
                .zip(results)
                .map(|(w, result)| {
                    let data = partition(w, result);
                    if let Some(records) = &data.records {
                        pass_through.push(records.clone());
                    }
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    (responses, pass_through)
}

/// A read_committed answer's aborted transactions, from (producer id, first offset) pairs.
pub fn aborted_transactions(
    aborted: impl IntoIterator<Item = (i64, i64)>,
) -> Vec<AbortedTransaction> {
    aborted
        .into_iter()
        .map(|(producer_id, first_offset)| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(producer_id))
                .with_first_offset(first_offset)
        })
        .collect()
}

fn partition_data(wanted: &Wanted, result: Result<Piece, ReadRefused>) -> PartitionData {
    let data = PartitionData::default().with_partition_index(wanted.index);
    let partition = match &wanted.partition {
        Ok(partition) => partition,
        Err(error) => {
            return data
                .with_error_code(error.code())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_records(Some(Bytes::new()))
        }
    };
    // Read after the records: the high watermark covers everything handed out.
    let end = partition.log_end_offset();
    let data = data
        .with_high_watermark(end)
        .with_log_start_offset(partition.log_start_offset());
    match result {
        Ok(Piece {
            records,
            committed: Some((lso, aborted)),
        }) => data
            .with_last_stable_offset(lso)
            .with_aborted_transactions(Some(aborted_transactions(aborted)))
            .with_records(Some(records)),
        Ok(Piece {
            records,
            committed: None,
        }) => data
            .with_last_stable_offset(partition.last_stable_offset())
            .with_records(Some(records)),
        Err(refused) => {
            // An offline partition was logged once, when it was taken offline.
            if !matches!(
                refused,
                ReadRefused::OutOfRange { .. } | ReadRefused::Offline(_)
            ) {
                tracing::warn!(partition = ?partition, error = %refused, "fetch failed");
            }
            data.with_error_code(errors::read_error(&refused).code())
                .with_last_stable_offset(end)
                .with_records(Some(Bytes::new()))
        }
    }
}
