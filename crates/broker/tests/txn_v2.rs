//! Transactions version 2 (KIP-890 part 2) over a raw connection, with kafka-protocol's
//! generated types: the feature ApiVersions finalizes, the partition a transactional Produce
//! v12+ adds itself, the group TxnOffsetCommit v5 adds itself, the epoch EndTxn v5 bumps (and
//! the markers written with it), the late batch of an ended transaction fenced, the
//! AddPartitionsToTxn v4 batched and `verify_only` forms, every refusal with Kafka's codes,
//! the CompleteCommit / CompleteAbort states Kafka's coordinator keeps, and a SIGKILL in the
//! middle of a transaction. Version 1 requests beside them keep their old rules.

mod common;

use bytes::Bytes;
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_transactions_response::TransactionState as Described;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;

use common::txn::{add_partitions, end_txn as end, fetch_committed, init_txn};
use common::wire::{create_topic, str_bytes as s, topic_name as name};

// Kafka's error codes.
const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;
const TRANSACTION_ABORTABLE: i16 = 120;

fn start() -> (tempfile::TempDir, BrokerProcess, Wire) {
    let (dir, broker, mut wire) = common::start_connected(&["--partitions", "2"]);
    create_topic(&mut wire, "t");
    (dir, broker, wire)
}

/// A transactional batch of `n` records from producer (id, epoch) at `sequence`.
fn batch(pid: i64, epoch: i16, sequence: i32, n: usize) -> Bytes {
    common::txn::batch(pid, epoch, sequence, n, true)
}

/// A transactional Produce at `version` (12+: transaction version 2) of one batch to each of
/// `partitions` of `t`; the per-partition (error, base offset).
fn produce(
    wire: &mut Wire,
    version: i16,
    id: &str,
    partitions: &[(i32, Bytes)],
) -> Vec<(i16, i64)> {
    let r: ProduceResponse = wire.call(
        ApiKey::Produce,
        version,
        &ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("t"))
                .with_partition_data(
                    partitions
                        .iter()
                        .map(|(p, records)| {
                            PartitionProduceData::default()
                                .with_index(*p)
                                .with_records(Some(records.clone()))
                        })
                        .collect(),
                )]),
    );
    r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.error_code, p.base_offset))
        .collect()
}

fn init(wire: &mut Wire, id: &str) -> (i64, i16) {
    init_txn(wire, 5, id, 60_000)
}

fn describe(wire: &mut Wire, id: &str) -> Described {
    let mut r: DescribeTransactionsResponse = wire.call(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(id))]),
    );
    let d = r.transaction_states.remove(0);
    assert_eq!(d.error_code, NONE);
    d
}

/// (state, producer id, epoch, partitions of `t`) as DescribeTransactions answers.
fn state(wire: &mut Wire, id: &str) -> (String, i64, i16, Vec<i32>) {
    let d = describe(wire, id);
    let mut parts: Vec<i32> = d
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    parts.sort();
    (
        d.transaction_state.to_string(),
        d.producer_id.0,
        d.producer_epoch,
        parts,
    )
}

/// (producer epoch, open transaction's first offset) of `pid` in `t`-`partition`, from the
/// engine's producer table: the epoch of the last batch or marker it took.
fn partition_producer(wire: &mut Wire, partition: i32, pid: i64) -> (i32, i64) {
    let r: DescribeProducersResponse = wire.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(name("t"))
            .with_partition_indexes(vec![partition])]),
    );
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, NONE);
    let s = p
        .active_producers
        .iter()
        .find(|s| s.producer_id.0 == pid)
        .expect("the producer is in the partition's table");
    (s.producer_epoch, s.current_txn_start_offset)
}

/// AddPartitionsToTxn v4 for one transaction: the per-partition codes, in request order.
fn add_v4(
    wire: &mut Wire,
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    parts: &[i32],
    verify_only: bool,
) -> Vec<i16> {
    let r: AddPartitionsToTxnResponse = wire.call(
        ApiKey::AddPartitionsToTxn,
        4,
        &AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_verify_only(verify_only)
                .with_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(name(topic))
                    .with_partitions(parts.to_vec())]),
        ]),
    );
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.results_by_transaction.len(), 1);
    assert_eq!(r.results_by_transaction[0].transactional_id.0.as_str(), id);
    r.results_by_transaction[0].topic_results[0]
        .results_by_partition
        .iter()
        .map(|p| p.partition_error_code)
        .collect()
}

#[test]
fn api_versions_finalizes_transaction_version_2_and_advertises_its_request_versions() {
    let (_dir, broker, mut wire) = start();
    let r: ApiVersionsResponse = wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let range = |key: ApiKey| common::wire::advertised(&r, key);
    assert_eq!(range(ApiKey::EndTxn), Some((0, 5)));
    assert_eq!(range(ApiKey::AddPartitionsToTxn), Some((0, 4)));
    assert_eq!(range(ApiKey::TxnOffsetCommit), Some((0, 5)));
    assert_eq!(range(ApiKey::Produce), Some((3, 13)));
    let finalized: Vec<_> = r
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
        .collect();
    assert_eq!(finalized, vec![("transaction.version".to_string(), 2, 2)]);
    assert!(
        r.finalized_features_epoch >= 0,
        "a client that has read no features (epoch -1) reads these"
    );
    let supported: Vec<_> = r
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    assert_eq!(supported, vec![("transaction.version".to_string(), 0, 2)]);
    // Before v3 there are no features in the answer.
    let old: ApiVersionsResponse =
        wire.call(ApiKey::ApiVersions, 2, &ApiVersionsRequest::default());
    assert!(old.finalized_features.is_empty());
    // AddPartitionsToTxn v5 is not answered: the connection is closed.
    wire.send(
        ApiKey::AddPartitionsToTxn,
        5,
        &AddPartitionsToTxnRequest::default(),
    );
    assert!(wire.is_closed_by_broker());
    drop(broker);
}

#[test]
fn produce_v12_adds_its_partitions_and_end_txn_v5_bumps_the_epoch_of_the_markers() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "v2");
    // No AddPartitionsToTxn: the first transactional Produce adds the partitions.
    let answers = produce(
        &mut wire,
        12,
        "v2",
        &[(0, batch(pid, e0, 0, 3)), (1, batch(pid, e0, 0, 2))],
    );
    assert_eq!(answers, vec![(NONE, 0), (NONE, 0)]);
    let ongoing = describe(&mut wire, "v2");
    assert!(ongoing.transaction_start_time_ms > 0);
    assert_eq!(
        state(&mut wire, "v2"),
        ("Ongoing".into(), pid, e0, vec![0, 1])
    );
    // A second batch to a partition already added (v13 names topics by id; the name is
    // resolved from it) appends without a new step.
    assert_eq!(
        produce(&mut wire, 12, "v2", &[(0, batch(pid, e0, 3, 1))]),
        vec![(NONE, 3)]
    );
    assert_eq!(partition_producer(&mut wire, 0, pid), (i32::from(e0), 0));

    assert_eq!(
        end(&mut wire, 5, "v2", (pid, e0), true),
        (NONE, pid, e0 + 1),
        "EndTxn v5 answers the bumped epoch"
    );
    for partition in [0, 1] {
        assert_eq!(
            partition_producer(&mut wire, partition, pid),
            (i32::from(e0 + 1), -1),
            "the COMMIT marker carries the bumped epoch and closes the transaction"
        );
    }
    let committed = fetch_committed(&mut wire, "t", 0);
    assert_eq!(committed.last_stable_offset, 5, "4 records and the marker");
    assert_eq!(
        state(&mut wire, "v2"),
        ("CompleteCommit".into(), pid, e0 + 1, vec![]),
    );
    assert_eq!(
        describe(&mut wire, "v2").transaction_start_time_ms,
        ongoing.transaction_start_time_ms,
        "the completed transaction keeps its start time"
    );

    // The next transaction runs with the new epoch and bumps it again.
    assert_eq!(
        produce(&mut wire, 12, "v2", &[(1, batch(pid, e0 + 1, 0, 1))]),
        vec![(NONE, 3)]
    );
    assert_eq!(
        state(&mut wire, "v2"),
        ("Ongoing".into(), pid, e0 + 1, vec![1])
    );
    assert_eq!(
        end(&mut wire, 5, "v2", (pid, e0 + 1), false),
        (NONE, pid, e0 + 2)
    );
    assert_eq!(
        partition_producer(&mut wire, 1, pid),
        (i32::from(e0 + 2), -1)
    );
    assert_eq!(
        state(&mut wire, "v2"),
        ("CompleteAbort".into(), pid, e0 + 2, vec![])
    );
}

#[test]
fn a_late_batch_of_an_ended_transaction_is_fenced_and_not_appended() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "late");
    assert_eq!(
        produce(&mut wire, 12, "late", &[(0, batch(pid, e0, 0, 1))]),
        vec![(NONE, 0)]
    );
    assert_eq!(end(&mut wire, 5, "late", (pid, e0), true).0, NONE);
    let end_offset = fetch_committed(&mut wire, "t", 0).high_watermark;
    // The zombie's batch, with the old epoch: refused by the coordinator under version 2 ...
    assert_eq!(
        produce(&mut wire, 12, "late", &[(0, batch(pid, e0, 1, 1))]),
        vec![(INVALID_PRODUCER_EPOCH, -1)]
    );
    // ... and by the log under version 1, as the marker's bumped epoch is the partition's.
    assert_eq!(
        produce(&mut wire, 11, "late", &[(0, batch(pid, e0, 1, 1))]),
        vec![(INVALID_PRODUCER_EPOCH, -1)]
    );
    assert_eq!(
        fetch_committed(&mut wire, "t", 0).high_watermark,
        end_offset
    );
    assert_eq!(
        state(&mut wire, "late"),
        ("CompleteCommit".into(), pid, e0 + 1, vec![]),
        "the refused batches began no transaction"
    );
}

#[test]
fn produce_v12_refusals_get_kafkas_codes_and_write_nothing() {
    let (_dir, _broker, mut wire) = start();
    let (pid, epoch) = init(&mut wire, "r");
    // A transactional id the coordinator never granted.
    assert_eq!(
        produce(&mut wire, 12, "nobody", &[(0, batch(pid, epoch, 0, 1))]),
        vec![(INVALID_PRODUCER_ID_MAPPING, -1)]
    );
    // Another producer id than the one granted.
    assert_eq!(
        produce(&mut wire, 12, "r", &[(0, batch(pid + 100, epoch, 0, 1))]),
        vec![(INVALID_PRODUCER_ID_MAPPING, -1)]
    );
    // An epoch the coordinator did not grant (newer).
    assert_eq!(
        produce(&mut wire, 12, "r", &[(0, batch(pid, epoch + 1, 0, 1))]),
        vec![(INVALID_PRODUCER_EPOCH, -1)]
    );
    // An unknown partition is refused as ever, and adds nothing.
    assert_eq!(
        produce(&mut wire, 12, "r", &[(7, batch(pid, epoch, 0, 1))]),
        vec![(UNKNOWN_TOPIC_OR_PARTITION, -1)]
    );
    assert_eq!(state(&mut wire, "r"), ("Empty".into(), pid, epoch, vec![]));
    assert_eq!(fetch_committed(&mut wire, "t", 0).high_watermark, 0);
}

/// The numbers are Kafka 4.4's for the same requests (README, Transactions).
#[test]
fn a_timed_out_version_2_transaction_is_aborted_with_one_bump_and_its_producer_carries_on() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init_txn(&mut wire, 5, "slow", 300);
    produce(&mut wire, 12, "slow", &[(0, batch(pid, e0, 0, 1))]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while state(&mut wire, "slow").0 != "CompleteAbort" {
        assert!(std::time::Instant::now() < deadline, "never aborted");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        state(&mut wire, "slow"),
        ("CompleteAbort".into(), pid, e0 + 1, vec![])
    );
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0 + 1), -1)
    );
    assert_eq!(
        produce(&mut wire, 12, "slow", &[(0, batch(pid, e0, 1, 1))]),
        vec![(INVALID_PRODUCER_EPOCH, -1)],
        "its late batch is fenced"
    );
    // Its abort, with the epoch it holds, is taken as the retry of the coordinator's.
    assert_eq!(
        end(&mut wire, 5, "slow", (pid, e0), false),
        (NONE, pid, e0 + 1)
    );
    assert_eq!(
        end(&mut wire, 5, "slow", (pid, e0), true),
        (INVALID_TXN_STATE, -1, -1),
        "a commit it cannot have"
    );
    assert_eq!(
        produce(&mut wire, 12, "slow", &[(0, batch(pid, e0 + 1, 0, 1))]),
        vec![(NONE, 2)]
    );
}

/// The numbers are Kafka 4.4's once its client's InitProducerId retry is done.
#[test]
fn an_init_producer_id_fences_an_open_version_2_transaction_and_its_zombie_learns_nothing() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "z");
    produce(&mut wire, 12, "z", &[(0, batch(pid, e0, 0, 1))]);
    assert_eq!(
        init(&mut wire, "z"),
        (pid, e0 + 2),
        "one bump for the fencing abort, one for the new producer"
    );
    assert_eq!(state(&mut wire, "z"), ("Empty".into(), pid, e0 + 2, vec![]));
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0 + 1), -1),
        "aborted with the fencing epoch"
    );
    // The zombie's EndTxn with its epoch is no retry of that abort: fenced, answering nothing.
    for commit in [true, false] {
        assert_eq!(
            end(&mut wire, 5, "z", (pid, e0), commit),
            (PRODUCER_FENCED, -1, -1)
        );
    }
    assert_eq!(
        produce(&mut wire, 12, "z", &[(0, batch(pid, e0, 1, 1))]),
        vec![(INVALID_PRODUCER_EPOCH, -1)]
    );
    assert_eq!(state(&mut wire, "z"), ("Empty".into(), pid, e0 + 2, vec![]));
}

/// Version 1 keeps its single bump: the fencing abort's epoch is the one granted.
#[test]
fn an_init_producer_id_fences_an_open_version_1_transaction_with_one_bump() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "z1");
    add_partitions(&mut wire, "z1", (pid, e0), "t", &[0]);
    produce(&mut wire, 11, "z1", &[(0, batch(pid, e0, 0, 1))]);
    assert_eq!(init(&mut wire, "z1"), (pid, e0 + 1));
    assert_eq!(
        state(&mut wire, "z1"),
        ("Empty".into(), pid, e0 + 1, vec![])
    );
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0 + 1), -1)
    );
    assert_eq!(end(&mut wire, 4, "z1", (pid, e0), false).0, PRODUCER_FENCED);
}

#[test]
fn end_txn_v5_retries_are_answered_as_the_first_and_other_epochs_fenced() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "retry");
    produce(&mut wire, 12, "retry", &[(0, batch(pid, e0, 0, 1))]);
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0), true),
        (NONE, pid, e0 + 1)
    );
    // The response was lost: the retry, with the epoch the producer still holds.
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0), true),
        (NONE, pid, e0 + 1),
        "a retry is answered with the bumped epoch, and writes nothing"
    );
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0 + 1), -1)
    );
    // The opposite decision with the old epoch is not a retry.
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0), false),
        (INVALID_TXN_STATE, -1, -1)
    );
    // A commit with the new epoch, and nothing open.
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0 + 1), true),
        (INVALID_TXN_STATE, -1, -1)
    );
    // Older than the retry epoch, or newer than granted: fenced.
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0.wrapping_sub(1)), true),
        (PRODUCER_FENCED, -1, -1)
    );
    assert_eq!(
        end(&mut wire, 5, "retry", (pid, e0 + 5), false),
        (PRODUCER_FENCED, -1, -1)
    );
    assert_eq!(
        end(&mut wire, 5, "retry", (pid + 1, e0 + 1), false),
        (INVALID_PRODUCER_ID_MAPPING, -1, -1)
    );
    assert_eq!(
        state(&mut wire, "retry"),
        ("CompleteCommit".into(), pid, e0 + 1, vec![])
    );
}

#[test]
fn an_abort_with_nothing_added_bumps_the_epoch_under_version_2_only() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "empty");
    // Version 1: nothing to end.
    assert_eq!(
        end(&mut wire, 4, "empty", (pid, e0), false),
        (INVALID_TXN_STATE, -1, -1)
    );
    // Version 2: the producer cannot know whether a failed Produce added a partition, so an
    // abort is accepted, fences the epoch, and writes no marker.
    assert_eq!(
        end(&mut wire, 5, "empty", (pid, e0), false),
        (NONE, pid, e0 + 1)
    );
    assert_eq!(
        state(&mut wire, "empty"),
        ("CompleteAbort".into(), pid, e0 + 1, vec![])
    );
    assert_eq!(fetch_committed(&mut wire, "t", 0).high_watermark, 0);
    // A commit of nothing stays refused.
    assert_eq!(
        end(&mut wire, 5, "empty", (pid, e0 + 1), true),
        (INVALID_TXN_STATE, -1, -1)
    );
}

#[test]
fn version_1_requests_keep_the_epoch_and_complete_states_last_until_the_next_transaction() {
    let (_dir, _broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "v1");
    add_partitions(&mut wire, "v1", (pid, e0), "t", &[0]);
    assert_eq!(
        produce(&mut wire, 11, "v1", &[(0, batch(pid, e0, 0, 2))]),
        vec![(NONE, 0)]
    );
    // A version 1 client may send Produce v12+ after its AddPartitionsToTxn: the partition is
    // already there, and the transaction stays version 1.
    assert_eq!(
        produce(&mut wire, 12, "v1", &[(0, batch(pid, e0, 2, 1))]),
        vec![(NONE, 2)]
    );
    assert_eq!(end(&mut wire, 4, "v1", (pid, e0), true), (NONE, -1, -1));
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0), -1),
        "no bump: the marker has the producer's epoch"
    );
    assert_eq!(
        state(&mut wire, "v1"),
        ("CompleteCommit".into(), pid, e0, vec![])
    );
    let listed: ListTransactionsResponse = wire.call(
        ApiKey::ListTransactions,
        0,
        &ListTransactionsRequest::default().with_state_filters(vec![s("CompleteCommit")]),
    );
    assert_eq!(listed.transaction_states.len(), 1);
    assert_eq!(
        listed.transaction_states[0].transactional_id.0.as_str(),
        "v1"
    );
    // A retried EndTxn of the same decision is answered as Kafka answers it.
    assert_eq!(end(&mut wire, 4, "v1", (pid, e0), true), (NONE, -1, -1));
    assert_eq!(
        end(&mut wire, 4, "v1", (pid, e0), false).0,
        INVALID_TXN_STATE
    );
    // The next transaction leaves CompleteCommit.
    assert_eq!(
        produce(&mut wire, 12, "v1", &[(1, batch(pid, e0, 0, 1))]),
        vec![(NONE, 0)]
    );
    assert_eq!(state(&mut wire, "v1"), ("Ongoing".into(), pid, e0, vec![1]));
}

#[test]
fn add_partitions_to_txn_v4_adds_and_verifies_with_kafkas_codes() {
    let (_dir, _broker, mut wire) = start();
    let (pid, epoch) = init(&mut wire, "b");
    assert_eq!(
        add_v4(&mut wire, "b", (pid, epoch), "t", &[0], true),
        vec![TRANSACTION_ABORTABLE],
        "verify_only: not in the transaction"
    );
    assert_eq!(state(&mut wire, "b").0, "Empty", "verify_only adds nothing");
    assert_eq!(
        add_v4(&mut wire, "b", (pid, epoch), "t", &[0], false),
        vec![NONE]
    );
    assert_eq!(
        add_v4(&mut wire, "b", (pid, epoch), "t", &[0, 1], true),
        vec![NONE, TRANSACTION_ABORTABLE]
    );
    assert_eq!(
        add_v4(&mut wire, "b", (pid, epoch + 1), "t", &[0], true),
        vec![PRODUCER_FENCED]
    );
    assert_eq!(
        add_v4(&mut wire, "b", (pid, epoch), "t", &[1, 9], false),
        vec![OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(
        add_v4(&mut wire, "unknown", (pid, epoch), "t", &[1], false),
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
    assert_eq!(
        state(&mut wire, "b"),
        ("Ongoing".into(), pid, epoch, vec![0])
    );
}

#[test]
fn txn_offset_commit_v5_adds_its_group_and_commits_with_the_transaction() {
    let (_dir, _broker, mut wire) = start();
    let (pid, epoch) = init(&mut wire, "eos");
    let commit = |wire: &mut Wire, version: i16, group: &str| -> i16 {
        let r: TxnOffsetCommitResponse = wire.call(
            ApiKey::TxnOffsetCommit,
            version,
            &TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s("eos")))
                .with_group_id(GroupId(s(group)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_member_id(s(""))
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(42)
                        .with_committed_leader_epoch(-1)])]),
        );
        r.topics[0].partitions[0].error_code
    };
    // Version 1 still needs AddOffsetsToTxn first: refused as Kafka refuses it, from v4
    // with TRANSACTION_ABORTABLE.
    assert_eq!(commit(&mut wire, 3, "g"), INVALID_TXN_STATE);
    assert_eq!(commit(&mut wire, 4, "g"), TRANSACTION_ABORTABLE);
    assert_eq!(commit(&mut wire, 5, "g"), NONE);
    assert_eq!(state(&mut wire, "eos").0, "Ongoing");
    assert_eq!(
        end(&mut wire, 5, "eos", (pid, epoch), true),
        (NONE, pid, epoch + 1)
    );
    let r: OffsetFetchResponse = wire.call(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name("t"))
                .with_partition_indexes(vec![0])])),
    );
    assert_eq!(r.topics[0].partitions[0].committed_offset, 42);
}

#[test]
fn a_sigkill_mid_transaction_aborts_it_at_restart_with_one_bump_and_the_producer_can_retry() {
    let (dir, mut broker, mut wire) = start();
    let (pid, e0) = init(&mut wire, "crash");
    let (done_pid, d0) = init(&mut wire, "done");
    produce(&mut wire, 12, "crash", &[(0, batch(pid, e0, 0, 2))]);
    produce(&mut wire, 12, "done", &[(1, batch(done_pid, d0, 0, 1))]);
    assert_eq!(end(&mut wire, 5, "done", (done_pid, d0), true).0, NONE);
    let done_before = describe(&mut wire, "done");

    broker.crash();
    let broker = broker.restart();
    let mut wire = Wire::connect(broker.addr);
    assert_eq!(
        state(&mut wire, "crash"),
        ("CompleteAbort".into(), pid, e0 + 1, vec![]),
        "the open transaction was aborted at restart, with a bump"
    );
    assert_eq!(
        partition_producer(&mut wire, 0, pid),
        (i32::from(e0 + 1), -1)
    );
    assert_eq!(
        fetch_committed(&mut wire, "t", 0)
            .aborted_transactions
            .as_ref()
            .map(Vec::len),
        Some(1)
    );
    // The completed one survived as it was, start time included.
    let done_after = describe(&mut wire, "done");
    assert_eq!(done_after.transaction_state.as_str(), "CompleteCommit");
    assert_eq!(
        (
            done_after.producer_epoch,
            done_after.transaction_start_time_ms
        ),
        (
            done_before.producer_epoch,
            done_before.transaction_start_time_ms
        )
    );
    // The producer, which never learnt of the abort, aborts with the epoch it holds: the
    // bump is taken as its own, and it carries on with the epoch answered.
    assert_eq!(
        end(&mut wire, 5, "crash", (pid, e0), false),
        (NONE, pid, e0 + 1)
    );
    assert_eq!(
        produce(&mut wire, 12, "crash", &[(0, batch(pid, e0 + 1, 0, 1))]),
        vec![(NONE, 3)]
    );
    assert_eq!(
        end(&mut wire, 5, "crash", (pid, e0 + 1), true),
        (NONE, pid, e0 + 2)
    );
    drop(dir);
}

/// Kafka 4.4's Java producer reads `transaction.version=2` from ApiVersions and runs its
/// consume-transform-produce loop under it: no AddPartitionsToTxn or AddOffsetsToTxn, and
/// every EndTxn (v5) bumps the epoch, which the coordinator and the output partition's
/// markers show.
#[test]
fn kafkas_java_producer_runs_transaction_version_2_against_the_broker() {
    use common::clients::{java_txn_loop, txn_client};
    const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let input = common::topic("java-v2-in");
    let output = common::topic("java-v2-out");
    txn_client(&["txns", &broker.bootstrap(), &input, "4", "tx-v2-src"]).finish(TIMEOUT);
    let group = format!("{input}-g");
    let run = java_txn_loop(&[&broker.bootstrap(), &input, &output, &group, "tx-v2", "4"])
        .finish(TIMEOUT);
    let count = |name: &str| run.iter().filter(|e| e["event"] == name).count();
    assert_eq!((count("aborted"), count("transformed")), (1, 4));

    let mut wire = Wire::connect(broker.addr);
    let d = describe(&mut wire, "tx-v2");
    assert_eq!(d.transaction_state.as_str(), "CompleteCommit");
    assert_eq!(
        d.producer_epoch, 5,
        "one abort and four commits, each bumping the epoch granted at init (0)"
    );
    // The output's markers carry the bumped epochs: the last one is the producer's epoch.
    let r: DescribeProducersResponse = wire.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(name(&output))
            .with_partition_indexes(vec![0])]),
    );
    let producers = &r.topics[0].partitions[0].active_producers;
    let ours = producers
        .iter()
        .find(|p| p.producer_id == d.producer_id)
        .expect("the loop's producer wrote the output");
    assert_eq!(
        (ours.producer_epoch, ours.current_txn_start_offset),
        (5, -1)
    );
}
