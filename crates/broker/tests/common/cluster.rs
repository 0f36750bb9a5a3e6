//! A cluster of broker processes for the suites of tests/cluster/ (cluster mode, docs/design.md "A cluster
//! of brokers"): three nodes on loopback, a raw-protocol client that never panics on a killed
//! broker, an idempotent producer that retries with the same sequence, and readers of what the
//! leaders serve and the replicas store.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
use kafka_protocol::ResponseError;
use oncelog::format::{BatchBuilder, BatchIter};

use super::wire::{fetch_request, str_bytes, topic_name};
use super::BrokerProcess;
pub const TOPIC: &str = "events";
pub const PARTITIONS: i32 = 3;
pub const RECORDS_PER_BATCH: i32 = 4;

pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const NOT_CONTROLLER: i16 = 41;
pub const INVALID_REQUEST: i16 = 42;
pub const FENCED_LEADER_EPOCH: i16 = 74;

/// A request and its answer over a plain stream; any I/O failure (a killed broker) is an error,
/// never a panic.
pub fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
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

pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(s)
}

/// How many rounds a cluster test runs: `ONCELOG_CLUSTER_ROUNDS` if set (the long runs by
/// hand), else the test's `default` (CI's short form).
pub fn rounds(default: usize) -> usize {
    std::env::var("ONCELOG_CLUSTER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

use super::ports::free_ports;

/// Three broker processes of one cluster.
pub struct Cluster {
    pub spec: String,
    pub kafka: BTreeMap<i32, SocketAddr>,
    /// Each node's raft listener.
    pub raft: BTreeMap<i32, SocketAddr>,
    /// Each node's flags beyond `--node-id` and `--cluster` (`--cluster-dial` of
    /// tests/common/netsplit.rs).
    pub flags: BTreeMap<i32, Vec<String>>,
    pub dirs: BTreeMap<i32, PathBuf>,
    pub nodes: BTreeMap<i32, BrokerProcess>,
    pub _tmp: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
        let mut c = Cluster::configure();
        c.launch_all();
        c
    }

    /// Three nodes started, and [`TOPIC`] created on the controller with [`PARTITIONS`]
    /// partitions of three replicas, each led as every node says.
    pub fn start_with_topic() -> Cluster {
        let c = Cluster::start();
        let controller = c.controller();
        let created = c.create_topic(controller, TOPIC, PARTITIONS, 3).unwrap();
        let t = &created.topics[0];
        assert_eq!(t.error_code, 0, "{:?}", t.error_message);
        c.leaders(TOPIC, PARTITIONS);
        c
    }

    /// Three nodes' addresses and directories, none started.
    pub fn configure() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let mut kafka = BTreeMap::new();
        let mut raft = BTreeMap::new();
        let mut entries = Vec::new();
        let ports = free_ports(6);
        for (id, pair) in (1..=3).zip(ports.chunks(2)) {
            let (k, r) = (pair[0], pair[1]);
            kafka.insert(id, SocketAddr::from(([127, 0, 0, 1], k)));
            raft.insert(id, SocketAddr::from(([127, 0, 0, 1], r)));
            entries.push(format!("{id}=127.0.0.1:{k}:{r}"));
        }
        let spec = entries.join(",");
        let dirs: BTreeMap<i32, PathBuf> = (1..=3)
            .map(|id| (id, tmp.path().join(format!("node-{id}"))))
            .collect();
        Cluster {
            spec,
            kafka,
            raft,
            flags: BTreeMap::new(),
            dirs,
            nodes: BTreeMap::new(),
            _tmp: tmp,
        }
    }

    pub fn launch(&mut self, id: i32) {
        let node = self.process(id);
        self.nodes.insert(id, node);
    }

    /// Starts the three nodes together: a new cluster forms once every node answered that it
    /// holds nothing (docs/design.md, "A wiped node rejoins under its id"), and a node is
    /// ready (listening for clients) only after that, so one at a time would wait forever.
    pub fn launch_all(&mut self) {
        let nodes: Vec<(i32, BrokerProcess)> = std::thread::scope(|s| {
            let starting: Vec<_> = (1..=3)
                .map(|id| {
                    let c = &*self;
                    s.spawn(move || (id, c.process(id)))
                })
                .collect();
            starting.into_iter().map(|t| t.join().unwrap()).collect()
        });
        self.nodes.extend(nodes);
    }

    /// Node `id`'s process, started and listening for clients.
    fn process(&self, id: i32) -> BrokerProcess {
        let id_flag = id.to_string();
        let mut flags = vec!["--node-id", &id_flag, "--cluster", &self.spec];
        flags.extend(
            self.flags
                .get(&id)
                .into_iter()
                .flatten()
                .map(String::as_str),
        );
        let node = BrokerProcess::start(&self.dirs[&id], &flags);
        assert_eq!(node.addr, self.kafka[&id]);
        node
    }

    /// Every running node's Kafka listener, as a `--bootstrap-server` list.
    pub fn bootstrap(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .keys()
            .map(|id| self.kafka[id].to_string())
            .collect();
        nodes.join(",")
    }

    pub fn metadata(&self, id: i32, topics: Option<&[&str]>) -> io::Result<MetadataResponse> {
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
    pub fn controller(&self) -> i32 {
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

    pub fn create_topic(
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

    /// Crashes node `id` (SIGKILL) and removes its data directory: a lost disk.
    pub fn wipe(&mut self, id: i32) {
        if let Some(node) = self.nodes.get_mut(&id) {
            node.crash();
        }
        self.nodes.remove(&id);
        std::fs::remove_dir_all(&self.dirs[&id]).unwrap();
    }

    /// DeleteTopics (v6) of `topics`, each by name or by id, on node `on`, with the request's
    /// `timeout_ms`.
    pub fn delete_topics(
        &self,
        on: i32,
        topics: &[(Option<&str>, uuid::Uuid)],
        timeout_ms: i32,
    ) -> io::Result<DeleteTopicsResponse> {
        let mut s = connect(self.kafka[&on])?;
        let topics = topics
            .iter()
            .map(|(name, id)| {
                delete_topics_request::DeleteTopicState::default()
                    .with_name(name.map(topic_name))
                    .with_topic_id(*id)
            })
            .collect();
        call(
            &mut s,
            ApiKey::DeleteTopics,
            6,
            &DeleteTopicsRequest::default()
                .with_timeout_ms(timeout_ms)
                .with_topics(topics),
        )
    }

    /// CreatePartitions (v3) of `topic` to `count` partitions on node `on`: the topic's
    /// error code.
    pub fn create_partitions(
        &self,
        on: i32,
        topic: &str,
        count: i32,
        validate_only: bool,
    ) -> io::Result<i16> {
        let mut s = connect(self.kafka[&on])?;
        let r: CreatePartitionsResponse = call(
            &mut s,
            ApiKey::CreatePartitions,
            3,
            &CreatePartitionsRequest::default()
                .with_timeout_ms(30_000)
                .with_validate_only(validate_only)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(topic_name(topic))
                        .with_count(count)
                        .with_assignments(None),
                ]),
        )?;
        Ok(r.results[0].error_code)
    }

    /// The partition directories of `topic` in node `id`'s data directory (`<topic>-<n>`; a
    /// deleted partition's `<topic>-<n>.<id>-delete` is not one).
    pub fn partition_dirs(&self, id: i32, topic: &str) -> BTreeSet<i32> {
        std::fs::read_dir(&self.dirs[&id])
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix(&format!("{topic}-"))?.parse().ok()
            })
            .collect()
    }

    /// Each partition's leader as every running node reports it, once they agree and every
    /// replica is in step.
    /// The leader of `partition` of [`TOPIC`] with the highest epoch any running node names.
    pub fn current_leader(&self, partition: i32) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let named = self
                .nodes
                .keys()
                .filter_map(|id| self.metadata(*id, Some(&[TOPIC])).ok())
                .flat_map(|m| m.topics.into_iter().flat_map(|t| t.partitions))
                .filter(|p| p.partition_index == partition && p.leader_id.0 >= 0)
                .map(|p| (p.leader_epoch, p.leader_id.0))
                .max();
            if let Some((_, leader)) = named {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "partition {partition}: no leader"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The leaders of [`TOPIC`]'s partitions once every running node names `wanted` (each
    /// partition led by its preferred replica, where the balancer settles: a read from a
    /// leader then stays on it); `timeout` at most.
    pub fn wait_for_leaders(
        &self,
        wanted: &BTreeMap<i32, i32>,
        timeout: Duration,
    ) -> BTreeMap<i32, i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let leaders = self.leaders(TOPIC, PARTITIONS);
            if leaders == *wanted {
                return leaders;
            }
            assert!(
                Instant::now() < deadline,
                "not led by the preferred replicas: {leaders:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn leaders(&self, topic: &str, partitions: i32) -> BTreeMap<i32, i32> {
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

pub fn batch(producer_id: i64, partition: i32, sequence: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(producer_id, 0, sequence);
    for r in 0..RECORDS_PER_BATCH {
        let value = format!("p{partition}-s{}", sequence + r);
        b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    }
    Bytes::from(b.build().unwrap())
}

pub fn produce_request(version_partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(version_partition)
                .with_records(Some(records))])])
}

/// InitProducerId of an idempotent (not transactional) producer: a new producer id.
pub fn init_producer_id_request() -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// An idempotent producer over the raw protocol: one batch in flight, sent to the leader it
/// last learned, re-sent with the same sequence after NOT_LEADER_OR_FOLLOWER, a timeout or a
/// lost connection.
pub struct Producer {
    pub producer_id: i64,
    pub next_sequence: BTreeMap<i32, i32>,
    pub leaders: BTreeMap<i32, i32>,
    pub streams: BTreeMap<i32, TcpStream>,
    /// Per partition, (sequence, base offset) of each acknowledged batch.
    pub acked: BTreeMap<i32, Vec<(i32, i64)>>,
    pub retries: usize,
    /// How long it waits for an answer before it drops the connection and looks for the
    /// leader again (a client's request timeout).
    pub patience: Duration,
}

impl Producer {
    pub fn new(c: &Cluster) -> Producer {
        Producer::new_for(c, PARTITIONS)
    }

    /// A producer of [`TOPIC`] once it has `partitions` partitions with leaders.
    pub fn new_for(c: &Cluster, partitions: i32) -> Producer {
        let mut s = connect(c.kafka[&1]).unwrap();
        let granted: InitProducerIdResponse = call(
            &mut s,
            ApiKey::InitProducerId,
            4,
            &init_producer_id_request(),
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
            leaders: c.leaders(TOPIC, partitions),
            streams: BTreeMap::new(),
            acked: BTreeMap::new(),
            retries: 0,
            patience: Duration::from_secs(10),
        }
    }

    /// Produces the next batch of `partition` until it is acknowledged.
    pub fn produce(&mut self, c: &Cluster, partition: i32) {
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
                    retriable_produce_error(code),
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

    pub fn send(
        &mut self,
        c: &Cluster,
        leader: i32,
        partition: i32,
        records: Bytes,
    ) -> io::Result<(i16, i64)> {
        let s = match self.streams.entry(leader) {
            std::collections::btree_map::Entry::Occupied(s) => s.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let s = connect(c.kafka[&leader])?;
                s.set_read_timeout(Some(self.patience))?;
                v.insert(s)
            }
        };
        let r: ProduceResponse = call(s, ApiKey::Produce, 9, &produce_request(partition, records))?;
        let p = &r.responses[0].partition_responses[0];
        Ok((p.error_code, p.base_offset))
    }

    /// Learns the leaders from the nodes that answer ([`newest_leaders`]).
    pub fn refresh(&mut self, c: &Cluster) {
        self.leaders.extend(newest_leaders(c));
    }
}

/// Whether a produce refused with `code` is retried by a producer (with the same sequence,
/// once it learned the leaders again): the leader moved or has none yet, the majority was not
/// reached in time, or the node does not know the topic yet.
pub fn retriable_produce_error(code: i16) -> bool {
    matches!(
        code,
        NOT_LEADER_OR_FOLLOWER
            | REQUEST_TIMED_OUT
            | LEADER_NOT_AVAILABLE
            | NOT_ENOUGH_REPLICAS
            | UNKNOWN_TOPIC_OR_PARTITION
    )
}

/// The leader of each partition of [`TOPIC`] that some node names, as the nodes that answer
/// Metadata name them: for each partition the leader named with the highest leader epoch, as
/// Kafka's clients keep the newest epoch they saw (KIP-320), so a leader cut off from the
/// others, which still names itself at its old epoch, does not hold a producer once a majority
/// elected another.
pub fn newest_leaders(c: &Cluster) -> BTreeMap<i32, i32> {
    let mut newest: BTreeMap<i32, (i32, i32)> = BTreeMap::new();
    for id in c.kafka.keys() {
        if let Ok(m) = c.metadata(*id, Some(&[TOPIC])) {
            for p in &m.topics[0].partitions {
                let seen = newest.entry(p.partition_index).or_insert((-1, -1));
                if p.leader_id.0 >= 0 && p.leader_epoch > seen.0 {
                    *seen = (p.leader_epoch, p.leader_id.0);
                }
            }
        }
    }
    newest
        .into_iter()
        .filter(|(_, (_, leader))| *leader >= 0)
        .map(|(partition, (_, leader))| (partition, leader))
        .collect()
}

/// What `producer` wrote, checked once the cluster is whole again: on each partition's
/// leader every acknowledged batch once at its acknowledged offset, nothing else of a
/// producer (an append no one acknowledged is not there), offsets dense; then every node
/// stopped cleanly and each replica's log byte for byte the leader's.
pub fn check_acknowledged_once_and_replicas_agree(c: &mut Cluster, producer: &Producer) {
    let leaders = c.leaders(TOPIC, PARTITIONS);
    let ends = check_acknowledged_once(c, &leaders, producer);
    check_replicas_agree(c, &ends);
}

/// On each partition's leader (`leaders`: where to ask first) every batch `producer`
/// acknowledged, once, at its acknowledged offset, nothing else of a producer (an append no
/// one acknowledged is not there), offsets dense. Answers each partition's high watermark and
/// the leader's bytes below it.
pub fn check_acknowledged_once(
    c: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    producer: &Producer,
) -> BTreeMap<i32, (i64, Vec<u8>)> {
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (bytes, high_watermark) = fetch_all(c, leaders[&p], p);
        let found = batches(&bytes);
        // A Kafka partition's offsets: from 0, dense, each batch starting where the one before
        // it ended, and nothing but the producer's batches (raft's entries take no offset).
        assert!(
            found.first().is_none_or(|b| b.0 == 0),
            "partition {p}: {found:?}"
        );
        assert!(
            found.iter().all(|b| !b.2),
            "partition {p}: a control batch among an idempotent producer's"
        );
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
        let acked = producer.acked.get(&p).map_or(&[][..], Vec::as_slice);
        for (sequence, base) in acked {
            assert!(
                data.iter()
                    .any(|b| b.4 == *sequence && b.0 == *base && b.3 == producer.producer_id),
                "partition {p}: acknowledged seq {sequence} at {base} not found"
            );
        }
        // Nothing beyond what was acknowledged (the producer waits for each batch, so none is
        // in flight at the end).
        assert_eq!(
            data.len(),
            acked.len(),
            "partition {p}: unacknowledged batches stored"
        );
        ends.insert(p, (high_watermark, bytes));
    }
    ends
}

/// Every replica holds the same batches as the leader (`ends`: per partition, the high
/// watermark and the leader's bytes below it): every node stopped cleanly, each replica's log
/// read from its directory, byte for byte.
pub fn check_replicas_agree(c: &mut Cluster, ends: &BTreeMap<i32, (i64, Vec<u8>)>) {
    std::thread::sleep(Duration::from_secs(1));
    for node in c.nodes.values_mut() {
        assert!(node.terminate().success());
    }
    for (p, (end, leader_bytes)) in ends {
        for (id, dir) in &c.dirs {
            let bytes = replica_bytes(dir, *p, *end);
            if bytes != *leader_bytes {
                let at = bytes
                    .iter()
                    .zip(leader_bytes.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(bytes.len().min(leader_bytes.len()));
                let differ = |b: &[u8]| -> Vec<_> {
                    BatchIter::new(b)
                        .map(|item| {
                            let (pos, batch) = item.unwrap();
                            (
                                pos,
                                batch.base_offset(),
                                batch.partition_leader_epoch(),
                                batch.is_control(),
                                batch.base_sequence(),
                            )
                        })
                        .filter(|(pos, ..)| *pos + 200 >= at && *pos <= at + 200)
                        .collect()
                };
                panic!(
                    "node {id} partition {p}: another log than the leader's from byte {at} \
                     (lengths {} and {}): the leader's batches there {:?}, the replica's {:?}",
                    leader_bytes.len(),
                    bytes.len(),
                    differ(leader_bytes),
                    differ(&bytes),
                );
            }
        }
    }
}

/// Every batch of a partition, fetched from its leader up to the high watermark.
/// `leader` is where to ask first: when leadership moves meanwhile (a restarted node takes its
/// preferred partitions back), the read starts again from the partition's new leader.
pub fn fetch_all(c: &Cluster, leader: i32, partition: i32) -> (Vec<u8>, i64) {
    fetch_from(c, leader, partition, 0)
}

/// The batches of a partition from the one holding offset `from` up to the high watermark,
/// fetched as [`fetch_all`] fetches them, and the high watermark.
pub fn fetch_from(c: &Cluster, leader: i32, partition: i32, from: i64) -> (Vec<u8>, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut leader = leader;
    let mut s = connect(c.kafka[&leader]).unwrap();
    let mut bytes = Vec::new();
    let mut offset = from;
    loop {
        let r: FetchResponse = call(
            &mut s,
            ApiKey::Fetch,
            12,
            &fetch_request(TOPIC, partition, offset),
        )
        .unwrap();
        let p = &r.responses[0].partitions[0];
        let moved = [
            ResponseError::NotLeaderOrFollower.code(),
            ResponseError::FencedLeaderEpoch.code(),
            ResponseError::UnknownLeaderEpoch.code(),
        ];
        if moved.contains(&p.error_code) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            leader = c.current_leader(partition);
            s = connect(c.kafka[&leader]).unwrap();
            bytes.clear();
            offset = from;
            continue;
        }
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
pub fn batches(bytes: &[u8]) -> Vec<(i64, i64, bool, i64, i32)> {
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
pub fn replica_bytes(dir: &Path, partition: i32, end: i64) -> Vec<u8> {
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

/// FindCoordinator's key types.
pub const GROUP_KEY: i8 = 0;
pub const TRANSACTION_KEY: i8 = 1;

pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const NOT_COORDINATOR: i16 = 16;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const UNKNOWN_MEMBER_ID: i16 = 25;

/// A classic group's one member over the raw protocol, retrying every request through
/// coordinator moves: a dead node, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or
/// NOT_COORDINATOR send it to FindCoordinator again, as Kafka's clients do.
pub struct GroupMember {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
    /// The coordinators that answered, in order (a new entry at each move).
    pub coordinators: Vec<i32>,
}

fn retriable_group_error(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS | NOT_COORDINATOR
    )
}

impl GroupMember {
    /// Finds the coordinator, joins (JoinGroup v3, one member: the leader) and syncs.
    pub fn join(c: &Cluster, group: &str) -> GroupMember {
        let mut m = GroupMember {
            group: group.to_string(),
            member_id: String::new(),
            generation: -1,
            coordinators: Vec::new(),
        };
        // A group's state is written when it is synced, not when a member joins (as in
        // Kafka): a coordinator that moved between the JoinGroup and the SyncGroup does not
        // know the member, and answers UNKNOWN_MEMBER_ID (or ILLEGAL_GENERATION); a client
        // joins again, and so does this one.
        for attempt in 1.. {
            m.member_id.clear();
            let joined: JoinGroupResponse = m.request(
                c,
                ApiKey::JoinGroup,
                3,
                |m| {
                    JoinGroupRequest::default()
                        .with_group_id(GroupId(str_bytes(&m.group)))
                        .with_session_timeout_ms(60_000)
                        .with_rebalance_timeout_ms(60_000)
                        .with_member_id(str_bytes(""))
                        .with_protocol_type(str_bytes("consumer"))
                        .with_protocols(vec![
                            join_group_request::JoinGroupRequestProtocol::default()
                                .with_name(str_bytes("range"))
                                .with_metadata(Bytes::from_static(b"sub")),
                        ])
                },
                |r: &JoinGroupResponse| r.error_code,
            );
            assert_eq!(joined.error_code, 0, "{joined:?}");
            assert_eq!(joined.leader, joined.member_id, "one member leads");
            m.member_id = joined.member_id.to_string();
            m.generation = joined.generation_id;
            let synced: SyncGroupResponse = m.request(
                c,
                ApiKey::SyncGroup,
                3,
                |m| {
                    SyncGroupRequest::default()
                        .with_group_id(GroupId(str_bytes(&m.group)))
                        .with_generation_id(m.generation)
                        .with_member_id(str_bytes(&m.member_id))
                        .with_assignments(vec![
                            sync_group_request::SyncGroupRequestAssignment::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_assignment(Bytes::from_static(b"all")),
                        ])
                },
                |r: &SyncGroupResponse| r.error_code,
            );
            if matches!(synced.error_code, UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION) && attempt < 10 {
                continue;
            }
            assert_eq!(synced.error_code, 0, "{synced:?}");
            assert_eq!(&synced.assignment[..], b"all");
            return m;
        }
        unreachable!("the loop returns or panics")
    }

    /// Commits `offsets` (partition: offset of `topic`) in the member's generation: the
    /// partitions' error codes once the coordinator answered.
    pub fn commit(&mut self, c: &Cluster, topic: &str, offsets: &BTreeMap<i32, i64>) -> Vec<i16> {
        let r: OffsetCommitResponse = self.request(
            c,
            ApiKey::OffsetCommit,
            7,
            |m| {
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(str_bytes(&m.group)))
                    .with_generation_id_or_member_epoch(m.generation)
                    .with_member_id(str_bytes(&m.member_id))
                    .with_topics(
                        vec![offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        offsets
                            .iter()
                            .map(|(p, o)| {
                                offset_commit_request::OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(*o)
                                    .with_committed_metadata(Some(str_bytes("m")))
                            })
                            .collect(),
                    )],
                    )
            },
            |r: &OffsetCommitResponse| r.topics[0].partitions[0].error_code,
        );
        r.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect()
    }

    /// The group's committed offsets of `topic`'s `partitions` (OffsetFetch v5).
    pub fn fetch(&mut self, c: &Cluster, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        let r: OffsetFetchResponse = self.request(
            c,
            ApiKey::OffsetFetch,
            5,
            |m| {
                OffsetFetchRequest::default()
                    .with_group_id(GroupId(str_bytes(&m.group)))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(topic_name(topic))
                            .with_partition_indexes((0..partitions).collect()),
                    ]))
            },
            |r: &OffsetFetchResponse| r.error_code,
        );
        r.topics[0]
            .partitions
            .iter()
            .map(|p| {
                assert_eq!(p.error_code, 0, "{p:?}");
                (p.partition_index, p.committed_offset)
            })
            .collect()
    }

    /// Heartbeat in the member's generation: its error code.
    pub fn heartbeat(&mut self, c: &Cluster) -> i16 {
        let r: HeartbeatResponse = self.request(
            c,
            ApiKey::Heartbeat,
            3,
            |m| {
                HeartbeatRequest::default()
                    .with_group_id(GroupId(str_bytes(&m.group)))
                    .with_generation_id(m.generation)
                    .with_member_id(str_bytes(&m.member_id))
            },
            |r: &HeartbeatResponse| r.error_code,
        );
        r.error_code
    }

    /// Sends the request `make` builds to the group's coordinator until one answers with no
    /// coordinator error (as `error` reads it from the response; every 20 ms, 30 s at most).
    fn request<Req: Encodable, Resp: Decodable + HeaderVersion + std::fmt::Debug>(
        &mut self,
        c: &Cluster,
        api: ApiKey,
        version: i16,
        make: impl Fn(&GroupMember) -> Req,
        error: impl Fn(&Resp) -> i16,
    ) -> Resp {
        let until = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < until {
            match self.try_request::<Req, Resp>(c, api, version, &make) {
                Ok((coordinator, response)) => {
                    if !retriable_group_error(error(&response)) {
                        if self.coordinators.last() != Some(&coordinator) {
                            self.coordinators.push(coordinator);
                        }
                        return response;
                    }
                    last = format!("{response:?}");
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{api:?}: no coordinator answered in 30 s: {last}");
    }

    fn try_request<Req: Encodable, Resp: Decodable + HeaderVersion>(
        &self,
        c: &Cluster,
        api: ApiKey,
        version: i16,
        make: &impl Fn(&GroupMember) -> Req,
    ) -> io::Result<(i32, Resp)> {
        let coordinator = c.group_coordinator(&self.group)?;
        let mut s = connect(c.kafka[&coordinator])?;
        let response = call(&mut s, api, version, &make(self))?;
        Ok((coordinator, response))
    }
}

impl Cluster {
    /// The group's coordinator, as the first live node that answers FindCoordinator says.
    pub fn group_coordinator(&self, group: &str) -> io::Result<i32> {
        self.coordinator(GROUP_KEY, group)
    }

    /// The transaction coordinator of transactional id `id`, as the first live node that
    /// answers FindCoordinator says.
    pub fn txn_coordinator(&self, id: &str) -> io::Result<i32> {
        self.coordinator(TRANSACTION_KEY, id)
    }

    /// The coordinator of `key` (of FindCoordinator's `key_type`), as the first live node that
    /// answers says.
    fn coordinator(&self, key_type: i8, key: &str) -> io::Result<i32> {
        let mut last = io::Error::other("no live node");
        for id in self.nodes.keys() {
            let answer = connect(self.kafka[id]).and_then(|mut s| {
                call::<_, FindCoordinatorResponse>(
                    &mut s,
                    ApiKey::FindCoordinator,
                    4,
                    &FindCoordinatorRequest::default()
                        .with_key_type(key_type)
                        .with_coordinator_keys(vec![str_bytes(key)]),
                )
            });
            match answer {
                Ok(r) if r.coordinators[0].error_code == 0 => {
                    return Ok(r.coordinators[0].node_id.0)
                }
                Ok(r) => last = io::Error::other(format!("{:?}", r.coordinators[0])),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// Waits (at most 30 s, asking every 50 ms) until `done` holds, saying `what` if it never does.
pub fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
