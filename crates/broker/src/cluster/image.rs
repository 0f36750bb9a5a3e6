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
    /// The topic `name` whose id is `id` was deleted (DeleteTopics): it leaves the image, and
    /// every node removes its replicas of the topic's partitions.
    DeleteTopic { name: String, id: Uuid },
    /// The topic `name` whose id is `id` grew (CreatePartitions) by the partitions `first`,
    /// `first + 1`, ..: per new partition in order its replicas, the first the preferred
    /// leader. `first` is the partition count the controller saw, so of two growths raced
    /// through a change of controller only the first committed applies.
    AddPartitions {
        name: String,
        id: Uuid,
        first: i32,
        replicas: Vec<Vec<i32>>,
    },
    /// The settings of the topic `name` whose id is `id` were changed (IncrementalAlterConfigs):
    /// `configs` is the whole new set of its own settings (not a difference), so applying it
    /// twice or after a restart gives the same image. Every node reconfigures its replicas.
    AlterConfigs {
        name: String,
        id: Uuid,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        configs: BTreeMap<String, String>,
    },
    /// DeleteRecords on the topic `name` whose id is `id`: per partition, the offset its log
    /// start moves up to (`[partition, offset]` pairs). A log start only ever rises: an offset
    /// at or below the image's start of that partition changes nothing.
    DeleteRecords {
        name: String,
        id: Uuid,
        offsets: Vec<(i32, i64)>,
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
    /// The log start offsets DeleteRecords set, by partition (absent: never set). What
    /// clients see as a partition's log start is the greater of this and its replica's own
    /// (docs/design.md, "Retention and DeleteRecords in a cluster").
    pub log_starts: BTreeMap<i32, i64>,
}

impl TopicImage {
    /// The log start DeleteRecords set for `partition` (0 if none).
    pub fn log_start(&self, partition: i32) -> i64 {
        self.log_starts.get(&partition).copied().unwrap_or(0)
    }
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

/// What a record changed in the image, for the node to act on (open or remove its replicas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Nothing: a record that lost a race (a second create of a name, a deletion or growth of
    /// a topic already gone or grown).
    Nothing,
    /// A topic was created.
    Created(TopicImage),
    /// A topic was deleted (as it was).
    Deleted(TopicImage),
    /// A topic grew: its partitions from `first` on are new.
    Grown { topic: TopicImage, first: usize },
    /// A topic's settings changed (as it is now).
    Altered(TopicImage),
    /// DeleteRecords raised some of a topic's log starts (the image holds them; the
    /// replicas follow them in their retention job).
    RecordsDeleted,
}

impl Applied {
    /// The topic a create added, if this is one.
    pub fn created(self) -> Option<TopicImage> {
        match self {
            Applied::Created(topic) => Some(topic),
            _ => None,
        }
    }
}

impl Image {
    /// Applies the record at `offset` (a record value). A second record for a topic name the
    /// image holds (two creates raced through a change of controller) is not applied: the
    /// first one committed wins, on every node. A deletion or growth applies only to the
    /// topic incarnation it names (its id), so one raced with a deletion and a new topic of
    /// the same name does not touch the new one. Answers what changed.
    pub fn apply(&mut self, offset: i64, value: &[u8]) -> Result<Applied, ImageError> {
        let record: MetadataRecord =
            serde_json::from_slice(value).map_err(|e| ImageError::Malformed {
                offset,
                reason: e.to_string(),
            })?;
        let invalid = |name: &str, reason: &str| ImageError::Invalid {
            offset,
            name: name.to_string(),
            reason: reason.to_string(),
        };
        match record {
            MetadataRecord::DeleteTopic { name, id } => {
                if self.topic(&name).is_none_or(|t| t.id != id) {
                    return Ok(Applied::Nothing);
                }
                self.by_id.remove(&id);
                Ok(self
                    .topics
                    .remove(&name)
                    .map_or(Applied::Nothing, Applied::Deleted))
            }
            MetadataRecord::AddPartitions {
                name,
                id,
                first,
                replicas,
            } => {
                if replicas.is_empty() || replicas.iter().any(|r| r.is_empty()) {
                    return Err(invalid(&name, "a new partition without replicas"));
                }
                let Some(topic) = self.topics.get_mut(&name).filter(|t| t.id == id) else {
                    return Ok(Applied::Nothing);
                };
                if usize::try_from(first).ok() != Some(topic.replicas.len()) {
                    return Ok(Applied::Nothing);
                }
                topic.replicas.extend(replicas);
                Ok(Applied::Grown {
                    topic: topic.clone(),
                    first: first as usize,
                })
            }
            MetadataRecord::AlterConfigs { name, id, configs } => {
                let config = topic_config(&configs).map_err(|reason| invalid(&name, &reason))?;
                let Some(topic) = self.topics.get_mut(&name).filter(|t| t.id == id) else {
                    return Ok(Applied::Nothing);
                };
                topic.config = config;
                Ok(Applied::Altered(topic.clone()))
            }
            MetadataRecord::DeleteRecords { name, id, offsets } => {
                if offsets.iter().any(|(p, o)| *p < 0 || *o < 0) {
                    return Err(invalid(&name, "a negative partition or offset"));
                }
                let Some(topic) = self.topics.get_mut(&name).filter(|t| t.id == id) else {
                    return Ok(Applied::Nothing);
                };
                let mut raised = false;
                for (p, offset) in offsets {
                    // A partition the topic does not have (never: the controller checks) is
                    // left out, as the same on every node.
                    if p as usize >= topic.replicas.len() {
                        continue;
                    }
                    let start = topic.log_starts.entry(p).or_insert(0);
                    if offset > *start {
                        *start = offset;
                        raised = true;
                    }
                }
                Ok(if raised {
                    Applied::RecordsDeleted
                } else {
                    Applied::Nothing
                })
            }
            MetadataRecord::Topic {
                name,
                id,
                replicas,
                configs,
            } => {
                if replicas.is_empty() || replicas.iter().any(|r| r.is_empty()) {
                    return Err(invalid(&name, "a partition without replicas"));
                }
                let config = topic_config(&configs).map_err(|reason| invalid(&name, &reason))?;
                if self.topics.contains_key(&name) || self.by_id.contains_key(&id) {
                    return Ok(Applied::Nothing);
                }
                let topic = TopicImage {
                    name: name.clone(),
                    id,
                    replicas,
                    config,
                    log_starts: BTreeMap::new(),
                };
                self.by_id.insert(id, name.clone());
                self.topics.insert(name, topic.clone());
                Ok(Applied::Created(topic))
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
        let Applied::Created(added) = image.apply(0, &record("t", id)).unwrap() else {
            panic!("not created")
        };
        assert_eq!(added.replicas, vec![vec![1, 2, 3]]);
        assert_eq!(
            image.apply(1, &record("t", Uuid::from_u128(8))).unwrap(),
            Applied::Nothing
        );
        assert_eq!(image.topic_by_id(id).unwrap().name, "t");
        assert_eq!(image.topics().count(), 1);
    }

    fn created(image: &mut Image, offset: i64, name: &str, id: u128, replicas: Vec<Vec<i32>>) {
        let value = serde_json::to_vec(&MetadataRecord::Topic {
            name: name.into(),
            id: Uuid::from_u128(id),
            replicas,
            configs: BTreeMap::new(),
        })
        .unwrap();
        assert!(matches!(
            image.apply(offset, &value).unwrap(),
            Applied::Created(_)
        ));
    }

    fn apply(image: &mut Image, offset: i64, record: &MetadataRecord) -> Applied {
        image
            .apply(offset, &serde_json::to_vec(record).unwrap())
            .unwrap()
    }

    #[test]
    fn a_deletion_removes_only_the_incarnation_it_names_and_the_name_can_be_reused() {
        let mut image = Image::default();
        created(&mut image, 0, "t", 1, vec![vec![1, 2]]);
        created(&mut image, 1, "u", 2, vec![vec![2]]);
        let delete = |id| MetadataRecord::DeleteTopic {
            name: "t".into(),
            id: Uuid::from_u128(id),
        };
        // A deletion of another incarnation of the name (raced with a recreate) is ignored.
        assert_eq!(apply(&mut image, 2, &delete(9)), Applied::Nothing);
        let Applied::Deleted(gone) = apply(&mut image, 3, &delete(1)) else {
            panic!("not deleted")
        };
        assert_eq!((gone.name.as_str(), gone.replicas), ("t", vec![vec![1, 2]]));
        assert!(image.topic("t").is_none() && image.topic_by_id(Uuid::from_u128(1)).is_none());
        assert_eq!(apply(&mut image, 4, &delete(1)), Applied::Nothing);
        assert_eq!(image.topics().count(), 1);
        // The name again, with a new id.
        created(&mut image, 5, "t", 3, vec![vec![2, 1], vec![1, 2]]);
        assert_eq!(image.topic("t").unwrap().id, Uuid::from_u128(3));
        assert_eq!(apply(&mut image, 6, &delete(1)), Applied::Nothing);
        assert!(image.topic("t").is_some());
    }

    #[test]
    fn a_growth_applies_once_at_the_partition_count_it_was_decided_at() {
        let mut image = Image::default();
        created(&mut image, 0, "t", 1, vec![vec![1, 2]]);
        let grow = |id, first, replicas| MetadataRecord::AddPartitions {
            name: "t".into(),
            id: Uuid::from_u128(id),
            first,
            replicas,
        };
        let Applied::Grown { topic, first } =
            apply(&mut image, 1, &grow(1, 1, vec![vec![2, 1], vec![1, 2]]))
        else {
            panic!("not grown")
        };
        assert_eq!(first, 1);
        assert_eq!(topic.replicas, vec![vec![1, 2], vec![2, 1], vec![1, 2]]);
        // A second growth decided at the old count (raced through a change of controller),
        // and one of another incarnation, are ignored.
        assert_eq!(
            apply(&mut image, 2, &grow(1, 1, vec![vec![1]])),
            Applied::Nothing
        );
        assert_eq!(
            apply(&mut image, 3, &grow(7, 3, vec![vec![1]])),
            Applied::Nothing
        );
        assert_eq!(image.topic("t").unwrap().replicas.len(), 3);
        assert!(matches!(
            image.apply(4, &serde_json::to_vec(&grow(1, 3, vec![vec![]])).unwrap()),
            Err(ImageError::Invalid { offset: 4, .. })
        ));
    }

    #[test]
    fn records_are_spelled_as_the_format_document_says() {
        let id = "00000000-0000-0000-0000-000000000001";
        let deleted = format!(r#"{{"type":"delete_topic","name":"t","id":"{id}"}}"#);
        let grown = format!(
            r#"{{"type":"add_partitions","name":"t","id":"{id}","first":1,"replicas":[[2,1]]}}"#
        );
        // A topic record written before configs were replicated still reads.
        let older = format!(r#"{{"type":"topic","name":"t","id":"{id}","replicas":[[1,2]]}}"#);
        let parsed = |text: &str| serde_json::from_str::<MetadataRecord>(text).unwrap();
        assert_eq!(
            parsed(&deleted),
            MetadataRecord::DeleteTopic {
                name: "t".into(),
                id: Uuid::from_u128(1)
            }
        );
        assert_eq!(serde_json::to_string(&parsed(&deleted)).unwrap(), deleted);
        assert_eq!(serde_json::to_string(&parsed(&grown)).unwrap(), grown);
        assert!(
            matches!(parsed(&older), MetadataRecord::Topic { configs, .. } if configs.is_empty())
        );
        let mut image = Image::default();
        for (offset, text) in [older, grown, deleted].iter().enumerate() {
            image.apply(offset as i64, text.as_bytes()).unwrap();
        }
        assert_eq!(image.topics().count(), 0);
    }

    #[test]
    fn a_config_change_replaces_the_named_incarnations_settings_whole() {
        let mut image = Image::default();
        created(&mut image, 0, "t", 1, vec![vec![1, 2]]);
        let alter = |id, configs: &[(&str, &str)]| MetadataRecord::AlterConfigs {
            name: "t".into(),
            id: Uuid::from_u128(id),
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let Applied::Altered(topic) = apply(
            &mut image,
            1,
            &alter(
                1,
                &[("max.message.bytes", "2048"), ("retention.ms", "1000")],
            ),
        ) else {
            panic!("not altered")
        };
        assert_eq!(topic.config.max_message_bytes, Some(2048));
        // The whole set: a setting left out is back to the default.
        apply(&mut image, 2, &alter(1, &[("retention.ms", "5000")]));
        let config = &image.topic("t").unwrap().config;
        assert_eq!(
            (config.max_message_bytes, config.retention_ms),
            (None, Some(Some(5000)))
        );
        // Another incarnation's change is ignored; one the engine cannot read is refused.
        assert_eq!(
            apply(&mut image, 3, &alter(9, &[("retention.ms", "1")])),
            Applied::Nothing
        );
        let bad = serde_json::to_vec(&alter(1, &[("no.such.config", "1")])).unwrap();
        assert!(matches!(
            image.apply(4, &bad),
            Err(ImageError::Invalid { offset: 4, .. })
        ));
        assert_eq!(
            image.topic("t").unwrap().config.retention_ms,
            Some(Some(5000))
        );
    }

    #[test]
    fn deleted_records_only_ever_raise_a_partitions_log_start() {
        let mut image = Image::default();
        created(&mut image, 0, "t", 1, vec![vec![1], vec![2]]);
        let delete = |id, offsets: Vec<(i32, i64)>| MetadataRecord::DeleteRecords {
            name: "t".into(),
            id: Uuid::from_u128(id),
            offsets,
        };
        assert_eq!(
            apply(&mut image, 1, &delete(1, vec![(0, 40), (1, 7)])),
            Applied::RecordsDeleted
        );
        // Lower than the start (a leader's stale view, a replay): nothing moves.
        assert_eq!(
            apply(&mut image, 2, &delete(1, vec![(0, 30)])),
            Applied::Nothing
        );
        // Another incarnation, a partition the topic lacks: ignored.
        assert_eq!(
            apply(&mut image, 3, &delete(2, vec![(0, 90)])),
            Applied::Nothing
        );
        assert_eq!(
            apply(&mut image, 4, &delete(1, vec![(5, 90)])),
            Applied::Nothing
        );
        let t = image.topic("t").unwrap();
        assert_eq!((t.log_start(0), t.log_start(1), t.log_start(2)), (40, 7, 0));
        let negative = serde_json::to_vec(&delete(1, vec![(0, -1)])).unwrap();
        assert!(matches!(
            image.apply(5, &negative),
            Err(ImageError::Invalid { offset: 5, .. })
        ));
        // Spelled as docs/format.md says.
        let text = r#"{"type":"delete_records","name":"t","id":"00000000-0000-0000-0000-000000000001","offsets":[[1,9]]}"#;
        assert_eq!(
            image.apply(6, text.as_bytes()).unwrap(),
            Applied::RecordsDeleted
        );
        assert_eq!(image.topic("t").unwrap().log_start(1), 9);
        let record: MetadataRecord = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), text);
        let altered = r#"{"type":"alter_configs","name":"t","id":"00000000-0000-0000-0000-000000000001","configs":{"retention.ms":"1000"}}"#;
        let record: MetadataRecord = serde_json::from_str(altered).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), altered);
    }

    #[test]
    fn records_this_broker_does_not_know_are_refused_with_their_offset() {
        let mut image = Image::default();
        for bad in [
            &br#"{"type":"topic","name":"t"}"#[..],
            br#"{"type":"broker","id":1}"#,
            br#"{"type":"delete_topic","name":"t"}"#,
            br#"{"type":"add_partitions","name":"t","id":"00000000-0000-0000-0000-000000000001","replicas":[[1]]}"#,
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
