//! The group admin APIs, as Kafka's group coordinator answers them: ListGroups and
//! DescribeGroups read the coordinator ([`crate::coordinator`]) and the committed offsets;
//! DeleteGroups and OffsetDelete (KIP-496) remove committed offsets by writing Kafka's
//! tombstones to the `__consumer_offsets` log ([`crate::offsets_log`]) before they answer, so
//! a restart does not bring them back.
//!
//! A group exists if the coordinator knows it (members joined since the start) or it holds a
//! committed offset: Kafka keeps the latter as an Empty "simple" group with no protocol type.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse, OffsetDeleteRequest, OffsetDeleteResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::codec::Request;
use crate::coordinator::{OffsetDeleteCheck, DEAD};
use crate::errors::code;
use crate::offsets_log::OffsetKey;

/// The group type ListGroups v5 answers for a classic-protocol group (`consumer` for a
/// KIP-848 one).
const CLASSIC: &str = "classic";

/// The group type and protocol type ListGroups answers for a share group.
const SHARE: &str = "share";

/// The operations a client may do on a group when the broker has no authorizer (Kafka's
/// `AclEntry.supportedOperations(GROUP)`: READ 3, DELETE 6, DESCRIBE 8, as a bit field),
/// answered to a DescribeGroups that asks for them.
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

/// The schema's "not asked for" value of `authorized_operations`.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Every group: the coordinator's, and the groups that only hold committed offsets (Empty, no
/// protocol type).
fn all_groups(broker: &Broker) -> Vec<crate::coordinator::ListedGroup> {
    let mut groups = broker.groups.list();
    let known: BTreeSet<String> = groups.iter().map(|g| g.group_id.clone()).collect();
    for group_id in broker.offsets.groups() {
        if !known.contains(&group_id) {
            groups.push(crate::coordinator::ListedGroup {
                group_id,
                state: "Empty",
                protocol_type: String::new(),
                group_type: CLASSIC,
            });
        }
    }
    // Share groups (KIP-932): type and protocol type `share`, as Kafka lists them.
    for (group_id, state) in broker.shares.list() {
        groups.push(crate::coordinator::ListedGroup {
            group_id,
            state,
            protocol_type: SHARE.to_string(),
            group_type: SHARE,
        });
    }
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    groups
}

/// ListGroups: every group, filtered by state (v4+, case-insensitive, as Kafka) and by type
/// (v5+: `classic`, `consumer` or `share`).
pub fn list_groups(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ListGroupsRequest = request.body()?;
    let states: BTreeSet<String> = body
        .states_filter
        .iter()
        .map(|s| s.trim().to_lowercase())
        .collect();
    let types: BTreeSet<String> = body
        .types_filter
        .iter()
        .map(|t| t.trim().to_lowercase())
        .collect();
    let groups = all_groups(broker)
        .into_iter()
        .filter(|g| types.is_empty() || types.contains(g.group_type))
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type))
                .with_group_state(str_bytes(g.state))
                .with_group_type(str_bytes(g.group_type))
        })
        .collect();
    let response = ListGroupsResponse::default().with_groups(groups);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DescribeGroups, as Kafka's `GroupMetadataManager.describeGroups`: an unknown group is
/// `Dead` (from v6 with GROUP_ID_NOT_FOUND and a message).
pub fn describe_groups(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DescribeGroupsRequest = request.body()?;
    let operations = if request.version >= 3 && body.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        OPERATIONS_NOT_ASKED
    };
    let groups = body
        .groups
        .into_iter()
        .map(|group_id| {
            let id = group_id.0.to_string();
            if broker.groups.is_consumer_group(&id) || broker.shares.is_share_group(&id) {
                // Kafka describes only classic groups here (ConsumerGroupDescribe does the
                // others): a consumer group is "not found", and Dead before v6.
                return not_classic(group_id, &id, request.version, operations);
            }
            let described = broker.groups.describe(&id).or_else(|| {
                broker
                    .offsets
                    .has_group(&id)
                    .then(|| crate::coordinator::DescribedGroup {
                        state: "Empty",
                        protocol_type: String::new(),
                        protocol: String::new(),
                        members: Vec::new(),
                    })
            });
            match described {
                Some(g) => {
                    let members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(str_bytes(m.member_id))
                                .with_group_instance_id(m.instance_id.map(str_bytes))
                                .with_client_id(str_bytes(m.client_id))
                                .with_client_host(str_bytes(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect();
                    DescribedGroup::default()
                        .with_group_id(group_id)
                        .with_group_state(str_bytes(g.state))
                        .with_protocol_type(str_bytes(g.protocol_type))
                        .with_protocol_data(str_bytes(g.protocol))
                        .with_members(members)
                        .with_authorized_operations(operations)
                }
                None if request.version >= 6 => DescribedGroup::default()
                    .with_group_id(group_id)
                    .with_group_state(str_bytes(DEAD))
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!("Group {id} not found.")))),
                None => DescribedGroup::default()
                    .with_group_id(group_id)
                    .with_group_state(str_bytes(DEAD))
                    .with_authorized_operations(operations),
            }
        })
        .collect();
    let response = DescribeGroupsResponse::default().with_groups(groups);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DeleteGroups: each group on its own (Kafka's `GroupCoordinatorShard.deleteGroups`). A group
/// with members is refused (NON_EMPTY_GROUP) and kept; an unknown one is GROUP_ID_NOT_FOUND;
/// otherwise the tombstones of its offsets and of its group metadata are durable before it is
/// answered.
pub async fn delete_groups(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteGroupsRequest = request.body()?;
    let b = Arc::clone(broker);
    let names: Vec<String> = body.groups_names.iter().map(|g| g.0.to_string()).collect();
    let errors = tokio::task::spawn_blocking(move || {
        names
            .iter()
            .map(|group| delete_group(&b, group))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "delete groups task failed");
        vec![Some(ResponseError::UnknownServerError); body.groups_names.len()]
    });
    let results = body
        .groups_names
        .into_iter()
        .zip(errors)
        .map(|(group_id, error)| {
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(code(error))
        })
        .collect();
    let response = DeleteGroupsResponse::default().with_results(results);
    Ok(Reply::Now(respond(request, &response)?))
}

/// Deletes one group. Blocking (the tombstones' fsync).
fn delete_group(broker: &Broker, group: &str) -> Option<ResponseError> {
    // A share group goes with its share-partitions' state (Kafka's DeleteShareGroupState).
    match broker.shares.delete(group) {
        Ok(true) => {
            tracing::info!(group, "share group and its state deleted");
            return None;
        }
        Ok(false) => {}
        Err(e) => return Some(e),
    }
    let known = match broker.groups.remove_if_empty(group) {
        Ok(known) => known,
        Err(e) => return Some(e),
    };
    if !known && !broker.offsets.has_group(group) {
        return Some(ResponseError::GroupIdNotFound);
    }
    // A consumer-protocol group's tombstones (its epoch, target and their metadata).
    if let Err(e) = broker
        .offsets
        .store_consumer_groups(&broker.groups, || ())
        .1
    {
        tracing::error!(group, error = %e, "cannot write the consumer group's tombstones");
        return Some(ResponseError::KafkaStorageError);
    }
    match broker.offsets.delete_group(group, now_ms()) {
        Ok(deleted) => {
            tracing::info!(
                group,
                offsets = deleted,
                "group and its committed offsets deleted"
            );
            None
        }
        Err(e) => {
            tracing::error!(group, error = %e, "cannot write the group's tombstones");
            Some(ResponseError::KafkaStorageError)
        }
    }
}

/// OffsetDelete (KIP-496), as Kafka's `KafkaApis.handleOffsetDeleteRequest` and
/// `OffsetMetadataManager.deleteOffsets`: unknown topics and partitions are
/// UNKNOWN_TOPIC_OR_PARTITION; a group-wide refusal (INVALID_GROUP_ID, GROUP_ID_NOT_FOUND,
/// NON_EMPTY_GROUP for a group with members outside the consumer protocol) is the top-level
/// error with no topics; a topic a member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC for each
/// of its partitions; the other partitions' offsets get their tombstones, durable before the
/// answer.
pub async fn offset_delete(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: OffsetDeleteRequest = request.body()?;
    let group = body.group_id.0.to_string();
    let refuse = |error: ResponseError| -> Result<Reply, HandleError> {
        let response = OffsetDeleteResponse::default().with_error_code(error.code());
        Ok(Reply::Now(respond(request, &response)?))
    };
    if group.is_empty() {
        return refuse(ResponseError::InvalidGroupId);
    }
    let subscribed = match broker.groups.offset_delete_check(&group) {
        OffsetDeleteCheck::NonEmpty => return refuse(ResponseError::NonEmptyGroup),
        OffsetDeleteCheck::Unknown if !broker.offsets.has_group(&group) => {
            return refuse(ResponseError::GroupIdNotFound)
        }
        // A group of committed offsets only: no protocol, no subscription.
        OffsetDeleteCheck::Unknown => Some(BTreeSet::new()),
        OffsetDeleteCheck::Allowed { subscribed } => subscribed,
    };
    let mut deletions: Vec<OffsetKey> = Vec::new();
    let mut answers = Vec::new();
    for topic in &body.topics {
        let known = broker.store.topic(&topic.name);
        let is_subscribed = subscribed
            .as_ref()
            .is_none_or(|topics| topics.contains(topic.name.0.as_str()));
        let partitions: Vec<(i32, Option<ResponseError>)> = topic
            .partitions
            .iter()
            .map(|p| {
                let index = p.partition_index;
                let exists = match &broker.cluster {
                    // A cluster's partitions are in its image, not in this node's store.
                    Some(cluster) => cluster.partition_exists(&topic.name, index),
                    None => known.as_ref().is_some_and(|t| t.partition(index).is_some()),
                };
                let error = if !exists {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else if is_subscribed {
                    Some(ResponseError::GroupSubscribedToTopic)
                } else {
                    deletions.push((group.clone(), topic.name.0.to_string(), index));
                    None
                };
                (index, error)
            })
            .collect();
        answers.push((topic.name.clone(), partitions));
    }
    let write_error = if deletions.is_empty() {
        None
    } else {
        let b = Arc::clone(broker);
        let stored = tokio::task::spawn_blocking(move || b.offsets.delete(&deletions, now_ms()))
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "offset delete task failed");
                Ok(0)
            });
        match stored {
            Ok(deleted) => {
                tracing::info!(group, offsets = deleted, "committed offsets deleted");
                None
            }
            Err(e) => {
                tracing::error!(group, error = %e, "cannot write the offsets' tombstones");
                Some(ResponseError::KafkaStorageError)
            }
        }
    };
    let topics = answers
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, error)| {
                    // A failed write fails the partitions it was to delete.
                    let error = error.or(write_error);
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(index)
                        .with_error_code(code(error))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    let response = OffsetDeleteResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

/// DescribeGroups' answer for a consumer-protocol group: Kafka's `describeGroups` finds no
/// classic group by that id.
fn not_classic(group_id: GroupId, id: &str, version: i16, operations: i32) -> DescribedGroup {
    let dead = DescribedGroup::default()
        .with_group_id(group_id)
        .with_group_state(str_bytes(DEAD));
    if version >= 6 {
        dead.with_error_code(ResponseError::GroupIdNotFound.code())
            .with_error_message(Some(str_bytes(format!(
                "Group {id} is not a classic group."
            ))))
    } else {
        dead.with_authorized_operations(operations)
    }
}
