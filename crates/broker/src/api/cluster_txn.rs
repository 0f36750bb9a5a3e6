//! The transaction coordinator's APIs in cluster mode (docs/design.md, "The transaction
//! coordinator in a cluster"): InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn and TxnOffsetCommit are the single broker's handlers ([`super::txn`])
//! on the coordinator, the node that leads the offsets group and loaded its state;
//! COORDINATOR_LOAD_IN_PROGRESS on that leader while it loads, NOT_COORDINATOR elsewhere (the
//! client looks the coordinator up again). WriteTxnMarkers writes through the partition's raft
//! leader: the coordinator sends it to the leaders of the partitions it does not lead.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::cluster::{markers, Cluster};
use crate::codec::Request;

/// A transaction coordinator's request: the single broker's handler on the coordinator,
/// refused with Kafka's coordinator errors elsewhere.
pub async fn coordinated(
    broker: &Arc<Broker>,
    cluster: &Cluster,
    request: &Request,
) -> Result<Reply, HandleError> {
    if cluster.coordinating() {
        return match request.api_key {
            ApiKey::InitProducerId => {
                let body: InitProducerIdRequest = request.body()?;
                let id = body
                    .transactional_id
                    .map(|id| id.0.to_string())
                    .unwrap_or_default();
                super::txn::init_producer_id(broker, request, id, body.transaction_timeout_ms).await
            }
            ApiKey::AddPartitionsToTxn => super::txn::add_partitions(broker, request).await,
            ApiKey::AddOffsetsToTxn => super::txn::add_offsets(broker, request).await,
            ApiKey::TxnOffsetCommit => super::txn::txn_offset_commit(broker, request).await,
            ApiKey::EndTxn => super::txn::end_txn(broker, request).await,
            other => Err(HandleError::UnsupportedApi(other)),
        };
    }
    let error = if cluster.coordinator() == Some(cluster.me()) {
        ResponseError::CoordinatorLoadInProgress
    } else {
        ResponseError::NotCoordinator
    };
    refuse(request, error)
}

/// A transaction coordinator's request refused with `error` (every partition of it).
fn refuse(request: &Request, error: ResponseError) -> Result<Reply, HandleError> {
    let code = error.code();
    let bytes = match request.api_key {
        ApiKey::InitProducerId => respond(
            request,
            &InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )?,
        ApiKey::AddPartitionsToTxn => {
            let body: AddPartitionsToTxnRequest = request.body()?;
            let topics = |topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic]| {
                topics
                    .iter()
                    .map(|t| {
                        AddPartitionsToTxnTopicResult::default()
                            .with_name(t.name.clone())
                            .with_results_by_partition(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        AddPartitionsToTxnPartitionResult::default()
                                            .with_partition_index(*p)
                                            .with_partition_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect::<Vec<_>>()
            };
            let response = if request.version >= 4 {
                AddPartitionsToTxnResponse::default().with_error_code(code)
            } else {
                AddPartitionsToTxnResponse::default()
                    .with_results_by_topic_v3_and_below(topics(&body.v3_and_below_topics))
            };
            respond(request, &response)?
        }
        ApiKey::AddOffsetsToTxn => respond(
            request,
            &AddOffsetsToTxnResponse::default().with_error_code(code),
        )?,
        ApiKey::EndTxn => respond(
            request,
            &EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )?,
        ApiKey::TxnOffsetCommit => {
            let body: TxnOffsetCommitRequest = request.body()?;
            let topics = body
                .topics
                .iter()
                .map(|t| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            respond(
                request,
                &TxnOffsetCommitResponse::default().with_topics(topics),
            )?
        }
        other => return Err(HandleError::UnsupportedApi(other)),
    };
    Ok(Reply::Now(bytes))
}

/// WriteTxnMarkers on a cluster node: each marker written through this node's replica where
/// it leads the partition, NOT_LEADER_OR_FOLLOWER where it does not.
pub async fn write_txn_markers(
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: WriteTxnMarkersRequest = request.body()?;
    let c = Arc::clone(cluster);
    let response = tokio::task::spawn_blocking(move || {
        super::txn_admin::write_markers_with(body, |topic, index, marker| {
            markers::write_here(&c, topic, index, marker)
        })
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "WriteTxnMarkers task failed");
        WriteTxnMarkersResponse::default()
    });
    Ok(Reply::Now(respond(request, &response)?))
}
