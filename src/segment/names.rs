//! Kafka's file names (docs/format.md, "Partition directory and file names"): the base offset as 20
//! zero-padded decimal digits, an extension, and optionally a temporary suffix after it.

use std::path::{Path, PathBuf};

/// A segment's batches.
pub const LOG_EXT: &str = "log";
/// A segment's offset index.
pub const INDEX_EXT: &str = "index";
/// A segment's time index.
pub const TIME_INDEX_EXT: &str = "timeindex";
/// A segment's index of aborted transactions.
pub const TXN_INDEX_EXT: &str = "txnindex";
/// A producer snapshot.
pub const SNAPSHOT_EXT: &str = "snapshot";

/// Temporary suffixes that follow the extension (docs/format.md, "Partition directory and file
/// names").
pub const DELETED_SUFFIX: &str = "deleted";
pub const CLEANED_SUFFIX: &str = "cleaned";
pub const SWAP_SUFFIX: &str = "swap";
pub const TMP_SUFFIX: &str = "tmp";
/// A retired segment's `.log` kept for reuse as a later active segment's file
/// (`LogConfig::recycled_segments`, docs/design.md "Segment space"): `<base>.log.recycle`, named
/// after the segment it held. Ignored by Kafka's tools as `.deleted` is; removed by every open.
pub const RECYCLE_SUFFIX: &str = "recycle";

/// `00000000000000001234.log` for (1234, "log").
pub fn file_name(base_offset: i64, ext: &str) -> String {
    format!("{base_offset:020}.{ext}")
}

pub fn file_path(dir: &Path, base_offset: i64, ext: &str) -> PathBuf {
    dir.join(file_name(base_offset, ext))
}

/// A file name split into its parts: `<offset>.<ext>[.<suffix>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedName<'a> {
    /// The offset of the 20 digits: a segment's base offset, or a snapshot's offset.
    pub offset: i64,
    /// The extension: [`LOG_EXT`], [`INDEX_EXT`], ... or any other.
    pub ext: &'a str,
    /// The temporary suffix after it (`deleted`, `cleaned`, `swap`, `tmp`), if any.
    pub suffix: Option<&'a str>,
}

/// Parses `<20 digits>.<ext>[.<suffix>]`; anything else (other files of the directory) is `None`.
pub fn parse(name: &str) -> Option<ParsedName<'_>> {
    let (digits, rest) = name.split_once('.')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset = digits.parse::<i64>().ok()?;
    let (ext, suffix) = match rest.split_once('.') {
        Some((ext, suffix)) => (ext, Some(suffix)),
        None => (rest, None),
    };
    if ext.is_empty() {
        return None;
    }
    Some(ParsedName {
        offset,
        ext,
        suffix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_twenty_digit_offsets() {
        assert_eq!(file_name(1234, LOG_EXT), "00000000000000001234.log");
        assert_eq!(
            file_name(0, TIME_INDEX_EXT),
            "00000000000000000000.timeindex"
        );
    }

    #[test]
    fn parse_splits_offset_extension_and_suffix() {
        assert_eq!(
            parse("00000000000000001234.log"),
            Some(ParsedName {
                offset: 1234,
                ext: "log",
                suffix: None
            })
        );
        assert_eq!(
            parse("00000000000000001234.timeindex.cleaned"),
            Some(ParsedName {
                offset: 1234,
                ext: "timeindex",
                suffix: Some("cleaned")
            })
        );
        assert_eq!(parse("leader-epoch-checkpoint"), None);
        assert_eq!(parse("0000000000000000123.log"), None);
        assert_eq!(parse("0000000000000000012a.log"), None);
        assert_eq!(parse("00000000000000000012."), None);
    }
}
