//! `oncelog.checkpoint`: what a standalone log needs to recover on its own, and what it vouches
//! for (docs/design.md "Files and the checkpoint").
//!
//! A text file in the partition directory, in the spirit of Kafka's checkpoint files
//! (docs/format.md "Checkpoint"), written by temp file + fsync + rename + directory fsync:
//!
//! ```text
//! 2                        <- version
//! clean_shutdown 1         <- 1 only when written by a clean close
//! recovery_point 3000      <- every offset below it was durable
//! log_start_offset 0
//! high_watermark 3000      <- the last high watermark the log knew (set by its caller, or the
//!                             durable end)
//! dense_from 0             <- from this offset on there is no gap in the offsets
//! segments 4               <- the segments it vouches for, then one line each:
//! 0 860 98986              <- "<base offset> <next offset> <.log size in bytes>"
//! 860 1720 98986
//! 1720 2580 98986
//! 2580 3000 48342          <- after a clean close, the last segment too
//! digests 4                <- what it recorded of each segment's bytes when it was sealed:
//! 0 1a2b3c4d 0 00000000    <- "<base offset> <header digest> <.txnindex length> <its CRC-32C>"
//! 860 5e6f7a8b 34 9c0d1e2f
//! 1720 ...
//! 2580 ...
//! crc32c 0a1b2c3d          <- CRC-32C of every byte before this line
//! ```
//!
//! The last line makes damage to the file itself visible: one flipped bit in
//! `log_start_offset` would otherwise hide offsets, and in a processed-id store forget a
//! handled id. A file that fails it, or lacks it, is damage, never an instruction: recovery
//! sets it aside and validates the log as if it had no checkpoint ([`BadMetadataFile::damaged`]).
//! The digests ([`SealDigest`]) let `verify` and deep recovery check what no checksum of
//! Kafka's covers (batch offsets in a compacted segment's gaps), and every open check each
//! `.txnindex`.
//!
//! A segment line may carry a fourth field, the file's length, when a truncation left dead
//! bytes after the segment's batches (see [`SegmentRecord::file_len`]).
//!
//! While a full truncation (`ReplicaLog::truncate_fully_and_start_at`) is under way, a line
//! `start_over_at <offset>` follows `dense_from`: the log is empty from that offset, whatever
//! segment files are still there (see [`Checkpoint::start_over_at`]).
//!
//! The record lists every segment that is wholly durable: sealed, flushed and trimmed (and, at
//! a clean close, the last segment as well). Recovery holds the directory to it: a recorded
//! segment that is missing, shorter or longer, or a segment file that appears where the record
//! says there is none, is damage, not a fact to adapt to. Offsets and sizes of recorded
//! segments are taken from the record, never from bytes that the CRC does not cover.
//!
//! Versions 0 (without the segment record) and 1 (without digests and checksum) are still read
//! as before: a version-0 file's segments are checked by walking their frames, a version-1
//! file's segments have no digest. A directory without the file (a Kafka partition directory)
//! is validated batch by batch.

use std::path::{Path, PathBuf};

use super::metadata_file::{self, BadMetadataFile, Invalid, MetadataFile};
use crate::io::{self, FileSystem, IoError};
pub use crate::segment::SealDigest;

/// The checkpoint's file name in the partition directory.
pub const FILE_NAME: &str = "oncelog.checkpoint";
const VERSION: i64 = 2;
/// The prefix of the last line of a version-2 file.
const CHECKSUM_PREFIX: &str = "crc32c ";

/// One segment the checkpoint vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRecord {
    /// Its base offset (the file's name).
    pub base_offset: i64,
    /// Last offset + 1 of its batches (the base offset when empty).
    pub next_offset: i64,
    /// Bytes of its batches: the first `size` bytes of its `.log`.
    pub size: u64,
    /// The length of its `.log` file: `size`, or more when a truncation cut the segment while a
    /// reader still held the bytes after the cut (a mapped file is never shrunk under a
    /// reader). Those bytes are dead: recovery trims them without calling them damage.
    pub file_len: u64,
    /// What was recorded of its bytes when it was sealed (version 2); `None` when it is not
    /// known: recorded by a version-1 checkpoint, or vouched for by Kafka's checkpoints, and
    /// not validated since.
    pub digest: Option<SealDigest>,
}

impl SegmentRecord {
    /// A segment whose file holds exactly its batches.
    pub fn exact(base_offset: i64, next_offset: i64, size: u64) -> SegmentRecord {
        SegmentRecord {
            base_offset,
            next_offset,
            size,
            file_len: size,
            digest: None,
        }
    }
}

/// What `oncelog.checkpoint` holds (the layout is in this module's documentation and in
/// docs/format.md, "Checkpoint").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Written by a clean close: every segment, the last included, is recorded.
    pub clean_shutdown: bool,
    /// Every offset below it was durable when it was written.
    pub recovery_point: i64,
    /// The log start offset (raised by retention and DeleteRecords, which only this file keeps).
    pub log_start_offset: i64,
    /// The high watermark when it was written (version 0: the recovery point).
    pub high_watermark: i64,
    /// From this offset on the log has no gap in its offsets: every batch starts where the
    /// previous one ended. Client appends keep a log dense; a replicated batch that starts past
    /// the log end (a compacted leader's) moves it. Recovery takes a gap at or after it for
    /// what it is, a base offset damaged. `None` for a version-0 file.
    pub dense_from: Option<i64>,
    /// The segments vouched for, in offset order; `None` for a version-0 file.
    pub segments: Option<Vec<SegmentRecord>>,
    /// A full truncation's commit point: the log is empty, starting at this offset, and every
    /// segment file, snapshot and epoch entry in the directory is from before it (recovery
    /// removes them). Written only until the truncation has removed them itself.
    pub start_over_at: Option<i64>,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// The checkpoint's text, its checksum line last.
pub fn encode(c: &Checkpoint) -> String {
    seal(encode_body(c))
}

/// `body` (a checkpoint's lines, each ending in `\n`) with the checksum line appended: what
/// makes a checkpoint edited by hand (an operator's deliberate change, or a test's) readable
/// again.
pub fn seal(mut body: String) -> String {
    let crc = crc32c::crc32c(body.as_bytes());
    body.push_str(&format!("{CHECKSUM_PREFIX}{crc:08x}\n"));
    body
}

/// [`seal`] after removing the checksum line `text` has, if any.
pub fn reseal(text: &str) -> String {
    let body = match split_checksum(text) {
        Some((body, _)) => body,
        None => text,
    };
    seal(body.to_string())
}

fn encode_body(c: &Checkpoint) -> String {
    let mut out = format!(
        "{VERSION}\nclean_shutdown {}\nrecovery_point {}\nlog_start_offset {}\nhigh_watermark {}\n\
         dense_from {}\n",
        c.clean_shutdown as u8,
        c.recovery_point,
        c.log_start_offset,
        c.high_watermark,
        c.dense_from.unwrap_or(0),
    );
    if let Some(at) = c.start_over_at {
        out.push_str(&format!("start_over_at {at}\n"));
    }
    let segments = c.segments.as_deref().unwrap_or(&[]);
    out.push_str(&format!("segments {}\n", segments.len()));
    for s in segments {
        if s.file_len == s.size {
            out.push_str(&format!("{} {} {}\n", s.base_offset, s.next_offset, s.size));
        } else {
            out.push_str(&format!(
                "{} {} {} {}\n",
                s.base_offset, s.next_offset, s.size, s.file_len
            ));
        }
    }
    let digests: Vec<(i64, SealDigest)> = segments
        .iter()
        .filter_map(|s| s.digest.map(|d| (s.base_offset, d)))
        .collect();
    out.push_str(&format!("digests {}\n", digests.len()));
    for (base, d) in digests {
        out.push_str(&format!(
            "{base} {:08x} {} {:08x}\n",
            d.headers, d.txn_len, d.txn_crc
        ));
    }
    out
}

/// Splits off the last line when it is a checksum line: (the bytes before it, the line's
/// value).
fn split_checksum(text: &str) -> Option<(&str, &str)> {
    let trimmed = text.strip_suffix('\n')?;
    let start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let value = trimmed[start..].strip_prefix(CHECKSUM_PREFIX)?;
    Some((&text[..start], value))
}

/// Checks the checksum line (for version 2 files), then parses the checkpoint and checks that
/// its values agree with each other ([`Checkpoint::check`]).
pub fn decode(text: &str) -> Result<Checkpoint, Invalid> {
    let body = match split_checksum(text) {
        Some((body, value)) => {
            let computed = crc32c::crc32c(body.as_bytes());
            // Exactly as written (lowercase): `0A1B...` would parse to the same number, but it
            // is not a file this engine wrote.
            if value != format!("{computed:08x}") {
                return Err(Invalid::damaged(format!(
                    "checksum line {value:?} does not match the bytes before it (CRC-32C \
                     {computed:08x}): the file was damaged"
                )));
            }
            Some(body)
        }
        None => None,
    };
    let version_line = text.split('\n').next().unwrap_or("");
    match (version_line, body) {
        ("2", None) => Err(Invalid::damaged(
            "a version-2 checkpoint without its checksum line: the file was damaged",
        )),
        ("2", Some(body)) => decode_body(body),
        (_, Some(_)) => Err(Invalid::at(
            1,
            format!("version {version_line:?} has no checksum line, but this file ends with one"),
        )),
        (_, None) => decode_body(text),
    }
}

/// The lines of a checkpoint's body, read in order.
struct Lines<'a> {
    /// Each line with its 1-based number.
    lines: Vec<(usize, &'a str)>,
    /// The index of the next line to read.
    at: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        Lines {
            lines: text.split('\n').enumerate().map(|(i, l)| (i + 1, l)).collect(),
            at: 0,
        }
    }

    /// The next line, which must not be empty; `what` it should hold names the refusal.
    fn next(&mut self, what: &str) -> Result<(usize, &'a str), Invalid> {
        let line = self.lines.get(self.at).copied().filter(|(_, l)| !l.is_empty());
        self.at += 1;
        line.ok_or_else(|| Invalid::on(None, format!("ends before {what}")))
    }

    /// The next line, as `<name> <integer>`.
    fn field(&mut self, name: &str) -> Result<i64, Invalid> {
        value(name, self.next(name)?)
    }

    /// Refuses any line after the last one read but empty ones.
    fn end(&self) -> Result<(), Invalid> {
        let rest = &self.lines[self.at.min(self.lines.len())..];
        match rest.iter().find(|(_, l)| !l.is_empty()) {
            Some(&(n, extra)) => Err(Invalid::at(n, format!("unexpected line {extra:?}"))),
            None => Ok(()),
        }
    }
}

/// The integer of the line `n`, which must read `<name> <integer>`.
fn value(name: &str, (n, line): (usize, &str)) -> Result<i64, Invalid> {
    let value = line
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| Invalid::at(n, format!("expected \"{name} <integer>\", found {line:?}")))?;
    value
        .parse::<i64>()
        .map_err(|_| Invalid::at(n, format!("{name} is not an integer: {value:?}")))
}

/// Parses a checkpoint without its checksum line and checks that its values agree with each
/// other ([`Checkpoint::check`]).
fn decode_body(text: &str) -> Result<Checkpoint, Invalid> {
    let mut lines = Lines::new(text);
    let (n, version) = lines.next("the version")?;
    let version = match version {
        "0" => 0,
        "1" => 1,
        "2" => 2,
        other => return Err(Invalid::at(n, format!("unsupported version {other:?}"))),
    };
    let clean = lines.field("clean_shutdown")?;
    let recovery_point = lines.field("recovery_point")?;
    let log_start_offset = lines.field("log_start_offset")?;
    let (high_watermark, dense_from, start_over_at, segments) = if version == 0 {
        (recovery_point, None, None, None)
    } else {
        let high_watermark = lines.field("high_watermark")?;
        let dense_from = lines.field("dense_from")?;
        let (start_over_at, segments) = decode_segment_record(&mut lines, version)?;
        (high_watermark, Some(dense_from), start_over_at, Some(segments))
    };
    lines.end()?;
    if !(0..=1).contains(&clean) {
        return Err(Invalid::at(
            2,
            format!("clean_shutdown must be 0 or 1, not {clean}"),
        ));
    }
    let c = Checkpoint {
        clean_shutdown: clean == 1,
        recovery_point,
        log_start_offset,
        high_watermark,
        dense_from,
        segments,
        start_over_at,
    };
    c.check().map_err(|reason| Invalid::on(None, reason))?;
    Ok(c)
}

/// The segment record of a version-1 or -2 file: a `start_over_at` line while a full
/// truncation is under way, the segment lines, and (version 2) the digest lines.
fn decode_segment_record(
    lines: &mut Lines,
    version: u8,
) -> Result<(Option<i64>, Vec<SegmentRecord>), Invalid> {
    let mut start_over_at = None;
    let mut line = lines.next("segments")?;
    if line.1.starts_with("start_over_at ") {
        start_over_at = Some(value("start_over_at", line)?);
        line = lines.next("segments")?;
    }
    let count = value("segments", line)?;
    let mut records = Vec::new();
    for _ in 0..count.max(0) {
        let (n, line) = lines.next("a segment line")?;
        records.push(parse_segment_line(line).map_err(|r| Invalid::at(n, r))?);
    }
    if count < 0 {
        return Err(Invalid::on(None, format!("negative segment count {count}")));
    }
    if version >= 2 {
        decode_digests(lines, &mut records)?;
    }
    Ok((start_over_at, records))
}

/// The digest lines of a version-2 file, each set on the recorded segment it names.
fn decode_digests(lines: &mut Lines, records: &mut [SegmentRecord]) -> Result<(), Invalid> {
    let line = lines.next("digests")?;
    let count = value("digests", line)?;
    if count < 0 || count as usize > records.len() {
        let reason = format!("digest count {count} for {} segments", records.len());
        return Err(Invalid::at(line.0, reason));
    }
    let mut from = 0;
    for _ in 0..count {
        let (n, line) = lines.next("a digest line")?;
        let (base, digest) = parse_digest_line(line).map_err(|r| Invalid::at(n, r))?;
        // In the segments' order, each for a recorded segment.
        let Some(i) = records[from..].iter().position(|r| r.base_offset == base) else {
            return Err(Invalid::at(n, format!("digest for segment {base}, not recorded here")));
        };
        records[from + i].digest = Some(digest);
        from += i + 1;
    }
    Ok(())
}

fn parse_segment_line(line: &str) -> Result<SegmentRecord, String> {
    let mut fields = line.split(' ');
    let mut number = |what: &str| -> Result<i64, String> {
        let f = fields
            .next()
            .ok_or_else(|| format!("segment line {line:?} lacks its {what}"))?;
        f.parse::<i64>()
            .map_err(|_| format!("segment {what} is not an integer: {f:?}"))
    };
    let base_offset = number("base offset")?;
    let next_offset = number("next offset")?;
    let size = number("size")?;
    let size = u64::try_from(size).map_err(|_| format!("negative segment size {size}"))?;
    let file_len =
        match fields.next() {
            None => size,
            Some(f) => f.parse::<u64>().ok().filter(|&l| l > size).ok_or_else(|| {
                format!("file length {f:?} is not above the segment's size {size}")
            })?,
        };
    if fields.next().is_some() {
        return Err(format!("segment line {line:?} has more than four fields"));
    }
    Ok(SegmentRecord {
        base_offset,
        next_offset,
        size,
        file_len,
        digest: None,
    })
}

fn parse_digest_line(line: &str) -> Result<(i64, SealDigest), String> {
    let fields: Vec<&str> = line.split(' ').collect();
    let [base, headers, txn_len, txn_crc] = fields[..] else {
        return Err(format!("digest line {line:?} does not have four fields"));
    };
    let hex = |f: &str, what: &str| {
        u32::from_str_radix(f, 16)
            .ok()
            .filter(|v| *f == format!("{v:08x}"))
            .ok_or_else(|| format!("{what} is not 8 hex digits: {f:?}"))
    };
    let base = base
        .parse::<i64>()
        .map_err(|_| format!("digest base offset is not an integer: {base:?}"))?;
    let digest = SealDigest {
        headers: hex(headers, "header digest")?,
        txn_len: txn_len
            .parse::<u64>()
            .ok()
            .filter(|l| l % crate::segment::txn_index::ENTRY_SIZE as u64 == 0)
            .ok_or_else(|| format!("txn index length {txn_len:?} is not whole entries"))?,
        txn_crc: hex(txn_crc, "txn index CRC")?,
    };
    Ok((base, digest))
}

impl Checkpoint {
    /// The log end the checkpoint vouches for: every offset below it was durable.
    pub fn durable_end(&self) -> i64 {
        self.recovery_point
    }

    /// Whether the values agree with each other. Each rule is one a checkpoint written by this
    /// engine always keeps, so a file that breaks one was damaged or edited by hand.
    pub fn check(&self) -> Result<(), String> {
        self.check_offsets()?;
        match &self.segments {
            Some(segments) => self.check_segments(segments),
            None => Ok(()),
        }
    }

    /// The rules between the offsets themselves.
    fn check_offsets(&self) -> Result<(), String> {
        if self.recovery_point < 0
            || self.log_start_offset < 0
            || self.dense_from.is_some_and(|d| d < 0)
        {
            return Err("offsets must not be negative".into());
        }
        if self.log_start_offset > self.recovery_point {
            return Err(format!(
                "log start offset {} is above the recovery point {}",
                self.log_start_offset, self.recovery_point
            ));
        }
        if self.log_start_offset > self.high_watermark {
            return Err(format!(
                "log start offset {} is above the high watermark {}",
                self.log_start_offset, self.high_watermark
            ));
        }
        if let Some(at) = self.start_over_at {
            if at != self.log_start_offset
                || at != self.recovery_point
                || self.segments.as_ref().is_none_or(|s| !s.is_empty())
            {
                return Err(format!(
                    "start_over_at {at} must be the log start and recovery point, with no segment"
                ));
            }
        }
        Ok(())
    }

    /// The rules of the segment record: each segment sound, in order, within the offsets.
    fn check_segments(&self, segments: &[SegmentRecord]) -> Result<(), String> {
        let mut previous: Option<&SegmentRecord> = None;
        for s in segments {
            if s.base_offset < 0 || s.next_offset < s.base_offset {
                return Err(format!(
                    "segment {}: next offset {} is below its base",
                    s.base_offset, s.next_offset
                ));
            }
            // A batch is at least 61 bytes; an empty segment has no bytes at all.
            let empty = s.next_offset == s.base_offset;
            if empty != (s.size == 0) || (!empty && s.size < crate::format::HEADER_SIZE as u64) {
                return Err(format!(
                    "segment {}: {} bytes cannot hold offsets {}..{}",
                    s.base_offset, s.size, s.base_offset, s.next_offset
                ));
            }
            if s.size > i32::MAX as u64 {
                return Err(format!(
                    "segment {}: size {} is beyond a segment's int32 positions",
                    s.base_offset, s.size
                ));
            }
            if let Some(p) = previous {
                if s.base_offset < p.next_offset {
                    return Err(format!(
                        "segment {} starts below the end {} of segment {}",
                        s.base_offset, p.next_offset, p.base_offset
                    ));
                }
            }
            previous = Some(s);
        }
        if let Some(last) = previous {
            if last.next_offset > self.recovery_point {
                return Err(format!(
                    "segment {} ends at {}, above the recovery point {}",
                    last.base_offset, last.next_offset, self.recovery_point
                ));
            }
            if self.clean_shutdown && last.next_offset != self.recovery_point {
                return Err(format!(
                    "a clean close records every segment, but they end at {} and the \
                     recovery point is {}",
                    last.next_offset, self.recovery_point
                ));
            }
        } else if self.clean_shutdown {
            return Err("a clean close records at least the last segment".into());
        }
        // The log start may lie beyond the first segments: DeleteRecords hides their batches,
        // and they stay (with the producer state they hold) until retention removes them.
        if let Some(first) = segments.first() {
            if self.log_start_offset < first.base_offset {
                return Err(format!(
                    "log start offset {} is below the first segment [{}, {})",
                    self.log_start_offset, first.base_offset, first.next_offset
                ));
            }
        }
        Ok(())
    }
}

/// Reads the checkpoint of `dir`: `Ok(Ok(None))` without one, `Ok(Err(..))` if it is unusable,
/// and `Err` if it could not be read at all: a transient I/O error must not be mistaken for a
/// missing checkpoint, which would forget the recovery point.
pub fn read(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Result<Option<Checkpoint>, BadMetadataFile>, IoError> {
    metadata_file::read(fs, &path(dir), MetadataFile::Checkpoint, decode)
}

/// Parses the bytes of an `oncelog.checkpoint` read from `path` (which errors name), as the
/// log's open does.
pub fn decode_file(path: &Path, bytes: &[u8]) -> Result<Checkpoint, BadMetadataFile> {
    metadata_file::decode_bytes(path, bytes, MetadataFile::Checkpoint, decode)
}

pub fn write(fs: &dyn FileSystem, dir: &Path, c: &Checkpoint) -> Result<(), IoError> {
    io::write_file_atomically(fs, &path(dir), encode(c).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(base: i64, next: i64, size: u64) -> SegmentRecord {
        SegmentRecord::exact(base, next, size)
    }

    fn clean(segments: Vec<SegmentRecord>) -> Checkpoint {
        let end = segments.last().map_or(0, |s| s.next_offset);
        Checkpoint {
            clean_shutdown: true,
            recovery_point: end,
            log_start_offset: segments.first().map_or(0, |s| s.base_offset),
            high_watermark: end,
            dense_from: Some(0),
            segments: Some(segments),
            start_over_at: None,
        }
    }

    #[test]
    fn round_trips_with_its_segment_record() {
        let mut c = clean(vec![record(0, 860, 98_986), record(860, 1000, 16_000)]);
        c.segments.as_mut().unwrap()[1].digest = Some(SealDigest {
            headers: 0x1a2b_3c4d,
            txn_len: 68,
            txn_crc: 0xff,
        });
        assert_eq!(decode(&encode(&c)), Ok(c.clone()));
        let body = "2\nclean_shutdown 1\nrecovery_point 1000\nlog_start_offset 0\n\
                    high_watermark 1000\ndense_from 0\nsegments 2\n0 860 98986\n\
                    860 1000 16000\ndigests 1\n860 1a2b3c4d 68 000000ff\n";
        assert_eq!(
            encode(&c),
            format!("{body}crc32c {:08x}\n", crc32c::crc32c(body.as_bytes()))
        );
    }

    #[test]
    fn every_flipped_bit_is_damage_never_a_different_checkpoint() {
        let mut c = clean(vec![record(0, 860, 98_986), record(860, 1000, 16_000)]);
        c.segments.as_mut().unwrap()[0].digest = Some(SealDigest {
            headers: 7,
            txn_len: 0,
            txn_crc: 0,
        });
        // Several files, so that checksums with hex letters (whose case a flip changes) are met.
        let texts: Vec<Vec<u8>> = (0..8)
            .map(|hw| {
                encode(&Checkpoint {
                    high_watermark: 990 + hw,
                    ..c.clone()
                })
                .into_bytes()
            })
            .collect();
        assert!(texts
            .iter()
            .any(|t| t.ends_with(b"\n") && t[t.len() - 9..].iter().any(u8::is_ascii_lowercase)));
        for (at, text) in texts
            .iter()
            .flat_map(|t| (0..t.len()).map(move |at| (at, t)))
        {
            for bit in 0..8 {
                let mut t = text.clone();
                t[at] ^= 1 << bit;
                let Ok(t) = String::from_utf8(t) else {
                    continue;
                };
                match decode(&t) {
                    Ok(other) => panic!("byte {at} bit {bit}: read as {other:?}"),
                    Err(e) if e.damaged => {}
                    // Only a changed version line can say "another version" instead.
                    Err(e) => assert_eq!(e.line, Some(1), "byte {at} bit {bit}: {}", e.reason),
                }
            }
        }
        // Cut anywhere (a torn file): damage too.
        let text = encode(&c);
        for end in 0..text.len() {
            match decode(&text[..end]) {
                Ok(other) => panic!("cut at {end}: read as {other:?}"),
                Err(e) if e.damaged => {}
                Err(e) => assert!(end < 2, "cut at {end}: {:?} {}", e.line, e.reason),
            }
        }
    }

    #[test]
    fn a_resealed_edit_is_read_and_checked_like_any_other() {
        let c = clean(vec![record(0, 860, 98_986), record(860, 1000, 16_000)]);
        let text = encode(&c).replace("log_start_offset 0", "log_start_offset 5");
        assert!(matches!(decode(&text), Err(e) if e.damaged));
        assert_eq!(decode(&reseal(&text)).unwrap().log_start_offset, 5);
        let contradiction = encode(&c).replace("log_start_offset 0", "log_start_offset 5000");
        assert!(matches!(decode(&reseal(&contradiction)), Err(e) if !e.damaged));
    }

    #[test]
    fn a_dead_tail_left_by_a_truncation_is_a_fourth_field() {
        let mut c = clean(vec![record(0, 860, 98_986), record(860, 1000, 16_000)]);
        c.segments.as_mut().unwrap()[0].file_len = 120_000;
        let text = encode(&c);
        assert!(text.contains("\n0 860 98986 120000\n"), "{text}");
        assert_eq!(decode(&text), Ok(c));
        assert!(decode(&reseal(&text.replace("98986 120000", "98986 98986"))).is_err());
        assert!(decode(&reseal(&text.replace("98986 120000", "98986 1 2"))).is_err());
    }

    #[test]
    fn version_0_files_are_read_without_a_record() {
        let c = decode("0\nclean_shutdown 1\nrecovery_point 1234\nlog_start_offset 7\n").unwrap();
        assert_eq!(c.segments, None);
        assert_eq!((c.recovery_point, c.log_start_offset), (1234, 7));
    }

    #[test]
    fn malformed_files_are_refused_naming_the_line() {
        let head = |clean: &str, rp: &str| {
            format!(
                "1\nclean_shutdown {clean}\nrecovery_point {rp}\nlog_start_offset 0\n\
                 high_watermark 5\ndense_from 0\n"
            )
        };
        let cases = [
            ("".to_string(), None),
            ("3\nclean_shutdown 1\n".to_string(), Some(1)),
            ("1\nclean_shutdown 1\n".to_string(), None),
            (head("2", "0") + "segments 0\n", Some(2)),
            (head("0", "x") + "segments 0\n", Some(3)),
            (
                "1\nrecovery_point 0\nclean_shutdown 1\n".to_string(),
                Some(2),
            ),
            (
                "1\nclean_shutdown 0\nrecovery_point 5\nlog_start_offset 0\nsegments 0\n"
                    .to_string(),
                Some(5),
            ),
            (head("0", "5") + "segments 1\n0 5\n", Some(8)),
            (head("0", "5") + "segments 2\n0 5 100\n", None),
            (head("0", "5") + "segments 0\nextra\n", Some(8)),
            (head("0", "5") + "segments 1\n0 5 -3\n", Some(8)),
        ];
        for (text, line) in cases {
            match decode(&text) {
                Ok(c) => panic!("accepted {text:?} as {c:?}"),
                Err(e) if !e.damaged => assert_eq!(e.line, line, "{text:?}: {}", e.reason),
                Err(e) => panic!("{text:?}: {e:?}"),
            }
        }
    }

    #[test]
    fn contradictions_are_refused() {
        let ok = clean(vec![record(0, 860, 9_000), record(860, 1000, 1_600)]);
        assert_eq!(ok.check(), Ok(()));
        let contradictions = [
            // log start above the end
            Checkpoint {
                log_start_offset: 2_000,
                ..ok.clone()
            },
            // recovery point above what a clean close recorded
            Checkpoint {
                recovery_point: 5_000,
                ..ok.clone()
            },
            // a recorded segment above the recovery point
            Checkpoint {
                clean_shutdown: false,
                recovery_point: 900,
                ..ok.clone()
            },
            // overlapping segments
            clean(vec![record(0, 860, 9_000), record(800, 1000, 1_600)]),
            // a size that cannot hold the offsets
            clean(vec![record(0, 860, 10), record(860, 1000, 1_600)]),
            clean(vec![record(0, 0, 100)]),
            // log start below the first segment
            Checkpoint {
                log_start_offset: 0,
                ..clean(vec![record(100, 860, 9_000)])
            },
            // a clean close with no segment
            clean(vec![]),
        ];
        for c in contradictions {
            assert!(c.check().is_err(), "accepted {c:?}");
            assert!(decode(&encode(&c)).is_err(), "decoded {c:?}");
        }
    }

    #[test]
    fn an_unclean_checkpoint_may_vouch_for_less_than_its_recovery_point() {
        let c = Checkpoint {
            clean_shutdown: false,
            recovery_point: 1_500,
            log_start_offset: 10,
            high_watermark: 2_000,
            dense_from: Some(860),
            segments: Some(vec![record(0, 860, 9_000)]),
            start_over_at: None,
        };
        assert_eq!(c.check(), Ok(()));
        let empty_log = Checkpoint {
            clean_shutdown: true,
            recovery_point: 42,
            log_start_offset: 42,
            high_watermark: 42,
            dense_from: Some(42),
            segments: Some(vec![record(42, 42, 0)]),
            start_over_at: None,
        };
        assert_eq!(empty_log.check(), Ok(()));
    }
}
