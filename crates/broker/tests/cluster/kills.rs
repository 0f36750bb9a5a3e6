//! Cluster mode (docs/design.md, "A cluster of brokers"): three `oncelog-broker` processes on
//! loopback, a topic of three partitions replicated on all three, an idempotent producer
//! (raw protocol: producer id, epoch and sequences from InitProducerId) producing while the
//! leader of a partition is SIGKILLed and restarted, round after round
//! (`ONCELOG_CLUSTER_ROUNDS`, default 3). Every acknowledged batch is read back once from each
//! partition's leader at its acknowledged offset, offsets are dense, and every replica's log
//! holds the same batches. The same with librdkafka's and Kafka's Java idempotent producers. Plus Kafka's
//! answers: Metadata's shape, NOT_LEADER_OR_FOLLOWER from
//! a follower with the leader named, NOT_CONTROLLER, a refused replication factor, and the
//! refusals of what cluster mode does not take.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::cluster_clients::{
    check_delivered_stored_once, consumer_group_through_coordinator_kills, GroupProtocol,
};
use crate::common::wire::{str_bytes, topic_name};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;

#[test]
fn acknowledged_records_survive_leader_kills_once_each_and_replicas_agree() {
    let rounds = rounds(3);
    let mut c = Cluster::start_with_topic();
    let mut producer = Producer::new(&c);
    let mut next_partition = 0;
    let mut produce_for = |c: &Cluster, producer: &mut Producer, time: Duration| {
        let until = Instant::now() + time;
        while Instant::now() < until {
            producer.produce(c, next_partition);
            next_partition = (next_partition + 1) % PARTITIONS;
        }
    };
    produce_for(&c, &mut producer, Duration::from_millis(500));
    for round in 0..rounds {
        // The leader of one partition (each round another) dies and comes back while the
        // producer goes on.
        let partition = round as i32 % PARTITIONS;
        let victim = c.leaders(TOPIC, PARTITIONS)[&partition];
        eprintln!("round {round}: SIGKILL node {victim}, leader of partition {partition}");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        produce_for(&c, &mut producer, Duration::from_millis(1500));
        c.launch(victim);
        produce_for(&c, &mut producer, Duration::from_millis(500));
        // Back in step before the next kill: every node knows every leader.
        c.leaders(TOPIC, PARTITIONS);
    }
    eprintln!(
        "acknowledged {} batches, {} retries",
        producer.acked.values().map(Vec::len).sum::<usize>(),
        producer.retries
    );
    assert!(producer.retries > 0, "the kills were not felt");

    check_acknowledged_once_and_replicas_agree(&mut c, &producer);
}

#[test]
fn a_cluster_answers_as_kafka_does() {
    let c = Cluster::start();
    let controller = c.controller();
    let other = (1..=3).find(|id| *id != controller).unwrap();

    // CreateTopics elsewhere than on the controller: NOT_CONTROLLER, naming it.
    let r = c.create_topic(other, "t", 2, 3).unwrap();
    assert_eq!(r.topics[0].error_code, NOT_CONTROLLER);
    assert!(r.topics[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains(&controller.to_string()));
    // A replication factor above the cluster's size.
    let r = c.create_topic(controller, "t", 2, 4).unwrap();
    assert_eq!(r.topics[0].error_code, INVALID_REPLICATION_FACTOR);
    assert!(r.topics[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains("replication factor 4"));
    let r = c.create_topic(controller, "t", 2, 3).unwrap();
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(
        (r.topics[0].num_partitions, r.topics[0].replication_factor),
        (2, 3)
    );
    let r = c.create_topic(controller, "single", 3, 1).unwrap();
    assert_eq!(r.topics[0].error_code, 0);

    // Metadata: every node, the controller, each partition's leader, epoch, replicas, isr.
    // (Once each partition is led by its preferred replica, where the balancer leaves it.)
    let deadline = Instant::now() + Duration::from_secs(30);
    let leaders = loop {
        let leaders = c.leaders("t", 2);
        if leaders == BTreeMap::from([(0, 1), (1, 2)]) {
            break leaders;
        }
        assert!(
            Instant::now() < deadline,
            "not led by the preferred replicas: {leaders:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let m = c.metadata(other, None).unwrap();
    let brokers: BTreeMap<i32, i32> = m.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    assert_eq!(brokers.len(), 3);
    for (id, addr) in &c.kafka {
        assert_eq!(brokers[id], i32::from(addr.port()));
    }
    assert_eq!(m.controller_id.0, controller);
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("t"))
        .unwrap();
    assert!(!t.topic_id.is_nil());
    // `__consumer_offsets` is listed as Kafka lists it: internal, one partition here, led by
    // the group coordinator. The two answers are two requests: an election between them (a
    // loaded machine misses heartbeats) is retried, a lasting disagreement is not.
    let coordinator_deadline = Instant::now() + Duration::from_secs(15);
    let mut fresh = None;
    loop {
        let offsets = fresh
            .as_ref()
            .unwrap_or(&m)
            .topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("__consumer_offsets"))
            .unwrap();
        assert!(offsets.is_internal);
        assert_eq!(offsets.partitions.len(), 1);
        let (listed, coordinator) = (
            offsets.partitions[0].leader_id.0,
            c.group_coordinator("any").unwrap(),
        );
        if listed == coordinator {
            break;
        }
        assert!(
            Instant::now() < coordinator_deadline,
            "metadata lists node {listed} as the offsets' leader, FindCoordinator answers {coordinator}"
        );
        std::thread::sleep(Duration::from_millis(100));
        fresh = Some(c.metadata(other, None).unwrap());
    }
    for p in &t.partitions {
        assert_eq!(p.error_code, 0);
        assert_eq!(p.leader_id.0, leaders[&p.partition_index]);
        assert!(p.leader_epoch >= 1, "the raft term: {}", p.leader_epoch);
        let replicas: BTreeSet<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
        assert_eq!(replicas, BTreeSet::from([1, 2, 3]));
        assert!(p.isr_nodes.iter().any(|b| b.0 == p.leader_id.0));
    }
    // Preferred leaders go round: partition p's replicas start at node p+1.
    let preferred: Vec<i32> = t.partitions.iter().map(|p| p.replica_nodes[0].0).collect();
    assert_eq!(preferred, vec![1, 2]);
    let single = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("single"))
        .unwrap();
    assert!(single.partitions.iter().all(|p| p.replica_nodes.len() == 1));

    // Produce and Fetch on a follower: NOT_LEADER_OR_FOLLOWER with the leader and where it is.
    let leader = leaders[&0];
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let mut s = connect(c.kafka[&follower]).unwrap();
    let records = {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000, None, Some(b"v"), &[]);
        Bytes::from(b.build().unwrap())
    };
    let mut request = produce_request(0, records.clone());
    request.topic_data[0].name = topic_name("t");
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 10, &request).unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(p.current_leader.leader_id.0, leader);
    assert!(p.current_leader.leader_epoch >= 1);
    assert_eq!(r.node_endpoints.len(), 1);
    assert_eq!(r.node_endpoints[0].port, i32::from(c.kafka[&leader].port()));
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name("t"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch).unwrap();
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(
        r.responses[0].partitions[0].current_leader.leader_id.0,
        leader
    );

    // On the leader the batch is written and read back below the high watermark.
    let mut s = connect(c.kafka[&leader]).unwrap();
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 10, &request).unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch).unwrap();
    let part = &r.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let data: Vec<_> = batches(part.records.as_deref().unwrap())
        .into_iter()
        .filter(|b| !b.2)
        .collect();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].0, p.base_offset);
    assert_eq!(part.high_watermark, p.base_offset + 1);

    // OffsetForLeaderEpoch on the leader, from its epoch cache; a stale current epoch is
    // fenced; a follower sends the client to the leader.
    let epochs = |current: i32, epoch: i32| {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic_name("t"))
                    .with_partitions(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(current)
                            .with_leader_epoch(epoch),
                    ]),
            ])
    };
    let m = c.metadata(leader, Some(&["t"])).unwrap();
    let term_now = m.topics[0].partitions[0].leader_epoch;
    let r: OffsetForLeaderEpochResponse = call(
        &mut s,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(term_now, term_now),
    )
    .unwrap();
    let e = &r.topics[0].partitions[0];
    assert_eq!(e.error_code, 0);
    assert_eq!(e.leader_epoch, term_now);
    assert!(e.end_offset > p.base_offset, "{e:?}");
    let r: OffsetForLeaderEpochResponse = call(
        &mut s,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(term_now - 1, term_now),
    )
    .unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, FENCED_LEADER_EPOCH);
    // A fetch naming an older leader epoch is fenced too.
    let mut stale = fetch.clone();
    stale.topics[0].partitions[0].current_leader_epoch = term_now - 1;
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &stale).unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, FENCED_LEADER_EPOCH);
    stale.topics[0].partitions[0].current_leader_epoch = term_now;
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &stale).unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let mut sf = connect(c.kafka[&follower]).unwrap();
    let r: OffsetForLeaderEpochResponse = call(
        &mut sf,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(-1, term_now),
    )
    .unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);

    // An idempotent producer's retry of a written batch: NONE with the original offset.
    let granted: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .unwrap();
    assert_eq!(granted.producer_id.0 % 1024, i64::from(leader));
    let mut retried = produce_request(1, batch(granted.producer_id.0, 1, 0));
    retried.topic_data[0].name = topic_name("t");
    let mut s1 = connect(c.kafka[&leaders[&1]]).unwrap();
    let first: ProduceResponse = call(&mut s1, ApiKey::Produce, 9, &retried).unwrap();
    let again: ProduceResponse = call(&mut s1, ApiKey::Produce, 9, &retried).unwrap();
    let (first, again) = (
        &first.responses[0].partition_responses[0],
        &again.responses[0].partition_responses[0],
    );
    assert_eq!((first.error_code, again.error_code), (0, 0));
    assert_eq!(again.base_offset, first.base_offset);
    // The transaction and share coordinators are the group coordinator's node (all on the
    // offsets group's leader, tests/cluster/txn.rs, tests/cluster/share.rs).
    let find = |s: &mut std::net::TcpStream, key_type: i8| -> FindCoordinatorResponse {
        call(
            s,
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![str_bytes("tx")]),
        )
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (group, txn) = (find(&mut s, 0), find(&mut s, 1));
        if group.coordinators[0].error_code == 0 {
            assert_eq!(txn.coordinators[0].error_code, 0, "{txn:?}");
            assert_eq!(txn.coordinators[0].node_id, group.coordinators[0].node_id);
            break;
        }
        assert!(Instant::now() < deadline, "no coordinator: {group:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let share = find(&mut s, 2);
    assert_eq!(share.coordinators[0].error_code, 0, "{share:?}");
    assert_eq!(
        share.coordinators[0].node_id,
        find(&mut s, 0).coordinators[0].node_id
    );

    // A broker's settings are its flags, none dynamic: refused as a single broker refuses
    // them (a topic's settings change through the controller: tests/cluster/retention.rs).
    let r: IncrementalAlterConfigsResponse = call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(str_bytes(""))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(str_bytes("log.retention.ms"))
                        .with_value(Some(str_bytes("1000"))),
                ]),
        ]),
    )
    .unwrap();
    assert_eq!(r.responses[0].error_code, INVALID_REQUEST);
    assert!(r.responses[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains("Cannot update these configs dynamically"));
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .unwrap();
    let advertised: BTreeSet<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
    let finalized: Vec<(String, i16)> = r
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.max_version_level))
        .collect();
    assert!(advertised.contains(&(ApiKey::Produce as i16)));
    // DescribeConfigs (kafka-topics --describe asks for it) from the image: a topic the
    // cluster has gets the broker's defaults; one it lacks is unknown.
    assert!(advertised.contains(&(ApiKey::DescribeConfigs as i16)));
    let describe = |name: &str| {
        DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(name))
                .with_configuration_keys(None),
        ])
    };
    let r: DescribeConfigsResponse =
        call(&mut s, ApiKey::DescribeConfigs, 4, &describe("t")).unwrap();
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    assert!(
        r.results[0]
            .configs
            .iter()
            .any(|c| c.name.as_str() == "cleanup.policy" && c.value.as_deref() == Some("delete")),
        "{r:?}"
    );
    let r: DescribeConfigsResponse =
        call(&mut s, ApiKey::DescribeConfigs, 4, &describe("absent")).unwrap();
    assert_eq!(r.results[0].error_code, UNKNOWN_TOPIC_OR_PARTITION, "{r:?}");
    // The group and transaction coordinators are replicated, under transaction version 1
    // (clients add partitions themselves: the partition leaders do not, KIP-890 part 2).
    assert!(advertised.contains(&(ApiKey::JoinGroup as i16)));
    assert!(advertised.contains(&(ApiKey::EndTxn as i16)));
    assert_eq!(finalized, vec![("transaction.version".to_string(), 1)]);
}

/// librdkafka's idempotent producer (confluent-kafka, acks=all) through SIGKILLs of partition
/// leaders: every message it reports delivered is in the log once, at the offset reported,
/// and no message is stored twice.
#[test]
fn a_real_idempotent_producer_keeps_every_message_through_leader_kills() {
    real_producer_through_leader_kills(common::clients::Client::Confluent);
}

/// Kafka's own Java producer (kafka-clients 4.4, idempotent, acks=all), the same way.
#[test]
fn the_java_producer_keeps_every_message_through_leader_kills() {
    real_producer_through_leader_kills(common::clients::Client::Java);
}

fn real_producer_through_leader_kills(client: common::clients::Client) {
    use crate::common::clients::{Client, Produce};
    let rounds = rounds(3);
    let mut c = Cluster::start_with_topic();
    let bootstrap: Vec<String> = c.kafka.values().map(|a| a.to_string()).collect();
    let count = 1500 * rounds.max(1);
    let mut run = client.produce(
        &bootstrap.join(","),
        TOPIC,
        count,
        &Produce {
            wave: 20,
            pace_ms: 20,
            // librdkafka's sticky partitioner would send a wave to one partition.
            spread: client == Client::Confluent,
            ..Produce::default()
        },
    );
    run.wait_delivered(100, Duration::from_secs(60));
    for round in 0..rounds {
        let partition = round as i32 % PARTITIONS;
        let victim = c.leaders(TOPIC, PARTITIONS)[&partition];
        eprintln!("round {round}: SIGKILL node {victim}, leader of partition {partition}");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        std::thread::sleep(Duration::from_millis(1500));
        c.launch(victim);
        c.leaders(TOPIC, PARTITIONS);
    }
    let delivered = run.delivered(Duration::from_secs(180));
    let leaders = c.leaders(TOPIC, PARTITIONS);
    let stored = check_delivered_stored_once(&c, &leaders, &delivered, count);

    // librdkafka's consumer (assigned partitions, nothing committed) reads them all, each once.
    if client == Client::Confluent {
        let consumed = client.consume_with(&bootstrap.join(","), TOPIC, count, &["--no-commit"]);
        let mut seen = BTreeSet::new();
        for r in &consumed.records {
            assert_eq!(
                stored.get(&r.value),
                Some(&(r.partition, r.offset)),
                "{r:?}"
            );
            assert!(seen.insert(r.value.clone()), "{} consumed twice", r.value);
        }
        assert_eq!(seen.len(), count);
    }
}

/// The group coordinator lives on the leader of the replicated offsets group: a classic
/// group (JoinGroup, SyncGroup) commits offsets, the coordinator's node is SIGKILLed, and the
/// group finds the new coordinator, which answers every offset committed before (a commit is
/// answered once a majority holds it) and still knows the member's generation (the group's
/// records are replicated too). Round after round (`ONCELOG_CLUSTER_ROUNDS`, default 3), the
/// killed node restarted each time.
#[test]
fn committed_offsets_survive_coordinator_kills() {
    let rounds = rounds(3);
    let mut c = Cluster::start_with_topic();
    let mut member = GroupMember::join(&c, "g");
    let mut committed = BTreeMap::new();
    for round in 0..rounds {
        // A few commits, each answered only once replicated.
        for step in 0..5 {
            for p in 0..PARTITIONS {
                committed.insert(p, (round * 100 + step * 10) as i64 + i64::from(p));
            }
            let errors = member.commit(&c, TOPIC, &committed);
            assert!(errors.iter().all(|e| *e == 0), "round {round}: {errors:?}");
        }
        let victim = c.group_coordinator("g").unwrap();
        eprintln!("round {round}: SIGKILL node {victim}, the group coordinator");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        assert_eq!(
            member.fetch(&c, TOPIC, PARTITIONS),
            committed,
            "round {round}: the new coordinator lost a commit"
        );
        assert_ne!(member.coordinators.last(), Some(&victim));
        assert_eq!(
            member.heartbeat(&c),
            0,
            "round {round}: the generation was lost"
        );
        c.launch(victim);
        // The restarted node may lead again (the preferred leader): still the same offsets.
        assert_eq!(member.fetch(&c, TOPIC, PARTITIONS), committed);
    }
    eprintln!(
        "coordinators answering, in order: {:?}",
        member.coordinators
    );
    assert!(
        member.coordinators.len() > rounds,
        "the coordinator never moved"
    );
}

/// Every node SIGKILLed at once and restarted, round after round (`ONCELOG_CLUSTER_ROUNDS`,
/// default 3): a node's high watermark is the one it last flushed (written lazily), which may
/// miss the topic's creation, so each image starts without the topic. The first coordinator
/// must load only once its image holds everything the metadata log committed, or it answers
/// the member's commit UNKNOWN_TOPIC_OR_PARTITION (seen in CI after a coordinator's node was
/// restarted); the controller likewise decides nothing before, or it answers a CreateTopics of
/// the topic as created. The member commits as soon as a coordinator answers, at every 20 ms,
/// and the topic is created again as soon as the nodes listen.
#[test]
fn a_restarted_cluster_coordinates_only_once_its_image_knows_the_topics() {
    let rounds = rounds(3);
    let mut c = Cluster::start_with_topic();
    let mut member = GroupMember::join(&c, "g");
    for round in 0..rounds {
        let committed: BTreeMap<i32, i64> = (0..PARTITIONS)
            .map(|p| (p, (round * 10) as i64 + i64::from(p)))
            .collect();
        let errors = member.commit(&c, TOPIC, &committed);
        assert!(errors.iter().all(|e| *e == 0), "round {round}: {errors:?}");
        for node in c.nodes.values_mut() {
            node.crash();
        }
        c.nodes.clear();
        c.launch_all();
        // Every node is asked (node 1, the preferred controller, first); each answers
        // NOT_CONTROLLER until one is ready, which must know the topic.
        let deadline = Instant::now() + Duration::from_secs(30);
        let answer = 'asked: loop {
            for id in [1, 2, 3] {
                let created = c.create_topic(id, TOPIC, PARTITIONS, 3);
                if let Ok(created) = created {
                    let t = &created.topics[0];
                    if t.error_code != NOT_CONTROLLER {
                        break 'asked (t.error_code, t.error_message.clone());
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no controller answered"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            answer.0, TOPIC_ALREADY_EXISTS,
            "round {round}: the topic created again after a restart: {answer:?}"
        );
        let next: BTreeMap<i32, i64> = committed.iter().map(|(p, o)| (*p, o + 1)).collect();
        let errors = member.commit(&c, TOPIC, &next);
        assert!(
            errors.iter().all(|e| *e == 0),
            "round {round}: the first commit after a restart: {errors:?}"
        );
        assert_eq!(member.fetch(&c, TOPIC, PARTITIONS), next, "round {round}");
    }
}

/// librdkafka's consumer in a group (subscribe(), a synchronous commit after each record,
/// tests/clients/group_client.py) while the group coordinator's node is SIGKILLed and
/// restarted, round after round (`ONCELOG_CLUSTER_ROUNDS`, default 3): it finds each new
/// coordinator, consumes every message, and the group's committed offsets end at each
/// partition's end.
#[test]
fn a_real_consumer_group_commits_through_coordinator_kills() {
    let (c, ends) = consumer_group_through_coordinator_kills(
        GroupProtocol::Classic,
        "real",
        rounds(3),
        |_, _| {},
    );
    // The group's committed offsets, from whichever node coordinates now.
    let mut reader = GroupMember {
        group: "real".to_string(),
        member_id: String::new(),
        generation: -1,
        coordinators: Vec::new(),
    };
    assert_eq!(reader.fetch(&c, TOPIC, PARTITIONS), ends);
}

/// A node that cannot listen for its peers does not start, and says where; a malformed
/// `--cluster` is refused before anything opens.
#[test]
fn a_node_that_cannot_start_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let raft = taken.local_addr().unwrap().port();
    let spec = format!("1=127.0.0.1:{}:{raft}", common::ports::free_port());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::broker_bin())
            .args(args)
            .output()
            .unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).to_string())
    };
    let data = tmp.path().join("node-1");
    let data = data.to_str().unwrap();
    let (status, stderr) = run(&["--data", data, "--node-id", "1", "--cluster", &spec]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot listen for raft on 127.0.0.1:{raft}")),
        "{stderr}"
    );
    let (status, stderr) = run(&["--data", data, "--node-id", "2", "--cluster", &spec]);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("does not name this node"), "{stderr}");
    drop(taken);
}

/// Ports handed to nodes before they start are all different, even when clusters of tests
/// are configured side by side, and none is ephemeral, so no outgoing connection takes one
/// while its node is down (a CI run once gave one node 37483 for both its listeners).
#[test]
fn ports_handed_to_nodes_are_distinct_and_never_ephemeral() {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let picks: Vec<u16> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| s.spawn(|| common::ports::free_ports(6)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let distinct: BTreeSet<u16> = picks.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        picks.len(),
        "a port handed out twice: {picks:?}"
    );
    assert!(
        picks.iter().all(|&p| p < low),
        "an ephemeral port: {picks:?}"
    );
    for &p in &picks {
        TcpListener::bind(("127.0.0.1", p)).expect("a handed-out port is free");
    }
}
