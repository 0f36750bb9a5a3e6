//! `oncelog dump`: every batch (a control batch with its marker type and coordinator epoch),
//! index entry, aborted-transaction entry, producer-snapshot entry and leader-epoch entry of a
//! partition directory or of one file, one line each.
//!
//! It reads files with `std::fs::read` and never opens them for writing, and never goes
//! through `Log::open` (which would recover, trim and write a checkpoint): an operator must be
//! able to look at a damaged directory without changing a byte of it.
//!
//! Damage is reported, never panicked on: a batch whose CRC does not match is listed with
//! `crc_valid: false`; bytes that cannot be framed as a batch (torn tail, garbage) give one
//! error line with the byte position, and the rest of that file is not parsed. The zeros at the
//! end of a preallocated, untrimmed file (an active segment, or one left by a crash) are not
//! damage: they are reported as one line. A `leader-epoch-checkpoint` that cannot be parsed
//! gives one error line with the line at fault.
//!
//! A partition directory's `.log` lists only what the log holds: where `oncelog.checkpoint`
//! records a dead tail after a segment's batches (a truncation's, left while a reader held
//! those bytes; the next open trims it), those bytes are not in the log and are reported as one
//! `dead_tail` line, not batch by batch. An unreadable checkpoint is not dump's to judge
//! (`verify` does): the files are then listed whole.

use std::fs;
use std::path::{Path, PathBuf};

use clap::Args;
use oncelog::files::{self, Snapshot};
use oncelog::format::{decode_control_record, BatchIter, RecordBatch};
use oncelog::producer::{ProducerEntry, SnapshotVersion};
use serde::Serialize;

use crate::output::Out;
use crate::{CliError, Status};

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// A partition directory, a whole log dir (every partition, after the log dir's own files),
    /// or one `.log`, `.index`, `.timeindex`, `.txnindex`, `.snapshot` or
    /// `leader-epoch-checkpoint` file.
    path: PathBuf,
}

/// The files dump understands, in the order a directory is listed for one base offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FileKind {
    Log,
    Index,
    TimeIndex,
    TxnIndex,
    Snapshot,
    LeaderEpochs,
}

impl FileKind {
    fn from_ext(ext: &str) -> Option<FileKind> {
        Some(match ext {
            files::LOG_EXT => FileKind::Log,
            files::INDEX_EXT => FileKind::Index,
            files::TIME_INDEX_EXT => FileKind::TimeIndex,
            files::TXN_INDEX_EXT => FileKind::TxnIndex,
            files::SNAPSHOT_EXT => FileKind::Snapshot,
            _ => return None,
        })
    }
}

/// One file to dump: its kind and the base offset its name carries (if it has a Kafka name).
#[derive(Debug)]
pub(crate) struct Target {
    path: PathBuf,
    kind: FileKind,
    base_offset: Option<i64>,
    /// A `.log` of a partition directory whose checkpoint records a dead tail: where its
    /// batches end (the bytes after are not in the log).
    dead_from: Option<usize>,
}

pub fn run(args: &DumpArgs) -> Result<Status, CliError> {
    std::fs::metadata(&args.path)
        .map_err(|e| CliError(format!("{}: {}", args.path.display(), crate::io_reason(&e))))?;
    if args.path.is_dir() && crate::log_dir::is_log_dir(&args.path) {
        return crate::log_dir::dump(&args.path, args.json);
    }
    let (targets, skipped) = if args.path.is_dir() {
        crate::require_log(&args.path)?;
        list_partition_dir(&args.path)?
    } else {
        (vec![classify_file(&args.path)?], Vec::new())
    };
    let mut dumper = Dumper::new(args.json);
    for target in &targets {
        dumper.dump(target)?;
    }
    for s in &skipped {
        s.print(&mut dumper.out, args.json)?;
    }
    dumper.out.flush()?;
    Ok(if dumper.damaged {
        Status::Failed
    } else {
        Status::Ok
    })
}

/// The segment files in base-offset order (each `.log`, then its `.index`, `.timeindex` and
/// `.txnindex`), then the snapshots, then the `leader-epoch-checkpoint`; and every other entry
/// of the directory, which is not dumped, with why (an operator tool names what it leaves
/// out): temporary files (`.deleted`, `.cleaned`, `.swap`, `.tmp`), the engine's checkpoint and
/// lock file, `partition.metadata`, anything unknown.
pub(crate) fn list_partition_dir(
    dir: &Path,
) -> Result<(Vec<Target>, Vec<crate::log_dir::Skipped>), CliError> {
    let mut targets = Vec::new();
    let mut skipped = Vec::new();
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)
        .map_err(|e| CliError(format!("{}: {e}", dir.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name == files::LEADER_EPOCH_CHECKPOINT {
            targets.push(Target {
                path: entry.path(),
                kind: FileKind::LeaderEpochs,
                base_offset: None,
                dead_from: None,
            });
            continue;
        }
        let text = name.to_string_lossy();
        let parsed = name.to_str().and_then(files::parse_file_name);
        let kind = parsed
            .as_ref()
            .filter(|p| p.suffix.is_none())
            .and_then(|p| FileKind::from_ext(p.ext));
        if let (Some(kind), Some(p)) = (kind, &parsed) {
            targets.push(Target {
                path: entry.path(),
                kind,
                base_offset: Some(p.offset),
                dead_from: None,
            });
            continue;
        }
        let reason = match &*text {
            "oncelog.checkpoint" => "the engine's checkpoint (`verify` checks it)",
            "oncelog.lock" => "the lock file of a standalone log (no data)",
            "partition.metadata" => "Kafka's partition metadata (the topic id)",
            "cleaner-offset-checkpoint" => "the cleaner's offset checkpoint",
            _ if entry.file_type().is_ok_and(|t| t.is_dir()) => "a directory",
            _ if parsed.is_some_and(|p| p.suffix.is_some()) || text.ends_with(".tmp") => {
                "a leftover of an interrupted operation (recovery completes or removes it)"
            }
            _ => "not a file of a partition",
        };
        skipped.push(crate::log_dir::Skipped::new(
            &entry.path(),
            reason.to_string(),
        ));
    }
    targets.sort_by_key(|t| {
        (
            t.kind == FileKind::LeaderEpochs,
            t.kind == FileKind::Snapshot,
            t.base_offset,
            t.kind,
        )
    });
    let checkpoint = dir.join(files::CHECKPOINT_FILE);
    let record = fs::read(&checkpoint)
        .ok()
        .and_then(|bytes| files::decode_checkpoint(&checkpoint, &bytes).ok())
        .and_then(|c| c.segments)
        .unwrap_or_default();
    for t in targets.iter_mut().filter(|t| t.kind == FileKind::Log) {
        t.dead_from = record
            .iter()
            .find(|r| Some(r.base_offset) == t.base_offset && r.file_len > r.size)
            .and_then(|r| usize::try_from(r.size).ok());
    }
    Ok((targets, skipped))
}

fn classify_file(path: &Path) -> Result<Target, CliError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == files::LEADER_EPOCH_CHECKPOINT {
        return Ok(Target {
            path: path.to_path_buf(),
            kind: FileKind::LeaderEpochs,
            base_offset: None,
            dead_from: None,
        });
    }
    let parsed = files::parse_file_name(name);
    let ext = match &parsed {
        Some(p) => Some(p.ext),
        None => path.extension().and_then(|e| e.to_str()),
    };
    let kind = ext.and_then(FileKind::from_ext).ok_or_else(|| {
        CliError(format!(
            "{}: not a partition directory nor a .log, .index, .timeindex, .txnindex, .snapshot \
             or leader-epoch-checkpoint file",
            path.display()
        ))
    })?;
    let base_offset = parsed.map(|p| p.offset);
    if base_offset.is_none() && matches!(kind, FileKind::Index | FileKind::TimeIndex) {
        // Index entries hold offsets relative to the base, which only the name carries.
        return Err(CliError(format!(
            "{}: the base offset is taken from the 20-digit file name, and this name has none",
            path.display()
        )));
    }
    Ok(Target {
        path: path.to_path_buf(),
        kind,
        base_offset,
        dead_from: None,
    })
}

#[derive(Serialize)]
struct BatchLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    base_offset: i64,
    last_offset: i64,
    position: usize,
    size: usize,
    magic: i8,
    crc: u32,
    crc_valid: bool,
    attributes: i16,
    compression: String,
    timestamp_type: &'static str,
    is_transactional: bool,
    is_control: bool,
    partition_leader_epoch: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    records_count: i32,
    /// A control batch's type, from its first record's key (`ABORT`, `COMMIT`,
    /// `LEADER_CHANGE`, ..., `UNKNOWN(<id>)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    control_type: Option<String>,
    /// A transaction marker's coordinator epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    coordinator_epoch: Option<i32>,
}

impl<'a> BatchLine<'a> {
    fn new(file: &'a str, position: usize, b: &RecordBatch<'_>) -> BatchLine<'a> {
        let codec = (b.attributes() & 0x07) as u8;
        BatchLine {
            kind: "batch",
            file,
            base_offset: b.base_offset(),
            last_offset: b.last_offset(),
            position,
            size: b.size(),
            magic: b.magic(),
            crc: b.crc(),
            crc_valid: b.is_crc_valid(),
            attributes: b.attributes(),
            compression: b
                .compression()
                .map_or_else(|| format!("unknown({codec})"), |c| c.name().to_string()),
            timestamp_type: b.timestamp_type().name(),
            is_transactional: b.is_transactional(),
            is_control: b.is_control(),
            partition_leader_epoch: b.partition_leader_epoch(),
            base_timestamp: b.base_timestamp(),
            max_timestamp: b.max_timestamp(),
            producer_id: b.producer_id(),
            producer_epoch: b.producer_epoch(),
            base_sequence: b.base_sequence(),
            records_count: b.records_count(),
            control_type: None,
            coordinator_epoch: None,
        }
    }

    /// Reads a control batch's first record into the line; the reason when it cannot be read.
    fn read_control(&mut self, b: &RecordBatch<'_>) -> Result<(), String> {
        if !b.is_control() || b.records_count() == 0 {
            return Ok(());
        }
        let records = b.records_buf().map_err(|e| e.to_string())?;
        let Some(record) = b.iter_records(&records).next() else {
            return Ok(());
        };
        let record = record.map_err(|e| e.to_string())?;
        let (key, marker) = decode_control_record(&record).map_err(|e| e.to_string())?;
        self.control_type = Some(match key.control_type {
            oncelog::format::ControlType::Unknown(id) => format!("UNKNOWN({id})"),
            known => known.name().to_string(),
        });
        self.coordinator_epoch = marker.map(|m| m.coordinator_epoch);
        Ok(())
    }

    fn text(&self) -> String {
        let mut s = format!(
            "batch offsets {}..{} position {} size {} crc {:#010x} {} {} {} leader_epoch {} \
             timestamps {}..{} producer {} epoch {} seq {} records {}",
            self.base_offset,
            self.last_offset,
            self.position,
            self.size,
            self.crc,
            if self.crc_valid { "ok" } else { "BAD" },
            self.compression,
            self.timestamp_type,
            self.partition_leader_epoch,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        );
        if self.is_transactional {
            s.push_str(" transactional");
        }
        if self.is_control {
            s.push_str(" control");
        }
        if let Some(t) = &self.control_type {
            s.push_str(&format!(" {t}"));
        }
        if let Some(e) = self.coordinator_epoch {
            s.push_str(&format!(" coordinator_epoch {e}"));
        }
        s
    }
}

#[derive(Serialize)]
struct OffsetIndexLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    offset: i64,
    position: u32,
}

#[derive(Serialize)]
struct TimeIndexLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    timestamp: i64,
    offset: i64,
}

#[derive(Serialize)]
struct TxnIndexLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    producer_id: i64,
    first_offset: i64,
    last_offset: i64,
    last_stable_offset: i64,
}

#[derive(Serialize)]
struct SnapshotBatch {
    first_sequence: i32,
    last_sequence: i32,
    first_offset: i64,
    last_offset: i64,
    offset_delta: i32,
    timestamp: i64,
}

/// A producer entry. Version 1 holds only the newest batch, whose fields are flattened here as
/// Kafka's tools show them (−1/−1/0 when there is none); version 2 adds every retained batch
/// and the append wall clock.
#[derive(Serialize)]
struct SnapshotLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    snapshot_version: i16,
    producer_id: i64,
    producer_epoch: i16,
    last_sequence: i32,
    last_offset: i64,
    offset_delta: i32,
    timestamp: i64,
    coordinator_epoch: i32,
    current_txn_first_offset: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_append_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batches: Option<Vec<SnapshotBatch>>,
}

impl<'a> SnapshotLine<'a> {
    fn new(file: &'a str, version: SnapshotVersion, e: &ProducerEntry) -> SnapshotLine<'a> {
        let (last_sequence, last_offset, offset_delta) = e
            .newest_batch()
            .map_or((-1, -1, 0), |b| (b.last_seq, b.last_offset, b.offset_delta));
        let v2 = version.keeps_window();
        SnapshotLine {
            kind: "producer_snapshot",
            file,
            snapshot_version: version.number(),
            producer_id: e.producer_id(),
            producer_epoch: e.epoch(),
            last_sequence,
            last_offset,
            offset_delta,
            timestamp: e.last_timestamp(),
            coordinator_epoch: e.coordinator_epoch(),
            current_txn_first_offset: e.current_txn_first_offset().unwrap_or(-1),
            last_append_ms: v2.then(|| e.last_append_ms()),
            batches: v2.then(|| {
                e.batches()
                    .map(|b| SnapshotBatch {
                        first_sequence: b.first_seq(),
                        last_sequence: b.last_seq,
                        first_offset: b.first_offset(),
                        last_offset: b.last_offset,
                        offset_delta: b.offset_delta,
                        timestamp: b.timestamp,
                    })
                    .collect()
            }),
        }
    }

    fn text(&self) -> String {
        let mut s = format!(
            "producer {} epoch {} last_sequence {} last_offset {} offset_delta {} timestamp {} \
             coordinator_epoch {} txn_first_offset {}",
            self.producer_id,
            self.producer_epoch,
            self.last_sequence,
            self.last_offset,
            self.offset_delta,
            self.timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        );
        if let Some(ms) = self.last_append_ms {
            s.push_str(&format!(" last_append_ms {ms}"));
        }
        if let Some(batches) = &self.batches {
            let list: Vec<String> = batches
                .iter()
                .map(|b| {
                    format!(
                        "seq {}..{} offsets {}..{} ts {}",
                        b.first_sequence,
                        b.last_sequence,
                        b.first_offset,
                        b.last_offset,
                        b.timestamp
                    )
                })
                .collect();
            s.push_str(&format!(" batches [{}]", list.join(", ")));
        }
        s
    }
}

#[derive(Serialize)]
struct LeaderEpochLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    epoch: i32,
    start_offset: i64,
}

#[derive(Serialize)]
struct PreallocatedLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    position: usize,
    bytes: usize,
}

#[derive(Serialize)]
struct DeadTailLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    position: usize,
    bytes: usize,
}

#[derive(Serialize)]
struct ErrorLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    file: &'a str,
    /// The byte at fault in a binary file.
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<usize>,
    /// The 1-based line at fault in a text file.
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<usize>,
    error: String,
}

pub(crate) struct Dumper {
    pub out: Out,
    json: bool,
    /// Whether anything dumped so far was damaged.
    pub damaged: bool,
}

impl Dumper {
    pub fn new(json: bool) -> Dumper {
        Dumper {
            out: Out::stdout(),
            json,
            damaged: false,
        }
    }

    pub fn dump(&mut self, target: &Target) -> Result<(), CliError> {
        let file = target.path.display().to_string();
        let bytes = fs::read(&target.path).map_err(|e| CliError(format!("{file}: {e}")))?;
        if !self.json {
            self.out
                .line(&format!("== {file} ({} bytes)", bytes.len()))?;
        }
        match target.kind {
            FileKind::Log => match target.dead_from.filter(|&at| at < bytes.len()) {
                Some(at) => {
                    self.log(&file, &bytes[..at])?;
                    self.dead_tail(&file, at, bytes.len() - at)
                }
                None => self.log(&file, &bytes),
            },
            FileKind::Index => self.offset_index(&file, &bytes, target.base_offset.unwrap_or(0)),
            FileKind::TimeIndex => self.time_index(&file, &bytes, target.base_offset.unwrap_or(0)),
            FileKind::TxnIndex => self.txn_index(&file, &bytes),
            FileKind::Snapshot => self.snapshot(&file, &bytes),
            FileKind::LeaderEpochs => self.leader_epochs(&file, &bytes),
        }
    }

    fn log(&mut self, file: &str, bytes: &[u8]) -> Result<(), CliError> {
        for item in BatchIter::new(bytes) {
            match item {
                Ok((position, batch)) => {
                    let mut line = BatchLine::new(file, position, &batch);
                    self.damaged |= !line.crc_valid;
                    let control = line.read_control(&batch);
                    if self.json {
                        self.out.json(&line)?;
                    } else {
                        self.out.line(&line.text())?;
                    }
                    if let Err(e) = control {
                        self.error(file, position, format!("control record: {e}"))?;
                    }
                }
                Err(oncelog::format::BatchErrorAt {
                    position, error, ..
                }) => {
                    let rest = &bytes[position..];
                    if is_zero(rest) {
                        self.preallocated(file, position, rest.len())?;
                    } else {
                        self.error(
                            file,
                            position,
                            format!("{error}; the remaining {} bytes are not parsed", rest.len()),
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    fn offset_index(&mut self, file: &str, bytes: &[u8], base: i64) -> Result<(), CliError> {
        let used = Self::used_index_bytes(bytes, files::OFFSET_INDEX_ENTRY_SIZE);
        for e in files::decode_offset_index(&bytes[..used], base) {
            let line = OffsetIndexLine {
                kind: "offset_index",
                file,
                offset: e.offset,
                position: e.position,
            };
            if self.json {
                self.out.json(&line)?;
            } else {
                self.out.line(&format!(
                    "index offset {} position {}",
                    line.offset, line.position
                ))?;
            }
        }
        self.index_tail(file, bytes, files::OFFSET_INDEX_ENTRY_SIZE, used)
    }

    fn time_index(&mut self, file: &str, bytes: &[u8], base: i64) -> Result<(), CliError> {
        let used = Self::used_index_bytes(bytes, files::TIME_INDEX_ENTRY_SIZE);
        for e in files::decode_time_index(&bytes[..used], base) {
            let line = TimeIndexLine {
                kind: "time_index",
                file,
                timestamp: e.timestamp,
                offset: e.offset,
            };
            if self.json {
                self.out.json(&line)?;
            } else {
                self.out.line(&format!(
                    "timeindex timestamp {} offset {}",
                    line.timestamp, line.offset
                ))?;
            }
        }
        self.index_tail(file, bytes, files::TIME_INDEX_ENTRY_SIZE, used)
    }

    /// Every aborted transaction of a `.txnindex`; an entry of an unknown version ends the
    /// listing, and a partial entry at the end is reported (both as errors).
    fn txn_index(&mut self, file: &str, bytes: &[u8]) -> Result<(), CliError> {
        for (i, entry) in files::decode_txn_index(bytes).enumerate() {
            let e = match entry {
                Ok(e) => e,
                Err(problem) => {
                    return self.error(file, i * files::TXN_INDEX_ENTRY_SIZE, problem.to_string())
                }
            };
            let line = TxnIndexLine {
                kind: "txn_index",
                file,
                producer_id: e.producer_id,
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                last_stable_offset: e.last_stable_offset,
            };
            if self.json {
                self.out.json(&line)?;
            } else {
                self.out.line(&format!(
                    "txnindex producer {} first_offset {} last_offset {} last_stable_offset {}",
                    line.producer_id, line.first_offset, line.last_offset, line.last_stable_offset
                ))?;
            }
        }
        Ok(())
    }

    /// How many leading bytes of an index hold entries. Trailing all-zero entries are the
    /// preallocated space of an untrimmed file (no real entry is all zeros: Kafka never indexes
    /// position 0, and no real producer writes timestamp 0 with relative offset 0).
    fn used_index_bytes(bytes: &[u8], entry_size: usize) -> usize {
        let whole = bytes.len() - bytes.len() % entry_size;
        bytes[..whole]
            .chunks_exact(entry_size)
            .rposition(|e| !is_zero(e))
            .map_or(0, |i| (i + 1) * entry_size)
    }

    /// After the entries: the preallocated zeros, then a partial entry at the end (damage).
    fn index_tail(
        &mut self,
        file: &str,
        bytes: &[u8],
        entry_size: usize,
        used: usize,
    ) -> Result<(), CliError> {
        let partial = bytes.len() % entry_size;
        let whole = bytes.len() - partial;
        if used < whole {
            self.preallocated(file, used, whole - used)?;
        }
        if partial != 0 {
            self.error(
                file,
                whole,
                format!(
                    "{partial} bytes at the end are not a whole {entry_size}-byte entry \
                     (file length {} is not a multiple of {entry_size})",
                    bytes.len()
                ),
            )?;
        }
        Ok(())
    }

    fn snapshot(&mut self, file: &str, bytes: &[u8]) -> Result<(), CliError> {
        let Snapshot {
            version, entries, ..
        } = match files::decode_snapshot(bytes) {
            Ok(s) => s,
            Err(e) => return self.error(file, 0, e.to_string()),
        };
        if !self.json {
            self.out.line(&format!(
                "snapshot version {} with {}",
                version.number(),
                crate::plural(entries.len() as u64, "producer", "producers")
            ))?;
        }
        for e in &entries {
            let line = SnapshotLine::new(file, version, e);
            if self.json {
                self.out.json(&line)?;
            } else {
                self.out.line(&line.text())?;
            }
        }
        Ok(())
    }

    /// Kafka's text checkpoint: a version line, a count, one `<epoch> <start offset>` a line.
    fn leader_epochs(&mut self, file: &str, bytes: &[u8]) -> Result<(), CliError> {
        let entries = match files::decode_leader_epochs(Path::new(file), bytes) {
            Ok(entries) => entries,
            Err(e) => return self.text_error(file, e.line, e.reason),
        };
        if !self.json {
            self.out.line(&format!(
                "leader-epoch checkpoint with {}",
                crate::plural(entries.len() as u64, "entry", "entries")
            ))?;
        }
        for e in &entries {
            let line = LeaderEpochLine {
                kind: "leader_epoch",
                file,
                epoch: e.epoch,
                start_offset: e.start_offset,
            };
            if self.json {
                self.out.json(&line)?;
            } else {
                self.out.line(&format!(
                    "leader_epoch {} start_offset {}",
                    line.epoch, line.start_offset
                ))?;
            }
        }
        Ok(())
    }

    fn preallocated(&mut self, file: &str, position: usize, bytes: usize) -> Result<(), CliError> {
        if self.json {
            self.out.json(&PreallocatedLine {
                kind: "preallocated",
                file,
                position,
                bytes,
            })?;
        } else {
            self.out.line(&format!(
                "{bytes} zero bytes of preallocated space from position {position}"
            ))?;
        }
        Ok(())
    }

    /// Bytes after the log's batches in a segment: not in the log, not listed.
    fn dead_tail(&mut self, file: &str, position: usize, bytes: usize) -> Result<(), CliError> {
        if self.json {
            self.out.json(&DeadTailLine {
                kind: "dead_tail",
                file,
                position,
                bytes,
            })?;
        } else {
            self.out.line(&format!(
                "{bytes} bytes from position {position} are a dead tail, not in the log \
                 (oncelog.checkpoint records them: a truncation's, left while a reader held \
                 them; the next open trims them)"
            ))?;
        }
        Ok(())
    }

    fn error(&mut self, file: &str, position: usize, error: String) -> Result<(), CliError> {
        self.damaged = true;
        if self.json {
            self.out.json(&ErrorLine {
                kind: "error",
                file,
                position: Some(position),
                line: None,
                error,
            })?;
        } else {
            self.out
                .line(&format!("ERROR {file}: byte {position}: {error}"))?;
        }
        Ok(())
    }

    /// Damage in a text file: at a line, or (a wrong entry count, bytes that are not text) in
    /// the file as a whole.
    fn text_error(
        &mut self,
        file: &str,
        line: Option<usize>,
        error: String,
    ) -> Result<(), CliError> {
        self.damaged = true;
        if self.json {
            self.out.json(&ErrorLine {
                kind: "error",
                file,
                position: None,
                line,
                error,
            })?;
        } else {
            let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
            self.out.line(&format!("ERROR {file}: {at}{error}"))?;
        }
        Ok(())
    }
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}
