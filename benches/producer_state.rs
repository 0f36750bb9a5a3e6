//! Producer state at scale: with 1M idempotent producers, each holding a full
//! window of 5 batches, measures the snapshot size, the time to encode it, the time to load
//! it (file read + CRC + decode + table build, through `Log::open` of a directory holding only
//! that snapshot), and the heap bytes per producer in the table.
//!
//! Run: `cargo bench --bench producer_state` (`-- --producers N` to change the count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use oncelog::producer::state::{IncomingBatch, ProducerStateTable};
use oncelog::producer::{
    snapshot, snapshot_files, ProducerEntry, ProducerStateConfig, SnapshotVersion,
};
use oncelog::{Log, LogConfig};

/// Counts live heap bytes, to measure the table's memory per producer.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let producers: usize = args
        .iter()
        .position(|a| a == "--producers")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let window = 5;

    // The table, filled through the real rules: 5 batches per producer.
    let before = LIVE.load(Ordering::Relaxed);
    let mut table = ProducerStateTable::new(ProducerStateConfig::default()).unwrap();
    let mut offset = 0i64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for round in 0..window as i32 {
        for pid in 0..producers as i64 {
            let b = IncomingBatch {
                producer_id: pid,
                epoch: 0,
                first_seq: round * 10,
                last_seq: round * 10 + 9,
                offset_delta: 9,
                max_timestamp: 1_700_000_000_000 + offset,
                is_transactional: false,
                is_control: false,
            };
            table.record(&b, offset, now);
            offset += 10;
        }
    }
    let table_bytes = LIVE.load(Ordering::Relaxed) - before;

    let t = Instant::now();
    let bytes = snapshot::encode(table.iter(), SnapshotVersion::V2, 0);
    let encode_s = t.elapsed().as_secs_f64();
    let v1_size = snapshot::encode(table.iter(), SnapshotVersion::V1, 0).len();

    let dir = tempfile::tempdir().unwrap();
    let end = offset;
    snapshot_files::write(&oncelog::io::RealFs, dir.path(), end, &bytes).unwrap();
    // A log whose only content is the snapshot at its end: open = load + no replay. The log
    // starts at `end` (its checkpoint says so), so nothing below it is needed.
    std::fs::write(
        dir.path().join("oncelog.checkpoint"),
        format!("0\nclean_shutdown 1\nrecovery_point {end}\nlog_start_offset {end}\n"),
    )
    .unwrap();
    let mut opens = Vec::new();
    let mut decodes = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let entries: Vec<ProducerEntry> = snapshot::decode(&bytes).unwrap().entries;
        let mut fresh = ProducerStateTable::new(ProducerStateConfig::default()).unwrap();
        fresh.load(entries);
        decodes.push(t.elapsed().as_secs_f64());
        assert_eq!(fresh.len(), producers);
        drop(fresh);

        let t = Instant::now();
        let log = Log::open(
            dir.path(),
            LogConfig::builder().segment_bytes(1 << 20).build().unwrap(),
        )
        .unwrap();
        opens.push(t.elapsed().as_secs_f64());
        assert_eq!(log.producer_count(), producers);
        assert_eq!(log.producer_load_report().snapshot_offset, Some(end));
        let probe = log.producer(producers as i64 / 2).unwrap();
        assert_eq!(probe.batches().len(), window);
        log.close().unwrap();
    }
    println!("producers:                      {producers}");
    println!("window:                         {window} batches");
    println!(
        "snapshot v2 size:               {} bytes ({:.1} bytes/producer)",
        bytes.len(),
        bytes.len() as f64 / producers as f64
    );
    println!("snapshot v1 size (Kafka):       {v1_size} bytes");
    println!("snapshot encode:                {:.3} s", encode_s);
    println!(
        "snapshot decode + table load:   {:.3} s (median of 5)",
        median(decodes)
    );
    println!(
        "Log::open with the snapshot:    {:.3} s (median of 5; target < 1 s)",
        median(opens)
    );
    println!(
        "table heap:                     {} bytes ({:.1} bytes/producer)",
        table_bytes,
        table_bytes as f64 / producers as f64
    );
}
