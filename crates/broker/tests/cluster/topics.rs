//! DeleteTopics and CreatePartitions in cluster mode (docs/design.md, "Deleting topics and
//! adding partitions in a cluster"): three `oncelog-broker` processes; a topic grown by
//! CreatePartitions is produced to and read on its new partition; the topic deleted while one
//! node is down leaves the image and the partition directories of the nodes up, and of the
//! third once it restarts and replays the deletion; the name created again is a new topic
//! (a new id, empty partitions); and each refusal is Kafka's.

use std::collections::BTreeSet;

use crate::common::cluster::*;
use uuid::Uuid;

const INVALID_PARTITIONS: i16 = 37;
const UNKNOWN_TOPIC_ID: i16 = 100;

/// The error Metadata on node `id` answers for [`TOPIC`].
fn topic_error(c: &Cluster, id: i32) -> i16 {
    c.metadata(id, Some(&[TOPIC])).unwrap().topics[0].error_code
}

fn grow(c: &Cluster, on: i32, topic: &str, count: i32, validate: bool) -> i16 {
    c.create_partitions(on, topic, count, validate).unwrap()
}

/// The error codes of a DeleteTopics on node `on`.
fn delete(c: &Cluster, on: i32, topics: &[(Option<&str>, Uuid)]) -> Vec<i16> {
    let r = c.delete_topics(on, topics, 30_000).unwrap();
    r.responses.iter().map(|t| t.error_code).collect()
}

#[test]
fn topics_are_grown_deleted_while_a_node_is_down_and_created_again_empty() {
    let mut c = Cluster::start();
    let controller = c.controller();
    let other = if controller == 1 { 2 } else { 1 };
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let old_id = created.topics[0].topic_id;

    // CreatePartitions' refusals: off the controller, an unknown topic, a count that does
    // not grow, the coordinators' internal topic; a validation writes nothing.
    assert_eq!(grow(&c, other, TOPIC, 4, false), NOT_CONTROLLER);
    assert_eq!(
        grow(&c, controller, "nope", 4, false),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(grow(&c, controller, TOPIC, 2, false), INVALID_PARTITIONS);
    assert_eq!(
        grow(&c, controller, TOPIC, PARTITIONS, false),
        INVALID_PARTITIONS
    );
    assert_eq!(
        grow(&c, controller, "__consumer_offsets", 2, false),
        INVALID_REQUEST
    );
    assert_eq!(grow(&c, controller, TOPIC, 9, true), 0);
    let listed = c.metadata(controller, Some(&[TOPIC])).unwrap();
    assert_eq!(listed.topics[0].partitions.len(), PARTITIONS as usize);

    // Grown to four: every node lists the new partition with a leader, and it takes writes.
    assert_eq!(grow(&c, controller, TOPIC, PARTITIONS + 1, false), 0);
    let leaders = c.leaders(TOPIC, PARTITIONS + 1);
    let mut producer = Producer::new_for(&c, PARTITIONS + 1);
    for p in 0..=PARTITIONS {
        producer.produce(&c, p);
    }
    let (bytes, _) = fetch_all(&c, leaders[&PARTITIONS], PARTITIONS);
    let data: Vec<_> = batches(&bytes).into_iter().filter(|b| !b.2).collect();
    assert_eq!(data.len(), 1, "{data:?}");
    assert_eq!(data[0].0, producer.acked[&PARTITIONS][0].1);
    for id in 1..=3 {
        eventually("every node holds the four partitions", || {
            c.partition_dirs(id, TOPIC) == (0..=PARTITIONS).collect()
        });
    }

    // DeleteTopics' refusals: off the controller, unknown names and ids, the internal topic,
    // a name and an id together.
    assert_eq!(
        delete(&c, other, &[(Some(TOPIC), Uuid::nil())]),
        [NOT_CONTROLLER]
    );
    assert_eq!(
        delete(
            &c,
            controller,
            &[
                (Some("nope"), Uuid::nil()),
                (None, Uuid::from_u128(7)),
                (Some("__consumer_offsets"), Uuid::nil()),
                (Some(TOPIC), old_id),
            ]
        ),
        [
            UNKNOWN_TOPIC_OR_PARTITION,
            UNKNOWN_TOPIC_ID,
            INVALID_REQUEST,
            INVALID_REQUEST
        ]
    );
    assert_eq!(topic_error(&c, controller), 0);

    // Node 3 goes down; the topic is deleted by its id.
    let down = 3;
    c.nodes.remove(&down);
    let controller = c.controller();
    let r = c
        .delete_topics(controller, &[(None, old_id)], 30_000)
        .unwrap();
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    assert_eq!(r.responses[0].name.as_ref().unwrap().0.as_str(), TOPIC);
    for id in [1, 2] {
        eventually("the nodes up forget the topic", || {
            topic_error(&c, id) == UNKNOWN_TOPIC_OR_PARTITION
        });
        eventually("the nodes up remove its partitions", || {
            c.partition_dirs(id, TOPIC).is_empty()
        });
    }
    assert_eq!(
        c.partition_dirs(down, TOPIC),
        (0..=PARTITIONS).collect::<BTreeSet<_>>(),
        "the node down keeps its replicas until it learns of the deletion"
    );
    // Deleted twice: unknown.
    assert_eq!(
        delete(&c, controller, &[(Some(TOPIC), Uuid::nil())]),
        [UNKNOWN_TOPIC_OR_PARTITION]
    );

    // Back up, node 3 replays the deletion and removes its replicas.
    c.launch(down);
    eventually(
        "the restarted node removes the deleted topic's partitions",
        || c.partition_dirs(down, TOPIC).is_empty(),
    );
    assert_eq!(topic_error(&c, down), UNKNOWN_TOPIC_OR_PARTITION);

    // The name again: a new id, three partitions that start as a new topic's do (empty, the
    // new producer's batch the first, at offset 0).
    let controller = c.controller();
    let again = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(again.topics[0].error_code, 0);
    assert_ne!(again.topics[0].topic_id, old_id);
    let leaders = c.leaders(TOPIC, PARTITIONS);
    let mut producer = Producer::new_for(&c, PARTITIONS);
    for p in 0..PARTITIONS {
        producer.produce(&c, p);
        let (bytes, _) = fetch_all(&c, leaders[&p], p);
        let all = batches(&bytes);
        assert_eq!(all.first().map(|b| b.0), Some(0), "partition {p}: {all:?}");
        let data: Vec<_> = all.iter().filter(|b| !b.2).collect();
        assert_eq!(data.len(), 1, "partition {p}: {all:?}");
        assert_eq!(
            (data[0].0, data[0].3),
            (producer.acked[&p][0].1, producer.producer_id)
        );
        // Raft's entries take no offset: the producer's batch is the partition's first, at 0.
        assert_eq!(all.len(), 1, "partition {p}: {all:?}");
    }
    for id in 1..=3 {
        eventually("every node holds the new topic's three partitions", || {
            c.partition_dirs(id, TOPIC) == (0..PARTITIONS).collect()
        });
    }
}

/// The names in node `id`'s data directory that start with `prefix` (a partition's directory
/// or its `-delete` form).
fn entries(c: &Cluster, id: i32, prefix: &str) -> Vec<String> {
    std::fs::read_dir(&c.dirs[&id])
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_wiped_node_never_recreates_a_deleted_topic_and_strays_on_disk_are_removed() {
    let mut c = Cluster::start();
    let controller = c.controller();
    for (name, partitions) in [(TOPIC, PARTITIONS), ("kept", 1)] {
        let r = c.create_topic(controller, name, partitions, 3).unwrap();
        assert_eq!(r.topics[0].error_code, 0);
    }
    c.leaders(TOPIC, PARTITIONS);
    // A timeout of 0: answered once the deletion is committed (Kafka's "start it and
    // return"), applied by every node soon after.
    // At the controller, followed if it moved since (NOT_CONTROLLER changes nothing).
    let mut r = None;
    eventually("the controller takes the deletion", || {
        let at = c.controller();
        let answer = c
            .delete_topics(at, &[(Some(TOPIC), Uuid::nil())], 0)
            .unwrap();
        let moved = answer.responses[0].error_code == NOT_CONTROLLER;
        r = Some(answer);
        !moved
    });
    let r = r.unwrap();
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    for id in 1..=3 {
        eventually("every node forgets the topic", || {
            topic_error(&c, id) == UNKNOWN_TOPIC_OR_PARTITION
                && c.partition_dirs(id, TOPIC).is_empty()
        });
    }

    // A wiped node replays the whole metadata log as it rejoins: it opens the live topic's
    // replica and never creates one of the deleted topic (not even to delete it again).
    let wiped = 3;
    c.wipe(wiped);
    c.launch(wiped);
    eventually("the rejoined node holds the live topic's replica", || {
        c.partition_dirs(wiped, "kept") == BTreeSet::from([0])
    });
    let kept = c.leaders("kept", 1);
    assert!(kept[&0] >= 1);
    assert_eq!(
        entries(&c, wiped, &format!("{TOPIC}-")),
        Vec::<String>::new()
    );
    assert_eq!(topic_error(&c, wiped), UNKNOWN_TOPIC_OR_PARTITION);

    // A partition on disk the image gives this node no replica of (what a crash part way
    // through a deletion leaves) is removed when the node starts; its own replicas stay.
    let restarted = 2;
    c.nodes.remove(&restarted);
    let stray = c.dirs[&restarted].join("ghost-0");
    std::fs::create_dir(&stray).unwrap();
    for file in std::fs::read_dir(c.dirs[&restarted].join("kept-0")).unwrap() {
        let file = file.unwrap();
        if file.file_type().unwrap().is_file() {
            std::fs::copy(file.path(), stray.join(file.file_name())).unwrap();
        }
    }
    c.launch(restarted);
    eventually("the restarted node removes the stray partition", || {
        c.partition_dirs(restarted, "ghost").is_empty()
    });
    assert_eq!(c.partition_dirs(restarted, "kept"), BTreeSet::from([0]));
    assert_eq!(c.leaders("kept", 1).len(), 1);
}
