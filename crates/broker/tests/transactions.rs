//! Transactions with a real client (librdkafka through confluent-kafka): a transactional
//! producer's committed transactions are read by read_committed consumers and its aborted
//! ones never are; a zombie with the old epoch is fenced; a producer killed mid-transaction
//! leaves nothing visible once its transaction times out; a broker SIGKILL mid-transaction
//! aborts it at restart; consume-transform-produce (confluent-kafka's
//! send_offsets_to_transaction, the Java client's sendOffsetsToTransaction) commits the
//! consumer's offsets with the transaction, and an aborted one leaves them as they were.

mod common;

use std::time::Duration;

use common::clients::{group_consumer, java_txn_loop, txn_client};
use common::{topic, BrokerProcess};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(180);

fn values(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "consumed")
        .map(|e| e["value"].as_str().unwrap().to_string())
        .collect()
}

/// Every value a fresh group reads from `topic` (read_committed unless `uncommitted`).
fn read_all(bootstrap: &str, topic: &str, uncommitted: bool) -> Vec<String> {
    let group = format!("{topic}-check-{}", uuid_like());
    let mut args = vec!["--idle", "4", "--timeout", "30"];
    if uncommitted {
        args.push("--read-uncommitted");
    }
    values(&group_consumer(bootstrap, topic, &group, &args).finish(TIMEOUT))
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn events(run: Vec<Value>, name: &str) -> usize {
    run.iter().filter(|e| e["event"] == name).count()
}

#[test]
fn read_committed_consumers_see_committed_transactions_and_never_aborted_ones() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic("txn-commit-abort");
    let run = txn_client(&[
        "txns",
        &broker.bootstrap(),
        &topic,
        "30",
        "tx-a",
        "--abort-every",
        "3",
    ])
    .finish(TIMEOUT);
    assert_eq!(events(run.clone(), "committed"), 20);
    assert_eq!(events(run, "aborted"), 10);
    let committed: Vec<String> = (0..30)
        .filter(|i| i % 3 != 2)
        .map(|i| format!("m-{i}"))
        .collect();
    assert_eq!(
        read_all(&broker.bootstrap(), &topic, false),
        committed,
        "read_committed: the committed transactions, in order, and no aborted one"
    );
    let all: Vec<String> = (0..30).map(|i| format!("m-{i}")).collect();
    assert_eq!(
        read_all(&broker.bootstrap(), &topic, true),
        all,
        "read_uncommitted: every record"
    );
}

#[test]
fn a_zombie_with_the_old_epoch_is_fenced_and_its_transaction_aborted() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic("txn-zombie");
    let run = txn_client(&["zombie", &broker.bootstrap(), &topic, "tx-z"]).finish(TIMEOUT);
    let fenced = run.iter().find(|e| e["event"] == "fenced");
    assert!(fenced.is_some(), "the zombie's commit failed: {run:?}");
    assert_eq!(
        read_all(&broker.bootstrap(), &topic, false),
        ["fresh-0"],
        "only the new producer's transaction is visible"
    );
}

#[test]
fn a_producer_killed_mid_transaction_leaves_nothing_visible() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic("txn-killed");
    let mut hang = txn_client(&[
        "hang",
        &broker.bootstrap(),
        &topic,
        "tx-k",
        "--timeout-ms",
        "3000",
    ]);
    hang.wait_event("hanging", TIMEOUT);
    hang.kill();
    // Another producer commits after it; its records are visible once the killed one's
    // transaction timed out and was aborted (until then the last stable offset holds).
    txn_client(&["txns", &broker.bootstrap(), &topic, "3", "tx-after"]).finish(TIMEOUT);
    assert_eq!(
        read_all(&broker.bootstrap(), &topic, false),
        ["m-0", "m-1", "m-2"]
    );
    assert!(broker
        .log()
        .iter()
        .any(|l| l.contains("transaction timed out")));
}

#[test]
fn a_broker_crash_mid_transaction_aborts_it_at_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic("txn-broker-crash");
    txn_client(&["txns", &broker.bootstrap(), &topic, "2", "tx-before"]).finish(TIMEOUT);
    let mut hang = txn_client(&["hang", &broker.bootstrap(), &topic, "tx-open"]);
    hang.wait_event("hanging", TIMEOUT);
    broker.crash();
    hang.kill();
    let broker = broker.restart();
    assert!(broker
        .log()
        .iter()
        .any(|l| l.contains("transaction ended") && l.contains("Abort")));
    txn_client(&["txns", &broker.bootstrap(), &topic, "1", "tx-after"]).finish(TIMEOUT);
    assert_eq!(
        read_all(&broker.bootstrap(), &topic, false),
        ["m-0", "m-1", "m-0"],
        "the committed transactions before and after; the open one aborted"
    );
}

#[test]
fn consume_transform_produce_commits_the_offsets_with_the_transaction() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let input = topic("ctp-in");
    let output = topic("ctp-out");
    txn_client(&["txns", &broker.bootstrap(), &input, "5", "tx-src"]).finish(TIMEOUT);
    let run = txn_client(&[
        "transform",
        &broker.bootstrap(),
        &input,
        &output,
        &format!("{input}-g"),
        "5",
        "tx-ctp",
        "--abort-first",
    ])
    .finish(TIMEOUT);
    assert_eq!(events(run.clone(), "aborted"), 1);
    assert_eq!(events(run.clone(), "transformed"), 5);
    let committed = run
        .iter()
        .find(|e| e["event"] == "committed_offset")
        .map(|e| e["offset"].as_i64().unwrap());
    // Each input transaction is a record and its COMMIT marker: the last record is at 8.
    let last = run
        .iter()
        .filter(|e| e["event"] == "transformed")
        .map(|e| e["offset"].as_i64().unwrap())
        .max();
    assert_eq!(last, Some(8));
    assert_eq!(committed, Some(9), "the offsets went with the commits");
    let expected: Vec<String> = (0..5).map(|i| format!("out-m-{i}")).collect();
    assert_eq!(
        read_all(&broker.bootstrap(), &output, false),
        expected,
        "each input transformed once; the aborted output is not visible"
    );
}

#[test]
fn the_java_clients_send_offsets_to_transaction_loop_commits_offsets_with_its_output() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let input = topic("java-ctp-in");
    let output = topic("java-ctp-out");
    txn_client(&["txns", &broker.bootstrap(), &input, "5", "tx-java-src"]).finish(TIMEOUT);
    let group = format!("{input}-g");
    let run = java_txn_loop(&[&broker.bootstrap(), &input, &output, &group, "tx-java", "5"])
        .finish(TIMEOUT);
    assert_eq!(events(run.clone(), "aborted"), 1);
    assert_eq!(events(run.clone(), "transformed"), 5);
    let committed = run
        .iter()
        .find(|e| e["event"] == "committed_offset")
        .map(|e| e["offset"].as_i64().unwrap());
    // Five transactions of a record and a COMMIT marker each: the last record is at 8.
    assert_eq!(
        committed,
        Some(9),
        "sendOffsetsToTransaction's offsets, with the commits"
    );
    let expected: Vec<String> = (0..5).map(|i| format!("out-m-{i}")).collect();
    assert_eq!(read_all(&broker.bootstrap(), &output, false), expected);
}
