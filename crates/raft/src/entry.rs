//! Raft entries beside the partition's batches (docs/design.md, "Replication on openraft"):
//! the log holds only the clients' batches and transaction markers, at the offsets a Kafka
//! partition would give them; what raft needs to know of each entry (its index, its term, the
//! offsets its batches span, and for a membership change the membership) is a record in
//! `raft-entries` ([`ENTRIES_FILE`]), in the partition directory. openraft's own entries (the
//! blank entry a new leader writes, a membership change) take no offset, and an entry of
//! client batches is those batches alone (none when the leader's log refused or recognised as
//! a duplicate each of them).
//!
//! The file is a sequence of records, each framed and checksummed on its own
//! (docs/format.md, "raft-entries"):
//!
//! | off | size | field                                                    |
//! |----:|-----:|----------------------------------------------------------|
//! |   0 |    4 | length of the body, big-endian                           |
//! |   4 |    4 | CRC-32C (Castagnoli) of the body, big-endian             |
//! |   8 |    1 | body: version (1)                                        |
//! |   9 |    1 | kind: 0 blank, 1 membership, 2 run of batches            |
//! |  10 |    8 | index, big-endian                                        |
//! |  18 |    8 | term, big-endian                                         |
//! |  26 |    8 | start offset (of the entry's first batch), big-endian    |
//! |  34 |    8 | end offset (after its last batch), big-endian            |
//! |  42 |  ... | a membership's JSON (kind 1 only)                        |
//!
//! The entry of a partition set (docs/design.md, "Partition sets") spans offsets in each of
//! its partitions' logs, so its record has one span per partition, in the set's order
//! (version 2; a set of one partition writes version 1, as above):
//!
//! | off | size | field                                                    |
//! |----:|-----:|----------------------------------------------------------|
//! |   8 |    1 | body: version (2)                                        |
//! |   9 |    1 | kind, as in version 1                                    |
//! |  10 |    8 | index, big-endian                                        |
//! |  18 |    8 | term, big-endian                                         |
//! |  26 |    4 | number of partitions N (2 or more), big-endian           |
//! |  30 | 16 N | each partition's start and end offsets, big-endian       |
//! | ... |  ... | a membership's JSON (kind 1 only)                        |
//!
//! A record is written after its batches and made durable with them (one device flush, where
//! the file system allows it: [`EntriesFile::stage`]) before its entry is reported persisted,
//! so recovery reads records up to the first that is cut or damaged (a torn write of the
//! tail) and trusts no record without its batches ([`crate::store`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncelog::io::{File, FileSystem, OpenMode};
use openraft::{CommittedLeaderId, LogId, Membership};

use crate::{Node, NodeId, TypeConfig};

/// An entry of the raft log.
pub type Entry = openraft::Entry<TypeConfig>;

/// The file beside the segments that records the raft entries.
pub const ENTRIES_FILE: &str = "raft-entries";
/// The record format's version for an entry of one partition.
const VERSION: u8 = 1;
/// The record format's version for an entry of a partition set.
const VERSION_SET: u8 = 2;
/// A version-2 body before its spans and membership.
const BODY_SET: usize = 22;
/// The most partitions a set's record names.
pub const MAX_SPANS: usize = 1 << 12;
/// The frame before a record's body: its length and its checksum.
const FRAME: usize = 8;
/// A body without a membership.
const BODY: usize = 34;
/// The largest body read back (a membership of many nodes fits).
const MAX_BODY: usize = 1 << 20;
/// The file grows by this much at a time, allocated and written with zeros ahead of the
/// records, so that syncing a record commits no change of the file's size (zeros read as the
/// end of the records).
const GROW: u64 = 64 << 10;

/// The log id of index `index` written in `term`.
pub fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

/// The term an entry's batch carries.
pub fn epoch_of(term: u64) -> Result<i32, String> {
    i32::try_from(term).map_err(|_| format!("term {term} does not fit a partitionLeaderEpoch"))
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// openraft's blank entry (a new leader's first): no batches.
    Blank,
    /// A membership change: no batches.
    Membership(Membership<NodeId, Node>),
    /// Client batches or a transaction marker, as the leader's log wrote them (maybe none).
    Run,
}

impl Kind {
    fn code(&self) -> u8 {
        match self {
            Kind::Blank => 0,
            Kind::Membership(_) => 1,
            Kind::Run => 2,
        }
    }
}

/// One entry's record in [`ENTRIES_FILE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The entry's raft index.
    pub index: u64,
    /// The term it was written in (its batches' partitionLeaderEpoch).
    pub term: u64,
    /// For each partition of the group (one, or a set's, in the set's order): the offset of
    /// the entry's first batch there and the offset after its last (both the log end when it
    /// was written, if it has none there). Never empty.
    pub spans: Vec<(i64, i64)>,
    /// What it is.
    pub kind: Kind,
}

impl Record {
    /// The record of an entry of one partition that spans `start..end`.
    pub fn single(index: u64, term: u64, start: i64, end: i64, kind: Kind) -> Record {
        Record {
            index,
            term,
            spans: vec![(start, end)],
            kind,
        }
    }

    /// The record's bytes, framed.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let membership = match &self.kind {
            Kind::Membership(m) => {
                serde_json::to_vec(m).map_err(|e| format!("membership does not encode: {e}"))?
            }
            _ => Vec::new(),
        };
        let n = self.spans.len();
        if n == 0 || n > MAX_SPANS {
            return Err(format!("entry {}: a record of {n} spans", self.index));
        }
        let mut body = Vec::with_capacity(BODY_SET + 16 * n + membership.len());
        body.push(if n == 1 { VERSION } else { VERSION_SET });
        body.push(self.kind.code());
        body.extend_from_slice(&self.index.to_be_bytes());
        body.extend_from_slice(&self.term.to_be_bytes());
        if n > 1 {
            body.extend_from_slice(&(n as u32).to_be_bytes());
        }
        for (start, end) in &self.spans {
            body.extend_from_slice(&start.to_be_bytes());
            body.extend_from_slice(&end.to_be_bytes());
        }
        body.extend_from_slice(&membership);
        let mut out = Vec::with_capacity(FRAME + body.len());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The record framed at the start of `bytes` and its framed length; `None` when no whole
    /// record with a good checksum is there (the end of what was written, or a torn write).
    /// A record whose checksum holds but whose body is not a record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Option<(Record, usize)>, String> {
        let Some(frame) = bytes.get(..FRAME) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(frame[4..].try_into().expect("4 bytes"));
        if !(BODY_SET..=MAX_BODY).contains(&len) {
            return Ok(None);
        }
        let Some(body) = bytes.get(FRAME..FRAME + len) else {
            return Ok(None);
        };
        if crc32c::crc32c(body) != crc {
            return Ok(None);
        }
        let be = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let (index, term) = (be(2), be(10));
        let (n, at) = match body[0] {
            VERSION if len >= BODY => (1, 18),
            VERSION_SET => {
                let n = u32::from_be_bytes(body[18..22].try_into().expect("4 bytes")) as usize;
                if !(2..=MAX_SPANS).contains(&n) || len < BODY_SET + 16 * n {
                    return Err(format!(
                        "entry {index}: a set's record of {n} spans in {len} bytes"
                    ));
                }
                (n, BODY_SET)
            }
            VERSION => return Err(format!("entry {index}: a record of {len} bytes")),
            other => return Err(format!("record version {other} is not known")),
        };
        let spans: Vec<(i64, i64)> = (0..n)
            .map(|i| (be(at + 16 * i) as i64, be(at + 16 * i + 8) as i64))
            .collect();
        let rest = &body[at + 16 * n..];
        let kind = match body[1] {
            0 => Kind::Blank,
            1 => Kind::Membership(
                serde_json::from_slice(rest)
                    .map_err(|e| format!("entry {index}: membership: {e}"))?,
            ),
            2 => Kind::Run,
            other => return Err(format!("entry {index}: unknown kind {other}")),
        };
        if !matches!(kind, Kind::Membership(_)) && !rest.is_empty() {
            return Err(format!(
                "entry {index}: {} bytes after a record of kind {}",
                rest.len(),
                body[1]
            ));
        }
        for (k, &(start, end)) in spans.iter().enumerate() {
            if start < 0 || end < start || (kind != Kind::Run && end != start) {
                let of = if n > 1 {
                    format!(" of partition {k} of the set")
                } else {
                    String::new()
                };
                return Err(format!(
                    "entry {index}: offsets {start}..{end}{of} for an entry of kind {}",
                    body[1]
                ));
            }
        }
        Ok(Some((
            Record {
                index,
                term,
                spans,
                kind,
            },
            FRAME + len,
        )))
    }
}

/// [`ENTRIES_FILE`], open for appending records.
pub struct EntriesFile {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    file: Arc<dyn File>,
    /// Where the next record goes: the end of the records read or written.
    len: u64,
    /// Whether anything but zeros followed the last whole record when the file was opened (a
    /// torn write), until cut.
    torn: bool,
    /// The file's size: records, then zeros.
    allocated: u64,
    /// The records before this position are durable, or written back for the caller's device
    /// flush ([`EntriesFile::stage`]).
    staged: u64,
    /// Whether the file's size or blocks may have changed since its last sync (it grew, or was
    /// opened after what may have been a crash): its next records are then synced, not
    /// written back, so that the sync commits the size and the extents.
    grown: bool,
}

/// How to make the records written since the last [`EntriesFile::stage`] durable.
#[derive(Debug)]
pub struct Staged {
    /// The open file.
    pub file: Arc<dyn File>,
    /// Where the records not yet staged start.
    pub from: u64,
    /// How many bytes they take (none: nothing to do).
    pub len: u64,
    /// Whether only a sync of the file will do (it grew): a write-back would promise nothing.
    pub sync: bool,
}

impl std::fmt::Debug for EntriesFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntriesFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish()
    }
}

/// The records read from an [`EntriesFile`], with where each starts in the file.
pub type Read = Vec<(u64, Record)>;

impl EntriesFile {
    /// The file's path in partition directory `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(ENTRIES_FILE)
    }

    /// Creates the file, empty, durably (its directory entry too): a partition's batches are
    /// never written before the file that records their entries exists.
    pub fn create(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<EntriesFile, String> {
        let path = EntriesFile::path_in(dir);
        fs.write_atomically(&path, &[])
            .map_err(|e| format!("{}: {e}", path.display()))?;
        EntriesFile::open(fs, dir).map(|(file, _)| file)
    }

    /// Opens the file and reads its records, up to the first that is cut or damaged: what
    /// follows was a torn write, never reported written, and is cut by [`EntriesFile::keep`]
    /// once the caller accepts the records (a refusal changes nothing).
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<(EntriesFile, Read), String> {
        let path = EntriesFile::path_in(dir);
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let file: Arc<dyn File> =
            Arc::from(fs.open(&path, OpenMode::ReadWrite).map_err(|e| at(&e))?);
        let size = file.len().map_err(|e| at(&e))?;
        let mut bytes = vec![0; size as usize];
        let mut got = 0;
        while got < bytes.len() {
            match file
                .read_at(&mut bytes[got..], got as u64)
                .map_err(|e| at(&e))?
            {
                0 => break,
                n => got += n,
            }
        }
        bytes.truncate(got);
        let mut records = Vec::new();
        let mut pos = 0;
        while let Some((record, n)) =
            Record::decode(&bytes[pos..]).map_err(|e| at(&format!("at byte {pos}: {e}")))?
        {
            records.push((pos as u64, record));
            pos += n;
        }
        let entries = EntriesFile {
            fs,
            path,
            file,
            len: pos as u64,
            torn: bytes[pos..].iter().any(|&b| b != 0),
            allocated: size,
            staged: pos as u64,
            grown: true,
        };
        Ok((entries, records))
    }

    /// Keeps the records before `pos` (the start of a record read on open) and nothing after:
    /// what follows (dropped records, a torn write) is cut off the file, durably, before any
    /// record is written again, so no stale record can be read after a new one. Zeros
    /// allocated ahead are kept.
    pub fn keep(&mut self, pos: u64) -> Result<(), String> {
        if pos == self.len && !self.torn {
            return Ok(());
        }
        self.file
            .set_len(pos)
            .map_err(|e| format!("{}: cutting at {pos}: {e}", self.path.display()))?;
        self.len = pos;
        self.torn = false;
        self.allocated = pos;
        self.staged = pos;
        self.grown = true;
        self.sync()?;
        self.grown = false;
        Ok(())
    }

    /// The file's length: where the next record goes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes records after the last (not durable until staged and flushed, or synced);
    /// answers where
    /// each starts.
    pub fn append(&mut self, records: &[Record]) -> Result<Vec<u64>, String> {
        let mut buf = Vec::new();
        let mut at = Vec::with_capacity(records.len());
        for r in records {
            at.push(self.len + buf.len() as u64);
            buf.extend(r.encode()?);
        }
        if buf.is_empty() {
            return Ok(at);
        }
        let need = self.len + buf.len() as u64;
        if need > self.allocated {
            let to = need.div_ceil(GROW) * GROW;
            self.file
                .write_zeros(self.allocated, to - self.allocated)
                .map_err(|e| format!("{}: growing to {to} bytes: {e}", self.path.display()))?;
            self.allocated = to;
            self.grown = true;
        }
        self.file
            .write_all_at(&buf, self.len)
            .map_err(|e| format!("{}: writing at {}: {e}", self.path.display(), self.len))?;
        self.len += buf.len() as u64;
        Ok(at)
    }

    /// The records written since the last call, for the caller to make durable without
    /// holding the `EntriesFile` (a sync or write-back on a handle a rewrite replaced is
    /// harmless: the rewrite was durable): either a write-back that the caller's device flush
    /// then covers, or, after the file grew, a sync (docs/design.md, "One device flush a
    /// round"). From then on they count as durable; a failure to make them so is the caller's
    /// to report, and stops the store.
    pub fn stage(&mut self) -> Staged {
        let staged = Staged {
            file: Arc::clone(&self.file),
            from: self.staged,
            len: self.len.saturating_sub(self.staged),
            sync: self.grown,
        };
        self.staged = self.len;
        if staged.len > 0 {
            self.grown = false;
        }
        staged
    }

    /// Makes what was written durable.
    pub fn sync(&self) -> Result<(), String> {
        self.file
            .sync_data()
            .map_err(|e| format!("{}: fsync: {e}", self.path.display()))
    }

    /// Cuts the records at `pos` (the start of a record), durably: zeros over those after it,
    /// the file's size kept (a torn tail read on open is cut off the file instead).
    pub fn cut(&mut self, pos: u64) -> Result<(), String> {
        if pos < self.len {
            let zeros = vec![0; (self.len - pos) as usize];
            self.file
                .write_all_at(&zeros, pos)
                .map_err(|e| format!("{}: cutting at {pos}: {e}", self.path.display()))?;
        }
        self.len = pos;
        self.sync()?;
        self.staged = pos;
        self.grown = false;
        Ok(())
    }

    /// Replaces the file with `records` alone, atomically (a crash leaves the old file or the
    /// new one); answers where each starts.
    pub fn rewrite(&mut self, records: &[Record]) -> Result<Vec<u64>, String> {
        let mut buf = Vec::new();
        let mut at = Vec::with_capacity(records.len());
        for r in records {
            at.push(buf.len() as u64);
            buf.extend(r.encode()?);
        }
        self.fs
            .write_atomically(&self.path, &buf)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.file = Arc::from(
            self.fs
                .open(&self.path, OpenMode::ReadWrite)
                .map_err(|e| format!("{}: {e}", self.path.display()))?,
        );
        self.len = buf.len() as u64;
        self.torn = false;
        self.allocated = self.len;
        self.staged = self.len;
        self.grown = false;
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn run(index: u64, start: i64, end: i64) -> Record {
        Record::single(index, 3, start, end, Kind::Run)
    }

    #[test]
    fn records_read_back_as_written() {
        let m = Membership::<NodeId, Node>::new(vec![BTreeSet::from([1, 2, 3])], None);
        for r in [
            run(7, 10, 15),
            run(8, 15, 15),
            Record::single(9, 4, 15, 15, Kind::Blank),
            Record::single(10, 4, 15, 15, Kind::Membership(m.clone())),
            Record {
                index: 11,
                term: 4,
                spans: vec![(15, 20), (0, 0), (7, 9)],
                kind: Kind::Run,
            },
            Record {
                index: 12,
                term: 4,
                spans: vec![(20, 20), (0, 0)],
                kind: Kind::Membership(m.clone()),
            },
        ] {
            let bytes = r.encode().unwrap();
            assert_eq!(Record::decode(&bytes).unwrap(), Some((r, bytes.len())));
        }
    }

    #[test]
    fn a_cut_or_damaged_record_ends_the_file() {
        let bytes = run(7, 10, 15).encode().unwrap();
        for n in 0..bytes.len() {
            assert_eq!(Record::decode(&bytes[..n]).unwrap(), None, "cut at {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert_eq!(Record::decode(&b).unwrap(), None, "bit flipped in byte {i}");
        }
        // Zeros (a preallocated or sparse tail) are no record.
        assert_eq!(Record::decode(&[0; 64]).unwrap(), None);
    }

    /// A record whose checksum holds but whose body is not one is damage, not a tail.
    #[test]
    fn a_checksummed_body_that_is_no_record_is_an_error() {
        let reframe = |mut body: Vec<u8>| {
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend(crc32c::crc32c(&body).to_be_bytes());
            out.append(&mut body);
            out
        };
        let good = run(7, 10, 15).encode().unwrap()[FRAME..].to_vec();
        let mut b = good.clone();
        b[0] = 9;
        assert!(Record::decode(&reframe(b))
            .unwrap_err()
            .contains("version 9"));
        let mut b = good.clone();
        b[1] = 7;
        assert!(Record::decode(&reframe(b))
            .unwrap_err()
            .contains("unknown kind"));
        let bad = run(7, 15, 10).encode().unwrap();
        assert!(Record::decode(&bad).unwrap_err().contains("offsets 15..10"));
        let blank = Record {
            kind: Kind::Blank,
            ..run(7, 10, 11)
        };
        let bad = blank.encode().unwrap();
        assert!(Record::decode(&bad).unwrap_err().contains("kind 0"));
        let mut b = good;
        b.push(1);
        assert!(Record::decode(&reframe(b))
            .unwrap_err()
            .contains("1 bytes after"));
    }

    /// Records after a torn one are cut before new ones are written: a stale record at the
    /// place where the new ones end is never read back after them.
    #[test]
    fn nothing_after_a_torn_record_outlives_the_records_written_after_it() {
        let fs = oncelog::io::SimFs::new();
        let dir = Path::new("/sim/p");
        fs.as_dyn().create_dir_all(dir).unwrap();
        let mut file = EntriesFile::create(fs.as_dyn(), dir).unwrap();
        let old: Vec<Record> = (0..4).map(|i| run(i, i as i64, i as i64 + 1)).collect();
        let at = file.append(&old).unwrap();
        file.sync().unwrap();
        // The second record torn: the third and fourth are whole but follow it.
        let path = EntriesFile::path_in(dir);
        let mut bytes = fs.read_live(&path).unwrap();
        bytes[at[1] as usize + 12] ^= 1;
        fs.as_dyn().write_atomically(&path, &bytes).unwrap();
        let (mut file, read) = EntriesFile::open(fs.as_dyn(), dir).unwrap();
        assert_eq!(read, vec![(0, old[0].clone())]);
        file.keep(file.len()).unwrap();
        // Two new records of the same size end where the stale fourth one starts.
        let new = [run(1, 1, 3), run(2, 3, 5)];
        file.append(&new).unwrap();
        file.sync().unwrap();
        let (_, read) = EntriesFile::open(fs.as_dyn(), dir).unwrap();
        let read: Vec<Record> = read.into_iter().map(|(_, r)| r).collect();
        assert_eq!(read, vec![old[0].clone(), new[0].clone(), new[1].clone()]);
    }

    /// The file grows ahead of its records in zeros, which read as their end; a truncation
    /// zeros the records cut and keeps the size.
    #[test]
    fn zeros_ahead_and_cut_records_read_as_the_end() {
        let fs = oncelog::io::SimFs::new();
        let dir = Path::new("/sim/p");
        fs.as_dyn().create_dir_all(dir).unwrap();
        let mut file = EntriesFile::create(fs.as_dyn(), dir).unwrap();
        let records: Vec<Record> = (0..3).map(|i| run(i, i as i64, i as i64 + 1)).collect();
        let at = file.append(&records).unwrap();
        file.sync().unwrap();
        let path = EntriesFile::path_in(dir);
        assert_eq!(fs.read_live(&path).unwrap().len() as u64, GROW);
        file.cut(at[1]).unwrap();
        assert_eq!(fs.read_live(&path).unwrap().len() as u64, GROW);
        let (file, read) = EntriesFile::open(fs.as_dyn(), dir).unwrap();
        assert_eq!(read, vec![(0, records[0].clone())]);
        assert_eq!(file.len(), at[1]);
        assert!(!file.torn);
    }

    #[test]
    fn a_term_beyond_an_epoch_is_refused() {
        assert!(epoch_of(u64::from(u32::MAX)).is_err());
        assert_eq!(epoch_of(7), Ok(7));
    }
}
