//! Tiered storage in the broker (`--tier-dir`, and `--tier-url` against a real S3-compatible
//! server): a topic whose early segments exist only in the
//! object store is still served from offset 0, by Fetch (read_uncommitted and read_committed,
//! over the wire and to the real clients of `common::clients`) and ListOffsets (EARLIEST answers the remote log start, as Kafka does with tiered storage;
//! by timestamp through the remote indexes); and a bad tiering flag stops the broker with a
//! message that names it.

mod common;
#[path = "../../tier/tests/support/mod.rs"]
mod s3_support;

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::clients::Client;
use common::wire::{create_topic, produce, str_bytes, topic_name, Wire};
use common::{broker_bin, BrokerProcess};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, FetchRequest, FetchResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, ListOffsetsRequest, ListOffsetsResponse,
};
use oncelog::format::{BatchBuilder, BatchIter};

const TOPIC: &str = "tiered";
const BATCHES: i64 = 60;
const RECORDS_PER_BATCH: i64 = 5;

/// The first record's timestamp: now, so that the default retention (7 days) keeps every
/// record, locally and remotely.
fn base_timestamp() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One record as a consumer sees it: offset, timestamp, key, value.
type Seen = (i64, i64, Vec<u8>, Vec<u8>);

/// The records produced: record `o` (its offset) has timestamp `base + o`.
fn expected(base: i64) -> Vec<Seen> {
    (0..BATCHES * RECORDS_PER_BATCH)
        .map(|o| {
            (
                o,
                base + o,
                format!("key-{o}").into_bytes(),
                format!("value-{o}-{}", "x".repeat(60)).into_bytes(),
            )
        })
        .collect()
}

fn batch(records: &[Seen]) -> Bytes {
    let mut builder = BatchBuilder::new();
    for (_, timestamp, key, value) in records {
        builder.append(*timestamp, Some(key), Some(value), &[]);
    }
    Bytes::from(builder.build().unwrap())
}

/// ListOffsets v9 for partition 0 of [`TOPIC`] at the special or real `timestamp`: (offset,
/// error code).
fn list_offset(wire: &mut Wire, timestamp: i64) -> (i64, i16) {
    list_offset_of(wire, TOPIC, timestamp)
}

fn list_offset_of(wire: &mut Wire, topic: &str, timestamp: i64) -> (i64, i16) {
    let response: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        9,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(timestamp)
                ])]),
    );
    let p = &response.topics[0].partitions[0];
    (p.offset, p.error_code)
}

/// One Fetch v11 of partition 0 of [`TOPIC`] at `offset`: (error code, records, aborted
/// transactions answered).
fn fetch(wire: &mut Wire, offset: i64, isolation_level: i8) -> (i16, Bytes, Option<usize>) {
    let mut response: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_isolation_level(isolation_level)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(TOPIC))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1500)])]),
    );
    let p = response.responses.remove(0).partitions.remove(0);
    (
        p.error_code,
        p.records.unwrap_or_default(),
        p.aborted_transactions.map(|a| a.len()),
    )
}

/// Every record a consumer gets fetching from offset 0 to `end`, as a consumer walks: each
/// batch CRC-checked, the next fetch at the offset after the last batch.
fn consume_from_zero(wire: &mut Wire, end: i64, isolation_level: i8) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut offset = 0;
    while offset < end {
        let (error, records, aborted) = fetch(wire, offset, isolation_level);
        assert_eq!(error, 0, "fetch at {offset}");
        assert!(!records.is_empty(), "fetch at {offset} returned nothing");
        if isolation_level == 1 {
            assert_eq!(aborted, Some(0), "no aborted transactions at {offset}");
        }
        for item in BatchIter::new(&records) {
            let (_, batch) = item.unwrap();
            batch.verify_crc().unwrap();
            let buf = batch.records_buf().unwrap();
            for record in batch.iter_records(&buf) {
                let r = record.unwrap();
                // A fetch returns whole batches: records before the offset asked are skipped,
                // as a consumer skips them.
                if r.offset >= offset {
                    seen.push((
                        r.offset,
                        r.timestamp,
                        r.key.unwrap().to_vec(),
                        r.value.unwrap().to_vec(),
                    ));
                }
            }
            offset = batch.last_offset() + 1;
        }
    }
    seen
}

/// The acceptance test of issue 32's broker part: small segments, local retention 0 bytes, a
/// tiering job every 100 ms. Once the early segments exist only remotely (the local log start
/// moved, the store has them), a consumer from offset 0 gets every record in order exactly as
/// written, under both isolation levels, and ListOffsets EARLIEST answers 0.
#[test]
fn a_consumer_from_offset_zero_reads_segments_that_are_only_remote() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let store = ["--tier-dir", remote.path().to_str().unwrap()];
    serve_from_remote(data.path(), &store, remote.path(), true);
}

/// The same against a real S3-compatible server (crates/tier's test server: s3s over s3s-fs,
/// in this process), through `--tier-url` and `--tier-option`; s3s-fs keeps each object as a
/// file under its bucket's directory, which the checks read and damage as above. The real
/// clients are left to the test above.
#[test]
fn a_consumer_from_offset_zero_reads_segments_only_in_s3() {
    let server = s3_support::S3Server::start();
    let data = tempfile::tempdir().unwrap();
    let url = format!("s3://{}", s3_support::BUCKET);
    let mut flags = vec!["--tier-url".to_string(), url];
    for (key, value) in server.options() {
        flags.extend(["--tier-option".to_string(), format!("{key}={value}")]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    serve_from_remote(data.path(), &flags, &server.bucket_dir(), false);
    // The broker checked the store's conditional put at start.
    assert!(server
        .seen()
        .iter()
        .any(|r| r.path.contains("_oncelog_probe") && r.if_none_match.as_deref() == Some("*")));
}

/// A store that overwrites where the manifest's conditional put must refuse (a server that
/// ignores `If-None-Match`) stops the broker at start, before it serves anything.
#[test]
fn a_store_without_a_real_conditional_put_stops_the_broker() {
    let server = s3_support::S3Server::start();
    server.fail(
        http::Method::PUT,
        "_oncelog_probe",
        s3_support::Fault::IgnoreIfNoneMatch,
        usize::MAX,
    );
    let data = tempfile::tempdir().unwrap();
    let mut command = Command::new(broker_bin());
    command
        .arg("--data")
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0", "--tier-url"])
        .arg(format!("s3://{}", s3_support::BUCKET));
    for (key, value) in server.options() {
        command.args(["--tier-option", &format!("{key}={value}")]);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no conditional put (put-if-absent)"),
        "{stderr}"
    );
}

/// A broker with the tiered store of `store_flags`, whose objects are files under
/// `remote_root`: a topic produced, uploaded and dropped locally is read back from offset 0
/// (Fetch both ways, ListOffsets, the real clients when `clients`), and a damaged remote object
/// is a storage error that leaves the partition online.
fn serve_from_remote(
    data: &std::path::Path,
    store_flags: &[&str],
    remote_root: &std::path::Path,
    clients: bool,
) {
    let remote_root = remote_root.to_path_buf();
    let mut flags = vec![
        "--segment-bytes",
        "4096",
        "--tier-interval-ms",
        "100",
        "--local-retention-bytes",
        "0",
    ];
    flags.extend_from_slice(store_flags);
    let mut broker = BrokerProcess::start(data, &flags);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, TOPIC);
    let base = base_timestamp();
    let records = expected(base);
    for chunk in records.chunks(RECORDS_PER_BATCH as usize) {
        let answer = produce(&mut wire, TOPIC, 0, batch(chunk));
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.base_offset, chunk[0].0);
    }
    let end = BATCHES * RECORDS_PER_BATCH;
    assert_eq!(list_offset(&mut wire, -1), (end, 0), "LATEST");

    // Wait for the tiering job to upload the sealed segments and drop their local copies.
    let deadline = Instant::now() + Duration::from_secs(60);
    let local_start = loop {
        let (local_start, error) = list_offset(&mut wire, -4);
        assert_eq!(error, 0);
        if local_start > end / 2 {
            break local_start;
        }
        assert!(
            Instant::now() < deadline,
            "local retention never moved the local log start past {} (it is {local_start})",
            end / 2
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let first_segment = data.join(format!("{TOPIC}-0/00000000000000000000.log"));
    assert!(
        !first_segment.exists(),
        "the first segment's local copy is gone"
    );
    assert!(
        remote_root
            .join(format!("oncelog/{TOPIC}-0/manifest"))
            .is_dir(),
        "the manifest is in the store under --tier-prefix"
    );
    let (last_tiered, error) = list_offset(&mut wire, -5);
    assert_eq!(error, 0);
    assert!(
        last_tiered >= local_start - 1 && last_tiered < end,
        "LATEST_TIERED {last_tiered} with local start {local_start}"
    );

    assert_eq!(
        list_offset(&mut wire, -2),
        (0, 0),
        "EARLIEST: the remote start"
    );
    assert_eq!(
        consume_from_zero(&mut wire, end, 0),
        records,
        "read_uncommitted"
    );
    assert_eq!(
        consume_from_zero(&mut wire, end, 1),
        records,
        "read_committed"
    );

    // A fetch in the middle of a remote segment starts at the batch holding the offset.
    let (error, bytes, _) = fetch(&mut wire, 7, 0);
    assert_eq!(error, 0);
    let (_, first) = BatchIter::new(&bytes).next().unwrap().unwrap();
    assert_eq!(first.base_offset(), 5);

    // By timestamp: the first record at or after it, found in a remote segment.
    assert_eq!(list_offset(&mut wire, base + 12), (12, 0));
    assert_eq!(list_offset(&mut wire, base), (0, 0));
    assert_eq!(
        list_offset(&mut wire, base + end - 1),
        (end - 1, 0),
        "the last record is local"
    );
    // Past the end: none.
    assert_eq!(list_offset(&mut wire, base + end), (-1, 0));

    // Consumers no one here wrote, from the beginning: librdkafka, kafka-python, Java.
    for client in Client::ALL.into_iter().filter(|_| clients) {
        let consumed = client.consume(&broker.bootstrap(), TOPIC, records.len());
        let got: Vec<(i64, String)> = consumed
            .records
            .iter()
            .map(|r| (r.offset, r.value.clone()))
            .collect();
        let want: Vec<(i64, String)> = records
            .iter()
            .map(|(o, _, _, v)| (*o, String::from_utf8(v.clone()).unwrap()))
            .collect();
        assert_eq!(got, want, "{client:?} from the beginning");
    }

    // A remote object damaged in the store: the read that meets it is KAFKA_STORAGE_ERROR
    // (56), never the damaged bytes, and the partition stays online (its local log is intact).
    let segments = remote_root.join(format!("oncelog/{TOPIC}-0/segments"));
    let first = std::fs::read_dir(&segments)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("00000000000000000000-")
        })
        .expect("the first segment's upload folder");
    let object = first.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&object, &bytes).unwrap();
    // The read cache holds the bytes it read and checked before the damage: they are what
    // was uploaded, and are served.
    assert_eq!(fetch(&mut wire, 0, 0).0, 0, "served from the read cache");
    // A broker restarted (an empty cache) meets the damage.
    assert!(broker.terminate().success(), "{:?}", broker.log());
    broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(fetch(&mut wire, 0, 0).0, 56, "read_uncommitted of damage");
    assert_eq!(fetch(&mut wire, 0, 1).0, 56, "read_committed of damage");
    let (error, records, _) = fetch(&mut wire, local_start, 0);
    assert_eq!(
        (error, records.is_empty()),
        (0, false),
        "the local log is served"
    );
    let more = batch(&[(end, base + end, b"k".to_vec(), b"v".to_vec())]);
    assert_eq!(
        produce(&mut wire, TOPIC, 0, more).error_code,
        0,
        "and takes appends"
    );
    // A tiered broker shuts down cleanly (its store's runtime, dropped on a task, once
    // panicked there).
    let status = broker.terminate();
    assert!(status.success(), "{status:?}: {:?}", broker.log());
}

/// CreateTopics v7 of one topic of one partition with `configs`: its error code.
fn create_with(wire: &mut Wire, topic: &str, configs: &[(&str, &str)]) -> i16 {
    let response: CreateTopicsResponse = wire.call(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(topic_name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(str_bytes(k))
                                .with_value(Some(str_bytes(v)))
                        })
                        .collect(),
                )]),
    );
    response.topics[0].error_code
}

/// DescribeConfigs v4 of one topic setting: (value, source).
fn topic_config(wire: &mut Wire, topic: &str, key: &str) -> (String, i8) {
    let response: DescribeConfigsResponse = wire.call(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(str_bytes(topic))
            .with_configuration_keys(Some(vec![str_bytes(key)]))]),
    );
    let c = &response.results[0].configs[0];
    (c.value.as_ref().unwrap().to_string(), c.config_source)
}

/// IncrementalAlterConfigs v1 SET of one topic setting: the error code.
fn set_topic_config(wire: &mut Wire, topic: &str, key: &str, value: &str) -> i16 {
    let response: IncrementalAlterConfigsResponse = wire.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(topic))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(str_bytes(key))
                    .with_config_operation(0)
                    .with_value(Some(str_bytes(value)))]),
        ]),
    );
    response.responses[0].error_code
}

/// Polls `done` every 100 ms for up to a minute.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kafka's per-topic settings of tiered storage: `remote.storage.enable=false` keeps a topic
/// out of the store, `local.retention.bytes` of a topic wins over the broker's (none here), and
/// an altered one applies at the next job run; DescribeConfigs answers each with its source,
/// and a bad value is INVALID_CONFIG.
#[test]
fn topics_set_their_own_tiering_with_kafkas_names() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        data.path(),
        &[
            "--segment-bytes",
            "4096",
            "--tier-dir",
            remote.path().to_str().unwrap(),
            "--tier-interval-ms",
            "100",
        ],
    );
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        create_with(
            &mut wire,
            "local-only",
            &[("remote.storage.enable", "false")]
        ),
        0
    );
    assert_eq!(
        create_with(&mut wire, "trimmed", &[("local.retention.bytes", "0")]),
        0
    );
    assert_eq!(create_with(&mut wire, "kept", &[]), 0);
    assert_eq!(
        create_with(&mut wire, "bad", &[("local.retention.ms", "-5")]),
        40,
        "INVALID_CONFIG"
    );
    assert_eq!(
        create_with(&mut wire, "bad", &[("remote.storage.enable", "maybe")]),
        40,
        "INVALID_CONFIG"
    );
    let records = expected(base_timestamp());
    let end = records.len() as i64;
    for topic in ["local-only", "trimmed", "kept"] {
        for chunk in records.chunks(RECORDS_PER_BATCH as usize) {
            assert_eq!(produce(&mut wire, topic, 0, batch(chunk)).error_code, 0);
        }
    }
    wait_for("the trimmed topic's local start to move", || {
        list_offset_of(&mut wire, "trimmed", -4).0 > end / 2
    });
    wait_for("the kept topic's upload", || {
        list_offset_of(&mut wire, "kept", -5).0 > end / 2
    });
    assert_eq!(list_offset_of(&mut wire, "trimmed", -2), (0, 0), "EARLIEST");
    assert_eq!(
        list_offset_of(&mut wire, "kept", -4),
        (0, 0),
        "no local retention"
    );
    assert_eq!(
        list_offset_of(&mut wire, "local-only", -5),
        (-1, 0),
        "never uploaded"
    );
    assert_eq!(list_offset_of(&mut wire, "local-only", -4), (0, 0));
    assert!(!remote.path().join("oncelog/local-only-0").exists());

    assert_eq!(
        topic_config(&mut wire, "trimmed", "local.retention.bytes"),
        ("0".into(), 1)
    );
    assert_eq!(
        topic_config(&mut wire, "kept", "local.retention.bytes"),
        ("-1".into(), 4)
    );
    assert_eq!(
        topic_config(&mut wire, "local-only", "remote.storage.enable"),
        ("false".into(), 1)
    );
    assert_eq!(
        topic_config(&mut wire, "kept", "remote.storage.enable"),
        ("true".into(), 4)
    );

    // Altered live: the kept topic's local copies go at the next runs.
    assert_eq!(
        set_topic_config(&mut wire, "kept", "local.retention.ms", "0"),
        0
    );
    assert_eq!(
        topic_config(&mut wire, "kept", "local.retention.ms"),
        ("0".into(), 1)
    );
    wait_for("the kept topic's local start to move", || {
        list_offset_of(&mut wire, "kept", -4).0 > end / 2
    });
    assert_eq!(list_offset_of(&mut wire, "kept", -2), (0, 0), "EARLIEST");
    assert_eq!(
        set_topic_config(&mut wire, "kept", "local.retention.bytes", "-3"),
        40,
        "INVALID_CONFIG"
    );
}

/// Without --tier-dir nothing is tiered: LATEST_TIERED is -1 and EARLIEST the local start.
#[test]
fn an_untiered_broker_answers_no_tiered_offset() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, TOPIC);
    let records = expected(base_timestamp());
    assert_eq!(
        produce(&mut wire, TOPIC, 0, batch(&records[..5])).error_code,
        0
    );
    assert_eq!(list_offset(&mut wire, -5), (-1, 0));
    assert_eq!(list_offset(&mut wire, -2), (0, 0));
    assert_eq!(list_offset(&mut wire, -4), (0, 0));
}

/// A bad tiering flag stops the broker before it starts: exit code 2 and a message naming the
/// flag, its value and the rule.
#[test]
fn a_bad_tiering_setting_is_refused_naming_the_flag() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let remote = remote.path().to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--tier-dir", remote, "--local-retention-ms", "-7"],
            "invalid --local-retention-ms \"-7\": must be -1 (no limit) or at least 0",
        ),
        (
            &["--local-retention-bytes", "100"],
            "invalid --local-retention-bytes \"100\": needs --tier-dir",
        ),
        (
            &["--tier-dir", remote, "--tier-prefix", "a//b"],
            "invalid --tier-prefix \"a//b\": an empty part",
        ),
        (
            &["--tier-dir", remote, "--tier-bytes-per-second", "0"],
            "invalid --tier-bytes-per-second \"0\": must be at least 1",
        ),
        (
            &["--tier-dir", remote, "--tier-url", "s3://b/p"],
            "invalid --tier-url \"s3://b/p\": cannot be given with --tier-dir",
        ),
        (
            &["--tier-url", "s3://b/p", "--tier-option", "region"],
            "invalid --tier-option \"region\": must be KEY=VALUE",
        ),
    ];
    for (flags, message) in cases {
        let out = Command::new(broker_bin())
            .arg("--data")
            .arg(data.path())
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
    // A store directory that cannot be one (a regular file): the broker does not start, and
    // says which directory and why.
    let file = data.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let out = Command::new(broker_bin())
        .arg("--data")
        .arg(data.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--tier-dir"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let named = format!("tiered storage: object store root {}", file.display());
    assert!(stderr.contains(&named), "{stderr}");
    // A store URL's option that its kind of store does not know, and a plain-HTTP endpoint
    // not allowed: refused before anything is sent, naming the option.
    let cases = [
        (
            "no_such_option=1",
            "object store option \"no_such_option\" for \"s3://b/p\"",
        ),
        (
            "endpoint=http://127.0.0.1:1",
            "object store option \"endpoint\" for \"s3://b/p\": http://127.0.0.1:1 is plain HTTP",
        ),
    ];
    for (option, message) in cases {
        let out = Command::new(broker_bin())
            .arg("--data")
            .arg(data.path().join("data"))
            .args(["--listen", "127.0.0.1:0", "--tier-url", "s3://b/p"])
            .args(["--tier-option", option])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{option}: {stderr}");
        assert!(stderr.contains(message), "{option}: {stderr}");
    }
}

#[test]
fn a_failing_object_store_is_logged_and_uploads_resume_once_it_is_back() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let root = remote.path().join("store");
    let broker = BrokerProcess::start(
        data.path(),
        &[
            "--segment-bytes",
            "4096",
            "--tier-dir",
            root.to_str().unwrap(),
            "--tier-interval-ms",
            "100",
            "--local-retention-bytes",
            "0",
        ],
    );
    // The store's directory becomes a file: every put fails.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, TOPIC);
    let records = expected(base_timestamp());
    for chunk in records.chunks(RECORDS_PER_BATCH as usize) {
        assert_eq!(produce(&mut wire, TOPIC, 0, batch(chunk)).error_code, 0);
    }
    let line = broker.wait_for_log(
        "tiered storage: the tiering job failed",
        Duration::from_secs(60),
    );
    assert_eq!(common::field(&line, "topic"), Some("\"tiered\""), "{line}");
    assert_eq!(common::field(&line, "partition"), Some("0"), "{line}");
    // Nothing local went while nothing was uploaded.
    assert_eq!(list_offset(&mut wire, -4), (0, 0), "local log start");
    // The store back: the job uploads and local retention moves the local start.
    std::fs::remove_file(&root).unwrap();
    std::fs::create_dir(&root).unwrap();
    wait_for("uploads after the store came back", || {
        list_offset(&mut wire, -4).0 > 0
    });
    assert_eq!(list_offset(&mut wire, -2), (0, 0), "EARLIEST");
}

/// One Fetch v11 of partition 0 of `topic` at `offset`: (error code, the log start offset the
/// response reports).
fn fetch_log_start(wire: &mut Wire, topic: &str, offset: i64) -> (i16, i64) {
    let mut response: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1500)])]),
    );
    let p = response.responses.remove(0).partitions.remove(0);
    (p.error_code, p.log_start_offset)
}

/// DeleteRecords v2 of partition 0 of `topic` to `offset`: (low watermark, error code).
fn delete_records(wire: &mut Wire, topic: &str, offset: i64) -> (i64, i16) {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
    let response: DeleteRecordsResponse = wire.call(
        ApiKey::DeleteRecords,
        2,
        &DeleteRecordsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(offset)])]),
    );
    let p = &response.topics[0].partitions[0];
    (p.low_watermark, p.error_code)
}

#[test]
fn delete_records_below_the_local_start_moves_the_partitions_start_across_tiers() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(
        data.path(),
        &[
            "--segment-bytes",
            "4096",
            "--tier-dir",
            remote.path().to_str().unwrap(),
            "--tier-interval-ms",
            "100",
            "--local-retention-bytes",
            "0",
        ],
    );
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, TOPIC);
    let records = expected(base_timestamp());
    for chunk in records.chunks(RECORDS_PER_BATCH as usize) {
        assert_eq!(produce(&mut wire, TOPIC, 0, batch(chunk)).error_code, 0);
    }
    let end = BATCHES * RECORDS_PER_BATCH;
    let local_start = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (local_start, _) = list_offset(&mut wire, -4);
            if local_start > end / 2 {
                break local_start;
            }
            assert!(Instant::now() < deadline, "local retention never ran");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(
        list_offset(&mut wire, -2),
        (0, 0),
        "EARLIEST: the remote start"
    );
    assert_eq!(fetch_log_start(&mut wire, TOPIC, 0), (0, 0));

    // Below the local start: only the manifest can hold it.
    let x = 12;
    assert_eq!(delete_records(&mut wire, TOPIC, x), (x, 0));
    assert_eq!(
        list_offset(&mut wire, -2),
        (x, 0),
        "EARLIEST: the new start"
    );
    assert_eq!(
        list_offset(&mut wire, -4),
        (local_start, 0),
        "EARLIEST_LOCAL"
    );
    assert_eq!(
        fetch_log_start(&mut wire, TOPIC, 0),
        (1, x),
        "below the start: OFFSET_OUT_OF_RANGE, with the new start"
    );
    assert_eq!(fetch_log_start(&mut wire, TOPIC, x - 1).0, 1);
    let (error, bytes, _) = fetch(&mut wire, x, 0);
    assert_eq!(error, 0);
    let (_, first) = BatchIter::new(&bytes).next().unwrap().unwrap();
    assert!(first.base_offset() <= x && x <= first.last_offset());
    assert_eq!(
        fetch_log_start(&mut wire, TOPIC, local_start),
        (0, x),
        "a fetch of the local log reports the partition's start, not the local one"
    );
    // By timestamp: nothing below the start is an answer.
    assert_eq!(list_offset(&mut wire, records[0].1), (x, 0));
    assert_eq!(
        delete_records(&mut wire, TOPIC, 3),
        (x, 0),
        "lower: nothing changes"
    );

    // A SIGKILL and a restart report the same start.
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(list_offset(&mut wire, -2), (x, 0));
    assert_eq!(fetch_log_start(&mut wire, TOPIC, 0), (1, x));
    assert_eq!(fetch_log_start(&mut wire, TOPIC, local_start), (0, x));

    // At or above the local start: both starts move.
    let y = local_start + 2;
    assert_eq!(delete_records(&mut wire, TOPIC, y), (y, 0));
    assert_eq!(list_offset(&mut wire, -2), (y, 0));
    assert_eq!(list_offset(&mut wire, -4), (y, 0));
    assert_eq!(fetch_log_start(&mut wire, TOPIC, x), (1, y));
}

/// The log start offset a Fetch v11 of partition 0 of `topic` at `offset` answers.
fn fetched_log_start(wire: &mut Wire, topic: &str, offset: i64) -> i64 {
    let mut response: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1500)])]),
    );
    let p = response.responses.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    p.log_start_offset
}

#[test]
fn fetches_report_the_start_remote_retention_moved() {
    let data = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        data.path(),
        &[
            "--segment-bytes",
            "4096",
            "--tier-dir",
            remote.path().to_str().unwrap(),
            "--tier-interval-ms",
            "100",
            "--local-retention-bytes",
            "0",
        ],
    );
    let mut wire = Wire::connect(broker.addr);
    // Total retention of about three segments: the oldest remote segments go.
    assert_eq!(
        create_with(&mut wire, "expiring", &[("retention.bytes", "12000")]),
        0
    );
    let records = expected(base_timestamp());
    for chunk in records.chunks(RECORDS_PER_BATCH as usize) {
        assert_eq!(
            produce(&mut wire, "expiring", 0, batch(chunk)).error_code,
            0
        );
    }
    let end = BATCHES * RECORDS_PER_BATCH;
    // Fetches (and EARLIEST_LOCAL, which reads no manifest) only: ListOffsets EARLIEST reads
    // the manifest afresh. Within a tick of the job's run, the start a fetch reports is the
    // remote one, below the local start.
    let mut start = 0;
    wait_for("fetches reporting the start across tiers", || {
        let (local, error) = list_offset_of(&mut wire, "expiring", -4);
        assert_eq!(error, 0);
        start = fetched_log_start(&mut wire, "expiring", end);
        0 < start && start < local
    });
    // The job goes on removing while the test reads: EARLIEST is that start or later.
    let (earliest, error) = list_offset_of(&mut wire, "expiring", -2);
    assert!(
        error == 0 && earliest >= start,
        "EARLIEST {earliest}, fetched {start}"
    );
}
