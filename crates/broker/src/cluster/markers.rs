//! Transaction markers in a cluster (docs/design.md, "The transaction coordinator in a
//! cluster"): the coordinator writes each COMMIT or ABORT marker through the raft leader of
//! its partition, its own replica when it leads the partition, otherwise with Kafka's
//! WriteTxnMarkers to the leader's Kafka listener, as Kafka's coordinator sends them, and
//! retries until the marker is committed: a transaction is complete only once every marker
//! is.

use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, RequestHeader, ResponseHeader, TopicName, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::ResponseError;
use oncelog::{TxnMarker, TxnResult};
use oncelog_raft::ReplicaError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Cluster, Route};
use crate::errors;

/// How long one attempt (a raft commit, or a WriteTxnMarkers round trip) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause between attempts while a partition has no leader or its leader moves.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// The WriteTxnMarkers version sent (the one the broker answers).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// The largest response read back.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// What one attempt found.
enum Attempt {
    Written,
    /// Worth another attempt: no leader known, a leader that moved, an outcome not known.
    Again(String),
    /// Refused for good (a stale producer or coordinator epoch).
    Refused(ResponseError),
}

/// Writes `marker` to partition `index` of `topic`, through its raft leader, retrying while
/// the partition's leadership moves, for as long as `still_coordinating` holds (a deposed
/// coordinator stops: its successor completes the transaction from the replicated state). A
/// partition no longer in the image (its topic deleted) has nothing to end. Blocking: called
/// off the reactor, inside the runtime.
pub fn write(
    cluster: &Cluster,
    (topic, index): &(String, i32),
    marker: &TxnMarker,
    still_coordinating: impl Fn() -> bool,
) -> Result<(), ResponseError> {
    let runtime = tokio::runtime::Handle::current();
    let mut tries = 0u64;
    loop {
        let attempt = match cluster.route(topic, *index) {
            Route::Unknown => return Ok(()),
            Route::Leader(replica) => {
                let appended = runtime.block_on(tokio::time::timeout(
                    ATTEMPT_TIMEOUT,
                    replica.append_marker(marker),
                ));
                match appended {
                    Ok(Ok(_)) => Attempt::Written,
                    Ok(Err(ReplicaError::Refused { kind, message })) => {
                        tracing::warn!(topic, partition = index, %message, "marker refused");
                        Attempt::Refused(errors::append_error_kind(&kind))
                    }
                    Ok(Err(e)) => Attempt::Again(e.to_string()),
                    Err(_) => Attempt::Again("the raft commit timed out".into()),
                }
            }
            Route::Elsewhere(view) => match view.leader.and_then(|l| {
                cluster
                    .nodes
                    .nodes
                    .get(&l)
                    .map(|a| (a.host.clone(), a.kafka_port))
            }) {
                None => Attempt::Again("no leader known".into()),
                Some((host, port)) => {
                    let sent = runtime.block_on(tokio::time::timeout(
                        ATTEMPT_TIMEOUT,
                        send(&host, port, topic, *index, marker),
                    ));
                    match sent {
                        Ok(Ok(None)) => Attempt::Written,
                        Ok(Ok(Some(e))) if retriable(e) => Attempt::Again(format!("{e:?}")),
                        Ok(Ok(Some(e))) => Attempt::Refused(e),
                        Ok(Err(e)) => Attempt::Again(e.to_string()),
                        Err(_) => Attempt::Again("WriteTxnMarkers timed out".into()),
                    }
                }
            },
        };
        match attempt {
            Attempt::Written => return Ok(()),
            // A coordinator of a later term wrote this producer's marker there: this one was
            // deposed while it retried, and its successor completes the transaction. The
            // client is sent to it (seen when a kill moved the coordinator mid-EndTxn).
            Attempt::Refused(ResponseError::TransactionCoordinatorFenced) => {
                return Err(ResponseError::NotCoordinator)
            }
            Attempt::Refused(e) => return Err(e),
            Attempt::Again(why) => {
                if !still_coordinating() {
                    return Err(ResponseError::NotCoordinator);
                }
                tries += 1;
                if tries % 50 == 1 {
                    tracing::info!(topic, partition = index, tries, %why, "marker not written yet; retrying");
                }
                std::thread::sleep(RETRY_EVERY);
            }
        }
    }
}

/// The answers of WriteTxnMarkers that another attempt may turn (Kafka's coordinator retries
/// them too): the leader moved or is not known yet, or the write's outcome is not known.
fn retriable(e: ResponseError) -> bool {
    matches!(
        e,
        ResponseError::NotLeaderOrFollower
            | ResponseError::LeaderNotAvailable
            | ResponseError::UnknownTopicOrPartition
            | ResponseError::RequestTimedOut
            | ResponseError::NotEnoughReplicas
            | ResponseError::NotEnoughReplicasAfterAppend
            | ResponseError::KafkaStorageError
            | ResponseError::UnknownServerError
    )
}

/// Sends one WriteTxnMarkers for one partition to the Kafka listener at `host:port`; answers
/// the partition's error, if any.
async fn send(
    host: &str,
    port: u16,
    topic: &str,
    index: i32,
    marker: &TxnMarker,
) -> std::io::Result<Option<ResponseError>> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let body = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(marker.producer_id))
        .with_producer_epoch(marker.producer_epoch)
        .with_transaction_result(marker.result == TxnResult::Commit)
        .with_coordinator_epoch(marker.coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_indexes(vec![index])])]);
    let version = WRITE_TXN_MARKERS_VERSION;
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::WriteTxnMarkers as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("oncelog-txn-coordinator")))
        .encode(
            &mut frame,
            ApiKey::WriteTxnMarkers.request_header_version(version),
        )
        .map_err(|e| invalid(e.to_string()))?;
    body.encode(&mut frame, version)
        .map_err(|e| invalid(e.to_string()))?;
    let mut stream = TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    stream
        .write_all(&(frame.len() as i32).to_be_bytes())
        .await?;
    stream.write_all(&frame).await?;
    let size = stream.read_i32().await?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s <= MAX_RESPONSE_BYTES)
        .ok_or_else(|| invalid(format!("a response of {size} bytes")))?;
    let mut buf = vec![0; size];
    stream.read_exact(&mut buf).await?;
    let mut bytes = bytes::Bytes::from(buf);
    ResponseHeader::decode(&mut bytes, WriteTxnMarkersResponse::header_version(version))
        .map_err(|e| invalid(e.to_string()))?;
    let response =
        WriteTxnMarkersResponse::decode(&mut bytes, version).map_err(|e| invalid(e.to_string()))?;
    let code = response
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == index)
        .map(|p| p.error_code)
        .ok_or_else(|| invalid("the partition is not in the answer".into()))?;
    Ok(ResponseError::try_from_code(code))
}

/// A node's answer to the coordinator's WriteTxnMarkers: the marker written through its
/// replica when it leads the partition, NOT_LEADER_OR_FOLLOWER otherwise (the coordinator
/// looks again). Blocking.
pub fn write_here(
    cluster: &Cluster,
    topic: &str,
    index: i32,
    marker: &TxnMarker,
) -> Result<i64, ResponseError> {
    match cluster.route(topic, index) {
        Route::Unknown => Err(ResponseError::UnknownTopicOrPartition),
        Route::Elsewhere(_) => Err(ResponseError::NotLeaderOrFollower),
        Route::Leader(replica) => {
            let appended = tokio::runtime::Handle::current().block_on(tokio::time::timeout(
                ATTEMPT_TIMEOUT,
                replica.append_marker(marker),
            ));
            match appended {
                Ok(Ok(ack)) => Ok(ack.offsets().0),
                Ok(Err(ReplicaError::Refused { kind, .. })) => {
                    Err(errors::append_error_kind(&kind))
                }
                Ok(Err(ReplicaError::NotLeader { .. })) => Err(ResponseError::NotLeaderOrFollower),
                Ok(Err(_)) | Err(_) => Err(ResponseError::RequestTimedOut),
            }
        }
    }
}
