//! Kafka clients no one here wrote (librdkafka through confluent-kafka, kafka-python, the Java
//! client) produce idempotently through the broker, lose acknowledgements, retry across
//! crashes and restarts, and read back every record exactly once.
//!
//! The clients are installed on first use by tests/clients/setup.sh (a venv from PyPI, jars
//! from Maven Central). `ONCELOG_BROKER_MESSAGES` scales the message counts up for long runs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::clients::{Client, Delivered, Produce};
use common::proxy::Proxy;
use common::{topic, BrokerProcess};

/// Messages per run; `ONCELOG_BROKER_MESSAGES` raises it.
fn messages(default: usize) -> usize {
    std::env::var("ONCELOG_BROKER_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

/// Every message delivered once, the consumer reads each exactly once and in order, and the
/// offsets in the delivery reports are the offsets the consumer sees.
fn assert_exactly_once(
    client: Client,
    bootstrap: &str,
    topic: &str,
    count: usize,
    delivered: &Delivered,
) {
    assert!(
        delivered.failed.is_empty(),
        "{client:?}: failed deliveries {:?}",
        delivered.failed
    );
    assert_eq!(
        delivered.offsets.len(),
        count,
        "{client:?}: every message delivered"
    );
    let consumed = client.consume(bootstrap, topic, count);
    let values: Vec<&str> = consumed.records.iter().map(|r| r.value.as_str()).collect();
    let expected: Vec<String> = (0..count).map(|i| format!("m-{i}")).collect();
    assert_eq!(values, expected, "{client:?}: each message once, in order");
    for (i, record) in consumed.records.iter().enumerate() {
        assert_eq!(
            delivered.offsets[&i],
            (record.partition, record.offset),
            "{client:?}: message {i} was reported at the offset the consumer reads it from"
        );
    }
    let offsets: Vec<i64> = consumed.records.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets,
        (0..count as i64).collect::<Vec<_>>(),
        "{client:?}: dense offsets"
    );
    if client == Client::Confluent {
        // librdkafka's consumer uses its group: FindCoordinator, OffsetCommit, OffsetFetch.
        assert_eq!(
            consumed.committed.get(&0),
            Some(&(count as i64)),
            "committed and read back"
        );
    }
}

fn produce_and_consume(client: Client) {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic(&format!("plain-{client:?}").to_lowercase());
    let count = messages(300);
    let opts = Produce {
        wave: 50,
        size: 100,
        ..Produce::default()
    };
    let delivered = client
        .produce(&broker.bootstrap(), &topic, count, &opts)
        .delivered(CLIENT_TIMEOUT);
    assert_exactly_once(client, &broker.bootstrap(), &topic, count, &delivered);
    assert!(
        broker.duplicates().is_empty(),
        "no retries, so no duplicates"
    );
}

#[test]
fn librdkafka_produces_idempotently_and_consumes_what_it_produced() {
    produce_and_consume(Client::Confluent);
}

#[test]
fn kafka_python_produces_idempotently_and_consumes_what_it_produced() {
    produce_and_consume(Client::KafkaPython);
}

#[test]
fn java_client_produces_idempotently_and_consumes_what_it_produced() {
    produce_and_consume(Client::Java);
}

/// The acknowledgements of two produce requests are lost (the broker appended the batch, the
/// proxy swallows the answer and closes the connection); the client retries each on a new
/// connection, and the broker answers the retry as a duplicate with the original offsets.
fn lost_acknowledgements_are_retried_into_duplicates(client: Client) {
    let data = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&[3, 7]);
    // Clients are told the proxy's address, so every connection goes through it.
    let broker = BrokerProcess::start(
        data.path(),
        &["--advertised-listener", &proxy.addr.to_string()],
    );
    proxy.set_upstream(broker.addr);
    let topic = topic(&format!("lost-ack-{client:?}").to_lowercase());
    let count = messages(100);
    let opts = Produce {
        wave: 10,
        ..Produce::default()
    };
    let bootstrap = proxy.addr.to_string();
    let delivered = client
        .produce(&bootstrap, &topic, count, &opts)
        .delivered(CLIENT_TIMEOUT);
    assert_exactly_once(client, &bootstrap, &topic, count, &delivered);
    assert_retries_answered_with_original_offsets(client, &proxy, &[&broker], &delivered);
}

/// The negative control: the same lost acknowledgements, from a producer that is not
/// idempotent, store the retried batches twice. The checks above would catch that, so they can
/// fail, and it is the producer id and sequence that the broker deduplicates by.
#[test]
fn without_idempotence_the_same_lost_acknowledgements_store_duplicates() {
    let client = Client::Confluent;
    let data = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&[3, 7]);
    let broker = BrokerProcess::start(
        data.path(),
        &["--advertised-listener", &proxy.addr.to_string()],
    );
    proxy.set_upstream(broker.addr);
    let topic = topic("lost-ack-plain");
    let count = messages(100);
    let bootstrap = proxy.addr.to_string();
    let opts = Produce {
        wave: 10,
        no_idempotence: true,
        ..Produce::default()
    };
    let delivered = client
        .produce(&bootstrap, &topic, count, &opts)
        .delivered(CLIENT_TIMEOUT);
    assert_eq!(delivered.offsets.len(), count);
    assert_eq!(proxy.lost().len(), 2);
    let lost_records: usize = proxy
        .lost()
        .iter()
        .flat_map(|l| &l.batches)
        .map(|b| b.records as usize)
        .sum();
    let consumed = client.consume(&bootstrap, &topic, count + lost_records);
    assert_eq!(
        consumed.records.len(),
        count + lost_records,
        "every record of a lost batch is stored twice"
    );
    let mut values: Vec<&str> = consumed.records.iter().map(|r| r.value.as_str()).collect();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), count, "the extra records are copies");
    assert!(
        broker.duplicates().is_empty(),
        "nothing to deduplicate without a producer id"
    );
}

/// Each lost batch came back as a retry that the broker logged as a duplicate, answered with
/// the offset the client then reported for the batch's first message.
fn assert_retries_answered_with_original_offsets(
    client: Client,
    proxy: &Proxy,
    brokers: &[&BrokerProcess],
    delivered: &Delivered,
) {
    let lost = proxy.lost();
    assert_eq!(lost.len(), 2, "{client:?}: two acknowledgements were lost");
    let duplicates: Vec<_> = brokers.iter().flat_map(|b| b.duplicates()).collect();
    for ack in &lost {
        for batch in &ack.batches {
            let retry = duplicates
                .iter()
                .find(|d| {
                    d.producer_id == batch.producer_id
                        && d.base_sequence == batch.base_sequence
                        && d.partition == batch.partition
                })
                .unwrap_or_else(|| {
                    panic!(
                        "{client:?}: no duplicate logged for {batch:?}; duplicates: {duplicates:?}"
                    )
                });
            // One producer, one partition: message i has sequence i.
            let first = batch.base_sequence as usize;
            assert_eq!(
                delivered.offsets[&first].1, retry.first_offset,
                "{client:?}: the retry of {batch:?} was answered with the original offset"
            );
        }
    }
}

#[test]
fn librdkafka_retries_after_lost_acknowledgements_are_duplicates() {
    lost_acknowledgements_are_retried_into_duplicates(Client::Confluent);
}

#[test]
fn kafka_python_retries_after_lost_acknowledgements_are_duplicates() {
    lost_acknowledgements_are_retried_into_duplicates(Client::KafkaPython);
}

#[test]
fn java_client_retries_after_lost_acknowledgements_are_duplicates() {
    lost_acknowledgements_are_retried_into_duplicates(Client::Java);
}

/// The broker is SIGKILLed after it answered a produce and before the answer reached the
/// client; the retry goes to the restarted broker, which still knows the batch: a duplicate.
#[test]
fn a_retry_after_a_broker_crash_is_still_a_duplicate() {
    let client = Client::Confluent;
    let data = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&[3, 6]);
    let broker = BrokerProcess::start(
        data.path(),
        &["--advertised-listener", &proxy.addr.to_string()],
    );
    proxy.set_upstream(broker.addr);
    let current = Arc::new(Mutex::new(broker));
    let crashed: Arc<Mutex<Vec<BrokerProcess>>> = Arc::default();
    {
        let (current, crashed) = (Arc::clone(&current), Arc::clone(&crashed));
        proxy.on_lost(move |_| {
            let mut broker = current.lock().unwrap();
            broker.crash();
            let restarted = broker.restart();
            crashed
                .lock()
                .unwrap()
                .push(std::mem::replace(&mut *broker, restarted));
        });
    }
    let topic = topic("crash-retry");
    let count = messages(100);
    let bootstrap = proxy.addr.to_string();
    let delivered = client
        .produce(
            &bootstrap,
            &topic,
            count,
            &Produce {
                wave: 10,
                ..Produce::default()
            },
        )
        .delivered(CLIENT_TIMEOUT);
    assert_exactly_once(client, &bootstrap, &topic, count, &delivered);
    let current = current.lock().unwrap();
    let crashed = crashed.lock().unwrap();
    assert_eq!(
        crashed.len(),
        2,
        "the broker crashed at each lost acknowledgement"
    );
    // Each retry reached the broker started after the crash.
    let mut brokers: Vec<&BrokerProcess> = crashed.iter().collect();
    brokers.push(&current);
    assert_retries_answered_with_original_offsets(client, &proxy, &brokers, &delivered);
    let recovered = current.wait_for_log(
        "recovered partition after an unclean shutdown",
        Duration::from_secs(5),
    );
    assert!(recovered.contains(&topic), "{recovered}");
}

/// The broker stops in the middle of a stream, cleanly (SIGTERM) or not (SIGKILL), and comes
/// back on the same port; the producer reconnects and carries on, and every message is
/// stored once, in order.
fn broker_restart_mid_stream(crash: bool) {
    let client = Client::Confluent;
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let topic = topic(if crash {
        "crash-mid-stream"
    } else {
        "restart-mid-stream"
    });
    let count = messages(600);
    let mut run = client.produce(
        &broker.bootstrap(),
        &topic,
        count,
        &Produce {
            wave: 20,
            pace_ms: 5,
            ..Produce::default()
        },
    );
    run.wait_delivered(count / 3, CLIENT_TIMEOUT);
    if crash {
        broker.crash();
    } else {
        let status = broker.terminate();
        assert!(status.success(), "a clean shutdown exits 0, got {status}");
        broker.wait_for_log("every partition closed cleanly", Duration::from_secs(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let restarted = broker.restart();
    let delivered = run.delivered(CLIENT_TIMEOUT);
    assert_exactly_once(client, &restarted.bootstrap(), &topic, count, &delivered);
    if !crash {
        assert!(
            !restarted
                .log()
                .iter()
                .any(|l| l.contains("recovered partition after an unclean shutdown")),
            "after a clean shutdown nothing needs recovering"
        );
    }
}

#[test]
fn a_clean_broker_restart_mid_stream_loses_and_repeats_nothing() {
    broker_restart_mid_stream(false);
}

#[test]
fn a_broker_crash_mid_stream_loses_and_repeats_nothing() {
    broker_restart_mid_stream(true);
}
