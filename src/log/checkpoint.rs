//! `oncelog.checkpoint`: what a standalone log needs to recover on its own (DESIGN.md §4).
//!
//! A text file in the partition directory, in the spirit of Kafka's checkpoint files
//! (kafka-format.md §8.1), written by temp file + fsync + rename + directory fsync:
//!
//! ```text
//! 0                       <- version
//! clean_shutdown 1        <- 1 only when written by a clean close
//! recovery_point 1234     <- every offset below it was durable, with its indexes
//! log_start_offset 0
//! ```
//!
//! Opening a directory without it (a Kafka partition directory) is legal: everything is then
//! validated, as after an unclean shutdown with recovery point 0.

use std::path::{Path, PathBuf};

use crate::io::{self, FileSystem, IoError, IoResultExt};

pub const FILE_NAME: &str = "oncelog.checkpoint";
const VERSION: &str = "0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub clean_shutdown: bool,
    pub recovery_point: i64,
    pub log_start_offset: i64,
}

/// Why a checkpoint file could not be used (it is then ignored and the log fully validated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct BadCheckpoint {
    pub path: PathBuf,
    pub reason: String,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

pub fn encode(c: &Checkpoint) -> String {
    format!(
        "{VERSION}\nclean_shutdown {}\nrecovery_point {}\nlog_start_offset {}\n",
        c.clean_shutdown as u8, c.recovery_point, c.log_start_offset
    )
}

pub fn decode(text: &str) -> Result<Checkpoint, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(VERSION) => {}
        other => return Err(format!("unsupported version line {other:?}")),
    }
    let mut field = |name: &str| -> Result<i64, String> {
        let line = lines.next().ok_or_else(|| format!("missing {name}"))?;
        let (key, value) = line
            .split_once(' ')
            .ok_or_else(|| format!("malformed line {line:?}"))?;
        if key != name {
            return Err(format!("expected {name}, found {key:?}"));
        }
        value
            .parse::<i64>()
            .map_err(|_| format!("{name} is not an integer: {value:?}"))
    };
    let clean = field("clean_shutdown")?;
    let recovery_point = field("recovery_point")?;
    let log_start_offset = field("log_start_offset")?;
    if !(0..=1).contains(&clean) || recovery_point < 0 || log_start_offset < 0 {
        return Err("values out of range".to_string());
    }
    Ok(Checkpoint {
        clean_shutdown: clean == 1,
        recovery_point,
        log_start_offset,
    })
}

/// Reads the checkpoint of `dir`: `Ok(None)` without one, `Err` if it is unreadable.
/// Reads the checkpoint of `dir`: `Ok(Ok(None))` without one, `Ok(Err(..))` if its content is
/// unusable (it is then ignored), and `Err` if it could not be read at all: a transient I/O
/// error must not be mistaken for a missing checkpoint, which would forget the recovery point.
pub fn read(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Result<Option<Checkpoint>, BadCheckpoint>, IoError> {
    let p = path(dir);
    if !fs.exists(&p).ctx("stat", &p)? {
        return Ok(Ok(None));
    }
    let bytes = io::read_file(fs, &p)?;
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(Err(BadCheckpoint {
            path: p,
            reason: "not UTF-8".into(),
        }));
    };
    Ok(decode(&text)
        .map(Some)
        .map_err(|reason| BadCheckpoint { path: p, reason }))
}

pub fn write(fs: &dyn FileSystem, dir: &Path, c: &Checkpoint) -> Result<(), IoError> {
    io::write_file_atomically(fs, &path(dir), encode(c).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let c = Checkpoint {
            clean_shutdown: true,
            recovery_point: 1234,
            log_start_offset: 7,
        };
        assert_eq!(decode(&encode(&c)), Ok(c));
        assert_eq!(
            encode(&c),
            "0\nclean_shutdown 1\nrecovery_point 1234\nlog_start_offset 7\n"
        );
    }

    #[test]
    fn malformed_files_are_refused_with_a_reason() {
        for text in [
            "",
            "1\nclean_shutdown 1\nrecovery_point 0\nlog_start_offset 0\n",
            "0\nclean_shutdown 1\n",
            "0\nclean_shutdown 2\nrecovery_point 0\nlog_start_offset 0\n",
            "0\nclean_shutdown 1\nrecovery_point x\nlog_start_offset 0\n",
            "0\nrecovery_point 0\nclean_shutdown 1\nlog_start_offset 0\n",
            "0\nclean_shutdown 0\nrecovery_point -5\nlog_start_offset 0\n",
        ] {
            assert!(decode(text).is_err(), "accepted {text:?}");
        }
    }
}
