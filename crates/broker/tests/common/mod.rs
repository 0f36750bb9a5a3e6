//! Shared set-up of the broker's integration tests: the broker as a child process, the real
//! clients, the lost-acknowledgement proxy, and a raw protocol connection.
#![allow(dead_code)] // each test binary uses its own part

pub mod clients;
pub mod cluster;
pub mod cluster_clients;
pub mod groups;
pub mod netsplit;
#[path = "../../../raft/tests/ports/mod.rs"]
pub mod ports;
pub mod proxy;
pub mod share;
pub mod txn;
pub mod wire;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The broker binary built for these tests.
pub fn broker_bin() -> &'static str {
    env!("CARGO_BIN_EXE_oncelog-broker")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A running `oncelog-broker`, killed when dropped.
pub struct BrokerProcess {
    child: Child,
    pub addr: SocketAddr,
    pub data: PathBuf,
    args: Vec<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl BrokerProcess {
    /// Starts a broker on a free loopback port over `data`: one of [`ports::free_port`], never
    /// an ephemeral one, so a restart on the same port cannot find it taken by an outgoing
    /// connection.
    pub fn start(data: &Path, extra: &[&str]) -> BrokerProcess {
        Self::spawn(data, loopback(ports::free_port()), extra)
    }

    /// Starts a broker on a free loopback port over `data`, with at most `address_space`
    /// bytes of virtual memory (`ulimit -v`): an allocation beyond it fails, and aborts the
    /// broker unless the broker never asks for it.
    pub fn start_limited(data: &Path, extra: &[&str], address_space: u64) -> BrokerProcess {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(
                "ulimit -v {} && exec \"$0\" \"$@\"",
                address_space >> 10
            ))
            .arg(broker_bin())
            // glibc reserves 64 MiB of address space per malloc arena, up to eight per core:
            // a few arenas keep the limit about the broker's own allocations on any machine.
            .env("MALLOC_ARENA_MAX", "2");
        Self::spawn_command(command, data, loopback(ports::free_port()), extra)
    }

    /// Starts a broker over `data` on a given address (a restart on the same port).
    pub fn spawn(data: &Path, listen: SocketAddr, extra: &[&str]) -> BrokerProcess {
        Self::spawn_command(Command::new(broker_bin()), data, listen, extra)
    }

    fn spawn_command(
        mut command: Command,
        data: &Path,
        listen: SocketAddr,
        extra: &[&str],
    ) -> BrokerProcess {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut child = command
            .arg("--data")
            .arg(data)
            .arg("--listen")
            .arg(listen.to_string())
            .args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oncelog-broker");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[broker] {line}");
                lines.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "broker did not start; its log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        BrokerProcess {
            child,
            addr,
            data: data.to_path_buf(),
            args,
            log,
        }
    }

    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit (a clean shutdown).
    pub fn terminate(&mut self) -> ExitStatus {
        send_signal(self.child.id(), libc::SIGTERM);
        self.wait(Duration::from_secs(60))
    }

    /// SIGKILL: a crash.
    pub fn crash(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new broker process over the same data directory, on the same port and flags.
    pub fn restart(&self) -> BrokerProcess {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        BrokerProcess::spawn(&self.data, self.addr, &args)
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("broker did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every log line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until a log line contains `needle`, and returns it.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.log().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?} within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The duplicates the broker answered, from its log.
    pub fn duplicates(&self) -> Vec<Duplicate> {
        self.log()
            .iter()
            .filter(|l| l.contains("duplicate batch answered with its original offsets"))
            .map(|l| Duplicate {
                topic: field(l, "topic").unwrap().trim_matches('"').to_string(),
                partition: field(l, "partition").unwrap().parse().unwrap(),
                producer_id: field(l, "producer_id").unwrap().parse().unwrap(),
                base_sequence: field(l, "base_sequence").unwrap().parse().unwrap(),
                first_offset: field(l, "first_offset").unwrap().parse().unwrap(),
            })
            .collect()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own live child.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// A retry the broker recognised, as its log line reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub base_sequence: i32,
    pub first_offset: i64,
}

/// The value of `key=value` in a structured log line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pattern = format!(" {key}=");
    let start = line.find(&pattern)? + pattern.len();
    let rest = &line[start..];
    Some(rest.split(' ').next().unwrap_or(rest))
}

/// A broker over a fresh temporary directory, started with `extra`, and a connection to it.
pub fn start_connected(extra: &[&str]) -> (tempfile::TempDir, BrokerProcess, wire::Wire) {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(dir.path(), extra);
    let wire = wire::Wire::connect(broker.addr);
    (dir, broker, wire)
}

/// A broker over `data`, started with `extra`, with `topic` created (Metadata's
/// auto-creation).
pub fn start_with_topic(data: &Path, extra: &[&str], topic: &str) -> BrokerProcess {
    let broker = BrokerProcess::start(data, extra);
    wire::create_topic(&mut wire::Wire::connect(broker.addr), topic);
    broker
}

/// A fresh, unique topic name for a test.
pub fn topic(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}
