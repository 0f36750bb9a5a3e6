//! Every engine × workload. Each function prepares its input and its store outside the timed
//! region, times only the work the workload names, and finishes (flush, close, drop) outside it.
//!
//! Common rules:
//! - before every timed region: `sync(2)` (so write-back of the previous run does not land in
//!   this one) and, where permitted, `drop_caches`;
//! - no-fsync append (a): appends only are timed; the final durable flush/close is outside the
//!   timing for everyone;
//! - read (d): the store written by (a) is closed, reopened (untimed), and read from the start;
//!   the reader computes a CRC-32C over every payload byte it is handed, as a consumer checking
//!   its data does: the whole Kafka batch (its own CRC, which covers every record value) for
//!   the engines that store Kafka batches (oncelog, fjall, redb), each message's payload for
//!   commitlog, each entry's data for raft-engine. So no read figure is a hand-out of views;
//! - batch building (Kafka batches, commitlog `MessageBuf`s, raft-engine `LogBatch`es) is
//!   outside the timing for everyone.

use std::fs::File;
use std::io::Write;
use std::ops::Sub;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use oncelog::format::BatchIter;
use oncelog::{AppendOutcome, AppendWrites, FlushPolicy, Log, LogConfig};

use crate::raft_entry::{Entry, EntryExt};
use crate::{Args, Data, Results, Sample, Workload, ACKS_PER_BATCH, PER_BATCH};

pub const ONCELOG: &str = "oncelog";
pub const COMMITLOG: &str = "commitlog 0.2";
pub const RAFT: &str = "raft-engine 0.4";
pub const FJALL: &str = "fjall 3";
pub const REDB: &str = "redb 4";
pub const BARE_MEMCPY: &str = "bare: memcpy";
pub const BARE_CRC: &str = "bare: CRC-32C";
pub const BARE_WRITE: &str = "bare: write(2)+CRC";
pub const BARE_MMAP: &str = "bare: mmap copy+CRC";
pub const BARE_WRITE_FSYNC: &str = "bare: write(2)+CRC+fdatasync";
pub const BARE_FALLOCATED_FSYNC: &str = "bare: pwrite+fdatasync, fallocated file";
pub const BARE_ZEROED_FSYNC: &str = "bare: pwrite+fdatasync, zeroed file";
pub const BARE_DIRECT_FSYNC: &str = "bare: O_DIRECT|O_DSYNC pwrite, zeroed file";
/// The ceiling of (c): one thread writes each group of as many batches as there are
/// appenders in one `pwritev` and syncs it once (`bare_group_fsync`).
pub const BARE_GROUP_FSYNC: &str = "bare: one pwritev+fdatasync per group, zeroed file";

/// The log-shaped peers the targets compare against; fjall and redb are context.
pub const PEERS: [&str; 2] = [COMMITLOG, RAFT];

/// Group-commit threads.
pub const THREADS: usize = 4;
/// Threads of the larger group commit and of the acks=all workload.
pub const MANY_THREADS: usize = 16;

/// Tries to drop the page cache (needs root outside a restricted container).
pub fn drop_caches() -> bool {
    sync_all();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn sync_all() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
}

/// Settles the machine before a timed region: write-back of earlier runs is finished.
fn settle() {
    sync_all();
}

fn fresh(scratch: &Path, name: &str) -> PathBuf {
    let dir = scratch.join(name.replace([' ', ':', '(', ')', '+'], "_"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create run dir");
    dir
}

fn cleanup(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

fn push(results: &mut Results, w: Workload, engine: &'static str, s: Sample) {
    if std::env::var_os("PEERS_SAMPLES").is_some() {
        eprintln!(
            "sample {} | {engine} | {:.0} MB/s",
            w.title(),
            s.messages as f64 * crate::MESSAGE_BYTES as f64 / s.secs / 1e6
        );
    }
    results.entry((w, engine)).or_default().push(s);
}

fn timed(messages: u64, f: impl FnOnce()) -> Sample {
    settle();
    timed_now(messages, f)
}

/// Like [`timed`], but from a cold page cache (where dropping it is permitted): reads and
/// recovery, where the cache decides what is measured.
fn timed_cold(messages: u64, f: impl FnOnce()) -> Sample {
    drop_caches();
    timed_now(messages, f)
}

fn timed_now(messages: u64, f: impl FnOnce()) -> Sample {
    let cpu = process_cpu_secs();
    let written = device_bytes_written();
    let t = Instant::now();
    f();
    Sample {
        secs: t.elapsed().as_secs_f64(),
        messages,
        cpu_secs: process_cpu_secs() - cpu,
        device_bytes: device_bytes_written() - written,
        extra: Vec::new(),
    }
}

/// Bytes written to the machine's disks so far (`/proc/diskstats`, whole disks only, the ones
/// `/sys/block` lists): over a timed region it is what reached the device, the engine's data
/// and everything its syncs wrote with it (other processes' writes included, so it is a
/// reading of a quiet machine). 0 where there is no `/proc`.
fn device_bytes_written() -> u64 {
    let Ok(stats) = std::fs::read_to_string("/proc/diskstats") else {
        return 0;
    };
    stats
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.get(2)?;
            let sectors: u64 = fields.get(9)?.parse().ok()?;
            Path::new("/sys/block")
                .join(name)
                .exists()
                .then_some(sectors * 512)
        })
        .sum()
}

/// User plus system CPU time of the whole process so far: over a timed region it is what the
/// engine under test (its threads and background threads alike) spent on the machine's cores.
fn process_cpu_secs() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Times a full sequential read twice: from a cold page cache, then again warm.
fn read_twice(
    r: &mut Results,
    engine: &'static str,
    messages: u64,
    mut read_all: impl FnMut() -> u64,
) {
    let mut count = 0;
    let cold = timed_cold(messages, || count = read_all());
    assert_eq!(count, messages, "{engine} read every message (cold)");
    push(r, Workload::Read, engine, cold);
    let warm = timed(messages, || count = read_all());
    assert_eq!(count, messages, "{engine} read every message (warm)");
    push(r, Workload::ReadWarm, engine, warm);
}

/// A per-batch-latency sample: total time plus p50/p99 per batch in µs.
fn latency_sample(timed: Sample, mut lat: Vec<f64>) -> Sample {
    lat.sort_by(f64::total_cmp);
    let batches = lat.len().max(1) as f64;
    Sample {
        extra: vec![
            ("p50 µs/batch", percentile(&lat, 0.5) * 1e6),
            ("p99 µs/batch", percentile(&lat, 0.99) * 1e6),
            ("CPU µs/batch", timed.cpu_secs / batches * 1e6),
            ("device KB/batch", timed.device_bytes as f64 / batches / 1e3),
        ],
        ..timed
    }
}

fn kafka_crc(batch: &[u8]) -> u32 {
    // Kafka's CRC-32C covers attributes .. end (from byte 21).
    crc32c::crc32c(&batch[21..])
}

/// What a consumer does with a Kafka batch it is handed: checks its CRC-32C (reading every
/// byte, every record value included). Returns its record count.
fn consume_kafka_batch(batch: &[u8]) -> u64 {
    let stored = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
    assert_eq!(kafka_crc(batch), stored, "batch CRC-32C");
    u64::from(u32::from_be_bytes([
        batch[57], batch[58], batch[59], batch[60],
    ]))
}

/// What a consumer does with a payload it is handed by an engine without batch CRCs: a
/// CRC-32C over its bytes, folded into `acc` so it cannot be optimised away.
fn consume_payload(acc: &mut u32, payload: &[u8]) {
    *acc ^= crc32c::crc32c(payload);
}

/// One round: every engine × workload of the groups `args` names once, in a fixed order.
pub fn round(args: &Args, data: &Data, scratch: &Path, r: &mut Results) {
    let n = data.sizes.batches;
    let ns = data.sizes.sync_batches;
    let steady = (!args.fresh).then_some(args.recycled);
    let durable = Durable {
        steady,
        writes: args.writes,
        cold: args.cold,
    };

    if args.runs("append") {
        // (a) + (d): append without fsync, then read back what was appended.
        bare_memcpy(data, n, r);
        bare_crc(data, n, r);
        bare_write(data, scratch, n, r);
        bare_mmap(data, scratch, n, r);
        oncelog_append_read(data, scratch, n, r);
        commitlog_append_read(data, scratch, n, r);
        raft_append_read(data, scratch, n, r);
        fjall_append_read(data, scratch, n, r);
        redb_append_read(data, scratch, n, r);
    }

    if args.runs("fsync") {
        // (b) fsync per batch.
        bare_write_fsync(data, scratch, ns, r);
        bare_pwrite_fsync(data, scratch, ns, false, r);
        bare_pwrite_fsync(data, scratch, ns, true, r);
        bare_direct_fsync(data, scratch, ns, r);
        oncelog_fsync(data, scratch, ns, durable, r);
        commitlog_fsync(data, scratch, ns, r);
        raft_fsync(data, scratch, ns, durable, r);
        fjall_fsync(data, scratch, ns, r);
        redb_fsync(data, scratch, ns, r);
    }

    if args.runs("group") {
        // (c) group commit.
        for (threads, w) in [
            (THREADS, Workload::GroupCommit),
            (MANY_THREADS, Workload::GroupCommit16),
        ] {
            let batches = &data.kafka[..ns];
            bare_group_fsync(batches, PER_BATCH, threads, w, scratch, r);
            oncelog_group(batches, PER_BATCH, threads, w, scratch, durable, r);
            raft_group(&data.payloads[..ns], threads, w, scratch, durable, r);
        }
    }

    if args.runs("acks") {
        // (g) acks=all: many producers of small batches, each waiting for durability.
        let na = data.sizes.acks_batches;
        let w = Workload::AcksAll;
        oncelog_group(
            &data.acks_kafka[..na],
            ACKS_PER_BATCH,
            MANY_THREADS,
            w,
            scratch,
            durable,
            r,
        );
        raft_group(
            &data.acks_payloads[..na],
            MANY_THREADS,
            w,
            scratch,
            durable,
            r,
        );
    }

    if args.runs("recovery") {
        // (e) recovery of an unflushed tail.
        oncelog_recovery(data, scratch, n, r);
        raft_recovery(data, scratch, n, r);
    }

    if args.runs("tail") {
        // (f) one appender, tailing readers.
        for (readers, w) in [
            (1, Workload::Tail1),
            (2, Workload::Tail2),
            (4, Workload::Tail4),
        ] {
            oncelog_tail(data, scratch, n, readers, w, r);
        }
    }
}

// ---------------------------------------------------------------- bare baselines

fn bare_memcpy(data: &Data, n: usize, r: &mut Results) {
    let total = data.kafka_bytes(n);
    let mut dst = vec![1u8; total]; // written, so every page is faulted in before timing
    let s = timed(data.messages(n), || {
        let mut pos = 0;
        for b in &data.kafka[..n] {
            dst[pos..pos + b.len()].copy_from_slice(b);
            pos += b.len();
        }
    });
    std::hint::black_box(&dst);
    push(r, Workload::Append, BARE_MEMCPY, s);
}

fn bare_crc(data: &Data, n: usize, r: &mut Results) {
    let mut acc = 0u32;
    let s = timed(data.messages(n), || {
        for b in &data.kafka[..n] {
            acc ^= kafka_crc(b);
        }
    });
    std::hint::black_box(acc);
    push(r, Workload::Append, BARE_CRC, s);
}

fn bare_write(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "bare-write");
    let mut f = File::create(dir.join("data")).expect("create");
    let mut acc = 0u32;
    let s = timed(data.messages(n), || {
        for b in &data.kafka[..n] {
            acc ^= kafka_crc(b);
            f.write_all(b).expect("write");
        }
    });
    std::hint::black_box(acc);
    f.sync_data().expect("fdatasync");
    drop(f);
    cleanup(&dir);
    push(r, Workload::Append, BARE_WRITE, s);
}

fn bare_mmap(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "bare-mmap");
    let total = data.kafka_bytes(n);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("data"))
        .expect("create");
    // SAFETY: plain fallocate on an fd we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, total as libc::off_t) };
    if rc != 0 {
        f.set_len(total as u64).expect("set_len");
    }
    // SAFETY: the file is private to this run and not resized while mapped.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.expect("mmap");
    let mut acc = 0u32;
    let s = timed(data.messages(n), || {
        let mut pos = 0;
        for b in &data.kafka[..n] {
            acc ^= kafka_crc(b);
            map[pos..pos + b.len()].copy_from_slice(b);
            pos += b.len();
        }
    });
    std::hint::black_box(acc);
    map.flush().expect("msync");
    drop(map);
    f.sync_data().expect("fdatasync");
    drop(f);
    cleanup(&dir);
    push(r, Workload::Append, BARE_MMAP, s);
}

fn bare_write_fsync(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "bare-write-fsync");
    let mut f = File::create(dir.join("data")).expect("create");
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for b in &data.kafka[..n] {
            let t = Instant::now();
            let _ = kafka_crc(b);
            f.write_all(b).expect("write");
            f.sync_data().expect("fdatasync");
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(f);
    cleanup(&dir);
    push(
        r,
        Workload::FsyncPerBatch,
        BARE_WRITE_FSYNC,
        latency_sample(s, lat),
    );
}

/// The physical floor of (b): a positional write of each batch and an fdatasync, into a file
/// whose blocks were allocated with `fallocate` (unwritten extents, as raft-engine allocates
/// its files) or written with zeros and synced beforehand (what `Preallocation::Zeroed` does).
fn bare_pwrite_fsync(data: &Data, scratch: &Path, n: usize, zeroed: bool, r: &mut Results) {
    use std::os::unix::fs::FileExt;
    let dir = fresh(scratch, "bare-pwrite-fsync");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("data"))
        .expect("create");
    let total = data.kafka_bytes(n) as u64;
    // SAFETY: plain fallocate on an fd we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, total as libc::off_t) };
    assert_eq!(rc, 0, "fallocate");
    if zeroed {
        let zeros = vec![0u8; 4096];
        let mut at = 0;
        while at < total {
            f.write_all_at(&zeros, at).expect("zeros");
            at += 4096;
        }
    }
    f.sync_data().expect("fdatasync");
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        let mut at = 0u64;
        for b in &data.kafka[..n] {
            let t = Instant::now();
            f.write_all_at(b, at).expect("pwrite");
            f.sync_data().expect("fdatasync");
            at += b.len() as u64;
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(f);
    cleanup(&dir);
    let name = if zeroed {
        BARE_ZEROED_FSYNC
    } else {
        BARE_FALLOCATED_FSYNC
    };
    push(r, Workload::FsyncPerBatch, name, latency_sample(s, lat));
}

/// A new file of at least `len` bytes of zeros, written and synced: blocks a durable write
/// overwrites, as a recycled file's are.
fn zeroed_file(path: &Path, len: usize) -> File {
    use std::os::unix::fs::FileExt;
    let f = File::create(path).expect("create");
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        f.write_all_at(&zeros, at as u64).expect("zeros");
        at += zeros.len();
    }
    f.sync_all().expect("fsync");
    f
}

/// The ceiling of group commit with `threads` appenders: each has one batch waiting at a
/// time, so no sync can cover more than `threads` batches; here every sync covers exactly
/// that many, with no thread to wake and nothing between one sync and the next but one
/// `pwritev` of the group, into a zeroed file (written blocks, as a recycled file's are). A
/// batch is acknowledged when its group's sync returns. What any engine's coordination could
/// reach on this device with this many appenders.
fn bare_group_fsync(
    batches: &[Vec<u8>],
    per_batch: usize,
    threads: usize,
    w: Workload,
    scratch: &Path,
    r: &mut Results,
) {
    let dir = fresh(scratch, "bare-group-fsync");
    let total: usize = batches.iter().map(Vec::len).sum();
    let f = zeroed_file(&dir.join("data"), total);
    let mut lat = Vec::with_capacity(batches.len());
    let s = timed((batches.len() * per_batch) as u64, || {
        let mut at = 0usize;
        for group in batches.chunks(threads) {
            let t = Instant::now();
            let iov: Vec<libc::iovec> = group
                .iter()
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                })
                .collect();
            let len: usize = group.iter().map(Vec::len).sum();
            // SAFETY: each iovec points at a live batch of its stated length, read only.
            let n = unsafe { libc::pwritev(f.as_raw_fd(), iov.as_ptr(), iov.len() as i32, at as libc::off_t) };
            assert_eq!(n, len as isize, "pwritev: {}", std::io::Error::last_os_error());
            f.sync_data().expect("fdatasync");
            at += len;
            let took = t.elapsed().as_secs_f64();
            lat.extend(std::iter::repeat_n(took, group.len()));
        }
    });
    drop(f);
    cleanup(&dir);
    push(r, w, BARE_GROUP_FSYNC, latency_sample(s, lat));
}

/// The other floor of (b): each batch written with `O_DIRECT|O_DSYNC` into a zeroed file,
/// bypassing the page cache (whole 4 KiB blocks: the block holding the previous batch's end
/// is written again with the new bytes after it, as a database's WAL does). What a durable
/// append could gain by leaving the page cache, which oncelog's mapped readers rely on.
fn bare_direct_fsync(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const BLOCK: usize = 4096;
    let dir = fresh(scratch, "bare-direct-fsync");
    let path = dir.join("data");
    drop(zeroed_file(&path, data.kafka_bytes(n) + BLOCK));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(&path)
        .expect("open O_DIRECT");
    let largest = data.kafka[..n].iter().map(Vec::len).max().unwrap_or(0);
    let len = (largest + 2 * BLOCK).next_multiple_of(BLOCK);
    let layout = std::alloc::Layout::from_size_align(len, BLOCK).expect("layout");
    // SAFETY: the layout has a non-zero size; the buffer is freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!ptr.is_null(), "allocation");
    // SAFETY: `ptr` is a fresh allocation of `len` bytes, used only through this slice.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        let mut pos = 0usize;
        for b in &data.kafka[..n] {
            let t = Instant::now();
            // `buf` starts with the block that holds `pos`, its bytes before `pos` kept.
            let start = pos - pos % BLOCK;
            let head = pos - start;
            buf[head..head + b.len()].copy_from_slice(b);
            let end = (pos + b.len()).next_multiple_of(BLOCK);
            f.write_all_at(&buf[..end - start], start as u64)
                .expect("O_DIRECT write");
            pos += b.len();
            let next = pos - pos % BLOCK;
            buf.copy_within(next - start..next - start + BLOCK, 0);
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    // SAFETY: allocated above with this layout, and `buf` is not used again.
    unsafe { std::alloc::dealloc(ptr, layout) };
    drop(f);
    cleanup(&dir);
    push(
        r,
        Workload::FsyncPerBatch,
        BARE_DIRECT_FSYNC,
        latency_sample(s, lat),
    );
}

// ---------------------------------------------------------------- oncelog

fn oncelog_open(dir: &Path, policy: FlushPolicy) -> Log {
    Log::open(
        dir,
        LogConfig::builder().flush_policy(policy).build().unwrap(),
    )
    .expect("oncelog open")
}

/// Segments of the steady-state durable workloads (both engines' files are this large):
/// larger than what the timed region of any durable workload writes (about 11 MB), so it
/// runs inside one recycled file, as almost every append of a broker's partition does (one
/// roll per `segment.bytes`, 1 GiB by default).
pub const STEADY_SEGMENT: usize = 16 << 20;
/// Recycled files oncelog keeps in the steady state.
pub const STEADY_POOL: usize = 2;

/// How the durable workloads' stores are set up.
#[derive(Clone, Copy)]
struct Durable {
    /// The steady state's recycled files oncelog keeps (`None`: fresh stores).
    steady: Option<usize>,
    /// How oncelog writes appends.
    writes: AppendWrites,
    /// The page cache is dropped after the steady state's warm-up.
    cold: bool,
}

/// A durable log (`FlushPolicy::Always`). In the steady state its segments are
/// [`STEADY_SEGMENT`]s, it keeps [`STEADY_POOL`] recycled files, and before it is handed
/// over it wrote and deleted enough that its active segment and every roll of the timed
/// region reuse a file retention deleted (as a broker's partition does once retention runs).
fn oncelog_durable(dir: &Path, durable: Durable) -> Log {
    let Some(pool) = durable.steady else {
        return Log::open(
            dir,
            LogConfig::builder()
                .flush_policy(FlushPolicy::Always)
                .append_writes(durable.writes)
                .build()
                .unwrap(),
        )
        .expect("oncelog open");
    };
    let log = Log::open(
        dir,
        LogConfig::builder()
            .flush_policy(FlushPolicy::Always)
            .append_writes(durable.writes)
            .segment_bytes(STEADY_SEGMENT)
            .recycled_segments(pool)
            // Retention removes every segment when asked, at once: only the warm-up asks.
            .retention_bytes(Some(0))
            .retention_ms(None)
            .file_delete_delay_ms(0)
            .build()
            .unwrap(),
    )
    .expect("oncelog open");
    // 64 KiB batches: segments end within one of STEADY_SEGMENT, so a recycled file is
    // about as long as the segment that reuses it.
    let mut b = oncelog::format::BatchBuilder::new();
    for i in 0..64 {
        b.append(1_700_000_000_000 + i, None, Some(&[0x5Au8; 1000][..]), &[]);
    }
    let warm = b.build().expect("warm-up batch");
    let per_segment = STEADY_SEGMENT / warm.len();
    let fill = |segments: usize| {
        for _ in 0..segments * per_segment {
            oncelog_append_one(&log, &warm);
        }
    };
    // Segments for the pool, then retention: the log rolls and the old files enter it.
    fill(STEADY_POOL + 1);
    log.maintenance().enforce_retention(0).expect("retention");
    if durable.cold {
        // The pool's files leave the page cache before a roll reuses them.
        drop_caches();
    }
    // A segment more (its roll reuses a file), and retention again: the active segment is
    // then a recycled file, and the pool full.
    fill(1);
    log.maintenance().enforce_retention(0).expect("retention");
    let m = log.metrics();
    assert!(
        pool == 0 || m.recycled_rolls >= 1,
        "the warm-up did not recycle: {:?}",
        m.rolls
    );
    log
}

fn oncelog_append_one(log: &Log, b: &[u8]) {
    match log.append(b).expect("oncelog append") {
        AppendOutcome::Appended(_) => {}
        other => panic!("unexpected append outcome {other:?}"),
    }
}

fn oncelog_append_read(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "oncelog");
    let log = oncelog_open(&dir, FlushPolicy::Manual);
    let s = timed(data.messages(n), || {
        for b in &data.kafka[..n] {
            oncelog_append_one(&log, b);
        }
    });
    log.close().expect("close");
    drop(log);
    push(r, Workload::Append, ONCELOG, s);

    let log = oncelog_open(&dir, FlushPolicy::Manual);
    read_twice(r, ONCELOG, data.messages(n), || {
        let mut count = 0u64;
        let mut offset = 0i64;
        loop {
            let bytes = log.read(offset, 1 << 20).expect("read");
            if bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&bytes) {
                let (_, batch) = item.expect("valid batch");
                count += consume_kafka_batch(batch.as_bytes());
                offset = batch.last_offset() + 1;
            }
        }
        count
    });
    log.close().expect("close");
    drop(log);
    cleanup(&dir);
}

fn oncelog_fsync(data: &Data, scratch: &Path, n: usize, durable: Durable, r: &mut Results) {
    let dir = fresh(scratch, "oncelog-fsync");
    let log = oncelog_durable(&dir, durable);
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for b in &data.kafka[..n] {
            let t = Instant::now();
            oncelog_append_one(&log, b);
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    log.close().expect("close");
    drop(log);
    cleanup(&dir);
    push(r, Workload::FsyncPerBatch, ONCELOG, latency_sample(s, lat));
}

/// `threads` appenders sharing one log under `FlushPolicy::Always`: each append returns once
/// its batch is durable, so the threads' appends share syncs (group commit).
fn oncelog_group(
    batches: &[Vec<u8>],
    per_batch: usize,
    threads: usize,
    w: Workload,
    scratch: &Path,
    durable: Durable,
    r: &mut Results,
) {
    let n = batches.len();
    let dir = fresh(scratch, "oncelog-group");
    let log = Arc::new(oncelog_durable(&dir, durable));
    // One durable batch before the timed region, as raft_group writes one: the first sync of
    // a fresh store makes its new files durable (oncelog's also syncs the directory, which
    // raft-engine never does for its first file), a one-off a broker pays when it creates a
    // partition, not per produce request; measured steady state is the workload.
    oncelog_append_one(&log, &batches[0]);
    let syncs_before = log.metrics().flushes;
    let lat = Mutex::new(Vec::with_capacity(n));
    let s = timed((n * per_batch) as u64, || {
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (log, lat) = (&log, &lat);
                scope.spawn(move || {
                    let mut mine = Vec::with_capacity(n / threads + 1);
                    for b in batches.iter().skip(t).step_by(threads) {
                        let start = Instant::now();
                        oncelog_append_one(log, b);
                        mine.push(start.elapsed().as_secs_f64());
                    }
                    lat.lock().unwrap().extend(mine);
                });
            }
        });
    });
    // How many batches each sync covered, and what a sync took (the log's own counters).
    let m = log.metrics();
    log.close().expect("close");
    drop(log);
    cleanup(&dir);
    let lat = lat.into_inner().unwrap();
    let mut sample = latency_sample(s, lat);
    sample.extra.push((
        "batches/sync",
        n as f64 / (m.flushes - syncs_before).max(1) as f64,
    ));
    sample.extra.push((
        "sync p50 µs",
        m.flush_latency.quantile(0.5).as_secs_f64() * 1e6,
    ));
    push(r, w, ONCELOG, sample);
}

fn oncelog_recovery(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "oncelog-recovery");
    let log = oncelog_open(&dir, FlushPolicy::Manual);
    for b in &data.kafka[..n] {
        oncelog_append_one(&log, b);
    }
    log.abandon();
    let mut validated = 0u64;
    let mut reopened = None;
    let s = timed_cold(data.messages(n), || {
        let log = oncelog_open(&dir, FlushPolicy::Manual);
        validated = log.recovery_report().bytes_validated;
        reopened = Some(log);
    });
    let log = reopened.expect("reopened");
    assert_eq!(
        log.log_end_offset(),
        data.messages(n) as i64,
        "oncelog recovered every batch"
    );
    // The same unclean tail again, its bytes now in the page cache (a process crash): this
    // measures validation itself rather than the disk.
    log.abandon();
    let mut reopened = None;
    let warm = timed(data.messages(n), || {
        reopened = Some(oncelog_open(&dir, FlushPolicy::Manual));
    });
    let log = reopened.expect("reopened");
    assert_eq!(
        log.recovery_report().bytes_validated,
        validated,
        "validated again"
    );
    log.close().expect("close");
    drop(log);
    cleanup(&dir);
    let mut s = s;
    s.extra.push(("MB validated", validated as f64 / 1e6));
    push(r, Workload::Recovery, ONCELOG, s);
    push(r, Workload::RecoveryWarm, ONCELOG, warm);
}

fn oncelog_tail(
    data: &Data,
    scratch: &Path,
    n: usize,
    readers: usize,
    w: Workload,
    r: &mut Results,
) {
    let dir = fresh(scratch, "oncelog-tail");
    let log = Arc::new(oncelog_open(&dir, FlushPolicy::Manual));
    let done = AtomicBool::new(false);
    let lag_sum = AtomicU64::new(0);
    let lag_samples = AtomicU64::new(0);
    let lag_max = AtomicU64::new(0);
    let total = data.messages(n) as i64;
    let mut append_secs = 0.0;
    let caught_up = Mutex::new(Vec::new());
    settle();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..readers {
            let (log, done) = (&log, &done);
            let (lag_sum, lag_samples, lag_max) = (&lag_sum, &lag_samples, &lag_max);
            let caught_up = &caught_up;
            scope.spawn(move || {
                let mut offset = 0i64;
                while offset < total {
                    let end = log.log_end_offset();
                    let lag = (end - offset).max(0) as u64;
                    lag_sum.fetch_add(lag, Ordering::Relaxed);
                    lag_samples.fetch_add(1, Ordering::Relaxed);
                    lag_max.fetch_max(lag, Ordering::Relaxed);
                    let bytes = log.read(offset, 1 << 20).expect("tail read");
                    if bytes.is_empty() {
                        if done.load(Ordering::Acquire) && log.log_end_offset() == offset {
                            break;
                        }
                        std::thread::yield_now();
                        continue;
                    }
                    for item in BatchIter::new(&bytes) {
                        let (_, batch) = item.expect("valid batch");
                        offset = batch.last_offset() + 1;
                    }
                }
                caught_up
                    .lock()
                    .unwrap()
                    .push(start.elapsed().as_secs_f64());
            });
        }
        for b in &data.kafka[..n] {
            oncelog_append_one(&log, b);
        }
        append_secs = start.elapsed().as_secs_f64();
        done.store(true, Ordering::Release);
    });
    // How long after the last append the slowest reader had read everything.
    let catch_up_ms = caught_up
        .into_inner()
        .unwrap()
        .into_iter()
        .fold(append_secs, f64::max)
        .sub(append_secs)
        * 1e3;
    log.close().expect("close");
    drop(log);
    cleanup(&dir);
    let samples = lag_samples.load(Ordering::Relaxed).max(1);
    push(
        r,
        w,
        ONCELOG,
        Sample {
            secs: append_secs,
            messages: data.messages(n),
            cpu_secs: f64::NAN,
            device_bytes: 0,
            extra: vec![
                (
                    "mean reader lag (msgs)",
                    lag_sum.load(Ordering::Relaxed) as f64 / samples as f64,
                ),
                (
                    "max reader lag (msgs)",
                    lag_max.load(Ordering::Relaxed) as f64,
                ),
                ("reader catch-up ms", catch_up_ms),
            ],
        },
    );
}

// ---------------------------------------------------------------- commitlog

fn commitlog_open(dir: &Path) -> commitlog::CommitLog {
    let mut opts = commitlog::LogOptions::new(dir);
    opts.segment_max_bytes(1 << 30);
    opts.index_max_items(2_000_000);
    opts.message_max_bytes(1 << 24);
    commitlog::CommitLog::new(opts).expect("commitlog open")
}

fn commitlog_bufs(data: &Data, n: usize) -> Vec<commitlog::message::MessageBuf> {
    data.payloads[..n]
        .iter()
        .map(|batch| {
            let mut buf = commitlog::message::MessageBuf::default();
            for p in batch {
                buf.push(p).expect("push");
            }
            buf
        })
        .collect()
}

fn commitlog_append_read(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    use commitlog::message::MessageSet;
    let dir = fresh(scratch, "commitlog");
    let mut bufs = commitlog_bufs(data, n);
    let mut log = commitlog_open(&dir);
    let s = timed(data.messages(n), || {
        for buf in bufs.iter_mut() {
            log.append(buf).expect("commitlog append");
        }
    });
    drop(bufs);
    log.flush().expect("flush");
    // commitlog's flush syncs only its index (its segment flush is `File::flush`, a no-op):
    // make the data durable as every other engine's is at this point.
    File::open(dir.join(format!("{:020}.log", 0)))
        .and_then(|f| f.sync_data())
        .expect("fdatasync segment");
    drop(log);
    push(r, Workload::Append, COMMITLOG, s);

    let log = commitlog_open(&dir);
    read_twice(r, COMMITLOG, data.messages(n), || {
        let mut count = 0u64;
        let mut offset = 0u64;
        let mut acc = 0u32;
        loop {
            let buf = log
                .read(offset, commitlog::ReadLimit::max_bytes(1 << 20))
                .expect("commitlog read");
            let mut last = None;
            for m in buf.iter() {
                consume_payload(&mut acc, m.payload());
                count += 1;
                last = Some(m.offset());
            }
            match last {
                Some(o) => offset = o + 1,
                None => break,
            }
        }
        std::hint::black_box(acc);
        count
    });
    drop(log);
    cleanup(&dir);
}

fn commitlog_fsync(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "commitlog-fsync");
    let mut bufs = commitlog_bufs(data, n);
    let mut log = commitlog_open(&dir);
    // Its flush does not sync the segment; sync it through a second descriptor of the file.
    let segment = File::open(dir.join(format!("{:020}.log", 0))).expect("open segment");
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for buf in bufs.iter_mut() {
            let t = Instant::now();
            log.append(buf).expect("commitlog append");
            log.flush().expect("flush");
            segment.sync_data().expect("fdatasync");
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(log);
    cleanup(&dir);
    push(
        r,
        Workload::FsyncPerBatch,
        COMMITLOG,
        latency_sample(s, lat),
    );
}

// ---------------------------------------------------------------- raft-engine

type RaftEngine = raft_engine::Engine;

const REGION: u64 = 1;

fn raft_open(dir: &Path) -> RaftEngine {
    let cfg = raft_engine::Config {
        dir: dir.to_str().expect("utf-8 path").to_owned(),
        // 0 = never compress.
        batch_compression_threshold: raft_engine::ReadableSize(0),
        ..raft_engine::Config::default()
    };
    raft_engine::Engine::open(cfg).expect("raft-engine open")
}

/// The region the steady-state warm-up writes and compacts away.
const WARM_REGION: u64 = 999;

/// A raft-engine for the durable workloads. In the steady state its files are
/// [`STEADY_SEGMENT`]s and it recycles purged files (format version 2, `enable_log_recycle`,
/// both its defaults; the pool holds `purge_threshold / target_file_size * 3 / 2` files, here
/// 3), and before it is handed over it wrote, compacted and purged enough that
/// every file it rotates to in the timed region is a recycled one.
fn raft_durable(dir: &Path, durable: Durable) -> RaftEngine {
    if durable.steady.is_none() {
        return raft_open(dir);
    }
    let cfg = raft_engine::Config {
        dir: dir.to_str().expect("utf-8 path").to_owned(),
        batch_compression_threshold: raft_engine::ReadableSize(0),
        format_version: raft_engine::Version::V2,
        enable_log_recycle: true,
        target_file_size: raft_engine::ReadableSize(STEADY_SEGMENT as u64),
        // recycle capacity = purge_threshold / target_file_size * 3 / 2 = 3 files; purging
        // needs more than this much in the append queue.
        purge_threshold: raft_engine::ReadableSize((STEADY_SEGMENT * STEADY_POOL) as u64),
        ..raft_engine::Config::default()
    };
    let engine = raft_engine::Engine::open(cfg).expect("raft-engine open");
    // As many bytes as oncelog's warm-up, in 64 KiB batches of 1,000-byte entries.
    let mut index = 1u64;
    let mut write = || {
        let entries: Vec<Entry> = (0..64)
            .map(|_| {
                index += 1;
                Entry::new(index - 1, vec![0x5A; 1000])
            })
            .collect();
        let mut lb = raft_engine::LogBatch::with_capacity(64);
        lb.add_entries::<EntryExt>(WARM_REGION, &entries)
            .expect("add entries");
        engine.write(&mut lb, true).expect("raft write");
        index
    };
    // The files' names are their sequence numbers; the newest is the active one.
    let files = || -> Vec<u64> {
        let mut seqs: Vec<u64> = std::fs::read_dir(dir)
            .expect("list raft-engine dir")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".raftlog")?.parse().ok()
            })
            .collect();
        seqs.sort_unstable();
        seqs
    };
    let purge = |upto: u64| {
        engine.compact_to(WARM_REGION, upto);
        engine.purge_expired_files().expect("purge");
    };
    let mut last = 0;
    for _ in 0..(STEADY_POOL + 2) * STEADY_SEGMENT / (64 * 1000) {
        last = write();
    }
    purge(last);
    // Only the active file holds anything live now: every other one still there is kept for
    // recycling (0.4.2 keeps them under their old names until it shuts down).
    let kept = files();
    assert!(
        kept.len() > 1,
        "raft-engine's purge kept no file to recycle: {kept:?}"
    );
    // Writes until the engine rotates into a recycled file (a new name, no new file), and
    // purges again: the timed region starts in a recycled file, as oncelog's does.
    let active = kept.last().copied();
    if durable.cold {
        // The purged files leave the page cache before the engine rotates into one.
        drop_caches();
    }
    while files().last().copied() == active {
        last = write();
    }
    purge(last);
    let now = files();
    assert!(
        now.len() >= kept.len(),
        "raft-engine created a file instead of recycling one: {kept:?} then {now:?}"
    );
    engine
}

/// One `LogBatch` per Kafka batch: 100 entries, entry index = message number + 1.
fn raft_batches(data: &Data, n: usize) -> Vec<raft_engine::LogBatch> {
    data.payloads[..n]
        .iter()
        .enumerate()
        .map(|(b, batch)| {
            let entries: Vec<Entry> = batch
                .iter()
                .enumerate()
                .map(|(m, p)| Entry::new((b * PER_BATCH + m) as u64 + 1, p.clone()))
                .collect();
            let mut lb = raft_engine::LogBatch::with_capacity(PER_BATCH);
            lb.add_entries::<EntryExt>(REGION, &entries)
                .expect("add entries");
            lb
        })
        .collect()
}

/// raft-engine 0.4.2's `sync()` writes an empty batch, which returns before syncing: force a
/// sync with a real synced write.
fn raft_force_sync(engine: &RaftEngine) {
    let mut lb = raft_engine::LogBatch::default();
    lb.put(REGION + 1, b"sync".to_vec(), b"1".to_vec())
        .expect("put");
    engine.write(&mut lb, true).expect("synced write");
}

fn raft_append_read(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "raft");
    let mut batches = raft_batches(data, n);
    let engine = raft_open(&dir);
    let s = timed(data.messages(n), || {
        for lb in batches.iter_mut() {
            engine.write(lb, false).expect("raft write");
        }
    });
    drop(batches);
    raft_force_sync(&engine);
    drop(engine);
    push(r, Workload::Append, RAFT, s);

    let engine = raft_open(&dir);
    let total = data.messages(n);
    read_twice(r, RAFT, total, || {
        let mut count = 0u64;
        let mut next = 1u64;
        let mut acc = 0u32;
        let mut out: Vec<Entry> = Vec::with_capacity(16_384);
        while next <= total {
            out.clear();
            let got = engine
                .fetch_entries_to::<EntryExt>(REGION, next, total + 1, Some(1 << 20), &mut out)
                .expect("fetch");
            if got == 0 {
                break;
            }
            count += got as u64;
            for e in &out {
                consume_payload(&mut acc, &e.data);
            }
            next = out.last().expect("fetched").index + 1;
        }
        std::hint::black_box(acc);
        count
    });
    drop(engine);
    cleanup(&dir);
}

fn raft_fsync(data: &Data, scratch: &Path, n: usize, durable: Durable, r: &mut Results) {
    let dir = fresh(scratch, "raft-fsync");
    let mut batches = raft_batches(data, n);
    let engine = raft_durable(&dir, durable);
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for lb in batches.iter_mut() {
            let t = Instant::now();
            engine.write(lb, true).expect("raft write");
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(engine);
    cleanup(&dir);
    push(r, Workload::FsyncPerBatch, RAFT, latency_sample(s, lat));
}

/// `threads` writers sharing one engine, each `write(.., true)`: raft-engine's write group
/// shares the sync of writers that arrive together.
fn raft_group(
    payloads: &[Vec<Vec<u8>>],
    threads: usize,
    w: Workload,
    scratch: &Path,
    durable: Durable,
    r: &mut Results,
) {
    let n = payloads.len();
    let messages: usize = payloads.iter().map(Vec::len).sum();
    let dir = fresh(scratch, "raft-group");
    // Raft indexes are contiguous per region, so each thread writes the batches it was dealt
    // to its own region, as separate Raft groups do.
    let per_thread: Vec<Vec<raft_engine::LogBatch>> = (0..threads)
        .map(|t| {
            let mut next_index = 1u64;
            payloads
                .iter()
                .skip(t)
                .step_by(threads)
                .map(|batch| {
                    let entries: Vec<Entry> = batch
                        .iter()
                        .map(|p| {
                            next_index += 1;
                            Entry::new(next_index - 1, p.clone())
                        })
                        .collect();
                    let mut lb = raft_engine::LogBatch::with_capacity(batch.len());
                    lb.add_entries::<EntryExt>(REGION + 10 + t as u64, &entries)
                        .expect("add entries");
                    lb
                })
                .collect()
        })
        .collect();
    let engine = raft_durable(&dir, durable);
    // One durable write before the timed region, as oncelog_group appends one.
    raft_force_sync(&engine);
    let lat = Mutex::new(Vec::with_capacity(n));
    let s = timed(messages as u64, || {
        std::thread::scope(|scope| {
            for mut mine in per_thread {
                let (engine, lat) = (&engine, &lat);
                scope.spawn(move || {
                    let mut l = Vec::with_capacity(mine.len());
                    for lb in mine.iter_mut() {
                        let t = Instant::now();
                        engine.write(lb, true).expect("raft write");
                        l.push(t.elapsed().as_secs_f64());
                    }
                    lat.lock().unwrap().extend(l);
                });
            }
        });
    });
    drop(engine);
    cleanup(&dir);
    let lat = lat.into_inner().unwrap();
    push(r, w, RAFT, latency_sample(s, lat));
}

fn raft_recovery(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "raft-recovery");
    let mut batches = raft_batches(data, n);
    let engine = raft_open(&dir);
    for lb in batches.iter_mut() {
        engine.write(lb, false).expect("raft write");
    }
    drop(batches);
    drop(engine); // no purge, no sync: the whole tail is unsynced
    let mut reopened = None;
    let s = timed_cold(data.messages(n), || {
        reopened = Some(raft_open(&dir));
    });
    let engine = reopened.expect("reopened");
    assert_eq!(
        engine.last_index(REGION),
        Some(data.messages(n)),
        "raft-engine recovered every entry"
    );
    drop(engine);
    let mut reopened = None;
    let warm = timed(data.messages(n), || {
        reopened = Some(raft_open(&dir));
    });
    let engine = reopened.expect("reopened");
    assert_eq!(
        engine.last_index(REGION),
        Some(data.messages(n)),
        "raft-engine again"
    );
    drop(engine);
    cleanup(&dir);
    push(r, Workload::Recovery, RAFT, s);
    push(r, Workload::RecoveryWarm, RAFT, warm);
}

// ---------------------------------------------------------------- fjall

fn fjall_open(dir: &Path) -> (fjall::Database, fjall::Keyspace) {
    let db = fjall::Database::builder(dir).open().expect("fjall open");
    let ks = db
        .keyspace("log", fjall::KeyspaceCreateOptions::default)
        .expect("keyspace");
    (db, ks)
}

fn key(batch: usize) -> [u8; 8] {
    ((batch * PER_BATCH) as u64).to_be_bytes()
}

fn fjall_append_read(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "fjall");
    let (db, ks) = fjall_open(&dir);
    let s = timed(data.messages(n), || {
        for (i, b) in data.kafka[..n].iter().enumerate() {
            ks.insert(key(i), b.as_slice()).expect("insert");
        }
    });
    db.persist(fjall::PersistMode::SyncAll).expect("persist");
    // Flush the memtable into a table, so the read below scans tables rather than a memtable
    // replayed from the journal at open.
    ks.rotate_memtable_and_wait().expect("flush memtable");
    drop(ks);
    drop(db);
    push(r, Workload::Append, FJALL, s);

    let (db, ks) = fjall_open(&dir);
    read_twice(r, FJALL, data.messages(n), || {
        let mut count = 0u64;
        for kv in ks.iter() {
            let v = kv.value().expect("value");
            count += consume_kafka_batch(&v);
        }
        count
    });
    drop(ks);
    drop(db);
    cleanup(&dir);
}

fn fjall_fsync(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "fjall-fsync");
    let (db, ks) = fjall_open(&dir);
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for (i, b) in data.kafka[..n].iter().enumerate() {
            let t = Instant::now();
            ks.insert(key(i), b.as_slice()).expect("insert");
            db.persist(fjall::PersistMode::SyncData).expect("persist");
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(ks);
    drop(db);
    cleanup(&dir);
    push(r, Workload::FsyncPerBatch, FJALL, latency_sample(s, lat));
}

// ---------------------------------------------------------------- redb

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("log");

fn redb_write(db: &redb::Database, i: usize, b: &[u8], durability: redb::Durability) {
    let mut tx = db.begin_write().expect("begin");
    tx.set_durability(durability).expect("durability");
    {
        let mut t = tx.open_table(TABLE).expect("table");
        t.insert(key(i).as_slice(), b).expect("insert");
    }
    tx.commit().expect("commit");
}

fn redb_append_read(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    use redb::{ReadableDatabase, ReadableTable};
    let dir = fresh(scratch, "redb");
    let path = dir.join("db.redb");
    let db = redb::Database::create(&path).expect("redb create");
    let s = timed(data.messages(n), || {
        for (i, b) in data.kafka[..n].iter().enumerate() {
            redb_write(&db, i, b, redb::Durability::None);
        }
    });
    // A durable commit persists the non-durable ones before it.
    let tx = db.begin_write().expect("begin");
    tx.commit().expect("durable commit");
    drop(db);
    push(r, Workload::Append, REDB, s);

    let db = redb::Database::create(&path).expect("redb open");
    read_twice(r, REDB, data.messages(n), || {
        let mut count = 0u64;
        let tx = db.begin_read().expect("begin read");
        let t = tx.open_table(TABLE).expect("table");
        for kv in t.iter().expect("iter") {
            let (_, v) = kv.expect("kv");
            count += consume_kafka_batch(v.value());
        }
        count
    });
    drop(db);
    cleanup(&dir);
}

fn redb_fsync(data: &Data, scratch: &Path, n: usize, r: &mut Results) {
    let dir = fresh(scratch, "redb-fsync");
    let db = redb::Database::create(dir.join("db.redb")).expect("redb create");
    let mut lat = Vec::with_capacity(n);
    let s = timed(data.messages(n), || {
        for (i, b) in data.kafka[..n].iter().enumerate() {
            let t = Instant::now();
            redb_write(&db, i, b, redb::Durability::Immediate);
            lat.push(t.elapsed().as_secs_f64());
        }
    });
    drop(db);
    cleanup(&dir);
    push(r, Workload::FsyncPerBatch, REDB, latency_sample(s, lat));
}
