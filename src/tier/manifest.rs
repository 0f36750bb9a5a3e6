//! The per-partition manifest: which segments are remote, with the size and CRC-32C of each of
//! their objects (docs/format.md, "Tiered storage: object keys and the manifest"). Pure:
//! encoding, decoding and the rules every manifest keeps; the store calls are in `upload`.
//!
//! ```text
//! oncelog-tier-manifest 2
//! partition orders-0
//! generation 2
//! log_start_offset 120
//! segments 1
//! 0 860 8c1f03a95e2b7d40 1700000000859 98986:5a1e33c0 96:0c3e8a41 108:1bd06e3f 0:00000000 31:77c0d1e2 14:96a0f2b3
//! crc32c 2e7c91a4
//! ```

use super::keys::{SegmentObject, UploadId};
use crate::format;
use crate::segment::{offset_index, time_index, txn_index};

const MAGIC: &str = "oncelog-tier-manifest";
/// The version written. Version 1 (no `log_start_offset` line) is still read: its log start
/// is its first segment's base.
const VERSION: u32 = 2;

/// The size and CRC-32C of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectDigest {
    /// Its length in bytes.
    pub size: u64,
    /// The CRC-32C (Castagnoli) of its bytes.
    pub crc32c: u32,
}

impl ObjectDigest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> ObjectDigest {
        ObjectDigest {
            size: bytes.len() as u64,
            crc32c: crc32c::crc32c(bytes),
        }
    }
}

/// A segment the manifest says is remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Its base offset.
    pub base_offset: i64,
    /// The base offset of the segment after it: it holds offsets in `[base_offset, end_offset)`.
    pub end_offset: i64,
    /// The upload that put its objects (their folder).
    pub upload_id: UploadId,
    /// Its largest batch timestamp, -1 when none.
    pub max_timestamp: i64,
    /// Its six objects, in [`SegmentObject::ALL`]'s order.
    pub objects: [ObjectDigest; 6],
}

impl RemoteSegment {
    /// The digest of one of its objects.
    pub fn object(&self, which: SegmentObject) -> ObjectDigest {
        self.objects[which.index()]
    }

    /// The total size of its objects.
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }
}

/// One generation of a partition's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The partition prefix it was written for.
    pub partition: String,
    /// Its generation: the number in its key.
    pub generation: u64,
    /// The partition's log start offset across tiers (Kafka's `logStartOffset`, KIP-405):
    /// raised by DeleteRecords and retention, never lowered. When there are segments, the
    /// first one holds it (`first.base_offset <= log_start_offset < first.end_offset`).
    pub log_start_offset: i64,
    /// The remote segments, in offset order, contiguous.
    pub segments: Vec<RemoteSegment>,
}

/// Why a manifest's bytes were refused: the line (1-based) where there is one, and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestProblem {
    /// The line at fault, if one is.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl ManifestProblem {
    fn at(line: usize, reason: impl Into<String>) -> ManifestProblem {
        ManifestProblem {
            line: Some(line),
            reason: reason.into(),
        }
    }
}

impl Manifest {
    /// The offset after the last remote segment, `None` with none.
    pub fn remote_end(&self) -> Option<i64> {
        self.segments.last().map(|s| s.end_offset)
    }

    /// The partition's log start offset, given the local log's start: the manifest's when its
    /// segments reach the local log start (or when it is above the local start, which a crash
    /// between a DeleteRecords' manifest and its local step leaves until
    /// [`super::reconcile`]), else the local start (a hole between the remote end and the local
    /// start is not readable).
    pub fn partition_log_start(&self, local_log_start: i64) -> i64 {
        match self.remote_end() {
            Some(end) if end >= local_log_start => self.log_start_offset,
            _ => self.log_start_offset.max(local_log_start),
        }
    }

    /// The remote segment whose base offset is `base`.
    pub fn segment(&self, base: i64) -> Option<&RemoteSegment> {
        self.segments.iter().find(|s| s.base_offset == base)
    }

    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!(
            "{MAGIC} {VERSION}\npartition {}\ngeneration {}\nlog_start_offset {}\nsegments {}\n",
            self.partition,
            self.generation,
            self.log_start_offset,
            self.segments.len()
        );
        for s in &self.segments {
            out.push_str(&format!(
                "{} {} {} {}",
                s.base_offset, s.end_offset, s.upload_id, s.max_timestamp
            ));
            for o in &s.objects {
                out.push_str(&format!(" {}:{:08x}", o.size, o.crc32c));
            }
            out.push('\n');
        }
        let crc = crc32c::crc32c(out.as_bytes());
        out.push_str(&format!("crc32c {crc:08x}\n"));
        out.into_bytes()
    }

    /// Decodes the bytes of the manifest stored as generation `generation` of `partition`,
    /// holding it to every rule of the format (docs/format.md).
    pub fn decode(
        bytes: &[u8],
        partition: &str,
        generation: u64,
    ) -> Result<Manifest, ManifestProblem> {
        let text = std::str::from_utf8(bytes).map_err(|e| ManifestProblem {
            line: None,
            reason: format!("not UTF-8 at byte {}", e.valid_up_to()),
        })?;
        let body_end = checked_body(text)?;
        let mut lines = text[..body_end]
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l));
        let mut next = |what: &str| {
            lines
                .next()
                .ok_or_else(|| ManifestProblem::at(0, format!("ends before its {what} line")))
        };
        let (n, l) = next("version")?;
        let version = match l.strip_prefix(MAGIC).and_then(|v| v.strip_prefix(' ')) {
            Some("1") => 1,
            Some("2") => 2,
            _ => {
                return Err(ManifestProblem::at(
                    n,
                    format!("not a version-1 or version-{VERSION} manifest: {l:?}"),
                ))
            }
        };
        let (n, l) = next("partition")?;
        match l.strip_prefix("partition ") {
            Some(p) if p == partition => {}
            _ => {
                return Err(ManifestProblem::at(
                    n,
                    format!("{l:?}: not the partition {partition:?} it is stored under"),
                ))
            }
        }
        let (n, l) = next("generation")?;
        let found: u64 = keyed(n, l, "generation")?;
        if found != generation {
            return Err(ManifestProblem::at(
                n,
                format!("generation {found}, but it is stored as generation {generation}"),
            ));
        }
        let stated_start = if version >= 2 {
            let (n, l) = next("log_start_offset")?;
            let start: i64 = keyed(n, l, "log_start_offset")?;
            if start < 0 {
                return Err(ManifestProblem::at(
                    n,
                    format!("log start offset {start} below 0"),
                ));
            }
            Some((n, start))
        } else {
            None
        };
        let (n, l) = next("segments")?;
        let count: usize = keyed(n, l, "segments")?;
        let mut segments: Vec<RemoteSegment> = Vec::new();
        for (n, l) in lines {
            if segments.len() == count {
                return Err(ManifestProblem::at(
                    n,
                    format!("more segment lines than the declared {count}"),
                ));
            }
            let s = segment_line(l).map_err(|reason| ManifestProblem::at(n, reason))?;
            if let Some(reason) = segment_rules(&s, segments.last()) {
                return Err(ManifestProblem::at(n, reason));
            }
            segments.push(s);
        }
        if segments.len() != count {
            return Err(ManifestProblem {
                line: None,
                reason: format!("{count} segments declared, {} found", segments.len()),
            });
        }
        // Version 1 had no log start: the first segment's base was the partition's start.
        let log_start_offset = match stated_start {
            Some((n, start)) => {
                if let Some(first) = segments
                    .first()
                    .filter(|f| !(f.base_offset..f.end_offset).contains(&start))
                {
                    return Err(ManifestProblem::at(
                        n,
                        format!(
                            "log start offset {start} outside the first segment [{}, {})",
                            first.base_offset, first.end_offset
                        ),
                    ));
                }
                start
            }
            None => segments.first().map_or(0, |f| f.base_offset),
        };
        Ok(Manifest {
            partition: partition.to_string(),
            generation,
            log_start_offset,
            segments,
        })
    }
}

/// Where the body ends, after checking the last line's CRC-32C over it.
fn checked_body(text: &str) -> Result<usize, ManifestProblem> {
    let trimmed = text.strip_suffix('\n').ok_or_else(|| ManifestProblem {
        line: None,
        reason: "does not end with a line end (cut short?)".into(),
    })?;
    let body_end = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let line = text[..body_end].lines().count() + 1;
    let stated = trimmed[body_end..]
        .strip_prefix("crc32c ")
        .and_then(hex8)
        .ok_or_else(|| {
            ManifestProblem::at(line, "no `crc32c <8 lowercase hex digits>` last line")
        })?;
    let found = crc32c::crc32c(&text.as_bytes()[..body_end]);
    if found != stated {
        return Err(ManifestProblem::at(
            line,
            format!("CRC-32C {found:08x} of the bytes before, but the line says {stated:08x}"),
        ));
    }
    Ok(body_end)
}

/// Eight lowercase hex digits, as this format writes a CRC (one spelling per value: a flipped
/// case bit is damage, not the same number).
fn hex8(s: &str) -> Option<u32> {
    let lower = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (s.len() == 8 && s.bytes().all(lower))
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

fn keyed<T: std::str::FromStr>(n: usize, line: &str, key: &str) -> Result<T, ManifestProblem> {
    line.strip_prefix(key)
        .and_then(|r| r.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ManifestProblem::at(n, format!("expected `{key} <number>`, found {line:?}")))
}

fn segment_line(line: &str) -> Result<RemoteSegment, String> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 10 {
        return Err(format!(
            "a segment line has 10 fields, this one {}",
            f.len()
        ));
    }
    let int = |i: usize, what: &str| -> Result<i64, String> {
        f[i].parse::<i64>()
            .map_err(|_| format!("{what} is not an integer: {:?}", f[i]))
    };
    let upload_id = UploadId::parse(f[2])
        .ok_or_else(|| format!("upload id is not 16 lowercase hex digits: {:?}", f[2]))?;
    let mut objects = [ObjectDigest::default(); 6];
    for (o, which) in objects.iter_mut().zip(SegmentObject::ALL) {
        let field = f[4 + which.index()];
        let parsed = field.split_once(':').and_then(|(size, crc)| {
            let crc = hex8(crc)?;
            Some(ObjectDigest {
                size: size.parse().ok()?,
                crc32c: crc,
            })
        });
        *o = parsed.ok_or_else(|| {
            format!(
                "{} digest is not `<size>:<8 hex digits>`: {field:?}",
                which.name()
            )
        })?;
    }
    Ok(RemoteSegment {
        base_offset: int(0, "base offset")?,
        end_offset: int(1, "end offset")?,
        upload_id,
        max_timestamp: int(3, "max timestamp")?,
        objects,
    })
}

/// Why segment `s` cannot follow `previous` in a manifest, or `None`.
pub(crate) fn segment_rules(s: &RemoteSegment, previous: Option<&RemoteSegment>) -> Option<String> {
    if s.base_offset < 0 || s.end_offset <= s.base_offset {
        return Some(format!(
            "offsets [{}, {}): not a non-empty range of offsets",
            s.base_offset, s.end_offset
        ));
    }
    if let Some(p) = previous.filter(|p| p.end_offset != s.base_offset) {
        return Some(format!(
            "starts at {}, but the segment before ends at {}: remote segments are contiguous",
            s.base_offset, p.end_offset
        ));
    }
    if s.max_timestamp < -1 {
        return Some(format!("max timestamp {} below -1", s.max_timestamp));
    }
    let log = s.object(SegmentObject::Log).size;
    if log < format::HEADER_SIZE as u64 || log > i32::MAX as u64 {
        return Some(format!(
            ".log of {log} bytes: a segment holds at least one batch header and less than 2 GiB"
        ));
    }
    for (which, entry) in [
        (SegmentObject::OffsetIndex, offset_index::ENTRY_SIZE),
        (SegmentObject::TimeIndex, time_index::ENTRY_SIZE),
        (SegmentObject::TxnIndex, txn_index::ENTRY_SIZE),
    ] {
        let size = s.object(which).size;
        if !size.is_multiple_of(entry as u64) {
            return Some(format!(
                "{} of {size} bytes: not whole {entry}-byte entries",
                which.name()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base: i64, end: i64) -> RemoteSegment {
        let mut objects = [ObjectDigest::default(); 6];
        objects[0] = ObjectDigest {
            size: 98_986,
            crc32c: 0x5a1e_33c0,
        };
        objects[1] = ObjectDigest {
            size: 96,
            crc32c: 0x0c3e_8a41,
        };
        objects[2] = ObjectDigest {
            size: 108,
            crc32c: 0x1bd0_6e3f,
        };
        objects[4] = ObjectDigest {
            size: 31,
            crc32c: 0x77c0_d1e2,
        };
        RemoteSegment {
            base_offset: base,
            end_offset: end,
            upload_id: UploadId(0x8c1f_03a9_5e2b_7d40),
            max_timestamp: 1_700_000_000_859,
            objects,
        }
    }

    fn manifest() -> Manifest {
        Manifest {
            partition: "orders-0".into(),
            generation: 2,
            log_start_offset: 120,
            segments: vec![segment(0, 860), segment(860, 1720)],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_reads_as_documented() {
        let m = manifest();
        let bytes = m.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(
            "oncelog-tier-manifest 2\npartition orders-0\ngeneration 2\nlog_start_offset 120\n\
             segments 2\n0 860 \
             8c1f03a95e2b7d40 1700000000859 98986:5a1e33c0 96:0c3e8a41 108:1bd06e3f 0:00000000 \
             31:77c0d1e2 0:00000000\n"
        ));
        assert_eq!(Manifest::decode(&bytes, "orders-0", 2), Ok(m));
        let empty = Manifest {
            partition: "p".into(),
            generation: 1,
            log_start_offset: 5000,
            segments: vec![],
        };
        assert_eq!(Manifest::decode(&empty.encode(), "p", 1), Ok(empty));
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let bytes = manifest().encode();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                Manifest::decode(&b, "orders-0", 2).is_err(),
                "bit {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn a_cut_manifest_is_refused() {
        let bytes = manifest().encode();
        for len in 0..bytes.len() {
            assert!(
                Manifest::decode(&bytes[..len], "orders-0", 2).is_err(),
                "cut at {len}"
            );
        }
    }

    /// Re-seals an edited body, as a hand edit that fixed the checksum would.
    fn resealed(body: &str) -> Vec<u8> {
        format!("{body}crc32c {:08x}\n", crc32c::crc32c(body.as_bytes())).into_bytes()
    }

    #[test]
    fn a_manifest_that_breaks_a_rule_is_refused_naming_the_line() {
        let text = String::from_utf8(manifest().encode()).unwrap();
        let body = &text[..text.rfind("crc32c").unwrap()];
        let cases: Vec<(String, Option<usize>)> = vec![
            (
                body.replace("oncelog-tier-manifest 2", "oncelog-tier-manifest 3"),
                Some(1),
            ),
            (
                body.replace("partition orders-0", "partition orders-1"),
                Some(2),
            ),
            (body.replace("generation 2", "generation 3"), Some(3)),
            (
                body.replace("log_start_offset 120", "log_start_offset 860"),
                Some(4),
            ),
            (
                body.replace("log_start_offset 120", "log_start_offset -1"),
                Some(4),
            ),
            (body.replace("log_start_offset 120\n", ""), Some(4)),
            (body.replace("segments 2", "segments 3"), None),
            (body.replace("segments 2", "segments 1"), Some(7)),
            (body.replace("860 1720", "861 1720"), Some(7)),
            (body.replace("0 860 ", "0 0 "), Some(6)),
            (body.replace("98986:", "60:"), Some(6)),
            (body.replace("96:", "95:"), Some(6)),
            (body.replace("108:", "100:"), Some(6)),
            (body.replace(" 0:00000000", " 33:00000000"), Some(6)),
            (
                body.replace("8c1f03a95e2b7d40", "8C1F03A95E2B7D40"),
                Some(6),
            ),
            (body.replace("5a1e33c0", "5a1e33"), Some(6)),
            (body.replace("1700000000859", "-2"), Some(6)),
            (body.replace("0 860 ", "-5 860 "), Some(6)),
            (body.replace("\n860 1720 ", "\n860  1720 "), Some(7)),
        ];
        for (edited, line) in cases {
            assert_ne!(edited, body, "the edit changed nothing");
            match Manifest::decode(&resealed(&edited), "orders-0", 2) {
                Ok(m) => panic!("accepted {edited:?} as {m:?}"),
                Err(p) => assert_eq!(p.line, line, "{edited:?}: {}", p.reason),
            }
        }
    }

    #[test]
    fn a_version_1_manifest_still_reads_its_start_being_its_first_segments_base() {
        let text = String::from_utf8(manifest().encode()).unwrap();
        let body = &text[..text.rfind("crc32c").unwrap()];
        let v1 = body
            .replace("oncelog-tier-manifest 2", "oncelog-tier-manifest 1")
            .replace("log_start_offset 120\n", "");
        let m = Manifest::decode(&resealed(&v1), "orders-0", 2).unwrap();
        assert_eq!(m.log_start_offset, 0);
        assert_eq!(m.segments, manifest().segments);
        let empty = "oncelog-tier-manifest 1\npartition orders-0\ngeneration 2\nsegments 0\n";
        assert_eq!(
            Manifest::decode(&resealed(empty), "orders-0", 2).map(|m| m.log_start_offset),
            Ok(0)
        );
        // A version-1 manifest with the version-2 line is refused.
        let mixed = body.replace("oncelog-tier-manifest 2", "oncelog-tier-manifest 1");
        assert!(Manifest::decode(&resealed(&mixed), "orders-0", 2).is_err());
    }

    #[test]
    fn the_partition_log_start_is_the_manifests_when_its_segments_reach_the_local_start() {
        let m = manifest(); // segments [0, 1720), log start 120
        assert_eq!(
            m.partition_log_start(1720),
            120,
            "contiguous with the local log"
        );
        assert_eq!(m.partition_log_start(900), 120, "overlapping the local log");
        assert_eq!(
            m.partition_log_start(100),
            120,
            "a crash between a DeleteRecords' manifest and its local step: never lower"
        );
        assert_eq!(m.partition_log_start(2000), 2000, "a hole: the local start");
        let empty = Manifest {
            segments: vec![],
            log_start_offset: 3000,
            ..m
        };
        assert_eq!(empty.partition_log_start(2000), 3000);
        assert_eq!(empty.partition_log_start(4000), 4000);
    }
}
