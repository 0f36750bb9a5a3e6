//! The small text files of a partition directory besides the engine's checkpoint: the
//! `leader-epoch-checkpoint` (which an open refuses when it does not parse), the cleaner's
//! offset checkpoint (which the cleaner ignores when it does not parse, cleaning from the log
//! start) and Kafka's `partition.metadata` (the topic id, which the engine does not read). Each
//! is damage when it does not parse: a verify that calls such a directory clean would hide it
//! until the open that refuses it.

use std::path::Path;

use super::VerifyReport;
use crate::io::{self, FileSystem};
use crate::log::{epochs, text_checkpoint, CLEANER_OFFSET_FILE};

/// Kafka's `partition.metadata`.
pub(super) const PARTITION_METADATA: &str = "partition.metadata";

/// None of these files is larger.
const MAX_BYTES: u64 = 64 << 10;

pub(super) fn verify(
    fs: &dyn FileSystem,
    dir: &Path,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    if let Err(bad) = epochs::read(fs, dir)? {
        report.problem(
            &bad.path,
            bad.line,
            "bad_epoch_checkpoint",
            format!(
                "{} (the open refuses it; without the file it is rebuilt from the batches)",
                bad.reason
            ),
        );
    }
    let cleaner = dir.join(CLEANER_OFFSET_FILE);
    if let Some(text) = read_text(fs, &cleaner, report)? {
        let entries =
            text_checkpoint::parse(&text, 0, |f| text_checkpoint::field::<i64>(f, 0, "offset"));
        let problem = match entries {
            Err(e) => Some((e.line, e.reason)),
            Ok(v) if v.len() != 1 || v[0] < 0 => {
                Some((None, format!("{v:?}: not one offset at or above 0")))
            }
            Ok(_) if !text.ends_with('\n') => Some((None, "no final newline: cut short".into())),
            Ok(_) => None,
        };
        if let Some((line, reason)) = problem {
            report.problem(
                &cleaner,
                line,
                "bad_cleaner_offset",
                format!("{reason} (the cleaner ignores it and cleans from the log start)"),
            );
        }
    }
    let metadata = dir.join(PARTITION_METADATA);
    if let Some(text) = read_text(fs, &metadata, report)? {
        if let Err((line, reason)) = check_partition_metadata(&text) {
            report.problem(
                &metadata,
                Some(line),
                "bad_partition_metadata",
                format!("{reason} (Kafka's topic id file; the engine does not read it)"),
            );
        }
    }
    Ok(())
}

/// The file as text; `None` when it is missing or reported as unreadable (not a file, too
/// large, not UTF-8).
fn read_text(
    fs: &dyn FileSystem,
    path: &Path,
    report: &mut VerifyReport,
) -> Result<Option<String>, io::IoError> {
    let problem = match io::read_small_file(fs, path, MAX_BYTES)? {
        io::SmallFile::Missing => return Ok(None),
        io::SmallFile::NotAFile(kind) => format!("a {kind}, not a regular file"),
        io::SmallFile::TooLarge(len) => format!("{len} bytes, more than such a file holds"),
        io::SmallFile::Bytes(b) => match String::from_utf8(b) {
            Ok(text) => return Ok(Some(text)),
            Err(e) => format!(
                "not text: byte {} is not UTF-8",
                e.utf8_error().valid_up_to()
            ),
        },
    };
    report.problem(path, None, "bad_metadata_file", problem);
    Ok(None)
}

/// Kafka's `PartitionMetadataFile`: `version: 0`, then `topic_id: ` and a topic id (a UUID in
/// URL-safe base64 without padding: 22 characters). `Err` with the 1-based line at fault.
fn check_partition_metadata(text: &str) -> Result<(), (usize, String)> {
    let mut lines = text.lines();
    match lines.next().map(str::trim) {
        Some("version: 0") => {}
        other => {
            return Err((
                1,
                format!("version line {other:?}, expected \"version: 0\""),
            ))
        }
    }
    let id = lines
        .next()
        .and_then(|l| l.trim().strip_prefix("topic_id: "))
        .ok_or((2, "no \"topic_id: \" line".to_string()))?;
    let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if id.len() != 22 || !id.chars().all(base64url) {
        return Err((2, format!("topic id {id:?} is not 22 base64 characters")));
    }
    if let Some(extra) = lines.find(|l| !l.trim().is_empty()) {
        return Err((3, format!("unexpected line {extra:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_partition_metadata;

    #[test]
    fn kafka_partition_metadata_parses_and_damaged_ones_do_not() {
        assert!(check_partition_metadata("version: 0\ntopic_id: _MpPvJthR26dWMr9v7nuKQ").is_ok());
        assert!(check_partition_metadata("version: 0\ntopic_id: _MpPvJthR26dWMr9v7nuKQ\n").is_ok());
        assert_eq!(
            check_partition_metadata("version: 0\ntopic_id:")
                .unwrap_err()
                .0,
            2
        );
        assert_eq!(check_partition_metadata("version: 1\n").unwrap_err().0, 1);
        assert!(check_partition_metadata("version: 0\ntopic_id: _MpPvJthR26dWMr9v7nuK").is_err());
    }
}
