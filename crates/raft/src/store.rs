//! openraft's log storage and state machine over one oncelog partition (docs/design.md,
//! "Replication on openraft"). The partition log is the raft log's data: an entry of client
//! batches is those batches, at the offsets the leader's log gave them, and openraft's own
//! entries (blank, membership) take no offset, so a partition's offsets are a Kafka
//! partition's. What raft needs beside the batches lives in two files in the partition
//! directory: `raft-entries` ([`entry::EntriesFile`]), a record per entry (its index, term,
//! the offsets its batches span, a membership), and `raft-state.json`, the vote and the purge
//! point (its log id, the offset after it, the membership at it).
//!
//! The records of the live entries are kept in memory, read from `raft-entries` on open and
//! checked against the batch headers after the purge point; openraft purges after each
//! snapshot, so they are a bounded number (`Config::snapshot_policy` plus
//! `max_in_snapshot_log_to_keep`). Purging is raft's: it forgets entries, the batches stay for
//! consumers until retention, which never deletes past the purge point, removes them.
//!
//! Recovery trusts neither file alone: a record is written after its batches and synced after
//! them, so a record whose batches are not all in the log was never reported persisted and is
//! dropped with those after it, and batches no record covers were never reported persisted
//! either and are cut; a truncation cuts the records, durably, before the batches.
//!
//! The state machine is the partition itself: applying entries moves the high watermark to the
//! end of the last one. A snapshot is an image of the partition as of an applied entry: the
//! retained batches up to it and the producer state at their first offset. Building one
//! records only its metadata; the image is read from the log when a follower needs it.

// openraft's `StorageError` is the error type its storage traits return; the helpers here
// return it too rather than box it and unbox it at every trait method.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use oncelog::format::{BatchIter, RecordBatch};
use oncelog::io::FileSystem;
use oncelog::{AppendError, Log};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StoredMembership, Vote,
};
use parking_lot::Mutex;

use crate::entry::{self, EntriesFile, Entry, Kind, Record, ENTRIES_FILE};
use crate::state_file;
pub use crate::state_file::{Purged, StateFile, StateFileError, STATE_FILE};
use crate::{Ack, Answer, Node, NodeId, Request, Response, TypeConfig};

/// A snapshot image received and not yet installed: an install cut by a crash is completed
/// from it on open.
pub const INSTALL_FILE: &str = "raft-install.image";
/// Bytes read from the log per call when entries are read back.
const READ_CHUNK: usize = 1 << 20;
/// How long a purge beyond the last entry waits for the snapshot install that covers it
/// before it fails (it only fails if the state machine's worker has stopped).
const INSTALL_WAIT: std::time::Duration = std::time::Duration::from_secs(300);
/// `raft-entries` is rewritten without the records of forgotten entries once they take more
/// than this many bytes and more than the live ones.
const REWRITE_AFTER: u64 = 64 << 10;

type StoreResult<T> = Result<T, StorageError<NodeId>>;
type Membership = openraft::Membership<NodeId, Node>;
type Stored = StoredMembership<NodeId, Node>;

/// One partition as raft sees it, or a partition set (docs/design.md, "Partition sets":
/// several partitions replicated by one group, an entry spanning batches of any of them),
/// shared by the log store and the state machine.
pub struct Partition {
    /// The partitions' logs, in the set's order (one for a partition of its own). The first
    /// one's directory holds raft's files (`raft-entries`, `raft-state.json`, a snapshot being
    /// installed).
    logs: Vec<Arc<Log>>,
    /// Whether every log is in the same log dir as the first (so on its file system): then one
    /// data sync's device flush covers what each wrote back.
    one_dir: bool,
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// Counts finished snapshot installs (whether they worked or not), for a purge that waits
    /// for one.
    installs: tokio::sync::watch::Sender<u64>,
    /// Who waits for the leader's own answers to its entries of client batches.
    written: Written,
}

/// Who waits for the leader's own answers to an entry of client batches, by the entry's
/// notice ([`Request::Produce`]): one sender per batch, told once the entry is durable in the
/// leader's log. Shared by the partition (which tells) and the proposer (which registers and
/// forgets), without the proposer holding the partition.
#[derive(Clone, Default)]
pub struct Written(Arc<Mutex<HashMap<u64, Vec<tokio::sync::oneshot::Sender<Answer>>>>>);

impl Written {
    /// Registers `each` (one per batch, in the entry's order) to be told the leader's own
    /// answer to each batch of the entry proposed with `notice`, once it is durable in this
    /// log: before any follower has it, so before raft commits it. An answer so given is the
    /// one the commit gives unless the entry is lost with this leader (Kafka's acks=1).
    pub fn expect(&self, notice: u64, each: Vec<tokio::sync::oneshot::Sender<Answer>>) {
        self.0.lock().insert(notice, each);
    }

    /// Forgets the waiters of `notice` (raft answered the entry, or never took it): waiting
    /// for the leader's own answer from then on ends without one.
    pub fn forget(&self, notice: u64) {
        self.0.lock().remove(&notice);
    }

    /// Tells the waiters of each entry written (its notice and the leader's answers).
    fn tell(&self, written: Vec<Told>) {
        if written.is_empty() {
            return;
        }
        let mut waiting = self.0.lock();
        for (notice, answers) in written {
            if let Some(each) = waiting.remove(&notice) {
                for (to, answer) in each.into_iter().zip(answers) {
                    let _ = to.send(answer);
                }
            }
        }
    }
}

/// An entry's notice and the leader's own answers to its batches ([`Written`]).
type Told = (u64, Vec<Answer>);

/// What [`Partition::purge_upto`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purge {
    /// Raft has forgotten the entries (or had already).
    Done,
    /// The purge point is past the last entry: it is the last entry of a snapshot being
    /// installed, and only its image says where that entry's batch ends.
    AwaitInstall,
}

/// What kind of entry a live one is (a membership's value is in [`Inner::memberships`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    Blank,
    Membership,
    Run,
}

/// A live entry: its record, without a membership's value, and where the record is in
/// `raft-entries`.
#[derive(Debug, Clone)]
struct Slot {
    term: u64,
    /// The offsets its batches span in each partition ([`Record::spans`]).
    spans: Box<[(i64, i64)]>,
    kind: SlotKind,
    /// Where its record starts in the file.
    pos: u64,
}

impl Slot {
    fn of(record: &Record, pos: u64) -> Slot {
        Slot {
            term: record.term,
            spans: record.spans.clone().into_boxed_slice(),
            kind: match record.kind {
                Kind::Blank => SlotKind::Blank,
                Kind::Membership(_) => SlotKind::Membership,
                Kind::Run => SlotKind::Run,
            },
            pos,
        }
    }
}

struct Inner {
    /// The lowest index an entry may have: the one after the purge point.
    first: u64,
    /// Every live entry, by index.
    view: BTreeMap<u64, Slot>,
    /// The offset after the last entry (the log end), in each partition.
    ends: Vec<i64>,
    state: StateFile,
    /// `raft-entries`; open once the partition is.
    file: Option<EntriesFile>,
    /// Membership entries among the live ones.
    memberships: Vec<(LogId<NodeId>, Membership)>,
    applied: Option<LogId<NodeId>>,
    applied_membership: Stored,
    /// The leader's answers to client batches, by index, until they are applied.
    outcomes: HashMap<u64, Response>,
    /// The last snapshot built or installed.
    snapshot: Option<SnapshotMeta<NodeId, Node>>,
    snapshots_built: u64,
    images_installed: u64,
    /// openraft began receiving a snapshot that is not installed yet.
    receiving: bool,
    /// Counts the rewrites of entries (truncations, installs of an image): a replication
    /// stream reads only from the log it was started on.
    rewrites: u64,
}

impl Inner {
    fn next_index(&self) -> u64 {
        self.view
            .last_key_value()
            .map_or(self.first, |(&i, _)| i + 1)
    }

    fn last_log_id(&self) -> Option<LogId<NodeId>> {
        match self.view.last_key_value() {
            Some((&index, slot)) => Some(entry::log_id(slot.term, index)),
            None => self.state.purged.as_ref().map(|p| p.log_id),
        }
    }

    /// The offset after entry `index`'s batches in partition `m`.
    fn end_of(&self, index: u64, m: usize) -> i64 {
        if index < self.first {
            return self.purge_end(m);
        }
        if let Some(slot) = self.view.get(&index) {
            return slot.spans[m].1;
        }
        match self.view.range(index + 1..).next() {
            Some((_, slot)) => slot.spans[m].0,
            None => self.ends[m],
        }
    }

    /// [`Inner::end_of`] in every partition.
    fn ends_of(&self, index: u64) -> Vec<i64> {
        (0..self.ends.len())
            .map(|m| self.end_of(index, m))
            .collect()
    }

    /// The offset below which raft has forgotten the entries, in partition `m`.
    fn purge_end(&self, m: usize) -> i64 {
        match self.state.purged.as_ref().and_then(|p| p.end_in(m)) {
            Some(end) => end,
            None => self
                .view
                .first_key_value()
                .map_or(self.ends[m], |(_, slot)| slot.spans[m].0),
        }
    }

    /// The last membership at or below `index`.
    fn membership_at(&self, index: u64) -> Stored {
        match self
            .memberships
            .iter()
            .rev()
            .find(|(id, _)| id.index <= index)
        {
            Some((id, m)) => StoredMembership::new(Some(*id), m.clone()),
            None => self
                .state
                .purged
                .as_ref()
                .map(|p| p.membership.clone())
                .unwrap_or_default(),
        }
    }

    /// What a live entry is, with a membership's value.
    fn kind_of(&self, index: u64, slot: &Slot) -> Kind {
        match slot.kind {
            SlotKind::Blank => Kind::Blank,
            SlotKind::Run => Kind::Run,
            SlotKind::Membership => Kind::Membership(
                self.memberships
                    .iter()
                    .find(|(id, _)| id.index == index)
                    .map(|(_, m)| m.clone())
                    .unwrap_or_default(),
            ),
        }
    }

    fn file(&mut self) -> StoreResult<&mut EntriesFile> {
        self.file
            .as_mut()
            .ok_or_else(|| logs_error(ErrorVerb::Write, format!("{ENTRIES_FILE} is not open")))
    }
}

/// An entry [`Partition::read_wanted`] reads: its index, term and kind, and the offsets it
/// spans in each partition.
#[derive(Debug, Clone)]
struct Wanted {
    index: u64,
    term: u64,
    kind: Kind,
    spans: Box<[(i64, i64)]>,
}

/// The bytes of one entry as they are read, batch by batch: ranges of the chunks read from the
/// log (a chunk's batches of one entry are one range), joined only when an entry spans reads.
#[derive(Default)]
struct EntryBytes {
    /// Each range: the number of the read, its chunk, and the range in it.
    parts: Vec<(u64, Bytes, usize, usize)>,
}

impl EntryBytes {
    /// Adds `chunk[lo..hi]` of read number `read`, which follows what is there.
    fn push(&mut self, read: u64, chunk: &Bytes, lo: usize, hi: usize) {
        match self.parts.last_mut() {
            Some((r, _, _, end)) if *r == read && *end == lo => *end = hi,
            _ => self.parts.push((read, chunk.clone(), lo, hi)),
        }
    }

    /// The entry's bytes, and empty for the next.
    fn take(&mut self) -> Bytes {
        let parts = std::mem::take(&mut self.parts);
        if let [(_, chunk, lo, hi)] = &parts[..] {
            return chunk.slice(*lo..*hi);
        }
        let mut joined = Vec::with_capacity(parts.iter().map(|(_, _, lo, hi)| hi - lo).sum());
        for (_, chunk, lo, hi) in &parts {
            joined.extend_from_slice(&chunk[*lo..*hi]);
        }
        Bytes::from(joined)
    }
}

/// A batch a [`Batches`] found: where it is in the chunk, its offsets and its leader epoch.
#[derive(Debug, Clone, Copy)]
struct BatchAt {
    read: u64,
    lo: usize,
    hi: usize,
    base: i64,
    last: i64,
    epoch: i32,
}

/// The log's batches in offset order, read a chunk at a time.
struct Batches<'a> {
    log: &'a Log,
    chunk: Bytes,
    /// Where the next batch starts in the chunk.
    at: usize,
    /// The number of the chunk's read.
    reads: u64,
}

impl<'a> Batches<'a> {
    fn new(log: &'a Log) -> Batches<'a> {
        Batches {
            log,
            chunk: Bytes::new(),
            at: 0,
            reads: 0,
        }
    }

    /// The first batch that ends at or after `offset`, or `None` past the log end. The
    /// caller moves past it with [`Batches::consume`].
    fn next(&mut self, offset: i64) -> Result<Option<BatchAt>, String> {
        loop {
            if self.at < self.chunk.len() {
                let batch = RecordBatch::parse(&self.chunk[self.at..])
                    .map_err(|e| format!("reading offset {offset}: {e}"))?;
                let (lo, hi) = (self.at, self.at + batch.size());
                if batch.last_offset() < offset {
                    self.at = hi;
                    continue;
                }
                return Ok(Some(BatchAt {
                    read: self.reads,
                    lo,
                    hi,
                    base: batch.base_offset(),
                    last: batch.last_offset(),
                    epoch: batch.partition_leader_epoch(),
                }));
            }
            self.chunk = self
                .log
                .read(offset, READ_CHUNK)
                .map_err(|e| format!("reading offset {offset}: {e}"))?;
            self.at = 0;
            self.reads += 1;
            if self.chunk.is_empty() {
                return Ok(None);
            }
        }
    }

    fn consume(&mut self, batch: &BatchAt) {
        self.at = batch.hi;
    }
}

fn io_error(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: impl std::fmt::Display,
) -> StorageError<NodeId> {
    StorageError::from_io_error(subject, verb, std::io::Error::other(e.to_string()))
}

fn logs_error(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError<NodeId> {
    io_error(ErrorSubject::Logs, verb, e)
}

impl Partition {
    /// Opens raft's view of `log`: reads `raft-state.json`, completes an install a crash cut,
    /// and reads the records of the entries after the purge point.
    pub fn open(log: Log, fs: Arc<dyn FileSystem>) -> Result<Partition, String> {
        Partition::open_shared(Arc::new(log), fs)
    }

    /// [`Partition::open`] on a log others hold too (a `LogManager`'s partition).
    pub fn open_shared(log: Arc<Log>, fs: Arc<dyn FileSystem>) -> Result<Partition, String> {
        Partition::open_set(vec![log], fs)
    }

    /// Opens raft's view of a partition set (docs/design.md, "Partition sets"): the logs of
    /// its partitions, in the set's order, which the set's every replica gives them; raft's
    /// files are in the first one's directory. A set of one is [`Partition::open_shared`].
    pub fn open_set(logs: Vec<Arc<Log>>, fs: Arc<dyn FileSystem>) -> Result<Partition, String> {
        let Some(first) = logs.first() else {
            return Err("a partition set of no partition".into());
        };
        if logs.len() > entry::MAX_SPANS {
            return Err(format!(
                "{}: a partition set of {} partitions, more than {}",
                first.dir().display(),
                logs.len(),
                entry::MAX_SPANS
            ));
        }
        let dir = first.dir().to_path_buf();
        let state = state_file::read(fs.as_ref(), &dir).map_err(|e| e.to_string())?;
        let members = logs.len();
        let one_dir = logs
            .iter()
            .all(|l| l.dir().parent() == first.dir().parent());
        let partition = Partition {
            one_dir,
            logs,
            fs,
            dir,
            installs: tokio::sync::watch::Sender::new(0),
            written: Written::default(),
            inner: Mutex::new(Inner {
                first: 0,
                view: BTreeMap::new(),
                ends: vec![0; members],
                state,
                file: None,
                memberships: Vec::new(),
                applied: None,
                applied_membership: Stored::default(),
                outcomes: HashMap::new(),
                snapshot: None,
                snapshots_built: 0,
                images_installed: 0,
                receiving: false,
                rewrites: 0,
            }),
        };
        let pending = partition.inner.lock().state.installing.clone();
        if let Some(meta) = pending {
            let path = partition.dir.join(INSTALL_FILE);
            let image = partition
                .fs
                .read_whole(&path)
                .map_err(|e| format!("{}: the snapshot being installed: {e}", path.display()))?;
            partition.install(&meta, &image).map_err(|e| {
                format!(
                    "completing the install of snapshot {}: {e}",
                    meta.snapshot_id
                )
            })?;
        }
        partition.load()?;
        {
            let inner = partition.inner.lock();
            tracing::debug!(
                dir = %partition.dir.display(),
                first = inner.first,
                last = ?inner.last_log_id(),
                ends = ?inner.ends,
                purged = ?inner.state.purged.as_ref().map(|p| p.log_id),
                applied = ?inner.applied,
                "raft partition opened"
            );
        }
        Ok(partition)
    }

    /// Who waits for the leader's own answers to its entries of client batches.
    pub fn written(&self) -> Written {
        self.written.clone()
    }

    /// The partition log (a set's first partition's).
    pub fn log(&self) -> &Log {
        &self.logs[0]
    }

    /// The logs of the set's partitions, in its order (one for a partition of its own).
    pub fn logs(&self) -> &[Arc<Log>] {
        &self.logs
    }

    /// The offset below which raft has forgotten the entries: retention may delete below it
    /// (a set's first partition's).
    pub fn purge_end(&self) -> i64 {
        self.purge_end_in(0)
    }

    /// [`Partition::purge_end`] of partition `member` of a set.
    ///
    /// # Panics
    /// If the set has no partition `member`.
    pub fn purge_end_in(&self, member: usize) -> i64 {
        self.inner.lock().purge_end(member)
    }

    /// Snapshot images this process installed (a follower caught up from an image rather than
    /// from entries).
    pub fn images_installed(&self) -> u64 {
        self.inner.lock().images_installed
    }

    /// The last applied entry.
    pub fn applied(&self) -> Option<LogId<NodeId>> {
        self.inner.lock().applied
    }

    /// The durable vote and the last log id (purged entries included): what a rejoining
    /// member asks of the others (docs/design.md, "A wiped node rejoins under its id").
    pub fn durable_state(&self) -> (Option<Vote<NodeId>>, Option<LogId<NodeId>>) {
        let inner = self.inner.lock();
        let last = inner
            .last_log_id()
            .or_else(|| inner.state.purged.as_ref().map(|p| p.log_id));
        (inner.state.vote, last)
    }

    /// Saves `vote` before raft starts on this partition, unless the saved one is at least as
    /// high a term: a rejoining member's vote above every term it may have voted in before
    /// its data was lost.
    pub fn raise_vote(&self, vote: Vote<NodeId>) -> Result<(), String> {
        let mut inner = self.inner.lock();
        if inner
            .state
            .vote
            .is_some_and(|v| v.leader_id().term >= vote.leader_id().term)
        {
            return Ok(());
        }
        let mut state = inner.state.clone();
        state.vote = Some(vote);
        self.write_state(&state).map_err(|e| e.to_string())?;
        inner.state = state;
        Ok(())
    }

    /// Reads `raft-entries` (creating it for a new partition) and checks its records against
    /// the logs: the records after the purge point must follow one another, offset after
    /// offset, from the purge point's end, in each partition; a record whose batches are not
    /// all in the logs (in a set, in every partition it names) is dropped with those after
    /// it, and each log is cut where the last record kept ends in it. Each batch there must
    /// lie within an entry of client batches of its leader epoch.
    fn load(&self) -> Result<(), String> {
        let mut inner = self.inner.lock();
        let dir = self.dir.display();
        let members = self.logs.len();
        let of = |m: usize| self.member_name(m);
        let first = inner
            .state
            .purged
            .as_ref()
            .map_or(0, |p| p.log_id.index + 1);
        let mut anchors = Vec::with_capacity(members);
        for (m, log) in self.logs.iter().enumerate() {
            let start = log.log_start_offset();
            let anchor = match &inner.state.purged {
                Some(p) => {
                    if p.more_end_offsets.len() + 1 != members {
                        return Err(format!(
                            "{dir}: the raft purge point names the ends of {} partitions, the \
                             group has {members}: {STATE_FILE} is not this group's",
                            p.more_end_offsets.len() + 1
                        ));
                    }
                    p.end_in(m).unwrap_or(start)
                }
                None => start,
            };
            if start > anchor {
                return Err(format!(
                    "{}: the log starts at offset {start}, above the raft purge point's end \
                     {anchor}: entries raft still holds are gone",
                    of(m)
                ));
            }
            let end = log.log_end_offset();
            if anchor > end {
                return Err(format!(
                    "{}: the raft purge point ends at offset {anchor}, above the log end {end}",
                    of(m)
                ));
            }
            anchors.push(anchor);
        }
        let ends: Vec<i64> = self.logs.iter().map(|l| l.log_end_offset()).collect();
        inner.file = None;
        let path = EntriesFile::path_in(&self.dir);
        let exists = self
            .fs
            .exists(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let (file, read) = if exists {
            EntriesFile::open(Arc::clone(&self.fs), &self.dir)?
        } else if let Some(m) = (0..members).find(|&m| ends[m] > anchors[m]) {
            return Err(format!(
                "{}: {ENTRIES_FILE} is missing from {dir}, and the log holds batches after the \
                 raft purge point (offsets {}..{}): the file was removed, or the partition \
                 was written by an oncelog-raft that kept raft's entries in the log; remove \
                 the partition's directory and the replica is caught up from the others",
                of(m),
                anchors[m],
                ends[m]
            ));
        } else {
            (
                EntriesFile::create(Arc::clone(&self.fs), &self.dir)?,
                Vec::new(),
            )
        };
        let mut file = file;
        let mut view = BTreeMap::new();
        let mut memberships = Vec::new();
        // Where the last record kept ends, in each partition: the logs are cut there.
        let mut recorded = anchors.clone();
        let mut before: Option<&Record> = None;
        let mut drop_from = None;
        for (pos, record) in &read {
            if let Some(b) = before {
                if record.index <= b.index || record.term < b.term {
                    return Err(format!(
                        "{}: entry {} of term {} after entry {} of term {}: the records are \
                         damaged",
                        path.display(),
                        record.index,
                        record.term,
                        b.index,
                        b.term
                    ));
                }
            }
            before = Some(record);
            if record.index < first {
                // Forgotten by raft; the record stays until the file is rewritten.
                continue;
            }
            if record.spans.len() != members {
                return Err(format!(
                    "{}: entry {} spans {} partitions, the group has {members}: the records \
                     are not this group's",
                    path.display(),
                    record.index,
                    record.spans.len()
                ));
            }
            if record.spans.iter().zip(&ends).any(|(s, &end)| s.1 > end) {
                // Its batches are not all in the logs: it was never reported persisted.
                drop_from = Some(*pos);
                break;
            }
            for (m, &(start, end)) in record.spans.iter().enumerate() {
                if start != recorded[m] {
                    return Err(format!(
                        "{}: entry {} starts at offset {start} of {}, where the entry before \
                         it ends at {}: the records are damaged",
                        path.display(),
                        record.index,
                        of(m),
                        recorded[m]
                    ));
                }
                recorded[m] = end;
            }
            if let Kind::Membership(m) = &record.kind {
                memberships.push((entry::log_id(record.term, record.index), m.clone()));
            }
            view.insert(record.index, Slot::of(record, *pos));
        }
        for (m, log) in self.logs.iter().enumerate() {
            // Batches no record covers were never reported persisted; but what the high
            // watermark covers was committed, and is never cut.
            let hw = log.high_watermark();
            if hw > recorded[m] {
                return Err(format!(
                    "{}: the high watermark {hw} is past the end of the last entry \
                     {ENTRIES_FILE} records ({}): records of committed entries are missing",
                    of(m),
                    recorded[m]
                ));
            }
            self.check_batches(&view, m, anchors[m], recorded[m])?;
        }
        // Accepted: what recovery drops goes now.
        if let Some(pos) = drop_from {
            tracing::info!(dir = %dir, pos, ?ends, "raft-entries: dropping records past the log end");
        }
        file.keep(drop_from.unwrap_or(file.len()))?;
        for (m, log) in self.logs.iter().enumerate() {
            if recorded[m] < ends[m] {
                tracing::info!(
                    dir = %log.dir().display(),
                    recorded = recorded[m],
                    end = ends[m],
                    "raft: cutting batches no entry records"
                );
                log.replica()
                    .truncate_to(recorded[m])
                    .map_err(|e| format!("{}: cutting the log at {}: {e}", of(m), recorded[m]))?;
            }
        }
        inner.first = first;
        inner.view = view;
        inner.memberships = memberships;
        inner.file = Some(file);
        inner.ends = recorded;
        for (m, log) in self.logs.iter().enumerate() {
            // What raft purged was committed: the high watermark (written lazily, with
            // flushes) is never left below it, or a crash would hide committed batches that
            // raft, having forgotten their entries, would never apply again.
            if log.high_watermark() < anchors[m] {
                log.replica().set_high_watermark(anchors[m]).map_err(|e| {
                    format!(
                        "{}: raising the high watermark to {}: {e}",
                        of(m),
                        anchors[m]
                    )
                })?;
            }
        }
        // Applied: what the high watermarks cover, and never below the purge point.
        let hws: Vec<i64> = self.logs.iter().map(|l| l.high_watermark()).collect();
        let covered = inner
            .view
            .iter()
            .rev()
            .find(|(_, slot)| slot.spans.iter().zip(&hws).all(|(s, &hw)| s.1 <= hw))
            .map(|(&index, slot)| entry::log_id(slot.term, index));
        inner.applied = covered.or_else(|| inner.state.purged.as_ref().map(|p| p.log_id));
        inner.applied_membership = match inner.applied {
            Some(id) => inner.membership_at(id.index),
            None => Stored::default(),
        };
        Ok(())
    }

    /// How errors name partition `m` of the group: its directory.
    fn member_name(&self, m: usize) -> String {
        self.logs[m].dir().display().to_string()
    }

    /// Checks that the batches of partition `m` in `[from, to)` are dense and each lies
    /// within an entry of client batches of its leader epoch.
    fn check_batches(
        &self,
        view: &BTreeMap<u64, Slot>,
        m: usize,
        from: i64,
        to: i64,
    ) -> Result<(), String> {
        let dir = self.member_name(m);
        let mut runs = view
            .iter()
            .map(|(&i, s)| (i, s.term, s.spans[m]))
            .filter(|(_, _, (start, end))| start < end)
            .peekable();
        let mut batches = Batches::new(&self.logs[m]);
        let mut offset = from;
        while offset < to {
            let Some(batch) = batches.next(offset).map_err(|e| format!("{dir}: {e}"))? else {
                return Err(format!(
                    "{dir}: no batch at offset {offset} below the log end {to}"
                ));
            };
            batches.consume(&batch);
            if batch.base != offset {
                return Err(format!(
                    "{dir}: the batch after offset {offset} starts at {}: raft entries must be \
                     dense",
                    batch.base
                ));
            }
            while runs.peek().is_some_and(|(_, _, (_, end))| *end <= offset) {
                runs.next();
            }
            let within = runs
                .peek()
                .filter(|(_, _, (start, end))| *start <= batch.base && batch.last < *end);
            match within {
                Some((_, term, _)) if i64::from(batch.epoch) == *term as i64 => {}
                Some((index, term, _)) => {
                    return Err(format!(
                        "{dir}: the batch at offset {offset} has leader epoch {}, its entry \
                         {index} term {term}",
                        batch.epoch
                    ))
                }
                None => {
                    return Err(format!(
                        "{dir}: the batch at offsets {}..={} lies in no entry {ENTRIES_FILE} \
                         records",
                        batch.base, batch.last
                    ))
                }
            }
            offset = batch.last + 1;
        }
        Ok(())
    }

    fn write_state(&self, state: &StateFile) -> StoreResult<()> {
        let bytes = state_file::encode(state)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, e))?;
        self.fs
            .write_atomically(&self.dir.join(STATE_FILE), &bytes)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    /// Entries `[lo, hi)` of the live ones, read back from the log.
    fn entries(&self, lo: u64, hi: u64) -> StoreResult<Vec<Entry>> {
        self.read_entries(lo, hi, None)
    }

    /// Entries `[lo, hi)` read back from the log. For a replication stream (`stream`: the
    /// rewrites its log had when it started), only the run of consecutive entries that starts
    /// at `lo` (none if `lo` is gone), and none once entries were rewritten: what a stream
    /// sends follows the entry before `lo` in the log it started on.
    fn read_entries(&self, lo: u64, hi: u64, stream: Option<u64>) -> StoreResult<Vec<Entry>> {
        let rewritten = |inner: &Inner| stream.is_some_and(|r| r != inner.rewrites);
        let wanted: Vec<Wanted> = {
            let inner = self.inner.lock();
            if lo >= hi || rewritten(&inner) {
                return Ok(Vec::new());
            }
            let range = inner.view.range(lo..hi).map(|(&index, slot)| Wanted {
                index,
                term: slot.term,
                kind: inner.kind_of(index, slot),
                spans: slot.spans.clone(),
            });
            if stream.is_some() {
                range
                    .zip(lo..)
                    .take_while(|(w, want)| w.index == *want)
                    .map(|(w, _)| w)
                    .collect()
            } else {
                range.collect()
            }
        };
        let out = self.read_wanted(wanted)?;
        if rewritten(&self.inner.lock()) {
            // Rewritten during the read: what was read may not follow the entry before `lo`.
            return Ok(Vec::new());
        }
        Ok(out)
    }

    /// The entries wanted, read back from the logs (an entry of client batches with the
    /// batches it spans in each partition); fewer if a log moved under the read.
    fn read_wanted(&self, wanted: Vec<Wanted>) -> StoreResult<Vec<Entry>> {
        let mut out = Vec::with_capacity(wanted.len());
        let mut batches: Vec<Batches> = self.logs.iter().map(|l| Batches::new(l)).collect();
        let mut parts: Vec<EntryBytes> = self.logs.iter().map(|_| EntryBytes::default()).collect();
        for w in wanted {
            for (m, &(start, end)) in w.spans.iter().enumerate() {
                let (batches, parts) = (&mut batches[m], &mut parts[m]);
                let mut offset = start;
                while offset < end {
                    let Some(batch) = batches
                        .next(offset)
                        .map_err(|e| logs_error(ErrorVerb::Read, e))?
                    else {
                        return Ok(out);
                    };
                    let moved = batch.base != offset
                        || batch.last >= end
                        || i64::from(batch.epoch) != w.term as i64;
                    if moved {
                        // The log moved under the read (a truncation): what was read stands.
                        return Ok(out);
                    }
                    batches.consume(&batch);
                    parts.push(batch.read, &batches.chunk, batch.lo, batch.hi);
                    offset = batch.last + 1;
                }
            }
            let payload = match w.kind {
                Kind::Blank => EntryPayload::Blank,
                Kind::Membership(m) => EntryPayload::Membership(m),
                Kind::Run => EntryPayload::Normal(Request::Stored(
                    parts.iter_mut().map(|p| p.take()).collect(),
                )),
            };
            out.push(Entry {
                log_id: entry::log_id(w.term, w.index),
                payload,
            });
        }
        Ok(out)
    }

    /// Writes entries at the logs' ends, and their records after the last in `raft-entries`
    /// (made durable by the caller, [`Partition::persist`]); answers the leader's own answers
    /// to its entries of client batches, by notice, and whether it wrote records.
    fn append_entries(&self, entries: Vec<Entry>) -> StoreResult<Appended> {
        let mut written = Vec::new();
        let mut touched = vec![false; self.logs.len()];
        let mut inner = self.inner.lock();
        tracing::debug!(
            dir = %self.dir.display(),
            entries = ?entries.iter().map(|e| e.log_id).collect::<Vec<_>>(),
            next = inner.next_index(),
            ends = ?inner.ends,
            "append"
        );
        let mut records = Vec::with_capacity(entries.len());
        let wrote = !entries.is_empty();
        for e in entries {
            let index = e.log_id.index;
            let term = e.log_id.leader_id.term;
            let subject = || ErrorSubject::Log(e.log_id);
            if index < inner.first {
                // Already covered by the purge point (the state machine holds it): openraft
                // never sends one, its storage suite does, and the entry is dropped.
                continue;
            }
            if index < inner.next_index() {
                // An entry written again replaces it and those after it (and the records not
                // yet written of this call's earlier entries: none, openraft's entries of one
                // call follow one another).
                self.write_records(&mut inner, &mut records)?;
                drop(inner);
                self.truncate_from(e.log_id)?;
                inner = self.inner.lock();
            }
            let starts: Vec<i64> = self.logs.iter().map(|l| l.log_end_offset()).collect();
            let epoch =
                entry::epoch_of(term).map_err(|m| io_error(subject(), ErrorVerb::Write, m))?;
            let member = |m: u32| {
                self.logs.get(m as usize).ok_or_else(|| {
                    io_error(
                        subject(),
                        ErrorVerb::Write,
                        format!(
                            "a batch for partition {m} of a group of {}",
                            self.logs.len()
                        ),
                    )
                })
            };
            let kind = match &e.payload {
                EntryPayload::Normal(Request::Produce { batches, notice }) => {
                    let mut answers = Vec::with_capacity(batches.len());
                    for (m, batch) in batches {
                        let log = member(*m)?;
                        self.lead_epoch(log, epoch)
                            .map_err(|err| io_error(subject(), ErrorVerb::Write, err))?;
                        touched[*m as usize] = true;
                        answers.push(match log.append(batch) {
                            Ok(outcome) => Answer::Acked(Ack::from(&outcome)),
                            Err(err) if is_refusal(&err) => Answer::Refused {
                                kind: err.kind().to_string(),
                                message: err.to_string(),
                            },
                            Err(err) => return Err(io_error(subject(), ErrorVerb::Write, err)),
                        });
                    }
                    written.push((*notice, answers.clone()));
                    inner.outcomes.insert(index, Response::Answers(answers));
                    Kind::Run
                }
                EntryPayload::Normal(Request::Marker(m, marker)) => {
                    let log = member(*m)?;
                    self.lead_epoch(log, epoch)
                        .map_err(|err| io_error(subject(), ErrorVerb::Write, err))?;
                    touched[*m as usize] = true;
                    let answer = match log.append_marker(&oncelog::TxnMarker::from(*marker)) {
                        Ok(info) => Answer::Acked(Ack::Appended {
                            first_offset: info.first_offset,
                            last_offset: info.last_offset,
                        }),
                        Err(err) if is_refusal(&err) => Answer::Refused {
                            kind: err.kind().to_string(),
                            message: err.to_string(),
                        },
                        Err(err) => return Err(io_error(subject(), ErrorVerb::Write, err)),
                    };
                    inner
                        .outcomes
                        .insert(index, Response::Answers(vec![answer]));
                    Kind::Run
                }
                EntryPayload::Normal(Request::Stored(parts)) => {
                    if parts.len() != self.logs.len() {
                        return Err(io_error(
                            subject(),
                            ErrorVerb::Write,
                            format!(
                                "a replicated entry of {} partitions' batches for a group of {}",
                                parts.len(),
                                self.logs.len()
                            ),
                        ));
                    }
                    // Every part is checked before any is written: a refused entry changes
                    // no log.
                    for (m, bytes) in parts.iter().enumerate() {
                        check_stored(bytes, starts[m], epoch, term)
                            .map_err(|err| io_error(subject(), ErrorVerb::Write, err))?;
                    }
                    for (m, bytes) in parts.iter().enumerate() {
                        if !bytes.is_empty() {
                            touched[m] = true;
                            self.logs[m]
                                .replica()
                                .append(bytes)
                                .map_err(|err| io_error(subject(), ErrorVerb::Write, err))?;
                        }
                    }
                    Kind::Run
                }
                EntryPayload::Blank => Kind::Blank,
                EntryPayload::Membership(m) => {
                    inner.memberships.push((e.log_id, m.clone()));
                    Kind::Membership(m.clone())
                }
            };
            let ends: Vec<i64> = self.logs.iter().map(|l| l.log_end_offset()).collect();
            let record = Record {
                index,
                term,
                spans: starts.into_iter().zip(ends.iter().copied()).collect(),
                kind,
            };
            // Where its record goes is set when it is written, below.
            inner.view.insert(index, Slot::of(&record, 0));
            inner.ends = ends;
            records.push(record);
        }
        self.write_records(&mut inner, &mut records)?;
        Ok(Appended {
            written,
            records: wrote,
            touched,
        })
    }

    /// Sets the leader epoch the leader's `log` stamps on client batches to `epoch`, if lower.
    fn lead_epoch(&self, log: &Log, epoch: i32) -> Result<(), String> {
        if log.replica().leader_epoch() < epoch {
            log.replica()
                .set_leader_epoch(epoch)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Writes `records` (of live entries) after the last in `raft-entries`, not durably, and
    /// notes where each is.
    fn write_records(&self, inner: &mut Inner, records: &mut Vec<Record>) -> StoreResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let at = inner
            .file()?
            .append(records)
            .map_err(|e| logs_error(ErrorVerb::Write, e))?;
        for (r, pos) in records.drain(..).zip(at) {
            if let Some(slot) = inner.view.get_mut(&r.index) {
                slot.pos = pos;
            }
        }
        Ok(())
    }

    /// Makes what [`Partition::append_entries`] wrote durable: the logs' batches and, if it
    /// wrote any (`records`), the records, with one device flush where the file system allows
    /// it (docs/design.md, "One device flush a round"): the records are written back first,
    /// and a log's sync that follows flushes the device's cache over both. Where that is not
    /// promised (the records' file grew, no batch was written, another file system), the
    /// records' file is synced after the logs. Recovery drops a record whose batches did not
    /// make it, and cuts batches whose record did not.
    ///
    /// A partition set (docs/design.md, "Partition sets") makes the logs the call wrote to
    /// (`touched`) durable with the records' own data sync instead: each log's bytes are
    /// written back and waited for ([`Log::write_back_for_flush`]), then the records'
    /// `fdatasync` flushes the device's cache over all of them. A log whose write-back
    /// promises nothing syncs itself there. Logs not all in one log dir (so perhaps on other
    /// file systems) are each synced in turn.
    fn persist(&self, records: bool, touched: &[bool]) -> StoreResult<()> {
        let staged = if records {
            let mut inner = self.inner.lock();
            let file = inner.file.as_mut().ok_or_else(|| {
                logs_error(ErrorVerb::Write, format!("{ENTRIES_FILE} is not open"))
            })?;
            Some(file.stage()).filter(|s| s.len > 0)
        } else {
            None
        };
        let records_error = |e: std::io::Error, what: &str| {
            logs_error(ErrorVerb::Write, format!("{ENTRIES_FILE}: {what}: {e}"))
        };
        let logs: Vec<&Arc<Log>> = if self.logs.len() == 1 {
            self.logs.iter().collect()
        } else {
            self.logs
                .iter()
                .zip(touched)
                .filter(|(_, &t)| t)
                .map(|(log, _)| log)
                .collect()
        };
        // Every file's writes go to the device before any is waited for: the records'
        // write-back is started, then each log's, then each is waited for (by a write-back
        // or a sync), so the device takes them together.
        if let Some(s) = staged.as_ref().filter(|s| !s.sync) {
            s.file.start_write_back(s.from, s.len);
        }
        for log in &logs {
            log.start_write_back();
        }
        if let (Some(s), true) = (&staged, logs.len() > 1 && self.one_dir) {
            let mut pending = Vec::with_capacity(logs.len());
            for log in &logs {
                if let Some(written) = log
                    .write_back_for_flush()
                    .map_err(|e| logs_error(ErrorVerb::Write, e))?
                {
                    pending.push(written);
                }
            }
            // The device flush for every log written back, and the records' own sync.
            s.file.sync_data().map_err(|e| records_error(e, "fsync"))?;
            for written in pending {
                written.flushed();
            }
            return Ok(());
        }
        let written_back = match &staged {
            Some(s) if !s.sync => s
                .file
                .write_back_for_flush(s.from, s.len)
                .map_err(|e| records_error(e, "sync_file_range"))?,
            _ => false,
        };
        let mut flushed = false;
        for log in &logs {
            flushed |= log
                .flush_synced()
                .map_err(|e| logs_error(ErrorVerb::Write, e))?;
        }
        if let Some(s) = staged {
            if !(written_back && flushed) {
                s.file.sync_data().map_err(|e| records_error(e, "fsync"))?;
            }
        }
        Ok(())
    }

    fn truncate_from(&self, log_id: LogId<NodeId>) -> StoreResult<()> {
        let mut inner = self.inner.lock();
        let index = log_id.index;
        if index >= inner.next_index() {
            return Ok(());
        }
        if index < inner.first {
            return Err(io_error(
                ErrorSubject::Log(log_id),
                ErrorVerb::Delete,
                format!(
                    "truncating from {index}, below the first live entry {}",
                    inner.first
                ),
            ));
        }
        let Some((_, slot)) = inner.view.range(index..).next() else {
            return Ok(());
        };
        let (pos, spans) = (slot.pos, slot.spans.clone());
        tracing::debug!(dir = %self.dir.display(), index, offsets = ?spans, "truncate");
        inner.rewrites += 1;
        // The records first, durably: a record never outlives its batches' truncation.
        inner
            .file()?
            .cut(pos)
            .map_err(|e| io_error(ErrorSubject::Log(log_id), ErrorVerb::Delete, e))?;
        for (log, &(start, _)) in self.logs.iter().zip(spans.iter()) {
            log.replica()
                .truncate_to(start)
                .map_err(|e| io_error(ErrorSubject::Log(log_id), ErrorVerb::Delete, e))?;
        }
        inner.view.split_off(&index);
        inner.memberships.retain(|(id, _)| id.index < index);
        inner.outcomes.retain(|&k, _| k < index);
        inner.ends = self.logs.iter().map(|l| l.log_end_offset()).collect();
        Ok(())
    }

    /// Forgets the entries up to `log_id`, durably. A purge past the last entry is not done
    /// here: openraft 0.9 purges up to a snapshot it installs on a follower in the same step
    /// as it queues the install, and runs the purge at once while the state machine's worker
    /// installs later, so the log does not hold the entries yet and the offset after them is
    /// the image's end. Recording the log end instead would shift every later entry's offset
    /// (the simulation found it: a crash between the two, or an entry appended before the
    /// install, left a follower expecting batches at the wrong offsets). The caller waits for
    /// the install ([`Purge::AwaitInstall`]), which records the purge point itself. It waits
    /// only while a snapshot is being received (openraft asks for somewhere to receive it
    /// before it installs one) and for what the state machine has not applied: openraft's
    /// start-up purges past a log that ends below the applied entry, and its storage suite
    /// purges past the last entry, and those are done at once, with the log end as the end.
    fn purge_upto(&self, log_id: LogId<NodeId>) -> StoreResult<Purge> {
        let mut inner = self.inner.lock();
        if inner
            .state
            .purged
            .as_ref()
            .is_some_and(|p| p.log_id.index >= log_id.index)
        {
            return Ok(Purge::Done);
        }
        let applied = inner.applied.is_some_and(|a| a.index >= log_id.index);
        tracing::debug!(
            dir = %self.dir.display(),
            upto = %log_id,
            next = inner.next_index(),
            applied = ?inner.applied,
            receiving = inner.receiving,
            "purge"
        );
        if log_id.index >= inner.next_index() && !applied && inner.receiving {
            return Ok(Purge::AwaitInstall);
        }
        let ends = inner.ends_of(log_id.index);
        let purged = Purged {
            log_id,
            end_offset: ends[0],
            membership: inner.membership_at(log_id.index),
            more_end_offsets: ends[1..].to_vec(),
        };
        let mut state = inner.state.clone();
        state.purged = Some(purged);
        self.write_state(&state)?;
        inner.state = state;
        inner.view = inner.view.split_off(&(log_id.index + 1));
        inner.first = log_id.index + 1;
        inner.memberships.retain(|(id, _)| id.index > log_id.index);
        self.drop_forgotten_records(&mut inner)?;
        Ok(Purge::Done)
    }

    /// Rewrites `raft-entries` without the records of forgotten entries once they outweigh
    /// the live ones (a crash leaves the old file, whose forgotten records are skipped).
    fn drop_forgotten_records(&self, inner: &mut Inner) -> StoreResult<()> {
        let len = inner.file()?.len();
        let live = inner.view.first_key_value().map_or(len, |(_, s)| s.pos);
        if live < REWRITE_AFTER || live < len - live {
            return Ok(());
        }
        let records: Vec<Record> = inner
            .view
            .iter()
            .map(|(&index, slot)| Record {
                index,
                term: slot.term,
                spans: slot.spans.to_vec(),
                kind: inner.kind_of(index, slot),
            })
            .collect();
        let at = inner
            .file()?
            .rewrite(&records)
            .map_err(|e| logs_error(ErrorVerb::Write, e))?;
        for (slot, pos) in inner.view.values_mut().zip(at) {
            slot.pos = pos;
        }
        Ok(())
    }

    /// [`Partition::purge_upto`], waiting for the install that covers a purge point past the
    /// last entry. openraft's core waits here, so no entry after the snapshot is appended
    /// before the image is in place; the install runs on the state machine's worker.
    async fn purge(&self, log_id: LogId<NodeId>) -> StoreResult<()> {
        let deadline = tokio::time::Instant::now() + INSTALL_WAIT;
        // Subscribed before the first look, so an install that ends in between is seen.
        let mut installs = self.installs.subscribe();
        loop {
            if self.purge_upto(log_id)? == Purge::Done {
                return Ok(());
            }
            if !matches!(
                tokio::time::timeout_at(deadline, installs.changed()).await,
                Ok(Ok(()))
            ) {
                let last = self.inner.lock().last_log_id();
                return Err(logs_error(
                    ErrorVerb::Delete,
                    format!(
                        "purging up to {log_id}, past the last entry ({last:?}): no snapshot \
                         install covered it within {INSTALL_WAIT:?}"
                    ),
                ));
            }
        }
    }

    fn apply_entries(&self, entries: Vec<Entry>) -> StoreResult<Vec<Response>> {
        let mut inner = self.inner.lock();
        let mut out = Vec::with_capacity(entries.len());
        for e in &entries {
            if let EntryPayload::Membership(m) = &e.payload {
                inner.applied_membership = StoredMembership::new(Some(e.log_id), m.clone());
            }
            out.push(
                inner
                    .outcomes
                    .remove(&e.log_id.index)
                    .unwrap_or(Response::Replicated),
            );
            inner.applied = Some(e.log_id);
        }
        if let Some(last) = entries.last() {
            let index = last.log_id.index;
            if inner.view.contains_key(&index) {
                for (m, log) in self.logs.iter().enumerate() {
                    let hw = inner.end_of(index, m);
                    if hw > log.high_watermark() {
                        log.replica().set_high_watermark(hw).map_err(|e| {
                            io_error(ErrorSubject::Apply(last.log_id), ErrorVerb::Write, e)
                        })?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The image of the partition (of each partition of a set) as of `meta`: the retained
    /// batches up to its last entry and the producer state at the first of them.
    fn image(&self, meta: &SnapshotMeta<NodeId, Node>) -> StoreResult<Vec<u8>> {
        let stops: Vec<i64> = {
            let inner = self.inner.lock();
            match meta.last_log_id {
                Some(id) => inner.ends_of(id.index),
                None => self.logs.iter().map(|l| l.log_start_offset()).collect(),
            }
        };
        let images = self
            .logs
            .iter()
            .zip(stops)
            .map(|(log, stop)| image_of(log, stop))
            .collect::<StoreResult<Vec<Image>>>()?;
        Ok(Image::encode_set(&images))
    }

    /// Makes the partition the image `bytes` of `meta`. Durable before it returns; a crash in
    /// the middle is completed on open from [`INSTALL_FILE`].
    fn install(&self, meta: &SnapshotMeta<NodeId, Node>, bytes: &[u8]) -> StoreResult<()> {
        let result = self.install_image(meta, bytes);
        tracing::debug!(
            dir = %self.dir.display(),
            last = ?meta.last_log_id,
            ok = result.is_ok(),
            end = self.logs[0].log_end_offset(),
            "snapshot installed"
        );
        self.inner.lock().receiving = false;
        // Wakes a purge waiting for it, whether it worked or not.
        self.installs.send_modify(|n| *n += 1);
        result
    }

    fn install_image(&self, meta: &SnapshotMeta<NodeId, Node>, bytes: &[u8]) -> StoreResult<()> {
        let sm = || ErrorSubject::StateMachine;
        let images = Image::decode_set(bytes, self.logs.len())
            .map_err(|e| io_error(sm(), ErrorVerb::Read, e))?;
        let last = meta
            .last_log_id
            .ok_or_else(|| io_error(sm(), ErrorVerb::Write, "a snapshot without a last log id"))?;
        let holds_last = {
            let inner = self.inner.lock();
            let live = inner.view.get(&last.index).map(|slot| slot.term);
            // Purged up to exactly it: openraft ran the purge of this install first.
            let purged = inner.state.purged.as_ref().map(|p| p.log_id);
            inner.state.installing.is_none()
                && (live == Some(last.leader_id.term) || purged == Some(last))
        };
        if holds_last {
            // The log already holds the snapshot's last entry, so (raft's log matching) the
            // same batches up to it as the image: nothing is rewritten, the entries after it
            // stay (openraft keeps them), raft forgets what the snapshot covers.
            let purge = self.purge_upto(last)?;
            debug_assert_eq!(purge, Purge::Done, "the log holds {last}");
            let mut inner = self.inner.lock();
            for (m, log) in self.logs.iter().enumerate() {
                let end = inner.end_of(last.index, m);
                if log.high_watermark() < end {
                    log.replica()
                        .set_high_watermark(end)
                        .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
                }
            }
            if inner.applied < Some(last) {
                inner.applied = Some(last);
                inner.applied_membership = meta.last_membership.clone();
            }
            inner.snapshot = Some(meta.clone());
            return Ok(());
        }
        let mut inner = self.inner.lock();
        let install_path = self.dir.join(INSTALL_FILE);
        if inner.state.installing.as_ref() != Some(meta) {
            self.fs
                .write_atomically(&install_path, bytes)
                .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
            let mut state = inner.state.clone();
            state.installing = Some(meta.clone());
            self.write_state(&state)?;
            inner.state = state;
        }
        inner.rewrites += 1;
        let mut ends = Vec::with_capacity(self.logs.len());
        for (log, image) in self.logs.iter().zip(&images) {
            log.replica()
                .truncate_fully_and_start_with(image.start, &image.producers)
                .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
            if !image.batches.is_empty() {
                log.replica()
                    .append(&image.batches)
                    .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
            }
            let end = log.log_end_offset();
            // Everything in the image is committed; the flush makes the batches and the high
            // watermark durable together.
            log.replica()
                .set_high_watermark(end)
                .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
            log.flush()
                .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
            ends.push(end);
        }
        // No entry is live after an install: its records go before the install is recorded
        // done (a crash in between completes the install again on open).
        let file = match inner.file.take() {
            Some(mut file) => file.rewrite(&[]).map(|_| file),
            None => EntriesFile::create(Arc::clone(&self.fs), &self.dir),
        }
        .map_err(|e| io_error(sm(), ErrorVerb::Write, e))?;
        inner.file = Some(file);
        let mut state = inner.state.clone();
        state.installing = None;
        state.purged = Some(Purged {
            log_id: last,
            end_offset: ends[0],
            membership: meta.last_membership.clone(),
            more_end_offsets: ends[1..].to_vec(),
        });
        self.write_state(&state)?;
        inner.state = state;
        // Housekeeping: a leftover image is overwritten by the next install.
        let _ = self.fs.remove_file(&install_path);
        inner.first = last.index + 1;
        inner.view.clear();
        inner.memberships.clear();
        inner.outcomes.clear();
        inner.ends = ends;
        inner.applied = Some(last);
        inner.applied_membership = meta.last_membership.clone();
        inner.snapshot = Some(meta.clone());
        inner.images_installed += 1;
        Ok(())
    }
}

/// What [`Partition::append_entries`] did, for [`Partition::persist`] and the leader's own
/// answers.
struct Appended {
    /// The leader's own answers, by entry notice.
    written: Vec<Told>,
    /// Whether it wrote records.
    records: bool,
    /// Which partitions of the group it wrote batches to.
    touched: Vec<bool>,
}

/// Checks that `bytes`, a replicated entry's batches for one partition, are whole batches
/// starting at offset `start`, dense, of leader epoch `epoch` (the entry's `term`).
fn check_stored(bytes: &Bytes, start: i64, epoch: i32, term: u64) -> Result<(), String> {
    let mut next = start;
    for item in BatchIter::new(bytes) {
        let (_, b) = item.map_err(|err| format!("{err:?}"))?;
        if b.base_offset() != next || b.partition_leader_epoch() != epoch {
            return Err(format!(
                "replicated batch at offset {} of leader epoch {} where the entry of term \
                 {term} expects offset {next}",
                b.base_offset(),
                b.partition_leader_epoch()
            ));
        }
        next = b.last_offset() + 1;
    }
    Ok(())
}

/// The image of `log` up to offset `stop`: its retained batches below it and the producer
/// state at the first of them.
fn image_of(log: &Log, stop: i64) -> StoreResult<Image> {
    let sm = || ErrorSubject::StateMachine;
    let start = log.log_start_offset().min(stop);
    let producers = log
        .replica()
        .producer_snapshot_at(start)
        .map_err(|e| io_error(sm(), ErrorVerb::Read, e))?;
    let mut batches = Vec::new();
    let mut offset = start;
    while offset < stop {
        let bytes = log
            .read(offset, READ_CHUNK)
            .map_err(|e| io_error(sm(), ErrorVerb::Read, e))?;
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let (at, batch) =
                item.map_err(|e| io_error(sm(), ErrorVerb::Read, format!("{e:?}")))?;
            if batch.last_offset() < offset {
                continue;
            }
            if batch.base_offset() >= stop {
                break;
            }
            batches.extend_from_slice(&bytes[at..at + batch.size()]);
            offset = batch.last_offset() + 1;
        }
    }
    Ok(Image {
        start,
        producers,
        batches,
    })
}

/// Client batches the leader's log refuses are answered, not fatal: the log is unchanged.
fn is_refusal(e: &AppendError) -> bool {
    !matches!(
        e,
        AppendError::Io(_)
            | AppendError::ReadOnly { .. }
            | AppendError::Closed
            | AppendError::PartiallyWritten { .. }
    )
}

/// A snapshot's data: the first offset, the producer state there (a `.snapshot` file's
/// bytes), and the batches from it on.
///
/// | off | size | field                                  |
/// |----:|-----:|----------------------------------------|
/// |   0 |    4 | magic `OLRI`                           |
/// |   4 |    1 | version (1)                            |
/// |   5 |    8 | start offset, big-endian int64         |
/// |  13 |    4 | producer snapshot length, big-endian   |
/// |  17 |    n | producer snapshot                      |
/// | 17+n|  ... | batches, as the log stores them        |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The offset the image starts at.
    pub start: i64,
    /// The producer state at `start`.
    pub producers: Vec<u8>,
    /// The batches from `start` on.
    pub batches: Vec<u8>,
}

const IMAGE_MAGIC: &[u8; 4] = b"OLRI";
const IMAGE_HEADER: usize = 17;
/// A partition set's image: each partition's image, in the set's order.
///
/// | off | size | field                                              |
/// |----:|-----:|----------------------------------------------------|
/// |   0 |    4 | magic `OLRS`                                       |
/// |   4 |    1 | version (1)                                        |
/// |   5 |    4 | number of partitions N (2 or more), big-endian     |
/// |   9 |  ... | N times: the image's length (8 bytes, big-endian), then the image |
const SET_IMAGE_MAGIC: &[u8; 4] = b"OLRS";
const SET_IMAGE_HEADER: usize = 9;

impl Image {
    /// The image's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(IMAGE_HEADER + self.producers.len() + self.batches.len());
        out.extend_from_slice(IMAGE_MAGIC);
        out.push(1);
        out.extend_from_slice(&self.start.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.producers);
        out.extend_from_slice(&self.batches);
        out
    }

    /// The image of a group of `images.len()` partitions: the image itself for one, a set's
    /// image (every partition's, in order) for more.
    pub fn encode_set(images: &[Image]) -> Vec<u8> {
        if let [one] = images {
            return one.encode();
        }
        let mut out = Vec::new();
        out.extend_from_slice(SET_IMAGE_MAGIC);
        out.push(1);
        out.extend_from_slice(&(images.len() as u32).to_be_bytes());
        for image in images {
            let bytes = image.encode();
            out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Reads the image of a group of `members` partitions ([`Image::encode_set`]), refusing
    /// one that is cut, not an image, or of another number of partitions.
    pub fn decode_set(bytes: &[u8], members: usize) -> Result<Vec<Image>, String> {
        if members == 1 {
            return Image::decode(bytes).map(|i| vec![i]);
        }
        if bytes.len() < SET_IMAGE_HEADER || &bytes[..4] != SET_IMAGE_MAGIC {
            return Err(format!(
                "not a snapshot image of a set of {members} partitions (bad magic or {} bytes)",
                bytes.len()
            ));
        }
        if bytes[4] != 1 {
            return Err(format!(
                "set snapshot image version {} is not known",
                bytes[4]
            ));
        }
        let n = u32::from_be_bytes(bytes[5..9].try_into().expect("4 bytes")) as usize;
        if n != members {
            return Err(format!(
                "a snapshot image of a set of {n} partitions, for a set of {members}"
            ));
        }
        let mut images = Vec::with_capacity(n);
        let mut at = SET_IMAGE_HEADER;
        for k in 0..n {
            let len = bytes
                .get(at..at + 8)
                .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
            let image = len
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| Some((len, bytes.get(at + 8..(at + 8).checked_add(len)?)?)));
            let Some((len, image)) = image else {
                return Err(format!("set snapshot image cut in partition {k}'s image"));
            };
            images.push(Image::decode(image).map_err(|e| format!("partition {k}: {e}"))?);
            at += 8 + len;
        }
        if at != bytes.len() {
            return Err(format!(
                "set snapshot image: {} bytes after the last partition's image",
                bytes.len() - at
            ));
        }
        Ok(images)
    }

    /// Reads an image, refusing one that is cut or not an image.
    pub fn decode(bytes: &[u8]) -> Result<Image, String> {
        if bytes.len() < IMAGE_HEADER {
            return Err(format!(
                "snapshot image of {} bytes: shorter than its header",
                bytes.len()
            ));
        }
        if &bytes[..4] != IMAGE_MAGIC {
            return Err("not a snapshot image (bad magic)".into());
        }
        if bytes[4] != 1 {
            return Err(format!("snapshot image version {} is not known", bytes[4]));
        }
        let start = i64::from_be_bytes(bytes[5..13].try_into().expect("8 bytes"));
        let n = u32::from_be_bytes(bytes[13..17].try_into().expect("4 bytes")) as usize;
        let Some(producers) = bytes.get(IMAGE_HEADER..IMAGE_HEADER + n) else {
            return Err(format!(
                "snapshot image cut inside its producer state ({n} bytes)"
            ));
        };
        if start < 0 {
            return Err(format!("snapshot image starts at negative offset {start}"));
        }
        Ok(Image {
            start,
            producers: producers.to_vec(),
            batches: bytes[IMAGE_HEADER + n..].to_vec(),
        })
    }
}

fn range_of<RB: RangeBounds<u64>>(range: &RB) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&x) => x,
        Bound::Excluded(&x) => x + 1,
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&x) => x.saturating_add(1),
        Bound::Excluded(&x) => x,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}

/// openraft's log storage (and log reader) over a [`Partition`].
#[derive(Clone)]
pub struct LogStore(pub Arc<Partition>);

/// openraft's state machine (and snapshot builder) over a [`Partition`].
#[derive(Clone)]
pub struct StateMachine(pub Arc<Partition>);

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry>> {
        let (lo, hi) = range_of(&range);
        self.0.entries(lo, hi)
    }
}

/// The log reader openraft's replication streams use: it returns only entries that follow
/// the first one asked for. openraft 0.9 sends what a stream reads after the entry before the
/// range, unchecked, and a stream of a leader that just stepped down can still read after the
/// node, now a follower, purged the start of the range (openraft purges at once on a
/// follower): entries from later in the range would reach a follower as if they came right
/// after that entry (the simulation found it: a follower was handed entry 30 after entry 15).
/// And a stream of a leader that stepped down can read after the node's log was truncated
/// and rewritten under the next leader: entries of a later term would reach a follower as if
/// they followed the old leader's entries (the simulation found that too). So a stream reads
/// only from the log it started on (openraft starts streams while the node leads, and a
/// leader never rewrites its log): after a truncation or an install, it reads nothing. An
/// empty answer makes the stream send a heartbeat instead.
#[derive(Clone)]
pub struct ReplicationReader {
    partition: Arc<Partition>,
    /// The rewrites of the log when the stream started.
    rewrites: u64,
}

impl RaftLogReader<TypeConfig> for ReplicationReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry>> {
        let (lo, hi) = range_of(&range);
        self.partition.read_entries(lo, hi, Some(self.rewrites))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = ReplicationReader;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let inner = self.0.inner.lock();
        Ok(LogState {
            last_purged_log_id: inner.state.purged.as_ref().map(|p| p.log_id),
            last_log_id: inner.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        ReplicationReader {
            partition: Arc::clone(&self.0),
            rewrites: self.0.inner.lock().rewrites,
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StoreResult<()> {
        let mut inner = self.0.inner.lock();
        let mut state = inner.state.clone();
        state.vote = Some(*vote);
        self.0
            .write_state(&state)
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        inner.state = state;
        Ok(())
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<NodeId>>> {
        Ok(self.0.inner.lock().state.vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Durable before the call returns: openraft 0.9 may replicate entries as soon as
        // `append` returns, and restores a leader in its own term after a restart, so a leader
        // entry a crash could still take away would let that leader write another entry under
        // the same log id (the simulation found this with a flush after the return).
        let result = self
            .0
            .append_entries(entries.into_iter().collect())
            .and_then(|a| self.0.persist(a.records, &a.touched).map(|()| a.written));
        match result {
            Ok(written) => {
                callback.log_io_completed(Ok(()));
                // Durable here: the leader's own answers (acks=1) go now.
                self.0.written.tell(written);
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        self.0.truncate_from(log_id)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StoreResult<()> {
        self.0.purge(log_id).await
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let meta = {
            let mut inner = self.0.inner.lock();
            inner.snapshots_built += 1;
            let meta = SnapshotMeta {
                last_log_id: inner.applied,
                last_membership: inner.applied_membership.clone(),
                snapshot_id: match inner.applied {
                    Some(id) => format!(
                        "{}-{}-{}",
                        id.leader_id.term, id.index, inner.snapshots_built
                    ),
                    None => format!("none-{}", inner.snapshots_built),
                },
            };
            inner.snapshot = Some(meta.clone());
            meta
        };
        // openraft keeps only the metadata of a snapshot it built, and sends what
        // `get_current_snapshot` returns: the image is read from the log then, not here.
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> StoreResult<(Option<LogId<NodeId>>, Stored)> {
        let inner = self.0.inner.lock();
        Ok((inner.applied, inner.applied_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.0.apply_entries(entries.into_iter().collect())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        self.0.inner.lock().receiving = true;
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        self.0.install(meta, snapshot.get_ref())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let meta = {
            let inner = self.0.inner.lock();
            match (&inner.snapshot, &inner.state.purged) {
                (Some(m), _) => m.clone(),
                // After a restart: the purge point is a snapshot of what it covers.
                (None, Some(p)) => SnapshotMeta {
                    last_log_id: Some(p.log_id),
                    last_membership: p.membership.clone(),
                    snapshot_id: format!("purged-{}-{}", p.log_id.leader_id.term, p.log_id.index),
                },
                (None, None) => return Ok(None),
            }
        };
        let data = self.0.image(&meta)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
