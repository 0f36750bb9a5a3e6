//! Medians, the markdown table, `docs/benchmarks.md`, and the JSON ratio line.

use std::fmt::Write as _;
use std::process::Command;

use crate::engines::{self, BARE_MMAP, ONCELOG, PEERS, RAFT};
use crate::{Args, Data, Results, Sample, Workload, ACKS_PER_BATCH, MESSAGE_BYTES, PER_BATCH};

/// Median of the samples by time, with each extra the median of its own values.
fn median(samples: &[Sample]) -> Sample {
    let mut secs: Vec<f64> = samples.iter().map(|s| s.secs).collect();
    secs.sort_by(f64::total_cmp);
    let extra = samples[0]
        .extra
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let mut v: Vec<f64> = samples.iter().map(|s| s.extra[i].1).collect();
            v.sort_by(f64::total_cmp);
            (*name, mid(&v))
        })
        .collect();
    Sample {
        secs: mid(&secs),
        messages: samples[0].messages,
        cpu_secs: f64::NAN, // reported through the extras
        device_bytes: 0,
        extra,
    }
}

fn mid(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Payload MB/s: 100 B per message, whatever framing each engine adds.
fn mbps(s: &Sample) -> f64 {
    (s.messages * MESSAGE_BYTES as u64) as f64 / s.secs / 1e6
}

fn records_per_sec(s: &Sample) -> f64 {
    s.messages as f64 / s.secs
}

fn shell(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .current_dir(crate::repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn json_num(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:.3}"))
        .unwrap_or_else(|| "null".to_owned())
}

fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Where the generated part of the page ends and hand-written notes begin.
pub const NOTES_MARKER: &str = "<!-- notes: kept by the generator -->";
/// Where `crates/broker/e2e/run.sh` writes its section.
pub const BROKER_MARKER: &str = "<!-- broker-e2e:begin -->";

pub fn report(args: &Args, data: &Data, results: &Results, drop_caches: bool, loads: &[f64]) {
    let medians: Vec<((Workload, &'static str), Sample)> =
        results.iter().map(|(k, v)| (*k, median(v))).collect();
    let get = |w: Workload, e: &str| -> Option<f64> {
        medians
            .iter()
            .find(|((mw, me), _)| *mw == w && *me == e)
            .map(|(_, s)| mbps(s))
    };
    let best_peer = |w: Workload| -> Option<(f64, &'static str)> {
        PEERS
            .iter()
            .filter_map(|p| get(w, p).map(|v| (v, *p)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };

    let mut table = String::new();
    table.push_str(
        "| workload | engine | MB/s | records/s | vs best peer | notes |\n|---|---|---:|---:|---:|---|\n",
    );
    let mut last = None;
    for ((w, e), s) in &medians {
        let label = if last == Some(*w) { "" } else { w.title() };
        last = Some(*w);
        let vs = best_peer(*w)
            .map(|(b, _)| format!("{:.2}x", mbps(s) / b))
            .unwrap_or_default();
        let mut notes: Vec<String> = s
            .extra
            .iter()
            .map(|(name, v)| format!("{name} {v:.1}"))
            .collect();
        if *w == Workload::Append && *e == ONCELOG {
            if let Some(b) = get(Workload::Append, BARE_MMAP) {
                notes.push(format!("{:.2}x bare mmap", mbps(s) / b));
            }
        }
        let _ = writeln!(
            table,
            "| {label} | {e} | {:.0} | {} | {vs} | {} |",
            mbps(s),
            fmt_rate(records_per_sec(s)),
            notes.join(", ")
        );
    }

    let extra = |w: Workload, e: &str, name: &str| -> Option<f64> {
        medians
            .iter()
            .find(|((mw, me), _)| *mw == w && *me == e)
            .and_then(|(_, s)| s.extra.iter().find(|(n, _)| *n == name).map(|x| x.1))
    };
    let vs_raft = |w: Workload| json_num(ratio(get(w, ONCELOG), get(w, RAFT)));
    // Latency ratios are raft-engine's over oncelog's: above 1, oncelog's is lower.
    let lat_vs_raft =
        |w: Workload, name: &str| json_num(ratio(extra(w, RAFT, name), extra(w, ONCELOG, name)));
    let append = get(Workload::Append, ONCELOG);
    let json = format!(
        "{{\"append_vs_best_peer\":{},\"append_vs_bare_mmap\":{},\"read_vs_best_peer\":{},\"recovery_vs_raft_engine\":{},\"group_commit_speedup\":{},\"recovery_cold_vs_raft_engine\":{},\"fsync_vs_raft_engine\":{},\"fsync_p50_raft_over_oncelog\":{},\"fsync_p99_raft_over_oncelog\":{},\"group_commit_vs_raft_engine\":{},\"group_commit_16_vs_raft_engine\":{},\"acks_all_vs_raft_engine\":{},\"durable_16_vs_no_fsync\":{},\"durable_16_ack_p99_us\":{},\"device_fdatasync_p50_us\":{},\"durable_16_ceiling_vs_no_fsync\":{},\"group_commit_16_ceiling_vs_raft_engine\":{}}}",
        json_num(ratio(append, best_peer(Workload::Append).map(|b| b.0))),
        json_num(ratio(append, get(Workload::Append, BARE_MMAP))),
        json_num(ratio(
            get(Workload::Read, ONCELOG),
            best_peer(Workload::Read).map(|b| b.0)
        )),
        json_num(ratio(
            get(Workload::RecoveryWarm, ONCELOG),
            get(Workload::RecoveryWarm, RAFT)
        )),
        json_num(ratio(
            get(Workload::GroupCommit, ONCELOG),
            get(Workload::FsyncPerBatch, ONCELOG)
        )),
        json_num(ratio(
            get(Workload::Recovery, ONCELOG),
            get(Workload::Recovery, RAFT)
        )),
        vs_raft(Workload::FsyncPerBatch),
        lat_vs_raft(Workload::FsyncPerBatch, "p50 µs/batch"),
        lat_vs_raft(Workload::FsyncPerBatch, "p99 µs/batch"),
        vs_raft(Workload::GroupCommit),
        vs_raft(Workload::GroupCommit16),
        vs_raft(Workload::AcksAll),
        // Durability without a cliff: 16 appenders each waiting for fdatasync, against
        // oncelog's own append without fsync in the same run.
        json_num(ratio(get(Workload::GroupCommit16, ONCELOG), append)),
        json_num(extra(Workload::GroupCommit16, ONCELOG, "p99 µs/batch")),
        // The device's median fdatasync: one batch written into written blocks and synced.
        json_num(extra(Workload::FsyncPerBatch, engines::BARE_ZEROED_FSYNC, "p50 µs/batch")),
        // The ceiling of both 16-thread figures: 16 batches per sync and nothing else (the
        // bare group row), over the same denominators.
        json_num(ratio(get(Workload::GroupCommit16, engines::BARE_GROUP_FSYNC), append)),
        json_num(ratio(
            get(Workload::GroupCommit16, engines::BARE_GROUP_FSYNC),
            get(Workload::GroupCommit16, RAFT)
        )),
    );

    let read_warm = json_num(ratio(
        get(Workload::ReadWarm, ONCELOG),
        best_peer(Workload::ReadWarm).map(|b| b.0),
    ));
    let commit = shell("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !shell("git", &["status", "--porcelain", "--", "src", "Cargo.toml"]).is_empty();
    let n = data.sizes.batches;
    let ns = data.sizes.sync_batches;
    let na = data.sizes.acks_batches;
    let mut doc = String::new();
    let _ = write!(
        doc,
        "# Benchmarks: oncelog against peers\n\n\
         Generated by `cargo run --release --manifest-path benches/peers/Cargo.toml -- --rounds {rounds}{quick}`\n\
         (targets: docs/performance.md). Do not edit by hand above the notes at the end: the run overwrites the rest of this file, \
         and keeps the hand-written notes and the end-to-end broker section (`crates/broker/e2e/run.sh` writes it). \
         Single code paths measured on their own (criterion benches, instruction counts; compressed-batch validation \
         among them) are in [performance.md](performance.md).\n\n\
         - date: {date}\n\
         - machine: `{uname}`\n\
         - CPU: {cpu} ({cores} logical CPUs)\n\
         - commit: {commit}{dirty}\n\
         - rounds: {rounds}, interleaved (each round runs every engine × workload once); every number is the median of the rounds\n\
         - load average (1 min) at the start of each round: {loads}\n\
         - page cache: {caches}\n\n\
         ## Results\n\n{table}\n\
         Ratios (oncelog over: best log peer for append and read, the bare mmap loop, raft-engine for recovery (`recovery_vs_raft_engine` is warm: the tail in the page cache, as after a process crash, so it measures validation; `recovery_cold_vs_raft_engine` reads the tail from the disk and is bounded by the device); group commit over one fsync per batch; `read_vs_best_peer` is the cold-cache read, where every engine must bring the bytes in; warm it is {read_warm}; both read ratios are a consumer's speed, since every reader checks a CRC-32C over every payload byte; the durable workloads against raft-engine in throughput (`fsync_vs_raft_engine`, `group_commit_vs_raft_engine` with {threads} threads, `group_commit_16_vs_raft_engine`, `acks_all_vs_raft_engine`) and, for one fsync per batch, in latency as raft-engine's p50 and p99 over oncelog's (above 1: oncelog's is lower); `durable_16_vs_no_fsync` is oncelog's group commit with {many} threads over its own append without fsync (durability without a cliff), with that workload's acknowledgement p99 (`durable_16_ack_p99_us`) and the device's median `fdatasync` of one batch (`device_fdatasync_p50_us`, the bare `pwrite` + `fdatasync` row of a zeroed file); the two `ceiling` keys put the bare group row of (c) (one thread writing each group of {many} batches in one `pwritev` and syncing it once: the most that many appenders, each waiting for its one batch, can get from the device) over the same denominators):\n\n\
         ```json\n{json}\n```\n\n\
         ## Method\n\n\
         - Data: {msgs} messages of {mb} B (incompressible) in batches of {pb}: {n} batches, {kb} B as Kafka RecordBatch v2 (records without key). \
         Every engine stores the same payloads: oncelog the Kafka batches; commitlog one `MessageBuf` of {pb} messages per batch; \
         raft-engine one `LogBatch` of {pb} entries (protobuf `index` + `data`) per batch, compression off (threshold 0, default features off); \
         fjall 3 (default features off: no lz4) and redb 4 one key per batch (big-endian base offset) whose value is the Kafka batch. \
         Building batches, `MessageBuf`s and `LogBatch`es is outside the timing for everyone.\n\
         - MB/s is payload: {mb} B × messages / time, the same numerator for every engine, so ratios are ratios of time.\n\
         - \"Best peer\" is the best of the log-shaped peers, commitlog and raft-engine; fjall and redb are general stores shown for context.\n\
         - Before every timed region: `sync(2)`; before the cold reads and the recoveries also {drop}. Stores are opened before and flushed/closed after the timed region.\n\
         - (a) append without fsync: appends only are timed (oncelog `FlushPolicy::Manual`; commitlog `append`; raft-engine `write(.., false)`; \
         fjall `insert`; redb one transaction per batch with `Durability::None`). After the timing each store is made durable \
         (oncelog `close`; commitlog `flush` plus an fdatasync of its segment, because its segment flush is `File::flush`, a no-op; \
         raft-engine a synced write of a non-empty batch, because 0.4.2's `sync()` writes an empty batch and returns early; fjall `persist(SyncAll)`; redb a durable commit). \
         Bare loops on the same batches: memcpy into a prefaulted buffer; CRC-32C of each batch; `write(2)` of each batch after its CRC; \
         copy + CRC into a fresh fallocate'd, mmap'd file (the loop oncelog's append is compared with; creation and mapping are untimed, page faults are timed).\n\
         - (b) fsync per batch, {ns} batches: oncelog `FlushPolicy::Always`; commitlog `append` + `flush` + fdatasync of the segment; raft-engine `write(.., true)`; \
         fjall `insert` + `persist(SyncData)`; redb `Durability::Immediate`; bare `write(2)` + fdatasync appending to a file, and `pwrite` + fdatasync into a file allocated beforehand with `fallocate` (unwritten extents, as raft-engine allocates) or written with zeros and synced (as oncelog's `Preallocation::Zeroed`), and `O_DIRECT|O_DSYNC` writes of whole 4 KiB blocks into a zeroed file (the block holding the previous batch's end written again, as a database's log does). Per-batch p50/p99 latency in the notes.\n\
         - (c) group commit: the same {ns} batches from {threads} and from {many} threads at once: oncelog one shared `Log` with `FlushPolicy::Always`; \
         raft-engine one shared engine, `write(.., true)`, one region per thread (its write group shares the sync). \
         Each thread waits for its own batch's durability before it sends the next. Each store takes one durable write before the timed region (the first sync of a fresh store makes its new files durable, a one-off per store, for both engines). \
         oncelog's notes give the batches each sync covered and the median sync (its `LogMetrics`). \
         The bare row is the ceiling: one thread writes the same batches in groups of as many as there are threads, each group in one `pwritev` into a zeroed file and one `fdatasync`, every batch of a group acknowledged when its sync returns; no thread is woken, nothing runs between syncs but the write. \
         The notes of every per-batch-latency row of (b), (c) and (g) also give the process's CPU time per batch over the timed region (user + system, `getrusage`: the engine's threads and its background threads) and the bytes the machine's disks were written per batch (`/proc/diskstats`). \
         oncelog's durable logs use `LogConfig::append_writes` `Auto`, which under `FlushPolicy::Always` writes batches through the file (`pwrite`); `--oncelog-writes map` measures them copied into the map.\n\
         - Stores of (b), (c) and (g): {stores}\n\
         - (g) acks=all: {na} batches of {apb} messages (about 1 KB each) from {many} threads at once, each waiting until its batch is durable before it sends the next, as producers with `acks=all` and a short linger do against a broker: as (c), oncelog one `Log` under `FlushPolicy::Always`, raft-engine `write(.., true)` into one region per thread.\n\
         - (d) sequential read: the store written in (a) is closed, reopened untimed, and read from the start twice, first from a cold page cache, then warm: oncelog `read` in 1 MiB chunks stepping with `BatchIter`; \
         commitlog `read` with a 1 MiB limit; raft-engine `fetch_entries_to` with a 1 MiB limit; fjall (its memtable flushed to a table before close) and redb full range scans. \
         Every reader touches every payload byte as a consumer checking its data does, with a CRC-32C: over each whole Kafka batch, checked against its stored CRC (oncelog, fjall, redb; the batch CRC covers every record value, and the record framing too, about 10% more bytes), over each message payload (commitlog) or entry's data (raft-engine). \
         So a zero-copy reader gets no credit for handing out views it never reads.\n\
         - (e) reopen after an unclean shutdown: {n} batches appended without any flush; oncelog `abandon()`, raft-engine dropped without sync or purge; then `sync(2)` and the timed open, which validates the tail. \
         MB/s is payload recovered per second.\n\
         - (f) oncelog only: one appender (as in (a)) with 1, 2 and 4 threads tailing it (`read` from their next offset, yielding when at the end); \
         MB/s is the appender's; lag is log end offset minus the reader's next offset at each poll; catch-up is how long after the last append the slowest reader was done.\n",
        rounds = args.rounds,
        loads = loads
            .iter()
            .map(|l| format!("{l:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        quick = if args.quick { " --quick" } else { "" },
        date = shell("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]),
        uname = shell("uname", &["-a"]),
        cpu = cpu_model(),
        cores = std::thread::available_parallelism().map_or(0, |n| n.get()),
        dirty = if dirty { " (with uncommitted changes)" } else { "" },
        caches = if drop_caches {
            "dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before each cold read and each recovery; appends start from `sync(2)` only"
        } else {
            "NOT dropped: writing /proc/sys/vm/drop_caches is not permitted here, so cold reads and recovery run from the page cache for every engine alike"
        },
        drop = if drop_caches {
            "`echo 3 > /proc/sys/vm/drop_caches`"
        } else {
            "drop_caches, which is not permitted here, so \"cold\" runs are warm too"
        },
        msgs = data.messages(n),
        mb = MESSAGE_BYTES,
        pb = PER_BATCH,
        kb = data.kafka_bytes(n),
        stores = if args.fresh {
            "fresh (`--fresh`): each engine starts in an empty directory with its default files (oncelog 1 GiB segments grown in zeroed 1 MiB pieces ahead of the writer; raft-engine 128 MiB files, fallocated).".to_string()
        } else {
            format!(
                "the steady state of a store whose old data retention already purged (the default; `--fresh` for empty stores). Both engines use {seg} MiB files and before the timed region write {seg} MiB files and purge them until the file they append to is a reused one: \
                 oncelog `segment_bytes` {seg} MiB, `recycled_segments` {pool}, `retention_bytes` 0 and `file_delete_delay_ms` 0, with two rounds of 64 KiB appends and `enforce_retention`, so its active segment is a recycled file (docs/design.md, \"Segment space\"); \
                 raft-engine format version 2 with `enable_log_recycle` (its defaults), `target_file_size` {seg} MiB and `purge_threshold` {purge} MiB, entries written, `compact_to` and `purge_expired_files` until it rotated into a recycled file. \
                 No timed region rolls or rotates (it writes less than a file).",
                seg = engines::STEADY_SEGMENT >> 20,
                pool = args.recycled,
                purge = (engines::STEADY_SEGMENT * engines::STEADY_POOL) >> 20,
            )
        },
        threads = engines::THREADS,
        many = engines::MANY_THREADS,
        apb = ACKS_PER_BATCH,
    );

    // Hand-written notes after their marker (measurements made by other means), and the broker's
    // end-to-end section (another run's output), survive a run: everything from the first of
    // the two markers on is carried over.
    let Some(out) = &args.out else {
        println!("{table}");
        println!("{json}");
        return;
    };
    if let Ok(old) = std::fs::read_to_string(out) {
        let kept = [NOTES_MARKER, BROKER_MARKER]
            .iter()
            .filter_map(|m| old.find(m))
            .min();
        if let Some(at) = kept {
            doc.push('\n');
            doc.push_str(&old[at..]);
        }
    }
    println!("{table}");
    if let Err(e) = std::fs::write(out, &doc) {
        eprintln!("could not write {}: {e}", out.display());
    } else {
        eprintln!("wrote {}", out.display());
    }
    println!("{json}");
}
