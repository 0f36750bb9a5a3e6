//! `oncelog bench --partitions N [--threads T]`: the same workload as `bench`, spread round
//! robin over N partitions of one log dir opened by a [`LogManager`], appended from T threads.
//! With at least as many partitions as threads, each partition is appended by one thread
//! (partition p by thread p mod T), as a broker's request handlers serve a partition's produce
//! requests in order; within a thread the partitions take turns, a batch each. With fewer
//! partitions than threads, the threads share them (thread t appends to partition t mod N, the
//! threads of a partition taking its batches in turn), so `--partitions 1 --threads 16` is 16
//! appenders on one log: its group commit, the reference the many-partition figures are
//! compared with. The durable figure is the appends plus the final flush of every partition
//! (on the same threads).
//! The partitions are created in one batch (`create_seconds`, with the open of the empty log
//! dir); after the read-back the manager is dropped without closing, as a crash leaves it, and
//! opened again (`open_after_crash_seconds`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::bench::{build_batch, progress, read_back, BenchArgs, Layout, Measured, Summary};
use crate::{CliError, Status};
use oncelog::{
    AppendOutcome, Environment, JobIntervals, Log, LogConfig, LogManager, ManagerConfig,
    PartitionConfig, TopicPartition,
};

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

/// What one appending thread appends: batches `first`, `first + every`, … of each of its
/// partitions.
struct Share {
    partitions: Vec<usize>,
    first: usize,
    every: usize,
}

impl Share {
    /// Thread `t` of `threads` over `partitions`: its own partitions, or, with fewer partitions
    /// than threads, its turn among the threads of partition `t mod partitions`.
    fn of(t: usize, threads: usize, partitions: usize) -> Share {
        if partitions >= threads {
            return Share {
                partitions: (t..partitions).step_by(threads).collect(),
                first: 0,
                every: 1,
            };
        }
        let p = t % partitions;
        Share {
            partitions: vec![p],
            first: t / partitions,
            every: (threads - p).div_ceil(partitions),
        }
    }
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
    if partitions < threads && args.producers > 0 {
        return Err(CliError(format!(
            "--producers with more threads ({threads}) than partitions ({partitions}): a \
             producer's batches must be appended in order, by one thread"
        )));
    }
    let (loads, records) = build(args, partitions)?;
    let bytes: u64 = loads.iter().map(|l| l.data.len() as u64).sum();
    let config = ManagerConfig::default()
        .with_log(log.clone())
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(threads);
    let created = Instant::now();
    let m = LogManager::open_in(Environment::default(), &[dir], config.clone())?;
    // One batch, as a broker creates a topic's partitions: one sync of the log dir for all.
    let requests: Vec<(TopicPartition, PartitionConfig)> = (0..partitions)
        .map(|p| {
            (
                TopicPartition::new("bench", p as i32),
                PartitionConfig::default(),
            )
        })
        .collect();
    let logs: Vec<Arc<Log>> = m.create_many(&requests)?;
    let create_seconds = created.elapsed().as_secs_f64();

    let bar = progress(bytes, "append");
    let duplicates = AtomicU64::new(0);
    let start = Instant::now();
    let appended: Result<(), CliError> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (logs, loads, bar, duplicates) = (&logs, &loads, &bar, &duplicates);
                s.spawn(move || -> Result<(), CliError> {
                    let share = Share::of(t, threads, partitions);
                    let mine = &share.partitions;
                    let mut pending = 0u64;
                    for i in (share.first..).step_by(share.every) {
                        let mut any = false;
                        for &p in mine {
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

    let read = read_back(&logs.iter().map(|l| &**l).collect::<Vec<&Log>>())?;
    let ends: u64 = logs.iter().map(|l| l.log_end_offset() as u64).sum();
    drop(logs);
    // A crash as far as the disk is concerned: dropped without close, nothing more is written
    // (no clean checkpoint, no clean-shutdown marker), so the open that follows recovers.
    drop(m);
    let open_after_crash_seconds = reopen_after_crash(dir, config, partitions, ends)?;
    let measured = Measured {
        messages: records,
        batches: loads.iter().map(|l| l.ends.len() as u64).sum(),
        bytes,
        segment_bytes: log.segment_bytes,
        duplicates: duplicates.into_inner(),
        append_seconds,
        flush_seconds,
        read,
    };
    let layout = Layout::Partitions {
        partitions,
        threads,
        producers_per_partition: args.producers,
        segment_index_bytes: log.segment_index_bytes,
        create_seconds,
        open_after_crash_seconds,
    };
    Summary::new(args, layout, measured).report(args.json)
}

/// Opens the log dir a crash left, timed (on the manager's default recovery threads), checks that every partition came back with every
/// record (`ends`: the sum of the log end offsets before the crash), and closes it cleanly.
fn reopen_after_crash(
    dir: &Path,
    config: ManagerConfig,
    partitions: usize,
    ends: u64,
) -> Result<f64, CliError> {
    // A restart opens with the manager's own number of threads (at least 16: an open after a
    // crash waits on each partition's checkpoint syncs), not the appenders'.
    let threads = ManagerConfig::default().recovery_threads;
    let opening = Instant::now();
    let m = LogManager::open_in(
        Environment::default(),
        &[dir],
        config.with_recovery_threads(threads),
    )?;
    let seconds = opening.elapsed().as_secs_f64();
    let report = m.open_report();
    if let Some((tp, failure)) = report.failures().next() {
        return Err(CliError(format!(
            "{tp} did not open after the crash: {failure}"
        )));
    }
    let found: u64 = m
        .list()
        .iter()
        .map(|p| m.get(&p.partition.topic, p.partition.partition))
        .map(|log| log.map(|l| l.log_end_offset() as u64))
        .sum::<Result<u64, _>>()?;
    if report.opened() != partitions || found != ends {
        return Err(CliError(format!(
            "after the crash: {} partitions with {found} records, {partitions} with {ends} before",
            report.opened()
        )));
    }
    m.close()?;
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::Share;

    /// Every batch of every partition is appended by exactly one thread.
    #[test]
    fn the_shares_cover_every_batch_once() {
        for (threads, partitions) in [(16, 1), (16, 3), (5, 5), (2, 7), (16, 1000), (3, 2)] {
            let batches = 50;
            let mut seen = vec![vec![0u32; batches]; partitions];
            for t in 0..threads {
                let share = Share::of(t, threads, partitions);
                for &p in &share.partitions {
                    for i in (share.first..batches).step_by(share.every) {
                        seen[p][i] += 1;
                    }
                }
            }
            assert!(
                seen.iter().flatten().all(|&n| n == 1),
                "{threads} threads over {partitions} partitions: {seen:?}"
            );
        }
    }
}
