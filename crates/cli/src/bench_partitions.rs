//! `oncelog bench --partitions N [--threads T]`: the same workload as `bench`, spread round
//! robin over N partitions of one log dir opened by a [`LogManager`], appended from T threads.
//! Each partition is appended by one thread (partition p by thread p mod T), as a broker's
//! request handlers serve a partition's produce requests in order; within a thread the
//! partitions take turns, a batch each. The durable figure is the appends plus the final flush
//! of every partition (on the same threads).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use oncelog::format::BatchIter;
use oncelog::{
    AppendOutcome, Environment, JobIntervals, Log, LogConfig, LogManager, ManagerConfig,
    PartitionConfig,
};
use serde::Serialize;

use crate::bench::{build_batch, flush_name, progress, BenchArgs};
use crate::{plural, CliError, Status};

/// The batches of one partition, built before the clock starts.
struct PartitionLoad {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl PartitionLoad {
    fn batch(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.data[start..end])
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    /// Where the log was kept (`--dir`); absent when it was a temporary directory, removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_in: Option<String>,
    partitions: usize,
    threads: usize,
    messages: u64,
    batches: u64,
    bytes: u64,
    message_size: usize,
    batch_size: usize,
    producers_per_partition: u32,
    flush: String,
    segment_bytes: usize,
    segment_index_bytes: usize,
    /// Opening the empty log dir and creating the partitions.
    create_seconds: f64,
    append_seconds: f64,
    append_mb_per_s: f64,
    flush_seconds: f64,
    durable_seconds: f64,
    durable_mb_per_s: f64,
    durable_records_per_s: f64,
    read_bytes: u64,
    read_seconds: f64,
    read_mb_per_s: f64,
    read_crc_failures: u64,
}

fn build(args: &BenchArgs, partitions: usize) -> Result<(Vec<PartitionLoad>, u64), CliError> {
    let batch_size = args.batch_size;
    let batch_count = args.messages.div_ceil(batch_size);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut loads: Vec<PartitionLoad> = (0..partitions)
        .map(|_| PartitionLoad {
            data: Vec::new(),
            ends: Vec::new(),
        })
        .collect();
    // Each partition's producers have their own sequences.
    let mut sequences = vec![vec![0i32; args.producers as usize]; partitions];
    let mut value = vec![0u8; args.message_size];
    let mut records = 0u64;
    for i in 0..batch_count {
        let p = i % partitions;
        let n = batch_size.min(args.messages - i * batch_size);
        let mut builder = oncelog::format::BatchBuilder::new();
        let seqs = &mut sequences[p];
        if !seqs.is_empty() {
            let k = (i / partitions) % seqs.len();
            builder = builder.producer(1000 + k as i64, 0, seqs[k]);
            seqs[k] = seqs[k].wrapping_add(n as i32) & i32::MAX;
        }
        let load = &mut loads[p];
        build_batch(
            &mut builder,
            (i * batch_size) as u64,
            n,
            &mut value,
            now,
            &mut load.data,
        )?;
        load.ends.push(load.data.len());
        records += n as u64;
    }
    Ok((loads, records))
}

pub fn run(args: &BenchArgs, partitions: usize, dir: &Path) -> Result<Status, CliError> {
    let threads = args.threads();
    let log = crate::bench::build_config(
        LogConfig::builder()
            .segment_bytes(args.segment_bytes_or(4 << 20))
            .segment_index_bytes(args.segment_index_bytes_or(64 << 10))
            .flush_policy(args.flush),
    )?;
    crate::bench::check_args(args, &log)?;
    let (loads, records) = build(args, partitions)?;
    let bytes: u64 = loads.iter().map(|l| l.data.len() as u64).sum();
    let config = ManagerConfig::default()
        .with_log(log.clone())
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(threads);
    let created = Instant::now();
    let m = LogManager::open_in(Environment::default(), &[dir], config)?;
    let logs: Vec<Arc<Log>> = (0..partitions)
        .map(|p| m.create("bench", p as i32, PartitionConfig::default()))
        .collect::<Result<_, _>>()?;
    let create_seconds = created.elapsed().as_secs_f64();

    let bar = progress(bytes, "append");
    let duplicates = AtomicU64::new(0);
    let start = Instant::now();
    let appended: Result<(), CliError> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (logs, loads, bar, duplicates) = (&logs, &loads, &bar, &duplicates);
                s.spawn(move || -> Result<(), CliError> {
                    let mine: Vec<usize> = (t..partitions).step_by(threads).collect();
                    let mut pending = 0u64;
                    for i in 0.. {
                        let mut any = false;
                        for &p in &mine {
                            let Some(batch) = loads[p].batch(i) else {
                                continue;
                            };
                            any = true;
                            match logs[p].append(batch) {
                                Ok(AppendOutcome::Appended(_)) => {}
                                Ok(AppendOutcome::Duplicate(_)) => {
                                    duplicates.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(other) => {
                                    return Err(CliError(format!(
                                        "append to bench-{p}: unexpected outcome {other:?}"
                                    )))
                                }
                                Err(e) => {
                                    return Err(CliError(format!(
                                        "append to bench-{p} failed ({}): {e}",
                                        e.kind()
                                    )))
                                }
                            }
                            pending += batch.len() as u64;
                            if pending >= 1 << 20 {
                                bar.inc(pending);
                                pending = 0;
                            }
                        }
                        if !any {
                            return Ok(());
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(CliError("an appender panicked".into())))
        })
    });
    appended?;
    let append_seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let flush_start = Instant::now();
    std::thread::scope(|s| {
        let flushers: Vec<_> = (0..threads)
            .map(|t| {
                let logs = &logs;
                s.spawn(move || -> Result<(), CliError> {
                    for log in logs.iter().skip(t).step_by(threads) {
                        log.flush()?;
                    }
                    Ok(())
                })
            })
            .collect();
        flushers.into_iter().try_for_each(|f| {
            f.join()
                .unwrap_or_else(|_| Err(CliError("a flusher panicked".into())))
        })
    })?;
    let flush_seconds = flush_start.elapsed().as_secs_f64();
    let durable_seconds = append_seconds + flush_seconds;

    let read = read_back(&logs)?;
    drop(logs);
    m.close()?;
    let mb = bytes as f64 / 1e6;
    let summary = Summary {
        partitions,
        threads,
        messages: records,
        batches: loads.iter().map(|l| l.ends.len() as u64).sum(),
        bytes,
        message_size: args.message_size,
        batch_size: args.batch_size,
        producers_per_partition: args.producers,
        flush: flush_name(args.flush),
        segment_bytes: log.segment_bytes,
        segment_index_bytes: log.segment_index_bytes,
        create_seconds,
        append_seconds,
        append_mb_per_s: mb / append_seconds,
        flush_seconds,
        durable_seconds,
        durable_mb_per_s: mb / durable_seconds,
        durable_records_per_s: records as f64 / durable_seconds,
        read_bytes: read.0,
        read_seconds: read.1,
        read_mb_per_s: read.0 as f64 / 1e6 / read.1,
        read_crc_failures: read.2,
        kept_in: args.dir.as_ref().map(|d| d.display().to_string()),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_text(&summary);
    }
    let duplicates = duplicates.into_inner();
    if duplicates > 0 {
        eprintln!("oncelog: {duplicates} fresh batches were answered as duplicates");
        return Ok(Status::Failed);
    }
    if read.2 > 0 || read.0 != bytes {
        eprintln!(
            "oncelog: read back {} bytes ({} CRC failures), appended {bytes}",
            read.0, read.2
        );
        return Ok(Status::Failed);
    }
    Ok(Status::Ok)
}

/// Every partition read back in 1 MiB fetches, every batch's CRC-32C checked: (bytes,
/// seconds, CRC failures).
fn read_back(logs: &[Arc<Log>]) -> Result<(u64, f64, u64), CliError> {
    let total: u64 = logs.iter().map(|l| l.size_bytes()).sum();
    let bar = progress(total, "read");
    let (mut bytes, mut failures) = (0u64, 0u64);
    let start = Instant::now();
    for log in logs {
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let fetch = log.fetch(offset, 1 << 20)?;
            if fetch.bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&fetch.bytes) {
                let (_, b) = item.map_err(|e| CliError(format!("read at offset {offset}: {e}")))?;
                failures += u64::from(!b.is_crc_valid());
            }
            offset = fetch.next_offset;
            bytes += fetch.bytes.len() as u64;
            bar.inc(fetch.bytes.len() as u64);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok((bytes, seconds, failures))
}

fn print_text(s: &Summary) {
    if let Some(dir) = &s.kept_in {
        println!("log kept in {dir} (--dir: not removed)");
    }
    println!(
        "appended {} messages of {} B in {} of {} across {} from {} (flush {}): {:.1} MB",
        s.messages,
        s.message_size,
        plural(s.batches, "batch", "batches"),
        plural(s.batch_size as u64, "record", "records"),
        plural(s.partitions as u64, "partition", "partitions"),
        plural(s.threads as u64, "thread", "threads"),
        s.flush,
        s.bytes as f64 / 1e6,
    );
    println!(
        "durable: {:.1} MB/s, {:.0} records/s (appends {:.3} s + final flush {:.3} s = {:.3} s)",
        s.durable_mb_per_s,
        s.durable_records_per_s,
        s.append_seconds,
        s.flush_seconds,
        s.durable_seconds
    );
    println!(
        "append:  {:.1} MB/s, the append calls alone, before the final flush",
        s.append_mb_per_s
    );
    println!(
        "read:    {:.1} MB/s ({:.1} MB in {:.3} s, every batch's CRC-32C checked)",
        s.read_mb_per_s,
        s.read_bytes as f64 / 1e6,
        s.read_seconds
    );
    println!(
        "create:  {} in {:.3} s (segments of {} B, indexes of {} B)",
        plural(s.partitions as u64, "partition", "partitions"),
        s.create_seconds,
        s.segment_bytes,
        s.segment_index_bytes
    );
    println!("MB = 10^6 bytes of whole batches, headers included");
}
