//! An embedder's first program: open a partition, append from two idempotent producers, retry
//! a batch whose acknowledgement was lost, read it all back, close, reopen, truncate and
//! compact.
//!
//! ```sh
//! cargo run --example embed
//! ```

use oncelog::format::BatchBuilder;
use oncelog::{AppendOutcome, CleanupPolicy, CompactionConfig, Log, LogConfig};

/// A batch of producer `pid` (epoch 0) starting at sequence `seq`, one record per value.
fn batch(
    pid: i64,
    seq: i32,
    key: &str,
    values: &[&str],
) -> Result<Vec<u8>, oncelog::format::BatchError> {
    let mut builder = BatchBuilder::new().producer(pid, 0, seq);
    for (i, value) in values.iter().enumerate() {
        builder.append(
            1_700_000_000_000 + i as i64,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
            &[],
        );
    }
    builder.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Compaction keeps the newest record of each key; it needs keys on every record.
    let config = LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .compaction(CompactionConfig::default().with_min_cleanable_dirty_ratio(0.0))
        .build()?;
    let log = Log::open(dir.path(), config.clone())?;

    // Two idempotent producers, 7 and 8, each with its own sequence numbers.
    let first = batch(7, 0, "a", &["a1", "a2"])?;
    let AppendOutcome::Appended(info) = log.append(&first)? else {
        return Err("a new batch is appended".into());
    };
    println!(
        "producer 7 wrote offsets {}..={}",
        info.first_offset, info.last_offset
    );
    log.append(&batch(8, 0, "b", &["b1"])?)?;
    log.append(&batch(7, 2, "a", &["a3"])?)?;

    // Producer 7 lost the acknowledgement of its first batch and sends it again: it gets the
    // original offsets, and nothing is written.
    match log.append(&first)? {
        AppendOutcome::Duplicate(original) => {
            println!(
                "the retry is a duplicate of offsets {}..={}",
                original.first_offset, original.last_offset
            )
        }
        other => return Err(format!("expected a duplicate, got {other:?}").into()),
    }

    // Reads return committed records: by default, what a flush made durable.
    log.flush()?;
    let mut reader = log.reader(0);
    while let Some(record) = reader.next_record()? {
        let value = record.value.as_deref().unwrap_or_default();
        println!(
            "offset {}: {}",
            record.offset,
            String::from_utf8_lossy(value)
        );
    }
    assert_eq!(reader.position(), 4);
    log.close()?;

    // Reopen: the producers' sequences survive, so the same retry is still a duplicate.
    let log = Log::open(dir.path(), config)?;
    assert!(matches!(log.append(&first)?, AppendOutcome::Duplicate(_)));

    // Truncate the last record away (a follower matching its leader, or an embedder undoing a
    // tail it never acknowledged); the producer state is rebuilt to match.
    let cut = log.replica().truncate_to(3)?;
    println!(
        "truncated to {}, {} bytes removed",
        log.log_end_offset(),
        cut.bytes_removed
    );

    // Compact: seal the active segment so the cleaner may reach it, then keep the newest record
    // of each key.
    log.append(&batch(7, 2, "a", &["a3 again"])?)?;
    log.flush()?;
    log.roll()?;
    let report = log.maintenance().compact(1_700_000_000_000)?;
    println!("compaction removed {} records", report.records_removed);
    let mut reader = log.reader(log.log_start_offset());
    let mut kept = Vec::new();
    while let Some(record) = reader.next_record()? {
        kept.push(
            String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned(),
        );
    }
    println!("kept: {kept:?}");
    assert_eq!(kept, ["b1", "a3 again"]);
    log.close()?;
    Ok(())
}
