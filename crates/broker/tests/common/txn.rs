//! Transactional requests over a raw [`Wire`], shared by the transaction tests
//! (`admin_txn.rs`, `txn_v2.rs`): the batches, InitProducerId, AddPartitionsToTxn v3, EndTxn
//! and the read_committed fetch they drive the coordinator with; the requests alone for the
//! cluster's (tests/cluster/txn.rs), which sends them to a coordinator that moves.

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::*;
use oncelog::format::BatchBuilder;

use super::wire::{fetch_request, str_bytes as s, topic_name as name, Wire};

/// Record timestamps of the batches these tests write.
pub const TS: i64 = 1_700_000_000_000;

/// A batch of `n` records from producer (id, epoch) at `sequence`, timestamps `TS..TS + n`.
pub fn batch(pid: i64, epoch: i16, sequence: i32, n: usize, transactional: bool) -> Bytes {
    let mut builder = BatchBuilder::new()
        .partition_leader_epoch(0)
        .producer(pid, epoch, sequence)
        .transactional(transactional);
    for i in 0..n {
        builder.append(TS + i as i64, None, Some(b"value"), &[]);
    }
    Bytes::from(builder.build().unwrap())
}

/// InitProducerId at `version` for transactional id `id`, which must be granted: the
/// (producer id, epoch).
pub fn init_txn(wire: &mut Wire, version: i16, id: &str, timeout_ms: i32) -> (i64, i16) {
    let r: InitProducerIdResponse = wire.call(
        ApiKey::InitProducerId,
        version,
        &init_txn_request(id, timeout_ms),
    );
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

/// InitProducerId for transactional id `id`, a new producer (no id, no epoch yet).
pub fn init_txn_request(id: &str, timeout_ms: i32) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// AddPartitionsToTxn v3 of `parts` of `topic`, every one of which must be answered and added.
pub fn add_partitions(
    wire: &mut Wire,
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    parts: &[i32],
) {
    let r: AddPartitionsToTxnResponse = wire.call(
        ApiKey::AddPartitionsToTxn,
        3,
        &add_partitions_request(id, (pid, epoch), topic, parts),
    );
    let results = &r.results_by_topic_v3_and_below[0].results_by_partition;
    assert_eq!(results.len(), parts.len());
    for p in results {
        assert_eq!(p.partition_error_code, 0);
    }
}

/// AddPartitionsToTxn (v3 and below: the client adds them) of `parts` of `topic` to the
/// transaction of producer (id, epoch).
pub fn add_partitions_request(
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    parts: &[i32],
) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s(id)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(topic))
            .with_partitions(parts.to_vec())])
}

/// EndTxn at `version`: (error, producer id, epoch) as answered (-1, -1 below v5).
pub fn end_txn(
    wire: &mut Wire,
    version: i16,
    id: &str,
    (pid, epoch): (i64, i16),
    commit: bool,
) -> (i16, i64, i16) {
    let r: EndTxnResponse = wire.call(
        ApiKey::EndTxn,
        version,
        &end_txn_request(id, (pid, epoch), commit),
    );
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// EndTxn of producer (id, epoch)'s transaction: a commit, or an abort.
pub fn end_txn_request(id: &str, (pid, epoch): (i64, i16), commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit)
}

/// A read_committed fetch of `topic`-`partition` from offset 0, which must be answered
/// without error: the partition's answer (its last stable offset, high watermark and aborted
/// transactions).
pub fn fetch_committed(wire: &mut Wire, topic: &str, partition: i32) -> PartitionData {
    let mut r: FetchResponse = wire.call(
        ApiKey::Fetch,
        11,
        &read_committed_request(topic, partition, 0),
    );
    let p = r.responses.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    p
}

/// A consumer's read_committed Fetch of `topic`-`partition` from `offset`, answered at once,
/// up to 1 MiB.
pub fn read_committed_request(topic: &str, partition: i32, offset: i64) -> FetchRequest {
    fetch_request(topic, partition, offset).with_isolation_level(1)
}
