//! The leaders of the partitions this node holds no replica of (docs/design.md, "Partitions
//! this node holds no replica of"): with a replication factor below the cluster's size a node
//! still answers Metadata and NOT_LEADER_OR_FOLLOWER with each partition's leader and epoch,
//! so it asks the nodes that hold its replicas, over the raft connection it already has to
//! them, every [`ASK_EVERY`], and keeps the answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use oncelog_raft::network::mux::GroupLeader;
use oncelog_raft::GroupId;
use tokio::task::JoinHandle;

use super::Cluster;

/// How often the replicas of the partitions held elsewhere are asked. A leader change is
/// seen here at most this long (plus a round trip) after a replica of the partition saw it;
/// until then a client sent to the old leader is answered NOT_LEADER_OR_FOLLOWER by it and
/// asks again.
pub const ASK_EVERY: Duration = Duration::from_millis(100);

/// How long one peer may take to answer: a peer that is down must not hold up the others.
const ANSWER_WITHIN: Duration = Duration::from_millis(300);

/// A partition held elsewhere, as its replicas said last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteLeader {
    /// The leader, if one of the replicas that answered knows it.
    pub leader: Option<i32>,
    /// Its term (Kafka's leader epoch): the highest a replica that answered is in.
    pub term: u64,
}

/// What the replicas of one partition answered, merged: the leader named in the highest term
/// any of them is in (a replica cut off from the others may still name a deposed leader in
/// an older term, and the newer term wins); no leader if none in that term names one (an
/// election is going on).
pub fn merge(answers: &[GroupLeader]) -> Option<RemoteLeader> {
    let term = answers.iter().map(|a| a.term).max()?;
    let leader = answers
        .iter()
        .filter(|a| a.term == term)
        .find_map(|a| a.leader)
        .and_then(|l| i32::try_from(l).ok());
    Some(RemoteLeader { leader, term })
}

/// Asks, every [`ASK_EVERY`], each peer about the partitions of the image it holds a replica
/// of and this node does not, and replaces `Cluster::remote` with the merged answers. A
/// partition none of whose replicas answered is left out (its leader is not known here).
pub fn keep_asking(cluster: Arc<Cluster>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ASK_EVERY).await;
            let asked = held_elsewhere(&cluster);
            if asked.is_empty() && cluster.remote.read().is_empty() {
                continue;
            }
            let mut calls = tokio::task::JoinSet::new();
            for (node, groups) in asked {
                let c = Arc::clone(&cluster);
                calls.spawn(async move {
                    let answer =
                        tokio::time::timeout(ANSWER_WITHIN, c.host.peer_leaders(node, groups))
                            .await;
                    match answer {
                        Ok(Ok(leaders)) => leaders,
                        Ok(Err(e)) => {
                            tracing::debug!(node, error = %e, "peer did not say its leaders");
                            Vec::new()
                        }
                        Err(_) => Vec::new(),
                    }
                });
            }
            let mut answers: HashMap<GroupId, Vec<GroupLeader>> = HashMap::new();
            while let Some(done) = calls.join_next().await {
                for a in done.unwrap_or_default() {
                    answers.entry(a.group.clone()).or_default().push(a);
                }
            }
            let merged = answers
                .into_iter()
                .filter_map(|(group, a)| merge(&a).map(|m| (group, m)))
                .collect();
            *cluster.remote.write() = merged;
        }
    })
}

/// The partitions of the image this node holds no replica of, by the peer to ask about them
/// (every replica of each).
fn held_elsewhere(cluster: &Cluster) -> BTreeMap<u64, Vec<GroupId>> {
    let me = cluster.me();
    let mut asked: BTreeMap<u64, Vec<GroupId>> = BTreeMap::new();
    for topic in cluster.image().topics() {
        for (p, replicas) in topic.replicas.iter().enumerate() {
            if replicas.contains(&me) {
                continue;
            }
            for r in replicas {
                asked
                    .entry(*r as u64)
                    .or_default()
                    .push(GroupId::new(topic.name.clone(), p as i32));
            }
        }
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(leader: Option<u64>, term: u64) -> GroupLeader {
        GroupLeader {
            group: GroupId::new("t", 0),
            leader,
            term,
            settled: None,
        }
    }

    #[test]
    fn the_leader_of_the_newest_term_wins_over_a_deposed_one() {
        assert_eq!(
            merge(&[said(Some(1), 3), said(Some(2), 4), said(None, 2)]),
            Some(RemoteLeader {
                leader: Some(2),
                term: 4
            })
        );
    }

    #[test]
    fn an_election_in_the_newest_term_names_no_leader() {
        // Node 3 voted in term 5 and knows no leader yet; node 2 still names the old one.
        assert_eq!(
            merge(&[said(Some(2), 4), said(None, 5)]),
            Some(RemoteLeader {
                leader: None,
                term: 5
            })
        );
        assert_eq!(merge(&[]), None);
    }
}
