//! Topic config changes, retention and DeleteRecords in cluster mode (docs/design.md,
//! "Topic configs in a cluster" and "Retention and DeleteRecords in a cluster"): three
//! `oncelog-broker` processes on loopback. A change through Kafka's `kafka-configs` sent to a
//! node that is not the controller reaches every node's image and every replica's log (a node
//! down meanwhile learns it when it comes back); what a raft partition cannot honour is refused
//! with INVALID_CONFIG. Retention deletes segments on every replica, never above raft's purge
//! point. Kafka's `kafka-delete-records` raises the log start on every partition's leader,
//! Fetch below it is OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, and every replica,
//! a restarted one too, deletes the bytes below it once raft has purged them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::clients::kafka_tool;
use crate::common::cluster::*;
use crate::common::wire::{str_bytes, topic_name};
use crate::configs::INVALID_CONFIG;
use crate::configs::{
    batch_of, described, produce, produce_to, properties_of, MESSAGE_TOO_LARGE, SOURCE_TOPIC,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;

const OFFSET_OUT_OF_RANGE: i16 = 1;

/// The flags that make retention and DeleteRecords act within a test: the job every 200 ms,
/// and a raft snapshot (and purge) every 8 entries.
const QUICK: &[&str] = &[
    "--retention-check-interval-ms",
    "200",
    "--raft-snapshot-entries",
    "8",
];

fn quick_cluster() -> Cluster {
    let mut c = Cluster::configure();
    for id in 1..=3 {
        c.flags
            .insert(id, QUICK.iter().map(|f| f.to_string()).collect());
    }
    c.launch_all();
    c
}

/// CreateTopics of `name` with `partitions` partitions on the three nodes, with `configs`.
fn create(c: &Cluster, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(str_bytes(k))
                .with_value(Some(str_bytes(v)))
        })
        .collect();
    let mut s = connect(c.kafka[&c.controller()]).unwrap();
    let r: CreateTopicsResponse = call(
        &mut s,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(topic_name(name))
                .with_num_partitions(partitions)
                .with_replication_factor(3)
                .with_configs(configs)]),
    )
    .unwrap();
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

/// IncrementalAlterConfigs (v1) of topic `name` on node `on`: `(key, operation, value)`
/// (0 SET, 1 DELETE). The resource's error code and message.
fn alter(
    c: &Cluster,
    on: i32,
    name: &str,
    changes: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, String) {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: IncrementalAlterConfigsResponse = call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(name))
                .with_configs(
                    changes
                        .iter()
                        .map(|(k, op, v)| {
                            AlterableConfig::default()
                                .with_name(str_bytes(k))
                                .with_config_operation(*op)
                                .with_value(v.map(str_bytes))
                        })
                        .collect(),
                )]),
    )
    .unwrap();
    let a = &r.responses[0];
    (
        a.error_code,
        a.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

/// The legacy AlterConfigs (v2) of topic `name` on node `on`: `configs` become its whole
/// set. The resource's error code and message.
fn alter_legacy(c: &Cluster, on: i32, name: &str, configs: &[(&str, &str)]) -> (i16, String) {
    use alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: AlterConfigsResponse = call(
        &mut s,
        ApiKey::AlterConfigs,
        2,
        &AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(str_bytes(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(str_bytes(k))
                            .with_value(Some(str_bytes(v)))
                    })
                    .collect(),
            )]),
    )
    .unwrap();
    let a = &r.responses[0];
    (
        a.error_code,
        a.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

/// ListOffsets (v7) of one partition on node `on` at `timestamp` (-2 earliest, -1 latest):
/// the error code and the offset.
fn list_offset(c: &Cluster, on: i32, topic: &str, partition: i32, timestamp: i64) -> (i16, i64) {
    use list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: ListOffsetsResponse = call(
        &mut s,
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)])]),
    )
    .unwrap();
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Fetch (v12) of one partition at `offset` on node `on`: the error code, the log start the
/// answer names and the first batch's base offset, if any.
fn fetch_at(
    c: &Cluster,
    on: i32,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (i16, i64, Option<i64>) {
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: FetchResponse = call(
        &mut s,
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]),
    )
    .unwrap();
    let p = &r.responses[0].partitions[0];
    let first = batches(p.records.as_deref().unwrap_or_default())
        .first()
        .map(|b| b.0);
    (p.error_code, p.log_start_offset, first)
}

/// DeleteRecords (v2) on node `on`: per partition of `topic`, the error code and low
/// watermark.
fn delete_records(
    c: &Cluster,
    on: i32,
    topic: &str,
    offsets: &[(i32, i64)],
) -> BTreeMap<i32, (i16, i64)> {
    use delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    let mut s = connect(c.kafka[&on]).unwrap();
    let r: DeleteRecordsResponse = call(
        &mut s,
        ApiKey::DeleteRecords,
        2,
        &DeleteRecordsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(p, o)| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(*p)
                                .with_offset(*o)
                        })
                        .collect(),
                )]),
    )
    .unwrap();
    r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, (p.error_code, p.low_watermark)))
        .collect()
}

/// The base offsets of the segments of partition `<topic>-<partition>` in node `id`'s data
/// directory, oldest first (retention renames what it deletes to `.deleted`).
fn segments(dir: &Path, topic: &str, partition: i32) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir.join(format!("{topic}-{partition}")))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".log")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    bases.sort();
    bases
}

/// raft's purge point of a replica: the offset after the last entry raft forgot (0 if none),
/// from its `raft-state.json`.
fn purge_end(dir: &Path, topic: &str, partition: i32) -> i64 {
    let path = dir
        .join(format!("{topic}-{partition}"))
        .join("raft-state.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return 0;
    };
    let state: serde_json::Value = serde_json::from_str(&text).unwrap();
    state["purged"]["end_offset"].as_i64().unwrap_or(0)
}

/// `count` batches of one record (`size` bytes) to partition 0 of `topic` through its leader.
fn fill(c: &Cluster, topic: &str, count: usize, size: usize) {
    for _ in 0..count {
        let leader = c.leaders(topic, 1)[&0];
        assert_eq!(produce(c, leader, topic, -1, batch_of(size)), 0);
    }
}

#[test]
fn config_changes_go_through_the_controller_to_every_node_and_replica() {
    let mut c = Cluster::start();
    let controller = c.controller();
    create(&c, "altered", 1, &[]);
    let other = (1..=3).find(|id| *id != controller).unwrap();
    // A node down during the change learns it from the metadata log when it comes back.
    let down = (1..=3)
        .find(|id| *id != controller && *id != other)
        .unwrap();
    c.nodes.get_mut(&down).unwrap().crash();
    c.nodes.remove(&down);

    // Kafka's kafka-configs, bootstrapped on a node that is not the controller: the node
    // forwards the change to the controller.
    let out = kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--bootstrap-server",
            &c.kafka[&other].to_string(),
            "--entity-type",
            "topics",
            "--entity-name",
            "altered",
            "--alter",
            "--add-config",
            "max.message.bytes=2048,retention.ms=86400000",
        ],
    );
    assert!(out.contains("Completed updating config"), "{out}");
    c.launch(down);
    for id in 1..=3 {
        eventually(&format!("node {id} describes the change"), || {
            let d = described(&c, id, "altered");
            d["max.message.bytes"] == ("2048".into(), SOURCE_TOPIC)
                && d["retention.ms"] == ("86400000".into(), SOURCE_TOPIC)
        });
        eventually(&format!("node {id}'s replica has the change"), || {
            properties_of(&c.dirs[&id], "altered")
                .first()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .is_some_and(|t| t.contains("max.message.bytes=2048"))
        });
    }
    // The live logs took it: the leader refuses what is now too large, whichever node leads.
    let leader = c.leaders("altered", 1)[&0];
    assert_eq!(
        produce(&c, leader, "altered", -1, batch_of(4000)),
        MESSAGE_TOO_LARGE
    );

    // Deleting the setting: back to the default, and the batch is taken.
    let (error, message) = alter(
        &c,
        other,
        "altered",
        &[("max.message.bytes", 1, None)],
        false,
    );
    assert_eq!(error, 0, "{message}");
    for id in 1..=3 {
        eventually(&format!("node {id} describes the deletion"), || {
            described(&c, id, "altered")["max.message.bytes"].1 != SOURCE_TOPIC
        });
    }
    let leader = c.leaders("altered", 1)[&0];
    assert_eq!(produce(&c, leader, "altered", -1, batch_of(4000)), 0);

    // The legacy AlterConfigs, elsewhere too: the settings given become the topic's whole set
    // (retention.ms, set above, is back to its default).
    let (error, message) = alter_legacy(&c, other, "altered", &[("retention.bytes", "4096")]);
    assert_eq!(error, 0, "{message}");
    for id in 1..=3 {
        eventually(&format!("node {id} describes the replacement"), || {
            let d = described(&c, id, "altered");
            d["retention.bytes"] == ("4096".into(), SOURCE_TOPIC)
                && d["retention.ms"].1 != SOURCE_TOPIC
        });
    }

    // What cluster mode refuses, on the controller and elsewhere, with validate_only or not;
    // nothing changes.
    for on in [controller, other] {
        for validate_only in [true, false] {
            let (error, message) = alter(
                &c,
                on,
                "altered",
                &[("cleanup.policy", 0, Some("compact"))],
                validate_only,
            );
            assert_eq!(error, INVALID_CONFIG, "{message}");
            assert!(
                message.contains("compaction is not replicated"),
                "{message}"
            );
            let (error, message) = alter(
                &c,
                on,
                "altered",
                &[("no.such.config", 0, Some("1"))],
                validate_only,
            );
            assert_eq!(error, INVALID_CONFIG, "{message}");
            assert!(message.contains("Unknown topic config name"), "{message}");
            let (error, message) = alter(
                &c,
                on,
                "altered",
                &[("segment.bytes", 0, Some("lots"))],
                validate_only,
            );
            assert_eq!(error, INVALID_CONFIG, "{message}");
            let (error, _) = alter(
                &c,
                on,
                "missing",
                &[("segment.ms", 0, Some("1000"))],
                validate_only,
            );
            assert_eq!(error, UNKNOWN_TOPIC_OR_PARTITION);
        }
        // validate_only with a change it takes: answered, not made.
        let (error, message) = alter(&c, on, "altered", &[("segment.ms", 0, Some("60000"))], true);
        assert_eq!(error, 0, "{message}");
    }
    std::thread::sleep(Duration::from_millis(300));
    for id in 1..=3 {
        let d = described(&c, id, "altered");
        assert_eq!(d["cleanup.policy"].0, "delete", "node {id}");
        assert_ne!(d["segment.ms"].1, SOURCE_TOPIC, "node {id}");
    }
}

/// Waits until every replica of partition 0 of `topic` has deleted its segments below
/// `beyond` (its first segment starts at or above it, and above 0), and checks that none
/// starts above its raft purge point. The lowest first segment.
fn trimmed_everywhere(c: &Cluster, topic: &str, beyond: i64) -> i64 {
    let mut lowest = i64::MAX;
    for id in 1..=3 {
        eventually(
            &format!("node {id} deletes segments below {beyond}"),
            || {
                segments(&c.dirs[&id], topic, 0)
                    .first()
                    .is_some_and(|b| *b > 0 && *b >= beyond)
            },
        );
        let first = segments(&c.dirs[&id], topic, 0)[0];
        let purged = purge_end(&c.dirs[&id], topic, 0);
        assert!(
            first <= purged,
            "node {id}: log starts at {first}, raft purged to {purged}"
        );
        lowest = lowest.min(first);
    }
    lowest
}

#[test]
fn retention_deletes_old_segments_on_every_replica_but_never_above_the_purge_point() {
    let mut c = quick_cluster();
    // Small segments, no time limit yet: the batches carry a timestamp of 2023, past any
    // retention (the default week too).
    create(
        &c,
        "aged",
        1,
        &[("segment.bytes", "1024"), ("retention.ms", "-1")],
    );
    fill(&c, "aged", 60, 100);
    let leader = c.leaders("aged", 1)[&0];
    // The job ran a few times and kept everything.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(list_offset(&c, leader, "aged", 0, -2), (0, 0));
    for id in 1..=3 {
        assert_eq!(segments(&c.dirs[&id], "aged", 0)[0], 0, "node {id}");
    }

    // retention.bytes: every replica deletes its oldest segments, none reaching above its
    // purge point.
    let (error, message) = alter(
        &c,
        leader,
        "aged",
        &[("retention.bytes", 0, Some("3072"))],
        false,
    );
    assert_eq!(error, 0, "{message}");
    let trimmed = trimmed_everywhere(&c, "aged", 0);
    // retention.ms instead: the purge point moves on with more batches, and everything
    // below it is older than a day.
    let (error, message) = alter(
        &c,
        leader,
        "aged",
        &[
            ("retention.bytes", 1, None),
            ("retention.ms", 0, Some("86400000")),
        ],
        false,
    );
    assert_eq!(error, 0, "{message}");
    fill(&c, "aged", 30, 100);
    trimmed_everywhere(&c, "aged", trimmed + 1);
    let (_, end) = list_offset(&c, c.leaders("aged", 1)[&0], "aged", 0, -1);
    // Clients see it: ListOffsets earliest moves, Fetch below it is out of range, at it
    // answers its first batch. The job goes on deleting (every batch is older than a day), so
    // a fetch at the earliest offset just listed may find it deleted since (seen in CI): then
    // the earliest offset must have moved up, and the pair is asked again.
    let leader = c.leaders("aged", 1)[&0];
    assert_eq!(fetch_at(&c, leader, "aged", 0, 0).0, OFFSET_OUT_OF_RANGE);
    let mut listed = 0;
    for attempt in 1.. {
        let (error, earliest) = list_offset(&c, leader, "aged", 0, -2);
        assert_eq!(error, 0);
        assert!(
            earliest > 0 && earliest >= listed && earliest < end,
            "earliest {earliest} (listed {listed} before), end {end}"
        );
        let (error, start, first) = fetch_at(&c, leader, "aged", 0, earliest);
        if error == 0 {
            assert_eq!((start, first), (earliest, Some(earliest)));
            break;
        }
        assert_eq!(error, OFFSET_OUT_OF_RANGE, "a fetch at {earliest}");
        let (_, now) = list_offset(&c, leader, "aged", 0, -2);
        assert!(
            now > earliest,
            "{earliest} out of range, yet still the earliest"
        );
        assert!(attempt < 20, "the earliest offset kept moving");
        listed = now;
    }

    // A replica restarted after retention opens (its log starts at or below raft's purge
    // point) and the partition goes on taking batches with it.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    c.nodes.get_mut(&follower).unwrap().crash();
    c.nodes.remove(&follower);
    c.launch(follower);
    fill(&c, "aged", 30, 100);
    let leader = c.leaders("aged", 1)[&0];
    let (_, now) = list_offset(&c, leader, "aged", 0, -1);
    assert!(now > end);
    eventually(&format!("node {follower} catches up"), || {
        purge_end(&c.dirs[&follower], "aged", 0) >= end
    });
}

#[test]
fn delete_records_raises_the_log_start_of_every_replica_and_clients_see_it_at_once() {
    let mut c = quick_cluster();
    create(
        &c,
        "trimmed",
        1,
        &[("segment.bytes", "1024"), ("retention.ms", "-1")],
    );
    fill(&c, "trimmed", 40, 100);
    let leader = c.leaders("trimmed", 1)[&0];
    let (_, end) = list_offset(&c, leader, "trimmed", 0, -1);
    let target = end / 2;
    // A follower down while the records are deleted learns it when it comes back.
    let down = (1..=3)
        .find(|id| *id != leader && *id != c.controller())
        .unwrap_or_else(|| (1..=3).find(|id| *id != leader).unwrap());
    c.nodes.get_mut(&down).unwrap().crash();
    c.nodes.remove(&down);

    // Kafka's kafka-delete-records: the admin client sends it to the partition's leader.
    let json = c._tmp.path().join("delete.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"partitions":[{{"topic":"trimmed","partition":0,"offset":{target}}}],"version":1}}"#
        ),
    )
    .unwrap();
    let out = kafka_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        &[
            "--bootstrap-server",
            &c.bootstrap(),
            "--offset-json-file",
            json.to_str().unwrap(),
        ],
    );
    assert!(out.contains(&format!("low_watermark: {target}")), "{out}");
    // At once on the leader: earliest is the new start, Fetch below it out of range.
    let leader = c.leaders("trimmed", 1)[&0];
    assert_eq!(list_offset(&c, leader, "trimmed", 0, -2), (0, target));
    assert_eq!(
        fetch_at(&c, leader, "trimmed", 0, target - 1).0,
        OFFSET_OUT_OF_RANGE
    );
    let (error, start, _) = fetch_at(&c, leader, "trimmed", 0, target);
    assert_eq!((error, start), (0, target));

    // Kafka's answers: below the start changes nothing, -1 is the high watermark, past it is
    // out of range, and a node that does not lead says so.
    assert_eq!(
        delete_records(&c, leader, "trimmed", &[(0, 1)])[&0],
        (0, target)
    );
    assert_eq!(
        delete_records(&c, leader, "trimmed", &[(0, end + 1)])[&0],
        (OFFSET_OUT_OF_RANGE, -1)
    );
    let elsewhere = (1..=3)
        .find(|id| *id != leader && c.nodes.contains_key(id))
        .unwrap();
    assert_eq!(
        delete_records(&c, elsewhere, "trimmed", &[(0, target + 1)])[&0].0,
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(
        delete_records(&c, leader, "trimmed", &[(5, 1)])[&5].0,
        UNKNOWN_TOPIC_OR_PARTITION
    );

    // The bytes go on every replica once raft has purged them (more entries move the purge
    // point past the new start), the restarted one too; never above its purge point.
    c.launch(down);
    fill(&c, "trimmed", 30, 100);
    for id in 1..=3 {
        eventually(
            &format!("node {id} deletes the segments below {target}"),
            || {
                let segs = segments(&c.dirs[&id], "trimmed", 0);
                segs.len() >= 2 && segs[1] > target && segs[0] <= target && segs[0] > 0
            },
        );
        let first = segments(&c.dirs[&id], "trimmed", 0)[0];
        assert!(first <= purge_end(&c.dirs[&id], "trimmed", 0), "node {id}");
    }
    // A partition led by a node that is not the controller: its leader has the controller
    // write the new start (a forward), and answers once its own reads honour it.
    create(&c, "split", 2, &[]);
    let controller = c.controller();
    eventually("partition 1 of split led off the controller", || {
        c.leaders("split", 2)[&1] != controller
    });
    let away = c.leaders("split", 2)[&1];
    for _ in 0..3 {
        assert_eq!(produce_to(&c, away, "split", 1, -1, batch_of(100)), 0);
    }
    let (_, hw) = list_offset(&c, away, "split", 1, -1);
    assert_eq!(
        hw, 3,
        "three records from offset 0: raft's entries take none"
    );
    assert_eq!(delete_records(&c, away, "split", &[(1, -1)])[&1], (0, hw));
    assert_eq!(list_offset(&c, away, "split", 1, -2), (0, hw));

    // A new leader answers the same start: the image, not the old leader's memory.
    c.nodes.get_mut(&leader).unwrap().crash();
    c.nodes.remove(&leader);
    eventually("another node leads", || {
        c.leaders("trimmed", 1)[&0] != leader
    });
    let next = c.leaders("trimmed", 1)[&0];
    assert_eq!(list_offset(&c, next, "trimmed", 0, -2), (0, target));
    assert_eq!(
        fetch_at(&c, next, "trimmed", 0, target - 1).0,
        OFFSET_OUT_OF_RANGE
    );
    // -1: everything up to the high watermark.
    let (_, hw) = list_offset(&c, next, "trimmed", 0, -1);
    assert_eq!(delete_records(&c, next, "trimmed", &[(0, -1)])[&0], (0, hw));
    assert_eq!(list_offset(&c, next, "trimmed", 0, -2), (0, hw));
}
