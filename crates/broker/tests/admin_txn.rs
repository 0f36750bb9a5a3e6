//! The transaction tooling of KIP-664 over a raw connection, with kafka-protocol's generated
//! types: DescribeProducers (the engine's producer-state table), ListTransactions and
//! DescribeTransactions (the transaction coordinator), and WriteTxnMarkers, which aborts a
//! hanging transaction so the last stable offset moves, as `kafka-transactions abort` does.
//! Every answer and every refusal with Kafka's codes, and the state surviving a SIGKILL.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState};
use kafka_protocol::messages::describe_transactions_response::TransactionState as Described;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::write_txn_markers_response::WritableTxnMarkerResult;
use kafka_protocol::messages::*;

use common::txn::{add_partitions, batch, fetch_committed, init_txn, TS};
use common::wire::{create_topic, str_bytes as s, topic_name as name};

// Kafka's error codes.
const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const KAFKA_STORAGE_ERROR: i16 = 56;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn start() -> (tempfile::TempDir, BrokerProcess, Wire) {
    common::start_connected(&["--partitions", "2"])
}

/// Produces `records` to `topic`-`partition` (acks=all); returns the base offset.
fn produce(wire: &mut Wire, topic: &str, partition: i32, records: Bytes) -> i64 {
    let p = common::wire::produce(wire, topic, partition, records);
    assert_eq!(p.error_code, NONE);
    p.base_offset
}

/// An idempotent producer id (no transactional id: no coordinator state).
fn idempotent_producer(wire: &mut Wire) -> (i64, i16) {
    let r: InitProducerIdResponse = wire.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    );
    assert_eq!(r.error_code, NONE);
    (r.producer_id.0, r.producer_epoch)
}

/// EndTxn v3, which must succeed.
fn end_txn(wire: &mut Wire, id: &str, txn: (i64, i16), commit: bool) {
    assert_eq!(common::txn::end_txn(wire, 3, id, txn, commit).0, NONE);
}

/// DescribeProducers of `topic` and `partitions`: the per-partition answers.
fn describe_producers(wire: &mut Wire, topic: &str, partitions: &[i32]) -> Vec<PartitionResponse> {
    let mut r: DescribeProducersResponse = wire.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(name(topic))
            .with_partition_indexes(partitions.to_vec())]),
    );
    assert_eq!(r.topics.len(), 1);
    assert_eq!(r.topics[0].name.0.as_str(), topic);
    r.topics.remove(0).partitions
}

/// The producers of `topic`-`partition`, which must be answered without error.
fn producers(wire: &mut Wire, topic: &str, partition: i32) -> Vec<ProducerState> {
    let p = describe_producers(wire, topic, &[partition]).remove(0);
    assert_eq!((p.partition_index, p.error_code), (partition, NONE));
    p.active_producers
}

/// (producer id, epoch, last sequence, last timestamp, coordinator epoch, txn start offset).
fn fields(p: &ProducerState) -> (i64, i32, i32, i64, i32, i64) {
    (
        p.producer_id.0,
        p.producer_epoch,
        p.last_sequence,
        p.last_timestamp,
        p.coordinator_epoch,
        p.current_txn_start_offset,
    )
}

fn list_transactions(
    wire: &mut Wire,
    version: i16,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let r: ListTransactionsResponse = wire.call(ApiKey::ListTransactions, version, &req);
    assert_eq!(r.error_code, NONE);
    r
}

/// (transactional id, producer id, state) of each listed transaction, in id order.
fn listed(r: &ListTransactionsResponse) -> Vec<(String, i64, String)> {
    let mut out: Vec<_> = r
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn describe_transactions(wire: &mut Wire, ids: &[&str]) -> Vec<Described> {
    let r: DescribeTransactionsResponse = wire.call(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(ids.iter().map(|id| TransactionalId(s(id))).collect()),
    );
    assert_eq!(r.transaction_states.len(), ids.len());
    r.transaction_states
}

/// An ABORT (or COMMIT) marker request for one producer.
fn marker(
    pid: i64,
    epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    topics: &[(&str, &[i32])],
) -> WritableTxnMarker {
    WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_topics(
            topics
                .iter()
                .map(|(t, parts)| {
                    WritableTxnMarkerTopic::default()
                        .with_name(name(t))
                        .with_partition_indexes(parts.to_vec())
                })
                .collect(),
        )
}

fn write_markers(wire: &mut Wire, markers: Vec<WritableTxnMarker>) -> Vec<WritableTxnMarkerResult> {
    let r: WriteTxnMarkersResponse = wire.call(
        ApiKey::WriteTxnMarkers,
        1,
        &WriteTxnMarkersRequest::default().with_markers(markers),
    );
    r.markers
}

/// (producer id, topic, partition, error) of every result, in response order.
fn marker_errors(results: &[WritableTxnMarkerResult]) -> Vec<(i64, String, i32, i16)> {
    results
        .iter()
        .flat_map(|m| {
            m.topics.iter().flat_map(move |t| {
                t.partitions.iter().map(move |p| {
                    (
                        m.producer_id.0,
                        t.name.0.to_string(),
                        p.partition_index,
                        p.error_code,
                    )
                })
            })
        })
        .collect()
}

#[test]
fn the_transaction_tools_are_advertised_at_the_versions_they_fill_and_no_newer_one_is_answered() {
    let (_dir, broker, mut wire) = start();
    let r: ApiVersionsResponse = wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let range = |key: ApiKey| common::wire::advertised(&r, key);
    assert_eq!(range(ApiKey::WriteTxnMarkers), Some((1, 1)));
    assert_eq!(range(ApiKey::DescribeProducers), Some((0, 0)));
    assert_eq!(range(ApiKey::DescribeTransactions), Some((0, 0)));
    assert_eq!(
        range(ApiKey::ListTransactions),
        Some((0, 1)),
        "v2's transactional-id pattern is not answered"
    );
    // A version not advertised closes the connection, as for every API.
    wire.send(
        ApiKey::ListTransactions,
        2,
        &ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("tx.*"))),
    );
    assert!(wire.is_closed_by_broker());
    let mut other = Wire::connect(broker.addr);
    list_transactions(&mut other, 0, ListTransactionsRequest::default());
}

#[test]
fn describe_producers_answers_every_producer_of_the_engines_table() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "p");
    assert!(producers(&mut wire, "p", 0).is_empty(), "no producer yet");

    // An idempotent producer: three records, then two.
    let (idem, idem_epoch) = idempotent_producer(&mut wire);
    produce(&mut wire, "p", 0, batch(idem, idem_epoch, 0, 3, false));
    produce(&mut wire, "p", 0, batch(idem, idem_epoch, 3, 2, false));
    // A transactional producer with its coordinator: its transaction starts at offset 5.
    let txn = init_txn(&mut wire, 4, "dp-tx", 60_000);
    add_partitions(&mut wire, "dp-tx", txn, "p", &[0]);
    assert_eq!(
        produce(&mut wire, "p", 0, batch(txn.0, txn.1, 0, 4, true)),
        5
    );

    let mut all = producers(&mut wire, "p", 0);
    all.sort_by_key(|p| p.producer_id.0);
    let mut expected = vec![
        // (id, epoch, last sequence, last timestamp, coordinator epoch, txn start offset)
        (idem, i32::from(idem_epoch), 4, TS + 1, -1, -1),
        (txn.0, i32::from(txn.1), 3, TS + 3, -1, 5),
    ];
    expected.sort();
    assert_eq!(all.iter().map(fields).collect::<Vec<_>>(), expected);
    assert!(
        producers(&mut wire, "p", 1).is_empty(),
        "partition 1 has its own table"
    );

    // The commit's marker ends the transaction and stamps the coordinator epoch (0).
    end_txn(&mut wire, "dp-tx", txn, true);
    let after = producers(&mut wire, "p", 0);
    let t = after.iter().find(|p| p.producer_id.0 == txn.0).unwrap();
    assert_eq!((t.current_txn_start_offset, t.coordinator_epoch), (-1, 0));
    assert_eq!(t.last_sequence, 3, "a marker has no sequence");
    assert!(
        t.last_timestamp >= now_ms() - 60_000,
        "a marker's timestamp is its append time"
    );
}

#[test]
fn describe_producers_refuses_unknown_and_invalid_topics_and_partitions_with_kafkas_codes() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "known");
    let r: DescribeProducersResponse = wire.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default()
                .with_name(name("absent"))
                .with_partition_indexes(vec![0, 1]),
            TopicRequest::default()
                .with_name(name("bad/name"))
                .with_partition_indexes(vec![0]),
            TopicRequest::default()
                .with_name(name("known"))
                .with_partition_indexes(vec![7, 0]),
            TopicRequest::default()
                .with_name(name("__consumer_offsets"))
                .with_partition_indexes(vec![0]),
        ]),
    );
    let answers: Vec<(String, i32, i16, Option<String>)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
        })
        .collect();
    let unknown = Some("This server does not host this topic-partition.".to_string());
    assert_eq!(
        answers[0],
        (
            "absent".into(),
            0,
            UNKNOWN_TOPIC_OR_PARTITION,
            unknown.clone()
        )
    );
    assert_eq!(
        answers[1],
        (
            "absent".into(),
            1,
            UNKNOWN_TOPIC_OR_PARTITION,
            unknown.clone()
        )
    );
    assert_eq!((answers[2].1, answers[2].2), (0, INVALID_TOPIC_EXCEPTION));
    assert!(
        answers[2].3.as_deref().unwrap().contains("bad/name"),
        "{:?}",
        answers[2]
    );
    assert_eq!(
        answers[3],
        ("known".into(), 7, UNKNOWN_TOPIC_OR_PARTITION, None),
        "a partition the topic does not have: no message, as Kafka's ReplicaManager"
    );
    assert_eq!(answers[4], ("known".into(), 0, NONE, None));
    assert_eq!(
        answers[5],
        (
            "__consumer_offsets".into(),
            0,
            UNKNOWN_TOPIC_OR_PARTITION,
            unknown
        ),
        "a valid name this broker serves no partition of"
    );
    assert_eq!(answers.len(), 6);
}

#[test]
fn list_transactions_answers_the_coordinators_ids_through_its_filters() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "l");
    let open = init_txn(&mut wire, 4, "lt-open", 60_000);
    add_partitions(&mut wire, "lt-open", open, "l", &[0, 1]);
    let done = init_txn(&mut wire, 4, "lt-done", 60_000);
    add_partitions(&mut wire, "lt-done", done, "l", &[0]);
    end_txn(&mut wire, "lt-done", done, false);
    let idle = init_txn(&mut wire, 4, "lt-idle", 60_000);

    let all = list_transactions(&mut wire, 0, ListTransactionsRequest::default());
    assert_eq!(
        listed(&all),
        vec![
            ("lt-done".into(), done.0, "CompleteAbort".into()),
            ("lt-idle".into(), idle.0, "Empty".into()),
            ("lt-open".into(), open.0, "Ongoing".into()),
        ]
    );
    assert!(all.unknown_state_filters.is_empty());

    let ongoing = list_transactions(
        &mut wire,
        0,
        ListTransactionsRequest::default().with_state_filters(vec![s("Ongoing")]),
    );
    assert_eq!(
        listed(&ongoing),
        vec![("lt-open".into(), open.0, "Ongoing".into())]
    );

    let by_producer = list_transactions(
        &mut wire,
        0,
        ListTransactionsRequest::default()
            .with_producer_id_filters(vec![ProducerId(idle.0), ProducerId(done.0)]),
    );
    assert_eq!(
        listed(&by_producer),
        vec![
            ("lt-done".into(), done.0, "CompleteAbort".into()),
            ("lt-idle".into(), idle.0, "Empty".into()),
        ]
    );

    // Both filters: a producer id whose state is not the one asked for matches nothing.
    let both = list_transactions(
        &mut wire,
        0,
        ListTransactionsRequest::default()
            .with_state_filters(vec![s("Ongoing")])
            .with_producer_id_filters(vec![ProducerId(idle.0)]),
    );
    assert!(listed(&both).is_empty());

    // A state Kafka knows but this coordinator never holds matches nothing; a name Kafka
    // does not know is echoed back.
    let unknown = list_transactions(
        &mut wire,
        0,
        ListTransactionsRequest::default().with_state_filters(vec![
            s("PrepareEpochFence"),
            s("Running"),
            s("ongoing"),
        ]),
    );
    assert!(listed(&unknown).is_empty());
    let echoed: Vec<String> = unknown
        .unknown_state_filters
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert_eq!(
        echoed,
        ["Running", "ongoing"],
        "names are case-sensitive, as Kafka's"
    );

    // v1's duration filter: transactions running longer than it. The open one and the
    // aborted one (CompleteAbort keeps its start) started just now; an Empty id has no start
    // (-1), which Kafka counts as running since forever.
    let long = list_transactions(
        &mut wire,
        1,
        ListTransactionsRequest::default().with_duration_filter(3_600_000),
    );
    assert_eq!(
        listed(&long)
            .iter()
            .map(|t| t.0.as_str())
            .collect::<Vec<_>>(),
        ["lt-idle"]
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let short = list_transactions(
        &mut wire,
        1,
        ListTransactionsRequest::default()
            .with_duration_filter(100)
            .with_state_filters(vec![s("Ongoing")]),
    );
    assert_eq!(
        listed(&short),
        vec![("lt-open".into(), open.0, "Ongoing".into())]
    );
    let unfiltered = list_transactions(
        &mut wire,
        1,
        ListTransactionsRequest::default().with_duration_filter(-1),
    );
    assert_eq!(listed(&unfiltered).len(), 3, "-1: no duration filter");
}

#[test]
fn describe_transactions_answers_the_coordinators_state_and_refuses_unknown_and_empty_ids() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "d");
    create_topic(&mut wire, "e");
    let txn = init_txn(&mut wire, 4, "dt", 45_000);
    let before = now_ms();
    add_partitions(&mut wire, "dt", txn, "e", &[1]);
    add_partitions(&mut wire, "dt", txn, "d", &[1, 0]);
    let after = now_ms();

    let states = describe_transactions(&mut wire, &["dt", "nobody", ""]);
    let dt = &states[0];
    assert_eq!(dt.error_code, NONE);
    assert_eq!(dt.transactional_id.0.as_str(), "dt");
    assert_eq!(dt.transaction_state.as_str(), "Ongoing");
    assert_eq!((dt.producer_id.0, dt.producer_epoch), txn);
    assert_eq!(dt.transaction_timeout_ms, 45_000);
    assert!(
        (before - 5..=after + 5).contains(&dt.transaction_start_time_ms),
        "started when its first partition was added: {} not in {before}..={after}",
        dt.transaction_start_time_ms
    );
    let topics: Vec<(String, Vec<i32>)> = dt
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(
        topics,
        vec![("d".into(), vec![0, 1]), ("e".into(), vec![1])]
    );
    assert_eq!(
        (states[1].transactional_id.0.as_str(), states[1].error_code),
        ("nobody", TRANSACTIONAL_ID_NOT_FOUND)
    );
    assert_eq!(
        (states[2].transactional_id.0.as_str(), states[2].error_code),
        ("", INVALID_REQUEST)
    );

    // Committed: CompleteCommit until the next transaction, with no partitions and the start
    // time kept, as Kafka's coordinator answers.
    let started = describe_transactions(&mut wire, &["dt"]).remove(0);
    end_txn(&mut wire, "dt", txn, true);
    let dt = describe_transactions(&mut wire, &["dt"]).remove(0);
    assert_eq!(dt.error_code, NONE);
    assert_eq!(dt.transaction_state.as_str(), "CompleteCommit");
    assert_eq!((dt.producer_id.0, dt.producer_epoch), txn);
    assert_eq!(
        dt.transaction_start_time_ms,
        started.transaction_start_time_ms
    );
    assert!(dt.topics.is_empty());
}

/// The hanging transaction of KIP-664: a transactional batch from a producer the coordinator
/// has no state for holds the last stable offset back for ever. DescribeProducers finds it,
/// WriteTxnMarkers aborts it, and the last stable offset moves to the end.
#[test]
fn write_txn_markers_aborts_a_hanging_transaction_and_the_last_stable_offset_moves() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "h");
    let (hung, epoch) = idempotent_producer(&mut wire);
    assert_eq!(
        produce(&mut wire, "h", 0, batch(hung, epoch, 0, 3, true)),
        0
    );
    let (other, other_epoch) = idempotent_producer(&mut wire);
    assert_eq!(
        produce(&mut wire, "h", 0, batch(other, other_epoch, 0, 2, false)),
        3
    );

    let stuck = fetch_committed(&mut wire, "h", 0);
    assert_eq!((stuck.high_watermark, stuck.last_stable_offset), (5, 0));
    let found = producers(&mut wire, "h", 0);
    let h = found.iter().find(|p| p.producer_id.0 == hung).unwrap();
    assert_eq!(fields(h), (hung, i32::from(epoch), 2, TS + 2, -1, 0));
    // Nothing in the coordinator knows it: `find-hanging`'s second look.
    let known = list_transactions(
        &mut wire,
        0,
        ListTransactionsRequest::default().with_producer_id_filters(vec![ProducerId(hung)]),
    );
    assert!(listed(&known).is_empty());

    // `kafka-transactions abort --start-offset 0`: an ABORT with the producer's epoch and
    // coordinator epoch max(-1, 0).
    let results = write_markers(
        &mut wire,
        vec![marker(hung, epoch, 0, false, &[("h", &[0])])],
    );
    assert_eq!(marker_errors(&results), vec![(hung, "h".into(), 0, NONE)]);

    let moved = fetch_committed(&mut wire, "h", 0);
    assert_eq!(moved.high_watermark, 6, "the marker took offset 5");
    assert_eq!(moved.last_stable_offset, 6, "nothing holds the LSO back");
    let aborted: Vec<(i64, i64)> = moved
        .aborted_transactions
        .unwrap_or_default()
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    assert_eq!(aborted, vec![(hung, 0)], "read_committed consumers skip it");
    let h = producers(&mut wire, "h", 0)
        .into_iter()
        .find(|p| p.producer_id.0 == hung)
        .unwrap();
    assert_eq!((h.current_txn_start_offset, h.coordinator_epoch), (-1, 0));
}

#[test]
fn write_txn_markers_refusals_get_kafkas_codes_and_write_nothing() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "r");
    let (pid, _) = idempotent_producer(&mut wire);
    // A transaction at epoch 3.
    produce(&mut wire, "r", 0, batch(pid, 3, 0, 1, true));
    assert_eq!(fetch_committed(&mut wire, "r", 0).high_watermark, 1);

    // Unknown topic, unknown partition, and an older producer epoch; in one request, the
    // results grouped by producer id.
    let (ghost, _) = idempotent_producer(&mut wire);
    let results = write_markers(
        &mut wire,
        vec![
            marker(pid, 2, 0, false, &[("r", &[0]), ("nope", &[0])]),
            marker(ghost, 0, 0, false, &[("r", &[5])]),
            marker(pid, 2, 0, false, &[("r", &[1])]),
        ],
    );
    assert_eq!(results.len(), 2, "one result per producer id");
    assert_eq!(
        marker_errors(&results),
        vec![
            (pid, "r".into(), 0, INVALID_PRODUCER_EPOCH),
            (pid, "r".into(), 1, NONE),
            (pid, "nope".into(), 0, UNKNOWN_TOPIC_OR_PARTITION),
            (ghost, "r".into(), 5, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    let p = fetch_committed(&mut wire, "r", 0);
    assert_eq!(
        (p.high_watermark, p.last_stable_offset),
        (1, 0),
        "the refused marker wrote nothing and ended nothing"
    );

    // A coordinator epoch older than the producer's last marker's is fenced.
    let results = write_markers(&mut wire, vec![marker(pid, 3, 5, true, &[("r", &[0])])]);
    assert_eq!(marker_errors(&results), vec![(pid, "r".into(), 0, NONE)]);
    produce(&mut wire, "r", 0, batch(pid, 3, 1, 1, true));
    let results = write_markers(&mut wire, vec![marker(pid, 3, 4, false, &[("r", &[0])])]);
    assert_eq!(
        marker_errors(&results),
        vec![(pid, "r".into(), 0, TRANSACTION_COORDINATOR_FENCED)]
    );
    let p = fetch_committed(&mut wire, "r", 0);
    assert_eq!(
        (p.high_watermark, p.last_stable_offset),
        (3, 2),
        "still open at 2"
    );
    let state = producers(&mut wire, "r", 0);
    assert_eq!(fields(&state[0]), (pid, 3, 1, TS, 5, 2));

    // No marker at all: an empty answer.
    assert!(write_markers(&mut wire, Vec::new()).is_empty());
}

/// Producer state comes back from the log after a SIGKILL exactly as it was; the coordinator's
/// state comes back from its own log, with the transaction left open aborted (epoch bumped).
#[test]
fn producer_and_transaction_state_survive_a_sigkill() {
    let (dir, mut broker, mut wire) = start();
    create_topic(&mut wire, "k");
    let (pid, epoch) = idempotent_producer(&mut wire);
    produce(&mut wire, "k", 0, batch(pid, epoch, 0, 2, true));
    write_markers(
        &mut wire,
        vec![marker(pid, epoch, 3, false, &[("k", &[0])])],
    );
    produce(&mut wire, "k", 0, batch(pid, epoch, 2, 2, false));
    let open = init_txn(&mut wire, 4, "kt", 60_000);
    add_partitions(&mut wire, "kt", open, "k", &[1]);
    produce(&mut wire, "k", 1, batch(open.0, open.1, 0, 1, true));
    let before = producers(&mut wire, "k", 0);
    assert_eq!(
        fields(&before[0]),
        (pid, i32::from(epoch), 3, TS + 1, 3, -1)
    );

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        producers(&mut wire, "k", 0)
            .iter()
            .map(fields)
            .collect::<Vec<_>>(),
        before.iter().map(fields).collect::<Vec<_>>(),
        "rebuilt from the log"
    );
    let kt = describe_transactions(&mut wire, &["kt"]).remove(0);
    assert_eq!(kt.error_code, NONE);
    assert_eq!(
        kt.transaction_state.as_str(),
        "CompleteAbort",
        "aborted at restart"
    );
    assert_eq!((kt.producer_id.0, kt.producer_epoch), (open.0, open.1 + 1));
    let k1 = producers(&mut wire, "k", 1);
    assert_eq!(
        (
            k1[0].producer_id.0,
            k1[0].producer_epoch,
            k1[0].current_txn_start_offset
        ),
        (open.0, i32::from(open.1 + 1), -1),
        "its abort marker, with the bumped epoch"
    );
    assert_eq!(
        listed(&list_transactions(
            &mut wire,
            0,
            ListTransactionsRequest::default()
        )),
        vec![("kt".into(), open.0, "CompleteAbort".into())]
    );
    drop(dir);
}

/// A partition taken offline (a stored batch failed its check when served): DescribeProducers
/// answers KAFKA_STORAGE_ERROR, WriteTxnMarkers UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers
/// for a partition in a failed log dir; the other partitions are answered as before.
#[test]
fn an_offline_partition_is_refused_as_kafka_refuses_one_in_a_failed_log_dir() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(
        data.path(),
        &["--segment-bytes", "4096", "--partitions", "2"],
    );
    let mut wire = Wire::connect(broker.addr);
    create_topic(&mut wire, "off");
    let (pid, epoch) = idempotent_producer(&mut wire);
    for n in 0..40 {
        produce(&mut wire, "off", 0, batch(pid, epoch, n * 5, 5, false));
    }
    assert_eq!(broker.terminate().code(), Some(0), "a clean shutdown");
    // One payload byte of the first batch of the first (sealed) segment.
    let segment = data.path().join("off-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    let first = oncelog::format::RecordBatch::parse(&bytes).unwrap().size();
    assert!(
        bytes.len() > first,
        "more than one batch in the first segment"
    );
    bytes[first - 3] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();

    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    // Answered until the damage is met: the producer's last sequence.
    let p = producers(&mut wire, "off", 0);
    assert_eq!(fields(&p[0]).2, 199);
    let r: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("off"))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    assert_eq!(r.responses[0].partitions[0].error_code, KAFKA_STORAGE_ERROR);
    broker.wait_for_log(
        "partition taken offline",
        std::time::Duration::from_secs(10),
    );

    let offline = describe_producers(&mut wire, "off", &[0, 1]);
    assert_eq!(
        offline
            .iter()
            .map(|p| (p.partition_index, p.error_code))
            .collect::<Vec<_>>(),
        vec![(0, KAFKA_STORAGE_ERROR), (1, NONE)]
    );
    assert!(offline[0].active_producers.is_empty());
    let results = write_markers(
        &mut wire,
        vec![marker(pid, epoch, 0, false, &[("off", &[0, 1])])],
    );
    assert_eq!(
        marker_errors(&results),
        vec![
            (pid, "off".into(), 0, UNKNOWN_TOPIC_OR_PARTITION),
            (pid, "off".into(), 1, NONE),
        ]
    );
}

/// ListOffsets of `partition` at `timestamp` under an isolation level (0 read_uncommitted, 1
/// read_committed): (offset, timestamp).
fn list_offset(wire: &mut Wire, topic: &str, timestamp: i64, isolation_level: i8) -> (i64, i64) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let response: ListOffsetsResponse = wire.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation_level)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(timestamp)
                ])]),
    );
    let p = &response.topics[0].partitions[0];
    assert_eq!(p.error_code, NONE);
    (p.offset, p.timestamp)
}

/// As Kafka's `fetchOffsetForTimestamp`: a read_committed consumer's LATEST is the last stable
/// offset, not the end (a hanging transaction holds it), and a lookup by timestamp never
/// answers an offset it could not fetch. Until the transaction is aborted.
#[test]
fn list_offsets_under_read_committed_is_bounded_by_the_last_stable_offset() {
    let (_dir, _broker, mut wire) = start();
    create_topic(&mut wire, "lso");
    let (plain, plain_epoch) = idempotent_producer(&mut wire);
    assert_eq!(
        produce(&mut wire, "lso", 0, batch(plain, plain_epoch, 0, 2, false)),
        0
    );
    let (hung, epoch) = idempotent_producer(&mut wire);
    assert_eq!(
        produce(&mut wire, "lso", 0, batch(hung, epoch, 0, 3, true)),
        2
    );

    assert_eq!(
        list_offset(&mut wire, "lso", -1, 0).0,
        5,
        "read_uncommitted: the end"
    );
    assert_eq!(
        list_offset(&mut wire, "lso", -1, 1).0,
        2,
        "read_committed: the LSO"
    );
    // Timestamp TS + 1 is first at offset 1, below the LSO; TS + 2 only at offset 4, inside
    // the open transaction: found under read_uncommitted, none under read_committed.
    assert_eq!(list_offset(&mut wire, "lso", TS + 1, 1), (1, TS + 1));
    assert_eq!(list_offset(&mut wire, "lso", TS + 2, 0), (4, TS + 2));
    assert_eq!(
        list_offset(&mut wire, "lso", TS + 2, 1),
        (-1, -1),
        "past the LSO: none"
    );
    // MAX_TIMESTAMP (-3): the newest record is in the open transaction.
    assert_eq!(list_offset(&mut wire, "lso", -3, 1), (-1, -1));

    let results = write_markers(
        &mut wire,
        vec![marker(hung, epoch, 0, false, &[("lso", &[0])])],
    );
    assert_eq!(marker_errors(&results), vec![(hung, "lso".into(), 0, NONE)]);
    assert_eq!(
        list_offset(&mut wire, "lso", -1, 1).0,
        6,
        "the abort moved the LSO"
    );
    assert_eq!(list_offset(&mut wire, "lso", TS + 2, 1), (4, TS + 2));
}
