//! Side-by-side benchmarks of oncelog against peer engines and bare baselines (the
//! method is written into docs/benchmarks.md by each run). One process, rounds interleaved,
//! medians of N.
//!
//! `cargo run --release --manifest-path benches/peers/Cargo.toml -- --rounds N
//!  [--quick] [--fresh] [--oncelog-recycled N] [--oncelog-writes auto|map|file] [--cold-steady] [--only GROUPS] [--dir SCRATCH] [--out docs/benchmarks.md]`
//!
//! `PEERS_SAMPLES=1` also prints every sample (workload, engine, MB/s) to stderr as it is
//! taken: the medians hide how far the rounds of one engine spread.

mod engines;
mod raft_entry;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use oncelog::format::BatchBuilder;

/// Bytes of each message's payload (the Kafka record value; records have no key).
pub const MESSAGE_BYTES: usize = 100;
/// Messages per batch.
pub const PER_BATCH: usize = 100;
/// Messages per batch of the acks=all workload: 1 KB batches, as a producer with a short
/// linger sends them.
pub const ACKS_PER_BATCH: usize = 10;

/// The workload groups `--only` can name, in the order a round runs them.
pub const GROUPS: [&str; 6] = ["append", "fsync", "group", "acks", "recovery", "tail"];

pub struct Args {
    pub rounds: usize,
    pub quick: bool,
    pub dir: Option<PathBuf>,
    /// Where the report goes; `None` with `--only`: a partial run prints, it writes no page.
    pub out: Option<PathBuf>,
    /// The workload groups to run (all by default).
    pub only: Vec<&'static str>,
    /// The durable workloads (fsync, group, acks) start from a fresh store (`--fresh`)
    /// instead of the default steady state, in which each engine first wrote and purged
    /// enough for its own recycling of deleted files to be active.
    pub fresh: bool,
    /// Recycled files oncelog keeps in the steady state (`LogConfig::recycled_segments`):
    /// 0 measures the same steady state without oncelog's recycling.
    pub recycled: usize,
    /// How oncelog's durable logs write appends (`--oncelog-writes map|file|auto`, default
    /// auto: through the file, since they append under `FlushPolicy::Always`).
    pub writes: oncelog::AppendWrites,
    /// The steady state with a cold page cache (`--cold-steady`): the page cache is dropped in
    /// each engine's warm-up before it moves into the recycled file the timed region appends
    /// to, so that file's old pages are on the disk only, as those of a file retention deleted
    /// long after it was written would be.
    pub cold: bool,
}

impl Args {
    pub fn runs(&self, group: &str) -> bool {
        self.only.contains(&group)
    }
}

/// Sizes of each workload.
#[derive(Clone, Copy)]
pub struct Sizes {
    /// Batches of the no-fsync append, read, recovery and tailing workloads.
    pub batches: usize,
    /// Batches of the fsync-per-batch and group-commit workloads.
    pub sync_batches: usize,
    /// 1 KB batches of the acks=all workload.
    pub acks_batches: usize,
}

/// The same messages in every engine's shape. Built once, outside every timed region.
pub struct Data {
    pub sizes: Sizes,
    /// `payloads[b][m]`: message `m` of batch `b`.
    pub payloads: Vec<Vec<Vec<u8>>>,
    /// Kafka RecordBatch v2 client batches (baseOffset 0), one per payload batch.
    pub kafka: Vec<Vec<u8>>,
    /// The acks=all workload's payloads, [`ACKS_PER_BATCH`] messages a batch.
    pub acks_payloads: Vec<Vec<Vec<u8>>>,
    /// ... as Kafka batches.
    pub acks_kafka: Vec<Vec<u8>>,
}

impl Data {
    fn new(sizes: Sizes) -> Data {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            // xorshift64*: incompressible, deterministic payloads
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut build = |batches: usize, per_batch: usize| {
            let mut payloads = Vec::with_capacity(batches);
            let mut kafka = Vec::with_capacity(batches);
            for b in 0..batches {
                let batch: Vec<Vec<u8>> = (0..per_batch)
                    .map(|_| {
                        let mut p = Vec::with_capacity(MESSAGE_BYTES + 8);
                        while p.len() < MESSAGE_BYTES {
                            p.extend_from_slice(&next().to_le_bytes());
                        }
                        p.truncate(MESSAGE_BYTES);
                        p
                    })
                    .collect();
                let mut builder = BatchBuilder::new();
                let ts = 1_700_000_000_000 + b as i64;
                for p in &batch {
                    builder.append(ts, None, Some(p), &[]);
                }
                kafka.push(builder.build().expect("uncompressed batch builds"));
                payloads.push(batch);
            }
            (payloads, kafka)
        };
        let (payloads, kafka) = build(sizes.batches, PER_BATCH);
        let (acks_payloads, acks_kafka) = build(sizes.acks_batches, ACKS_PER_BATCH);
        Data {
            sizes,
            payloads,
            kafka,
            acks_payloads,
            acks_kafka,
        }
    }

    pub fn messages(&self, batches: usize) -> u64 {
        (batches * PER_BATCH) as u64
    }

    pub fn kafka_bytes(&self, batches: usize) -> usize {
        self.kafka[..batches].iter().map(Vec::len).sum()
    }
}

/// One timed run.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub secs: f64,
    /// Messages (records) handled in the timed region.
    pub messages: u64,
    /// CPU time (user + system) the process spent in the timed region.
    pub cpu_secs: f64,
    /// Bytes the machine's disks were written in the timed region.
    pub device_bytes: u64,
    /// Named secondary measurements (latency percentiles, lag), each a median over rounds.
    pub extra: Vec<(&'static str, f64)>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Workload {
    Append,
    FsyncPerBatch,
    GroupCommit,
    GroupCommit16,
    AcksAll,
    Read,
    ReadWarm,
    Recovery,
    RecoveryWarm,
    Tail1,
    Tail2,
    Tail4,
}

impl Workload {
    pub fn title(self) -> &'static str {
        match self {
            Workload::Append => "(a) append, no fsync",
            Workload::FsyncPerBatch => "(b) append, fsync per batch",
            Workload::GroupCommit => "(c) group commit, 4 threads",
            Workload::GroupCommit16 => "(c) group commit, 16 threads",
            Workload::AcksAll => "(g) acks=all: 1 KB batches, 16 producers",
            Workload::Read => "(d) sequential read, cold cache",
            Workload::ReadWarm => "(d) sequential read, warm cache",
            Workload::Recovery => "(e) reopen after unclean shutdown, cold cache",
            Workload::RecoveryWarm => "(e) reopen after unclean shutdown, warm cache",
            Workload::Tail1 => "(f) append with 1 tailing reader",
            Workload::Tail2 => "(f) append with 2 tailing readers",
            Workload::Tail4 => "(f) append with 4 tailing readers",
        }
    }
}

pub type Results = BTreeMap<(Workload, &'static str), Vec<Sample>>;

fn parse_args() -> Args {
    let root = repo_root();
    let mut args = Args {
        rounds: 5,
        quick: false,
        dir: None,
        out: None,
        only: GROUPS.to_vec(),
        fresh: false,
        recycled: engines::STEADY_POOL,
        writes: oncelog::AppendWrites::Auto,
        cold: false,
    };
    let mut only = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match a.as_str() {
            "--rounds" => {
                args.rounds = value("--rounds")
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or_else(|| usage("--rounds needs a positive number"))
            }
            "--quick" => args.quick = true,
            "--fresh" => args.fresh = true,
            "--cold-steady" => args.cold = true,
            "--oncelog-recycled" => {
                args.recycled = value("--oncelog-recycled")
                    .parse()
                    .unwrap_or_else(|_| usage("--oncelog-recycled needs a number"))
            }
            "--oncelog-writes" => {
                args.writes = match value("--oncelog-writes").as_str() {
                    "auto" => oncelog::AppendWrites::Auto,
                    "map" => oncelog::AppendWrites::Map,
                    "file" => oncelog::AppendWrites::File,
                    _ => usage("--oncelog-writes is auto, map or file"),
                }
            }
            "--dir" => args.dir = Some(PathBuf::from(value("--dir"))),
            "--out" => args.out = Some(PathBuf::from(value("--out"))),
            "--only" => {
                let list = value("--only");
                args.only = GROUPS
                    .iter()
                    .copied()
                    .filter(|g| list.split(',').any(|x| x == *g))
                    .collect();
                if list.split(',').any(|x| !GROUPS.contains(&x)) || args.only.is_empty() {
                    usage(&format!("--only takes a list of {}", GROUPS.join(",")));
                }
                only = true;
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if !only && args.out.is_none() {
        args.out = Some(root.join("docs/benchmarks.md"));
    }
    args
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!(
        "usage: oncelog-peers [--rounds N (default 5)] [--quick] [--fresh] [--oncelog-recycled N] [--oncelog-writes auto|map|file] [--cold-steady] [--only GROUPS] [--dir SCRATCH] [--out FILE.md]\n\
         --only runs some workload groups ({}) and writes no page unless --out is given\n\
         --fresh starts the durable workloads from fresh stores instead of the steady state (recycled files)\n\
         --oncelog-recycled N: recycled files oncelog keeps in the steady state (default 2; 0: none)\n\
         --oncelog-writes: how oncelog's durable logs write appends (LogConfig::append_writes, default auto)\n\
         --cold-steady: drop the page cache before each engine moves into the recycled file it appends to",
        GROUPS.join(",")
    );
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn main() {
    let args = parse_args();
    let sizes = if args.quick {
        Sizes {
            batches: 1_000,
            sync_batches: 100,
            acks_batches: 800,
        }
    } else {
        Sizes {
            batches: 10_000,
            sync_batches: 1_000,
            acks_batches: 8_000,
        }
    };
    let scratch_parent = match &args.dir {
        Some(d) => d.clone(),
        None => repo_root().join("target"),
    };
    std::fs::create_dir_all(&scratch_parent).expect("create scratch parent");
    let scratch = tempfile::Builder::new()
        .prefix("peers-scratch-")
        .tempdir_in(&scratch_parent)
        .expect("create scratch dir");
    let drop_caches = engines::drop_caches();
    eprintln!(
        "scratch {} | {} batches x {} x {} B | fsync workloads {} batches | rounds {} | drop_caches {}",
        scratch.path().display(),
        sizes.batches,
        PER_BATCH,
        MESSAGE_BYTES,
        sizes.sync_batches,
        args.rounds,
        if drop_caches { "ok" } else { "not permitted" }
    );
    let t = Instant::now();
    let data = Data::new(sizes);
    eprintln!(
        "built {} batches ({} B of Kafka batches) in {:.2?}",
        data.kafka.len(),
        data.kafka_bytes(sizes.batches),
        t.elapsed()
    );

    let mut results = Results::new();
    let started = Instant::now();
    let mut loads = Vec::with_capacity(args.rounds);
    for round in 1..=args.rounds {
        // What else shares the machine moves the durable figures: recorded with the report.
        loads.push(load_average());
        let t = Instant::now();
        engines::round(&args, &data, scratch.path(), &mut results);
        eprintln!("round {round}/{} took {:.1?}", args.rounds, t.elapsed());
    }
    eprintln!("total {:.1?}", started.elapsed());
    report::report(&args, &data, &results, drop_caches, &loads);
}

/// The 1-minute load average (`/proc/loadavg`), NaN where it cannot be read.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
