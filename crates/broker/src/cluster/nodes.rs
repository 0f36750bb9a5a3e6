//! `--cluster 1=HOST:KAFKA_PORT:RAFT_PORT,2=...`: every node of a cluster and its two
//! listeners, checked (docs/design.md, "A cluster of brokers").

use std::collections::{BTreeMap, HashSet};

/// The largest node id: producer ids are handed out as `n * 1024 + node id`
/// ([`crate::cluster::Cluster::producer_id_range`]), unique across nodes only below this.
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
    /// `--cluster-dial`: where this node dials some peers' raft listeners instead of their
    /// `--cluster` entries (a test's proxy in between); not part of the cluster's identity.
    pub dial: BTreeMap<i32, String>,
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
        Ok(ClusterNodes {
            me,
            nodes,
            dial: BTreeMap::new(),
        })
    }

    /// This node's address.
    pub fn own(&self) -> &NodeAddress {
        // `parse` checked that `me` is among the nodes.
        &self.nodes[&self.me]
    }

    /// Parses `--cluster-dial ID=HOST:PORT,...`: where this node dials the raft listeners of
    /// the peers it names. Each must be another node of the cluster, named once.
    pub fn dial_through(&mut self, value: &str) -> Result<(), NodesError> {
        let bad = |entry: &str, rule| NodesError {
            entry: entry.to_string(),
            rule,
        };
        for entry in value.split(',').map(str::trim) {
            let Some((id, addr)) = entry.split_once('=') else {
                return Err(bad(entry, "expected ID=HOST:PORT"));
            };
            let id: i32 = id
                .trim()
                .parse()
                .map_err(|_| bad(entry, "the node id is not a number"))?;
            if !self.nodes.contains_key(&id) {
                return Err(bad(entry, "not a node of --cluster"));
            }
            if id == self.me {
                return Err(bad(entry, "this node does not dial itself"));
            }
            let port_ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0)
            });
            if !port_ok {
                return Err(bad(entry, "expected HOST:PORT with a port from 1 to 65535"));
            }
            if self.dial.insert(id, addr.to_string()).is_some() {
                return Err(bad(entry, "the node id is named twice"));
            }
        }
        Ok(())
    }

    /// Where this node dials node `id`'s raft listener: its `--cluster-dial` entry, else its
    /// `--cluster` entry. The raft memberships name the `--cluster` entries on every node (the
    /// replicas' logs stay the same); only the connections go elsewhere.
    pub fn dial_addr(&self, id: i32) -> Option<String> {
        self.dial
            .get(&id)
            .cloned()
            .or_else(|| self.nodes.get(&id).map(NodeAddress::raft_addr))
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

    #[test]
    fn dialing_a_peer_elsewhere_leaves_the_cluster_as_named() {
        let spec = "1=127.0.0.1:9092:9192,2=127.0.0.1:9093:9193,3=127.0.0.1:9094:9194";
        let mut c = ClusterNodes::parse(spec, 1).unwrap();
        c.dial_through("3=127.0.0.1:7000").unwrap();
        assert_eq!(c.dial_addr(3).unwrap(), "127.0.0.1:7000");
        assert_eq!(c.dial_addr(2).unwrap(), "127.0.0.1:9193");
        assert_eq!(c.nodes, ClusterNodes::parse(spec, 1).unwrap().nodes);
        for (value, rule) in [
            ("3", "expected ID=HOST:PORT"),
            ("x=127.0.0.1:7000", "not a number"),
            ("4=127.0.0.1:7000", "not a node of --cluster"),
            ("1=127.0.0.1:7000", "does not dial itself"),
            ("2=127.0.0.1", "expected HOST:PORT"),
            ("2=:7000", "expected HOST:PORT"),
            ("2=127.0.0.1:0", "expected HOST:PORT"),
            ("2=127.0.0.1:7000,2=127.0.0.1:7001", "named twice"),
        ] {
            let mut c = ClusterNodes::parse(spec, 1).unwrap();
            let e = c.dial_through(value).unwrap_err();
            assert!(e.rule.contains(rule), "{value}: {e}");
        }
    }
}
