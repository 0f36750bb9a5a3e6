//! The Kafka APIs this broker answers, one module per family, and the dispatch from a request
//! to its handler.

mod admin_topics;
mod api_versions;
mod cluster_admin;
mod cluster_configs;
mod cluster_data;
mod cluster_describe;
mod cluster_records;
mod cluster_share;
mod cluster_topics;
mod cluster_txn;
mod consumer_groups;
mod fetch;
mod group_admin;
mod groups;
mod init_producer_id;
mod list_offsets;
mod log_admin;
mod metadata;
mod produce;
mod share_admin;
mod share_groups;
mod share_logs;
mod to_controller;
mod txn;
mod txn_admin;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use tokio::task::JoinHandle;

use crate::broker::Broker;
use crate::codec::{self, EncodeError, Request, RequestError, ResponseFrame};
use crate::connection::CaughtUp;

pub use cluster_admin::CLUSTER_APIS;
pub use consumer_groups::{cluster_topic_infos, topic_infos};
pub use groups::CommittedOffsets;

/// The APIs and versions advertised in ApiVersions, and the only ones answered. Produce from
/// v3 and Fetch from v4 only: clients then use magic-2 batches, the only format the log
/// stores. Each maximum is the newest version of kafka-protocol's schemas that the handler
/// fills every field of.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    // Transactions of both versions (txn.rs): version 1 as Kafka 2.5 to 3.x run them, and
    // version 2 (KIP-890 part 2, finalized in ApiVersions): EndTxn v5 with the epoch bump,
    // TxnOffsetCommit v5 and Produce v12+ adding to the transaction themselves, and
    // AddPartitionsToTxn v4 (the batched, `verify_only` form). AddOffsetsToTxn v4 only adds
    // an error code, TRANSACTION_ABORTABLE, that this coordinator never answers it.
    (ApiKey::AddPartitionsToTxn, 0, 4),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    // Topic and configuration admin (admin_topics.rs).
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    // The legacy form: a resource's whole set replaced.
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    // v4 adds the volume's total and usable bytes, which this broker does not measure.
    (ApiKey::DescribeLogDirs, 1, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // The consumer group protocol (KIP-848, consumer_groups.rs); v1 adds regex subscriptions.
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Transaction tooling, KIP-664 (txn_admin.rs). ListTransactions v2 (a transactional-id
    // regular expression) is not answered.
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // Share groups, KIP-932 (share_groups.rs), at Kafka 4.4's versions: ShareFetch and
    // ShareAcknowledge v2 (renew acknowledgements, KIP-1222) are the stable ones clients wait for.
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 2),
    (ApiKey::ShareAcknowledge, 1, 2),
    // Share group offsets admin (share_admin.rs); DescribeShareGroupOffsets v1 adds the lag.
    (ApiKey::DescribeShareGroupOffsets, 0, 1),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
];

/// The versions of `api_key` this broker answers, if any.
pub fn supported_versions(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|&(_, min, max)| (min, max))
}

/// What to send back for one request, in the order requests arrived.
#[derive(Debug)]
pub enum Reply {
    /// A response ready now.
    Now(ResponseFrame),
    /// A response that is ready when the task ends: an acks=all produce waiting for its flush,
    /// a fetch waiting for data. Later requests are read and handled meanwhile; their responses
    /// queue behind this one.
    Later(JoinHandle<Result<ResponseFrame, EncodeError>>),
    /// No response (a produce with acks=0).
    Nothing,
    /// Close the connection: an acks=0 produce failed, and closing is the only way to tell the
    /// client (Kafka does the same).
    Close(String),
}

/// Why a request was not answered; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("{api:?} v{version} is not supported (versions {range})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        range: String,
    },
    #[error("{0:?} is not supported by this broker")]
    UnsupportedApi(ApiKey),
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Handles one request. Anything that must happen in request order (the appends of a
/// produce) is done before this returns; waiting is left to a [`Reply::Later`] task.
pub async fn handle(
    broker: &Arc<Broker>,
    request: Request,
    caught_up: &CaughtUp,
) -> Result<Reply, HandleError> {
    let Some((min, max)) = supported_versions(request.api_key) else {
        return Err(HandleError::UnsupportedApi(request.api_key));
    };
    if !(min..=max).contains(&request.version) {
        if request.api_key == ApiKey::ApiVersions {
            // A client newer than the broker: tell it which versions exist, so it can retry
            // with one of them (KIP-511).
            return Ok(Reply::Now(api_versions::unsupported_version(&request)?));
        }
        return Err(HandleError::UnsupportedVersion {
            api: request.api_key,
            version: request.version,
            range: format!("{min}..={max}"),
        });
    }
    // Cluster mode answers from the raft groups and the cluster image, never from this
    // node's own files: one seam, the single broker's handlers below stay as they are.
    if let Some(cluster) = &broker.cluster {
        return cluster_admin::handle(broker, cluster, &request).await;
    }
    match request.api_key {
        ApiKey::ApiVersions => api_versions::handle(&request),
        ApiKey::Metadata => metadata::handle(broker, &request).await,
        ApiKey::InitProducerId => init_producer_id::handle(broker, &request).await,
        ApiKey::Produce => produce::handle(broker, &request, caught_up).await,
        ApiKey::Fetch => fetch::handle(broker, &request),
        ApiKey::ListOffsets => list_offsets::handle(broker, &request).await,
        ApiKey::FindCoordinator => groups::find_coordinator(broker, &request),
        ApiKey::OffsetCommit => groups::offset_commit(broker, &request).await,
        ApiKey::AddPartitionsToTxn => txn::add_partitions(broker, &request).await,
        ApiKey::AddOffsetsToTxn => txn::add_offsets(broker, &request).await,
        ApiKey::TxnOffsetCommit => txn::txn_offset_commit(broker, &request).await,
        ApiKey::EndTxn => txn::end_txn(broker, &request).await,
        ApiKey::JoinGroup => groups::join_group(broker, &request),
        ApiKey::SyncGroup => groups::sync_group(broker, &request),
        ApiKey::Heartbeat => groups::heartbeat(broker, &request),
        ApiKey::LeaveGroup => groups::leave_group(broker, &request),
        ApiKey::OffsetFetch => groups::offset_fetch(broker, &request),
        ApiKey::CreateTopics => admin_topics::create_topics(broker, &request).await,
        ApiKey::DeleteTopics => admin_topics::delete_topics(broker, &request).await,
        ApiKey::DescribeConfigs => admin_topics::describe_configs(broker, &request).await,
        ApiKey::CreatePartitions => admin_topics::create_partitions(broker, &request).await,
        ApiKey::IncrementalAlterConfigs => {
            admin_topics::incremental_alter_configs(broker, &request).await
        }
        ApiKey::AlterConfigs => admin_topics::alter_configs(broker, &request).await,
        ApiKey::DescribeCluster => admin_topics::describe_cluster(broker, &request),
        ApiKey::DescribeGroups => group_admin::describe_groups(broker, &request),
        ApiKey::ListGroups => group_admin::list_groups(broker, &request),
        ApiKey::DeleteRecords => log_admin::delete_records(broker, &request).await,
        ApiKey::OffsetForLeaderEpoch => log_admin::offset_for_leader_epoch(broker, &request),
        ApiKey::DescribeLogDirs => log_admin::describe_log_dirs(broker, &request),
        ApiKey::DeleteGroups => group_admin::delete_groups(broker, &request).await,
        ApiKey::OffsetDelete => group_admin::offset_delete(broker, &request).await,
        ApiKey::ConsumerGroupHeartbeat => consumer_groups::heartbeat(broker, &request),
        ApiKey::ConsumerGroupDescribe => consumer_groups::describe(broker, &request),
        ApiKey::WriteTxnMarkers => txn_admin::write_txn_markers(broker, &request).await,
        ApiKey::DescribeProducers => txn_admin::describe_producers(broker, &request).await,
        ApiKey::DescribeTransactions => txn_admin::describe_transactions(broker, &request).await,
        ApiKey::ListTransactions => txn_admin::list_transactions(broker, &request).await,
        ApiKey::ShareGroupHeartbeat => share_groups::heartbeat(broker, &request),
        ApiKey::ShareGroupDescribe => share_groups::describe(broker, &request),
        ApiKey::ShareFetch => share_groups::fetch(broker, &request),
        ApiKey::ShareAcknowledge => share_groups::acknowledge(broker, &request),
        ApiKey::DescribeShareGroupOffsets => share_admin::describe_offsets(broker, &request),
        ApiKey::AlterShareGroupOffsets => share_admin::alter_offsets(broker, &request).await,
        ApiKey::DeleteShareGroupOffsets => share_admin::delete_offsets(broker, &request).await,
        other => Err(HandleError::UnsupportedApi(other)),
    }
}

/// Decodes a whole request frame (without its size prefix), header and body, into the generated
/// types of its API and version, exactly as the handlers decode it, and does nothing with it.
/// Every frame a connection reads goes through these decoders, so this is the entry point the
/// `request_frame` fuzz target and the hostile-request tests drive: whatever the bytes, it
/// returns (a typed error for anything malformed), and the memory it takes is bounded by the
/// frame's size (the decoders refuse a length longer than the bytes left, see
/// `vendor/kafka-protocol/VENDORED.md`).
pub fn decode_frame(frame: Bytes) -> Result<Request, HandleError> {
    let request = Request::parse(frame)?;
    let Some((min, max)) = supported_versions(request.api_key) else {
        return Err(HandleError::UnsupportedApi(request.api_key));
    };
    if !(min..=max).contains(&request.version) {
        return Err(HandleError::UnsupportedVersion {
            api: request.api_key,
            version: request.version,
            range: format!("{min}..={max}"),
        });
    }
    fn body<T: kafka_protocol::protocol::Decodable>(request: &Request) -> Result<(), HandleError> {
        request.body::<T>().map(drop).map_err(HandleError::from)
    }
    match request.api_key {
        ApiKey::Produce => body::<ProduceRequest>(&request),
        ApiKey::Fetch => body::<FetchRequest>(&request),
        ApiKey::ListOffsets => body::<ListOffsetsRequest>(&request),
        ApiKey::Metadata => body::<MetadataRequest>(&request),
        ApiKey::OffsetCommit => body::<OffsetCommitRequest>(&request),
        ApiKey::OffsetFetch => body::<OffsetFetchRequest>(&request),
        ApiKey::FindCoordinator => body::<FindCoordinatorRequest>(&request),
        ApiKey::JoinGroup => body::<JoinGroupRequest>(&request),
        ApiKey::Heartbeat => body::<HeartbeatRequest>(&request),
        ApiKey::LeaveGroup => body::<LeaveGroupRequest>(&request),
        ApiKey::SyncGroup => body::<SyncGroupRequest>(&request),
        ApiKey::ApiVersions => body::<ApiVersionsRequest>(&request),
        ApiKey::InitProducerId => body::<InitProducerIdRequest>(&request),
        ApiKey::AddPartitionsToTxn => body::<AddPartitionsToTxnRequest>(&request),
        ApiKey::AddOffsetsToTxn => body::<AddOffsetsToTxnRequest>(&request),
        ApiKey::EndTxn => body::<EndTxnRequest>(&request),
        ApiKey::TxnOffsetCommit => body::<TxnOffsetCommitRequest>(&request),
        ApiKey::CreateTopics => body::<CreateTopicsRequest>(&request),
        ApiKey::DeleteTopics => body::<DeleteTopicsRequest>(&request),
        ApiKey::DescribeConfigs => body::<DescribeConfigsRequest>(&request),
        ApiKey::CreatePartitions => body::<CreatePartitionsRequest>(&request),
        ApiKey::IncrementalAlterConfigs => body::<IncrementalAlterConfigsRequest>(&request),
        ApiKey::AlterConfigs => body::<AlterConfigsRequest>(&request),
        ApiKey::DescribeCluster => body::<DescribeClusterRequest>(&request),
        ApiKey::DescribeGroups => body::<DescribeGroupsRequest>(&request),
        ApiKey::ListGroups => body::<ListGroupsRequest>(&request),
        ApiKey::DeleteRecords => body::<DeleteRecordsRequest>(&request),
        ApiKey::OffsetForLeaderEpoch => body::<OffsetForLeaderEpochRequest>(&request),
        ApiKey::DescribeLogDirs => body::<DescribeLogDirsRequest>(&request),
        ApiKey::DeleteGroups => body::<DeleteGroupsRequest>(&request),
        ApiKey::OffsetDelete => body::<OffsetDeleteRequest>(&request),
        ApiKey::ConsumerGroupHeartbeat => body::<ConsumerGroupHeartbeatRequest>(&request),
        ApiKey::ConsumerGroupDescribe => body::<ConsumerGroupDescribeRequest>(&request),
        ApiKey::WriteTxnMarkers => body::<WriteTxnMarkersRequest>(&request),
        ApiKey::DescribeProducers => body::<DescribeProducersRequest>(&request),
        ApiKey::DescribeTransactions => body::<DescribeTransactionsRequest>(&request),
        ApiKey::ListTransactions => body::<ListTransactionsRequest>(&request),
        ApiKey::ShareGroupHeartbeat => body::<ShareGroupHeartbeatRequest>(&request),
        ApiKey::ShareGroupDescribe => body::<ShareGroupDescribeRequest>(&request),
        ApiKey::ShareFetch => body::<ShareFetchRequest>(&request),
        ApiKey::ShareAcknowledge => body::<ShareAcknowledgeRequest>(&request),
        ApiKey::DescribeShareGroupOffsets => body::<DescribeShareGroupOffsetsRequest>(&request),
        ApiKey::AlterShareGroupOffsets => body::<AlterShareGroupOffsetsRequest>(&request),
        ApiKey::DeleteShareGroupOffsets => body::<DeleteShareGroupOffsetsRequest>(&request),
        other => Err(HandleError::UnsupportedApi(other)),
    }?;
    Ok(request)
}

/// The `request_frame` fuzz target's body: any bytes, decoded as a request frame. Must never
/// panic nor abort.
pub fn fuzz_request_frame(data: &[u8]) {
    let _ = decode_frame(Bytes::copy_from_slice(data));
}

/// Encodes a response to `request` at its version.
fn respond<R: Encodable + HeaderVersion>(
    request: &Request,
    body: &R,
) -> Result<ResponseFrame, EncodeError> {
    codec::encode(request.correlation_id, request.version, body, &[])
}
