//! The broker serves a log dir that Apache Kafka 4.4 wrote (tests/fixtures/kafka-broker):
//! its topics, their Kafka topic ids, and their records, to a real client.

mod common;

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::clients::Client;
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/kafka-broker")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_kafka_log_dir_is_served_with_its_topic_ids_and_records() {
    let data = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), data.path());
    let broker = BrokerProcess::start(data.path(), &[]);
    // 450 records written by an idempotent librdkafka producer into Kafka 4.4.
    let consumed = Client::Confluent.consume(&broker.bootstrap(), "idem", 450);
    assert_eq!(consumed.records.len(), 450);
    let offsets: Vec<i64> = consumed.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..450).collect::<Vec<_>>());
    // Kafka's topic id (from its partition.metadata) is the one answered.
    let mut wire = Wire::connect(broker.addr);
    let metadata: MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("idem"))))])),
    );
    let kafkas = URL_SAFE_NO_PAD.decode("IM2DM_xxRv21CyKjxgmXyQ").unwrap();
    assert_eq!(metadata.topics[0].topic_id.as_bytes(), &kafkas[..]);
    assert_eq!(
        metadata.cluster_id.as_deref(),
        Some("ezqL2uOuQlqpTUxNZatqqg"),
        "meta.properties"
    );
    // The partitions are the manager's: a clean stop leaves the log dir as Kafka leaves one,
    // with its offset checkpoints and the clean-shutdown marker.
    let mut broker = broker;
    assert!(broker.terminate().success());
    for file in [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        ".kafka_cleanshutdown",
    ] {
        assert!(
            data.path().join(file).is_file(),
            "{file} after a clean stop"
        );
    }
    let recovery =
        std::fs::read_to_string(data.path().join("recovery-point-offset-checkpoint")).unwrap();
    assert!(recovery.lines().any(|l| l == "idem 0 450"), "{recovery}");
}
