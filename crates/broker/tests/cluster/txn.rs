//! The transaction coordinator in cluster mode (docs/design.md, "The transaction coordinator
//! in a cluster"): three `oncelog-broker` processes, a topic of three partitions replicated on
//! all three, and a transactional producer (raw protocol, transaction version 1 as the cluster
//! finalizes it) that commits and aborts transactions while the coordinator's node or a
//! partition leader is SIGKILLed in the middle of a transaction, round after round
//! (`ONCELOG_CLUSTER_ROUNDS`, default 3). Every committed record is in the logs once, inside
//! a committed transaction; no aborted record is; no transaction is left open (the last
//! stable offset reaches the high watermark), and a read_committed fetch serves exactly the
//! committed records.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::cluster::*;
use crate::common::txn::{
    add_partitions_request, end_txn_request, init_txn_request, read_committed_request,
};
use crate::common::wire::str_bytes;
use bytes::Bytes;
use kafka_protocol::messages::*;
use oncelog::format::{BatchBuilder, BatchIter, RecordBatch};

const CONCURRENT_TRANSACTIONS: i16 = 51;

/// A transactional producer over the raw protocol: it finds the coordinator
/// (FindCoordinator, key type 1) and follows it through NOT_COORDINATOR,
/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and dead nodes, and sends each batch
/// to the partition's leader, re-sent with the same sequence after a leader move.
struct TxnProducer {
    id: String,
    producer_id: i64,
    epoch: i16,
    next_sequence: BTreeMap<i32, i32>,
    leaders: BTreeMap<i32, i32>,
    /// The coordinators that answered, in order (a move appends).
    coordinators: Vec<i32>,
}

impl TxnProducer {
    fn init(c: &Cluster, id: &str) -> TxnProducer {
        let mut p = TxnProducer {
            id: id.to_string(),
            producer_id: -1,
            epoch: -1,
            next_sequence: BTreeMap::new(),
            leaders: c.leaders(TOPIC, PARTITIONS),
            coordinators: Vec::new(),
        };
        let granted: InitProducerIdResponse = p.coordinated(c, "InitProducerId", |s, id| {
            let r: InitProducerIdResponse =
                call(s, ApiKey::InitProducerId, 4, &init_txn_request(id, 60_000))?;
            Ok((r.error_code, r))
        });
        p.producer_id = granted.producer_id.0;
        p.epoch = granted.producer_epoch;
        p
    }

    /// Sends a coordinator request until it is answered without a coordinator error, looking
    /// the coordinator up again after each; any other error fails the test.
    fn coordinated<R>(
        &mut self,
        c: &Cluster,
        what: &str,
        send: impl Fn(&mut TcpStream, &str) -> io::Result<(i16, R)>,
    ) -> R {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(Instant::now() < deadline, "{what} never answered");
            let answer = c.txn_coordinator(&self.id).and_then(|node| {
                if self.coordinators.last() != Some(&node) {
                    self.coordinators.push(node);
                }
                let addr = c.kafka[&node];
                connect(addr).and_then(|mut s| send(&mut s, &self.id))
            });
            match answer {
                Ok((0, r)) => return r,
                Ok((
                    COORDINATOR_LOAD_IN_PROGRESS
                    | COORDINATOR_NOT_AVAILABLE
                    | NOT_COORDINATOR
                    | CONCURRENT_TRANSACTIONS
                    | REQUEST_TIMED_OUT,
                    _,
                )) => {}
                Ok((code, _)) => panic!("{what}: error {code}"),
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn add_partitions(&mut self, c: &Cluster) {
        let (pid, epoch) = (self.producer_id, self.epoch);
        self.coordinated(c, "AddPartitionsToTxn", |s, id| {
            let all: Vec<i32> = (0..PARTITIONS).collect();
            let r: AddPartitionsToTxnResponse = call(
                s,
                ApiKey::AddPartitionsToTxn,
                3,
                &add_partitions_request(id, (pid, epoch), TOPIC, &all),
            )?;
            let codes: BTreeSet<i16> = r.results_by_topic_v3_and_below[0]
                .results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
                .collect();
            Ok((codes.into_iter().max().unwrap_or(0), ()))
        });
    }

    fn end(&mut self, c: &Cluster, commit: bool) {
        let (pid, epoch) = (self.producer_id, self.epoch);
        self.coordinated(c, "EndTxn", |s, id| {
            let r: EndTxnResponse = call(
                s,
                ApiKey::EndTxn,
                3,
                &end_txn_request(id, (pid, epoch), commit),
            )?;
            Ok((r.error_code, ()))
        });
    }

    /// Produces `values` to `partition` as one transactional batch, until it is acknowledged.
    fn produce(&mut self, c: &Cluster, partition: i32, values: &[String]) {
        let sequence = *self.next_sequence.get(&partition).unwrap_or(&0);
        let mut b = BatchBuilder::new()
            .producer(self.producer_id, self.epoch, sequence)
            .transactional(true);
        for v in values {
            b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
        }
        let records = Bytes::from(b.build().unwrap());
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(
                Instant::now() < deadline,
                "partition {partition} never acked"
            );
            let leader = self.leaders.get(&partition).copied().unwrap_or(1);
            let answer = connect(c.kafka[&leader]).and_then(|mut s| {
                call::<_, ProduceResponse>(
                    &mut s,
                    ApiKey::Produce,
                    9,
                    &produce_request(partition, records.clone())
                        .with_transactional_id(Some(TransactionalId(str_bytes(&self.id)))),
                )
            });
            match answer.map(|r| r.responses[0].partition_responses[0].error_code) {
                Ok(0) => {
                    self.next_sequence
                        .insert(partition, sequence + values.len() as i32);
                    return;
                }
                Ok(code) => assert!(
                    retriable_produce_error(code),
                    "partition {partition} seq {sequence}: error {code}"
                ),
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(50));
            self.leaders.extend(newest_leaders(c));
        }
    }
}

/// What a partition's log says, read as a read_committed consumer reads it: the values of
/// committed transactions (and of non-transactional batches), in log order, and the values of
/// aborted ones.
fn committed_and_aborted(bytes: &[u8]) -> (Vec<String>, Vec<String>) {
    let (mut committed, mut aborted) = (Vec::new(), Vec::new());
    let mut open: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for item in BatchIter::new(bytes) {
        let (_, b) = item.unwrap();
        b.verify_crc().unwrap();
        let values = values_of(&b);
        if b.is_control() {
            // Kafka's control record key: version (i16), type (i16): 0 abort, 1 commit. The
            // raft crate's own heads (types 100+) end nothing.
            let kind = values.first().map(String::as_str);
            let ended = match kind {
                Some("0") => open.remove(&b.producer_id()).map(|v| (false, v)),
                Some("1") => open.remove(&b.producer_id()).map(|v| (true, v)),
                _ => None,
            };
            match ended {
                Some((true, v)) => committed.extend(v),
                Some((false, v)) => aborted.extend(v),
                None => {}
            }
        } else if b.is_transactional() {
            open.entry(b.producer_id()).or_default().extend(values);
        } else {
            committed.extend(values);
        }
    }
    assert!(open.is_empty(), "transactions left open: {open:?}");
    (committed, aborted)
}

/// The values of a data batch, or the control type of a control batch (as its one string).
fn values_of(b: &RecordBatch<'_>) -> Vec<String> {
    let records = b.records_buf_limited(1 << 24).unwrap();
    b.iter_records(&records)
        .map(|r| {
            let r = r.unwrap();
            if b.is_control() {
                let key = r.key.unwrap();
                i16::from_be_bytes([key[2], key[3]]).to_string()
            } else {
                String::from_utf8(r.value.unwrap().to_vec()).unwrap()
            }
        })
        .collect()
}

/// A read_committed fetch of every partition from its leader, from offset 0 up to the last
/// stable offset: the values a read_committed consumer gets (aborted transactions' records
/// dropped by the answer's aborted list), and the answer's last stable offset and high
/// watermark.
fn read_committed(c: &Cluster, leader: i32, partition: i32) -> (Vec<String>, i64, i64) {
    let mut s = connect(c.kafka[&leader]).unwrap();
    let (mut values, mut offset) = (Vec::new(), 0);
    let mut aborted_firsts: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut aborting: BTreeSet<i64> = BTreeSet::new();
    loop {
        let r: FetchResponse = call(
            &mut s,
            ApiKey::Fetch,
            11,
            &read_committed_request(TOPIC, partition, offset),
        )
        .unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "read_committed fetch of {partition}");
        for a in p.aborted_transactions.iter().flatten() {
            aborted_firsts
                .entry(a.first_offset)
                .or_default()
                .push(a.producer_id.0);
        }
        let records = p.records.clone().unwrap_or_default();
        if records.is_empty() {
            // A consumer's position reaches the last stable offset: the batches it cannot
            // read (markers, raft's heads) are served too, for it to move past them.
            assert_eq!(
                offset, p.last_stable_offset,
                "partition {partition}: read up to the LSO"
            );
            return (values, p.last_stable_offset, p.high_watermark);
        }
        // Kafka's consumer: a batch of a producer whose aborted transaction began at or before
        // it is skipped until that producer's abort marker.
        for item in BatchIter::new(&records) {
            let (_, b) = item.unwrap();
            offset = b.last_offset() + 1;
            for (_, producers) in aborted_firsts.range(..=b.base_offset()) {
                aborting.extend(producers.iter().copied());
            }
            aborted_firsts.retain(|first, _| *first > b.base_offset());
            if b.is_control() {
                if values_of(&b).first().map(String::as_str) == Some("0") {
                    aborting.remove(&b.producer_id());
                }
                continue;
            }
            if b.is_transactional() && aborting.contains(&b.producer_id()) {
                continue;
            }
            values.extend(values_of(&b));
        }
    }
}

/// Transactions committed and aborted while, in each round, the coordinator's node (even
/// rounds) or a partition's leader (odd rounds) is SIGKILLed after the transaction's records
/// are written and before its EndTxn: the EndTxn goes to whichever node coordinates next,
/// which loaded the transaction from the replicated state and writes its markers through the
/// partitions' new leaders. Each committed record is then read once, no aborted one.
#[test]
fn transactions_commit_and_abort_through_coordinator_and_leader_kills() {
    let rounds = rounds(3);
    let mut c = Cluster::start_with_topic();
    let mut p = TxnProducer::init(&c, "copier-1");
    assert_eq!(
        p.producer_id % 1024,
        i64::from(p.coordinators[0]),
        "ids carry the node"
    );
    let (mut committed, mut aborted) = (BTreeSet::new(), BTreeSet::new());
    for round in 0..rounds {
        let write = |p: &mut TxnProducer, c: &Cluster, kind: &str| {
            p.add_partitions(c);
            let mut written = Vec::new();
            for part in 0..PARTITIONS {
                let values: Vec<String> = (0..4)
                    .map(|i| format!("r{round}-{kind}-p{part}-{i}"))
                    .collect();
                p.produce(c, part, &values);
                written.extend(values);
            }
            written
        };
        let values = write(&mut p, &c, "commit");
        let victim = if round % 2 == 0 {
            c.txn_coordinator(&p.id).unwrap()
        } else {
            c.leaders(TOPIC, PARTITIONS)[&(round as i32 % PARTITIONS)]
        };
        eprintln!(
            "round {round}: SIGKILL node {victim} ({}) inside a transaction",
            if round % 2 == 0 {
                "the coordinator"
            } else {
                "a partition leader"
            }
        );
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        p.end(&c, true);
        committed.extend(values);
        c.launch(victim);
        let values = write(&mut p, &c, "abort");
        p.end(&c, false);
        aborted.extend(values);
        c.leaders(TOPIC, PARTITIONS);
    }
    eprintln!("coordinators answering, in order: {:?}", p.coordinators);
    assert!(p.coordinators.len() > 1, "the coordinator never moved");

    let leaders = c.leaders(TOPIC, PARTITIONS);
    let mut in_logs = Vec::new();
    let mut served = Vec::new();
    for part in 0..PARTITIONS {
        let (bytes, high_watermark) = fetch_all(&c, leaders[&part], part);
        let (ok, gone) = committed_and_aborted(&bytes);
        assert!(
            gone.iter().all(|v| aborted.contains(v)),
            "partition {part}: a committed record aborted: {gone:?}"
        );
        in_logs.extend(ok);
        let (values, lso, hw) = read_committed(&c, leaders[&part], part);
        assert_eq!(
            (lso, hw),
            (high_watermark, high_watermark),
            "partition {part}: a transaction left open holds the last stable offset back"
        );
        served.extend(values);
    }
    for (what, values) in [("the logs", &in_logs), ("read_committed", &served)] {
        let mut seen = BTreeSet::new();
        for v in values {
            assert!(!aborted.contains(v), "{what}: aborted record {v} committed");
            assert!(seen.insert(v.clone()), "{what}: {v} twice");
        }
        assert_eq!(seen, committed, "{what}: committed records");
    }
}
