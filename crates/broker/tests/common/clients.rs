//! The real Kafka clients, run as child processes that print one JSON object per line
//! (tests/clients/*.py, tests/java/OncelogClient.java).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Installs the clients on first use (tests/clients/setup.sh: a venv from PyPI, jars from
/// Maven Central) and returns their directory.
pub fn clients_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/setup.sh");
        let out = Command::new("bash")
            .arg(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/clients/setup.sh");
        assert!(
            out.status.success(),
            "client set-up failed: {:?}",
            out.status
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("setup.sh prints the directory"),
        )
    })
}

/// Runs one of Kafka's command-line tools, `class` of kafka-tools 4.4 (the jars
/// tests/clients/setup.sh installs), with `args`: its standard output, once it exited
/// successfully.
pub fn kafka_tool(class: &str, args: &[&str]) -> String {
    let lib = clients_dir().join("tools/lib");
    let out = Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg(class)
        .args(args)
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{class} {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A Kafka client library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// confluent-kafka 2.16 (librdkafka 2.16).
    Confluent,
    /// kafka-python 3.0.
    KafkaPython,
    /// org.apache.kafka:kafka-clients 4.4.
    Java,
}

/// Options of a produce run.
#[derive(Debug, Clone, Default)]
pub struct Produce {
    /// Wait for delivery after every `wave` messages (0: all at once).
    pub wave: usize,
    /// Sleep between waves.
    pub pace_ms: u64,
    /// Value size (values are `m-<i>` padded with dots).
    pub size: usize,
    /// A plain producer, without producer id and sequences (librdkafka only).
    pub no_idempotence: bool,
    /// Each message to a partition of its own random choice, so that every partition of a
    /// topic gets about as many (librdkafka only: its sticky partitioner, the default, sends
    /// a whole batch of keyless messages to one partition, and a few batches can leave a
    /// partition nearly empty).
    pub spread: bool,
}

impl Client {
    pub const ALL: [Client; 3] = [Client::Confluent, Client::KafkaPython, Client::Java];

    fn command(self) -> Command {
        let dir = clients_dir();
        let scripts = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
        match self {
            Client::Confluent | Client::KafkaPython => {
                let mut c = Command::new(dir.join("venv/bin/python"));
                c.arg(format!(
                    "{scripts}/{}",
                    if self == Client::Confluent {
                        "confluent_client.py"
                    } else {
                        "kafka_python_client.py"
                    }
                ));
                c
            }
            Client::Java => {
                let mut c = Command::new("java");
                c.arg("-Xmx256m")
                    .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                    .arg("-cp")
                    .arg(format!(
                        "{}:{}/*",
                        dir.join("java/classes").display(),
                        dir.join("java/lib").display()
                    ))
                    .arg("OncelogClient");
                c
            }
        }
    }

    /// Starts an idempotent producer (acks=all, retries on) of `count` messages.
    pub fn produce(self, bootstrap: &str, topic: &str, count: usize, opts: &Produce) -> Run {
        let mut c = self.command();
        c.args(["produce", bootstrap, topic, &count.to_string()])
            .args(["--wave", &opts.wave.to_string()])
            .args(["--pace-ms", &opts.pace_ms.to_string()])
            .args(["--size", &opts.size.to_string()]);
        if opts.no_idempotence {
            assert_eq!(
                self,
                Client::Confluent,
                "only the librdkafka script has the option"
            );
            c.arg("--no-idempotence");
        }
        if opts.spread {
            assert_eq!(
                self,
                Client::Confluent,
                "only the librdkafka script has the option"
            );
            c.arg("--spread");
        }
        Run::spawn(self, c)
    }

    /// Reads `count` records of every partition of `topic` from the beginning.
    pub fn consume(self, bootstrap: &str, topic: &str, count: usize) -> Consumed {
        self.consume_with(bootstrap, topic, count, &[])
    }

    /// [`Client::consume`] with more arguments to the client (`--no-commit`: librdkafka only,
    /// nothing committed).
    pub fn consume_with(
        self,
        bootstrap: &str,
        topic: &str,
        count: usize,
        extra: &[&str],
    ) -> Consumed {
        let mut c = self.command();
        c.args(["consume", bootstrap, topic, &count.to_string()])
            .args(["--timeout", "60"])
            .args(extra);
        let events = Run::spawn(self, c).finish(Duration::from_secs(120));
        let mut consumed = Consumed::default();
        for e in &events {
            match e["event"].as_str() {
                Some("consumed") => consumed.records.push(Record {
                    partition: e["partition"].as_i64().unwrap() as i32,
                    offset: e["offset"].as_i64().unwrap(),
                    value: e["value"].as_str().unwrap().to_string(),
                }),
                Some("committed") => {
                    consumed.committed.insert(
                        e["partition"].as_i64().unwrap() as i32,
                        e["offset"].as_i64().unwrap(),
                    );
                }
                _ => {}
            }
        }
        consumed
    }
}

/// One record a consumer read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// What a consumer read, and the offsets it committed and read back.
#[derive(Debug, Default)]
pub struct Consumed {
    pub records: Vec<Record>,
    pub committed: BTreeMap<i32, i64>,
}

/// A running client and the events it printed.
pub struct Run {
    client: Client,
    child: Child,
    events: Receiver<Value>,
    seen: Vec<Value>,
}

impl Run {
    fn spawn(client: Client, mut command: Command) -> Run {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {client:?} client: {e}"));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, events) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(_) => eprintln!("[{client:?} stdout] {line}"),
                }
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[{client:?}] {line}");
            }
        });
        Run {
            client,
            child,
            events,
            seen: Vec::new(),
        }
    }

    /// Waits until `n` messages were delivered.
    pub fn wait_delivered(&mut self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self
            .seen
            .iter()
            .filter(|e| e["event"] == "delivered")
            .count()
            < n
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => self.seen.push(e),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{:?}: fewer than {n} deliveries within {timeout:?}",
                        self.client
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{:?} exited before {n} deliveries", self.client)
                }
            }
        }
    }

    /// Waits for the client to exit; returns every event it printed.
    pub fn finish(mut self, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => self.seen.push(e),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("{:?} did not finish within {timeout:?}", self.client);
                }
            }
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{:?} exited with {status}", self.client);
        std::mem::take(&mut self.seen)
    }

    /// Waits for a producer to finish and returns its delivery reports.
    pub fn delivered(self, timeout: Duration) -> Delivered {
        let client = self.client;
        let events = self.finish(timeout);
        let mut report = Delivered::default();
        for e in &events {
            match e["event"].as_str() {
                Some("delivered") => {
                    let i = e["i"].as_u64().unwrap() as usize;
                    let at = (
                        e["partition"].as_i64().unwrap() as i32,
                        e["offset"].as_i64().unwrap(),
                    );
                    assert!(
                        report.offsets.insert(i, at).is_none(),
                        "{client:?}: message {i} was reported delivered twice"
                    );
                }
                Some("failed") => report.failed.push(e.to_string()),
                _ => {}
            }
        }
        report
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A producer's delivery reports: message index → (partition, offset).
#[derive(Debug, Default)]
pub struct Delivered {
    pub offsets: BTreeMap<usize, (i32, i64)>,
    pub failed: Vec<String>,
}

impl Delivered {
    /// Whether a group consumer's events (group_client.py) show every delivered message read
    /// and, in each partition, a commit of its last one: with no producer left, there is
    /// nothing more for the group to read.
    pub fn all_read_and_committed(&self, events: &[Value]) -> bool {
        let at = |e: &Value| {
            (
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
            )
        };
        let read: std::collections::BTreeSet<(i32, i64)> = events
            .iter()
            .filter(|e| e["event"] == "consumed")
            .map(at)
            .collect();
        let mut committed: BTreeMap<i32, i64> = BTreeMap::new();
        for (p, o) in events.iter().filter(|e| e["event"] == "committed").map(at) {
            let c = committed.entry(p).or_insert(o);
            *c = (*c).max(o);
        }
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        for &(p, o) in self.offsets.values() {
            let l = last.entry(p).or_insert(o);
            *l = (*l).max(o);
        }
        self.offsets.values().all(|at| read.contains(at))
            && last
                .iter()
                .all(|(p, l)| committed.get(p).is_some_and(|c| c >= l))
    }
}

/// A librdkafka consumer in `group` (tests/clients/group_client.py): subscribe(), manual
/// commits after each record; `extra` are its options (`--idle`, `--stop-after`, ...).
pub fn group_consumer(bootstrap: &str, topic: &str, group: &str, extra: &[&str]) -> Run {
    let dir = clients_dir();
    let mut c = Command::new(dir.join("venv/bin/python"));
    c.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/group_client.py"
    ))
    .args(["group", bootstrap, topic, group])
    .args(extra);
    Run::spawn(Client::Confluent, c)
}

/// The (partition, offset) of every record a consumer's `events` say it consumed.
pub fn consumed_positions(events: &[Value]) -> BTreeSet<(i64, i64)> {
    events
        .iter()
        .filter(|e| e["event"] == "consumed")
        .map(|e| {
            (
                e["partition"].as_i64().unwrap(),
                e["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

impl Run {
    /// Waits for an event named `name`; returns it (the events before it are kept).
    pub fn wait_event(&mut self, name: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => {
                    self.seen.push(e.clone());
                    if e["event"] == name {
                        return e;
                    }
                }
                Err(_) => panic!("{:?}: no {name:?} event within {timeout:?}", self.client),
            }
        }
    }

    /// Stops the client with SIGTERM and returns every event it printed. The group consumers
    /// (group_client.py, eos_consumer.py) take it as their idle timeout: they finish the record
    /// in hand (its side effect and its commit), leave the group and exit 0, which
    /// [`Run::finish`] checks.
    pub fn stop(self, timeout: Duration) -> Vec<Value> {
        super::send_signal(self.child.id(), libc::SIGTERM);
        self.finish(timeout)
    }

    /// Kills the client (SIGKILL) and returns every event it printed.
    pub fn kill(mut self) -> Vec<Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(e) = self.events.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(e);
        }
        std::mem::take(&mut self.seen)
    }
}

/// Waits until `done` holds of the events `runs` printed so far (one slice per run, in the
/// order of `runs`), or until every run has exited (its own `--idle` or `--timeout` ended it:
/// the caller's assertions then say what is missing); panics after `timeout`. A test stops
/// its consumers here once everything it waits for was read and committed, rather than
/// letting each sit out an idle timeout.
pub fn wait_until(runs: &mut [&mut Run], timeout: Duration, done: impl Fn(&[&[Value]]) -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut running = 0;
        for run in runs.iter_mut() {
            loop {
                match run.events.try_recv() {
                    Ok(e) => run.seen.push(e),
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        running += 1;
                        break;
                    }
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                }
            }
        }
        let seen: Vec<&[Value]> = runs.iter().map(|r| r.seen.as_slice()).collect();
        if done(&seen) || running == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the clients did not get there within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The librdkafka transactional producer (tests/clients/txn_client.py) running `args`.
pub fn txn_client(args: &[&str]) -> Run {
    let dir = clients_dir();
    let mut c = Command::new(dir.join("venv/bin/python"));
    c.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/txn_client.py"
    ))
    .args(args);
    Run::spawn(Client::Confluent, c)
}

/// The `oncelog` CLI of the workspace (its `processed serve` runs the consumers' stores):
/// `$ONCELOG_CLI_BIN` if set (CI passes the one its `cargo test --workspace` built, which is
/// current: cargo builds every target before it runs a test), else built next to the broker
/// binary with `cargo build -p oncelog-cli` (its dependencies' features are not the
/// workspace's, so that is a build of its own).
pub fn oncelog_bin() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("ONCELOG_CLI_BIN") {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "ONCELOG_CLI_BIN={} is not a file",
                bin.display()
            );
            return bin;
        }
        let dir = std::path::Path::new(super::broker_bin())
            .parent()
            .expect("the target directory")
            .to_path_buf();
        let bin = dir.join("oncelog");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "oncelog-cli", "--bin", "oncelog"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        let status = c.status().expect("run cargo build");
        assert!(status.success(), "building the oncelog CLI failed");
        bin
    })
}

/// The seeds' consumer made exactly-once with the processed-id store
/// (tests/clients/eos_consumer.py).
pub fn eos_consumer(
    bootstrap: &str,
    topic: &str,
    group: &str,
    stores: &std::path::Path,
    extra: &[&str],
) -> Run {
    let dir = clients_dir();
    let mut c = Command::new(dir.join("venv/bin/python"));
    c.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/eos_consumer.py"
    ))
    .args(["eos", bootstrap, topic, group])
    .arg(stores)
    .arg(oncelog_bin())
    .args(extra);
    Run::spawn(Client::Confluent, c)
}

/// The Java client's consume-transform-produce loop (tests/java/TxnLoop.java), compiled on
/// first use against the installed kafka-clients jars.
pub fn java_txn_loop(args: &[&str]) -> Run {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    let dir = clients_dir();
    let lib = format!("{}/*", dir.join("java/lib").display());
    let classes = CLASSES.get_or_init(|| {
        let out = dir.join("java/txn-classes");
        std::fs::create_dir_all(&out).unwrap();
        let status = Command::new("javac")
            .arg("-d")
            .arg(&out)
            .args(["-cp", &lib])
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/java/TxnLoop.java"
            ))
            .status()
            .expect("run javac");
        assert!(status.success(), "javac TxnLoop.java failed");
        out
    });
    let mut c = Command::new("java");
    c.arg("-Xmx256m")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{}:{lib}", classes.display()))
        .arg("TxnLoop")
        .args(args);
    Run::spawn(Client::Java, c)
}
