//! The describe-only admin APIs in cluster mode (docs/design.md, "A cluster of brokers"), each
//! answered where Kafka answers it, with the single broker's answer built over the cluster's
//! state:
//!
//! - DescribeCluster: every node of `--cluster`, the controller (the metadata group's leader,
//!   as Metadata names it) and the cluster id Metadata answers; from any node.
//! - DescribeLogDirs: each node for its own replicas (Kafka answers per broker for its own log
//!   dirs): the partitions of the image's topics this node holds a replica of, in its data
//!   directory.
//! - DescribeProducers: the partition's raft leader, from its log's producer-state table;
//!   NOT_LEADER_OR_FOLLOWER elsewhere (the admin client asks the leader again).
//! - ListTransactions and DescribeTransactions: the transaction coordinator (the offsets
//!   group's leader, once it loaded the replicated transaction states); elsewhere
//!   DescribeTransactions is NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS on the leader while
//!   it loads) and ListTransactions lists none (Kafka lists per broker the transactions it
//!   coordinates, and the admin client asks every broker), or COORDINATOR_LOAD_IN_PROGRESS.

use std::sync::Arc;

use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse,
};
use kafka_protocol::ResponseError;
use oncelog_raft::GroupId;

use super::{admin_topics, log_admin, respond, txn_admin, HandleError, Reply};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::cluster::{Cluster, Route};
use crate::codec::Request;

/// DescribeCluster: every node (id, host, Kafka port), the controller (-1 while none is
/// known), the cluster id.
pub fn describe_cluster(cluster: &Cluster, request: &Request) -> Result<Reply, HandleError> {
    let nodes = cluster
        .nodes
        .nodes
        .iter()
        .map(|(id, a)| (*id, a.host.clone(), i32::from(a.kafka_port)))
        .collect();
    admin_topics::cluster_answer(
        request,
        &cluster.cluster_id,
        cluster.controller().unwrap_or(-1),
        nodes,
    )
}

/// DescribeLogDirs: this node's data directory and the partitions of the image's topics it
/// holds an open replica of, each with its log's size on disk. The cluster's own groups (its
/// metadata and the coordinators' log) are not topics clients see, and are left out.
pub fn describe_log_dirs(cluster: &Cluster, request: &Request) -> Result<Reply, HandleError> {
    let me = cluster.me();
    let mut held = Vec::new();
    for topic in cluster.image().topics() {
        for (index, replicas) in topic.replicas.iter().enumerate() {
            if !replicas.contains(&me) {
                continue;
            }
            let group = GroupId::new(topic.name.clone(), index as i32);
            if let Ok(replica) = cluster.host().replica(&group) {
                held.push((topic.name.clone(), index as i32, replica.log().size_bytes()));
            }
        }
    }
    log_admin::log_dirs_answer(request, cluster.dir(), held)
}

/// DescribeProducers: each partition this node leads answers its log's producers; one led
/// elsewhere (or with no leader known) NOT_LEADER_OR_FOLLOWER; a topic or partition not in
/// the image, UNKNOWN_TOPIC_OR_PARTITION. Off the reactor: the log's append lock may be held
/// across an fsync.
pub async fn describe_producers(
    cluster: &Arc<Cluster>,
    request: &Request,
) -> Result<Reply, HandleError> {
    let c = Arc::clone(cluster);
    txn_admin::answered_off_reactor(
        request,
        move |body: DescribeProducersRequest| -> DescribeProducersResponse {
            txn_admin::producers_answer(
                body,
                |name| c.image().topic(name).is_some(),
                |name, index| match c.route(name, index) {
                    Route::Leader(replica) => Ok(replica.log().producers()),
                    Route::Elsewhere(_) => Err(ResponseError::NotLeaderOrFollower),
                    Route::Unknown => Err(ResponseError::UnknownTopicOrPartition),
                },
            )
        },
    )
    .await
}

/// Why this node does not answer as the transaction coordinator now, if it does not.
fn not_coordinating(cluster: &Cluster) -> Option<ResponseError> {
    if cluster.coordinating() {
        None
    } else if cluster.coordinator() == Some(cluster.me()) {
        Some(ResponseError::CoordinatorLoadInProgress)
    } else {
        Some(ResponseError::NotCoordinator)
    }
}

/// ListTransactions: the single broker's answer on the coordinator; elsewhere none listed
/// (unknown state filters still echoed, as a Kafka broker that coordinates none answers),
/// or COORDINATOR_LOAD_IN_PROGRESS on the leader while it loads.
pub async fn list_transactions(
    broker: &Arc<Broker>,
    cluster: &Cluster,
    request: &Request,
) -> Result<Reply, HandleError> {
    match not_coordinating(cluster) {
        None => txn_admin::list_transactions(broker, request).await,
        Some(ResponseError::CoordinatorLoadInProgress) => {
            let _: ListTransactionsRequest = request.body()?;
            let response = ListTransactionsResponse::default()
                .with_error_code(ResponseError::CoordinatorLoadInProgress.code());
            Ok(Reply::Now(respond(request, &response)?))
        }
        Some(_) => {
            txn_admin::answered_off_reactor(request, |body: ListTransactionsRequest| {
                txn_admin::transactions_listed(body, &[], now_ms())
            })
            .await
        }
    }
}

/// DescribeTransactions: the single broker's answer on the coordinator; elsewhere each id is
/// answered NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS on the leader while it loads), an
/// empty one INVALID_REQUEST.
pub async fn describe_transactions(
    broker: &Arc<Broker>,
    cluster: &Cluster,
    request: &Request,
) -> Result<Reply, HandleError> {
    match not_coordinating(cluster) {
        None => txn_admin::describe_transactions(broker, request).await,
        Some(error) => {
            txn_admin::answered_off_reactor(
                request,
                move |body: DescribeTransactionsRequest| -> DescribeTransactionsResponse {
                    txn_admin::transactions_described(body, |_| Err(error))
                },
            )
            .await
        }
    }
}
