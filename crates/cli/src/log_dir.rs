//! `dump`, `verify` and `recover` of a whole Kafka log dir: every partition in name order, a
//! progress bar on stderr (when it is a terminal), one summary line per partition, and a total.
//!
//! Every entry of the log dir that is not looked at (Kafka's `__cluster_metadata-0`, deleted,
//! `-future` and `-stray` partitions, unknown files) is named with why, as each file of a
//! partition that `dump` leaves out is.
//!
//! `dump` and `verify` only read (the log dir's own files too, each checked on its own, so a
//! malformed checkpoint is reported and the partitions still looked at); `recover` opens the
//! log dir as a [`LogManager`] would on a broker's start, partitions in parallel, and closes it
//! cleanly.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use oncelog::io::RealFs;
use oncelog::log_dir as files;
use oncelog::verify::{self, VerifyReport};
use oncelog::{
    DirEntry, Environment, JobIntervals, LogConfig, LogManager, ManagerConfig, PartitionReport,
    RecoveryMode,
};
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

/// Whether `path` is a log dir rather than a partition directory: it holds no segment of its
/// own, and has a log dir's files or a directory named like a partition.
pub fn is_log_dir(path: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(path) else {
        return false;
    };
    let mut partition_like = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") {
            return false;
        }
        let kafka_file = [
            files::META_PROPERTIES,
            files::RECOVERY_POINTS,
            files::LOG_START_OFFSETS,
            files::HIGH_WATERMARKS,
            files::CLEANER_OFFSETS,
            files::CLEAN_SHUTDOWN_FILE,
        ]
        .contains(&name.as_str());
        let dir = entry.file_type().is_ok_and(|t| t.is_dir());
        partition_like |=
            kafka_file || (dir && matches!(files::parse_dir_name(&name), DirEntry::Partition(_)));
    }
    partition_like
}

/// An entry of a log dir that `dump`, `verify` and `recover` do not look at, and why: an
/// operator tool names what it leaves out (Kafka's metadata log, deleted, `-future` and
/// `-stray` partitions, anything not named like a partition, unknown files).
#[derive(Serialize)]
pub(crate) struct Skipped {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The entry's path (a file or a directory), named `file` as in every other dump line.
    file: String,
    reason: String,
}

impl Skipped {
    pub(crate) fn new(entry: &Path, reason: String) -> Skipped {
        Skipped {
            kind: "skipped",
            file: entry.display().to_string(),
            reason,
        }
    }

    pub(crate) fn print(&self, out: &mut Out, json: bool) -> Result<(), CliError> {
        if json {
            out.json(self)?;
        } else {
            out.line(&format!("SKIPPED {}: {}", self.file, self.reason))?;
        }
        Ok(())
    }
}

/// A partition directory of a log dir: its name (`<topic>-<n>`) and path.
type Partition = (String, PathBuf);

/// The partition directories of a log dir, in name order, by name (`<topic>-<n>`), and every
/// other entry with why it is left out (the log dir's own files, checked on their own, aside).
fn partitions(dir: &Path) -> Result<(Vec<Partition>, Vec<Skipped>), CliError> {
    let mut entries: Vec<(String, Option<std::fs::FileType>)> = std::fs::read_dir(dir)
        .map_err(|e| CliError(format!("{}: {}", dir.display(), crate::io_reason(&e))))?
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.file_type().ok(),
            )
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let own_files = [
        files::META_PROPERTIES,
        files::RECOVERY_POINTS,
        files::LOG_START_OFFSETS,
        files::HIGH_WATERMARKS,
        files::CLEANER_OFFSETS,
        files::CLEAN_SHUTDOWN_FILE,
        files::LOCK_FILE,
    ];
    let mut parts = Vec::new();
    let mut skipped = Vec::new();
    for (name, kind) in entries {
        let path = dir.join(&name);
        match kind {
            Some(k) if k.is_dir() => match files::parse_dir_name(&name) {
                DirEntry::Partition(tp) => parts.push((tp.to_string(), path)),
                DirEntry::Deleted(tp) => skipped.push(Skipped::new(
                    &path,
                    format!("a deleted partition ({tp}), waiting for its removal"),
                )),
                DirEntry::Other(why) => skipped.push(Skipped::new(&path, why)),
            },
            Some(k) if k.is_file() && own_files.contains(&name.as_str()) => {}
            Some(k) if k.is_file() => {
                skipped.push(Skipped::new(&path, "not a file of a Kafka log dir".into()))
            }
            _ => skipped.push(Skipped::new(
                &path,
                "neither a regular file nor a directory".into(),
            )),
        }
    }
    Ok((parts, skipped))
}

fn progress(len: usize, what: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} partitions") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what);
    bar
}

/// One of the log dir's own files, checked: `None` when it is absent.
#[derive(Serialize)]
struct DirFile {
    #[serde(rename = "type")]
    kind: &'static str,
    file: String,
    /// Entries (one per partition for a checkpoint).
    entries: Option<usize>,
    /// What is wrong with it, if anything, with the line.
    error: Option<String>,
    line: Option<usize>,
}

/// Reads and checks the log dir's own files; prints a line for each; returns whether all are
/// sound.
fn check_dir_files(out: &mut Out, dir: &Path, json: bool) -> Result<bool, CliError> {
    let mut sound = true;
    let checkpoints = [
        files::RECOVERY_POINTS,
        files::LOG_START_OFFSETS,
        files::HIGH_WATERMARKS,
        files::CLEANER_OFFSETS,
    ];
    let names = std::iter::once(files::META_PROPERTIES).chain(checkpoints);
    for name in names {
        let path = dir.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let (entries, error) = if name == files::META_PROPERTIES {
            match files::decode_meta_properties(&path, text.as_bytes()) {
                Ok(_) => (None, None),
                Err(e) => (None, Some(e)),
            }
        } else {
            match files::decode_offset_checkpoint(&path, text.as_bytes()) {
                Ok(o) => (Some(o.len()), None),
                Err(e) => (None, Some(e)),
            }
        };
        sound &= error.is_none();
        let line = DirFile {
            kind: if name == files::META_PROPERTIES {
                "meta_properties"
            } else {
                "offset_checkpoint"
            },
            file: path.display().to_string(),
            entries,
            line: error.as_ref().and_then(|e| e.line),
            error: error.map(|e| e.reason),
        };
        if json {
            out.json(&line)?;
        } else {
            match (&line.error, line.entries) {
                (Some(e), _) => {
                    let at = line.line.map(|l| format!(": line {l}")).unwrap_or_default();
                    out.line(&format!("PROBLEM {}{at}: {e}", line.file))?;
                }
                (None, Some(n)) => out.line(&format!(
                    "{}: {}",
                    line.file,
                    plural(n as u64, "entry", "entries")
                ))?,
                (None, None) => out.line(&format!("{}: sound", line.file))?,
            }
        }
    }
    let marker = dir.join(files::CLEAN_SHUTDOWN_FILE).exists();
    if !json {
        out.line(&format!(
            "{}: {}",
            dir.display(),
            if marker {
                "shut down cleanly (.kafka_cleanshutdown)"
            } else {
                "no clean-shutdown marker"
            }
        ))?;
    }
    Ok(sound)
}

#[derive(Serialize)]
struct Total {
    #[serde(rename = "type")]
    kind: &'static str,
    log_dir: String,
    partitions: usize,
    sound: usize,
    failed: usize,
}

fn total(
    out: &mut Out,
    json: bool,
    dir: &Path,
    what: &str,
    n: usize,
    failed: usize,
) -> Result<(), CliError> {
    if json {
        out.json(&Total {
            kind: "summary",
            log_dir: dir.display().to_string(),
            partitions: n,
            sound: n - failed,
            failed,
        })?;
    } else {
        out.line(&format!(
            "{}: {}, {} {what}, {failed} not",
            dir.display(),
            plural(n as u64, "partition", "partitions"),
            n - failed
        ))?;
    }
    Ok(())
}

/// `verify LOGDIR`.
pub fn verify(dir: &Path, json: bool) -> Result<Status, CliError> {
    let mut out = Out::stdout();
    let files_sound = check_dir_files(&mut out, dir, json)?;
    let (parts, skipped) = partitions(dir)?;
    for s in &skipped {
        s.print(&mut out, json)?;
    }
    let bar = progress(parts.len(), "verify");
    let mut failed = 0;
    for (name, path) in &parts {
        let report = verify::verify_dir(&RealFs, path)?;
        failed += usize::from(!report.is_clean());
        bar.suspend(|| -> Result<(), CliError> {
            if json {
                out.json(&PartitionVerify::new(name, path, &report))?;
            } else {
                for p in &report.problems {
                    out.line(&crate::verify::problem_text(p))?;
                }
                out.line(&verify_line(name, &report))?;
            }
            Ok(out.flush()?)
        })?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    total(&mut out, json, dir, "clean", parts.len(), failed)?;
    out.flush()?;
    Ok(if failed == 0 && files_sound {
        Status::Ok
    } else {
        Status::Failed
    })
}

#[derive(Serialize)]
struct PartitionVerify<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    partition: &'a str,
    #[serde(flatten)]
    report: crate::verify::Report<'a>,
}

impl<'a> PartitionVerify<'a> {
    fn new(name: &'a str, path: &Path, r: &'a VerifyReport) -> PartitionVerify<'a> {
        PartitionVerify {
            kind: "partition",
            partition: name,
            report: crate::verify::to_json(path, r),
        }
    }
}

fn verify_line(name: &str, r: &VerifyReport) -> String {
    let state = if r.is_clean() {
        "clean".to_string()
    } else {
        plural(r.problems.len() as u64, "problem", "problems")
    };
    format!(
        "PARTITION {name}: {state}: {}, {}, {} bytes of batches",
        plural(r.segments as u64, "segment", "segments"),
        plural(r.batches, "batch", "batches"),
        r.bytes
    )
}

/// `dump LOGDIR`.
pub fn dump(dir: &Path, json: bool) -> Result<Status, CliError> {
    let mut dumper = crate::dump::Dumper::new(json);
    let files_sound = check_dir_files(&mut dumper.out, dir, json)?;
    let (parts, skipped) = partitions(dir)?;
    for s in &skipped {
        s.print(&mut dumper.out, json)?;
    }
    let bar = progress(parts.len(), "dump");
    let mut failed = 0;
    for (name, path) in &parts {
        dumper.damaged = false;
        let (targets, skipped_files) = crate::dump::list_partition_dir(path)?;
        bar.suspend(|| -> Result<(), CliError> {
            for t in &targets {
                dumper.dump(t)?;
            }
            for s in &skipped_files {
                s.print(&mut dumper.out, json)?;
            }
            let state = if dumper.damaged { "damaged" } else { "intact" };
            if json {
                dumper.out.json(&serde_json::json!({
                    "type": "partition",
                    "partition": name,
                    "dir": path.display().to_string(),
                    "files": targets.len(),
                    "damaged": dumper.damaged,
                }))?;
            } else {
                dumper.out.line(&format!(
                    "PARTITION {name}: {state}, {}",
                    plural(targets.len() as u64, "file", "files")
                ))?;
            }
            Ok(dumper.out.flush()?)
        })?;
        failed += usize::from(dumper.damaged);
        bar.inc(1);
    }
    bar.finish_and_clear();
    total(&mut dumper.out, json, dir, "intact", parts.len(), failed)?;
    dumper.out.flush()?;
    Ok(if failed == 0 && files_sound {
        Status::Ok
    } else {
        Status::Failed
    })
}

/// `recover LOGDIR`: the log dir opened by a [`LogManager`], partitions in parallel.
pub fn recover(
    dir: &Path,
    mode: RecoveryMode,
    deep: bool,
    threads: Option<usize>,
    json: bool,
) -> Result<Status, CliError> {
    let defaults = ManagerConfig::default();
    let recovery_threads = threads.unwrap_or(defaults.recovery_threads);
    let config = defaults
        .with_log(
            LogConfig::builder()
                .recovery_mode(mode)
                .deep_recovery(deep)
                .build()?,
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(recovery_threads);
    let (parts, skipped) = partitions(dir)?;
    let bar = progress(parts.len(), "recover");
    let m = LogManager::open_reporting(
        Environment::default(),
        &[dir],
        config,
        &|_: &PartitionReport| bar.inc(1),
    )
    .map_err(|e| CliError(format!("cannot open the log dir {}: {e}", dir.display())))?;
    bar.finish_and_clear();
    let mut out = Out::stdout();
    for s in &skipped {
        s.print(&mut out, json)?;
    }
    let report = m.open_report().clone();
    let mut failed = 0;
    let mut data_removed = false;
    for p in &report.partitions {
        let name = p.partition.to_string();
        match &p.outcome {
            Ok(opened) => {
                let log = m
                    .get(&p.partition.topic, p.partition.partition)
                    .map_err(|e| CliError(e.to_string()))?;
                let r = crate::recover::Report::new(&p.dir, mode, &log);
                data_removed |= r.data_removed();
                if json {
                    out.json(&serde_json::json!({
                        "type": "partition", "partition": name, "recovered": true,
                        "segments_vouched": opened.recovery.segments_vouched,
                        "seconds": p.duration.as_secs_f64(),
                        "report": r,
                    }))?;
                } else {
                    for line in crate::recover::detail_lines(&r) {
                        out.line(&line)?;
                    }
                    if r.data_removed() {
                        for line in crate::recover::totals_lines(&r) {
                            out.line(&format!("{name}: {line}"))?;
                        }
                    }
                    out.line(&recover_line(&name, opened, p.duration.as_secs_f64()))?;
                }
            }
            Err(f) => {
                failed += 1;
                if json {
                    out.json(&serde_json::json!({
                        "type": "partition", "partition": name, "recovered": false,
                        "kind": f.kind(), "message": f.to_string(),
                    }))?;
                } else {
                    out.line(&format!(
                        "FAILED {name} ({}): {f}; nothing of it was changed",
                        f.kind()
                    ))?;
                }
            }
        }
    }
    m.close()
        .map_err(|e| CliError(format!("closing the log dir {}: {e}", dir.display())))?;
    total(
        &mut out,
        json,
        dir,
        "recovered",
        report.partitions.len(),
        failed,
    )?;
    if !json {
        out.line(&format!(
            "opened on {} in {:.3} s: {} validated ({} bytes), {} trusted on the log dir's checkpoints",
            plural(report.threads as u64, "thread", "threads"),
            report.duration.as_secs_f64(),
            plural(report.segments_validated() as u64, "segment", "segments"),
            report.bytes_validated(),
            plural(report.segments_vouched() as u64, "segment", "segments"),
        ))?;
    }
    out.flush()?;
    Ok(match (failed, data_removed) {
        (0, false) => Status::Ok,
        (0, true) => Status::DataRemoved,
        _ => Status::Failed,
    })
}

fn recover_line(name: &str, o: &oncelog::PartitionOpened, seconds: f64) -> String {
    let r = &o.recovery;
    let how = if r.clean_shutdown { "clean" } else { "unclean" };
    format!(
        "PARTITION {name}: {how}: offsets {}..{}, {}, {} validated, {} vouched, {} cut, {:.3} s",
        o.log_start_offset,
        o.log_end_offset,
        plural(o.segments as u64, "segment", "segments"),
        r.segments_validated,
        r.segments_vouched,
        r.truncations.len(),
        seconds
    )
}
