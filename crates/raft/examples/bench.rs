//! Replicated append throughput and commit latency against the single-node log, end to end
//! (docs/benchmarks.md, "Replication (oncelog-raft)").
//!
//! ```text
//! cargo build --release -p oncelog-raft --bins --examples
//! target/release/examples/bench [--batches 20000] [--clients 1,8,32] [--tcp] [--dir D]
//!     [--modes single,raft-mem,raft-tcp] [--threads 8]
//! ```
//!
//! Each client is an idempotent producer appending batches of 10 records of 100 bytes (1.1 KB
//! a batch) one at a time, each answered once durable: on the single node once the log has
//! synced it (`FlushPolicy::Always`: concurrent appenders share a sync), on the replicas once
//! a majority has it durably and the leader has applied it. Modes, side by side in one run:
//!
//! - `single`: one oncelog `Log`, one thread per client;
//! - `raft-mem`: 3 replicas in this process over the in-process router (no faults), each on
//!   its own directory of the real file system, one tokio task per client on the leader;
//! - `raft-tcp` (with `--tcp`): 3 `oncelog-raft-node` processes on loopback, each client a
//!   connection to the leader's client port.
//!
//! With `--partitions N`, two more runs of N partitions, one producer each (`--batches`
//! shared among them): `multi-single`, N durable logs (`FlushPolicy::Always`) of one
//! `LogManager`, a thread per producer; and `multi-tcp`, 3 `oncelog-raft-node` processes
//! hosting the N partitions (`--topic bench --partitions N`), each producer a connection to
//! its partition's leader. The last line then has `multi_replicated_vs_single`. With
//! `--set-size S` the nodes replicate the partitions in sets of up to S (docs/design.md,
//! "Partition sets"; `--set-size 34` puts 100 partitions in 3 groups, one led by each node).
//!
//! Before each run, `sync(1)` writes back what the runs before it left dirty.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use oncelog::format::BatchBuilder;
use oncelog::{Environment, FlushPolicy, Log, LogConfig};
use oncelog_raft::client::{Client, ClientReply, ClientRequest};
use oncelog_raft::network::mem::Router;
use oncelog_raft::{Ack, Node, Replica, ReplicaConfig};

const RECORDS: usize = 10;
const VALUE: usize = 100;

#[derive(Debug, Parser)]
struct Args {
    /// Batches per mode and client count, shared among the clients.
    #[arg(long, default_value_t = 20000)]
    batches: usize,
    /// Client counts to run, comma-separated.
    #[arg(long, default_value = "1,8,32", value_delimiter = ',')]
    clients: Vec<usize>,
    /// Also the 3-process cluster over TCP (needs target/release/oncelog-raft-node).
    #[arg(long)]
    tcp: bool,
    /// Only these modes (single, raft-mem, raft-tcp), comma-separated; all by default
    /// (raft-tcp with --tcp).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// Worker threads of this process's runtime (raft-mem's three replicas share it; their
    /// storage syncs block a worker while they last).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Where the logs go (a temporary directory under it; default the system's).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// `raft-mem` only: entries of client batches proposed and not yet answered
    /// (`ReplicaConfig::max_entries_in_flight`; the default's when not given).
    #[arg(long)]
    entries_in_flight: Option<usize>,
    /// Also N partitions on 3 nodes against N single logs of one manager (`multi-tcp` and
    /// `multi-single`; needs target/release/oncelog-raft-node).
    #[arg(long)]
    partitions: Option<usize>,
    /// With --partitions: the nodes' `--set-size` (partitions per raft group).
    #[arg(long, default_value_t = 1)]
    set_size: usize,
}

fn batch(producer: i64, n: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(producer, 0, n * RECORDS as i32);
    let value = vec![b'x'; VALUE];
    for _ in 0..RECORDS {
        b.append(1_700_000_000_000, None, Some(&value), &[]);
    }
    Bytes::from(b.build().expect("batch"))
}

struct Run {
    mode: &'static str,
    clients: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    bytes: usize,
}

impl Run {
    fn records_per_sec(&self) -> f64 {
        (self.latencies.len() * RECORDS) as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at quantile `p` (the latencies sorted by [`Run::print`]).
    fn quantile(&self, p: f64) -> Duration {
        let n = self.latencies.len();
        self.latencies[((n as f64 * p) as usize).min(n - 1)]
    }

    fn print(&mut self) {
        self.latencies.sort();
        let n = self.latencies.len();
        let q = |p: f64| self.quantile(p);
        let secs = self.elapsed.as_secs_f64();
        println!(
            "{:<9} {:>3} clients  {:>9.0} records/s  {:>6.1} MB/s  {:>7.0} batches/s  p50 {:>7.2} ms  p99 {:>7.2} ms",
            self.mode,
            self.clients,
            (n * RECORDS) as f64 / secs,
            self.bytes as f64 / secs / 1e6,
            n as f64 / secs,
            q(0.50).as_secs_f64() * 1e3,
            q(0.99).as_secs_f64() * 1e3,
        );
    }
}

/// `clients` producers of `per_client` batches each, against `append`.
async fn drive<F, Fut>(mode: &'static str, clients: usize, per_client: usize, append: F) -> Run
where
    F: Fn(Bytes) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let append = append.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_client);
                let mut bytes = 0;
                for n in 0..per_client {
                    let b = batch(1 + c as i64, n as i32);
                    bytes += b.len();
                    let t = Instant::now();
                    append(b).await;
                    lat.push(t.elapsed());
                }
                (lat, bytes)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (l, b) = t.await.expect("client");
        latencies.extend(l);
        bytes += b;
    }
    Run {
        mode,
        clients,
        elapsed: started.elapsed(),
        latencies,
        bytes,
    }
}

fn single(dir: &Path, clients: usize, per_client: usize) -> Run {
    let log = Arc::new(
        Log::open(
            dir,
            LogConfig::builder()
                .flush_policy(FlushPolicy::Always)
                .build()
                .unwrap(),
        )
        .expect("open the log"),
    );
    let started = Instant::now();
    let results: Vec<(Vec<Duration>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let log = Arc::clone(&log);
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(per_client);
                    let mut bytes = 0;
                    for n in 0..per_client {
                        let b = batch(1 + c as i64, n as i32);
                        bytes += b.len();
                        let t = Instant::now();
                        log.append(&b).expect("append");
                        lat.push(t.elapsed());
                    }
                    (lat, bytes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let elapsed = started.elapsed();
    let mut latencies = Vec::new();
    let mut bytes = 0;
    for (l, b) in results {
        latencies.extend(l);
        bytes += b;
    }
    Run {
        mode: "single",
        clients,
        elapsed,
        latencies,
        bytes,
    }
}

async fn raft_mem(dir: &Path, clients: usize, per_client: usize, in_flight: Option<usize>) -> Run {
    let router = Router::new(1);
    let mut config = ReplicaConfig::default();
    if let Some(n) = in_flight {
        config.max_entries_in_flight = n;
    }
    let mut replicas = Vec::new();
    for id in 1..=3u64 {
        let r = Replica::open(
            id,
            dir.join(format!("replica-{id}")),
            Environment::default(),
            config.clone(),
            router.endpoint(id),
        )
        .await
        .expect("open a replica");
        router.add(id, r.raft().clone());
        replicas.push(Arc::new(r));
    }
    let members: BTreeMap<u64, Node> = (1..=3u64)
        .map(|id| (id, Node::new(format!("mem:{id}"))))
        .collect();
    replicas[0].initialize(members).await.expect("initialize");
    let leader = loop {
        if let Some(l) = replicas[0].leader().await {
            break Arc::clone(&replicas[l as usize - 1]);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let run = drive("raft-mem", clients, per_client, move |b| {
        let leader = Arc::clone(&leader);
        async move {
            leader.append(b).await.expect("append");
        }
    })
    .await;
    for r in &replicas {
        r.shutdown().await.expect("shutdown");
    }
    run
}

struct Procs(Vec<Child>);

/// Starts 3 `oncelog-raft-node` processes on loopback (hosting `partitions` partitions of
/// topic `bench` if given): the processes and their client addresses.
/// 3 node processes, hosting `partitions` (the number, and the set size) if given.
fn spawn_nodes(dir: &Path, partitions: Option<(usize, usize)>) -> (Procs, Vec<String>) {
    let bin = std::env::current_exe()
        .expect("this executable")
        .parent()
        .and_then(Path::parent)
        .expect("target/release")
        .join("oncelog-raft-node");
    assert!(
        bin.exists(),
        "{}: build it (cargo build --release -p oncelog-raft --bins)",
        bin.display()
    );
    let listeners: Vec<_> = (0..6)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    drop(listeners);
    let peers = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[2 * i]))
        .collect::<Vec<_>>()
        .join(",");
    let clients_addrs: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", ports[2 * i + 1]))
        .collect();
    let mut procs = Procs(Vec::new());
    for i in 0..3 {
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--id",
            &(i + 1).to_string(),
            "--listen",
            &format!("127.0.0.1:{}", ports[2 * i]),
        ])
        .arg("--dir")
        .arg(dir.join(format!("replica-{}", i + 1)))
        .args(["--client", &clients_addrs[i], "--peers", &peers])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if i == 0 {
            cmd.arg("--init");
        }
        if let Some((n, set_size)) = partitions {
            cmd.args(["--topic", "bench", "--partitions", &n.to_string()]);
            cmd.args(["--set-size", &set_size.to_string()]);
        }
        procs.0.push(cmd.spawn().expect("spawn a replica"));
    }
    (procs, clients_addrs)
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn raft_tcp(dir: &Path, clients: usize, per_client: usize) -> Run {
    let (_procs, clients_addrs) = spawn_nodes(dir, None);
    let leader = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(mut c) = Client::connect(&clients_addrs[0]).await else {
            continue;
        };
        if let Ok(ClientReply::Status(s)) = c.call(&ClientRequest::Status).await {
            if let Some(l) = s.leader {
                break clients_addrs[l as usize - 1].clone();
            }
        }
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let leader = leader.clone();
            tokio::spawn(async move {
                let mut conn = Client::connect(&leader).await.expect("connect");
                let mut lat = Vec::with_capacity(per_client);
                let mut bytes = 0;
                for n in 0..per_client {
                    let b = batch(1 + c as i64, n as i32);
                    bytes += b.len();
                    let t = Instant::now();
                    match conn
                        .call(&ClientRequest::Produce(b))
                        .await
                        .expect("produce")
                    {
                        ClientReply::Acked(Ack::Appended { .. }) => {}
                        other => panic!("produce answered {other:?}"),
                    }
                    lat.push(t.elapsed());
                }
                (lat, bytes)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (l, b) = t.await.expect("client");
        latencies.extend(l);
        bytes += b;
    }
    Run {
        mode: "raft-tcp",
        clients,
        elapsed: started.elapsed(),
        latencies,
        bytes,
    }
}

fn main() {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(args));
}

async fn run(args: Args) {
    let tmp = match &args.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    println!(
        "{} batches of {RECORDS} records of {VALUE} B ({} B a batch) per run",
        args.batches,
        batch(1, 0).len()
    );
    // The runs at the largest client count, for the summary line.
    let most = args.clients.iter().copied().max().unwrap_or(0);
    let mut last: BTreeMap<&'static str, Run> = BTreeMap::new();
    for (k, &clients) in args.clients.iter().enumerate() {
        let per_client = args.batches.div_ceil(clients);
        let d = tmp.path().join(format!("run-{k}"));
        let on = |m: &str| args.modes.is_empty() || args.modes.iter().any(|x| x == m);
        let mut runs = Vec::new();
        if on("single") {
            settle_disk();
            runs.push(single(&d.join("single"), clients, per_client));
        }
        if on("raft-mem") {
            settle_disk();
            runs.push(raft_mem(&d.join("mem"), clients, per_client, args.entries_in_flight).await);
        }
        if (args.tcp && args.modes.is_empty()) || args.modes.iter().any(|x| x == "raft-tcp") {
            settle_disk();
            runs.push(raft_tcp(&d.join("tcp"), clients, per_client).await);
        }
        for mut run in runs {
            run.print();
            if clients == most {
                last.insert(run.mode, run);
            }
        }
    }
    let mut multi = BTreeMap::new();
    if let Some(n) = args.partitions.filter(|&n| n > 0) {
        let per = args.batches.div_ceil(n);
        let d = tmp.path().join("multi");
        settle_disk();
        let single = multi_single(&d.join("single"), n, per);
        settle_disk();
        let replicated = multi_tcp(&d.join("tcp"), n, args.set_size, per).await;
        for mut run in [single, replicated] {
            run.print();
            multi.insert(run.mode, run);
        }
    }
    let partitions = args.partitions.map(|n| (n, args.set_size));
    println!("{}", summary(most, &last, partitions, &multi));
}

/// Writes back what the runs before left dirty (`sync(1)`; its zeros written ahead, its
/// segments) before the next run is timed, so that no mode pays for the one before it.
fn settle_disk() {
    let _ = std::process::Command::new("sync").status();
}

/// `partitions` durable logs of one manager, one producer thread each.
fn multi_single(dir: &Path, partitions: usize, per_client: usize) -> Run {
    let log = LogConfig::builder()
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap();
    let manager =
        oncelog::LogManager::open(&[dir], oncelog::ManagerConfig::default().with_log(log))
            .expect("open the manager");
    let request: Vec<_> = (0..partitions)
        .map(|p| {
            (
                oncelog::TopicPartition::new("bench", p as i32),
                oncelog::PartitionConfig::default(),
            )
        })
        .collect();
    let logs = manager
        .create_many(&request)
        .expect("create the partitions");
    let started = Instant::now();
    let results: Vec<(Vec<Duration>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = logs
            .iter()
            .map(|log| {
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(per_client);
                    let mut bytes = 0;
                    for n in 0..per_client {
                        let b = batch(1, n as i32);
                        bytes += b.len();
                        let t = Instant::now();
                        log.append(&b).expect("append");
                        lat.push(t.elapsed());
                    }
                    (lat, bytes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let elapsed = started.elapsed();
    drop(logs);
    manager.close().expect("close the manager");
    let (mut latencies, mut bytes) = (Vec::new(), 0);
    for (l, b) in results {
        latencies.extend(l);
        bytes += b;
    }
    Run {
        mode: "multi-single",
        clients: partitions,
        elapsed,
        latencies,
        bytes,
    }
}

/// 3 node processes hosting `partitions` partitions, one producer per partition on a
/// connection to its leader (following the leader if it moves).
async fn multi_tcp(dir: &Path, partitions: usize, set_size: usize, per_client: usize) -> Run {
    let (procs, clients_addrs) = spawn_nodes(dir, Some((partitions, set_size)));
    let to = |p: usize, r: ClientRequest| ClientRequest::To {
        topic: "bench".into(),
        partition: p as i32,
        request: Box::new(r),
    };
    // Every partition led, and leaders spread (the nodes balance every second).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut per_node = BTreeMap::new();
        let mut led = 0;
        for p in 0..partitions {
            let Ok(mut c) = Client::connect(&clients_addrs[0]).await else {
                break;
            };
            if let Ok(ClientReply::Status(s)) = c.call(&to(p, ClientRequest::Status)).await {
                if let Some(l) = s.leader {
                    led += 1;
                    *per_node.entry(l).or_insert(0usize) += 1;
                }
            }
        }
        let spread = per_node.len() == 3 && per_node.values().all(|&k| k * 4 >= partitions);
        if led == partitions && spread {
            println!("multi-tcp: leaders per node {per_node:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leaders: {per_node:?}, {led} led"
        );
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..partitions)
        .map(|p| {
            let addrs = clients_addrs.clone();
            tokio::spawn(async move {
                let mut at = 0;
                let mut conn = Client::connect(&addrs[at]).await.expect("connect");
                let mut lat = Vec::with_capacity(per_client);
                let mut bytes = 0;
                for n in 0..per_client {
                    let b = batch(1, n as i32);
                    bytes += b.len();
                    let request = ClientRequest::To {
                        topic: "bench".into(),
                        partition: p as i32,
                        request: Box::new(ClientRequest::Produce(b)),
                    };
                    let t = Instant::now();
                    loop {
                        match conn.call(&request).await.expect("produce") {
                            ClientReply::Acked(_) => break,
                            ClientReply::NotLeader { leader } => {
                                at = leader.map_or((at + 1) % 3, |l| l as usize - 1);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                conn = Client::connect(&addrs[at]).await.expect("connect");
                            }
                            other => panic!("produce answered {other:?}"),
                        }
                    }
                    lat.push(t.elapsed());
                }
                (lat, bytes)
            })
        })
        .collect();
    let (mut latencies, mut bytes) = (Vec::new(), 0);
    for t in tasks {
        let (l, b) = t.await.expect("client");
        latencies.extend(l);
        bytes += b;
    }
    let elapsed = started.elapsed();
    drop(procs);
    Run {
        mode: "multi-tcp",
        clients: partitions,
        elapsed,
        latencies,
        bytes,
    }
}

/// The last line: one JSON object with, at the largest client count, each mode's records/s
/// and p99 commit latency, and the replicated modes against the single log of the same run
/// (`replicated_vs_single` is raft over TCP, the issue's figure; `replicated_mem_vs_single`
/// the replicas in this process).
fn summary(
    clients: usize,
    runs: &BTreeMap<&'static str, Run>,
    partitions: Option<(usize, usize)>,
    multi: &BTreeMap<&'static str, Run>,
) -> String {
    let mut fields = vec![format!("\"clients\":{clients}")];
    if let (Some((n, set_size)), Some(single), Some(tcp)) = (
        partitions,
        multi.get("multi-single"),
        multi.get("multi-tcp"),
    ) {
        fields.push(format!(
            "\"partitions\":{n},\"set_size\":{set_size},\"multi_single_records_per_s\":{:.0},\"multi_tcp_records_per_s\":{:.0},\"multi_tcp_p99_ms\":{:.3},\"multi_replicated_vs_single\":{:.3}",
            single.records_per_sec(),
            tcp.records_per_sec(),
            tcp.quantile(0.99).as_secs_f64() * 1e3,
            tcp.records_per_sec() / single.records_per_sec()
        ));
    }
    for (mode, run) in runs {
        let key = mode.replace('-', "_");
        fields.push(format!(
            "\"{key}_records_per_s\":{:.0},\"{key}_p99_ms\":{:.3}",
            run.records_per_sec(),
            run.quantile(0.99).as_secs_f64() * 1e3
        ));
    }
    if let Some(single) = runs.get("single") {
        for (mode, key) in [
            ("raft-tcp", "replicated_vs_single"),
            ("raft-mem", "replicated_mem_vs_single"),
        ] {
            if let Some(run) = runs.get(mode) {
                fields.push(format!(
                    "\"{key}\":{:.3},\"{key}_p99\":{:.2}",
                    run.records_per_sec() / single.records_per_sec(),
                    run.quantile(0.99).as_secs_f64() / single.quantile(0.99).as_secs_f64()
                ));
            }
        }
    }
    format!("{{{}}}", fields.join(","))
}
