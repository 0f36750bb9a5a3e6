//! Cluster mode (docs/design.md, "A cluster of brokers"): three `oncelog-broker` processes on
//! loopback, a topic of three partitions replicated on all three, an idempotent producer
//! (raw protocol: producer id, epoch and sequences from InitProducerId) producing while the
//! leader of a partition is SIGKILLed and restarted, round after round
//! (`ONCELOG_CLUSTER_ROUNDS`, default 3). Every acknowledged batch is read back once from each
//! partition's leader at its acknowledged offset, offsets are dense, and every replica's log
//! holds the same batches. The same with librdkafka's and Kafka's Java idempotent producers. Plus Kafka's
//! answers: Metadata's shape, NOT_LEADER_OR_FOLLOWER from
//! a follower with the leader named, NOT_CONTROLLER, a refused replication factor, and the
//! refusals of what is not replicated yet.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::wire::{str_bytes, topic_name};
use common::BrokerProcess;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
use oncelog::format::{BatchBuilder, BatchIter};

const TOPIC: &str = "events";
const PARTITIONS: i32 = 3;
const RECORDS_PER_BATCH: i32 = 4;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const REQUEST_TIMED_OUT: i16 = 7;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const NOT_CONTROLLER: i16 = 41;
const INVALID_REQUEST: i16 = 42;
const FENCED_LEADER_EPOCH: i16 = 74;

/// A request and its answer over a plain stream; any I/O failure (a killed broker) is an error,
/// never a panic.
fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &Req,
) -> io::Result<Resp> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(str_bytes("cluster-test")))
        .encode(&mut buf, api.request_header_version(version))
        .map_err(io::Error::other)?;
    body.encode(&mut buf, version).map_err(io::Error::other)?;
    stream.write_all(&(buf.len() as i32).to_be_bytes())?;
    stream.write_all(&buf)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame)?;
    let mut frame = Bytes::from(frame);
    ResponseHeader::decode(&mut frame, Resp::header_version(version)).map_err(io::Error::other)?;
    Resp::decode(&mut frame, version).map_err(io::Error::other)
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(s)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Three broker processes of one cluster.
struct Cluster {
    spec: String,
    kafka: BTreeMap<i32, SocketAddr>,
    dirs: BTreeMap<i32, PathBuf>,
    nodes: BTreeMap<i32, BrokerProcess>,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let mut kafka = BTreeMap::new();
        let mut entries = Vec::new();
        for id in 1..=3 {
            let (k, r) = (free_port(), free_port());
            kafka.insert(id, SocketAddr::from(([127, 0, 0, 1], k)));
            entries.push(format!("{id}=127.0.0.1:{k}:{r}"));
        }
        let spec = entries.join(",");
        let dirs: BTreeMap<i32, PathBuf> = (1..=3)
            .map(|id| (id, tmp.path().join(format!("node-{id}"))))
            .collect();
        let mut c = Cluster {
            spec,
            kafka,
            dirs,
            nodes: BTreeMap::new(),
            _tmp: tmp,
        };
        for id in 1..=3 {
            c.launch(id);
        }
        c
    }

    fn launch(&mut self, id: i32) {
        let node = BrokerProcess::start(
            &self.dirs[&id],
            &["--node-id", &id.to_string(), "--cluster", &self.spec],
        );
        assert_eq!(node.addr, self.kafka[&id]);
        self.nodes.insert(id, node);
    }

    fn metadata(&self, id: i32, topics: Option<&[&str]>) -> io::Result<MetadataResponse> {
        let mut s = connect(self.kafka[&id])?;
        let topics = topics.map(|t| {
            t.iter()
                .map(|n| {
                    metadata_request::MetadataRequestTopic::default().with_name(Some(topic_name(n)))
                })
                .collect()
        });
        call(
            &mut s,
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(topics),
        )
    }

    /// The controller once every running node names the same one and it is node 1, the
    /// metadata group's preferred leader (the balancer moves the group there, so it stays).
    fn controller(&self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let named: BTreeSet<i32> = self
                .nodes
                .keys()
                .map(|id| self.metadata(*id, None).map_or(-1, |m| m.controller_id.0))
                .collect();
            if named == BTreeSet::from([1]) {
                return 1;
            }
            assert!(Instant::now() < deadline, "no controller agreed: {named:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn create_topic(
        &self,
        on: i32,
        name: &str,
        partitions: i32,
        factor: i16,
    ) -> io::Result<CreateTopicsResponse> {
        let mut s = connect(self.kafka[&on])?;
        call(
            &mut s,
            ApiKey::CreateTopics,
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(topic_name(name))
                    .with_num_partitions(partitions)
                    .with_replication_factor(factor)]),
        )
    }

    /// Each partition's leader as every running node reports it, once they agree and every
    /// replica is in step.
    fn leaders(&self, topic: &str, partitions: i32) -> BTreeMap<i32, i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut views = Vec::new();
            for id in self.nodes.keys() {
                if let Ok(m) = self.metadata(*id, Some(&[topic])) {
                    let t = &m.topics[0];
                    if t.error_code == 0 && t.partitions.len() == partitions as usize {
                        views.push(
                            t.partitions
                                .iter()
                                .map(|p| (p.partition_index, p.leader_id.0))
                                .collect::<BTreeMap<_, _>>(),
                        );
                    }
                }
            }
            if views.len() == self.nodes.len()
                && views.windows(2).all(|w| w[0] == w[1])
                && views[0].values().all(|l| *l >= 0)
            {
                return views.remove(0);
            }
            assert!(Instant::now() < deadline, "leaders not agreed: {views:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn batch(producer_id: i64, partition: i32, sequence: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(producer_id, 0, sequence);
    for r in 0..RECORDS_PER_BATCH {
        let value = format!("p{partition}-s{}", sequence + r);
        b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    }
    Bytes::from(b.build().unwrap())
}

fn produce_request(version_partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(version_partition)
                .with_records(Some(records))])])
}

/// An idempotent producer over the raw protocol: one batch in flight, sent to the leader it
/// last learned, re-sent with the same sequence after NOT_LEADER_OR_FOLLOWER, a timeout or a
/// lost connection.
struct Producer {
    producer_id: i64,
    next_sequence: BTreeMap<i32, i32>,
    leaders: BTreeMap<i32, i32>,
    streams: BTreeMap<i32, TcpStream>,
    /// Per partition, (sequence, base offset) of each acknowledged batch.
    acked: BTreeMap<i32, Vec<(i32, i64)>>,
    retries: usize,
}

impl Producer {
    fn new(c: &Cluster) -> Producer {
        let mut s = connect(c.kafka[&1]).unwrap();
        let granted: InitProducerIdResponse = call(
            &mut s,
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
        assert_eq!(granted.error_code, 0);
        assert_eq!(
            granted.producer_id.0 % 1024,
            1,
            "ids carry the granting node"
        );
        Producer {
            producer_id: granted.producer_id.0,
            next_sequence: BTreeMap::new(),
            leaders: c.leaders(TOPIC, PARTITIONS),
            streams: BTreeMap::new(),
            acked: BTreeMap::new(),
            retries: 0,
        }
    }

    /// Produces the next batch of `partition` until it is acknowledged.
    fn produce(&mut self, c: &Cluster, partition: i32) {
        let sequence = *self.next_sequence.get(&partition).unwrap_or(&0);
        let records = batch(self.producer_id, partition, sequence);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(
                Instant::now() < deadline,
                "partition {partition} seq {sequence} never acknowledged"
            );
            let leader = self.leaders.get(&partition).copied().unwrap_or(1);
            match self.send(c, leader, partition, records.clone()) {
                Ok((0, base)) => {
                    self.acked
                        .entry(partition)
                        .or_default()
                        .push((sequence, base));
                    self.next_sequence
                        .insert(partition, sequence + RECORDS_PER_BATCH);
                    return;
                }
                Ok((code, _)) => assert!(
                    matches!(
                        code,
                        NOT_LEADER_OR_FOLLOWER
                            | REQUEST_TIMED_OUT
                            | LEADER_NOT_AVAILABLE
                            | NOT_ENOUGH_REPLICAS
                            | UNKNOWN_TOPIC_OR_PARTITION
                    ),
                    "partition {partition} seq {sequence}: error {code}"
                ),
                Err(_) => {
                    self.streams.remove(&leader);
                }
            }
            self.retries += 1;
            std::thread::sleep(Duration::from_millis(50));
            self.refresh(c);
        }
    }

    fn send(
        &mut self,
        c: &Cluster,
        leader: i32,
        partition: i32,
        records: Bytes,
    ) -> io::Result<(i16, i64)> {
        let s = match self.streams.entry(leader) {
            std::collections::btree_map::Entry::Occupied(s) => s.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(connect(c.kafka[&leader])?),
        };
        let r: ProduceResponse = call(s, ApiKey::Produce, 9, &produce_request(partition, records))?;
        let p = &r.responses[0].partition_responses[0];
        Ok((p.error_code, p.base_offset))
    }

    /// Learns the leaders from any node that answers.
    fn refresh(&mut self, c: &Cluster) {
        for id in c.kafka.keys() {
            if let Ok(m) = c.metadata(*id, Some(&[TOPIC])) {
                for p in &m.topics[0].partitions {
                    if p.leader_id.0 >= 0 {
                        self.leaders.insert(p.partition_index, p.leader_id.0);
                    }
                }
                return;
            }
        }
    }
}

/// Every batch of a partition, fetched from its leader up to the high watermark.
fn fetch_all(c: &Cluster, leader: i32, partition: i32) -> (Vec<u8>, i64) {
    let mut s = connect(c.kafka[&leader]).unwrap();
    let mut bytes = Vec::new();
    let mut offset = 0;
    loop {
        let r: FetchResponse = call(
            &mut s,
            ApiKey::Fetch,
            12,
            &FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(TOPIC))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])]),
        )
        .unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!(
            p.error_code, 0,
            "fetch of partition {partition} from its leader {leader}"
        );
        let records = p.records.clone().unwrap_or_default();
        if records.is_empty() {
            assert_eq!(offset, p.high_watermark, "read up to the high watermark");
            return (bytes, p.high_watermark);
        }
        for item in BatchIter::new(&records) {
            let (_, b) = item.unwrap();
            offset = b.last_offset() + 1;
        }
        bytes.extend_from_slice(&records);
    }
}

/// The batches of `bytes`: (base offset, last offset, control, producer id, base sequence).
fn batches(bytes: &[u8]) -> Vec<(i64, i64, bool, i64, i32)> {
    BatchIter::new(bytes)
        .map(|item| {
            let (_, b) = item.unwrap();
            b.verify_crc().unwrap();
            (
                b.base_offset(),
                b.last_offset(),
                b.is_control(),
                b.producer_id(),
                b.base_sequence(),
            )
        })
        .collect()
}

/// A replica's log bytes below `end`, read from its directory after the node stopped.
fn replica_bytes(dir: &Path, partition: i32, end: i64) -> Vec<u8> {
    let log = oncelog::Log::open(
        dir.join(format!("{TOPIC}-{partition}")),
        oncelog::LogConfig::default(),
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut offset = 0;
    while offset < end {
        let read = log.read(offset, 1 << 20).unwrap();
        assert!(
            !read.is_empty(),
            "{}: ends at {offset} < {end}",
            dir.display()
        );
        for item in BatchIter::new(&read) {
            let (_, b) = item.unwrap();
            if b.base_offset() >= end {
                break;
            }
            offset = b.last_offset() + 1;
            bytes.extend_from_slice(b.as_bytes());
        }
    }
    bytes
}

#[test]
fn acknowledged_records_survive_leader_kills_once_each_and_replicas_agree() {
    let rounds: usize = std::env::var("ONCELOG_CLUSTER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(
        created.topics[0].error_code, 0,
        "{:?}",
        created.topics[0].error_message
    );
    let mut producer = Producer::new(&c);
    let mut next_partition = 0;
    let mut produce_for = |c: &Cluster, producer: &mut Producer, time: Duration| {
        let until = Instant::now() + time;
        while Instant::now() < until {
            producer.produce(c, next_partition);
            next_partition = (next_partition + 1) % PARTITIONS;
        }
    };
    produce_for(&c, &mut producer, Duration::from_millis(500));
    for round in 0..rounds {
        // The leader of one partition (each round another) dies and comes back while the
        // producer goes on.
        let partition = round as i32 % PARTITIONS;
        let victim = c.leaders(TOPIC, PARTITIONS)[&partition];
        eprintln!("round {round}: SIGKILL node {victim}, leader of partition {partition}");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        produce_for(&c, &mut producer, Duration::from_millis(1500));
        c.launch(victim);
        produce_for(&c, &mut producer, Duration::from_millis(500));
        // Back in step before the next kill: every node knows every leader.
        c.leaders(TOPIC, PARTITIONS);
    }
    eprintln!(
        "acknowledged {} batches, {} retries",
        producer.acked.values().map(Vec::len).sum::<usize>(),
        producer.retries
    );
    assert!(producer.retries > 0, "the kills were not felt");

    let leaders = c.leaders(TOPIC, PARTITIONS);
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (bytes, high_watermark) = fetch_all(&c, leaders[&p], p);
        let found = batches(&bytes);
        // Dense: each batch starts where the one before it ended (the raft heads are control
        // batches among the data).
        for w in found.windows(2) {
            assert_eq!(
                w[1].0,
                w[0].1 + 1,
                "partition {p}: a gap or overlap at {:?}",
                w[1]
            );
        }
        let data: Vec<_> = found.iter().filter(|b| !b.2).collect();
        let sequences: BTreeSet<i32> = data.iter().map(|b| b.4).collect();
        assert_eq!(
            sequences.len(),
            data.len(),
            "partition {p}: a batch stored twice"
        );
        let acked = &producer.acked[&p];
        for (sequence, base) in acked {
            assert!(
                data.iter()
                    .any(|b| b.4 == *sequence && b.0 == *base && b.3 == producer.producer_id),
                "partition {p}: acknowledged seq {sequence} at {base} not found"
            );
        }
        // Nothing beyond what was acknowledged but the batch in flight at the end (none: the
        // producer waits for each).
        assert_eq!(
            data.len(),
            acked.len(),
            "partition {p}: unacknowledged batches stored"
        );
        ends.insert(p, (high_watermark, bytes));
    }

    // Every replica holds the same batches: stop the nodes cleanly, read their logs.
    std::thread::sleep(Duration::from_secs(1));
    for node in c.nodes.values_mut() {
        assert!(node.terminate().success());
    }
    for (p, (end, leader_bytes)) in &ends {
        for (id, dir) in &c.dirs {
            let bytes = replica_bytes(dir, *p, *end);
            assert!(
                bytes == *leader_bytes,
                "node {id} partition {p}: another log than the leader's"
            );
        }
    }
}

#[test]
fn a_cluster_answers_as_kafka_does() {
    let c = Cluster::start();
    let controller = c.controller();
    let other = (1..=3).find(|id| *id != controller).unwrap();

    // CreateTopics elsewhere than on the controller: NOT_CONTROLLER, naming it.
    let r = c.create_topic(other, "t", 2, 3).unwrap();
    assert_eq!(r.topics[0].error_code, NOT_CONTROLLER);
    assert!(r.topics[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains(&controller.to_string()));
    // A replication factor other than 1 or the cluster's size.
    let r = c.create_topic(controller, "t", 2, 2).unwrap();
    assert_eq!(r.topics[0].error_code, INVALID_REPLICATION_FACTOR);
    assert!(r.topics[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains("replication factor 2"));
    let r = c.create_topic(controller, "t", 2, 3).unwrap();
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(
        (r.topics[0].num_partitions, r.topics[0].replication_factor),
        (2, 3)
    );
    let r = c.create_topic(controller, "single", 3, 1).unwrap();
    assert_eq!(r.topics[0].error_code, 0);

    // Metadata: every node, the controller, each partition's leader, epoch, replicas, isr.
    // (Once each partition is led by its preferred replica, where the balancer leaves it.)
    let deadline = Instant::now() + Duration::from_secs(30);
    let leaders = loop {
        let leaders = c.leaders("t", 2);
        if leaders == BTreeMap::from([(0, 1), (1, 2)]) {
            break leaders;
        }
        assert!(
            Instant::now() < deadline,
            "not led by the preferred replicas: {leaders:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let m = c.metadata(other, None).unwrap();
    let brokers: BTreeMap<i32, i32> = m.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    assert_eq!(brokers.len(), 3);
    for (id, addr) in &c.kafka {
        assert_eq!(brokers[id], i32::from(addr.port()));
    }
    assert_eq!(m.controller_id.0, controller);
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("t"))
        .unwrap();
    assert!(!t.topic_id.is_nil());
    for p in &t.partitions {
        assert_eq!(p.error_code, 0);
        assert_eq!(p.leader_id.0, leaders[&p.partition_index]);
        assert!(p.leader_epoch >= 1, "the raft term: {}", p.leader_epoch);
        let replicas: BTreeSet<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
        assert_eq!(replicas, BTreeSet::from([1, 2, 3]));
        assert!(p.isr_nodes.iter().any(|b| b.0 == p.leader_id.0));
    }
    // Preferred leaders go round: partition p's replicas start at node p+1.
    let preferred: Vec<i32> = t.partitions.iter().map(|p| p.replica_nodes[0].0).collect();
    assert_eq!(preferred, vec![1, 2]);
    let single = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("single"))
        .unwrap();
    assert!(single.partitions.iter().all(|p| p.replica_nodes.len() == 1));

    // Produce and Fetch on a follower: NOT_LEADER_OR_FOLLOWER with the leader and where it is.
    let leader = leaders[&0];
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let mut s = connect(c.kafka[&follower]).unwrap();
    let records = {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000, None, Some(b"v"), &[]);
        Bytes::from(b.build().unwrap())
    };
    let mut request = produce_request(0, records.clone());
    request.topic_data[0].name = topic_name("t");
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 10, &request).unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(p.current_leader.leader_id.0, leader);
    assert!(p.current_leader.leader_epoch >= 1);
    assert_eq!(r.node_endpoints.len(), 1);
    assert_eq!(r.node_endpoints[0].port, i32::from(c.kafka[&leader].port()));
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name("t"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch).unwrap();
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(
        r.responses[0].partitions[0].current_leader.leader_id.0,
        leader
    );

    // On the leader the batch is written and read back below the high watermark.
    let mut s = connect(c.kafka[&leader]).unwrap();
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 10, &request).unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &fetch).unwrap();
    let part = &r.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let data: Vec<_> = batches(part.records.as_deref().unwrap())
        .into_iter()
        .filter(|b| !b.2)
        .collect();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].0, p.base_offset);
    assert_eq!(part.high_watermark, p.base_offset + 1);

    // OffsetForLeaderEpoch on the leader, from its epoch cache; a stale current epoch is
    // fenced; a follower sends the client to the leader.
    let epochs = |current: i32, epoch: i32| {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic_name("t"))
                    .with_partitions(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(current)
                            .with_leader_epoch(epoch),
                    ]),
            ])
    };
    let m = c.metadata(leader, Some(&["t"])).unwrap();
    let term_now = m.topics[0].partitions[0].leader_epoch;
    let r: OffsetForLeaderEpochResponse = call(
        &mut s,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(term_now, term_now),
    )
    .unwrap();
    let e = &r.topics[0].partitions[0];
    assert_eq!(e.error_code, 0);
    assert_eq!(e.leader_epoch, term_now);
    assert!(e.end_offset > p.base_offset, "{e:?}");
    let r: OffsetForLeaderEpochResponse = call(
        &mut s,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(term_now - 1, term_now),
    )
    .unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, FENCED_LEADER_EPOCH);
    // A fetch naming an older leader epoch is fenced too.
    let mut stale = fetch.clone();
    stale.topics[0].partitions[0].current_leader_epoch = term_now - 1;
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &stale).unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, FENCED_LEADER_EPOCH);
    stale.topics[0].partitions[0].current_leader_epoch = term_now;
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 12, &stale).unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let mut sf = connect(c.kafka[&follower]).unwrap();
    let r: OffsetForLeaderEpochResponse = call(
        &mut sf,
        ApiKey::OffsetForLeaderEpoch,
        4,
        &epochs(-1, term_now),
    )
    .unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);

    // An idempotent producer's retry of a written batch: NONE with the original offset.
    let granted: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .unwrap();
    assert_eq!(granted.producer_id.0 % 1024, i64::from(leader));
    let mut retried = produce_request(1, batch(granted.producer_id.0, 1, 0));
    retried.topic_data[0].name = topic_name("t");
    let mut s1 = connect(c.kafka[&leaders[&1]]).unwrap();
    let first: ProduceResponse = call(&mut s1, ApiKey::Produce, 9, &retried).unwrap();
    let again: ProduceResponse = call(&mut s1, ApiKey::Produce, 9, &retried).unwrap();
    let (first, again) = (
        &first.responses[0].partition_responses[0],
        &again.responses[0].partition_responses[0],
    );
    assert_eq!((first.error_code, again.error_code), (0, 0));
    assert_eq!(again.base_offset, first.base_offset);
    // A transactional producer finds no coordinator.
    let r: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(str_bytes("tx"))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .unwrap();
    assert_eq!(r.error_code, COORDINATOR_NOT_AVAILABLE);

    // What is not replicated yet: typed refusals, and not advertised.
    let r: FindCoordinatorResponse = call(
        &mut s,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![str_bytes("g")]),
    )
    .unwrap();
    assert_eq!(r.coordinators[0].error_code, COORDINATOR_NOT_AVAILABLE);
    let r: DeleteTopicsResponse = call(
        &mut s,
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsRequest::default().with_topics(vec![
            delete_topics_request::DeleteTopicState::default().with_name(Some(topic_name("t"))),
        ]),
    )
    .unwrap();
    assert_eq!(r.responses[0].error_code, INVALID_REQUEST);
    assert!(r.responses[0]
        .error_message
        .as_deref()
        .unwrap()
        .contains("not replicated"));
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .unwrap();
    let advertised: BTreeSet<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
    assert!(advertised.contains(&(ApiKey::Produce as i16)));
    assert!(!advertised.contains(&(ApiKey::JoinGroup as i16)));
    assert!(!advertised.contains(&(ApiKey::EndTxn as i16)));
}

/// librdkafka's idempotent producer (confluent-kafka, acks=all) through SIGKILLs of partition
/// leaders: every message it reports delivered is in the log once, at the offset reported,
/// and no message is stored twice.
#[test]
fn a_real_idempotent_producer_keeps_every_message_through_leader_kills() {
    real_producer_through_leader_kills(common::clients::Client::Confluent);
}

/// Kafka's own Java producer (kafka-clients 4.4, idempotent, acks=all), the same way.
#[test]
fn the_java_producer_keeps_every_message_through_leader_kills() {
    real_producer_through_leader_kills(common::clients::Client::Java);
}

fn real_producer_through_leader_kills(client: common::clients::Client) {
    use common::clients::{Client, Produce};
    let rounds: usize = std::env::var("ONCELOG_CLUSTER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut c = Cluster::start();
    let controller = c.controller();
    let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    c.leaders(TOPIC, PARTITIONS);
    let bootstrap: Vec<String> = c.kafka.values().map(|a| a.to_string()).collect();
    let count = 1500 * rounds.max(1);
    let mut run = client.produce(
        &bootstrap.join(","),
        TOPIC,
        count,
        &Produce {
            wave: 20,
            pace_ms: 20,
            // librdkafka's sticky partitioner would send a wave to one partition.
            spread: client == Client::Confluent,
            ..Produce::default()
        },
    );
    run.wait_delivered(100, Duration::from_secs(60));
    for round in 0..rounds {
        let partition = round as i32 % PARTITIONS;
        let victim = c.leaders(TOPIC, PARTITIONS)[&partition];
        eprintln!("round {round}: SIGKILL node {victim}, leader of partition {partition}");
        c.nodes.get_mut(&victim).unwrap().crash();
        c.nodes.remove(&victim);
        std::thread::sleep(Duration::from_millis(1500));
        c.launch(victim);
        c.leaders(TOPIC, PARTITIONS);
    }
    let delivered = run.delivered(Duration::from_secs(180));
    assert!(delivered.failed.is_empty(), "{:?}", delivered.failed);
    assert_eq!(delivered.offsets.len(), count);

    let leaders = c.leaders(TOPIC, PARTITIONS);
    let mut stored: BTreeMap<String, (i32, i64)> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (bytes, _) = fetch_all(&c, leaders[&p], p);
        for r in oncelog::format::ConsumerRecordIter::new(Bytes::from(bytes), 0) {
            let r = r.unwrap();
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            let at = (p, r.offset);
            if let Some(first) = stored.insert(value.clone(), at) {
                panic!("{value} stored twice: at {first:?} and {at:?}");
            }
        }
    }
    for (i, at) in &delivered.offsets {
        assert_eq!(stored.get(&format!("m-{i}")), Some(at), "message {i}");
    }
    assert_eq!(
        stored.len(),
        count,
        "messages stored that were never reported delivered"
    );

    // librdkafka's consumer (assigned partitions, nothing committed) reads them all, each once.
    if client == Client::Confluent {
        let consumed = client.consume_with(&bootstrap.join(","), TOPIC, count, &["--no-commit"]);
        let mut seen = BTreeSet::new();
        for r in &consumed.records {
            assert_eq!(
                stored.get(&r.value),
                Some(&(r.partition, r.offset)),
                "{r:?}"
            );
            assert!(seen.insert(r.value.clone()), "{} consumed twice", r.value);
        }
        assert_eq!(seen.len(), count);
    }
}

/// A node that cannot listen for its peers does not start, and says where; a malformed
/// `--cluster` is refused before anything opens.
#[test]
fn a_node_that_cannot_start_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let raft = taken.local_addr().unwrap().port();
    let spec = format!("1=127.0.0.1:{}:{raft}", free_port());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::broker_bin())
            .args(args)
            .output()
            .unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).to_string())
    };
    let data = tmp.path().join("node-1");
    let data = data.to_str().unwrap();
    let (status, stderr) = run(&["--data", data, "--node-id", "1", "--cluster", &spec]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot listen for raft on 127.0.0.1:{raft}")),
        "{stderr}"
    );
    let (status, stderr) = run(&["--data", data, "--node-id", "2", "--cluster", &spec]);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("does not name this node"), "{stderr}");
    drop(taken);
}
