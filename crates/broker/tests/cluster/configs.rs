//! Topic configs in cluster mode (docs/design.md, "Topic configs in a cluster"): three
//! `oncelog-broker` processes on loopback; CreateTopics with configs on the controller puts
//! them in the topic's metadata record, every node's DescribeConfigs answers them, every
//! replica opens its partition with them (its `oncelog.properties`), and the limit they set
//! holds on whichever node leads, before and after a SIGKILL of the leader. Configs a raft
//! partition cannot honour are refused with INVALID_CONFIG and create nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::wire::{str_bytes, topic_name};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;
use oncelog_broker::cluster::image::{Image, ImageError, MetadataRecord};
use uuid::Uuid;

pub(crate) const MESSAGE_TOO_LARGE: i16 = 10;
pub(crate) const INVALID_CONFIG: i16 = 40;

/// Kafka's `DescribeConfigsResponse.ConfigSource`: the topic's own, and built-in defaults.
pub(crate) const SOURCE_TOPIC: i8 = 1;
pub(crate) const SOURCE_DEFAULT: i8 = 5;

/// CreateTopics of one topic of one partition on three replicas with `configs` on node `on`.
fn create(
    c: &Cluster,
    on: i32,
    name: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> create_topics_response::CreatableTopicResult {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(str_bytes(k))
                .with_value(v.map(str_bytes))
        })
        .collect();
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: CreateTopicsResponse = call(
        &mut s,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_validate_only(validate_only)
            .with_topics(vec![CreatableTopic::default()
                .with_name(topic_name(name))
                .with_num_partitions(1)
                .with_replication_factor(3)
                .with_configs(configs)]),
    )
    .unwrap();
    r.topics.into_iter().next().unwrap()
}

/// Topic `name`'s settings as node `id` describes them: name -> (value, source).
pub(crate) fn describe(
    c: &Cluster,
    id: i32,
    name: &str,
) -> std::io::Result<BTreeMap<String, (String, i8)>> {
    let mut s = connect(c.kafka[&id])?;
    let r: DescribeConfigsResponse = call(
        &mut s,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(name))
                .with_configuration_keys(None),
        ]),
    )?;
    let result = &r.results[0];
    if result.error_code != 0 {
        return Err(std::io::Error::other(format!(
            "node {id}: error {} {:?}",
            result.error_code, result.error_message
        )));
    }
    Ok(result
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                (
                    c.value.as_deref().unwrap_or_default().to_string(),
                    c.config_source,
                ),
            )
        })
        .collect())
}

/// [`describe`] once node `id`'s image has the topic.
pub(crate) fn described(c: &Cluster, id: i32, name: &str) -> BTreeMap<String, (String, i8)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match describe(c, id, name) {
            Ok(d) => return d,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A batch of one record whose value is `size` bytes.
pub(crate) fn batch_of(size: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    b.append(1_700_000_000_000, None, Some(&vec![b'x'; size]), &[]);
    Bytes::from(b.build().unwrap())
}

/// Produces `records` to partition 0 of `topic` on node `on` with `acks`: the partition's
/// error code.
pub(crate) fn produce(c: &Cluster, on: i32, topic: &str, acks: i16, records: Bytes) -> i16 {
    produce_to(c, on, topic, 0, acks, records)
}

/// [`produce`] to partition `partition`.
pub(crate) fn produce_to(
    c: &Cluster,
    on: i32,
    topic: &str,
    partition: i32,
    acks: i16,
    records: Bytes,
) -> i16 {
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: ProduceResponse = call(
        &mut s,
        ApiKey::Produce,
        9,
        &ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])]),
    )
    .unwrap();
    r.responses[0].partition_responses[0].error_code
}

/// Every `oncelog.properties` of a partition directory `<topic>-0` under `dir`.
pub(crate) fn properties_of(dir: &Path, topic: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().and_then(|n| n.to_str()) == Some(&format!("{topic}-0")) {
                    found.push(path.join("oncelog.properties"));
                } else {
                    todo.push(path);
                }
            }
        }
    }
    found
}

#[test]
fn configs_given_at_creation_are_every_nodes_and_their_limit_holds_through_a_leader_kill() {
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = create(
        &c,
        controller,
        "sized",
        &[
            ("max.message.bytes", Some("2048")),
            ("segment.bytes", Some("1048576")),
            ("cleanup.policy", Some("delete")),
        ],
        false,
    );
    assert_eq!(created.error_code, 0, "{:?}", created.error_message);
    assert_eq!(created.replication_factor, 3);
    // The answer carries the effective settings (v5+), as a single broker's does.
    let answered: BTreeMap<String, (String, i8)> = created
        .configs
        .iter()
        .flatten()
        .map(|c| {
            let value = c.value.as_deref().unwrap_or_default().to_string();
            (c.name.to_string(), (value, c.config_source))
        })
        .collect();
    assert_eq!(answered["max.message.bytes"], ("2048".into(), SOURCE_TOPIC));
    assert_eq!(answered["segment.ms"].1, SOURCE_DEFAULT);

    // Every node answers the topic's own settings as the topic's, the others as defaults.
    for id in 1..=3 {
        let d = described(&c, id, "sized");
        assert_eq!(
            d["max.message.bytes"],
            ("2048".into(), SOURCE_TOPIC),
            "{id}"
        );
        assert_eq!(d["segment.bytes"], ("1048576".into(), SOURCE_TOPIC), "{id}");
        assert_eq!(d["cleanup.policy"], ("delete".into(), SOURCE_TOPIC), "{id}");
        assert_eq!(d["segment.ms"].1, SOURCE_DEFAULT, "{id}");
    }

    // The limit holds on the leader, with acks=all and acks=1; a batch within it is taken.
    let leader = c.leaders("sized", 1)[&0];
    assert_eq!(
        produce(&c, leader, "sized", -1, batch_of(4000)),
        MESSAGE_TOO_LARGE
    );
    assert_eq!(
        produce(&c, leader, "sized", 1, batch_of(4000)),
        MESSAGE_TOO_LARGE
    );
    assert_eq!(produce(&c, leader, "sized", -1, batch_of(1000)), 0);

    // Every replica opened its partition with the topic's settings.
    for id in 1..=3 {
        let files = properties_of(&c.dirs[&id], "sized");
        assert_eq!(files.len(), 1, "node {id}: {files:?}");
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert!(text.contains("max.message.bytes=2048"), "node {id}: {text}");
        assert!(text.contains("segment.bytes=1048576"), "node {id}: {text}");
    }

    // The leader dies: whichever node leads next refuses the same batch, takes the small one.
    eprintln!("SIGKILL node {leader}, leader of sized-0");
    c.nodes.get_mut(&leader).unwrap().crash();
    c.nodes.remove(&leader);
    let deadline = Instant::now() + Duration::from_secs(30);
    let next = loop {
        let next = c.leaders("sized", 1)[&0];
        if next != leader {
            break next;
        }
        assert!(
            Instant::now() < deadline,
            "node {leader} still named the leader"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        produce(&c, next, "sized", -1, batch_of(4000)),
        MESSAGE_TOO_LARGE
    );
    assert_eq!(produce(&c, next, "sized", -1, batch_of(1000)), 0);

    // The killed node comes back with the settings: its image (from the metadata log) and its
    // partition's own file.
    c.launch(leader);
    let d = described(&c, leader, "sized");
    assert_eq!(d["max.message.bytes"], ("2048".into(), SOURCE_TOPIC));
    let now = c.leaders("sized", 1)[&0];
    assert_eq!(
        produce(&c, now, "sized", -1, batch_of(4000)),
        MESSAGE_TOO_LARGE
    );

    // A node whose data directory is wiped rejoins and creates its replica again with the
    // topic's settings (through the rejoin steps).
    let wiped = (1..=3).find(|id| *id != now).unwrap();
    eprintln!("SIGKILL node {wiped}, wipe its data directory");
    c.nodes.get_mut(&wiped).unwrap().crash();
    c.nodes.remove(&wiped);
    std::fs::remove_dir_all(&c.dirs[&wiped]).unwrap();
    c.launch(wiped);
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let files = properties_of(&c.dirs[&wiped], "sized");
        if let Some(text) = files.first().and_then(|f| std::fs::read_to_string(f).ok()) {
            if text.contains("max.message.bytes") {
                break text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {wiped} did not reopen sized-0"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("max.message.bytes=2048"), "{text}");
    assert!(text.contains("segment.bytes=1048576"), "{text}");

    // A topic created without configs has the defaults, described as such everywhere.
    let plain = create(&c, c.controller(), "plain", &[], false);
    assert_eq!(plain.error_code, 0, "{:?}", plain.error_message);
    for id in 1..=3 {
        let d = described(&c, id, "plain");
        assert_eq!(
            d["max.message.bytes"].1, 4,
            "static broker default on node {id}"
        );
        assert_eq!(d["cleanup.policy"], ("delete".into(), SOURCE_DEFAULT));
    }
    let leader = c.leaders("plain", 1)[&0];
    assert_eq!(produce(&c, leader, "plain", -1, batch_of(4000)), 0);
}

#[test]
fn configs_a_raft_partition_cannot_honour_are_refused_and_nothing_is_created() {
    let c = Cluster::start();
    let controller = c.controller();
    let refused: &[(&str, Option<&str>, &str)] = &[
        // What cluster mode refuses: the limit would not hold, or the replicas would differ.
        ("cleanup.policy", Some("compact"), "compacted"),
        ("cleanup.policy", Some("compact,delete"), "compacted"),
        ("message.timestamp.type", Some("LogAppendTime"), "own clock"),
        ("flush.messages", Some("1"), "durable"),
        ("flush.ms", Some("10"), "durable"),
        ("remote.storage.enable", Some("false"), "tiered"),
        ("local.retention.ms", Some("1000"), "tiered"),
        // What a single broker refuses too.
        ("no.such.config", Some("1"), "Unknown topic config name"),
        ("max.message.bytes", Some("lots"), "max.message.bytes"),
        ("segment.bytes", None, "Null value"),
    ];
    for (i, (key, value, says)) in refused.iter().enumerate() {
        let name = format!("bad-{i}");
        for validate_only in [true, false] {
            let r = create(&c, controller, &name, &[(key, *value)], validate_only);
            assert_eq!(r.error_code, INVALID_CONFIG, "{key}={value:?}: {r:?}");
            let message = r.error_message.as_deref().unwrap_or_default();
            assert!(message.contains(says), "{key}={value:?}: {message}");
        }
    }
    // Nothing was created: no node knows any of them, and no replica was opened.
    std::thread::sleep(Duration::from_millis(300));
    let names: Vec<String> = (0..refused.len()).map(|i| format!("bad-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for id in 1..=3 {
        let m = c.metadata(id, Some(&names)).unwrap();
        for t in &m.topics {
            assert_eq!(t.error_code, UNKNOWN_TOPIC_OR_PARTITION, "node {id}: {t:?}");
        }
        for name in &names {
            assert!(
                properties_of(&c.dirs[&id], name).is_empty(),
                "node {id}: {name}"
            );
        }
    }

    // validate_only with configs a raft partition takes: answered, not created.
    let r = create(
        &c,
        controller,
        "checked",
        &[("max.message.bytes", Some("4096"))],
        true,
    );
    assert_eq!(r.error_code, 0, "{r:?}");
    let m = c.metadata(controller, Some(&["checked"])).unwrap();
    assert_eq!(m.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
}

// The metadata record (docs/format.md, "Cluster metadata records"), as every node applies it.

#[test]
fn a_topic_carries_its_configs_and_a_record_without_them_still_applies() {
    let mut image = Image::default();
    let old = br#"{"type":"topic","name":"old","id":"00000000-0000-0000-0000-000000000001","replicas":[[1]]}"#;
    let added = image.apply(0, old).unwrap().created().unwrap();
    assert_eq!(added.config, oncelog::PartitionConfig::default());
    let new = br#"{"type":"topic","name":"new","id":"00000000-0000-0000-0000-000000000002","replicas":[[1]],"configs":{"max.message.bytes":"2048","segment.bytes":"1048576"}}"#;
    let added = image.apply(1, new).unwrap().created().unwrap();
    assert_eq!(added.config.max_message_bytes, Some(2048));
    assert_eq!(added.config.segment_bytes, Some(1 << 20));
    // What the controller writes reads back the same.
    let record = MetadataRecord::Topic {
        name: "t".into(),
        id: Uuid::from_u128(3),
        replicas: vec![vec![1]],
        configs: BTreeMap::from([("max.message.bytes".to_string(), "4096".to_string())]),
    };
    let added = image
        .apply(2, &serde_json::to_vec(&record).unwrap())
        .unwrap()
        .created()
        .unwrap();
    assert_eq!(added.config.max_message_bytes, Some(4096));
}

#[test]
fn configs_the_engine_does_not_read_leave_the_topic_out_with_their_offset() {
    let mut image = Image::default();
    for (offset, configs) in [
        (7, r#"{"no.such.config":"1"}"#),
        (8, r#"{"max.message.bytes":"lots"}"#),
        (9, r#"{"segment.bytes":"1\nretention.ms=5"}"#),
    ] {
        let record = format!(
            r#"{{"type":"topic","name":"t","id":"00000000-0000-0000-0000-000000000001","replicas":[[1]],"configs":{configs}}}"#
        );
        match image.apply(offset, record.as_bytes()) {
            Err(ImageError::Invalid {
                offset: o, name, ..
            }) if o == offset && name == "t" => {}
            other => panic!("{configs}: {other:?}"),
        }
    }
    assert_eq!(image.topics().count(), 0);
}
