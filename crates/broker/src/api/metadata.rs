//! Metadata: this one broker leads every partition; topics a client asks for are created on
//! the spot when auto-creation is on. `__consumer_offsets` is described as Kafka describes it,
//! an internal topic (see [`offsets_topic`]).

use std::sync::Arc;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::store::{StoreError, Topic};

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: MetadataRequest = request.body()?;
    let version = request.version;
    // v0 asks for every topic with an empty list; later versions with a null one.
    let wanted = match body.topics {
        Some(topics) if version > 0 || !topics.is_empty() => Some(topics),
        _ => None,
    };
    let auto_create = broker.auto_create_topics && (version < 4 || body.allow_auto_topic_creation);
    let topics = match wanted {
        None => std::iter::once(offsets_topic(broker))
            .chain(broker.store.topics().iter().map(|t| describe(broker, t)))
            .collect(),
        Some(wanted) => {
            let mut topics = Vec::with_capacity(wanted.len());
            for topic in wanted {
                topics.push(lookup(broker, topic, auto_create).await);
            }
            topics
        }
    };
    let endpoint = &broker.endpoint;
    let response = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(endpoint.node_id))
            .with_host(StrBytes::from_string(endpoint.host.clone()))
            .with_port(endpoint.port.into())])
        .with_cluster_id(Some(StrBytes::from_string(
            broker.store.cluster_id().to_string(),
        )))
        .with_controller_id(BrokerId(endpoint.node_id))
        .with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// One requested topic: by name (created if allowed) or, from v10, by id.
async fn lookup(
    broker: &Arc<Broker>,
    wanted: MetadataRequestTopic,
    auto_create: bool,
) -> MetadataResponseTopic {
    let Some(name) = wanted.name else {
        if wanted.topic_id == OFFSETS_TOPIC_ID {
            return offsets_topic(broker);
        }
        return match broker.store.topic_by_id(wanted.topic_id) {
            Some(topic) => describe(broker, &topic),
            None => failed(None, wanted.topic_id, ResponseError::UnknownTopicId),
        };
    };
    if name.0.as_str() == OFFSETS_TOPIC {
        return offsets_topic(broker);
    }
    if let Some(topic) = broker.store.topic(&name) {
        return describe(broker, &topic);
    }
    if !auto_create {
        return failed(
            Some(name),
            Uuid::nil(),
            ResponseError::UnknownTopicOrPartition,
        );
    }
    let store = Arc::clone(&broker.store);
    let partitions = broker.default_partitions;
    let topic_name = name.0.to_string();
    let created = tokio::task::spawn_blocking(move || store.create_topic(&topic_name, partitions))
        .await
        .unwrap_or_else(|e| {
            Err(StoreError::Layout {
                path: broker.store.dir().to_path_buf(),
                reason: format!("topic creation task failed: {e}"),
            })
        });
    match created {
        Ok(topic) => {
            tracing::info!(topic = %topic.name, partitions = topic.partitions.len(), "created topic");
            describe(broker, &topic)
        }
        Err(StoreError::InvalidTopicName { .. }) => failed(
            Some(name),
            Uuid::nil(),
            ResponseError::InvalidTopicException,
        ),
        Err(e) => {
            tracing::error!(topic = %name.0, error = %e, "could not create topic");
            failed(Some(name), Uuid::nil(), ResponseError::KafkaStorageError)
        }
    }
}

/// The name of the topic the group coordinator writes (the broker's offsets log).
pub(crate) const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The topic id `__consumer_offsets` is described with. Kafka draws one at random when it
/// creates the topic and keeps it; the broker's offsets log has no `partition.metadata` of its
/// own, so this fixed id stands for it (ids are unique per cluster, and this broker is one).
pub(crate) const OFFSETS_TOPIC_ID: Uuid =
    Uuid::from_u128(0x6f6e_6365_6c6f_6700_0000_636f_6e73_756d);

/// `__consumer_offsets` as Kafka describes it once a group coordinator exists: an internal topic
/// (`is_internal`), here of one partition (the broker's offsets log,
/// [`crate::offsets_log::DIR_NAME`]) led by this broker. It is listed among all topics, as
/// Kafka lists it, so clients that leave internal topics out of a pattern subscription (Java's
/// `exclude.internal.topics`, franz-go's regex consumer) see it as internal. Its records are
/// not served: Fetch and ListOffsets answer it as unknown (UNKNOWN_TOPIC_OR_PARTITION, by id
/// UNKNOWN_TOPIC_ID), and no admin API creates, alters or deletes it.
fn offsets_topic(broker: &Broker) -> MetadataResponseTopic {
    let node = BrokerId(broker.endpoint.node_id);
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_static_str(OFFSETS_TOPIC))))
        .with_topic_id(OFFSETS_TOPIC_ID)
        .with_is_internal(true)
        .with_partitions(vec![MetadataResponsePartition::default()
            .with_partition_index(0)
            .with_leader_id(node)
            .with_leader_epoch(0)
            .with_replica_nodes(vec![node])
            .with_isr_nodes(vec![node])])
}

fn describe(broker: &Broker, topic: &Topic) -> MetadataResponseTopic {
    let node = BrokerId(broker.endpoint.node_id);
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p.index())
                .with_leader_id(node)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_partitions(partitions)
}

fn failed(name: Option<TopicName>, id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name)
        .with_topic_id(id)
}
