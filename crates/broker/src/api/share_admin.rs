//! Share group administration: the group configurations a client sets on a share group
//! (IncrementalAlterConfigs and DescribeConfigs on GROUP resources), and the share group
//! offsets admin APIs of KIP-932 (AlterShareGroupOffsets, DescribeShareGroupOffsets,
//! DeleteShareGroupOffsets), which read and reset the share-partitions' start offsets.

use std::sync::Arc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::share_groups::other_group_type;
use super::share_logs::ShareLogs;
use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::errors;

fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Kafka's default message of the errors these APIs answer with one (`Errors.message()`).
fn default_message(error: ResponseError) -> StrBytes {
    str_bytes(match error {
        ResponseError::UnknownTopicOrPartition => "This server does not host this topic-partition.",
        ResponseError::NonEmptyGroup => "The group is not empty.",
        _ => "",
    })
}

// Group configurations (KIP-848/KIP-932's GROUP config resources): the share settings a
// client may set per group with IncrementalAlterConfigs and read with DescribeConfigs.

/// Kafka's `ConfigResource.Type.GROUP`.
pub(super) const RESOURCE_GROUP: i8 = 32;
/// Kafka's `ConfigSource` codes for a group setting: set on the group, or the default.
const SOURCE_GROUP: i8 = 8;
const SOURCE_DEFAULT: i8 = 5;
/// Kafka's `group.share.min.record.lock.duration.ms` and `...max...` defaults, the bounds a
/// group's `share.record.lock.duration.ms` must keep.
const MIN_LOCK_DURATION_MS: i64 = 15_000;
const MAX_LOCK_DURATION_MS: i64 = 60_000;

/// The group settings this broker serves: name, config type (Kafka's `ConfigDef.Type`:
/// STRING 2, INT 3), documentation.
const GROUP_SETTINGS: &[(&str, i8, &str)] = &[
    (
        crate::share::AUTO_OFFSET_RESET,
        2,
        "where a share group's new share-partitions start: latest (the default) or earliest",
    ),
    (
        crate::share::RECORD_LOCK_DURATION_MS,
        3,
        "how long a share group member holds the records it acquired",
    ),
];

/// The group settings Kafka has that this broker does not serve.
const UNSERVED_GROUP_SETTINGS: &[&str] = &[
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.isolation.level",
    "share.delivery.count.limit",
];

fn group_default(broker: &Broker, name: &str) -> String {
    if name == crate::share::RECORD_LOCK_DURATION_MS {
        broker
            .shares
            .settings()
            .lock_duration
            .as_millis()
            .to_string()
    } else {
        "latest".to_string()
    }
}

/// DescribeConfigs of a GROUP resource: each served setting (those in `keys`, when given),
/// the group's own value or the broker's default.
pub(super) fn describe_group_configs(
    broker: &Broker,
    group: &str,
    keys: Option<&[String]>,
    documentation: bool,
) -> Vec<kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult> {
    use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
    let own = broker.shares.configs(group);
    GROUP_SETTINGS
        .iter()
        .filter(|(name, _, _)| keys.is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|&(name, kind, doc)| {
            let (value, source) = match own.get(name) {
                Some(v) => (v.clone(), SOURCE_GROUP),
                None => (group_default(broker, name), SOURCE_DEFAULT),
            };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(name))
                .with_value(Some(str_bytes(value)))
                .with_config_source(source)
                .with_config_type(kind)
                .with_documentation(documentation.then(|| str_bytes(doc)))
        })
        .collect()
}

/// IncrementalAlterConfigs of a GROUP resource: SET (0) and DELETE (1) of the served settings,
/// validated as Kafka's `GroupConfig.validate`; durable before it is answered. Blocking.
pub(super) fn alter_group_configs(
    broker: &Broker,
    resource: &kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let group = resource.resource_name.to_string();
    if group.is_empty() {
        return Err((
            ResponseError::InvalidRequest,
            "Group name must not be empty".into(),
        ));
    }
    let invalid = |message: String| (ResponseError::InvalidConfig, message);
    let mut configs = broker.shares.configs(&group);
    for c in &resource.configs {
        let name = c.name.to_string();
        if !GROUP_SETTINGS.iter().any(|(n, _, _)| *n == name) {
            return Err(invalid(
                if UNSERVED_GROUP_SETTINGS.contains(&name.as_str()) {
                    format!("Group config {name} is not served by this broker")
                } else {
                    format!("Unknown group config name: {name}")
                },
            ));
        }
        match c.config_operation {
            1 => {
                configs.remove(&name);
            }
            0 => {
                let value = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                match name.as_str() {
                    crate::share::AUTO_OFFSET_RESET if value == "latest" || value == "earliest" => {
                    }
                    crate::share::AUTO_OFFSET_RESET if value.starts_with("by_duration:") => {
                        return Err(invalid(format!(
                            "Invalid value {value} for configuration {name}: by_duration is not \
                             served by this broker (latest or earliest)"
                        )))
                    }
                    // Kafka's messages (`GroupConfig.validate`).
                    crate::share::AUTO_OFFSET_RESET => {
                        return Err(invalid(format!(
                            "Invalid value {value} for configuration {name}: Invalid value \
                             `{value}` for configuration {name}. The value must be either \
                             'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
                        )))
                    }
                    _ => match value.trim().parse::<i32>() {
                        Ok(ms)
                            if (MIN_LOCK_DURATION_MS..=MAX_LOCK_DURATION_MS)
                                .contains(&(ms as i64)) => {}
                        Ok(_) => {
                            return Err(invalid(format!(
                                "{name} must be in the range {MIN_LOCK_DURATION_MS} to \
                                 {MAX_LOCK_DURATION_MS} inclusive."
                            )))
                        }
                        Err(_) => {
                            return Err(invalid(format!(
                                "Invalid value {value} for configuration {name}: Not a number of \
                                 type INT"
                            )))
                        }
                    },
                }
                configs.insert(name, value);
            }
            op => {
                return Err(invalid(format!(
                    "Config operation {op} is not allowed on {name}, which is not a list"
                )))
            }
        }
    }
    if validate_only {
        return Ok(());
    }
    broker.shares.set_configs(&group, configs).map_err(|e| {
        (
            e,
            "The group configuration could not be stored.".to_string(),
        )
    })
}

// The share group offsets admin APIs.

/// AlterShareGroupOffsets: resets the start offset of each named partition (nothing stays in
/// flight); the group is created if unknown. Refused whole for an empty group id
/// (INVALID_GROUP_ID), a classic or consumer group id (GROUP_ID_NOT_FOUND) and a share group
/// with members (NON_EMPTY_GROUP); an unknown topic or partition is its partition's
/// UNKNOWN_TOPIC_OR_PARTITION.
pub async fn alter_offsets(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: AlterShareGroupOffsetsRequest = request.body()?;
    let group = body.group_id.0.to_string();
    let refuse = |error: ResponseError, message: Option<String>| -> Result<Reply, HandleError> {
        let response = AlterShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(message.map(str_bytes));
        Ok(Reply::Now(respond(request, &response)?))
    };
    if group.is_empty() {
        return refuse(ResponseError::InvalidGroupId, None);
    }
    if other_group_type(broker, &group) {
        return refuse(
            ResponseError::GroupIdNotFound,
            Some(format!("Group {group} is not a share group.")),
        );
    }
    let logs = ShareLogs::of(broker);
    let mut offsets = Vec::new();
    let mut answers = Vec::new();
    for t in &body.topics {
        let topic_id = logs.topic_id(&t.topic_name).unwrap_or_default();
        let count = logs.partition_count(&t.topic_name).unwrap_or(0);
        let partitions: Vec<(i32, Option<ResponseError>)> = t
            .partitions
            .iter()
            .map(|p| {
                let exists = (0..count).contains(&p.partition_index);
                if !exists {
                    return (
                        p.partition_index,
                        Some(ResponseError::UnknownTopicOrPartition),
                    );
                }
                offsets.push(((group.clone(), topic_id, p.partition_index), p.start_offset));
                (p.partition_index, None)
            })
            .collect();
        answers.push((t.topic_name.clone(), topic_id, partitions));
    }
    let b = Arc::clone(broker);
    let g = group.clone();
    let stored = tokio::task::spawn_blocking(move || b.shares.alter_offsets(&g, &offsets))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    if let Err(e) = stored {
        let message = (e == ResponseError::NonEmptyGroup).then(|| default_message(e).to_string());
        return refuse(e, message);
    }
    let topics = answers
        .into_iter()
        .map(|(name, id, partitions)| {
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(name)
                .with_topic_id(id)
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, error)| {
                            AlterShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(index)
                                .with_error_code(errors::code(error))
                                .with_error_message(error.map(default_message))
                        })
                        .collect(),
                )
        })
        .collect();
    let response = AlterShareGroupOffsetsResponse::default().with_responses(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DescribeShareGroupOffsets: each group's share-partitions (the named ones, or every one it
/// has when the topics are null) with their start offset and (v1) lag; a partition the group
/// never started, of an unknown topic or an unknown group included, has start offset and lag
/// -1 and no error, as Kafka 4.4 answers.
pub fn describe_offsets(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DescribeShareGroupOffsetsRequest = request.body()?;
    let logs = ShareLogs::of(broker);
    let groups = body
        .groups
        .into_iter()
        .map(|g| {
            let id = g.group_id.0.to_string();
            let states = broker.shares.describe_offsets(&id).unwrap_or_default();
            let partition = |topic_id: uuid::Uuid, index: i32| {
                let log_end = logs
                    .partition(topic_id, index)
                    .ok()
                    .map(|p| p.log_end_offset());
                let answer = DescribeShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(index)
                    .with_leader_epoch(0);
                match (log_end, states.get(&(topic_id, index))) {
                    (None, _) | (Some(_), None) => answer.with_start_offset(-1).with_lag(-1),
                    (Some(end), Some(&(start, complete))) => answer
                        .with_start_offset(start)
                        .with_lag((end - start - complete).max(0)),
                }
            };
            let topics = match g.topics {
                Some(topics) => topics
                    .into_iter()
                    .map(|t| {
                        let topic_id = logs.topic_id(&t.topic_name).unwrap_or_default();
                        DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_id(topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|&p| partition(topic_id, p))
                                    .collect(),
                            )
                            .with_topic_name(t.topic_name)
                    })
                    .collect(),
                None => {
                    let mut topics: Vec<DescribeShareGroupOffsetsResponseTopic> = Vec::new();
                    for &(topic_id, index) in states.keys() {
                        let Some(name) = logs.topic_name(topic_id) else {
                            continue;
                        };
                        let answer = partition(topic_id, index);
                        match topics.iter_mut().find(|t| t.topic_id == topic_id) {
                            Some(t) => t.partitions.push(answer),
                            None => topics.push(
                                DescribeShareGroupOffsetsResponseTopic::default()
                                    .with_topic_name(TopicName(str_bytes(name)))
                                    .with_topic_id(topic_id)
                                    .with_partitions(vec![answer]),
                            ),
                        }
                    }
                    topics
                }
            };
            DescribeShareGroupOffsetsResponseGroup::default()
                .with_group_id(g.group_id)
                .with_topics(topics)
        })
        .collect();
    let response = DescribeShareGroupOffsetsResponse::default().with_groups(groups);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DeleteShareGroupOffsets: the share-partitions of the named topics go (the group then
/// starts them afresh, per `share.auto.offset.reset`). Refused whole for an empty group id
/// (INVALID_GROUP_ID), an unknown or non-share group (GROUP_ID_NOT_FOUND) and a group with
/// members (NON_EMPTY_GROUP); an unknown topic is its topic's UNKNOWN_TOPIC_OR_PARTITION.
pub async fn delete_offsets(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteShareGroupOffsetsRequest = request.body()?;
    let group = body.group_id.0.to_string();
    let refuse = |error: ResponseError, message: Option<String>| -> Result<Reply, HandleError> {
        let response = DeleteShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(message.map(str_bytes));
        Ok(Reply::Now(respond(request, &response)?))
    };
    if group.is_empty() {
        return refuse(ResponseError::InvalidGroupId, None);
    }
    let logs = ShareLogs::of(broker);
    let named: Vec<(TopicName, Option<uuid::Uuid>)> = body
        .topics
        .iter()
        .map(|t| (t.topic_name.clone(), logs.topic_id(&t.topic_name)))
        .collect();
    let ids: Vec<uuid::Uuid> = named.iter().filter_map(|(_, id)| *id).collect();
    let b = Arc::clone(broker);
    let g = group.clone();
    let deleted = tokio::task::spawn_blocking(move || b.shares.delete_offsets(&g, &ids))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    match deleted {
        Ok(true) => {}
        Ok(false) => {
            return refuse(
                ResponseError::GroupIdNotFound,
                Some(format!("Group {group} not found.")),
            )
        }
        Err(e) => {
            let message =
                (e == ResponseError::NonEmptyGroup).then(|| default_message(e).to_string());
            return refuse(e, message);
        }
    }
    let topics = named
        .into_iter()
        .map(|(name, id)| {
            let answer = DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(name)
                .with_topic_id(id.unwrap_or_default());
            match id {
                Some(_) => answer,
                None => answer
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(default_message(
                        ResponseError::UnknownTopicOrPartition,
                    ))),
            }
        })
        .collect();
    let response = DeleteShareGroupOffsetsResponse::default().with_responses(topics);
    Ok(Reply::Now(respond(request, &response)?))
}
