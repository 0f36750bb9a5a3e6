//! Requests a cluster node forwards to the controller (KRaft's broker-to-controller
//! forwarding): Kafka's admin client sends IncrementalAlterConfigs to any broker and
//! DeleteRecords to each partition's leader, and only the controller (the metadata group's
//! leader) writes the metadata records they become. The node sends the request on to the
//! controller's Kafka listener under a client id naming itself, and answers what the
//! controller answers. A forwarded request is never forwarded again (two nodes with different
//! views of a move would pass it back and forth): the node it reaches answers NOT_CONTROLLER if
//! it no longer controls, and the forwarding node asks the controller it learns of next.

use std::time::{Duration, Instant};

use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use super::cluster_share::round_trip;
use crate::cluster::Cluster;
use crate::codec::Request;

/// The client id prefix of a request a node forwards to the controller (then its node id).
/// The controller takes such a request as checked by the forwarding node (a DeleteRecords'
/// offsets against the partition leader's high watermark): like the share forwarding's, it is
/// a convention between the nodes of one cluster, not an authentication.
pub const CONTROLLER_FORWARD_CLIENT_ID: &str = "oncelog-controller-forward-";

/// How long a node waits between tries while the controller moves.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Whether `request` is one a node forwarded to this one as the controller.
pub fn forwarded(request: &Request) -> bool {
    request
        .client_id
        .as_deref()
        .is_some_and(|c| c.starts_with(CONTROLLER_FORWARD_CLIENT_ID))
}

/// Where a forward ended.
pub enum Forwarded<R> {
    /// The controller's answer.
    Answered(R),
    /// This node is the controller: the caller answers itself.
    Here,
    /// No controller answered within the time given (why, last).
    Failed(String),
}

/// Sends `body` (at `version`) to the controller as this node's forward, and answers its
/// response. Tries again while no controller is known, the round trip fails or `moved` says
/// the node reached no longer controls (every resource NOT_CONTROLLER), until `within` has
/// passed.
pub async fn send<Q>(
    cluster: &Cluster,
    version: i16,
    body: &Q,
    within: Duration,
    moved: impl Fn(&Q::Response) -> bool,
) -> Forwarded<Q::Response>
where
    Q: Encodable + kafka_protocol::protocol::Request,
    Q::Response: Decodable + HeaderVersion,
{
    let deadline = Instant::now() + within;
    let client_id = format!("{CONTROLLER_FORWARD_CLIENT_ID}{}", cluster.me());
    let mut last = "no controller is known".to_string();
    loop {
        match cluster.controller() {
            Some(c) if c == cluster.me() => return Forwarded::Here,
            Some(c) => {
                let target = cluster
                    .nodes
                    .nodes
                    .get(&c)
                    .map(|a| (a.host.clone(), a.kafka_port));
                if let Some((host, port)) = target {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let sent = tokio::time::timeout(
                        left,
                        round_trip::<Q, Q::Response>(
                            &host,
                            port,
                            &client_id,
                            version,
                            body,
                            Duration::ZERO,
                        ),
                    )
                    .await;
                    match sent {
                        Ok(Ok(response)) if !moved(&response) => {
                            return Forwarded::Answered(response)
                        }
                        Ok(Ok(_)) => last = format!("node {c} no longer controls"),
                        Ok(Err(e)) => last = format!("node {c}: {e}"),
                        Err(_) => last = format!("node {c} did not answer in time"),
                    }
                }
            }
            None => {}
        }
        if Instant::now() + RETRY_EVERY > deadline {
            return Forwarded::Failed(last);
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}
