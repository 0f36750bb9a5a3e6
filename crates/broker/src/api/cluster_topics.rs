//! DeleteTopics and CreatePartitions in cluster mode (docs/design.md, "Deleting topics and
//! adding partitions in a cluster"): on the controller only (NOT_CONTROLLER elsewhere, the
//! admin client asks the controller again), each a record in the metadata log that every
//! node follows (cluster/topics.rs).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsAssignment;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::cluster_admin::not_controller;
use super::metadata::{OFFSETS_TOPIC, OFFSETS_TOPIC_ID};
use super::{respond, HandleError, Reply};
use crate::cluster::{assign, Cluster, Deletion, TopicImage, Wait, WriteRefused};
use crate::codec::Request;

/// How long a write waits when the request gives no timeout (0 or less).
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

type Refusal = (ResponseError, String);

/// Kafka's answer to a refused write.
fn refusal(refused: WriteRefused, unknown: Refusal) -> Refusal {
    match refused {
        WriteRefused::NotController(c) => not_controller(c),
        WriteRefused::Unknown => unknown,
        WriteRefused::Exists => (
            ResponseError::TopicAlreadyExists,
            "the topic already exists".into(),
        ),
        WriteRefused::Invalid(error, why) => (error, why),
        WriteRefused::Raft(e) => (
            ResponseError::RequestTimedOut,
            format!("the metadata log did not take the record: {e}"),
        ),
        WriteRefused::Timeout => (
            ResponseError::RequestTimedOut,
            "the record was not applied within the request's timeout; it may still be".into(),
        ),
    }
}

/// A request's `timeout_ms` as a write's wait: Kafka's "0 or less: start the deletion and
/// return at once" answers once the record is committed, within [`DEFAULT_WAIT`].
fn wait_for(timeout_ms: i32) -> Wait {
    match u64::try_from(timeout_ms) {
        Ok(ms) if ms > 0 => Wait {
            within: Duration::from_millis(ms),
            applied: true,
        },
        _ => Wait {
            within: DEFAULT_WAIT,
            applied: false,
        },
    }
}

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// DeleteTopics: each topic by name (every version) or by id (v6), deleted through a record
/// of the metadata log; the answer names the topic and its id.
pub async fn delete_topics(cluster: &Cluster, request: &Request) -> Result<Reply, HandleError> {
    let body: DeleteTopicsRequest = request.body()?;
    let mut wanted: Vec<(Option<TopicName>, Uuid)> = body
        .topic_names
        .into_iter()
        .map(|n| (Some(n), Uuid::nil()))
        .collect();
    wanted.extend(body.topics.into_iter().map(|t| (t.name, t.topic_id)));
    let mut counts: HashMap<(Option<String>, Uuid), usize> = HashMap::new();
    for (name, id) in &wanted {
        *counts
            .entry((name.as_ref().map(|n| n.0.to_string()), *id))
            .or_default() += 1;
    }
    let wait = wait_for(body.timeout_ms);
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let result = DeletableTopicResult::default()
            .with_name(name.clone())
            .with_topic_id(id);
        let key = (name.as_ref().map(|n| n.0.to_string()), id);
        let which = match (key.0.clone(), id) {
            _ if counts[&key] > 1 => Err((
                ResponseError::InvalidRequest,
                "the topic is named more than once in the request".to_string(),
            )),
            (Some(_), id) if !id.is_nil() => Err((
                ResponseError::InvalidRequest,
                "a topic name and a topic id: give one".to_string(),
            )),
            (Some(name), _) if name == OFFSETS_TOPIC => Err(internal()),
            (None, id) if id == OFFSETS_TOPIC_ID => Err(internal()),
            (Some(name), _) => Ok(Deletion::Name(name)),
            (None, id) if !id.is_nil() => Ok(Deletion::Id(id)),
            (None, _) => Err((
                ResponseError::InvalidRequest,
                "neither a topic name nor a topic id".to_string(),
            )),
        };
        let unknown = match &which {
            Ok(Deletion::Id(_)) => (
                ResponseError::UnknownTopicId,
                "no topic has this id".to_string(),
            ),
            _ => (
                ResponseError::UnknownTopicOrPartition,
                "This server does not host this topic.".to_string(),
            ),
        };
        let deleted = match which {
            Ok(which) => cluster
                .delete_topic(&which, wait)
                .await
                .map_err(|r| refusal(r, unknown)),
            Err(refused) => Err(refused),
        };
        results.push(match deleted {
            Ok(topic) => {
                tracing::info!(topic = %topic.name, id = %topic.id, "deleted topic (DeleteTopics)");
                result
                    .with_name(Some(TopicName(text(topic.name))))
                    .with_topic_id(topic.id)
            }
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        });
    }
    let response = DeleteTopicsResponse::default().with_responses(results);
    Ok(Reply::Now(respond(request, &response)?))
}

fn internal() -> Refusal {
    (
        ResponseError::InvalidRequest,
        format!(
            "{OFFSETS_TOPIC} is an internal topic (the coordinators' replicated log): it cannot \
             be deleted or grown"
        ),
    )
}

/// CreatePartitions: each topic grown to `count` partitions, their replicas spread as
/// CreateTopics spreads a topic's ([`assign`]) or as the request assigns them.
pub async fn create_partitions(
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: CreatePartitionsRequest = request.body()?;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for t in &body.topics {
        *counts.entry(t.name.0.to_string()).or_default() += 1;
    }
    let nodes = cluster.nodes.ids();
    let within = wait_for(body.timeout_ms).within;
    let mut results = Vec::with_capacity(body.topics.len());
    for t in body.topics {
        let name = t.name.0.to_string();
        let outcome: Result<TopicImage, Refusal> = if counts[&name] > 1 {
            Err((
                ResponseError::InvalidRequest,
                format!("Duplicate topic in request: {name}"),
            ))
        } else if name == OFFSETS_TOPIC {
            Err(internal())
        } else {
            let (count, assignments) = (t.count, t.assignments.clone());
            let grow = |topic: &TopicImage| new_replicas(topic, count, assignments, &nodes);
            cluster
                .add_partitions(&name, grow, body.validate_only, within)
                .await
                .map_err(|r| {
                    refusal(
                        r,
                        (
                            ResponseError::UnknownTopicOrPartition,
                            format!("The topic '{name}' does not exist."),
                        ),
                    )
                })
        };
        let result = CreatePartitionsTopicResult::default().with_name(t.name);
        results.push(match outcome {
            Ok(topic) => {
                if !body.validate_only {
                    tracing::info!(topic = %name, partitions = topic.replicas.len(), "added partitions (CreatePartitions)");
                }
                result
            }
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        });
    }
    let response = CreatePartitionsResponse::default().with_results(results);
    Ok(Reply::Now(respond(request, &response)?))
}

/// The replicas of the partitions `topic` gains to have `count`, as Kafka's controller
/// decides them: the count must grow; given assignments must be one per new partition, each
/// of the topic's replication factor, of distinct nodes of the cluster; without, spread as a
/// new topic's ([`assign`]) continuing its partition numbers.
fn new_replicas(
    topic: &TopicImage,
    count: i32,
    assignments: Option<Vec<CreatePartitionsAssignment>>,
    nodes: &[i32],
) -> Result<Vec<Vec<i32>>, Refusal> {
    let current = topic.replicas.len() as i32;
    if count < current {
        return Err((
            ResponseError::InvalidPartitions,
            format!(
                "The topic {} currently has {current} partition(s); {count} would not be an \
                 increase.",
                topic.name
            ),
        ));
    }
    if count == current {
        return Err((
            ResponseError::InvalidPartitions,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    let factor = topic.replicas.first().map_or(1, Vec::len);
    let added = (count - current) as usize;
    let Some(assignments) = assignments else {
        return Ok(assign(count, factor, nodes).split_off(current as usize));
    };
    let invalid = |why: String| Err((ResponseError::InvalidReplicaAssignment, why));
    if assignments.len() != added {
        return invalid(format!(
            "Attempted to add {added} additional partition(s), but only {} assignment(s) were \
             specified.",
            assignments.len()
        ));
    }
    let mut replicas = Vec::with_capacity(added);
    for a in assignments {
        let ids: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
        if ids.len() != factor {
            return invalid(format!(
                "The manual partition assignment includes a partition with {} replica(s), but \
                 this is not consistent with previous partitions, which have {factor} \
                 replica(s).",
                ids.len()
            ));
        }
        let mut seen = BTreeSet::new();
        for id in &ids {
            if !seen.insert(*id) {
                return invalid(format!(
                    "The manual partition assignment includes the broker {id} more than once."
                ));
            }
            if !nodes.contains(id) {
                return invalid(format!(
                    "The manual partition assignment includes broker {id}, but no such broker \
                     is registered."
                ));
            }
        }
        replicas.push(ids);
    }
    Ok(replicas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelog::PartitionConfig;

    fn topic(replicas: Vec<Vec<i32>>) -> TopicImage {
        TopicImage {
            name: "t".into(),
            id: Uuid::from_u128(1),
            replicas,
            config: PartitionConfig::default(),
            log_starts: Default::default(),
        }
    }

    fn assigned(ids: &[i32]) -> CreatePartitionsAssignment {
        CreatePartitionsAssignment::default()
            .with_broker_ids(ids.iter().map(|i| BrokerId(*i)).collect())
    }

    #[test]
    fn new_partitions_continue_the_spread_of_a_new_topic() {
        let t = topic(assign(2, 2, &[1, 2, 3]));
        assert_eq!(
            new_replicas(&t, 4, None, &[1, 2, 3]).unwrap(),
            vec![vec![3, 1], vec![1, 2]]
        );
    }

    #[test]
    fn the_count_must_grow() {
        let t = topic(vec![vec![1], vec![2]]);
        for count in [1, 2] {
            let (error, _) = new_replicas(&t, count, None, &[1, 2]).unwrap_err();
            assert_eq!(error, ResponseError::InvalidPartitions, "{count}");
        }
    }

    #[test]
    fn given_assignments_are_checked_as_kafka_checks_them() {
        let t = topic(vec![vec![1, 2]]);
        let nodes = [1, 2, 3];
        assert_eq!(
            new_replicas(&t, 2, Some(vec![assigned(&[3, 1])]), &nodes).unwrap(),
            vec![vec![3, 1]]
        );
        for bad in [
            vec![],
            vec![assigned(&[3, 1]), assigned(&[1, 2])],
            vec![assigned(&[3])],
            vec![assigned(&[3, 3])],
            vec![assigned(&[3, 9])],
        ] {
            let (error, why) = new_replicas(&t, 2, Some(bad.clone()), &nodes).unwrap_err();
            assert_eq!(
                error,
                ResponseError::InvalidReplicaAssignment,
                "{bad:?}: {why}"
            );
        }
    }

    #[test]
    fn a_zero_timeout_answers_once_committed() {
        assert!(!wait_for(0).applied && !wait_for(-1).applied);
        let w = wait_for(1500);
        assert!(w.applied);
        assert_eq!(w.within, Duration::from_millis(1500));
    }
}
