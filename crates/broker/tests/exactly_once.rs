//! The seeds' scenario end to end: a confluent-kafka producer with a transaction
//! per message; a group of three consumers with read_committed and manual commits, each
//! recording its side effect in oncelog's processed-id store (one store per input partition);
//! one consumer killed after its side effect and before its commit. The group rebalances, the
//! message is delivered again to another member (at-least-once, what Kafka promises), and the
//! store answers that it was handled: the sink holds every message exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use common::clients::{eos_consumer, oncelog_bin, txn_client, wait_until};
use common::{topic, BrokerProcess};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(240);
const MESSAGES: usize = 60;

fn at(e: &Value) -> (i64, i64, String) {
    (
        e["partition"].as_i64().unwrap(),
        e["offset"].as_i64().unwrap(),
        e["value"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_consumer_killed_between_its_side_effect_and_its_commit_applies_nothing_twice() {
    let data = tempfile::tempdir().unwrap();
    let stores = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &["--partitions", "6"]);
    let topic = topic("seeds");
    let group = format!("{topic}-sink");
    let produced = txn_client(&[
        "txns",
        &broker.bootstrap(),
        &topic,
        &MESSAGES.to_string(),
        "seeds-producer",
    ])
    .finish(TIMEOUT);
    assert_eq!(
        produced
            .iter()
            .filter(|e| e["event"] == "committed")
            .count(),
        MESSAGES
    );

    let mut victim = eos_consumer(
        &broker.bootstrap(),
        &topic,
        &group,
        stores.path(),
        &["--hang-after", "5"],
    );
    let mut others: Vec<_> = (0..2)
        .map(|_| eos_consumer(&broker.bootstrap(), &topic, &group, stores.path(), &[]))
        .collect();
    let hang = victim.wait_event("hanging", TIMEOUT);
    let lost = at(&hang);
    // SIGKILL after the side effect (recorded in the store), before the offset commit.
    let victim_events = victim.kill();

    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    let mut delivered: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut tally = |events: &[Value]| {
        for e in events {
            match e["event"].as_str() {
                Some("applied") => {
                    let (p, o, v) = at(e);
                    *applied.entry(v).or_default() += 1;
                    *delivered.entry((p, o)).or_default() += 1;
                }
                Some("skipped") => {
                    let (p, o, v) = at(e);
                    *delivered.entry((p, o)).or_default() += 1;
                    skipped.push((p, o, v));
                }
                Some("store_error") => panic!("the store refused: {e}"),
                _ => {}
            }
        }
    };
    // The others read until every message was applied by someone and the killed consumer's
    // record was delivered again and skipped; then they stop (each first commits the record in
    // hand), rather than each sitting out its 20 s idle timeout.
    let done = |runs: &[&[Value]]| {
        let mut handled = BTreeSet::new();
        let mut redelivered = false;
        for e in victim_events
            .iter()
            .chain(runs.iter().flat_map(|r| r.iter()))
        {
            match e["event"].as_str() {
                Some("applied") => {
                    handled.insert(at(e).2);
                }
                Some("skipped") => redelivered |= at(e) == lost,
                _ => {}
            }
        }
        handled.len() == MESSAGES && redelivered
    };
    wait_until(&mut others.iter_mut().collect::<Vec<_>>(), TIMEOUT, done);
    tally(&victim_events);
    for m in others {
        tally(&m.stop(TIMEOUT));
    }
    assert!(
        skipped.contains(&lost),
        "the record the killed consumer applied but never committed, {lost:?}, was delivered \
         again and the store said it was handled (skipped: {skipped:?})"
    );
    assert_eq!(
        delivered[&(lost.0, lost.1)],
        2,
        "delivered twice: at-least-once"
    );
    let twice: Vec<_> = applied.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "applied more than once: {twice:?}");
    assert_eq!(applied.len(), MESSAGES, "every message applied");

    // The sink as the stores hold it (the effects recorded with the ids): each once.
    let mut sink: BTreeMap<String, usize> = BTreeMap::new();
    for dir in std::fs::read_dir(stores.path()).unwrap() {
        let dir = dir.unwrap().path();
        let out = Command::new(oncelog_bin())
            .args(["processed", "dump"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "dump {}", dir.display());
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if let Some(effect) = v["effect"].as_str() {
                *sink.entry(effect.to_string()).or_default() += 1;
            }
        }
    }
    assert_eq!(sink.len(), MESSAGES, "every message's effect in the sink");
    assert!(sink.values().all(|n| *n == 1), "and each once");
    assert!(sink.contains_key(&format!("applied {}", lost.2)));
}
