//! Topic config changes in a cluster (docs/design.md, "Topic configs in a cluster"):
//! IncrementalAlterConfigs (and the legacy AlterConfigs, a topic's whole set replaced: the
//! same operations, [`replacing`]) on TOPIC resources is decided by the controller, which checks the
//! change as a single broker does (api/admin_topics.rs: unknown names, bad values and
//! operations, the resolved log configuration, `validate_only`), refuses what a raft partition
//! cannot honour ([`super::cluster_admin::raft_refusal`]), and writes the topic's whole new
//! set of settings as an `alter_configs` metadata record that every node applies in order
//! (the image's settings, which DescribeConfigs answers, and each replica's log, reconfigured
//! live). Any other node forwards the topic resources to the controller
//! ([`super::to_controller`]). BROKER resources are answered as the single broker answers
//! them (no broker setting is dynamic).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use kafka_protocol::ResponseError;
use oncelog::PartitionConfig;
use oncelog_raft::Host;

use super::admin_topics::{
    alter_broker, cluster_altered_settings, legacy_answer, replacing, unknown_topic,
    unsupported_resource, Refusal, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use super::cluster_admin::{not_controller, raft_refusal};
use super::to_controller::{self, Forwarded};
use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::cluster::{Cluster, WriteRefused};
use crate::codec::Request;

/// How long a change waits for the controller and for its record to be applied.
const ALTER_TIMEOUT: Duration = Duration::from_secs(10);

/// A resource of either config change API.
#[derive(Clone)]
enum Change {
    /// IncrementalAlterConfigs: operations on some settings.
    Incremental(AlterConfigsResource),
    /// The legacy AlterConfigs: the resource's whole set of settings.
    Replace(alter_configs_request::AlterConfigsResource),
}

impl Change {
    fn resource_type(&self) -> i8 {
        match self {
            Change::Incremental(r) => r.resource_type,
            Change::Replace(r) => r.resource_type,
        }
    }

    fn name(&self) -> String {
        match self {
            Change::Incremental(r) => r.resource_name.to_string(),
            Change::Replace(r) => r.resource_name.to_string(),
        }
    }

    /// As IncrementalAlterConfigs' operations over the resource's settings `own`.
    fn over(&self, own: &PartitionConfig) -> AlterConfigsResource {
        match self {
            Change::Incremental(r) => r.clone(),
            Change::Replace(r) => replacing(own, r),
        }
    }
}

/// IncrementalAlterConfigs on a cluster node.
pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: IncrementalAlterConfigsRequest = request.body()?;
    let changes = body.resources.iter().cloned().map(Change::Incremental);
    Ok(answer_later(
        broker,
        cluster,
        request,
        changes.collect(),
        body.validate_only,
        move |answers| {
            let responses = body
                .resources
                .into_iter()
                .zip(answers)
                .map(|(r, answer)| {
                    let line = AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name);
                    match answer {
                        Ok(()) => line.with_error_message(None),
                        Err((error, message)) => line
                            .with_error_code(error.code())
                            .with_error_message(Some(StrBytes::from_string(message))),
                    }
                })
                .collect();
            IncrementalAlterConfigsResponse::default().with_responses(responses)
        },
    ))
}

/// The legacy AlterConfigs on a cluster node: a topic's whole set of settings replaced, as a
/// single broker replaces it, through the controller.
pub fn alter_configs(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: AlterConfigsRequest = request.body()?;
    let changes = body.resources.iter().cloned().map(Change::Replace);
    Ok(answer_later(
        broker,
        cluster,
        request,
        changes.collect(),
        body.validate_only,
        move |answers| {
            let responses = body
                .resources
                .iter()
                .zip(answers)
                .map(|(r, answer)| legacy_answer(r, answer))
                .collect();
            AlterConfigsResponse::default().with_responses(responses)
        },
    ))
}

/// Decides `changes` ([`answer`]) on a task of their own and encodes the response `reply`
/// builds from each resource's answer, in the request's order: the shape both config change
/// APIs share.
fn answer_later<R: Encodable + HeaderVersion>(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
    changes: Vec<Change>,
    validate_only: bool,
    reply: impl FnOnce(Vec<Result<(), Refusal>>) -> R + Send + 'static,
) -> Reply {
    let (broker, cluster, request) = (Arc::clone(broker), Arc::clone(cluster), request.clone());
    Reply::Later(tokio::spawn(async move {
        let answers = answer(&broker, &cluster, &request, changes, validate_only).await;
        respond(&request, &reply(answers))
    }))
}

/// Each resource's answer: BROKER and other resources here, TOPIC resources on the controller
/// (this node, or through a forward).
async fn answer(
    broker: &Broker,
    cluster: &Cluster,
    request: &Request,
    changes: Vec<Change>,
    validate_only: bool,
) -> Vec<Result<(), Refusal>> {
    let mut answers: Vec<Option<Result<(), Refusal>>> = changes
        .iter()
        .map(|c| match c.resource_type() {
            RESOURCE_TOPIC => None,
            RESOURCE_BROKER => Some(alter_broker(broker, &c.over(&PartitionConfig::default()))),
            super::share_admin::RESOURCE_GROUP => Some(Err((
                ResponseError::InvalidRequest,
                "a share group's settings go to the share coordinator in an \
                 IncrementalAlterConfigs of their own, not with other resources"
                    .to_string(),
            ))),
            other => Some(Err(unsupported_resource(other))),
        })
        .collect();
    let topics: Vec<usize> = (0..answers.len())
        .filter(|i| answers[*i].is_none())
        .collect();
    if !topics.is_empty() {
        let here = to_controller::forwarded(request) || cluster.controller() == Some(cluster.me());
        let forwarded = if here {
            Forwarded::Here
        } else {
            let changes: Vec<&Change> = topics.iter().map(|i| &changes[*i]).collect();
            forward(cluster, request.version, &changes, validate_only).await
        };
        let decided = match forwarded {
            Forwarded::Answered(a) if a.len() == topics.len() => a,
            Forwarded::Answered(a) => vec![
                Err((
                    ResponseError::UnknownServerError,
                    format!(
                        "the controller answered {} resources of {}",
                        a.len(),
                        topics.len()
                    ),
                ));
                topics.len()
            ],
            Forwarded::Failed(why) => vec![
                Err((
                    ResponseError::RequestTimedOut,
                    format!("no controller took the change: {why}"),
                ));
                topics.len()
            ],
            Forwarded::Here => {
                let mut decided = Vec::with_capacity(topics.len());
                for i in &topics {
                    decided.push(alter_topic(broker, cluster, &changes[*i], validate_only).await);
                }
                decided
            }
        };
        for (i, answer) in topics.into_iter().zip(decided) {
            answers[i] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|a| {
            a.unwrap_or(Err((
                ResponseError::UnknownServerError,
                "not answered".into(),
            )))
        })
        .collect()
}

/// A forwarded resource's answer as the controller gave it.
fn outcome(code: i16, message: Option<&StrBytes>) -> Result<(), Refusal> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err((e, message.map(|m| m.to_string()).unwrap_or_default())),
    }
}

/// Sends the topic `changes` (all of one API) to the controller as a request of their own;
/// each one's answer.
async fn forward(
    cluster: &Cluster,
    version: i16,
    changes: &[&Change],
    validate_only: bool,
) -> Forwarded<Vec<Result<(), Refusal>>> {
    let not_controller = ResponseError::NotController.code();
    let incremental: Vec<AlterConfigsResource> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Incremental(r) => Some(r.clone()),
            Change::Replace(_) => None,
        })
        .collect();
    let answered: Forwarded<Vec<(i16, Option<StrBytes>)>> = if incremental.len() == changes.len() {
        let body = IncrementalAlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(incremental);
        let moved = |r: &IncrementalAlterConfigsResponse| {
            r.responses.iter().all(|a| a.error_code == not_controller)
        };
        match to_controller::send(cluster, version, &body, ALTER_TIMEOUT, moved).await {
            Forwarded::Answered(r) => Forwarded::Answered(
                r.responses
                    .into_iter()
                    .map(|a| (a.error_code, a.error_message))
                    .collect(),
            ),
            Forwarded::Here => Forwarded::Here,
            Forwarded::Failed(why) => Forwarded::Failed(why),
        }
    } else {
        let replace: Vec<alter_configs_request::AlterConfigsResource> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Replace(r) => Some(r.clone()),
                Change::Incremental(_) => None,
            })
            .collect();
        let body = AlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(replace);
        let moved =
            |r: &AlterConfigsResponse| r.responses.iter().all(|a| a.error_code == not_controller);
        match to_controller::send(cluster, version, &body, ALTER_TIMEOUT, moved).await {
            Forwarded::Answered(r) => Forwarded::Answered(
                r.responses
                    .into_iter()
                    .map(|a| (a.error_code, a.error_message))
                    .collect(),
            ),
            Forwarded::Here => Forwarded::Here,
            Forwarded::Failed(why) => Forwarded::Failed(why),
        }
    };
    match answered {
        Forwarded::Answered(a) => Forwarded::Answered(
            a.iter()
                .map(|(code, message)| outcome(*code, message.as_ref()))
                .collect(),
        ),
        Forwarded::Here => Forwarded::Here,
        Forwarded::Failed(why) => Forwarded::Failed(why),
    }
}

/// One topic's change on the controller: the single broker's checks over the topic's
/// settings as the image holds them, cluster mode's refusals, then the metadata record.
async fn alter_topic(
    broker: &Broker,
    cluster: &Cluster,
    change: &Change,
    validate_only: bool,
) -> Result<(), Refusal> {
    let name = change.name();
    let log_defaults = Host::manager_config().map_err(|e| {
        (
            ResponseError::UnknownServerError,
            format!("the raft host's log settings: {e}"),
        )
    })?;
    let decide = |topic: &crate::cluster::TopicImage| {
        let resource = change.over(&topic.config);
        let (given, config) =
            cluster_altered_settings(broker, &topic.config, &resource, &log_defaults)?;
        match raft_refusal(&config) {
            Some(why) => Err((ResponseError::InvalidConfig, why)),
            None => Ok(given),
        }
    };
    match cluster
        .alter_topic_configs(&name, decide, validate_only, ALTER_TIMEOUT)
        .await
    {
        Ok(()) => {
            if !validate_only {
                tracing::info!(topic = %name, "altered topic settings (IncrementalAlterConfigs) through the metadata log");
            }
            Ok(())
        }
        Err(WriteRefused::Unknown) => Err(unknown_topic(&name)),
        Err(WriteRefused::NotController(c)) => Err(not_controller(c)),
        Err(WriteRefused::Invalid(error, message)) => Err((error, message)),
        Err(WriteRefused::Raft(e)) => Err((
            ResponseError::RequestTimedOut,
            format!("the metadata log did not take the change: {e}"),
        )),
        Err(WriteRefused::Timeout) => Err((
            ResponseError::RequestTimedOut,
            "the change's record was not applied in time".into(),
        )),
        Err(WriteRefused::Exists) => Err((
            ResponseError::UnknownServerError,
            "a config change answered as a topic creation".into(),
        )),
    }
}
