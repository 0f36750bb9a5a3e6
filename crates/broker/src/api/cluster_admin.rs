//! Cluster mode's front (docs/design.md, "A cluster of brokers"): the APIs a cluster node
//! answers, and the dispatch to them. Metadata from the cluster image and raft's view of each
//! partition; CreateTopics on the controller only (DeleteTopics and CreatePartitions too, in
//! cluster_topics.rs); InitProducerId hands out ids unique across
//! nodes; what is not replicated yet is answered with a typed error, never served from one
//! node's files.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::admin_topics::ClusterSettings;
use super::metadata::{OFFSETS_TOPIC, OFFSETS_TOPIC_ID};
use super::{
    api_versions, cluster_configs, cluster_data, cluster_describe, cluster_records, cluster_share,
    cluster_topics, cluster_txn, respond, HandleError, Reply,
};
use crate::broker::Broker;
use crate::cluster::{assign, Cluster, TopicImage, WriteRefused, MAX_NODE_ID, METADATA_TOPIC};
use crate::codec::Request;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use oncelog::format::TimestampType;
use oncelog::{CleanupPolicy, PartitionConfig};
use oncelog_raft::Host;

/// The APIs a cluster node answers (and advertises in ApiVersions). The others
/// are not advertised, and a request for one closes the
/// connection as an unsupported API does: their state is one broker's files.
pub const CLUSTER_APIS: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::InitProducerId,
    ApiKey::CreateTopics,
    ApiKey::OffsetForLeaderEpoch,
    // Read from the image: a topic's settings are those its metadata record carries, over the
    // broker's defaults (kafka-topics --describe asks for them).
    ApiKey::DescribeConfigs,
    // The group coordinator (classic groups and committed offsets) on the offsets group's
    // leader, which is also the transaction and the share coordinator.
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    // The groups' admin APIs, on the coordinator too (ListGroups from any node: the others
    // list none, as a Kafka broker lists only the groups it coordinates).
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    // The consumer protocol (KIP-848) on the same coordinator: its groups' records go
    // through the replicated log, its assignor reads the cluster image's topics.
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    // The transaction coordinator on the same node (cluster_txn.rs), and the markers it
    // writes through the partitions' leaders.
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::WriteTxnMarkers,
    // Share groups (KIP-932, cluster_share.rs) on the same coordinator, their state records
    // in the replicated log: ShareGroupHeartbeat, ShareGroupDescribe and the share offsets'
    // admin APIs there, NOT_COORDINATOR elsewhere; ShareFetch and ShareAcknowledge on any
    // node (clients send them to the partitions' leaders), forwarded to the coordinator.
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
    // The describe-only admin APIs (cluster_describe.rs): DescribeCluster from any node,
    // DescribeLogDirs per node for its own replicas, DescribeProducers on the partition's
    // leader, the transactions' on the transaction coordinator.
    ApiKey::DescribeCluster,
    ApiKey::DescribeLogDirs,
    ApiKey::DescribeProducers,
    ApiKey::ListTransactions,
    ApiKey::DescribeTransactions,
    // On the controller, each a record of the metadata log every node follows
    // (cluster_topics.rs).
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    // Decided by the controller as a record of the metadata log every node applies
    // (cluster_configs.rs, cluster_records.rs); sent elsewhere, forwarded to it.
    ApiKey::DeleteRecords,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AlterConfigs,
];

/// What the refusals say.
const NOT_REPLICATED: &str = "not replicated yet: this broker runs in cluster mode (--cluster)";

/// How long CreateTopics waits for its record to be applied, at most.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn handle(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    match request.api_key {
        ApiKey::ApiVersions => api_versions::handle_only(request, CLUSTER_APIS),
        ApiKey::InitProducerId if transactional(request)? => {
            cluster_txn::coordinated(broker, cluster, request).await
        }
        ApiKey::AddPartitionsToTxn
        | ApiKey::AddOffsetsToTxn
        | ApiKey::EndTxn
        | ApiKey::TxnOffsetCommit => cluster_txn::coordinated(broker, cluster, request).await,
        ApiKey::WriteTxnMarkers => cluster_txn::write_txn_markers(cluster, request).await,
        ApiKey::Metadata => metadata(cluster, request),
        ApiKey::Produce => cluster_data::produce(cluster, request).await,
        ApiKey::Fetch => cluster_data::fetch(cluster, request),
        ApiKey::ListOffsets => cluster_data::list_offsets(cluster, request),
        ApiKey::InitProducerId => init_producer_id(broker, cluster, request).await,
        ApiKey::CreateTopics => create_topics(broker, cluster, request).await,
        ApiKey::OffsetForLeaderEpoch => cluster_data::offset_for_leader_epoch(cluster, request),
        ApiKey::DescribeConfigs if cluster_share::group_configs_only(request)? => {
            cluster_share::handle(broker, cluster, request).await
        }
        ApiKey::DescribeConfigs => {
            let own = |name: &str| Ok(cluster.image().topic(name).map(|t| t.config.clone()));
            super::admin_topics::describe_configs_of(broker, request, &own, false)
        }
        ApiKey::FindCoordinator => find_coordinator(cluster, request),
        ApiKey::JoinGroup
        | ApiKey::SyncGroup
        | ApiKey::Heartbeat
        | ApiKey::LeaveGroup
        | ApiKey::OffsetCommit
        | ApiKey::OffsetFetch
        | ApiKey::DescribeGroups
        | ApiKey::ListGroups
        | ApiKey::DeleteGroups
        | ApiKey::OffsetDelete
        | ApiKey::ConsumerGroupHeartbeat
        | ApiKey::ConsumerGroupDescribe => coordinated(broker, cluster, request).await,
        ApiKey::ShareGroupHeartbeat
        | ApiKey::ShareGroupDescribe
        | ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::DescribeShareGroupOffsets
        | ApiKey::AlterShareGroupOffsets
        | ApiKey::DeleteShareGroupOffsets => cluster_share::handle(broker, cluster, request).await,
        ApiKey::DescribeCluster => cluster_describe::describe_cluster(cluster, request),
        ApiKey::DescribeLogDirs => cluster_describe::describe_log_dirs(cluster, request),
        ApiKey::DescribeProducers => cluster_describe::describe_producers(cluster, request).await,
        ApiKey::ListTransactions => {
            cluster_describe::list_transactions(broker, cluster, request).await
        }
        ApiKey::DescribeTransactions => {
            cluster_describe::describe_transactions(broker, cluster, request).await
        }
        ApiKey::DeleteTopics => cluster_topics::delete_topics(cluster, request).await,
        ApiKey::CreatePartitions => cluster_topics::create_partitions(cluster, request).await,
        ApiKey::DeleteRecords => cluster_records::delete_records(cluster, request),
        ApiKey::IncrementalAlterConfigs if cluster_share::group_configs_only(request)? => {
            cluster_share::handle(broker, cluster, request).await
        }
        ApiKey::IncrementalAlterConfigs => {
            cluster_configs::incremental_alter_configs(broker, cluster, request)
        }
        ApiKey::AlterConfigs => cluster_configs::alter_configs(broker, cluster, request),
        other => {
            tracing::warn!(api = ?other, "{NOT_REPLICATED}");
            Err(HandleError::UnsupportedApi(other))
        }
    }
}

fn metadata(cluster: &Cluster, request: &Request) -> Result<Reply, HandleError> {
    let body: MetadataRequest = request.body()?;
    let version = request.version;
    let wanted = match body.topics {
        Some(topics) if version > 0 || !topics.is_empty() => Some(topics),
        _ => None,
    };
    let image = cluster.image().clone();
    let topics = match wanted {
        None => std::iter::once(offsets_topic(cluster))
            .chain(image.topics().map(|t| describe(cluster, t)))
            .collect(),
        Some(wanted) => wanted
            .into_iter()
            .map(|w| {
                let offsets = match &w.name {
                    Some(name) => name.0.as_str() == OFFSETS_TOPIC,
                    None => w.topic_id == OFFSETS_TOPIC_ID,
                };
                if offsets {
                    return offsets_topic(cluster);
                }
                let found = match &w.name {
                    Some(name) => image.topic(name),
                    None => image.topic_by_id(w.topic_id),
                };
                match (found, w.name) {
                    (Some(t), _) => describe(cluster, t),
                    // No auto-creation in cluster mode: topics are made by CreateTopics.
                    (None, Some(name)) => MetadataResponseTopic::default()
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_name(Some(name)),
                    (None, None) => MetadataResponseTopic::default()
                        .with_error_code(ResponseError::UnknownTopicId.code())
                        .with_topic_id(w.topic_id),
                }
            })
            .collect(),
    };
    let brokers = cluster
        .nodes
        .nodes
        .iter()
        .map(|(id, a)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(*id))
                .with_host(StrBytes::from_string(a.host.clone()))
                .with_port(i32::from(a.kafka_port))
        })
        .collect();
    let response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(StrBytes::from_string(cluster.cluster_id.clone())))
        .with_controller_id(BrokerId(cluster.controller().unwrap_or(-1)))
        .with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// `__consumer_offsets` as the single broker describes it (an internal topic of one partition,
/// api/metadata.rs), its replicas every node and its leader the group coordinator (the
/// offsets group's leader; LEADER_NOT_AVAILABLE while none is known), listed among all topics
/// as Kafka lists it, so pattern subscriptions that leave internal topics out see it as
/// internal. Its records are not served (the partition APIs answer it as unknown).
fn offsets_topic(cluster: &Cluster) -> MetadataResponseTopic {
    let nodes: Vec<BrokerId> = cluster.nodes.ids().into_iter().map(BrokerId).collect();
    let leader = cluster.coordinator();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_static_str(OFFSETS_TOPIC))))
        .with_topic_id(OFFSETS_TOPIC_ID)
        .with_is_internal(true)
        .with_partitions(vec![MetadataResponsePartition::default()
            .with_error_code(match leader {
                Some(_) => 0,
                None => ResponseError::LeaderNotAvailable.code(),
            })
            .with_partition_index(0)
            .with_leader_id(BrokerId(leader.unwrap_or(-1)))
            .with_leader_epoch(-1)
            .with_replica_nodes(nodes.clone())
            .with_isr_nodes(nodes)])
}

/// A topic as this node sees it: per partition raft's leader and term, the replicas and those
/// in step; LEADER_NOT_AVAILABLE where no leader is known here.
fn describe(cluster: &Cluster, topic: &TopicImage) -> MetadataResponseTopic {
    let ids = |ids: &[i32]| ids.iter().map(|i| BrokerId(*i)).collect::<Vec<_>>();
    let partitions = topic
        .replicas
        .iter()
        .enumerate()
        .map(|(p, replicas)| {
            let view = cluster.view(&topic.name, p as i32, replicas.clone());
            let error = match view.leader {
                Some(_) => 0,
                None => ResponseError::LeaderNotAvailable.code(),
            };
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p as i32)
                .with_leader_id(BrokerId(view.leader.unwrap_or(-1)))
                .with_leader_epoch(view.epoch)
                .with_replica_nodes(ids(&view.replicas))
                .with_isr_nodes(ids(&view.isr))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_partitions(partitions)
}

async fn create_topics(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: CreateTopicsRequest = request.body()?;
    let nodes = cluster.nodes.ids();
    let mut results = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let refused = |error: ResponseError, message: String| {
            result
                .clone()
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message)))
        };
        let name = topic.name.0.to_string();
        let partitions = match topic.num_partitions {
            -1 => broker.default_partitions,
            n => n,
        };
        let factor = match topic.replication_factor {
            -1 => nodes.len() as i16,
            f => f,
        };
        let checked = if cluster.controller() != Some(cluster.me()) {
            Err(not_controller(cluster.controller()))
        } else if let Err(e) = crate::store::validate_topic_name(&name) {
            Err((ResponseError::InvalidTopicException, e.to_string()))
        } else if name == METADATA_TOPIC {
            Err((
                ResponseError::InvalidTopicException,
                format!("{name} is the cluster's metadata log"),
            ))
        } else if !topic.assignments.is_empty() {
            Err((
                ResponseError::InvalidRequest,
                "manual replica assignments are not supported in cluster mode".into(),
            ))
        } else if partitions < 1 {
            Err((
                ResponseError::InvalidPartitions,
                format!("{partitions} partitions: at least one"),
            ))
        } else if factor < 1 || factor as usize > nodes.len() {
            Err((
                ResponseError::InvalidReplicationFactor,
                format!(
                    "replication factor {factor}: from 1 to the cluster's {} nodes",
                    nodes.len()
                ),
            ))
        } else {
            topic_settings(broker, &topic)
        };
        let settings = match checked {
            Ok(settings) => settings,
            Err((error, message)) => {
                results.push(refused(error, message));
                continue;
            }
        };
        if body.validate_only {
            if cluster.image().topic(&name).is_some() {
                results.push(refused(
                    ResponseError::TopicAlreadyExists,
                    format!("topic {name} already exists"),
                ));
            } else {
                results.push(
                    result
                        .with_num_partitions(partitions)
                        .with_replication_factor(factor)
                        .with_configs(Some(settings.answer)),
                );
            }
            continue;
        }
        let replicas = assign(partitions, factor as usize, &nodes);
        match cluster
            .create_topic(&name, replicas, settings.given, CREATE_TIMEOUT)
            .await
        {
            Ok(created) => {
                tracing::info!(topic = %name, partitions, replication_factor = factor, "created topic");
                results.push(
                    result
                        .with_topic_id(created.id)
                        .with_num_partitions(partitions)
                        .with_replication_factor(factor)
                        .with_configs(Some(settings.answer)),
                );
            }
            Err(WriteRefused::Exists) => results.push(refused(
                ResponseError::TopicAlreadyExists,
                format!("topic {name} already exists"),
            )),
            Err(WriteRefused::NotController(c)) => {
                let (error, message) = not_controller(c);
                results.push(refused(error, message));
            }
            Err(WriteRefused::Raft(e)) => results.push(refused(
                ResponseError::RequestTimedOut,
                format!("the metadata log did not take the topic: {e}"),
            )),
            Err(WriteRefused::Timeout) => results.push(refused(
                ResponseError::RequestTimedOut,
                "the topic's record was not applied in time".into(),
            )),
            // Not answered to a create; said if it ever is.
            Err(WriteRefused::Unknown) => results.push(refused(
                ResponseError::UnknownServerError,
                "the topic left the image while it was created".into(),
            )),
            Err(WriteRefused::Invalid(error, message)) => results.push(refused(error, message)),
        }
    }
    let response = CreateTopicsResponse::default().with_topics(results);
    Ok(Reply::Now(respond(request, &response)?))
}

/// A new topic's settings (as its metadata record keeps them, and as CreateTopics answers
/// them): checked as a single broker checks them (api/admin_topics.rs), over the raft host's log defaults too, and refused with
/// INVALID_CONFIG where a raft partition cannot honour them ([`raft_refusal`]).
fn topic_settings(
    broker: &Broker,
    topic: &CreatableTopic,
) -> Result<ClusterSettings, (ResponseError, String)> {
    let log_defaults = Host::manager_config().map_err(|e| {
        (
            ResponseError::UnknownServerError,
            format!("the raft host's log settings: {e}"),
        )
    })?;
    let settings = super::admin_topics::cluster_creation_settings(broker, topic, &log_defaults)?;
    if let Some(why) = raft_refusal(&settings.config) {
        return Err((ResponseError::InvalidConfig, why));
    }
    Ok(settings)
}

/// Why a raft partition cannot take `config`, if it cannot: each setting whose limit would
/// not hold, or that would make the replicas' logs differ (docs/design.md, "Topic configs
/// in a cluster").
pub(super) fn raft_refusal(config: &PartitionConfig) -> Option<String> {
    if let Some(policy) = config
        .cleanup_policy
        .filter(|p| *p != CleanupPolicy::Delete)
    {
        return Some(format!(
            "cleanup.policy={}: a raft partition's log cannot be compacted in cluster mode \
             (compaction is not replicated); only delete",
            policy.name()
        ));
    }
    if config.message_timestamp_type == Some(TimestampType::LogAppendTime) {
        return Some(
            "message.timestamp.type=LogAppendTime: every replica would stamp a batch with its \
             own clock, and the replicas' logs would differ; only CreateTime in cluster mode"
                .into(),
        );
    }
    if config.flush_messages.is_some() || config.flush_ms.is_some() {
        return Some(
            "flush.messages and flush.ms: raft makes a partition's appends durable itself \
             (before acks=all is answered); cluster mode does not take them"
                .into(),
        );
    }
    if config.remote_storage_enable.is_some()
        || config.local_retention_ms.is_some()
        || config.local_retention_bytes.is_some()
    {
        return Some(
            "remote.storage.enable, local.retention.ms and local.retention.bytes: tiered \
             storage is not served in cluster mode"
                .into(),
        );
    }
    None
}

pub(super) fn not_controller(controller: Option<i32>) -> (ResponseError, String) {
    (
        ResponseError::NotController,
        match controller {
            Some(c) => format!("node {c} is the controller"),
            None => {
                "no controller is ready yet (elected, and caught up with the metadata log)".into()
            }
        },
    )
}

/// Whether an InitProducerId names a transactional id (the transaction coordinator answers
/// it).
fn transactional(request: &Request) -> Result<bool, HandleError> {
    let body: InitProducerIdRequest = request.body()?;
    Ok(body
        .transactional_id
        .as_ref()
        .is_some_and(|t| !t.0.is_empty()))
}

/// Producer ids unique across the cluster: the node's own allocator (persisted in its data
/// directory, never handing out an id twice) times 1024, plus the node id. Each partition's
/// producer state comes from its replicated log, so a producer moves between leaders with its
/// id; an epoch bump (KIP-360) gets a new id instead, which Kafka's idempotent producers take.
async fn init_producer_id(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let failed = |error: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let response = {
        let ids = Arc::clone(&broker.producer_ids);
        let me = i64::from(cluster.me());
        // A node that lost its data hands out ids of a new incarnation, and only once it
        // knows it (docs/design.md, "A wiped node rejoins under its id").
        let range = match cluster.producer_id_range() {
            Ok(range) => range,
            Err(crate::cluster::ProducerIdsUnavailable::NotYet) => {
                let response = failed(ResponseError::CoordinatorLoadInProgress);
                return Ok(Reply::Now(respond(request, &response)?));
            }
            Err(crate::cluster::ProducerIdsUnavailable::Exhausted(term)) => {
                tracing::error!(term, "producer ids: no room for this node's incarnation");
                let response = failed(ResponseError::KafkaStorageError);
                return Ok(Reply::Now(respond(request, &response)?));
            }
        };
        match tokio::task::spawn_blocking(move || ids.allocate_in(range)).await {
            Ok(Ok(granted)) => match granted
                .producer_id
                .checked_mul(i64::from(MAX_NODE_ID) + 1)
                .and_then(|id| id.checked_add(me))
            {
                Some(id) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(id))
                    .with_producer_epoch(0),
                None => failed(ResponseError::KafkaStorageError),
            },
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot grant a producer id");
                failed(ResponseError::KafkaStorageError)
            }
            Err(e) => {
                tracing::error!(error = %e, "producer id task failed");
                failed(ResponseError::UnknownServerError)
            }
        }
    };
    Ok(Reply::Now(respond(request, &response)?))
}

/// FindCoordinator's key types: groups (0), transactions (1) and share-partitions (2,
/// KIP-932's `group:topicId:partition`) are answered.
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;
const SHARE_KEY: i8 = 2;

/// A group's coordinator and a transactional id's are the offsets group's leader (every group
/// and every transactional id maps to its one partition); COORDINATOR_NOT_AVAILABLE while none
/// is known. The share coordinator is the same node (every share-partition's state is in that
/// group's log too).
fn find_coordinator(cluster: &Cluster, request: &Request) -> Result<Reply, HandleError> {
    let body: FindCoordinatorRequest = request.body()?;
    let answer = |key_type: i8| -> Coordinator {
        let unavailable = |message: String| {
            Coordinator::default()
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(ResponseError::CoordinatorNotAvailable.code())
                .with_error_message(Some(StrBytes::from_string(message)))
        };
        if ![GROUP_KEY, TRANSACTION_KEY, SHARE_KEY].contains(&key_type) {
            return Coordinator::default()
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(StrBytes::from_string(format!(
                    "Unknown coordinator type {key_type}"
                ))));
        }
        let leader = cluster.coordinator();
        match leader.and_then(|id| cluster.nodes.nodes.get(&id).map(|a| (id, a))) {
            Some((id, a)) => Coordinator::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(a.host.clone()))
                .with_port(i32::from(a.kafka_port)),
            None => unavailable("the offsets group has no leader yet".to_string()),
        }
    };
    let mut response = FindCoordinatorResponse::default();
    if request.version >= 4 {
        response = response.with_coordinators(
            body.coordinator_keys
                .into_iter()
                .map(|key| answer(body.key_type).with_key(key))
                .collect(),
        );
    } else {
        let c = answer(body.key_type);
        response = response
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port)
            .with_error_code(c.error_code)
            .with_error_message(c.error_message);
    }
    Ok(Reply::Now(respond(request, &response)?))
}

/// A classic group's request, or a group admin request: the single broker's handler on the
/// coordinator (the node that leads the offsets group and loaded its state), Kafka's
/// NOT_COORDINATOR elsewhere (the client looks the coordinator up again),
/// COORDINATOR_LOAD_IN_PROGRESS on the leader while it loads. ListGroups is the exception:
/// Kafka's admin client asks every broker and merges what each lists (the groups it
/// coordinates), so a node that is not the coordinator lists none, without an error.
async fn coordinated(
    broker: &Arc<Broker>,
    cluster: &Cluster,
    request: &Request,
) -> Result<Reply, HandleError> {
    if cluster.coordinating() {
        return match request.api_key {
            ApiKey::JoinGroup => super::groups::join_group(broker, request),
            ApiKey::SyncGroup => super::groups::sync_group(broker, request),
            ApiKey::Heartbeat => super::groups::heartbeat(broker, request),
            ApiKey::LeaveGroup => super::groups::leave_group(broker, request),
            ApiKey::OffsetCommit => super::groups::offset_commit(broker, request).await,
            ApiKey::OffsetFetch => super::groups::offset_fetch(broker, request),
            ApiKey::DescribeGroups => super::group_admin::describe_groups(broker, request),
            ApiKey::ListGroups => super::group_admin::list_groups(broker, request),
            ApiKey::DeleteGroups => super::group_admin::delete_groups(broker, request).await,
            ApiKey::OffsetDelete => super::group_admin::offset_delete(broker, request).await,
            ApiKey::ConsumerGroupHeartbeat => super::consumer_groups::heartbeat(broker, request),
            ApiKey::ConsumerGroupDescribe => super::consumer_groups::describe(broker, request),
            other => Err(HandleError::UnsupportedApi(other)),
        };
    }
    let error = if cluster.coordinator() == Some(cluster.me()) {
        ResponseError::CoordinatorLoadInProgress
    } else {
        ResponseError::NotCoordinator
    };
    not_coordinator(request, error)
}

/// A group request refused with `error` (every partition of an OffsetCommit or OffsetFetch).
fn not_coordinator(request: &Request, error: ResponseError) -> Result<Reply, HandleError> {
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    let code = error.code();
    let bytes = match request.api_key {
        ApiKey::JoinGroup => respond(
            request,
            &JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        )?,
        ApiKey::SyncGroup => respond(request, &SyncGroupResponse::default().with_error_code(code))?,
        ApiKey::Heartbeat => respond(request, &HeartbeatResponse::default().with_error_code(code))?,
        ApiKey::LeaveGroup => respond(
            request,
            &LeaveGroupResponse::default().with_error_code(code),
        )?,
        ApiKey::ListGroups if error == ResponseError::NotCoordinator => {
            respond(request, &ListGroupsResponse::default())?
        }
        ApiKey::ListGroups => respond(
            request,
            &ListGroupsResponse::default().with_error_code(code),
        )?,
        ApiKey::DescribeGroups => {
            use kafka_protocol::messages::describe_groups_response::DescribedGroup;
            let body: DescribeGroupsRequest = request.body()?;
            let groups = body
                .groups
                .into_iter()
                .map(|g| {
                    DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &DescribeGroupsResponse::default().with_groups(groups),
            )?
        }
        ApiKey::DeleteGroups => {
            use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
            let body: DeleteGroupsRequest = request.body()?;
            let results = body
                .groups_names
                .into_iter()
                .map(|g| {
                    DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &DeleteGroupsResponse::default().with_results(results),
            )?
        }
        ApiKey::OffsetDelete => respond(
            request,
            &OffsetDeleteResponse::default().with_error_code(code),
        )?,
        ApiKey::ConsumerGroupHeartbeat => respond(
            request,
            &ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        )?,
        ApiKey::ConsumerGroupDescribe => {
            use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
            let body: ConsumerGroupDescribeRequest = request.body()?;
            let groups = body
                .group_ids
                .into_iter()
                .map(|g| {
                    DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &ConsumerGroupDescribeResponse::default().with_groups(groups),
            )?
        }
        ApiKey::OffsetCommit => {
            let body: OffsetCommitRequest = request.body()?;
            let topics = body
                .topics
                .into_iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            respond(
                request,
                &OffsetCommitResponse::default().with_topics(topics),
            )?
        }
        ApiKey::OffsetFetch => {
            let body: OffsetFetchRequest = request.body()?;
            let response = if request.version >= 8 {
                OffsetFetchResponse::default().with_groups(
                    body.groups
                        .into_iter()
                        .map(|g| {
                            OffsetFetchResponseGroup::default()
                                .with_group_id(g.group_id)
                                .with_error_code(code)
                        })
                        .collect(),
                )
            } else {
                // Before v2 the error is only the partitions'.
                let topics = body
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(-1)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponse::default()
                    .with_error_code(code)
                    .with_topics(topics)
            };
            respond(request, &response)?
        }
        other => return Err(HandleError::UnsupportedApi(other)),
    };
    Ok(Reply::Now(bytes))
}
