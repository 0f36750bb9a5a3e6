//! The cluster image: what the metadata log's records say, applied in offset order
//! (docs/design.md, "A cluster of brokers"; the records in docs/format.md, "Cluster metadata
//! records"). Pure data and decisions; the log is read by [`super::Cluster`].

use std::collections::{BTreeMap, HashMap};

use oncelog::PartitionConfig;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One record of the metadata log: the value of a Kafka record, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MetadataRecord {
    /// A topic was created: its id, per partition in order its replicas (node ids, the
    /// first the preferred leader), and the settings it was created with (Kafka's names and
    /// values, as a partition's `oncelog.properties` spells them; absent in records written
    /// before topic configs were replicated, and when none is set).
    Topic {
        name: String,
        id: Uuid,
        replicas: Vec<Vec<i32>>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        configs: BTreeMap<String, String>,
    },
}

/// A topic of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    /// Per partition, its replicas (the first the preferred leader).
    pub replicas: Vec<Vec<i32>>,
    /// The topic's own settings: every replica opens its partitions with them.
    pub config: PartitionConfig,
}

/// Why a record of the metadata log was not applied. Every node applies the same records in
/// the same order and refuses the same ones, so the images stay the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("metadata record at offset {offset}: not a record this broker knows: {reason}")]
    Malformed { offset: i64, reason: String },
    #[error("metadata record at offset {offset}: topic {name}: {reason}")]
    Invalid {
        offset: i64,
        name: String,
        reason: String,
    },
}

/// The cluster as the metadata log says it is, up to [`Image::next_offset`].
#[derive(Debug, Clone, Default)]
pub struct Image {
    topics: BTreeMap<String, TopicImage>,
    by_id: HashMap<Uuid, String>,
    /// The first offset of the metadata log not applied yet.
    pub next_offset: i64,
}

impl Image {
    /// Applies the record at `offset` (a record value). A second record for a topic name the
    /// image holds (two creates raced through a change of controller) is not applied: the
    /// first one committed wins, on every node. Answers the topic it added.
    pub fn apply(&mut self, offset: i64, value: &[u8]) -> Result<Option<TopicImage>, ImageError> {
        let record: MetadataRecord =
            serde_json::from_slice(value).map_err(|e| ImageError::Malformed {
                offset,
                reason: e.to_string(),
            })?;
        match record {
            MetadataRecord::Topic {
                name,
                id,
                replicas,
                configs,
            } => {
                let invalid = |reason: &str| ImageError::Invalid {
                    offset,
                    name: name.clone(),
                    reason: reason.to_string(),
                };
                if replicas.is_empty() || replicas.iter().any(|r| r.is_empty()) {
                    return Err(invalid("a partition without replicas"));
                }
                let config = topic_config(&configs).map_err(|reason| invalid(&reason))?;
                if self.topics.contains_key(&name) || self.by_id.contains_key(&id) {
                    return Ok(None);
                }
                let topic = TopicImage {
                    name: name.clone(),
                    id,
                    replicas,
                    config,
                };
                self.by_id.insert(id, name.clone());
                self.topics.insert(name, topic.clone());
                Ok(Some(topic))
            }
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.by_id.get(&id).and_then(|n| self.topics.get(n))
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }
}

/// A topic record's settings as the engine reads them (the same parser on every node, so the
/// same answer): a name or value it does not know is refused with the reason.
pub fn topic_config(configs: &BTreeMap<String, String>) -> Result<PartitionConfig, String> {
    let mut text = String::new();
    for (key, value) in configs {
        if key.contains(['=', '\n', '\r']) || value.contains(['\n', '\r']) {
            return Err(format!(
                "config {key:?}={value:?}: a line break or '=' in a name"
            ));
        }
        text.push_str(&format!("{key}={value}\n"));
    }
    PartitionConfig::decode(&text).map_err(|(_, reason)| format!("configs: {reason}"))
}

/// The replicas of each of `partitions` partitions with `replication_factor` replicas on
/// `nodes` (in id order): partition `p` on nodes `p, p+1, .., p+rf-1` mod `n`, so preferred
/// leaders (the first of each) go round the nodes.
pub fn assign(partitions: i32, replication_factor: usize, nodes: &[i32]) -> Vec<Vec<i32>> {
    (0..partitions.max(0) as usize)
        .map(|p| {
            (0..replication_factor.min(nodes.len()))
                .map(|i| nodes[(p + i) % nodes.len()])
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_go_round_the_nodes_from_a_start_that_moves() {
        assert_eq!(
            assign(4, 3, &[1, 2, 3]),
            vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3]]
        );
        assert_eq!(assign(3, 1, &[1, 2, 3]), vec![vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn records_apply_in_order_and_the_first_create_of_a_name_wins() {
        let id = Uuid::from_u128(7);
        let record = |name: &str, id: Uuid| {
            serde_json::to_vec(&MetadataRecord::Topic {
                name: name.into(),
                id,
                replicas: vec![vec![1, 2, 3]],
                configs: BTreeMap::new(),
            })
            .unwrap()
        };
        let mut image = Image::default();
        let added = image.apply(0, &record("t", id)).unwrap().unwrap();
        assert_eq!(added.replicas, vec![vec![1, 2, 3]]);
        assert_eq!(
            image.apply(1, &record("t", Uuid::from_u128(8))).unwrap(),
            None
        );
        assert_eq!(image.topic_by_id(id).unwrap().name, "t");
        assert_eq!(image.topics().count(), 1);
    }

    #[test]
    fn records_this_broker_does_not_know_are_refused_with_their_offset() {
        let mut image = Image::default();
        for bad in [
            &br#"{"type":"topic","name":"t"}"#[..],
            br#"{"type":"broker","id":1}"#,
            br#"{"type":"topic","name":"t","id":"00000000-0000-0000-0000-000000000001","replicas":[[1]],"x":1}"#,
            b"not json",
        ] {
            match image.apply(5, bad) {
                Err(ImageError::Malformed { offset: 5, .. }) => {}
                other => panic!("{}: {other:?}", String::from_utf8_lossy(bad)),
            }
        }
        let empty = br#"{"type":"topic","name":"t","id":"00000000-0000-0000-0000-000000000001","replicas":[[]]}"#;
        assert!(matches!(
            image.apply(6, empty),
            Err(ImageError::Invalid { offset: 6, .. })
        ));
        assert_eq!(image.topics().count(), 0);
    }
}
