//! Share groups (KIP-932) in cluster mode (docs/design.md, "Share groups in a cluster"): the
//! share coordinator is the group coordinator, the node that leads the offsets group and
//! loaded its state, and every share API is the single broker's handler there
//! ([`super::share_groups`], [`super::share_admin`]), its state records going through the
//! replicated log. ShareGroupHeartbeat, ShareGroupDescribe and the share offsets' admin APIs
//! answer NOT_COORDINATOR elsewhere (COORDINATOR_LOAD_IN_PROGRESS on the coordinator while it
//! loads), as the group APIs do. ShareFetch and ShareAcknowledge go where the client's
//! Metadata says a partition is led, so a node that does not coordinate forwards them to the
//! coordinator's Kafka listener and relays the answer: the share-partition state (acquired and
//! acknowledged records, delivery counts) lives in one place, written through raft before an
//! answer, and moves with the coordinator.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::share_groups::FORWARD_CLIENT_ID;
use super::{respond, share_admin, share_groups, HandleError, Reply};
use crate::broker::Broker;
use crate::cluster::Cluster;
use crate::codec::{self, Request};

/// How long a forwarded request may take beyond its own wait (`MaxWaitMs`).
const FORWARD_SLACK: Duration = Duration::from_secs(10);
/// The largest answer relayed (a ShareFetch's records are bounded by its `MaxBytes`).
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// Whether an IncrementalAlterConfigs or a DescribeConfigs is about share groups' settings
/// only (GROUP resources, kept in the share state): those are the share coordinator's. Any
/// other resource keeps the request where cluster mode answers it (DescribeConfigs from the
/// image, IncrementalAlterConfigs refused).
pub fn group_configs_only(request: &Request) -> Result<bool, HandleError> {
    let group = super::share_admin::RESOURCE_GROUP;
    let types: Vec<i8> = match request.api_key {
        ApiKey::IncrementalAlterConfigs => {
            let body: IncrementalAlterConfigsRequest = request.body()?;
            body.resources.iter().map(|r| r.resource_type).collect()
        }
        ApiKey::DescribeConfigs => {
            let body: DescribeConfigsRequest = request.body()?;
            body.resources.iter().map(|r| r.resource_type).collect()
        }
        _ => return Ok(false),
    };
    Ok(!types.is_empty() && types.iter().all(|t| *t == group))
}

/// A share group request on a cluster node.
pub async fn handle(
    broker: &Arc<Broker>,
    cluster: &Cluster,
    request: &Request,
) -> Result<Reply, HandleError> {
    if matches!(
        request.api_key,
        ApiKey::IncrementalAlterConfigs | ApiKey::DescribeConfigs
    ) {
        coordinator_settled(cluster).await;
    }
    if cluster.coordinating() {
        return match request.api_key {
            ApiKey::ShareGroupHeartbeat => {
                off_reactor(broker, request, share_groups::heartbeat).await
            }
            ApiKey::ShareGroupDescribe => {
                off_reactor(broker, request, share_groups::describe).await
            }
            ApiKey::ShareFetch => off_reactor(broker, request, share_groups::fetch).await,
            ApiKey::ShareAcknowledge => {
                off_reactor(broker, request, share_groups::acknowledge).await
            }
            ApiKey::DescribeShareGroupOffsets => {
                off_reactor(broker, request, share_admin::describe_offsets).await
            }
            ApiKey::AlterShareGroupOffsets => share_admin::alter_offsets(broker, request).await,
            ApiKey::DeleteShareGroupOffsets => share_admin::delete_offsets(broker, request).await,
            // A share group's settings (GROUP resources only: see `group_configs_only`).
            ApiKey::IncrementalAlterConfigs => {
                super::admin_topics::incremental_alter_configs(broker, request).await
            }
            ApiKey::DescribeConfigs => {
                off_reactor(broker, request, |b, r| {
                    // GROUP resources only: no topic is looked up.
                    let no_topics = |_: &str| Ok(None);
                    super::admin_topics::describe_configs_of(b, r, &no_topics, true)
                })
                .await
            }
            other => Err(HandleError::UnsupportedApi(other)),
        };
    }
    let coordinator = cluster.coordinator();
    let loading = coordinator == Some(cluster.me());
    // A request another node forwarded here, thinking this node coordinates, is not sent on:
    // two nodes with different views of a move would pass it back and forth.
    let forwarded = request
        .client_id
        .as_deref()
        .is_some_and(|c| c.starts_with(FORWARD_CLIENT_ID));
    if forwarded && !loading {
        return refuse(request, ResponseError::CoordinatorNotAvailable);
    }
    match request.api_key {
        ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::IncrementalAlterConfigs
        | ApiKey::DescribeConfigs
            if !loading =>
        {
            let target = coordinator.and_then(|id| {
                cluster
                    .nodes
                    .nodes
                    .get(&id)
                    .map(|a| (a.host.clone(), a.kafka_port))
            });
            forward(request, cluster.me(), target)
        }
        _ => {
            let error = if loading {
                ResponseError::CoordinatorLoadInProgress
            } else {
                ResponseError::NotCoordinator
            };
            refuse(request, error)
        }
    }
}

/// Waits (at most [`CONFIG_WAIT`]) until this node coordinates or knows another node that
/// leads the offsets group. For a share group's settings: an admin client takes a resource's
/// COORDINATOR_NOT_AVAILABLE as the answer and does not ask again (franz-go's tests set a
/// group's settings right after the cluster starts, before the coordinators' group elected).
async fn coordinator_settled(cluster: &Cluster) {
    let until = tokio::time::Instant::now() + CONFIG_WAIT;
    while tokio::time::Instant::now() < until
        && !cluster.coordinating()
        && cluster.coordinator().is_none_or(|c| c == cluster.me())
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a share group's settings wait for a coordinator.
const CONFIG_WAIT: Duration = Duration::from_secs(10);

/// Runs a share handler's synchronous part off the reactor. In a cluster the share state's
/// writer's turn is held across a replicated write, which waits for raft, and raft needs the
/// reactor: every worker blocked on a share lock is how a node stops whole (seen with
/// franz-go's share consumers on two workers, as with the transaction coordinator's locks).
async fn off_reactor(
    broker: &Arc<Broker>,
    request: &Request,
    handler: impl FnOnce(&Arc<Broker>, &Request) -> Result<Reply, HandleError> + Send + 'static,
) -> Result<Reply, HandleError> {
    let (b, r) = (Arc::clone(broker), request.clone());
    match tokio::task::spawn_blocking(move || handler(&b, &r)).await {
        Ok(reply) => reply,
        Err(e) => {
            tracing::error!(api = ?request.api_key, error = %e, "share handler task failed");
            refuse(request, ResponseError::UnknownServerError)
        }
    }
}

/// A share group request refused with `error`.
fn refuse(request: &Request, error: ResponseError) -> Result<Reply, HandleError> {
    let code = error.code();
    let bytes = match request.api_key {
        ApiKey::ShareGroupHeartbeat => respond(
            request,
            &ShareGroupHeartbeatResponse::default().with_error_code(code),
        )?,
        ApiKey::ShareGroupDescribe => {
            use kafka_protocol::messages::share_group_describe_response::DescribedGroup;
            let body: ShareGroupDescribeRequest = request.body()?;
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
                &ShareGroupDescribeResponse::default().with_groups(groups),
            )?
        }
        ApiKey::ShareFetch => respond(
            request,
            &ShareFetchResponse::default().with_error_code(code),
        )?,
        ApiKey::ShareAcknowledge => respond(
            request,
            &ShareAcknowledgeResponse::default().with_error_code(code),
        )?,
        ApiKey::DescribeShareGroupOffsets => {
            use kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup;
            let body: DescribeShareGroupOffsetsRequest = request.body()?;
            let groups = body
                .groups
                .into_iter()
                .map(|g| {
                    DescribeShareGroupOffsetsResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &DescribeShareGroupOffsetsResponse::default().with_groups(groups),
            )?
        }
        ApiKey::AlterShareGroupOffsets => respond(
            request,
            &AlterShareGroupOffsetsResponse::default().with_error_code(code),
        )?,
        ApiKey::DeleteShareGroupOffsets => respond(
            request,
            &DeleteShareGroupOffsetsResponse::default().with_error_code(code),
        )?,
        ApiKey::DescribeConfigs => {
            let body: DescribeConfigsRequest = request.body()?;
            let results = body
                .resources
                .into_iter()
                .map(|r| {
                    DescribeConfigsResult::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &DescribeConfigsResponse::default().with_results(results),
            )?
        }
        ApiKey::IncrementalAlterConfigs => {
            let body: IncrementalAlterConfigsRequest = request.body()?;
            let responses = body
                .resources
                .into_iter()
                .map(|r| {
                    AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name)
                        .with_error_code(code)
                })
                .collect();
            respond(
                request,
                &IncrementalAlterConfigsResponse::default().with_responses(responses),
            )?
        }
        other => return Err(HandleError::UnsupportedApi(other)),
    };
    Ok(Reply::Now(bytes))
}

/// Forwards a ShareFetch, a ShareAcknowledge or a share group's IncrementalAlterConfigs to
/// the coordinator at `target` under this node's forwarding client id (for the share APIs the
/// coordinator keeps this node's share session for the member apart from the sessions of the
/// member's other brokers), and answers what it answers. No coordinator known, or the round
/// trip failed (it moved, it died): COORDINATOR_NOT_AVAILABLE (top-level for the share APIs,
/// on which the client resets its share session and tries again after a backoff; what it held
/// is redelivered once its lock expires or the next coordinator loads).
fn forward(
    request: &Request,
    me: i32,
    target: Option<(String, u16)>,
) -> Result<Reply, HandleError> {
    let via = Via {
        correlation_id: request.correlation_id,
        version: request.version,
        client_id: format!("{FORWARD_CLIENT_ID}{me}"),
        target,
    };
    match request.api_key {
        ApiKey::ShareFetch => {
            let body: ShareFetchRequest = request.body()?;
            let wait = Duration::from_millis(body.max_wait_ms.max(0) as u64);
            Ok(via.relay(body, wait, |code| {
                ShareFetchResponse::default().with_error_code(code)
            }))
        }
        ApiKey::ShareAcknowledge => {
            let body: ShareAcknowledgeRequest = request.body()?;
            Ok(via.relay(body, Duration::ZERO, |code| {
                ShareAcknowledgeResponse::default().with_error_code(code)
            }))
        }
        ApiKey::IncrementalAlterConfigs => {
            let body: IncrementalAlterConfigsRequest = request.body()?;
            let resources: Vec<(i8, StrBytes)> = body
                .resources
                .iter()
                .map(|r| (r.resource_type, r.resource_name.clone()))
                .collect();
            Ok(via.relay(body, Duration::ZERO, move |code| {
                IncrementalAlterConfigsResponse::default().with_responses(
                    resources
                        .into_iter()
                        .map(|(kind, name)| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(kind)
                                .with_resource_name(name)
                                .with_error_code(code)
                        })
                        .collect(),
                )
            }))
        }
        ApiKey::DescribeConfigs => {
            let body: DescribeConfigsRequest = request.body()?;
            let resources: Vec<(i8, StrBytes)> = body
                .resources
                .iter()
                .map(|r| (r.resource_type, r.resource_name.clone()))
                .collect();
            Ok(via.relay(body, Duration::ZERO, move |code| {
                DescribeConfigsResponse::default().with_results(
                    resources
                        .into_iter()
                        .map(|(kind, name)| {
                            DescribeConfigsResult::default()
                                .with_resource_type(kind)
                                .with_resource_name(name)
                                .with_error_code(code)
                        })
                        .collect(),
                )
            }))
        }
        other => Err(HandleError::UnsupportedApi(other)),
    }
}

/// A request forwarded to the coordinator, answered to the client under its own correlation id
/// and version.
struct Via {
    correlation_id: i32,
    version: i16,
    client_id: String,
    target: Option<(String, u16)>,
}

impl Via {
    /// Sends `body` to the coordinator and answers its response, or `failed` with
    /// COORDINATOR_NOT_AVAILABLE's code when there is none.
    fn relay<Q>(
        self,
        body: Q,
        wait: Duration,
        failed: impl FnOnce(i16) -> Q::Response + Send + 'static,
    ) -> Reply
    where
        Q: kafka_protocol::protocol::Request + Send + Sync + 'static,
        Q::Response: Send,
    {
        Reply::Later(tokio::spawn(async move {
            let answered = match &self.target {
                Some((host, port)) => {
                    round_trip::<Q, Q::Response>(
                        host,
                        *port,
                        &self.client_id,
                        self.version,
                        &body,
                        wait,
                    )
                    .await
                }
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "no coordinator known",
                )),
            };
            let response = answered.unwrap_or_else(|e| {
                tracing::info!(api = Q::KEY, error = %e, "cannot forward to the share coordinator");
                failed(ResponseError::CoordinatorNotAvailable.code())
            });
            codec::encode(self.correlation_id, self.version, &response, &[])
        }))
    }
}

/// Sends one request to the Kafka listener at `host:port` on a connection of its own and
/// reads its answer, within `wait` plus [`FORWARD_SLACK`].
pub(super) async fn round_trip<Q, R>(
    host: &str,
    port: u16,
    client_id: &str,
    version: i16,
    body: &Q,
    wait: Duration,
) -> std::io::Result<R>
where
    Q: Encodable + kafka_protocol::protocol::Request,
    R: Decodable + HeaderVersion,
{
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(Q::KEY)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())))
        .encode(&mut frame, Q::header_version(version))
        .map_err(|e| invalid(e.to_string()))?;
    body.encode(&mut frame, version)
        .map_err(|e| invalid(e.to_string()))?;
    let exchange = async {
        let mut stream = TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        stream
            .write_all(&(frame.len() as i32).to_be_bytes())
            .await?;
        stream.write_all(&frame).await?;
        let size = stream.read_i32().await?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| invalid(format!("a response of {size} bytes")))?;
        let mut buf = vec![0; size];
        stream.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(wait + FORWARD_SLACK, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))??;
    let mut bytes = bytes::Bytes::from(buf);
    ResponseHeader::decode(&mut bytes, R::header_version(version))
        .map_err(|e| invalid(e.to_string()))?;
    R::decode(&mut bytes, version).map_err(|e| invalid(e.to_string()))
}
