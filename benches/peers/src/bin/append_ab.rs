//! The no-fsync append of the peers harness's workload (a), alternated in one process between
//! the bare mmap+CRC loop, oncelog with its pages faulted in ahead (the default) and oncelog
//! with `prefault_bytes` 0, many rounds, medians: a quicker, tighter A/B of the prefault
//! thread than the whole harness (docs/performance.md, "Pages faulted in ahead of the writer").
//!
//! `cargo run --release --manifest-path benches/peers/Cargo.toml --bin append_ab -- [ROUNDS]
//!  [--drop-caches] [--pause-ms N]`; `--drop-caches` drops the page cache before each sample,
//! as the harness's cold reads do between its append rounds; `--pause-ms N` waits N ms
//! between freeing the previous sample's pages and the next sample (time for a VM's free
//! page reporting to hand them back to its host).

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

use oncelog::format::BatchBuilder;
use oncelog::{FlushPolicy, Log, LogConfig};

const BATCHES: usize = 10_000;

fn batches() -> Vec<Vec<u8>> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..BATCHES)
        .map(|b| {
            let mut builder = BatchBuilder::new();
            for _ in 0..100 {
                let mut p = Vec::with_capacity(104);
                while p.len() < 100 {
                    state ^= state >> 12;
                    state ^= state << 25;
                    state ^= state >> 27;
                    p.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
                }
                p.truncate(100);
                builder.append(1_700_000_000_000 + b as i64, None, Some(&p), &[]);
            }
            builder.build().expect("batch")
        })
        .collect()
}

fn bare(dir: &Path, batches: &[Vec<u8>]) -> f64 {
    let total: usize = batches.iter().map(Vec::len).sum();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("data"))
        .expect("create");
    // SAFETY: plain fallocate on a descriptor owned here.
    assert_eq!(
        unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, total as libc::off_t) },
        0
    );
    // SAFETY: the file is private to this run and not resized while mapped.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.expect("mmap");
    sync();
    let t = Instant::now();
    let (mut pos, mut acc) = (0, 0u32);
    for b in batches {
        acc ^= crc32c::crc32c(&b[21..]);
        map[pos..pos + b.len()].copy_from_slice(b);
        pos += b.len();
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(acc);
    secs
}

fn oncelog(dir: &Path, batches: &[Vec<u8>], prefault: bool) -> f64 {
    let mut config = LogConfig::builder().flush_policy(FlushPolicy::Manual);
    if !prefault {
        config = config.prefault_bytes(0);
    }
    let log = Log::open(dir, config.build().expect("config")).expect("open");
    sync();
    let t = Instant::now();
    for b in batches {
        log.append(b).expect("append");
    }
    let secs = t.elapsed().as_secs_f64();
    log.close().expect("close");
    secs
}

fn sync() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
}

fn main() {
    let mut rounds = 9;
    let mut drop_caches = false;
    let mut pause = std::time::Duration::ZERO;
    let usage = "usage: append_ab [ROUNDS] [--drop-caches] [--pause-ms N]";
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--drop-caches" => drop_caches = true,
            "--pause-ms" => {
                let ms = args.next().and_then(|v| v.parse().ok()).expect(usage);
                pause = std::time::Duration::from_millis(ms);
            }
            n => rounds = n.parse().expect(usage),
        }
    }
    let batches = batches();
    let payload = (BATCHES * 100 * 100) as f64;
    let scratch = tempfile::Builder::new()
        .prefix("append-ab-")
        .tempdir_in(oncelog_peers_target())
        .expect("scratch");
    let names = [
        "bare: mmap copy+CRC",
        "oncelog",
        "oncelog, prefault_bytes 0",
    ];
    let mut mbs: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        for (i, samples) in mbs.iter_mut().enumerate() {
            let dir = scratch.path().join("run");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("run dir");
            sync();
            std::thread::sleep(pause);
            if drop_caches {
                sync();
                let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            }
            let secs = match i {
                0 => bare(&dir, &batches),
                1 => oncelog(&dir, &batches, true),
                _ => oncelog(&dir, &batches, false),
            };
            samples.push(payload / secs / 1e6);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let bare_median = median(&mut mbs[0].clone());
    for (name, samples) in names.iter().zip(mbs.iter_mut()) {
        let m = median(samples);
        let all: Vec<String> = samples.iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "{name:28} median {m:5.0} MB/s  {:.2}x bare  (sorted: {})",
            m / bare_median,
            all.join(" ")
        );
    }
}

fn oncelog_peers_target() -> std::path::PathBuf {
    let t = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&t).expect("target dir");
    t
}
