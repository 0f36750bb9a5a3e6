//! The cleaner offset of a log: records below it were cleaned by compaction, so the next round
//! starts there. Kept in the partition directory, in `cleaner-offset-checkpoint`: Kafka's text
//! checkpoint layout (version 0, one entry: the offset; docs/format.md).
//!
//! This file is the one source of truth for the cleaner offset (docs/design.md, "The cleaner
//! offset"): [`Log::compact`] reads and moves it, and so does the manager's cleaning job for
//! any other cleaner. The log dir's `cleaner-offset-checkpoint` (Kafka's, one line per
//! partition) is written from it by the manager, for Kafka, and read back only for a partition
//! whose directory has no file of its own (a Kafka log dir, or one an older manager wrote).

use std::path::Path;

use super::text_checkpoint;
use super::Log;
use crate::io::{FileSystem, IoError, IoResultExt};

/// The file in the partition directory that holds the cleaner offset.
pub const FILE_NAME: &str = "cleaner-offset-checkpoint";

/// Reads the cleaner offset file of `dir`, `None` when there is none or it cannot be used
/// (compaction then starts at the log start, which only costs work).
pub(crate) fn read(fs: &dyn FileSystem, dir: &Path) -> Option<i64> {
    let bytes = crate::io::read_file(fs, &dir.join(FILE_NAME)).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let entries =
        text_checkpoint::parse(text, 0, |f| text_checkpoint::field::<i64>(f, 0, "offset")).ok()?;
    entries.first().copied()
}

/// Replaces the cleaner offset file of `dir`, atomically and durably.
pub(crate) fn write(fs: &dyn FileSystem, dir: &Path, offset: i64) -> Result<(), IoError> {
    let text = text_checkpoint::encode(0, std::iter::once(offset.to_string()));
    crate::io::write_file_atomically(fs, &dir.join(FILE_NAME), text.as_bytes())?;
    fs.sync_dir(dir).ctx("fsync directory", dir)
}

impl Log {
    /// The cleaner offset as the log's directory keeps it: `None` without the file, or when it
    /// cannot be read. Not checked against the log's bounds (the caller clamps it).
    pub(crate) fn stored_cleaner_offset(&self) -> Option<i64> {
        read(self.env.fs.as_ref(), &self.dir)
    }

    /// Records that the log is clean below `offset` (what a cleaner other than
    /// [`Log::compact`] answers), unless the file already says so.
    pub(crate) fn store_cleaner_offset(&self, offset: i64) -> Result<(), IoError> {
        if self.stored_cleaner_offset() == Some(offset) {
            return Ok(());
        }
        write(self.env.fs.as_ref(), &self.dir, offset)
    }
}
