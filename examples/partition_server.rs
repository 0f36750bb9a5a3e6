//! One partition served to producers and a long-polling consumer, as a broker serves it:
//! producer threads append (acknowledged once durable), and a consumer's fetch loop waits for
//! the high watermark to move instead of polling.
//!
//! ```sh
//! cargo run --example partition_server
//! ```

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use oncelog::format::BatchBuilder;
use oncelog::{FlushPolicy, Log, LogConfig, WaitOutcome};

const PRODUCERS: i64 = 3;
const BATCHES: i32 = 200;
const RECORDS_PER_BATCH: i32 = 10;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Every append returns once durable (appends racing for the disk share one fsync): an
    // acknowledged record is committed, and readable at once.
    let config = LogConfig::builder()
        .flush_policy(FlushPolicy::Always)
        .build()?;
    let log = Arc::new(Log::open(dir.path(), config)?);

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|pid| {
            let log = Arc::clone(&log);
            thread::spawn(move || -> Result<(), String> {
                for b in 0..BATCHES {
                    let mut builder = BatchBuilder::new().producer(pid, 0, b * RECORDS_PER_BATCH);
                    for r in 0..RECORDS_PER_BATCH {
                        let value = format!("producer {pid} record {}", b * RECORDS_PER_BATCH + r);
                        builder.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
                    }
                    let batch = builder.build().map_err(|e| e.to_string())?;
                    log.append(&batch).map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();

    // The consumer: Kafka's fetch loop. Each round fetches whole batches from where the last
    // ended; with nothing committed past it, it long-polls until the high watermark moves.
    let expected = PRODUCERS * i64::from(BATCHES * RECORDS_PER_BATCH);
    let consumer = {
        let log = Arc::clone(&log);
        thread::spawn(move || -> Result<i64, String> {
            let mut reader = log.reader(0).max_bytes(64 * 1024);
            let (mut records, mut fetches, mut waits) = (0i64, 0, 0);
            while records < expected {
                match reader.next_fetch().map_err(|e| e.to_string())? {
                    Some(fetched) => {
                        fetches += 1;
                        for record in fetched.records() {
                            record.map_err(|e| e.to_string())?;
                            records += 1;
                        }
                    }
                    None => {
                        waits += 1;
                        match reader.wait(Duration::from_secs(5)) {
                            WaitOutcome::Ready { .. } => {}
                            WaitOutcome::TimedOut { .. } => return Err("no data for 5 s".into()),
                            other => return Err(format!("the wait ended: {other:?}")),
                        }
                    }
                }
            }
            println!("consumer: {records} records in {fetches} fetches, {waits} long polls");
            Ok(records)
        })
    };

    for p in producers {
        p.join().map_err(|_| "a producer panicked")??;
    }
    let consumed = consumer.join().map_err(|_| "the consumer panicked")??;
    assert_eq!(consumed, expected);
    let metrics = log.metrics();
    println!(
        "log end {}, {} batches appended, {} flushes (group commit shares them)",
        log.log_end_offset(),
        metrics.batches_appended,
        metrics.flushes
    );
    log.close()?;
    Ok(())
}
