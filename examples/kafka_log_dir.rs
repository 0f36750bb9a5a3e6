//! Appends to a partition of a Kafka log dir through the log manager and hands the dir back to
//! Kafka in a state it reads whole: producer snapshots in Kafka's format (version 1), a clean
//! close that writes Kafka's offset checkpoints and `.kafka_cleanshutdown`.
//!
//! ```sh
//! cargo run --example kafka_log_dir -- LOGDIR TOPIC PARTITION RECORDS
//! ```
//!
//! The partition is created if the log dir has none of that name (Kafka will not know it: in
//! a KRaft cluster a partition exists when the controller says so). Each record's value is
//! `oncelog <n>`; the batches come from one idempotent producer (id 4242), so Kafka's own
//! deduplication sees them after the hand-back.

use std::path::PathBuf;

use oncelog::format::BatchBuilder;
use oncelog::producer::SnapshotVersion;
use oncelog::{AppendOutcome, JobIntervals, LogConfig, LogManager, ManagerConfig, PartitionConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, topic, partition, records] = args.as_slice() else {
        eprintln!("usage: kafka_log_dir LOGDIR TOPIC PARTITION RECORDS");
        std::process::exit(2);
    };
    let (partition, records): (i32, i64) = (partition.parse()?, records.parse()?);
    let config = ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                // Kafka reads version 1 (the newest batch of each producer); oncelog's own version
                // 3 keeps the whole dedup window, but Kafka would discard it and rebuild from the log.
                .snapshot_version(SnapshotVersion::V1)
                // Kafka's segments are rarely 1 GiB in a test; each active segment is allocated whole.
                .segment_bytes(64 << 20)
                .segment_index_bytes(1 << 20)
                .build()?,
        )
        .with_jobs(JobIntervals::none());
    let manager = LogManager::open(&[PathBuf::from(dir)], config)?;
    let report = manager.open_report();
    println!(
        "opened {} partitions in {:.3} s: {} segments validated, {} trusted on Kafka's checkpoints",
        report.partitions.len(),
        report.duration.as_secs_f64(),
        report.segments_validated(),
        report.segments_vouched()
    );
    let log = match manager.get(topic, partition) {
        Ok(log) => log,
        Err(_) => manager.create(topic, partition, PartitionConfig::default())?,
    };
    const PRODUCER: i64 = 4242;
    let first_seq = log.producer(PRODUCER).map_or(0, |e| e.last_seq() + 1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    for (n, seq) in (0..records).zip(first_seq..) {
        let mut b = BatchBuilder::new().producer(PRODUCER, 0, seq);
        b.append(now, None, Some(format!("oncelog {n}").as_bytes()), &[]);
        match log.append(&b.build()?)? {
            AppendOutcome::Appended(info) if n + 1 == records => {
                println!(
                    "appended {records} records, the last at offset {}",
                    info.last_offset
                )
            }
            AppendOutcome::Appended(_) => {}
            AppendOutcome::Duplicate(d) => println!("duplicate of offset {}", d.first_offset),
            other => println!("another outcome: {other:?}"),
        }
    }
    println!(
        "{topic}-{partition}: offsets {}..{}",
        log.log_start_offset(),
        log.log_end_offset()
    );
    drop(log);
    manager.close()?;
    Ok(())
}
