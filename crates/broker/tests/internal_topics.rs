//! `__consumer_offsets` in Metadata, as Kafka 4.4 answers it: an internal topic (one partition,
//! this broker its leader), listed among all topics and found by name or id, never created by
//! a Metadata request. franz-go's `TestConsumeRegex` (crates/broker/e2e/kgo.sh) waits for
//! exactly this to see that a pattern subscription leaves the internal topic out. A KIP-848
//! member's regex, resolved by the broker, does match it, as on Kafka (franz-go's
//! `Test848RegexBrokerResolves`).

mod common;

use common::wire::{topic_name as name, Wire};
use common::BrokerProcess;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::*;

const OFFSETS: &str = "__consumer_offsets";

fn metadata(
    wire: &mut Wire,
    version: i16,
    topics: Option<Vec<MetadataRequestTopic>>,
) -> Vec<MetadataResponseTopic> {
    let response: MetadataResponse = wire.call(
        ApiKey::Metadata,
        version,
        &MetadataRequest::default()
            .with_topics(topics)
            .with_allow_auto_topic_creation(true),
    );
    response.topics
}

/// What Kafka 4.4 answers for it (`kafka.sh start`, offsets.topic.num.partitions=1): no
/// error, internal, partition 0 led by the one broker with it as the only replica.
fn assert_offsets_topic(t: &MetadataResponseTopic) {
    assert_eq!(t.error_code, 0);
    assert_eq!(t.name.as_ref().map(|n| n.0.as_str()), Some(OFFSETS));
    assert!(t.is_internal);
    assert_eq!(t.partitions.len(), 1);
    let p = &t.partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.partition_index, 0);
    assert_eq!(p.leader_id, BrokerId(1));
    assert_eq!(p.replica_nodes, vec![BrokerId(1)]);
    assert_eq!(p.isr_nodes, vec![BrokerId(1)]);
}

#[test]
fn consumer_offsets_is_an_internal_topic_in_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(dir.path(), &["--segment-bytes", "1048576"]);
    let mut wire = Wire::connect(broker.addr);
    let user = common::topic("user");
    common::wire::auto_create_topic(&mut wire, &user);

    // Every topic (v1, the first with is_internal, and v12): the internal one and the user's.
    for version in [1, 12] {
        let all = metadata(&mut wire, version, None);
        assert_eq!(all.len(), 2, "v{version}: {all:?}");
        let offsets: Vec<_> = all.iter().filter(|t| t.is_internal).collect();
        assert_eq!(offsets.len(), 1, "v{version}");
        assert_offsets_topic(offsets[0]);
        let listed_user = all.iter().find(|t| !t.is_internal).unwrap();
        assert_eq!(listed_user.name.as_ref().unwrap().0.as_str(), user);
    }
    let id = metadata(&mut wire, 12, None)
        .into_iter()
        .find(|t| t.is_internal)
        .unwrap()
        .topic_id;
    assert!(!id.is_nil());

    // By name, with auto-creation allowed: described, not created and not refused.
    let by_name = metadata(
        &mut wire,
        12,
        Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(OFFSETS)))
        ]),
    );
    assert_eq!(by_name.len(), 1);
    assert_offsets_topic(&by_name[0]);
    assert_eq!(by_name[0].topic_id, id);

    // By id (v12): the same topic.
    let by_id = metadata(
        &mut wire,
        12,
        Some(vec![MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(id)]),
    );
    assert_eq!(by_id.len(), 1);
    assert_offsets_topic(&by_id[0]);

    // The same id after a restart, and no user topic was made of it.
    assert!(broker.terminate().success());
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    let all = metadata(&mut wire, 12, None);
    assert_eq!(all.len(), 2);
    assert_eq!(all.iter().find(|t| t.is_internal).unwrap().topic_id, id);
    assert!(!dir.path().join(format!("{OFFSETS}-0")).exists());
}

/// A KIP-848 member's regex is resolved against every topic, `__consumer_offsets` included, as
/// Kafka resolves it (franz-go's `Test848RegexBrokerResolves` checks that the broker assigns the
/// internal topic); a regex that does not match it leaves it out.
#[test]
fn a_consumer_protocol_regex_is_assigned_consumer_offsets_as_kafka_assigns_it() {
    use kafka_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest as Beat;
    use kafka_protocol::protocol::StrBytes;
    use std::collections::BTreeSet;

    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(dir.path(), &["--segment-bytes", "1048576"]);
    let mut wire = Wire::connect(broker.addr);
    let user = common::topic("regex-orders");
    let user_id = common::wire::auto_create_topic(&mut wire, &user).topic_id;
    let offsets_id = metadata(&mut wire, 12, None)
        .into_iter()
        .find(|t| t.is_internal)
        .unwrap()
        .topic_id;

    let join = |wire: &mut Wire, group: &str, regex: String| -> BTreeSet<uuid::Uuid> {
        let answer: ConsumerGroupHeartbeatResponse = wire.call(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &Beat::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
                .with_member_id(StrBytes::from_static_str("member-a"))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(Vec::new()))
                .with_subscribed_topic_regex(Some(StrBytes::from_string(regex)))
                .with_topic_partitions(Some(Vec::new())),
        );
        assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        let assignment = answer
            .assignment
            .expect("a join is answered with the assignment");
        for t in &assignment.topic_partitions {
            assert_eq!(t.partitions, vec![0]);
        }
        assignment
            .topic_partitions
            .iter()
            .map(|t| t.topic_id)
            .collect()
    };

    // The internal topic named in the regex (franz-go wraps each in `.*(?:...).*`).
    let both = join(
        &mut wire,
        "with-internal",
        format!("{user}|__consumer_offsets"),
    );
    assert_eq!(both, BTreeSet::from([user_id, offsets_id]));
    let described: ConsumerGroupDescribeResponse = wire.call(
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_static_str("with-internal"))]),
    );
    let names: BTreeSet<String> = described.groups[0].members[0]
        .assignment
        .topic_partitions
        .iter()
        .map(|t| t.topic_name.0.to_string())
        .collect();
    assert_eq!(names, BTreeSet::from([user.clone(), OFFSETS.to_string()]));

    // A regex that does not match it: the user topic only.
    let only_user = join(&mut wire, "without-internal", "regex-.*".to_string());
    assert_eq!(only_user, BTreeSet::from([user_id]));
}
