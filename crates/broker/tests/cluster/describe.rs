//! The describe-only admin APIs in cluster mode (docs/design.md, "A cluster of brokers"):
//! three `oncelog-broker` processes, a topic of three partitions on two replicas each, and a
//! transaction left open in partition 0 (raw protocol, transaction version 1 as the cluster
//! finalizes it). DescribeCluster names every node from any node; DescribeLogDirs answers per
//! node for its own replicas; DescribeProducers is the partition leader's
//! (NOT_LEADER_OR_FOLLOWER elsewhere); ListTransactions and DescribeTransactions are the
//! transaction coordinator's (elsewhere none listed, NOT_COORDINATOR). Then Kafka's own tools
//! against the cluster: `kafka-transactions` list, describe and describe-producers,
//! `kafka-log-dirs --describe`, `kafka-cluster cluster-id` and `kafka-broker-api-versions`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::clients::kafka_tool;
use crate::common::cluster::*;
use crate::common::wire::{advertised, str_bytes, topic_name, Wire};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::*;

const NAME: &str = "described";
const TXN_ID: &str = "describe-tx";
const NOT_COORDINATOR: i16 = 16;
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

fn describe_cluster(c: &Cluster, id: i32, endpoint_type: i8) -> DescribeClusterResponse {
    let mut s = connect(c.kafka[&id]).unwrap();
    call(
        &mut s,
        ApiKey::DescribeCluster,
        2,
        &DescribeClusterRequest::default().with_endpoint_type(endpoint_type),
    )
    .unwrap()
}

/// DescribeLogDirs v3 on node `id`: its one directory, and per topic the (partition, size)
/// it lists.
fn log_dirs(
    c: &Cluster,
    id: i32,
    asked: Option<Vec<DescribableLogDirTopic>>,
) -> (String, BTreeMap<String, BTreeMap<i32, i64>>) {
    let mut s = connect(c.kafka[&id]).unwrap();
    let r: DescribeLogDirsResponse = call(
        &mut s,
        ApiKey::DescribeLogDirs,
        3,
        &DescribeLogDirsRequest::default().with_topics(asked),
    )
    .unwrap();
    assert_eq!((r.error_code, r.results.len()), (0, 1), "node {id}");
    let dir = &r.results[0];
    assert_eq!(dir.error_code, 0);
    let topics = dir
        .topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    assert_eq!((p.offset_lag, p.is_future_key), (0, false));
                    (p.partition_index, p.partition_size)
                })
                .collect();
            (t.name.0.to_string(), parts)
        })
        .collect();
    (dir.log_dir.to_string(), topics)
}

/// DescribeProducers v0 of `topic`-`partition` on node `id`: the partition's answer.
fn producers(
    c: &Cluster,
    id: i32,
    topic: &str,
    partition: i32,
) -> describe_producers_response::PartitionResponse {
    let mut s = connect(c.kafka[&id]).unwrap();
    let mut r: DescribeProducersResponse = call(
        &mut s,
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![partition])]),
    )
    .unwrap();
    r.topics.remove(0).partitions.remove(0)
}

fn list_transactions(c: &Cluster, id: i32, states: &[&str]) -> ListTransactionsResponse {
    let mut s = connect(c.kafka[&id]).unwrap();
    call(
        &mut s,
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|s| str_bytes(s)).collect())
            .with_duration_filter(-1),
    )
    .unwrap()
}

fn describe_transactions(
    c: &Cluster,
    id: i32,
    ids: &[&str],
) -> Vec<describe_transactions_response::TransactionState> {
    let mut s = connect(c.kafka[&id]).unwrap();
    let r: DescribeTransactionsResponse = call(
        &mut s,
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(ids.iter().map(|i| TransactionalId(str_bytes(i))).collect()),
    )
    .unwrap();
    r.transaction_states
}

/// The transaction coordinator once it has loaded (it answers DescribeTransactions of an id
/// it never saw with TRANSACTIONAL_ID_NOT_FOUND, COORDINATOR_LOAD_IN_PROGRESS before) and
/// stayed for 4 s: a new cluster's coordinators' group may first be led by another replica
/// than its preferred one, and the balancer moves it there after 3 s; the test's steps must
/// all meet the same coordinator.
fn loaded_coordinator(c: &Cluster) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut since: Option<(i32, Instant)> = None;
    loop {
        let loaded = c.group_coordinator("any").ok().filter(|&id| {
            describe_transactions(c, id, &["nobody"])[0].error_code == TRANSACTIONAL_ID_NOT_FOUND
        });
        match (loaded, since) {
            (Some(id), Some((was, at))) if id == was => {
                if at.elapsed() >= Duration::from_secs(4) {
                    return id;
                }
            }
            (Some(id), _) => since = Some((id, Instant::now())),
            (None, _) => since = None,
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator loaded and settled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rows of a tool's table whose column `col` (from 0) is `value`, split on whitespace.
fn rows<'a>(out: &'a str, col: usize, value: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|r| r.get(col) == Some(&value))
        .collect()
}

#[test]
fn describe_apis_answer_where_kafka_does_and_kafkas_tools_work() {
    let mut c = Cluster::configure();
    c.launch_all();
    assert_eq!(c.controller(), 1);
    let created = c.create_topic(1, NAME, 3, 2).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let leaders = c.leaders(NAME, 3);
    let metadata = c.metadata(1, Some(&[NAME])).unwrap();
    let cluster_id = metadata.cluster_id.clone().unwrap().to_string();
    let replicas: BTreeMap<i32, Vec<i32>> = metadata.topics[0]
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                p.replica_nodes.iter().map(|n| n.0).collect(),
            )
        })
        .collect();

    // A transaction left open in partition 0: InitProducerId and AddPartitionsToTxn on the
    // coordinator, a transactional batch of three records on the partition's leader.
    let coordinator = loaded_coordinator(&c);
    let mut txn = Wire::connect(c.kafka[&coordinator]);
    let (pid, epoch) = common::txn::init_txn(&mut txn, 4, TXN_ID, 60_000);
    common::txn::add_partitions(&mut txn, TXN_ID, (pid, epoch), NAME, &[0]);
    let leader = leaders[&0];
    let mut data = Wire::connect(c.kafka[&leader]);
    let written = common::wire::produce(
        &mut data,
        NAME,
        0,
        common::txn::batch(pid, epoch, 0, 3, true),
    );
    assert_eq!(written.error_code, 0);
    // Where the transaction starts (raft's own entries of the group come first in its log).
    let start = written.base_offset;
    assert!(start >= 0);

    // ApiVersions: each of the five is advertised at the single broker's versions.
    let mut s = connect(c.kafka[&2]).unwrap();
    let versions: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(str_bytes("t"))
            .with_client_software_version(str_bytes("1")),
    )
    .unwrap();
    for (api, range) in [
        (ApiKey::DescribeCluster, (0, 2)),
        (ApiKey::DescribeLogDirs, (1, 3)),
        (ApiKey::DescribeProducers, (0, 0)),
        (ApiKey::ListTransactions, (0, 1)),
        (ApiKey::DescribeTransactions, (0, 0)),
    ] {
        assert_eq!(advertised(&versions, api), Some(range), "{api:?}");
    }

    // DescribeCluster from every node: every node, the controller, Metadata's cluster id;
    // the controllers' endpoint type is refused as Kafka's brokers refuse it.
    let nodes: BTreeSet<(i32, String, i32)> = c
        .kafka
        .iter()
        .map(|(id, a)| (*id, a.ip().to_string(), i32::from(a.port())))
        .collect();
    for id in 1..=3 {
        let r = describe_cluster(&c, id, 1);
        assert_eq!(r.error_code, 0, "node {id}");
        assert_eq!(r.cluster_id.to_string(), cluster_id);
        assert_eq!(r.controller_id.0, 1);
        let brokers: BTreeSet<(i32, String, i32)> = r
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
            .collect();
        assert_eq!(brokers, nodes, "node {id}");
    }
    let r = describe_cluster(&c, 3, 2);
    assert_eq!(r.error_code, MISMATCHED_ENDPOINT_TYPE);
    assert!(r.brokers.is_empty());

    // DescribeLogDirs: each node its own data directory and the partitions it holds a
    // replica of (partition 0's with the batch on both of its replicas), nothing of the
    // cluster's own groups.
    for id in 1..=3 {
        let (dir, topics) = log_dirs(&c, id, None);
        assert_eq!(dir, c.dirs[&id].display().to_string());
        let held: BTreeSet<i32> = replicas
            .iter()
            .filter(|(_, r)| r.contains(&id))
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(topics.keys().collect::<Vec<_>>(), vec![NAME], "node {id}");
        let listed: BTreeSet<i32> = topics[NAME].keys().copied().collect();
        assert_eq!(listed, held, "node {id}");
        if held.contains(&0) {
            assert!(topics[NAME][&0] > 0, "node {id}: partition 0 has a batch");
        }
        // Only what was asked about: partition 0 alone.
        let asked = vec![DescribableLogDirTopic::default()
            .with_topic(topic_name(NAME))
            .with_partitions(vec![0])];
        let (_, topics) = log_dirs(&c, id, Some(asked));
        let listed: BTreeSet<i32> = topics
            .get(NAME)
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        assert_eq!(
            listed,
            held.intersection(&BTreeSet::from([0])).copied().collect()
        );
    }

    // DescribeProducers: the leader's producer-state table (the open transaction from its
    // first batch); NOT_LEADER_OR_FOLLOWER on the follower and on the node with no replica; an unknown
    // topic or partition is UNKNOWN_TOPIC_OR_PARTITION.
    let p = producers(&c, leader, NAME, 0);
    assert_eq!(p.error_code, 0);
    let states: Vec<(i64, i32, i32, i64)> = p
        .active_producers
        .iter()
        .map(|s| {
            (
                s.producer_id.0,
                s.producer_epoch,
                s.last_sequence,
                s.current_txn_start_offset,
            )
        })
        .collect();
    assert_eq!(states, vec![(pid, i32::from(epoch), 2, start)]);
    for id in (1..=3).filter(|id| *id != leader) {
        let p = producers(&c, id, NAME, 0);
        assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER, "node {id}");
        assert!(p.active_producers.is_empty());
    }
    assert_eq!(
        producers(&c, leader, "nowhere", 0).error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        producers(&c, leader, NAME, 7).error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );

    // ListTransactions: the coordinator lists the open transaction; the others none, without
    // an error, echoing a state Kafka does not know.
    let r = list_transactions(&c, coordinator, &[]);
    assert_eq!(r.error_code, 0);
    let listed: Vec<(String, i64, String)> = r
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![(TXN_ID.to_string(), pid, "Ongoing".to_string())]
    );
    for id in (1..=3).filter(|id| *id != coordinator) {
        let r = list_transactions(&c, id, &["Ongoing", "Bogus"]);
        assert_eq!(r.error_code, 0, "node {id}");
        assert!(r.transaction_states.is_empty(), "node {id}");
        let unknown: Vec<String> = r
            .unknown_state_filters
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(unknown, vec!["Bogus".to_string()]);
    }

    // DescribeTransactions: the coordinator's state; NOT_COORDINATOR elsewhere, an empty id
    // INVALID_REQUEST everywhere.
    let d = describe_transactions(&c, coordinator, &[TXN_ID]);
    assert_eq!(d[0].error_code, 0);
    assert_eq!(d[0].transaction_state.as_str(), "Ongoing");
    assert_eq!((d[0].producer_id.0, d[0].producer_epoch), (pid, epoch));
    assert_eq!(d[0].transaction_timeout_ms, 60_000);
    let parts: Vec<(String, Vec<i32>)> = d[0]
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(parts, vec![(NAME.to_string(), vec![0])]);
    for id in (1..=3).filter(|id| *id != coordinator) {
        let d = describe_transactions(&c, id, &[TXN_ID, ""]);
        let codes: Vec<i16> = d.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, vec![NOT_COORDINATOR, INVALID_REQUEST], "node {id}");
    }

    // Kafka's tools, through the whole cluster, run side by side (each a JVM of its own).
    let bootstrap = c.bootstrap();
    let txns = |args: &[&str]| {
        let mut all = vec!["--bootstrap-server", &bootstrap];
        all.extend(args);
        kafka_tool("org.apache.kafka.tools.TransactionsCommand", &all)
    };
    let tools: [&(dyn Fn() -> String + Sync); 7] = [
        &|| txns(&["list"]),
        // DescribeProducers of every partition, each from its own leader, then the
        // coordinator's view of what it found open.
        &|| txns(&["find-hanging", "--topic", NAME]),
        &|| txns(&["describe", "--transactional-id", TXN_ID]),
        &|| txns(&["describe-producers", "--topic", NAME, "--partition", "0"]),
        &|| {
            kafka_tool(
                "org.apache.kafka.tools.LogDirsCommand",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--describe",
                    "--topic-list",
                    NAME,
                ],
            )
        },
        &|| {
            kafka_tool(
                "org.apache.kafka.tools.ClusterTool",
                &["cluster-id", "--bootstrap-server", &bootstrap],
            )
        },
        &|| {
            kafka_tool(
                "org.apache.kafka.tools.BrokerApiVersionsCommand",
                &["--bootstrap-server", &bootstrap],
            )
        },
    ];
    let outs: Vec<String> = std::thread::scope(|s| {
        let running: Vec<_> = tools.iter().map(|t| s.spawn(t)).collect();
        running.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let [list, hanging, describe, described_producers, log_dirs_out, cluster_id_out, api_versions] =
        <[String; 7]>::try_from(outs).unwrap();
    // find-hanging: Topic Partition ProducerId ...; the open transaction is young and its
    // coordinator knows it, so none is hanging.
    assert!(rows(&hanging, 0, NAME).is_empty(), "{hanging}");
    // list: TransactionalId Coordinator ProducerId TransactionState.
    let out = list;
    let coordinator_text = coordinator.to_string();
    let pid_text = pid.to_string();
    assert_eq!(
        rows(&out, 0, TXN_ID),
        vec![vec![TXN_ID, &coordinator_text, &pid_text, "Ongoing"]],
        "{out}"
    );
    // describe: CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState
    // TransactionTimeoutMs CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions.
    let out = describe;
    let row = &rows(&out, 1, TXN_ID)[0];
    assert_eq!(
        (row[0], row[2], row[4], row[5], row[8]),
        (
            coordinator_text.as_str(),
            pid_text.as_str(),
            "Ongoing",
            "60000",
            format!("{NAME}-0").as_str()
        ),
        "{out}"
    );
    // describe-producers: ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence
    // LastTimestamp CurrentTransactionStartOffset, from the partition's leader.
    let out = described_producers;
    let row = &rows(&out, 0, &pid_text)[0];
    assert_eq!((row[3], row[5]), ("2", start.to_string().as_str()), "{out}");

    // kafka-log-dirs: each node's directory and its replicas of the topic.
    let out = log_dirs_out;
    let json: serde_json::Value = serde_json::from_str(
        out.lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON in {out}")),
    )
    .unwrap();
    let mut seen: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for broker in json["brokers"].as_array().unwrap() {
        let id = broker["broker"].as_i64().unwrap();
        let dirs = broker["logDirs"].as_array().unwrap();
        assert_eq!(dirs.len(), 1, "{out}");
        assert_eq!(
            dirs[0]["logDir"],
            c.dirs[&(id as i32)].display().to_string()
        );
        for p in dirs[0]["partitions"].as_array().unwrap() {
            seen.entry(id)
                .or_default()
                .insert(p["partition"].as_str().unwrap().to_string());
        }
    }
    let expected: BTreeMap<i64, BTreeSet<String>> = (1..=3)
        .map(|id| {
            let held = replicas
                .iter()
                .filter(|(_, r)| r.contains(&id))
                .map(|(p, _)| format!("{NAME}-{p}"))
                .collect();
            (i64::from(id), held)
        })
        .collect();
    assert_eq!(seen, expected, "{out}");

    // kafka-cluster cluster-id: Metadata's and DescribeCluster's id.
    let out = cluster_id_out;
    assert!(out.contains(&format!("Cluster ID: {cluster_id}")), "{out}");

    // kafka-broker-api-versions: every node, each advertising the describe APIs.
    let out = api_versions;
    for (id, addr) in &c.kafka {
        assert!(
            out.contains(&format!("{addr} (id: {id} ")),
            "node {id}: {out}"
        );
    }
    for api in [
        "DescribeCluster(60): 0 to 2",
        "DescribeLogDirs(35): 1 to 3",
        "DescribeProducers(61): 0",
        "ListTransactions(66): 0 to 1",
        "DescribeTransactions(65): 0",
    ] {
        assert_eq!(out.matches(api).count(), 3, "{api}: {out}");
    }

    // The commit: the coordinator lists it complete, the leader's producer has no open
    // transaction any more.
    let (error, _, _) = common::txn::end_txn(&mut txn, 3, TXN_ID, (pid, epoch), true);
    assert_eq!(error, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = list_transactions(&c, coordinator, &["CompleteCommit"]);
        let p = producers(&c, leader, NAME, 0);
        if r.transaction_states.len() == 1
            && p.active_producers
                .first()
                .map(|s| s.current_txn_start_offset)
                == Some(-1)
        {
            break;
        }
        assert!(Instant::now() < deadline, "commit not seen: {r:?} {p:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
