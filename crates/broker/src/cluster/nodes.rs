//! `--cluster 1=HOST:KAFKA_PORT:RAFT_PORT,2=...`: every node of a cluster and its two
//! listeners, checked (docs/design.md, "A cluster of brokers").

use std::collections::{BTreeMap, HashSet};

/// The largest node id: producer ids are handed out as `n * 1024 + node id`
/// ([`crate::cluster::Cluster::producer_id`]), unique across nodes only below this.
pub const MAX_NODE_ID: i32 = 1023;

/// Where one node listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The host clients and peers reach it at.
    pub host: String,
    /// Kafka clients connect here.
    pub kafka_port: u16,
    /// The peers' one raft connection comes here.
    pub raft_port: u16,
}

impl NodeAddress {
    /// `HOST:RAFT_PORT`, how peers reach its raft groups.
    pub fn raft_addr(&self) -> String {
        format!("{}:{}", self.host, self.raft_port)
    }
}

/// Every node of a cluster, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNodes {
    /// This node.
    pub me: i32,
    /// Every node, this one included.
    pub nodes: BTreeMap<i32, NodeAddress>,
}

/// What is wrong with a `--cluster` value: the entry (or the whole value) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?}: {rule}")]
pub struct NodesError {
    /// The entry at fault (the whole value when no single one is).
    pub entry: String,
    /// What it breaks.
    pub rule: &'static str,
}

impl ClusterNodes {
    /// Parses `ID=HOST:KAFKA_PORT:RAFT_PORT,...` for node `me`.
    pub fn parse(value: &str, me: i32) -> Result<ClusterNodes, NodesError> {
        let bad = |entry: &str, rule| NodesError {
            entry: entry.to_string(),
            rule,
        };
        let mut nodes = BTreeMap::new();
        let mut listeners = HashSet::new();
        for entry in value.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(bad(
                    value,
                    "an empty entry: expected ID=HOST:KAFKA_PORT:RAFT_PORT,...",
                ));
            }
            let Some((id, address)) = entry.split_once('=') else {
                return Err(bad(entry, "expected ID=HOST:KAFKA_PORT:RAFT_PORT"));
            };
            let id: i32 = id
                .trim()
                .parse()
                .map_err(|_| bad(entry, "the node id is not a number"))?;
            if !(0..=MAX_NODE_ID).contains(&id) {
                return Err(bad(entry, "node ids go from 0 to 1023"));
            }
            let mut parts = address.rsplitn(3, ':');
            let (raft, kafka, host) = (parts.next(), parts.next(), parts.next());
            let (Some(raft), Some(kafka), Some(host)) = (raft, kafka, host) else {
                return Err(bad(entry, "expected ID=HOST:KAFKA_PORT:RAFT_PORT"));
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(bad(entry, "the host is empty"));
            }
            let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0);
            let (Some(kafka_port), Some(raft_port)) = (port(kafka), port(raft)) else {
                return Err(bad(entry, "a port is not a number from 1 to 65535"));
            };
            if kafka_port == raft_port {
                return Err(bad(entry, "the Kafka and raft ports are the same"));
            }
            for p in [kafka_port, raft_port] {
                if !listeners.insert((host.to_string(), p)) {
                    return Err(bad(
                        entry,
                        "a HOST:PORT of another node (or of this one twice)",
                    ));
                }
            }
            let address = NodeAddress {
                host: host.to_string(),
                kafka_port,
                raft_port,
            };
            if nodes.insert(id, address).is_some() {
                return Err(bad(entry, "the node id is named twice"));
            }
        }
        if !nodes.contains_key(&me) {
            return Err(bad(value, "does not name this node (--node-id)"));
        }
        Ok(ClusterNodes { me, nodes })
    }

    /// This node's address.
    pub fn own(&self) -> &NodeAddress {
        // `parse` checked that `me` is among the nodes.
        &self.nodes[&self.me]
    }

    /// The node ids, in order.
    pub fn ids(&self) -> Vec<i32> {
        self.nodes.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_of_three_parses_with_each_nodes_listeners() {
        let c = ClusterNodes::parse(
            "1=127.0.0.1:9092:9192, 2=127.0.0.1:9093:9193,3=[::1]:9094:9194",
            2,
        )
        .unwrap();
        assert_eq!(c.ids(), vec![1, 2, 3]);
        assert_eq!(c.own().kafka_port, 9093);
        assert_eq!(c.nodes[&3].host, "::1");
        assert_eq!(c.nodes[&1].raft_addr(), "127.0.0.1:9192");
    }
}
