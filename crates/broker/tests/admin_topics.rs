//! The topic and configuration admin APIs over a raw connection: CreateTopics, DeleteTopics,
//! CreatePartitions, DescribeConfigs, IncrementalAlterConfigs and DescribeCluster, each
//! success and each refusal (a refusal changes nothing), and what they change surviving a
//! restart.

mod common;

use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use uuid::Uuid;

/// Small segments: every partition's active segment is allocated to this size.
const FLAGS: &[&str] = &["--segment-bytes", "1048576", "--partitions", "2"];

/// IncrementalAlterConfigs operations: (name, operation, value).
type Ops<'a> = &'a [(&'a str, i8, Option<&'a str>)];

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

use common::wire::{str_bytes as s, topic_name as name};

fn start() -> (tempfile::TempDir, BrokerProcess, Wire) {
    common::start_connected(FLAGS)
}

fn topic(n: &str, partitions: i32, replication: i16, configs: &[(&str, &str)]) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(n))
        .with_num_partitions(partitions)
        .with_replication_factor(replication)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(s(k))
                        .with_value(Some(s(v)))
                })
                .collect(),
        )
}

fn create(
    wire: &mut Wire,
    topics: Vec<CreatableTopic>,
    validate_only: bool,
) -> Vec<CreatableTopicResult> {
    let response: CreateTopicsResponse = wire.call(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(30_000)
            .with_validate_only(validate_only),
    );
    response.topics
}

fn create_one(wire: &mut Wire, t: CreatableTopic) -> CreatableTopicResult {
    create(wire, vec![t], false).remove(0)
}

/// Every topic Metadata lists, with its partition count and id, but the internal ones
/// (`__consumer_offsets`, which is always there).
fn listed(wire: &mut Wire) -> Vec<(String, usize, Uuid)> {
    let response: MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let mut topics: Vec<_> = response
        .topics
        .iter()
        .filter(|t| !t.is_internal)
        .map(|t| {
            (
                t.name.as_ref().unwrap().0.to_string(),
                t.partitions.len(),
                t.topic_id,
            )
        })
        .collect();
    topics.sort();
    topics
}

fn describe(
    wire: &mut Wire,
    resource_type: i8,
    resource: &str,
    keys: Option<&[&str]>,
) -> DescribeConfigsResult {
    let response: DescribeConfigsResponse = wire.call(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default()
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(resource))
                .with_configuration_keys(
                    keys.map(|k| k.iter().map(|k| s(k)).collect()),
                )])
            .with_include_synonyms(true),
    );
    response.results.into_iter().next().unwrap()
}

/// A topic setting's value and source.
fn config(wire: &mut Wire, topic: &str, key: &str) -> (String, i8) {
    let result = describe(wire, TOPIC, topic, Some(&[key]));
    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    let c = &result.configs[0];
    (c.value.as_ref().unwrap().to_string(), c.config_source)
}

fn alter(
    wire: &mut Wire,
    resource_type: i8,
    resource: &str,
    ops: Ops,
    validate_only: bool,
) -> (i16, Option<String>) {
    let response: IncrementalAlterConfigsResponse = wire.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(resource))
                .with_configs(
                    ops.iter()
                        .map(|(k, op, v)| {
                            AlterableConfig::default()
                                .with_name(s(k))
                                .with_config_operation(*op)
                                .with_value(v.map(s))
                        })
                        .collect(),
                )])
            .with_validate_only(validate_only),
    );
    let r = &response.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

fn grow(wire: &mut Wire, topic: &str, count: i32, validate_only: bool) -> (i16, Option<String>) {
    grow_assigned(wire, topic, count, None, validate_only)
}

fn grow_assigned(
    wire: &mut Wire,
    topic: &str,
    count: i32,
    assignments: Option<Vec<CreatePartitionsAssignment>>,
    validate_only: bool,
) -> (i16, Option<String>) {
    let response: CreatePartitionsResponse = wire.call(
        ApiKey::CreatePartitions,
        3,
        &CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name(topic))
                .with_count(count)
                .with_assignments(assignments)])
            .with_timeout_ms(30_000)
            .with_validate_only(validate_only),
    );
    let r = &response.results[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

fn delete_by_name(wire: &mut Wire, topic: &str) -> i16 {
    let response: DeleteTopicsResponse = wire.call(
        ApiKey::DeleteTopics,
        5,
        &DeleteTopicsRequest::default()
            .with_topic_names(vec![name(topic)])
            .with_timeout_ms(30_000),
    );
    response.responses[0].error_code
}

fn delete_by_id(wire: &mut Wire, id: Uuid) -> (i16, Option<String>) {
    let response: DeleteTopicsResponse = wire.call(
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_topic_id(id)])
            .with_timeout_ms(30_000),
    );
    let r = &response.responses[0];
    (r.error_code, r.name.as_ref().map(|n| n.0.to_string()))
}

#[test]
fn create_topics_creates_partitions_with_their_configs_and_metadata_lists_them() {
    let (_dir, _broker, mut wire) = start();
    let created = create_one(
        &mut wire,
        topic(
            "orders",
            3,
            1,
            &[("retention.ms", "3600000"), ("cleanup.policy", "compact")],
        ),
    );
    assert_eq!(created.error_code, 0, "{:?}", created.error_message);
    assert_eq!(
        created.error_message, None,
        "a success has a null message, as Kafka's"
    );
    assert!(!created.topic_id.is_nil());
    assert_eq!((created.num_partitions, created.replication_factor), (3, 1));
    let configs = created.configs.unwrap();
    let find = |k: &str| configs.iter().find(|c| c.name.as_str() == k).unwrap();
    assert_eq!(find("retention.ms").value.as_deref(), Some("3600000"));
    assert_eq!(find("retention.ms").config_source, 1, "the topic's own");
    assert_eq!(find("cleanup.policy").value.as_deref(), Some("compact"));
    assert_eq!(find("segment.bytes").config_source, 4, "a broker flag's");
    assert_eq!(find("segment.index.bytes").config_source, 5, "built in");
    assert_eq!(
        listed(&mut wire),
        vec![("orders".to_string(), 3, created.topic_id)]
    );

    // -1 partitions and -1 replicas: the broker's defaults (--partitions 2).
    let defaulted = create_one(&mut wire, topic("defaults", -1, -1, &[]));
    assert_eq!((defaulted.error_code, defaulted.num_partitions), (0, 2));
    // A replica assignment onto this broker.
    let node = BrokerId(1);
    let assigned = create_one(
        &mut wire,
        topic("assigned", -1, -1, &[]).with_assignments(
            (0..3)
                .map(|p| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(p)
                        .with_broker_ids(vec![node])
                })
                .collect(),
        ),
    );
    assert_eq!((assigned.error_code, assigned.num_partitions), (0, 3));
    assert_eq!(listed(&mut wire).len(), 3);
}

#[test]
fn create_topics_refuses_as_kafka_does_and_creates_nothing() {
    let (_dir, _broker, mut wire) = start();
    assert_eq!(
        create_one(&mut wire, topic("there", 1, 1, &[])).error_code,
        0
    );
    let before = listed(&mut wire);
    let cases: Vec<(CreatableTopic, i16)> = vec![
        (topic("there", 1, 1, &[]), 36),
        (topic("__consumer_offsets", 1, 1, &[]), 36),
        (topic("rf3", 1, 3, &[]), 38),
        (topic("rf0", 1, 0, &[]), 38),
        (topic("p0", 0, 1, &[]), 37),
        (topic("pneg", -2, 1, &[]), 37),
        (topic("a b", 1, 1, &[]), 17),
        (topic(&"x".repeat(250), 1, 1, &[]), 17),
        (topic("..", 1, 1, &[]), 17),
        // Kafka's metric names treat '.' and '_' alike: a name colliding with one in use.
        (topic("th.re", 1, 1, &[]), 0),
        (topic("th_re", 1, 1, &[]), 17),
        (
            topic("unknown-config", 1, 1, &[("no.such.config", "1")]),
            40,
        ),
        (topic("bad-number", 1, 1, &[("retention.ms", "soon")]), 40),
        (
            topic("bad-policy", 1, 1, &[("cleanup.policy", "shred")]),
            40,
        ),
        (topic("too-small", 1, 1, &[("segment.bytes", "1")]), 40),
        (
            topic(
                "line-break",
                1,
                1,
                &[("retention.ms", "1000\nsegment.ms=5000")],
            ),
            40,
        ),
        (
            topic("null-value", 1, 1, &[]).with_configs(vec![CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(None)]),
            40,
        ),
        (
            topic("elsewhere", -1, -1, &[]).with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(7)]),
            ]),
            39,
        ),
        (
            topic("both", 2, -1, &[]).with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])]),
            42,
        ),
    ];
    for (t, code) in cases {
        let n = t.name.0.to_string();
        let result = create_one(&mut wire, t);
        assert_eq!(result.error_code, code, "{n}: {:?}", result.error_message);
        if code != 0 {
            assert!(result.error_message.is_some(), "{n}: a refusal says why");
        }
    }
    // The same name twice in one request: refused, with one result for the name (as Kafka
    // answers), beside a good topic that is created.
    let both = create(
        &mut wire,
        vec![
            topic("dup", 1, 1, &[]),
            topic("fine", 1, 1, &[]),
            topic("dup", 1, 1, &[]),
        ],
        false,
    );
    assert_eq!(
        both.iter()
            .map(|r| (r.name.0.to_string(), r.error_code))
            .collect::<Vec<_>>(),
        [("dup".to_string(), 42), ("fine".to_string(), 0)]
    );
    let mut expected = before.clone();
    expected.retain(|t| t.0 == "there");
    let now: Vec<_> = listed(&mut wire)
        .into_iter()
        .filter(|t| t.0 != "th.re" && t.0 != "fine")
        .collect();
    assert_eq!(now, expected, "no refusal created anything");
}

#[test]
fn create_topics_takes_the_last_value_of_a_config_given_twice_as_kafka_does() {
    let (_dir, _broker, mut wire) = start();
    let created = create_one(
        &mut wire,
        topic(
            "twice",
            1,
            1,
            &[("retention.ms", "1000"), ("retention.ms", "2000")],
        ),
    );
    assert_eq!(created.error_code, 0, "{:?}", created.error_message);
    assert_eq!(
        config(&mut wire, "twice", "retention.ms"),
        ("2000".into(), 1)
    );
}

#[test]
fn create_topics_validate_only_answers_and_creates_nothing() {
    let (_dir, _broker, mut wire) = start();
    let results = create(
        &mut wire,
        vec![
            topic("would-be", 4, 1, &[("retention.bytes", "1000")]),
            topic("bad", 1, 2, &[]),
        ],
        true,
    );
    assert_eq!((results[0].error_code, results[0].num_partitions), (0, 4));
    assert_eq!(results[1].error_code, 38, "validation still refuses");
    assert!(listed(&mut wire).is_empty());
    assert_eq!(
        create_one(&mut wire, topic("would-be", 4, 1, &[])).error_code,
        0
    );
}

#[test]
fn delete_topics_by_name_and_by_id() {
    let (_dir, _broker, mut wire) = start();
    let a = create_one(&mut wire, topic("a", 2, 1, &[])).topic_id;
    let b = create_one(&mut wire, topic("b", 1, 1, &[])).topic_id;
    assert_eq!(delete_by_name(&mut wire, "a"), 0);
    assert_eq!(listed(&mut wire), vec![("b".to_string(), 1, b)]);
    assert_eq!(delete_by_id(&mut wire, b), (0, Some("b".to_string())));
    assert!(listed(&mut wire).is_empty());

    assert_eq!(delete_by_name(&mut wire, "a"), 3, "deleted: unknown");
    assert_eq!(delete_by_name(&mut wire, "never"), 3);
    assert_eq!(delete_by_id(&mut wire, a).0, 100, "an unknown id");
    assert_eq!(
        delete_by_id(&mut wire, Uuid::nil()).0,
        42,
        "neither name nor id"
    );

    // The name can be used again: a new topic, new id, empty.
    let again = create_one(&mut wire, topic("a", 1, 1, &[]));
    assert_eq!(again.error_code, 0);
    assert_ne!(again.topic_id, a);
    let offsets: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default().with_topics(vec![
            kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ]),
        ]),
    );
    assert_eq!(offsets.topics[0].partitions[0].offset, 0);
}

#[test]
fn create_partitions_grows_a_topic_and_refuses_anything_else() {
    let (dir, _broker, mut wire) = start();
    let id = create_one(&mut wire, topic("grow", 1, 1, &[("retention.ms", "60000")])).topic_id;
    assert_eq!(grow(&mut wire, "grow", 3, true).0, 0);
    assert_eq!(
        listed(&mut wire),
        vec![("grow".to_string(), 1, id)],
        "validate_only"
    );
    assert_eq!(grow(&mut wire, "grow", 3, false).0, 0);
    assert_eq!(listed(&mut wire), vec![("grow".to_string(), 3, id)]);
    // The new partitions have the topic's settings and id.
    let settings = std::fs::read_to_string(dir.path().join("grow-2/oncelog.properties")).unwrap();
    assert!(settings.contains("retention.ms=60000"), "{settings}");
    let metadata = std::fs::read_to_string(dir.path().join("grow-2/partition.metadata")).unwrap();
    let first = std::fs::read_to_string(dir.path().join("grow-0/partition.metadata")).unwrap();
    assert_eq!(metadata, first);

    assert_eq!(
        grow(&mut wire, "grow", 3, false).0,
        37,
        "not above the current count"
    );
    assert_eq!(grow(&mut wire, "grow", 2, false).0, 37);
    assert_eq!(grow(&mut wire, "grow", 2, true).0, 37);
    assert_eq!(grow(&mut wire, "nope", 2, false).0, 3);
    let elsewhere = vec![CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(9)])];
    assert_eq!(
        grow_assigned(&mut wire, "grow", 4, Some(elsewhere), false).0,
        39
    );
    let too_few = vec![CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)])];
    assert_eq!(
        grow_assigned(&mut wire, "grow", 5, Some(too_few), false).0,
        39
    );
    assert_eq!(
        listed(&mut wire),
        vec![("grow".to_string(), 3, id)],
        "refusals change nothing"
    );
    let here = vec![CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)])];
    assert_eq!(grow_assigned(&mut wire, "grow", 4, Some(here), false).0, 0);
    assert_eq!(listed(&mut wire)[0].1, 4);
}

#[test]
fn describe_configs_reports_values_and_their_sources() {
    let (_dir, _broker, mut wire) = start();
    create_one(&mut wire, topic("t", 1, 1, &[("retention.bytes", "5000")]));
    let all = describe(&mut wire, TOPIC, "t", None);
    assert_eq!(
        (all.error_code, all.error_message.as_deref()),
        (0, Some("")),
        "Kafka answers a described resource with an empty message"
    );
    let names: Vec<_> = all.configs.iter().map(|c| c.name.to_string()).collect();
    for k in [
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "max.message.bytes",
    ] {
        assert!(names.contains(&k.to_string()), "{k} in {names:?}");
    }
    assert_eq!(
        config(&mut wire, "t", "retention.bytes"),
        ("5000".into(), 1)
    );
    assert_eq!(
        config(&mut wire, "t", "retention.ms"),
        ("604800000".into(), 5)
    );
    assert_eq!(
        config(&mut wire, "t", "segment.bytes"),
        ("1048576".into(), 4)
    );
    let synonyms = &describe(&mut wire, TOPIC, "t", Some(&["retention.bytes"])).configs[0].synonyms;
    assert_eq!(
        synonyms
            .iter()
            .map(|s| (s.name.to_string(), s.source))
            .collect::<Vec<_>>(),
        [
            ("retention.bytes".to_string(), 1),
            ("log.retention.bytes".to_string(), 5)
        ]
    );

    let broker = describe(&mut wire, BROKER, "1", None);
    assert_eq!(broker.error_code, 0);
    let find = |k: &str| {
        broker
            .configs
            .iter()
            .find(|c| c.name.as_str() == k)
            .unwrap()
    };
    assert_eq!(find("log.segment.bytes").value.as_deref(), Some("1048576"));
    assert_eq!(find("num.partitions").value.as_deref(), Some("2"));
    assert_eq!(find("broker.id").value.as_deref(), Some("1"));
    assert_eq!(
        describe(&mut wire, BROKER, "", Some(&["num.partitions"]))
            .configs
            .len(),
        1
    );

    assert_eq!(describe(&mut wire, TOPIC, "missing", None).error_code, 3);
    assert_eq!(
        describe(&mut wire, BROKER, "2", None).error_code,
        42,
        "another broker"
    );
    assert_eq!(
        describe(&mut wire, 16, "metrics", None).error_code,
        42,
        "a client-metrics resource"
    );
    // A group resource holds the share group settings (share_groups.rs tests them).
    assert_eq!(describe(&mut wire, 32, "group", None).error_code, 0);
}

#[test]
fn incremental_alter_configs_changes_a_topics_settings() {
    let (_dir, _broker, mut wire) = start();
    create_one(&mut wire, topic("t", 2, 1, &[("retention.bytes", "5000")]));
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "t",
            &[("retention.ms", 0, Some("1000"))],
            false
        ),
        (0, None)
    );
    assert_eq!(config(&mut wire, "t", "retention.ms"), ("1000".into(), 1));
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "t",
            &[("retention.bytes", 1, None)],
            false
        )
        .0,
        0
    );
    assert_eq!(
        config(&mut wire, "t", "retention.bytes"),
        ("-1".into(), 5),
        "back to the default"
    );
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "t",
            &[("cleanup.policy", 2, Some("compact"))],
            false
        )
        .0,
        0
    );
    assert_eq!(
        config(&mut wire, "t", "cleanup.policy"),
        ("compact,delete".into(), 1)
    );
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "t",
            &[("cleanup.policy", 3, Some("delete"))],
            false
        )
        .0,
        0
    );
    assert_eq!(
        config(&mut wire, "t", "cleanup.policy"),
        ("compact".into(), 1)
    );
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "t",
            &[("retention.ms", 0, Some("7"))],
            true
        )
        .0,
        0
    );
    assert_eq!(
        config(&mut wire, "t", "retention.ms"),
        ("1000".into(), 1),
        "validate_only"
    );
}

#[test]
fn incremental_alter_configs_refusals_change_nothing() {
    let (_dir, _broker, mut wire) = start();
    create_one(&mut wire, topic("t", 1, 1, &[("retention.ms", "1000")]));
    let before = describe(&mut wire, TOPIC, "t", None).configs;
    let cases: &[(Ops, i16)] = &[
        (&[("no.such.config", 0, Some("1"))], 40),
        (&[("retention.ms", 0, Some("soon"))], 40),
        (&[("segment.bytes", 0, Some("1"))], 40),
        (&[("retention.ms", 0, Some("5000\nsegment.ms=5000"))], 40),
        (&[("retention.ms", 2, Some("5"))], 40),
        (&[("retention.ms", 0, None)], 42),
        (
            &[("retention.ms", 0, Some("5")), ("retention.ms", 1, None)],
            42,
        ),
        (&[("retention.ms", 9, Some("5"))], 42),
        // A good change beside a bad one: neither is made.
        (
            &[
                ("segment.ms", 0, Some("5000")),
                ("max.message.bytes", 0, Some("x")),
            ],
            40,
        ),
    ];
    for (ops, code) in cases {
        let (error, message) = alter(&mut wire, TOPIC, "t", ops, false);
        assert_eq!(error, *code, "{ops:?}: {message:?}");
        assert!(message.is_some());
    }
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "missing",
            &[("retention.ms", 0, Some("5"))],
            false
        )
        .0,
        3
    );
    let (error, message) = alter(
        &mut wire,
        BROKER,
        "1",
        &[("log.retention.ms", 0, Some("5"))],
        false,
    );
    assert_eq!(
        error, 42,
        "not dynamic, as Kafka answers for one: {message:?}"
    );
    assert!(message.unwrap().contains("log.retention.ms"));
    assert_eq!(
        alter(
            &mut wire,
            BROKER,
            "3",
            &[("log.retention.ms", 0, Some("5"))],
            false
        )
        .0,
        42
    );
    assert_eq!(
        alter(&mut wire, 16, "m", &[("x", 0, Some("5"))], false).0,
        42
    );
    // An unknown group setting: INVALID_CONFIG, as Kafka's `GroupConfig.validateNames`.
    assert_eq!(
        alter(&mut wire, 32, "g", &[("x", 0, Some("5"))], false).0,
        40
    );
    assert_eq!(describe(&mut wire, TOPIC, "t", None).configs, before);
}

#[test]
fn topics_partitions_and_configs_survive_a_restart() {
    let (_dir, mut broker, mut wire) = start();
    let kept = create_one(&mut wire, topic("kept", 1, 1, &[("retention.ms", "1000")])).topic_id;
    create_one(&mut wire, topic("gone", 2, 1, &[]));
    assert_eq!(grow(&mut wire, "kept", 3, false).0, 0);
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "kept",
            &[("segment.ms", 0, Some("60000"))],
            false
        )
        .0,
        0
    );
    assert_eq!(delete_by_name(&mut wire, "gone"), 0);
    assert_eq!(broker.terminate().code(), Some(0));

    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(listed(&mut wire), vec![("kept".to_string(), 3, kept)]);
    assert_eq!(
        config(&mut wire, "kept", "retention.ms"),
        ("1000".into(), 1)
    );
    assert_eq!(config(&mut wire, "kept", "segment.ms"), ("60000".into(), 1));
    drop(wire);

    // After a crash too.
    let mut broker = broker;
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(listed(&mut wire), vec![("kept".to_string(), 3, kept)]);
    assert_eq!(config(&mut wire, "kept", "segment.ms"), ("60000".into(), 1));
}

#[test]
fn describe_cluster_names_this_broker_and_its_cluster() {
    let (_dir, broker, mut wire) = start();
    let metadata: MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let cluster: DescribeClusterResponse = wire.call(
        ApiKey::DescribeCluster,
        2,
        &DescribeClusterRequest::default().with_include_cluster_authorized_operations(false),
    );
    assert_eq!(cluster.error_code, 0);
    assert_eq!(Some(cluster.cluster_id.clone()), metadata.cluster_id);
    assert_eq!(cluster.controller_id, BrokerId(1));
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.brokers[0].broker_id, BrokerId(1));
    assert_eq!(cluster.brokers[0].port, i32::from(broker.addr.port()));
    assert_eq!(cluster.cluster_authorized_operations, i32::MIN);
    let v0: DescribeClusterResponse = wire.call(
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    );
    assert_eq!((v0.error_code, v0.brokers.len()), (0, 1));
    let controllers: DescribeClusterResponse = wire.call(
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(2),
    );
    assert_eq!(controllers.error_code, 114);
    let unknown: DescribeClusterResponse = wire.call(
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(5),
    );
    assert_eq!(unknown.error_code, 115);
}

#[test]
fn what_the_admin_apis_answered_survives_a_crash_right_after() {
    let (_dir, mut broker, mut wire) = start();
    let kept = create_one(&mut wire, topic("kept", 1, 1, &[])).topic_id;
    create_one(&mut wire, topic("gone", 3, 1, &[]));
    assert_eq!(grow(&mut wire, "kept", 2, false).0, 0);
    assert_eq!(
        alter(
            &mut wire,
            TOPIC,
            "kept",
            &[("retention.bytes", 0, Some("123456"))],
            false
        ),
        (0, None)
    );
    assert_eq!(delete_by_name(&mut wire, "gone"), 0);
    broker.crash();

    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(listed(&mut wire), vec![("kept".to_string(), 2, kept)]);
    assert_eq!(
        config(&mut wire, "kept", "retention.bytes"),
        ("123456".into(), 1)
    );
    // The deleted name is free again.
    assert_eq!(
        create_one(&mut wire, topic("gone", 1, 1, &[])).error_code,
        0
    );
}

/// Produces one batch of one `value_len`-byte record to `topic`-0 (acks=all): the error code.
fn produce_one(wire: &mut Wire, topic: &str, value_len: usize) -> i16 {
    let mut b = oncelog::format::BatchBuilder::new();
    b.append(1_700_000_000_000, None, Some(&vec![b'v'; value_len]), &[]);
    let records = bytes::Bytes::from(b.build().unwrap());
    common::wire::produce(wire, topic, 0, records).error_code
}

/// Altered settings are applied live, as Kafka applies them: a lowered `max.message.bytes`
/// refuses the next produce over it (MESSAGE_TOO_LARGE), with no restart, and deleting the
/// override lets it through again; a restart keeps what was altered.
#[test]
fn incremental_alter_configs_applies_settings_to_the_open_partitions() {
    const MESSAGE_TOO_LARGE: i16 = 10;
    let (_dir, mut broker, mut wire) = start();
    create_one(&mut wire, topic("live", 1, 1, &[]));
    assert_eq!(produce_one(&mut wire, "live", 4000), 0);
    let set = [("max.message.bytes", 0, Some("1000"))];
    assert_eq!(alter(&mut wire, TOPIC, "live", &set, false), (0, None));
    assert_eq!(
        produce_one(&mut wire, "live", 4000),
        MESSAGE_TOO_LARGE,
        "the lowered limit holds at once"
    );
    assert_eq!(produce_one(&mut wire, "live", 100), 0);

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        produce_one(&mut wire, "live", 4000),
        MESSAGE_TOO_LARGE,
        "and survives a restart"
    );
    let unset = [("max.message.bytes", 1, None)];
    assert_eq!(alter(&mut wire, TOPIC, "live", &unset, false), (0, None));
    assert_eq!(
        produce_one(&mut wire, "live", 4000),
        0,
        "back to the default, live"
    );
}

/// The legacy AlterConfigs (v2) of one resource: `configs` become its whole set.
fn alter_legacy(
    wire: &mut Wire,
    resource_type: i8,
    resource: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    use kafka_protocol::messages::alter_configs_request;
    let response: AlterConfigsResponse = wire.call(
        ApiKey::AlterConfigs,
        2,
        &AlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(resource))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            alter_configs_request::AlterableConfig::default()
                                .with_name(s(k))
                                .with_value(v.map(s))
                        })
                        .collect(),
                )]),
    );
    let r = &response.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[test]
fn alter_configs_replaces_a_topics_whole_set_of_settings() {
    let (_dir, _broker, mut wire) = start();
    create_one(
        &mut wire,
        topic(
            "t",
            1,
            1,
            &[("retention.bytes", "5000"), ("segment.ms", "60000")],
        ),
    );
    // The settings given replace the topic's: those not given are back to their defaults.
    assert_eq!(
        alter_legacy(
            &mut wire,
            TOPIC,
            "t",
            &[("retention.ms", Some("1000"))],
            false
        ),
        (0, None)
    );
    assert_eq!(config(&mut wire, "t", "retention.ms"), ("1000".into(), 1));
    assert_eq!(config(&mut wire, "t", "retention.bytes"), ("-1".into(), 5));
    assert_eq!(config(&mut wire, "t", "segment.ms").1, 5);
    // validate_only changes nothing; refusals are IncrementalAlterConfigs'.
    assert_eq!(
        alter_legacy(&mut wire, TOPIC, "t", &[("segment.ms", Some("5000"))], true),
        (0, None)
    );
    assert_eq!(config(&mut wire, "t", "retention.ms"), ("1000".into(), 1));
    let (error, message) = alter_legacy(&mut wire, TOPIC, "t", &[("no.such", Some("1"))], false);
    assert_eq!(error, 40, "{message:?}");
    let (error, _) = alter_legacy(&mut wire, TOPIC, "t", &[("segment.ms", None)], false);
    assert_eq!(error, 42);
    let (error, _) = alter_legacy(&mut wire, TOPIC, "absent", &[], false);
    assert_eq!(error, 3);
    let (error, message) = alter_legacy(
        &mut wire,
        BROKER,
        "",
        &[("log.retention.ms", Some("1000"))],
        false,
    );
    assert_eq!(error, 42);
    assert!(message
        .unwrap()
        .contains("Cannot update these configs dynamically"));
    assert_eq!(config(&mut wire, "t", "retention.ms"), ("1000".into(), 1));
}
