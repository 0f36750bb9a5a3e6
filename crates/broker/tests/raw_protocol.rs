//! The broker over a raw TCP connection, with kafka-protocol's generated request and response
//! types: version negotiation, Kafka's error codes, malformed frames, acks=0, the long poll,
//! offsets by time, topic ids and producer ids across a crash.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use oncelog::format::BatchBuilder;
use uuid::Uuid;

use common::wire::topic_name as name;

/// A batch of `n` records from producer (id, epoch) starting at `sequence`, timestamps `ts..`.
fn batch(producer: Option<(i64, i16)>, sequence: i32, n: usize, ts: i64) -> Bytes {
    // Leader epoch 0 is what the log stamps: a stored batch then equals the one sent.
    let mut builder = BatchBuilder::new().partition_leader_epoch(0);
    if let Some((id, epoch)) = producer {
        builder = builder.producer(id, epoch, sequence);
    }
    for i in 0..n {
        builder.append(ts + i as i64, None, Some(format!("v{i}").as_bytes()), &[]);
    }
    Bytes::from(builder.build().unwrap())
}

fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

fn produce(
    wire: &mut Wire,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> PartitionProduceResponse {
    let response: ProduceResponse = wire.call(
        ApiKey::Produce,
        9,
        &produce_request(topic, partition, records, -1),
    );
    response.responses[0].partition_responses[0].clone()
}

/// Creates `topic` through Metadata (auto-creation) and returns its id.
fn create_topic(wire: &mut Wire, topic: &str) -> Uuid {
    let t = common::wire::auto_create_topic(wire, topic);
    assert_eq!(t.error_code, 0);
    assert_eq!(t.partitions.len(), 1);
    t.topic_id
}

fn init_producer(wire: &mut Wire, held: Option<(i64, i16)>) -> InitProducerIdResponse {
    let (id, epoch) = held.unwrap_or((-1, -1));
    wire.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch),
    )
}

fn list_offset(wire: &mut Wire, topic: &str, timestamp: i64) -> (i64, i64) {
    let response: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(timestamp)
                ])]),
    );
    let p = &response.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (p.offset, p.timestamp)
}

fn fetch_request(
    version: i16,
    topic: &str,
    id: Uuid,
    offset: i64,
    max_wait_ms: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(if version <= 12 {
                name(topic)
            } else {
                TopicName::default()
            })
            .with_topic_id(if version >= 13 { id } else { Uuid::nil() })
            .with_partitions(vec![FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

#[test]
fn api_versions_lists_every_api_and_a_newer_version_gets_error_35_in_a_v0_body() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    let response: ApiVersionsResponse = wire.call(
        ApiKey::ApiVersions,
        4,
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("raw"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    );
    assert_eq!(response.error_code, 0);
    let range = |key: ApiKey| common::wire::advertised(&response, key);
    // Produce from v3 and Fetch from v4: clients then send and expect magic-2 batches only.
    assert_eq!(range(ApiKey::Produce).map(|r| r.0), Some(3));
    assert_eq!(range(ApiKey::Fetch).map(|r| r.0), Some(4));
    for key in [
        ApiKey::Metadata,
        ApiKey::InitProducerId,
        ApiKey::ListOffsets,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
    ] {
        assert!(range(key).is_some(), "{key:?} advertised");
    }
    // Transactions of both versions: KIP-890's EndTxn v5 and AddPartitionsToTxn v4 too
    // (tests/txn_v2.rs).
    assert_eq!(range(ApiKey::EndTxn), Some((0, 5)));
    assert_eq!(range(ApiKey::AddPartitionsToTxn), Some((0, 4)));

    // A version newer than the broker's: the body of v4 under a v5 header, as a newer client
    // would send it.
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(5)
        .with_correlation_id(77)
        .with_client_id(Some(StrBytes::from_static_str("future")))
        .encode(&mut frame, 2)
        .unwrap();
    ApiVersionsRequest::default().encode(&mut frame, 4).unwrap();
    wire.send_frame(&frame);
    let (correlation_id, old): (i32, ApiVersionsResponse) = wire.receive_with_header(0, 0);
    assert_eq!(correlation_id, 77);
    assert_eq!(old.error_code, 35, "UNSUPPORTED_VERSION");
    assert_eq!(
        old.api_keys, response.api_keys,
        "the supported ranges, in a v0 body"
    );
}

#[test]
fn a_malformed_request_closes_only_its_connection_and_appends_nothing() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut good = Wire::connect(broker.addr);
    create_topic(&mut good, "t");
    assert_eq!(
        produce(&mut good, "t", 0, batch(None, 0, 2, 1000)).error_code,
        0
    );

    // A produce request whose frame ends early: its batch is whole, the request is not.
    let mut cut = Wire::connect(broker.addr);
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(9)
        .with_correlation_id(1)
        .encode(&mut frame, ApiKey::Produce.request_header_version(9))
        .unwrap();
    produce_request("t", 0, batch(None, 0, 3, 2000), -1)
        .encode(&mut frame, 9)
        .unwrap();
    cut.send_frame(&frame[..frame.len() - 3]);
    assert!(
        cut.is_closed_by_broker(),
        "a truncated request closes the connection"
    );
    broker.wait_for_log(&cut.local_addr().to_string(), Duration::from_secs(10));

    // An unknown API key; a negative frame size; a frame too short for a header.
    let mut garbage = Wire::connect(broker.addr);
    garbage.send_frame(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0xde, 0xad]);
    assert!(garbage.is_closed_by_broker());
    let mut negative = Wire::connect(broker.addr);
    std::io::Write::write_all(&mut negative.stream, &(-5i32).to_be_bytes()).unwrap();
    assert!(negative.is_closed_by_broker());
    let mut short = Wire::connect(broker.addr);
    short.send_frame(&[0, 3]);
    assert!(short.is_closed_by_broker());
    for w in [&garbage, &negative, &short] {
        broker.wait_for_log(&w.local_addr().to_string(), Duration::from_secs(10));
    }

    // The other connection is untouched, and nothing of the broken requests was appended.
    assert_eq!(list_offset(&mut good, "t", -1).0, 2);
    assert_eq!(
        produce(&mut good, "t", 0, batch(None, 0, 1, 3000)).base_offset,
        2
    );
}

#[test]
fn refused_batches_get_kafkas_error_codes_and_a_duplicate_its_original_offset() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &["--max-message-bytes", "2000"]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    let p = init_producer(&mut wire, None);
    assert_eq!(p.error_code, 0);
    let me = Some((p.producer_id.0, p.producer_epoch));

    let first = batch(me, 0, 5, 1000);
    assert_eq!(produce(&mut wire, "t", 0, first.clone()).base_offset, 0);
    assert_eq!(
        produce(&mut wire, "t", 0, batch(me, 5, 5, 1000)).base_offset,
        5
    );
    // The retry of the first batch: no error, its original base offset, nothing written.
    let retry = produce(&mut wire, "t", 0, first);
    assert_eq!((retry.error_code, retry.base_offset), (0, 0));
    assert_eq!(list_offset(&mut wire, "t", -1).0, 10);
    let logged = broker.wait_for_log("duplicate batch", Duration::from_secs(10));
    assert!(logged.contains("first_offset=0"), "{logged}");

    let code = |wire: &mut Wire, topic: &str, partition: i32, records: Bytes| {
        produce(wire, topic, partition, records).error_code
    };
    assert_eq!(
        code(&mut wire, "t", 0, batch(me, 12, 1, 1000)),
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    let mut corrupt = batch(me, 10, 1, 1000).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    assert_eq!(
        code(&mut wire, "t", 0, Bytes::from(corrupt)),
        2,
        "CORRUPT_MESSAGE"
    );
    let big = batch(me, 10, 300, 1000);
    assert!(big.len() > 2000);
    assert_eq!(code(&mut wire, "t", 0, big), 10, "MESSAGE_TOO_LARGE");
    let mut two = batch(me, 10, 1, 1000).to_vec();
    two.extend_from_slice(&batch(me, 11, 1, 1000));
    assert_eq!(
        code(&mut wire, "t", 0, Bytes::from(two)),
        87,
        "INVALID_RECORD: one batch per partition"
    );
    let mut offset_set = batch(me, 10, 1, 1000).to_vec();
    offset_set[7] = 9; // baseOffset must be 0 from a client
    assert_eq!(
        code(&mut wire, "t", 0, Bytes::from(offset_set)),
        87,
        "INVALID_RECORD"
    );
    assert_eq!(
        code(&mut wire, "nope", 0, batch(None, 0, 1, 1)),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(
        code(&mut wire, "t", 4, batch(None, 0, 1, 1)),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );

    // The producer bumps its epoch (KIP-360): the old epoch is fenced.
    let bumped = init_producer(&mut wire, me);
    assert_eq!(
        (bumped.error_code, bumped.producer_id, bumped.producer_epoch),
        (0, p.producer_id, p.producer_epoch + 1)
    );
    let new_epoch = Some((p.producer_id.0, bumped.producer_epoch));
    assert_eq!(
        produce(&mut wire, "t", 0, batch(new_epoch, 0, 1, 1000)).base_offset,
        10
    );
    assert_eq!(
        code(&mut wire, "t", 0, batch(me, 10, 1, 1000)),
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    // The same bump again (as after a lost answer) gets the same epoch, not a second bump;
    // once the producer moved on, a bump from the fenced epoch is refused.
    assert_eq!(
        init_producer(&mut wire, me).producer_epoch,
        bumped.producer_epoch
    );
    let again = init_producer(&mut wire, new_epoch);
    assert_eq!(again.producer_epoch, bumped.producer_epoch + 1);
    assert_eq!(init_producer(&mut wire, me).error_code, 47);
    assert_eq!(
        list_offset(&mut wire, "t", -1).0,
        11,
        "no refused batch was written"
    );
}

#[test]
fn acks_zero_gets_no_answer_and_a_refused_batch_closes_the_connection() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    wire.send(
        ApiKey::Produce,
        9,
        &produce_request("t", 0, batch(None, 0, 2, 1), 0),
    );
    // The next answer on the connection is the next request's.
    let id = wire.send(ApiKey::Metadata, 12, &MetadataRequest::default());
    let (got, _): (i32, MetadataResponse) = wire.receive(12);
    assert_eq!(got, id);
    assert_eq!(
        list_offset(&mut wire, "t", -1).0,
        2,
        "the acks=0 batch was appended"
    );

    let mut corrupt = batch(None, 0, 1, 1).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    wire.send(
        ApiKey::Produce,
        9,
        &produce_request("t", 0, Bytes::from(corrupt), 0),
    );
    assert!(
        wire.is_closed_by_broker(),
        "closing is how acks=0 reports an error"
    );
}

#[test]
fn a_long_poll_fetch_is_woken_by_an_append() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut producer = Wire::connect(broker.addr);
    let id = create_topic(&mut producer, "t");
    let mut consumer = Wire::connect(broker.addr);

    // Nothing to read and a short wait: an empty answer once the wait is over.
    let empty: FetchResponse =
        consumer.call(ApiKey::Fetch, 12, &fetch_request(12, "t", id, 0, 100));
    let p = &empty.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 0));
    assert_eq!(p.records.as_ref().map_or(0, |r| r.len()), 0);

    // A wait far longer than the test's read timeout (30 s): only the append can end it.
    let sent = consumer.send(ApiKey::Fetch, 12, &fetch_request(12, "t", id, 0, 600_000));
    std::thread::sleep(Duration::from_millis(200));
    let records = batch(None, 0, 3, 5);
    assert_eq!(
        produce(&mut producer, "t", 0, records.clone()).error_code,
        0
    );
    let (got, woken): (i32, FetchResponse) = consumer.receive(12);
    assert_eq!(got, sent);
    let p = &woken.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 3);
    let fetched = p.records.clone().unwrap();
    // The stored batch is the client's, with only its base offset (0 here) and leader epoch
    // set by the log.
    assert_eq!(fetched, records);

    // From v13 the topic is named by id; an unknown id is refused.
    let by_id: FetchResponse = consumer.call(ApiKey::Fetch, 16, &fetch_request(16, "t", id, 1, 0));
    assert_eq!(by_id.responses[0].topic_id, id);
    assert_eq!(
        by_id.responses[0].partitions[0].records.clone().unwrap(),
        records
    );
    let unknown: FetchResponse = consumer.call(
        ApiKey::Fetch,
        16,
        &fetch_request(16, "t", Uuid::new_v4(), 0, 0),
    );
    assert_eq!(
        unknown.responses[0].partitions[0].error_code, 100,
        "UNKNOWN_TOPIC_ID"
    );
    let out_of_range: FetchResponse =
        consumer.call(ApiKey::Fetch, 12, &fetch_request(12, "t", id, 99, 0));
    assert_eq!(
        out_of_range.responses[0].partitions[0].error_code, 1,
        "OFFSET_OUT_OF_RANGE"
    );
}

#[test]
fn list_offsets_answers_earliest_latest_max_and_by_timestamp() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    assert_eq!(
        list_offset(&mut wire, "t", 1000),
        (-1, -1),
        "nothing at or after the time"
    );
    for (i, ts) in [1000, 2000, 3000].into_iter().enumerate() {
        assert_eq!(
            produce(&mut wire, "t", 0, batch(None, 0, 2, ts)).base_offset,
            2 * i as i64
        );
    }
    assert_eq!(list_offset(&mut wire, "t", -2).0, 0, "earliest");
    assert_eq!(list_offset(&mut wire, "t", -1).0, 6, "latest");
    assert_eq!(list_offset(&mut wire, "t", 2000), (2, 2000));
    assert_eq!(
        list_offset(&mut wire, "t", 2001),
        (3, 2001),
        "the first record at or after"
    );
    assert_eq!(list_offset(&mut wire, "t", 9999), (-1, -1));
    assert_eq!(
        list_offset(&mut wire, "t", -3),
        (5, 3001),
        "the record with the largest timestamp"
    );
}

#[test]
fn topic_ids_and_producer_ids_survive_a_crash() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    let id = create_topic(&mut wire, "t");
    let first = init_producer(&mut wire, None).producer_id.0;
    let second = init_producer(&mut wire, None).producer_id.0;
    assert_ne!(first, second);
    broker.crash();

    let text = std::fs::read_to_string(data.path().join("t-0/partition.metadata")).unwrap();
    assert!(
        text.starts_with("version: 0\ntopic_id: "),
        "Kafka's format: {text:?}"
    );
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        create_topic(&mut wire, "t"),
        id,
        "the same topic id after the crash"
    );
    let after = init_producer(&mut wire, None).producer_id.0;
    assert!(
        after > second,
        "ids are never handed out twice: {after} after {second}"
    );
}

/// One acks=all Produce v9 with a batch of `records(p)` records for each partition `0..count`
/// of `topic`: each partition's (index, error code, base offset).
fn produce_to_partitions(
    wire: &mut Wire,
    topic: &str,
    count: i32,
    records: impl Fn(i32) -> usize,
) -> Vec<(i32, i16, i64)> {
    let partitions: Vec<_> = (0..count)
        .map(|p| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch(None, 0, records(p), 100)))
        })
        .collect();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(partitions)]);
    let answer: ProduceResponse = wire.call(ApiKey::Produce, 9, &request);
    answer.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code, p.base_offset))
        .collect()
}

/// One Fetch v12 of partitions `0..count` of `topic` from offset 0: each one's high watermark.
fn high_watermarks(wire: &mut Wire, topic: &str, id: Uuid, count: i32) -> Vec<i64> {
    let mut fetch = fetch_request(12, topic, id, 0, 0);
    fetch.topics[0].partitions = (0..count)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let fetched: FetchResponse = wire.call(ApiKey::Fetch, 12, &fetch);
    fetched.responses[0]
        .partitions
        .iter()
        .map(|p| p.high_watermark)
        .collect()
}

#[test]
fn one_produce_request_appends_to_several_partitions_and_one_fetch_reads_them() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &["--partitions", "3"]);
    let mut wire = Wire::connect(broker.addr);
    let response: MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("t")))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(response.topics[0].partitions.len(), 3, "--partitions 3");
    let id = response.topics[0].topic_id;

    let codes = produce_to_partitions(&mut wire, "t", 4, |p| p as usize + 1);
    assert_eq!(codes, vec![(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 3, -1)]);

    let ends = high_watermarks(&mut wire, "t", id, 3);
    assert_eq!(ends, vec![1, 2, 3], "each partition got its own batch");
}

fn join(wire: &mut Wire, group: &str, member: &str, session_ms: i32) -> JoinGroupResponse {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    wire.call(
        ApiKey::JoinGroup,
        5,
        &JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_session_timeout_ms(session_ms)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(Bytes::from_static(b"subscription"))]),
    )
}

fn commit(wire: &mut Wire, group: &str, member: &str, generation: i32, topic: &str) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let response: OffsetCommitResponse = wire.call(
        ApiKey::OffsetCommit,
        7,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(5)])]),
    );
    response.topics[0].partitions[0].error_code
}

fn fetch_committed(wire: &mut Wire, group: &str, topic: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let response: OffsetFetchResponse = wire.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![0])])),
    );
    response.topics[0].partitions[0].committed_offset
}

/// The group protocol's refusals, each with Kafka's code, and a refused commit stores nothing.
#[test]
fn group_requests_outside_the_rules_get_kafkas_codes_and_change_nothing() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    // A session timeout outside 6 s ..= 30 min: INVALID_SESSION_TIMEOUT (26).
    assert_eq!(join(&mut wire, "g", "", 100).error_code, 26);
    // A member id the group never gave: UNKNOWN_MEMBER_ID (25).
    assert_eq!(join(&mut wire, "g", "stranger", 10_000).error_code, 25);
    // The first member joins (after the initial delay) and leads generation 1.
    let joined = join(&mut wire, "g", "", 10_000);
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.members.len(), 1);
    let me = joined.member_id.to_string();
    let heartbeat = |wire: &mut Wire, member: &str, generation: i32| -> i16 {
        let r: HeartbeatResponse = wire.call(
            ApiKey::Heartbeat,
            3,
            &HeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(member.to_string())),
        );
        r.error_code
    };
    // A wrong generation: ILLEGAL_GENERATION (22); an unknown member: 25.
    assert_eq!(heartbeat(&mut wire, &me, 7), 22);
    assert_eq!(heartbeat(&mut wire, "stranger", 1), 25);
    // Before the leader's SyncGroup, a commit is refused: REBALANCE_IN_PROGRESS (27).
    assert_eq!(commit(&mut wire, "g", &me, 1, "t"), 27);
    let synced: SyncGroupResponse = wire.call(
        ApiKey::SyncGroup,
        3,
        &SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_string(me.clone()))
            .with_assignments(vec![
                kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(me.clone()))
                    .with_assignment(Bytes::from_static(b"t-0")),
            ]),
    );
    assert_eq!(synced.error_code, 0);
    assert_eq!(
        &synced.assignment[..],
        b"t-0",
        "the leader's assignment, relayed"
    );
    assert_eq!(heartbeat(&mut wire, &me, 1), 0);
    // Commits: another generation (22), a stranger (25), an outsider while the group has
    // members (25), an unknown topic (3): none is stored.
    assert_eq!(commit(&mut wire, "g", &me, 2, "t"), 22);
    assert_eq!(commit(&mut wire, "g", "stranger", 1, "t"), 25);
    assert_eq!(commit(&mut wire, "g", "", -1, "t"), 25);
    assert_eq!(commit(&mut wire, "g", &me, 1, "nope"), 3);
    assert_eq!(fetch_committed(&mut wire, "g", "t"), -1, "nothing stored");
    assert_eq!(commit(&mut wire, "g", &me, 1, "t"), 0);
    assert_eq!(fetch_committed(&mut wire, "g", "t"), 5);
    // The member leaves; an outsider may commit again (an empty group).
    let left: LeaveGroupResponse = wire.call(
        ApiKey::LeaveGroup,
        1,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_member_id(StrBytes::from_string(me.clone())),
    );
    assert_eq!(left.error_code, 0);
    assert_eq!(heartbeat(&mut wire, &me, 1), 25, "gone");
    // A topic named like the offsets log is not created: Metadata describes the broker's own
    // log as Kafka describes `__consumer_offsets`, an internal topic; the log is not served as
    // a topic.
    let metadata: MetadataResponse = wire.call(
        ApiKey::Metadata,
        9,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("__consumer_offsets")))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(metadata.topics[0].error_code, 0);
    assert!(metadata.topics[0].is_internal, "an internal topic");
    assert!(
        !data.path().join("__consumer_offsets-0").exists(),
        "no user topic made of the name"
    );
    let offsets: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("__consumer_offsets"))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(-1)
                ])]),
    );
    assert_eq!(offsets.topics[0].partitions[0].error_code, 3, "not served");
    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        fetch_committed(&mut wire, "g", "t"),
        5,
        "the commit survived a SIGKILL"
    );
}

fn init_txn(wire: &mut Wire, id: &str, timeout_ms: i32) -> InitProducerIdResponse {
    wire.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.to_string()))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
}

fn add_partition(wire: &mut Wire, id: &str, pid: i64, epoch: i16, topic: &str) -> i16 {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    let r: AddPartitionsToTxnResponse = wire.call(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                id.to_string(),
            )))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![0])]),
    );
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end_txn(wire: &mut Wire, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let r: EndTxnResponse = wire.call(
        ApiKey::EndTxn,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit),
    );
    r.error_code
}

/// The coordinator's refusals, each with Kafka's code; a refused request changes nothing.
#[test]
fn transactional_requests_outside_the_rules_get_kafkas_codes() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "t");
    // A timeout past transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT (50).
    assert_eq!(init_txn(&mut wire, "x", 900_001).error_code, 50);
    let first = init_txn(&mut wire, "x", 10_000);
    assert_eq!(first.error_code, 0);
    let (pid, epoch) = (first.producer_id.0, first.producer_epoch);
    // An unknown transactional id, or another producer id: INVALID_PRODUCER_ID_MAPPING (49).
    assert_eq!(add_partition(&mut wire, "nobody", pid, epoch, "t"), 49);
    assert_eq!(add_partition(&mut wire, "x", pid + 1000, epoch, "t"), 49);
    // An unknown partition: 3. Ending a transaction that has nothing: INVALID_TXN_STATE (48).
    assert_eq!(add_partition(&mut wire, "x", pid, epoch, "nope"), 3);
    assert_eq!(end_txn(&mut wire, "x", pid, epoch, true), 48);
    assert_eq!(add_partition(&mut wire, "x", pid, epoch, "t"), 0);
    // A new init bumps the epoch: the old one is fenced (PRODUCER_FENCED, 90, at v3).
    let second = init_txn(&mut wire, "x", 10_000);
    assert_eq!(second.producer_id.0, pid, "the same id");
    assert_eq!(second.producer_epoch, epoch + 1, "a bumped epoch");
    assert_eq!(end_txn(&mut wire, "x", pid, epoch, true), 90);
    assert_eq!(add_partition(&mut wire, "x", pid, epoch, "t"), 90);
    // The open transaction was aborted by the new init: nothing to end.
    assert_eq!(
        end_txn(&mut wire, "x", pid, second.producer_epoch, false),
        48
    );
    assert_eq!(
        add_partition(&mut wire, "x", pid, second.producer_epoch, "t"),
        0
    );
    assert_eq!(end_txn(&mut wire, "x", pid, second.producer_epoch, true), 0);
}

#[test]
fn a_batch_damaged_on_disk_is_answered_with_a_storage_error_and_its_partition_goes_offline() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--segment-bytes", "4096"]);
    let mut wire = Wire::connect(broker.addr);
    let damaged = create_topic(&mut wire, "damaged");
    let intact = create_topic(&mut wire, "intact");
    for topic in ["damaged", "intact"] {
        for n in 0..40 {
            let p = produce(&mut wire, topic, 0, batch(None, 0, 5, 1000 + n));
            assert_eq!(p.error_code, 0);
        }
    }
    assert_eq!(broker.terminate().code(), Some(0), "a clean shutdown");
    // One payload byte of the first batch of the first (sealed) segment.
    let segment = data.path().join("damaged-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    let first = oncelog::format::RecordBatch::parse(&bytes).unwrap().size();
    let segments = std::fs::read_dir(data.path().join("damaged-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(segments >= 2, "the first segment is sealed");
    bytes[first - 3] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();

    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    let fetch = |wire: &mut Wire, topic: &str, id: Uuid, offset: i64| {
        let response: FetchResponse =
            wire.call(ApiKey::Fetch, 12, &fetch_request(12, topic, id, offset, 0));
        response.responses[0].partitions[0].clone()
    };
    let refused = fetch(&mut wire, "damaged", damaged, 0);
    assert_eq!(refused.error_code, 56, "KAFKA_STORAGE_ERROR");
    assert!(
        refused.records.as_ref().is_none_or(|r| r.is_empty()),
        "nothing served"
    );
    // Offline: later offsets and produce are refused too, until the broker reopens it.
    assert_eq!(fetch(&mut wire, "damaged", damaged, 150).error_code, 56);
    let p = produce(&mut wire, "damaged", 0, batch(None, 0, 1, 5000));
    assert_eq!(p.error_code, 56);
    // The other topic is served whole.
    let served = fetch(&mut wire, "intact", intact, 0);
    assert_eq!(served.error_code, 0);
    assert!(!served.records.unwrap().is_empty());
    assert_eq!(
        produce(&mut wire, "intact", 0, batch(None, 0, 1, 5000)).error_code,
        0
    );
    broker.wait_for_log("partition taken offline", Duration::from_secs(10));
}

/// Threads of process `pid` named as the log manager's sync pool names its threads.
fn sync_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "oncelog-sync")
        .count()
}

#[test]
fn an_acks_all_produce_over_many_partitions_is_answered_after_their_syncs_issued_together() {
    const PARTITIONS: i32 = 64;
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--partitions", "64"]);
    let mut wire = Wire::connect(broker.addr);
    let created = common::wire::auto_create_topic(&mut wire, "many");
    assert_eq!(created.partitions.len(), PARTITIONS as usize);
    assert_eq!(sync_threads(broker.pid()), 0, "nothing synced yet");
    let codes = produce_to_partitions(&mut wire, "many", PARTITIONS, |p| 1 + p as usize % 3);
    assert_eq!(
        codes,
        (0..PARTITIONS).map(|p| (p, 0, 0)).collect::<Vec<_>>()
    );
    // The 64 syncs were issued by the log manager's pool (LogManager::flush_many), not one
    // partition after another on the request's task.
    let pool = sync_threads(broker.pid());
    assert!((1..=16).contains(&pool), "{pool} sync threads");

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    let ends = high_watermarks(&mut wire, "many", created.topic_id, PARTITIONS);
    let expected: Vec<i64> = (0..PARTITIONS).map(|p| 1 + p as i64 % 3).collect();
    assert_eq!(
        ends, expected,
        "every acknowledged batch is back after the crash"
    );
}
