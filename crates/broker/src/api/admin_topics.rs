//! The topic and configuration admin APIs: CreateTopics, DeleteTopics, CreatePartitions,
//! DescribeConfigs, IncrementalAlterConfigs and DescribeCluster, each onto the store's
//! `LogManager` (partitions created and deleted by the manager; a topic's settings are its
//! partitions' `oncelog.properties`, the engine's `PartitionConfig` with Kafka's names).
//!
//! Settings altered by IncrementalAlterConfigs are applied live: the manager replaces each
//! partition's `oncelog.properties` and reconfigures its open log (`LogManager::alter_config`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use oncelog::tier::LocalRetention;
use oncelog::{CleanupPolicy, ManagerConfig, PartitionConfig, ResolvedConfig};
use uuid::Uuid;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::store::{StoreError, RESERVED_TOPICS};

/// Kafka's `ConfigResource.Type` codes.
pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;

/// Kafka's `DescribeConfigsResponse.ConfigSource` codes.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's `ConfigDef.Type` codes (`config_type`).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;

/// IncrementalAlterConfigs' operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// One topic setting the engine keeps: its Kafka topic name, the broker setting that is its
/// default, its type, whether a broker flag sets that default, and its effective value.
struct Setting {
    topic: &'static str,
    broker: &'static str,
    kind: i8,
    flag: bool,
    doc: &'static str,
    value: fn(&Effective) -> String,
}

/// The broker's defaults of every topic setting: the manager's, and tiered storage's local
/// retention (`--local-retention-ms` / `-bytes`), which the manager's config does not hold.
struct Defaults {
    manager: ManagerConfig,
    local_retention: LocalRetention,
    /// `--tier-dir` turned tiered storage on.
    tiering: bool,
}

impl Defaults {
    fn of(broker: &Broker) -> Result<Defaults, Refusal> {
        Ok(Defaults {
            manager: broker.store.defaults().map_err(store_refusal)?,
            local_retention: broker.store.local_retention_defaults(),
            tiering: broker.store.tiering(),
        })
    }
}

impl std::ops::Deref for Defaults {
    type Target = ManagerConfig;
    fn deref(&self) -> &ManagerConfig {
        &self.manager
    }
}

/// A partition's settings resolved over the broker's defaults. `log` is resolved as if the
/// policy deleted, so retention shows its value under a compact-only policy too (as Kafka
/// shows it); the policy is kept apart.
struct Effective {
    log: ResolvedConfig,
    cleanup_policy: CleanupPolicy,
    /// `local.retention.ms` / `.bytes`: the topic's own, else the broker's.
    local_retention: LocalRetention,
    /// Whether the topic is tiered: the broker tiers, and the topic does not say no.
    remote_storage: bool,
}

impl Effective {
    fn of(own: &PartitionConfig, defaults: &Defaults) -> Effective {
        let as_deleting = own.clone().with_cleanup_policy(CleanupPolicy::Delete);
        let log = as_deleting.resolve(defaults);
        let d = defaults.local_retention;
        let local_retention = LocalRetention::new(
            log.local_retention_ms.unwrap_or(d.local_retention_ms),
            log.local_retention_bytes.unwrap_or(d.local_retention_bytes),
        );
        Effective {
            cleanup_policy: own.resolve(defaults).cleanup_policy,
            remote_storage: defaults.tiering && log.remote_storage_enable,
            local_retention,
            log,
        }
    }
}

fn limit(value: Option<u64>) -> String {
    value.map_or("-1".to_string(), |v| v.to_string())
}

/// Kafka's default for `flush.messages` and `flush.ms` is Long.MAX_VALUE: never.
fn flush_limit(value: Option<u64>) -> String {
    value.map_or(i64::MAX.to_string(), |v| v.to_string())
}

/// Every topic setting, in Kafka's (alphabetical) order.
const SETTINGS: &[Setting] = &[
    Setting {
        topic: "cleanup.policy",
        broker: "log.cleanup.policy",
        kind: TYPE_LIST,
        flag: false,
        doc: "delete, compact or compact,delete",
        value: |e| e.cleanup_policy.name().to_string(),
    },
    Setting {
        topic: "file.delete.delay.ms",
        broker: "log.segment.delete.delay.ms",
        kind: TYPE_LONG,
        flag: false,
        doc: "how long a deleted segment's files stay before they are removed",
        value: |e| e.log.log.file_delete_delay_ms.to_string(),
    },
    Setting {
        topic: "flush.messages",
        broker: "log.flush.interval.messages",
        kind: TYPE_LONG,
        flag: false,
        doc: "the flush job makes the partition durable once this many messages are unflushed",
        value: |e| flush_limit(e.log.flush_messages),
    },
    Setting {
        topic: "flush.ms",
        broker: "log.flush.interval.ms",
        kind: TYPE_LONG,
        flag: false,
        doc:
            "the flush job makes the partition durable once its oldest unflushed append is this old",
        value: |e| flush_limit(e.log.flush_ms),
    },
    Setting {
        topic: "index.interval.bytes",
        broker: "log.index.interval.bytes",
        kind: TYPE_INT,
        flag: false,
        doc: "bytes between offset index entries",
        value: |e| e.log.log.index_interval_bytes.to_string(),
    },
    Setting {
        topic: "local.retention.bytes",
        broker: "log.local.retention.bytes",
        kind: TYPE_LONG,
        flag: true,
        doc: "tiered storage: the size a partition's local copies of uploaded segments are trimmed to; -1 for no limit",
        value: |e| limit(e.local_retention.local_retention_bytes),
    },
    Setting {
        topic: "local.retention.ms",
        broker: "log.local.retention.ms",
        kind: TYPE_LONG,
        flag: true,
        doc: "tiered storage: the age past which local copies of uploaded segments are deleted; -1 for no limit",
        value: |e| {
            e.local_retention
                .local_retention_ms
                .map_or("-1".to_string(), |v| v.to_string())
        },
    },
    Setting {
        topic: "max.message.bytes",
        broker: "message.max.bytes",
        kind: TYPE_INT,
        flag: true,
        doc: "the largest batch accepted",
        value: |e| e.log.log.max_message_bytes.to_string(),
    },
    Setting {
        topic: "message.timestamp.type",
        broker: "log.message.timestamp.type",
        kind: TYPE_STRING,
        flag: true,
        doc: "CreateTime or LogAppendTime",
        value: |e| e.log.log.message_timestamp_type.name().to_string(),
    },
    Setting {
        topic: "remote.storage.enable",
        broker: "remote.log.storage.system.enable",
        kind: TYPE_BOOLEAN,
        flag: true,
        doc: "tiered storage: false keeps the topic's segments local (with --tier-dir every other topic whose cleanup.policy does not compact is tiered)",
        value: |e| e.remote_storage.to_string(),
    },
    Setting {
        topic: "retention.bytes",
        broker: "log.retention.bytes",
        kind: TYPE_LONG,
        flag: false,
        doc: "the size a partition is trimmed to by retention; -1 for no limit",
        value: |e| limit(e.log.log.retention_bytes),
    },
    Setting {
        topic: "retention.ms",
        broker: "log.retention.ms",
        kind: TYPE_LONG,
        flag: false,
        doc: "the age past which segments are deleted by retention; -1 for no limit",
        value: |e| {
            e.log
                .log
                .retention_ms
                .map_or("-1".to_string(), |v| v.to_string())
        },
    },
    Setting {
        topic: "segment.bytes",
        broker: "log.segment.bytes",
        kind: TYPE_INT,
        flag: true,
        doc: "the size at which a segment is rolled",
        value: |e| e.log.log.segment_bytes.to_string(),
    },
    Setting {
        topic: "segment.index.bytes",
        broker: "log.index.size.max.bytes",
        kind: TYPE_INT,
        flag: false,
        doc: "the size of a segment's offset and time indexes",
        value: |e| e.log.log.segment_index_bytes.to_string(),
    },
    Setting {
        topic: "segment.jitter.ms",
        broker: "log.roll.jitter.ms",
        kind: TYPE_LONG,
        flag: false,
        doc: "the most a segment's roll by age is brought forward",
        value: |e| e.log.log.segment_jitter_ms.to_string(),
    },
    Setting {
        topic: "segment.ms",
        broker: "log.roll.ms",
        kind: TYPE_LONG,
        flag: false,
        doc: "the age at which a segment is rolled",
        value: |e| e.log.log.segment_ms.to_string(),
    },
];

fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.topic == name)
}

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A refusal: the Kafka error and the message sent with it.
pub type Refusal = (ResponseError, String);

/// Runs a blocking store operation off the reactor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StoreError::Layout {
            path: std::path::PathBuf::new(),
            reason: format!("admin task failed: {e}"),
        })
    })
}

/// The Kafka error for a store operation that failed.
fn store_refusal(e: StoreError) -> Refusal {
    let error = match &e {
        StoreError::InvalidTopicName { .. } => ResponseError::InvalidTopicException,
        StoreError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        StoreError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        StoreError::PartitionCount { .. } => ResponseError::InvalidPartitions,
        StoreError::Config(_) => ResponseError::InvalidConfig,
        StoreError::Manager(m) => match m.kind() {
            "invalid_topic" | "topic_collision" => ResponseError::InvalidTopicException,
            "partition_exists" => ResponseError::TopicAlreadyExists,
            "closed" => ResponseError::NotController,
            kind if kind.starts_with("config") || kind.contains("invalid_config") => {
                ResponseError::InvalidConfig
            }
            _ => ResponseError::KafkaStorageError,
        },
        _ => ResponseError::KafkaStorageError,
    };
    if error == ResponseError::KafkaStorageError {
        tracing::error!(error = %e, "admin operation failed");
    }
    (error, e.to_string())
}

/// Parses a topic's settings from `key=value` pairs with the engine's parser, and checks the
/// configuration they resolve to. `what` names the request part, for the messages.
fn parse_settings(
    pairs: &[(String, String)],
    defaults: &ManagerConfig,
) -> Result<PartitionConfig, Refusal> {
    let invalid = |m: String| (ResponseError::InvalidConfig, m);
    let mut text = String::new();
    for (key, value) in pairs {
        if setting(key).is_none() {
            return Err(invalid(format!("Unknown topic config name: {key}")));
        }
        if value.contains(['\n', '\r']) {
            return Err(invalid(format!(
                "{key}: a value may not contain a line break"
            )));
        }
        text.push_str(&format!("{key}={value}\n"));
    }
    let config = PartitionConfig::decode(&text).map_err(|(_, reason)| invalid(reason))?;
    config
        .resolve(defaults)
        .log
        .validate()
        .map_err(|e| invalid(e.to_string()))?;
    Ok(config)
}

/// The settings a topic sets itself, as `key -> value` in the engine's spelling.
fn own_pairs(own: &PartitionConfig) -> BTreeMap<String, String> {
    own.encode()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// CreateTopics

pub async fn create_topics(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: CreateTopicsRequest = request.body()?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in &body.topics {
        *counts.entry(t.name.0.to_string()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(body.topics.len());
    let mut answered = HashSet::new();
    for topic in body.topics {
        let name = topic.name.0.to_string();
        // A name given twice is refused once, as Kafka answers it (one result per name).
        if !answered.insert(name.clone()) {
            continue;
        }
        let result = if counts[&name] > 1 {
            Err((
                ResponseError::InvalidRequest,
                format!("topic {name} is given more than once in the request"),
            ))
        } else {
            create_one(broker, &topic, body.validate_only).await
        };
        results.push(match result {
            Ok(result) => result,
            Err((error, message)) => CreatableTopicResult::default()
                .with_name(topic.name)
                .with_error_code(error.code())
                .with_error_message(Some(text(message)))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        });
    }
    let response = CreateTopicsResponse::default().with_topics(results);
    Ok(Reply::Now(respond(request, &response)?))
}

async fn create_one(
    broker: &Arc<Broker>,
    topic: &CreatableTopic,
    validate_only: bool,
) -> Result<CreatableTopicResult, Refusal> {
    let name = topic.name.0.to_string();
    if RESERVED_TOPICS.contains(&name.as_str()) || broker.store.topic(&name).is_some() {
        return Err((
            ResponseError::TopicAlreadyExists,
            format!("Topic '{name}' already exists."),
        ));
    }
    crate::store::validate_topic_name(&name).map_err(store_refusal)?;
    let partitions = partition_count(broker, topic)?;
    let defaults = Defaults::of(broker)?;
    let (_, config) = creation_settings(topic, &defaults)?;
    let id = if validate_only {
        Uuid::nil()
    } else {
        let store = Arc::clone(&broker.store);
        let (topic_name, settings) = (name.clone(), config.clone());
        let created = blocking(move || store.create_new_topic(&topic_name, partitions, &settings))
            .await
            .map_err(store_refusal)?;
        tracing::info!(topic = %name, partitions, "created topic (CreateTopics)");
        created.id
    };
    let configs = created_configs(&config, &defaults);
    // Kafka answers a success with a null message (the generated default is empty).
    Ok(CreatableTopicResult::default()
        .with_error_message(None)
        .with_name(topic.name.clone())
        .with_topic_id(id)
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(Some(configs)))
}

/// The settings of a topic to create, from CreateTopics' configs over `defaults`: each name
/// and value as given (a setting given twice takes its last value, as Kafka takes it), and
/// what the engine reads them as, checked.
fn creation_settings(
    topic: &CreatableTopic,
    defaults: &ManagerConfig,
) -> Result<(BTreeMap<String, String>, PartitionConfig), Refusal> {
    let mut given = BTreeMap::new();
    for c in &topic.configs {
        let Some(value) = &c.value else {
            return Err((
                ResponseError::InvalidConfig,
                format!("Null value not supported for topic configs: {}", c.name),
            ));
        };
        given.insert(c.name.to_string(), value.to_string());
    }
    let pairs: Vec<(String, String)> = given.clone().into_iter().collect();
    let config = parse_settings(&pairs, defaults)?;
    Ok((given, config))
}

/// [`creation_settings`] for cluster mode's controller (api/cluster_admin.rs): checked over
/// the broker's defaults as a single broker checks them, and over `log_defaults` (the raft
/// host's, which the replicas' logs resolve them over). The settings cluster mode refuses
/// are the caller's to refuse.
pub fn cluster_creation_settings(
    broker: &Broker,
    topic: &CreatableTopic,
    log_defaults: &ManagerConfig,
) -> Result<ClusterSettings, Refusal> {
    let defaults = Defaults::of(broker)?;
    let (given, config) = creation_settings(topic, &defaults)?;
    config
        .resolve(log_defaults)
        .log
        .validate()
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    let answer = created_configs(&config, &defaults);
    Ok(ClusterSettings {
        given,
        config,
        answer,
    })
}

/// A new topic's settings on cluster mode's controller ([`cluster_creation_settings`]).
pub struct ClusterSettings {
    /// Each name and value as given: the topic's metadata record keeps them.
    pub given: BTreeMap<String, String>,
    /// What the engine reads them as.
    pub config: PartitionConfig,
    /// The effective settings CreateTopics answers (v5+), as a single broker answers them.
    pub answer: Vec<CreatableTopicConfigs>,
}

/// The effective settings a CreateTopics success carries (v5+): each setting's value over
/// `defaults` and where it comes from.
fn created_configs(config: &PartitionConfig, defaults: &Defaults) -> Vec<CreatableTopicConfigs> {
    describe_topic_settings(config, defaults, None, false, false)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(c.name)
                .with_value(c.value)
                .with_config_source(c.config_source)
        })
        .collect()
}

/// The partition count of a topic to create: from `num_partitions` (-1: the broker's
/// default) or a replica assignment onto this one broker.
fn partition_count(broker: &Broker, topic: &CreatableTopic) -> Result<i32, Refusal> {
    let node = broker.endpoint.node_id;
    if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err((
                ResponseError::InvalidRequest,
                "Both numPartitions or replicationFactor and replicasAssignments were set. \
                 Both cannot be used at the same time."
                    .to_string(),
            ));
        }
        let mut indexes: Vec<i32> = topic
            .assignments
            .iter()
            .map(|a| a.partition_index)
            .collect();
        indexes.sort_unstable();
        if indexes.iter().enumerate().any(|(i, &p)| p != i as i32) {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                "partitions must be numbered 0..n, each once".to_string(),
            ));
        }
        for a in &topic.assignments {
            if a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>() != [node] {
                return Err((
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "partition {}: the only replica can be broker {node}",
                        a.partition_index
                    ),
                ));
            }
        }
        return Ok(indexes.len() as i32);
    }
    let partitions = match topic.num_partitions {
        -1 => broker.default_partitions,
        n if n >= 1 => n,
        n => {
            return Err((
                ResponseError::InvalidPartitions,
                format!("Number of partitions was set to an invalid non-positive value: {n}."),
            ))
        }
    };
    match topic.replication_factor {
        -1 | 1 => Ok(partitions),
        r if r < 1 => Err((
            ResponseError::InvalidReplicationFactor,
            format!("Replication factor must be larger than 0, or -1 to use the default value; found {r}."),
        )),
        r => Err((
            ResponseError::InvalidReplicationFactor,
            format!(
                "Unable to replicate the partition {r} time(s): The target replication factor \
                 of {r} cannot be reached because only 1 broker(s) are registered."
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// DeleteTopics

pub async fn delete_topics(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteTopicsRequest = request.body()?;
    // v6 names topics by name or id; earlier versions by name.
    let mut wanted: Vec<(Option<TopicName>, Uuid)> = body
        .topic_names
        .into_iter()
        .map(|n| (Some(n), Uuid::nil()))
        .collect();
    wanted.extend(body.topics.into_iter().map(|t| (t.name, t.topic_id)));
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let found = match (&name, id) {
            (Some(name), _) => broker
                .store
                .topic(&name.0)
                .ok_or(ResponseError::UnknownTopicOrPartition),
            (None, id) if !id.is_nil() => broker
                .store
                .topic_by_id(id)
                .ok_or(ResponseError::UnknownTopicId),
            (None, _) => Err(ResponseError::InvalidRequest),
        };
        let result = DeletableTopicResult::default()
            .with_name(name.clone())
            .with_topic_id(id);
        let topic = match found {
            Ok(topic) => topic,
            Err(error) => {
                results.push(
                    result
                        .with_error_code(error.code())
                        .with_error_message(Some(text(match error {
                            ResponseError::InvalidRequest => {
                                "neither a topic name nor a topic id".to_string()
                            }
                            _ => "This server does not host this topic.".to_string(),
                        }))),
                );
                continue;
            }
        };
        let store = Arc::clone(&broker.store);
        let topic_name = topic.name.clone();
        let result = result
            .with_name(Some(TopicName(text(topic.name.clone()))))
            .with_topic_id(topic.id);
        results.push(
            match blocking(move || store.delete_topic(&topic_name)).await {
                Ok(_) => {
                    tracing::info!(topic = %topic.name, "deleted topic (DeleteTopics)");
                    result
                }
                Err(e) => {
                    let (error, message) = store_refusal(e);
                    result
                        .with_error_code(error.code())
                        .with_error_message(Some(text(message)))
                }
            },
        );
    }
    let response = DeleteTopicsResponse::default().with_responses(results);
    Ok(Reply::Now(respond(request, &response)?))
}

// ---------------------------------------------------------------------------------------------
// CreatePartitions

pub async fn create_partitions(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: CreatePartitionsRequest = request.body()?;
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> = body
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|n| !seen.insert(n.clone()))
        .collect();
    let node = broker.endpoint.node_id;
    let mut results = Vec::with_capacity(body.topics.len());
    for t in body.topics {
        let name = t.name.0.to_string();
        let outcome: Result<(), Refusal> = async {
            if duplicates.contains(&name) {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("Duplicate topic in request: {name}"),
                ));
            }
            let topic = broker.store.topic(&name).ok_or_else(|| {
                (
                    ResponseError::UnknownTopicOrPartition,
                    format!("The topic '{name}' does not exist."),
                )
            })?;
            let current = topic.partitions.len() as i32;
            if t.count <= current {
                return Err((
                    ResponseError::InvalidPartitions,
                    format!(
                        "Topic currently has {current} partitions, which is higher than the requested {}.",
                        t.count
                    ),
                ));
            }
            if let Some(assignments) = &t.assignments {
                if assignments.len() as i32 != t.count - current {
                    return Err((
                        ResponseError::InvalidReplicaAssignment,
                        format!(
                            "Attempted to add {} additional partition(s), but only {} assignment(s) were specified.",
                            t.count - current,
                            assignments.len()
                        ),
                    ));
                }
                if assignments
                    .iter()
                    .any(|a| a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>() != [node])
                {
                    return Err((
                        ResponseError::InvalidReplicaAssignment,
                        format!("the only replica of a partition can be broker {node}"),
                    ));
                }
            }
            if body.validate_only {
                return Ok(());
            }
            let store = Arc::clone(&broker.store);
            let (topic_name, count) = (name.clone(), t.count);
            blocking(move || store.add_partitions(&topic_name, count))
                .await
                .map_err(store_refusal)?;
            tracing::info!(topic = %name, partitions = t.count, "added partitions (CreatePartitions)");
            Ok(())
        }
        .await;
        let result = CreatePartitionsTopicResult::default().with_name(t.name);
        results.push(match outcome {
            Ok(()) => result,
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        });
    }
    let response = CreatePartitionsResponse::default().with_results(results);
    Ok(Reply::Now(respond(request, &response)?))
}

// ---------------------------------------------------------------------------------------------
// DescribeConfigs

pub async fn describe_configs(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let own = |name: &str| match broker.store.topic(name) {
        None => Ok(None),
        Some(_) => broker
            .store
            .topic_settings(name)
            .map(Some)
            .map_err(store_refusal),
    };
    describe_configs_of(broker, request, &own, true)
}

/// A topic's own settings for DescribeConfigs: `Ok(None)` when there is no such topic.
pub type OwnSettings<'a> = &'a dyn Fn(&str) -> Result<Option<PartitionConfig>, Refusal>;

/// DescribeConfigs with the topics' own settings from `own` (the store's on a single broker,
/// the cluster image's in cluster mode); group resources (share groups) only when `groups`.
pub fn describe_configs_of(
    broker: &Broker,
    request: &Request,
    own: OwnSettings<'_>,
    groups: bool,
) -> Result<Reply, HandleError> {
    let body: DescribeConfigsRequest = request.body()?;
    let mut results = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let keys: Option<Vec<String>> = resource
            .configuration_keys
            .as_ref()
            .map(|keys| keys.iter().map(|k| k.to_string()).collect());
        let described = match resource.resource_type {
            RESOURCE_TOPIC => describe_topic(
                broker,
                own,
                &resource.resource_name,
                keys.as_deref(),
                body.include_synonyms,
                body.include_documentation,
            ),
            // Share group settings (share_admin.rs).
            super::share_admin::RESOURCE_GROUP if groups => {
                Ok(super::share_admin::describe_group_configs(
                    broker,
                    &resource.resource_name,
                    keys.as_deref(),
                    body.include_documentation,
                ))
            }
            RESOURCE_BROKER => check_broker_name(broker, &resource.resource_name).and_then(|()| {
                describe_broker(
                    broker,
                    keys.as_deref(),
                    body.include_synonyms,
                    body.include_documentation,
                )
            }),
            other => Err(unsupported_resource(other)),
        };
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name);
        results.push(match described {
            // Kafka answers a described resource with an empty message, not a null one.
            Ok(configs) => result
                .with_configs(configs)
                .with_error_message(Some(text(""))),
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        });
    }
    let response = DescribeConfigsResponse::default().with_results(results);
    Ok(Reply::Now(respond(request, &response)?))
}

pub(super) fn unsupported_resource(resource_type: i8) -> Refusal {
    (
        ResponseError::InvalidRequest,
        format!("resource type {resource_type} is not served: this broker has topic (2), broker (4) and group (32) configurations"),
    )
}

/// A broker resource names this broker by its id, or is the empty name (the cluster default).
fn check_broker_name(broker: &Broker, name: &str) -> Result<(), Refusal> {
    let node = broker.endpoint.node_id;
    if name.is_empty() || name == node.to_string() {
        Ok(())
    } else {
        Err((
            ResponseError::InvalidRequest,
            format!("Unexpected broker id, expected {node} or empty string, but received {name}"),
        ))
    }
}

fn describe_topic(
    broker: &Broker,
    own: OwnSettings<'_>,
    name: &str,
    keys: Option<&[String]>,
    synonyms: bool,
    documentation: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let Some(own) = own(name)? else {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            format!("The topic '{name}' does not exist."),
        ));
    };
    let defaults = Defaults::of(broker)?;
    Ok(describe_topic_settings(
        &own,
        &defaults,
        keys,
        synonyms,
        documentation,
    ))
}

/// Each topic setting (those in `keys`, when given) with its value and where it comes from:
/// the topic's own, or the broker's default (set by a flag, or built in).
fn describe_topic_settings(
    own: &PartitionConfig,
    defaults: &Defaults,
    keys: Option<&[String]>,
    synonyms: bool,
    documentation: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let effective = Effective::of(own, defaults);
    let default = Effective::of(&PartitionConfig::default(), defaults);
    let set = own_pairs(own);
    SETTINGS
        .iter()
        .filter(|s| keys.is_none_or(|k| k.iter().any(|k| k == s.topic)))
        .map(|s| {
            let default_source = if s.flag {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            let value = (s.value)(&effective);
            let source = if set.contains_key(s.topic) {
                SOURCE_TOPIC
            } else {
                default_source
            };
            let mut list = Vec::new();
            if synonyms {
                if source == SOURCE_TOPIC {
                    list.push(
                        DescribeConfigsSynonym::default()
                            .with_name(text(s.topic))
                            .with_value(Some(text(value.clone())))
                            .with_source(SOURCE_TOPIC),
                    );
                }
                list.push(
                    DescribeConfigsSynonym::default()
                        .with_name(text(s.broker))
                        .with_value(Some(text((s.value)(&default))))
                        .with_source(default_source),
                );
            }
            DescribeConfigsResourceResult::default()
                .with_name(text(s.topic))
                .with_value(Some(text(value)))
                .with_config_source(source)
                .with_synonyms(list)
                .with_config_type(s.kind)
                .with_documentation(documentation.then(|| text(s.doc)))
        })
        .collect()
}

/// The broker's settings that have a Kafka name: the defaults of every topic setting, and
/// those of its flags that Kafka has.
fn describe_broker(
    broker: &Broker,
    keys: Option<&[String]>,
    synonyms: bool,
    documentation: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let defaults = Defaults::of(broker)?;
    let default = Effective::of(&PartitionConfig::default(), &defaults);
    let mut all: Vec<(String, String, i8, i8, &str)> = SETTINGS
        .iter()
        .map(|s| {
            let source = if s.flag {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            (
                s.broker.to_string(),
                (s.value)(&default),
                source,
                s.kind,
                s.doc,
            )
        })
        .collect();
    let node = broker.endpoint.node_id.to_string();
    all.extend([
        (
            "auto.create.topics.enable".to_string(),
            broker.auto_create_topics.to_string(),
            SOURCE_STATIC_BROKER,
            TYPE_BOOLEAN,
            "Metadata creates a topic it is asked for (--no-auto-create-topics turns it off)",
        ),
        (
            "broker.id".to_string(),
            node.clone(),
            SOURCE_STATIC_BROKER,
            TYPE_INT,
            "this broker's id (--node-id)",
        ),
        (
            "log.dirs".to_string(),
            broker.store.dir().display().to_string(),
            SOURCE_STATIC_BROKER,
            TYPE_STRING,
            "the data directory (--data)",
        ),
        (
            "node.id".to_string(),
            node,
            SOURCE_STATIC_BROKER,
            TYPE_INT,
            "this broker's id (--node-id)",
        ),
        (
            "num.partitions".to_string(),
            broker.default_partitions.to_string(),
            SOURCE_STATIC_BROKER,
            TYPE_INT,
            "partitions of a topic created by Metadata or by CreateTopics with -1 (--partitions)",
        ),
    ]);
    all.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(all
        .into_iter()
        .filter(|(name, ..)| keys.is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|(name, value, source, kind, doc)| {
            let list = if synonyms {
                vec![DescribeConfigsSynonym::default()
                    .with_name(text(name.clone()))
                    .with_value(Some(text(value.clone())))
                    .with_source(source)]
            } else {
                Vec::new()
            };
            DescribeConfigsResourceResult::default()
                .with_name(text(name))
                .with_value(Some(text(value)))
                .with_read_only(true)
                .with_config_source(source)
                .with_synonyms(list)
                .with_config_type(kind)
                .with_documentation(documentation.then(|| text(doc)))
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// IncrementalAlterConfigs

pub async fn incremental_alter_configs(
    broker: &Arc<Broker>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: IncrementalAlterConfigsRequest = request.body()?;
    let mut responses = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC => alter_topic(broker, &resource, body.validate_only).await,
            // Share group settings (share_admin.rs); their write is an fsync.
            super::share_admin::RESOURCE_GROUP => {
                let (b, r, v) = (Arc::clone(broker), resource.clone(), body.validate_only);
                tokio::task::spawn_blocking(move || {
                    super::share_admin::alter_group_configs(&b, &r, v)
                })
                .await
                .unwrap_or_else(|e| Err((ResponseError::UnknownServerError, e.to_string())))
            }
            RESOURCE_BROKER => alter_broker(broker, &resource),
            other => Err(unsupported_resource(other)),
        };
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name);
        responses.push(match outcome {
            Ok(()) => response.with_error_message(None),
            Err((error, message)) => response
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        });
    }
    let response = IncrementalAlterConfigsResponse::default().with_responses(responses);
    Ok(Reply::Now(respond(request, &response)?))
}

/// A broker resource's change: Kafka's answer for a setting that is not dynamic (the broker's
/// settings are its command-line flags, and none is dynamic). The same in cluster mode.
pub(super) fn alter_broker(
    broker: &Broker,
    resource: &AlterConfigsResource,
) -> Result<(), Refusal> {
    check_broker_name(broker, &resource.resource_name)?;
    let names: Vec<String> = resource
        .configs
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    Err((
        ResponseError::InvalidRequest,
        format!(
            "Cannot update these configs dynamically: [{}] (this broker's settings are its \
             command-line flags)",
            names.join(", ")
        ),
    ))
}

/// A legacy AlterConfigs resource, which replaces a resource's whole set of settings, as
/// IncrementalAlterConfigs' operations over the topic's own settings `own`: SET for each
/// setting given, DELETE for each one the topic sets that is not given. The checks are then
/// IncrementalAlterConfigs' (a key twice and a null value INVALID_REQUEST, unknown names and
/// bad values INVALID_CONFIG).
pub(super) fn replacing(
    own: &PartitionConfig,
    resource: &alter_configs_request::AlterConfigsResource,
) -> AlterConfigsResource {
    use incremental_alter_configs_request::AlterableConfig;
    let given: HashSet<&str> = resource.configs.iter().map(|c| c.name.as_str()).collect();
    let mut configs: Vec<AlterableConfig> = resource
        .configs
        .iter()
        .map(|c| {
            AlterableConfig::default()
                .with_name(c.name.clone())
                .with_config_operation(OP_SET)
                .with_value(c.value.clone())
        })
        .collect();
    for key in own_pairs(own).into_keys() {
        if !given.contains(key.as_str()) {
            configs.push(
                AlterableConfig::default()
                    .with_name(text(key))
                    .with_config_operation(OP_DELETE)
                    .with_value(None),
            );
        }
    }
    AlterConfigsResource::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone())
        .with_configs(configs)
}

/// The legacy AlterConfigs (API 33): each TOPIC resource's settings replaced by those given
/// (IncrementalAlterConfigs' checks and application, [`replacing`]), BROKER resources refused
/// as IncrementalAlterConfigs refuses them.
pub async fn alter_configs(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: AlterConfigsRequest = request.body()?;
    let mut responses = Vec::with_capacity(body.resources.len());
    for resource in body.resources {
        let name = resource.resource_name.to_string();
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC => match broker.store.topic(&name) {
                None => Err(unknown_topic(&name)),
                Some(_) => match broker.store.topic_settings(&name) {
                    Ok(own) => {
                        alter_topic(broker, &replacing(&own, &resource), body.validate_only).await
                    }
                    Err(e) => Err(store_refusal(e)),
                },
            },
            RESOURCE_BROKER => {
                alter_broker(broker, &replacing(&PartitionConfig::default(), &resource))
            }
            other => Err(unsupported_resource(other)),
        };
        responses.push(legacy_answer(&resource, outcome));
    }
    let response = AlterConfigsResponse::default().with_responses(responses);
    Ok(Reply::Now(respond(request, &response)?))
}

/// One resource's line of an AlterConfigs answer.
pub(super) fn legacy_answer(
    resource: &alter_configs_request::AlterConfigsResource,
    outcome: Result<(), Refusal>,
) -> alter_configs_response::AlterConfigsResourceResponse {
    let line = alter_configs_response::AlterConfigsResourceResponse::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    match outcome {
        Ok(()) => line.with_error_message(None),
        Err((error, message)) => line
            .with_error_code(error.code())
            .with_error_message(Some(text(message))),
    }
}

/// The topic `name` is not known: Kafka's answer.
pub(super) fn unknown_topic(name: &str) -> Refusal {
    (
        ResponseError::UnknownTopicOrPartition,
        format!("The topic '{name}' does not exist."),
    )
}

async fn alter_topic(
    broker: &Arc<Broker>,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), Refusal> {
    let name = resource.resource_name.to_string();
    if broker.store.topic(&name).is_none() {
        return Err(unknown_topic(&name));
    }
    let own = broker.store.topic_settings(&name).map_err(store_refusal)?;
    let defaults = Defaults::of(broker)?;
    let (_, config) = altered_settings(&own, resource, &defaults)?;
    if validate_only {
        return Ok(());
    }
    let store = Arc::clone(&broker.store);
    let topic_name = name.clone();
    blocking(move || store.set_topic_settings(&topic_name, &config))
        .await
        .map_err(store_refusal)?;
    tracing::info!(topic = %name, "altered topic settings (IncrementalAlterConfigs), applied live");
    Ok(())
}

/// [`altered_settings`] for cluster mode's controller (api/cluster_configs.rs): checked over
/// the broker's defaults as a single broker checks them, and over `log_defaults` (the raft
/// host's, which the replicas' logs resolve them over). The settings cluster mode refuses are
/// the caller's to refuse.
pub fn cluster_altered_settings(
    broker: &Broker,
    own: &PartitionConfig,
    resource: &AlterConfigsResource,
    log_defaults: &ManagerConfig,
) -> Result<(BTreeMap<String, String>, PartitionConfig), Refusal> {
    let defaults = Defaults::of(broker)?;
    let (pairs, config) = altered_settings(own, resource, &defaults)?;
    config
        .resolve(log_defaults)
        .log
        .validate()
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    Ok((pairs, config))
}

/// A topic's whole set of own settings after `resource`'s operations (SET, DELETE, APPEND,
/// SUBTRACT, each key once) over `own`, and what the engine reads them as, checked over
/// `defaults`: Kafka's answers for an unknown name, a bad value or operation.
fn altered_settings(
    own: &PartitionConfig,
    resource: &AlterConfigsResource,
    defaults: &Defaults,
) -> Result<(BTreeMap<String, String>, PartitionConfig), Refusal> {
    let mut pairs = own_pairs(own);
    let mut seen = HashSet::new();
    for alter in &resource.configs {
        let key = alter.name.to_string();
        if !seen.insert(key.clone()) {
            return Err((
                ResponseError::InvalidRequest,
                format!("Error due to duplicate config keys: {key}"),
            ));
        }
        let Some(s) = setting(&key) else {
            return Err((
                ResponseError::InvalidConfig,
                format!("Unknown topic config name: {key}"),
            ));
        };
        let value = alter.value.as_ref().map(|v| v.to_string());
        match alter.config_operation {
            OP_SET => {
                let Some(value) = value else {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("Null value not supported for : {key}"),
                    ));
                };
                pairs.insert(key, value);
            }
            OP_DELETE => {
                pairs.remove(&key);
            }
            op @ (OP_APPEND | OP_SUBTRACT) => {
                if s.kind != TYPE_LIST {
                    return Err((
                        ResponseError::InvalidConfig,
                        format!(
                            "Config value {} is not allowed for config key: {key}",
                            if op == OP_APPEND {
                                "append"
                            } else {
                                "subtract"
                            }
                        ),
                    ));
                }
                let current = pairs
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| (s.value)(&Effective::of(own, defaults)));
                let mut items: Vec<String> = current
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                for item in value.unwrap_or_default().split(',').map(str::trim) {
                    if op == OP_APPEND && !items.iter().any(|i| i == item) {
                        items.push(item.to_string());
                    } else if op == OP_SUBTRACT {
                        items.retain(|i| i != item);
                    }
                }
                pairs.insert(key, items.join(","));
            }
            op => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("Unknown config operation {op} for {key}"),
                ))
            }
        }
    }
    let list: Vec<(String, String)> = pairs.clone().into_iter().collect();
    let config = parse_settings(&list, defaults)?;
    Ok((pairs, config))
}

// ---------------------------------------------------------------------------------------------
// DescribeCluster

pub fn describe_cluster(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let endpoint = &broker.endpoint;
    let me = (
        endpoint.node_id,
        endpoint.host.clone(),
        i32::from(endpoint.port),
    );
    cluster_answer(
        request,
        broker.store.cluster_id(),
        endpoint.node_id,
        vec![me],
    )
}

/// DescribeCluster's answer: the cluster id, the controller and the brokers (id, host, port),
/// this broker alone or every node of a cluster.
pub fn cluster_answer(
    request: &Request,
    cluster_id: &str,
    controller: i32,
    brokers: Vec<(i32, String, i32)>,
) -> Result<Reply, HandleError> {
    let body: DescribeClusterRequest = request.body()?;
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(body.endpoint_type)
        .with_cluster_id(text(cluster_id))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(if body.include_cluster_authorized_operations {
            CLUSTER_OPERATIONS
        } else {
            i32::MIN
        });
    // Endpoint type 1 is the brokers; 2, the controllers, is asked of controllers only.
    if body.endpoint_type == 1 {
        response = response.with_brokers(
            brokers
                .into_iter()
                .map(|(id, host, port)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(id))
                        .with_host(text(host))
                        .with_port(port)
                })
                .collect(),
        );
    } else {
        // As Kafka's brokers answer: the controllers' type is asked of the wrong endpoint,
        // any other is no type at all.
        let error = match body.endpoint_type {
            2 => ResponseError::MismatchedEndpointType,
            _ => ResponseError::UnsupportedEndpointType,
        };
        response = response
            .with_error_code(error.code())
            .with_error_message(Some(text(format!(
                "endpoint type {} is not served by a broker",
                body.endpoint_type
            ))));
    }
    Ok(Reply::Now(respond(request, &response)?))
}

/// What a client may do on the cluster without an authorizer (Kafka answers every operation
/// of the CLUSTER resource): CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
/// DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12, one bit each.
const CLUSTER_OPERATIONS: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);
