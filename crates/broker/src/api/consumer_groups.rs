//! The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat runs the membership
//! and reconciliation of [`crate::consumer_group`], ConsumerGroupDescribe shows a group's
//! epochs, members and their current and target assignments.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopic,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::metadata::{OFFSETS_TOPIC, OFFSETS_TOPIC_ID};
use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::{self, Request};
use crate::consumer_group::{Heartbeat, HeartbeatAnswer, Partitions, TopicInfo};
use crate::store::Store;

/// The operations a client may do on a group without an authorizer (READ, DELETE, DESCRIBE),
/// as DescribeGroups answers them.
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);
/// The schema's "not asked for" value of `authorized_operations`.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;
/// ConsumerGroupDescribe v1's member type of a consumer-protocol member.
const CONSUMER_MEMBER: i8 = 1;

fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Every topic of the broker, as the assignor sees them: the store's topics and
/// `__consumer_offsets` as Metadata describes it (one partition, its fixed id). Kafka resolves
/// a member's subscription against every topic of its metadata image, internal ones included,
/// so a regex or a name that matches `__consumer_offsets` gets its partition assigned (franz-go's
/// `Test848RegexBrokerResolves` checks this); its records are not served here (Fetch answers
/// it as unknown), which the member sees as an empty partition it keeps retrying.
/// In cluster mode the topics are the cluster image's ([`cluster_topic_infos`]), never this
/// node's own store (which holds none of them).
fn topics(broker: &Broker) -> Vec<TopicInfo> {
    match &broker.cluster {
        Some(cluster) => cluster_topic_infos(cluster),
        None => topic_infos(&broker.store),
    }
}

/// Every topic of the cluster image and `__consumer_offsets` (its fixed id, one partition, as
/// cluster mode's Metadata lists it), as the assignor sees them on a cluster's group
/// coordinator (see `topics`).
pub fn cluster_topic_infos(cluster: &crate::cluster::Cluster) -> Vec<TopicInfo> {
    let mut topics: Vec<TopicInfo> = cluster
        .image()
        .topics()
        .map(|t| TopicInfo {
            name: t.name.clone(),
            id: t.id,
            partitions: t.replicas.len() as i32,
        })
        .collect();
    topics.push(TopicInfo {
        name: OFFSETS_TOPIC.to_string(),
        id: OFFSETS_TOPIC_ID,
        partitions: 1,
    });
    topics
}

/// Every topic of `store` and `__consumer_offsets`, as the assignor sees them (see `topics`).
pub fn topic_infos(store: &Store) -> Vec<TopicInfo> {
    let mut topics: Vec<TopicInfo> = store
        .topics()
        .iter()
        .map(|t| TopicInfo {
            name: t.name.clone(),
            id: t.id,
            partitions: t.partitions.len() as i32,
        })
        .collect();
    topics.push(TopicInfo {
        name: OFFSETS_TOPIC.to_string(),
        id: OFFSETS_TOPIC_ID,
        partitions: 1,
    });
    topics
}

/// The name of topic `id`: a store topic's (the cluster image's in cluster mode), or
/// `__consumer_offsets`'s.
fn topic_name(broker: &Broker, id: uuid::Uuid) -> Option<String> {
    if id == OFFSETS_TOPIC_ID {
        return Some(OFFSETS_TOPIC.to_string());
    }
    match &broker.cluster {
        Some(cluster) => cluster.image().topic_by_id(id).map(|t| t.name.clone()),
        None => broker.store.topic_by_id(id).map(|t| t.name.clone()),
    }
}

pub fn heartbeat(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ConsumerGroupHeartbeatRequest = request.body()?;
    let owned = body.topic_partitions.map(|topics| {
        let mut owned = Partitions::new();
        for t in topics {
            owned
                .entry(t.topic_id)
                .or_default()
                .extend(t.partitions.iter().copied());
        }
        owned.retain(|_, p| !p.is_empty());
        owned
    });
    if broker.shares.is_share_group(&body.group_id.0) {
        // Kafka's `consumerGroup` lookup: a share group is not a consumer group.
        let response = ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::GroupIdNotFound.code())
            .with_error_message(Some(str_bytes(format!(
                "Group {} is not a consumer group.",
                body.group_id.0
            ))));
        return Ok(Reply::Now(respond(request, &response)?));
    }
    let heartbeat = Heartbeat {
        group: body.group_id.0.to_string(),
        member_id: body.member_id.to_string(),
        member_epoch: body.member_epoch,
        instance_id: body.instance_id.map(|s| s.to_string()),
        rack_id: body.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: body.rebalance_timeout_ms,
        subscribed_topic_names: body
            .subscribed_topic_names
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: body.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: body.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: request
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        client_host: request.client_host.clone().unwrap_or_default(),
        version: request.version,
    };
    let topics = topics(broker);
    let (correlation_id, version) = (request.correlation_id, request.version);
    let broker = Arc::clone(broker);
    Ok(Reply::Later(tokio::spawn(async move {
        // The records of what the heartbeat changed are durable before it is answered (an
        // fsync: off the reactor).
        let answer = tokio::task::spawn_blocking(move || {
            let b = &broker;
            let (answer, stored) = b.offsets.store_consumer_groups(&b.groups, || {
                // A cluster node that stopped coordinating since the request was routed
                // (its groups unloaded, or about to be) changes nothing: the load and the
                // unload hold the lock `change` runs under.
                if b.cluster.as_ref().is_some_and(|c| !c.coordinating()) {
                    return HeartbeatAnswer {
                        error: Some(ResponseError::NotCoordinator),
                        ..HeartbeatAnswer::default()
                    };
                }
                b.groups.consumer_heartbeat(heartbeat, &topics)
            });
            match stored {
                Ok(()) => answer,
                Err(e) => {
                    // As Kafka maps a failed append: the client finds the coordinator again
                    // and retries.
                    tracing::error!(error = %e, "cannot store consumer group records");
                    HeartbeatAnswer {
                        error: Some(ResponseError::CoordinatorNotAvailable),
                        message: Some("The group's records could not be stored.".into()),
                        ..HeartbeatAnswer::default()
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "consumer group heartbeat task failed");
            HeartbeatAnswer {
                error: Some(ResponseError::UnknownServerError),
                ..HeartbeatAnswer::default()
            }
        });
        heartbeat_response(correlation_id, version, answer)
    })))
}

fn heartbeat_response(
    correlation_id: i32,
    version: i16,
    answer: HeartbeatAnswer,
) -> Result<codec::ResponseFrame, codec::EncodeError> {
    let assignment = answer.assignment.map(|partitions| {
        Assignment::default().with_topic_partitions(
            partitions
                .into_iter()
                .map(|(id, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(ps.into_iter().collect())
                })
                .collect(),
        )
    });
    let response = ConsumerGroupHeartbeatResponse::default()
        .with_error_code(crate::errors::code(answer.error))
        .with_error_message(answer.message.map(str_bytes))
        .with_member_id(answer.member_id.map(str_bytes))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(assignment);
    codec::encode(correlation_id, version, &response, &[])
}

/// A member's partitions with their topics' names (a topic deleted since is left out).
fn described(broker: &Broker, partitions: Partitions) -> DescribedAssignment {
    let topics = partitions
        .into_iter()
        .filter_map(|(id, ps)| {
            let name = topic_name(broker, id)?;
            Some(
                DescribedTopic::default()
                    .with_topic_id(id)
                    .with_topic_name(TopicName(str_bytes(name)))
                    .with_partitions(ps.into_iter().collect()),
            )
        })
        .collect();
    DescribedAssignment::default().with_topic_partitions(topics)
}

pub fn describe(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ConsumerGroupDescribeRequest = request.body()?;
    let operations = if body.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        OPERATIONS_NOT_ASKED
    };
    let groups = body
        .group_ids
        .into_iter()
        .map(|group_id| {
            let id = group_id.0.to_string();
            match broker.groups.consumer_describe(&id) {
                Ok(g) => {
                    let members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            Member::default()
                                .with_member_id(str_bytes(m.member_id))
                                .with_instance_id(m.instance_id.map(str_bytes))
                                .with_rack_id(m.rack_id.map(str_bytes))
                                .with_member_epoch(m.member_epoch)
                                .with_client_id(str_bytes(m.client_id))
                                .with_client_host(str_bytes(m.client_host))
                                .with_subscribed_topic_names(
                                    m.subscribed_topic_names
                                        .into_iter()
                                        .map(|n| TopicName(str_bytes(n)))
                                        .collect(),
                                )
                                .with_subscribed_topic_regex(
                                    m.subscribed_topic_regex.map(str_bytes),
                                )
                                .with_assignment(described(broker, m.assignment))
                                .with_target_assignment(described(broker, m.target_assignment))
                                .with_member_type(CONSUMER_MEMBER)
                        })
                        .collect();
                    DescribedGroup::default()
                        .with_group_id(group_id)
                        .with_group_state(str_bytes(g.state))
                        .with_group_epoch(g.group_epoch)
                        .with_assignment_epoch(g.assignment_epoch)
                        .with_assignor_name(str_bytes(g.assignor))
                        .with_members(members)
                        .with_authorized_operations(operations)
                }
                Err(classic) => {
                    let message = if classic || broker.shares.is_share_group(&id) {
                        format!("Group {id} is not a consumer group.")
                    } else {
                        format!("Group {id} not found.")
                    };
                    DescribedGroup::default()
                        .with_group_id(group_id)
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(str_bytes(message)))
                        .with_authorized_operations(operations)
                }
            }
        })
        .collect();
    let response = ConsumerGroupDescribeResponse::default().with_groups(groups);
    Ok(Reply::Now(respond(request, &response)?))
}
