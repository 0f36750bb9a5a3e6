//! Topic config changes in a cluster (docs/design.md, "Topic configs in a cluster"):
//! IncrementalAlterConfigs on TOPIC resources is decided by the controller, which checks the
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
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use oncelog_raft::Host;

use super::admin_topics::{
    alter_broker, cluster_altered_settings, unknown_topic, unsupported_resource, Refusal,
    RESOURCE_BROKER, RESOURCE_TOPIC,
};
use super::cluster_admin::{not_controller, raft_refusal};
use super::to_controller::{self, Forwarded};
use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::cluster::{Cluster, WriteRefused};
use crate::codec::Request;

/// How long a change waits for the controller and for its record to be applied.
const ALTER_TIMEOUT: Duration = Duration::from_secs(10);

/// IncrementalAlterConfigs on a cluster node.
pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let body: IncrementalAlterConfigsRequest = request.body()?;
    let (broker, cluster, request) = (Arc::clone(broker), Arc::clone(cluster), request.clone());
    Ok(Reply::Later(tokio::spawn(async move {
        let mut answers: Vec<Option<Result<(), Refusal>>> = body
            .resources
            .iter()
            .map(|r| match r.resource_type {
                RESOURCE_TOPIC => None,
                RESOURCE_BROKER => Some(alter_broker(&broker, r)),
                super::share_admin::RESOURCE_GROUP => Some(Err((
                    ResponseError::InvalidRequest,
                    "a share group's settings go to the share coordinator in a request of their \
                     own, not with other resources"
                        .to_string(),
                ))),
                other => Some(Err(unsupported_resource(other))),
            })
            .collect();
        let topics: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i].is_none())
            .collect();
        if !topics.is_empty() {
            let here =
                to_controller::forwarded(&request) || cluster.controller() == Some(cluster.me());
            let decided = if here {
                None
            } else {
                let forward = IncrementalAlterConfigsRequest::default()
                    .with_validate_only(body.validate_only)
                    .with_resources(topics.iter().map(|i| body.resources[*i].clone()).collect());
                let moved = |r: &IncrementalAlterConfigsResponse| {
                    r.responses
                        .iter()
                        .all(|a| a.error_code == ResponseError::NotController.code())
                };
                match to_controller::send(&cluster, request.version, &forward, ALTER_TIMEOUT, moved)
                    .await
                {
                    Forwarded::Answered(r) if r.responses.len() == topics.len() => Some(
                        r.responses
                            .into_iter()
                            .map(|a| match ResponseError::try_from_code(a.error_code) {
                                None => Ok(()),
                                Some(e) => Err((
                                    e,
                                    a.error_message.map(|m| m.to_string()).unwrap_or_default(),
                                )),
                            })
                            .collect::<Vec<_>>(),
                    ),
                    Forwarded::Answered(r) => Some(vec![
                        Err((
                            ResponseError::UnknownServerError,
                            format!(
                                "the controller answered {} resources of {}",
                                r.responses.len(),
                                topics.len()
                            ),
                        ));
                        topics.len()
                    ]),
                    Forwarded::Here => None,
                    Forwarded::Failed(why) => Some(vec![
                        Err((
                            ResponseError::RequestTimedOut,
                            format!("no controller took the change: {why}"),
                        ));
                        topics.len()
                    ]),
                }
            };
            let decided = match decided {
                Some(d) => d,
                None => {
                    let mut d = Vec::with_capacity(topics.len());
                    for i in &topics {
                        d.push(
                            alter_topic(&broker, &cluster, &body.resources[*i], body.validate_only)
                                .await,
                        );
                    }
                    d
                }
            };
            for (i, answer) in topics.into_iter().zip(decided) {
                answers[i] = Some(answer);
            }
        }
        let responses = body
            .resources
            .into_iter()
            .zip(answers)
            .map(|(r, answer)| {
                let line = AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name);
                match answer.unwrap_or(Err((
                    ResponseError::UnknownServerError,
                    "not answered".into(),
                ))) {
                    Ok(()) => line.with_error_message(None),
                    Err((error, message)) => line
                        .with_error_code(error.code())
                        .with_error_message(Some(StrBytes::from_string(message))),
                }
            })
            .collect();
        let response = IncrementalAlterConfigsResponse::default().with_responses(responses);
        respond(&request, &response)
    })))
}

/// One topic's change on the controller: the single broker's checks over the topic's
/// settings as the image holds them, cluster mode's refusals, then the metadata record.
async fn alter_topic(
    broker: &Broker,
    cluster: &Cluster,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), Refusal> {
    let name = resource.resource_name.to_string();
    let log_defaults = Host::manager_config().map_err(|e| {
        (
            ResponseError::UnknownServerError,
            format!("the raft host's log settings: {e}"),
        )
    })?;
    let decide = |topic: &crate::cluster::TopicImage| {
        let (given, config) =
            cluster_altered_settings(broker, &topic.config, resource, &log_defaults)?;
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
