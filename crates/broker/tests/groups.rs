//! Consumer groups with a real client (librdkafka through confluent-kafka): subscribe() runs
//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup against the broker, the client's range
//! assignor shares the partitions, manual commits go to the durable `__consumer_offsets` log,
//! and a consumer killed between reading a record and committing it has that record
//! redelivered to another member after the group rebalances (at-least-once, what Kafka
//! promises; the processed-id store is what turns it into once, see docs/exactly-once.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::clients::{group_consumer, wait_until, Client, Produce};
use common::{topic, BrokerProcess};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(180);

/// (partition, offset, value) of a record read.
type Read = (i64, i64, String);

/// (partition, offset, value) of every record a consumer printed, and the records whose commit
/// a rebalance refused.
fn consumed(events: &[Value]) -> (Vec<Read>, BTreeSet<(i64, i64)>) {
    let mut records = Vec::new();
    let mut refused = BTreeSet::new();
    for e in events {
        let at = || {
            (
                e["partition"].as_i64().unwrap(),
                e["offset"].as_i64().unwrap(),
            )
        };
        match e["event"].as_str() {
            Some("consumed") => {
                let (p, o) = at();
                records.push((p, o, e["value"].as_str().unwrap().to_string()));
            }
            Some("commit_failed") => {
                refused.insert(at());
            }
            _ => {}
        }
    }
    (records, refused)
}

/// (partition, offset) of every record the consumers printed as consumed.
fn distinct<'a>(runs: impl Iterator<Item = &'a [Value]>) -> BTreeSet<(i64, i64)> {
    runs.flat_map(|events| consumed(events).0)
        .map(|(p, o, _)| (p, o))
        .collect()
}

/// `count` records spread over the topic's partitions: a member's share of the partitions
/// then holds about its share of the records (a member that must read some before it hangs
/// could otherwise be dealt nearly empty partitions, read them and leave idle).
fn produce(bootstrap: &str, topic: &str, count: usize) {
    let delivered = Client::Confluent
        .produce(
            bootstrap,
            topic,
            count,
            &Produce {
                spread: true,
                ..Produce::default()
            },
        )
        .delivered(TIMEOUT);
    assert!(delivered.failed.is_empty(), "{:?}", delivered.failed);
    assert_eq!(delivered.offsets.len(), count);
}

#[test]
fn a_group_shares_the_partitions_and_its_commits_survive_a_broker_crash() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--partitions", "6"]);
    let topic = topic("group-share");
    let group = format!("{topic}-readers");
    produce(&broker.bootstrap(), &topic, 300);

    let mut members: Vec<_> = (0..3)
        // Paced (30 ms a record: 9 s to drain the topic alone), so that the first member to
        // join cannot read everything before the others are in the group.
        .map(|_| {
            group_consumer(
                &broker.bootstrap(),
                &topic,
                &group,
                &["--idle", "6", "--pace-ms", "30"],
            )
        })
        .collect();
    // Once every record was read and committed the members are stopped, rather than each
    // sitting out its idle timeout.
    wait_until(
        &mut members.iter_mut().collect::<Vec<_>>(),
        TIMEOUT,
        |runs| distinct(runs.iter().copied()).len() == 300,
    );
    let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let mut refused = BTreeSet::new();
    let mut busy = 0;
    for m in members {
        let (records, r) = consumed(&m.stop(TIMEOUT));
        busy += usize::from(!records.is_empty());
        for (p, o, _) in records {
            *seen.entry((p, o)).or_default() += 1;
        }
        refused.extend(r);
    }
    assert_eq!(seen.len(), 300, "every record read by some member");
    assert!(
        busy >= 2,
        "the partitions were shared ({busy} members read)"
    );
    for (at, n) in &seen {
        assert!(
            *n == 1 || refused.contains(at),
            "{at:?} read {n} times though its commit was accepted"
        );
    }

    // SIGKILL: the commits were fsynced before they were answered.
    broker.crash();
    let broker = broker.restart();
    produce(&broker.bootstrap(), &topic, 60);
    let mut resumed = group_consumer(&broker.bootstrap(), &topic, &group, &["--idle", "6"]);
    wait_until(&mut [&mut resumed], TIMEOUT, |runs| {
        distinct(runs.iter().copied())
            .iter()
            .filter(|at| !seen.contains_key(at))
            .count()
            == 60
    });
    let (records, _) = consumed(&resumed.stop(TIMEOUT));
    let old: Vec<_> = records
        .iter()
        .filter(|r| seen.contains_key(&(r.0, r.1)))
        .collect();
    assert!(
        old.is_empty(),
        "after the restart the group resumed from its committed offsets, yet re-read {old:?}"
    );
    assert_eq!(records.len(), 60, "exactly the 60 new records");
}

#[test]
fn a_member_killed_before_its_commit_has_the_record_redelivered_to_another() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &["--partitions", "6"]);
    let topic = topic("group-kill");
    let group = format!("{topic}-readers");
    produce(&broker.bootstrap(), &topic, 300);

    let mut victim = group_consumer(
        &broker.bootstrap(),
        &topic,
        &group,
        &["--idle", "25", "--hang-after", "5"],
    );
    let mut others: Vec<_> = (0..2)
        .map(|_| group_consumer(&broker.bootstrap(), &topic, &group, &["--idle", "25"]))
        .collect();
    let hang = victim.wait_event("hanging", TIMEOUT);
    let lost = (
        hang["partition"].as_i64().unwrap(),
        hang["offset"].as_i64().unwrap(),
    );
    // Killed after reading the record (its side effect) and before committing it.
    let (victim_records, _) = consumed(&victim.kill());
    let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for (p, o, _) in &victim_records {
        *seen.entry((*p, *o)).or_default() += 1;
    }
    // The others are stopped once every record was read by some member and the lost one
    // again by one of them, rather than each sitting out its idle timeout.
    wait_until(
        &mut others.iter_mut().collect::<Vec<_>>(),
        TIMEOUT,
        |runs| {
            let mut read = distinct(runs.iter().copied());
            let again = read.contains(&lost);
            read.extend(seen.keys().copied());
            again && read.len() == 300
        },
    );
    let mut redelivered_to_other = false;
    for m in others {
        let (records, _) = consumed(&m.stop(TIMEOUT));
        for (p, o, _) in records {
            redelivered_to_other |= (p, o) == lost;
            *seen.entry((p, o)).or_default() += 1;
        }
    }
    assert!(
        redelivered_to_other,
        "the uncommitted record {lost:?} went to another member after the rebalance"
    );
    assert_eq!(seen.len(), 300, "every record read by some member");
    assert_eq!(seen[&lost], 2, "the uncommitted record was read twice");
    assert!(
        broker.log().iter().any(|l| l.contains("session expired")),
        "the killed member was removed by its session timeout"
    );
}

#[test]
fn a_broker_crash_mid_rebalance_keeps_every_commit_made_before_it() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--partitions", "4"]);
    let topic = topic("group-crash-rebalance");
    let group = format!("{topic}-readers");
    produce(&broker.bootstrap(), &topic, 2000);
    let mut first = group_consumer(&broker.bootstrap(), &topic, &group, &["--idle", "60"]);
    first.wait_event("committed", TIMEOUT);
    // A second member joins: the group rebalances, and the broker dies in the middle.
    let second = group_consumer(&broker.bootstrap(), &topic, &group, &["--idle", "60"]);
    std::thread::sleep(Duration::from_millis(700));
    broker.crash();
    let mut committed: BTreeMap<i64, i64> = BTreeMap::new();
    let mut read_before: BTreeSet<(i64, i64)> = BTreeSet::new();
    for run in [first.kill(), second.kill()] {
        let (records, _) = consumed(&run);
        read_before.extend(records.into_iter().map(|(p, o, _)| (p, o)));
        for e in run.iter().filter(|e| e["event"] == "committed") {
            let p = e["partition"].as_i64().unwrap();
            let o = e["offset"].as_i64().unwrap();
            let c = committed.entry(p).or_insert(o);
            *c = (*c).max(o);
        }
    }
    assert!(!committed.is_empty());
    let broker = broker.restart();
    let mut resumed = group_consumer(&broker.bootstrap(), &topic, &group, &["--idle", "15"]);
    // Stopped once every record was read before the crash or now, rather than after its idle
    // timeout.
    wait_until(&mut [&mut resumed], TIMEOUT, |runs| {
        let mut all = distinct(runs.iter().copied());
        all.extend(read_before.iter().copied());
        all.len() == 2000
    });
    let events = resumed.stop(TIMEOUT);
    let (records, _) = consumed(&events);
    for (p, o, _) in &records {
        if let Some(c) = committed.get(p) {
            assert!(
                o > c,
                "partition {p}: offset {o} read again though {c} was committed before the crash"
            );
        }
    }
    // Nothing is lost either: every record was read before the crash or after the restart
    // (a commit the broker made durable but the killed client never reported moves the
    // restart's start past a record read before).
    let mut all = read_before.clone();
    all.extend(records.iter().map(|(p, o, _)| (*p, *o)));
    assert_eq!(
        all.len(),
        2000,
        "records read before the crash and after the restart; committed before the crash: \
         {committed:?}"
    );
}
