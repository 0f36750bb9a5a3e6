//! The active segment's disk space, grown in steps ahead of its writer (docs/design.md,
//! "Segment space").
//!
//! A segment's `.log` used to be preallocated to the whole `segment_bytes` (1 GiB by default)
//! when it was created: an idle partition held a gigabyte, and the roll that created it held
//! the append lock for the allocation. Now the file grows by `allocation_step_bytes` at a time,
//! ahead of the writer, on the background thread that also faults its pages in
//! (`log::prefault`); the appending thread grows it itself only when it catches up with the
//! allocated end (or where no background thread may touch the file system, as in the
//! simulator). Either way the growth is a real allocation before the writer is granted the
//! bytes, so a full disk is an `ENOSPC` error at the append that needed the space, never a
//! SIGBUS on a write through the map.
//!
//! The steps start small and grow with the writer: a fresh file's first allocation is
//! [`FIRST_STEP`], and each later one as large as the file already is, up to the configured
//! step ([`step_at`]). A partition that gets one record holds a quarter of a MiB, not a whole
//! step (32 MiB by default: a broker's auto-created topics held 32 MiB each); a busy one reaches
//! full steps after a few MiB, in a handful more allocations per segment.
//!
//! How a step is allocated is [`Preallocation`]: reserved (fallocate: unwritten extents, the
//! cheapest when syncs are rare) or zeroed (zeros written and synced, so that each later sync
//! of appended data writes only data; docs/performance.md has the measurements). The indexes
//! grow with the log, reserved, to what that much log can need.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{offset_index, time_index, Segment};
use crate::format::HEADER_SIZE;
use crate::io::{File, IoError, IoResultExt, OpenMode};

/// How the active segment's `.log` is allocated ahead of its writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preallocation {
    /// `fallocate`: the blocks are reserved as unwritten extents. Cheapest to allocate; the
    /// first write-back of each range converts its extents, a metadata write in the sync that
    /// reaches it.
    Reserved,
    /// Zeros written and synced over each step before the writer reaches it: a sync of
    /// appended data then writes only data. Costs a second write of every byte, off the
    /// append path.
    Zeroed,
}

/// How much of a step is zeroed at a time (at most a step): the writer is granted each piece
/// as soon as it holds zeros, so one that catches up waits for one piece at most.
pub const ZERO_CHUNK: usize = 1 << 20;

/// How far ahead of the writer zeroed space is prepared (at most a step): one piece. Zeroing a
/// whole step ahead wrote the step's zeros back in a burst that every sync of appended data
/// queued behind (a fresh 32 MiB step cost group commit half its throughput); a piece ahead
/// keeps the zeros' write-back at the writer's pace, in small pieces between its syncs
/// (docs/performance.md, "Durable appends").
pub const ZERO_AHEAD: usize = ZERO_CHUNK;

/// What the appending thread reserves at a time (at most a step) when it catches up with
/// zeroed space that a background thread prepares: it never zeroes (a write and a sync of a
/// whole piece on the append path); a little reserved space ahead costs a few syncs a metadata
/// write instead.
pub const RESERVE_GRAIN: usize = 64 << 10;

/// The first allocation of a `.log` with nothing allocated yet (at most the configured step).
pub const FIRST_STEP: usize = 256 << 10;

/// The first allocation of an index file, doubling with the file as the `.log`'s steps do up to
/// the index's own grain.
const FIRST_INDEX_STEP: usize = 4096;

/// The step of the next allocation of a file already allocated to `allocated` bytes: the file
/// doubles, from `first`, until the step reaches `max_step` (a power of two at least as large
/// as the file until then, so the ends stay on the grid of whole steps). Pure, so the rule has
/// its tests.
pub fn step_at(allocated: usize, first: usize, max_step: usize) -> usize {
    allocated
        .max(first)
        .checked_next_power_of_two()
        .unwrap_or(max_step)
        .min(max_step)
        .max(1)
}

/// The end of the next allocation of a file of `ready` bytes that must reach `wanted`: whole
/// `step`s from the start of the file, at most `capacity`. Pure, so the rule has its tests.
pub fn next_end(ready: usize, wanted: usize, step: usize, capacity: usize) -> usize {
    let step = step.max(1);
    let target = wanted.max(ready.saturating_add(1));
    target
        .div_ceil(step)
        .saturating_mul(step)
        .min(capacity)
        .max(ready)
}

/// Bytes an index needs for a segment whose `.log` holds `log_bytes`: an offset-index entry
/// is added only after more than `interval` bytes of batches (and batches are at least a
/// header long), the time index gets one more at seal; never more than `capacity`.
pub fn index_bytes_for(log_bytes: usize, interval: usize, entry_size: usize, capacity: usize) -> usize {
    let per_entry = interval.saturating_add(1).max(HEADER_SIZE);
    let entries = log_bytes / per_entry + 2;
    entries.saturating_mul(entry_size).min(capacity)
}

/// The sizes that decide growth.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpaceConfig {
    /// The mapped length of the `.log`: the most it can grow to.
    pub capacity: usize,
    pub step: usize,
    pub preallocation: Preallocation,
    pub index_capacity: usize,
    pub time_capacity: usize,
    pub index_interval_bytes: usize,
    /// A background thread grows the files ahead of the writer (the file system allows it).
    pub background: bool,
}

/// One allocation of the `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Growth {
    /// Reserve (fallocate) up to the next multiple of this many bytes.
    Reserve(usize),
    /// Write zeros over one [`ZERO_CHUNK`], written back as they are written.
    Zero,
}

/// How far each of an active segment's files is allocated.
#[derive(Debug)]
struct Grown {
    log: usize,
    index: usize,
    time: usize,
    /// Sealed or dropped: the files are trimmed or cut, and must not grow again.
    closed: bool,
    /// Ranges of the `.log` whose blocks may not be allocated and written, so that a write
    /// there needs its metadata synced: reserved grains (unwritten extents) and, in a
    /// reopened file, what follows its batches (zeros a crash may have left as holes).
    unwritten: Vec<(usize, usize)>,
    /// Where a zeroed piece starts that is written but not yet written back (its blocks not
    /// allocated yet).
    zeroing_from: Option<usize>,
}

/// The allocated ends of an active segment's files, shared by its writer and the background
/// thread that grows them. The lock is held across one allocation, so growth is serial and
/// never overlaps what the writer was granted.
#[derive(Debug)]
pub struct SegmentSpace {
    segment: Arc<Segment>,
    cfg: SpaceConfig,
    grown: Mutex<Grown>,
    /// `grown.log`, readable without the lock.
    ready: AtomicUsize,
    /// The lengths of the indexes when the segment was opened: the entries a reopened file
    /// holds need not follow the rule that sizes the indexes (a truncation ends one with an
    /// extra entry), so the room for new ones is counted on top of them.
    indexes_at_open: (usize, usize),
    /// The `.log` is a recycled file: the bytes it had when it was taken are old batches, not
    /// zeros (docs/design.md, "Segment space").
    recycled: AtomicBool,
    /// The end of the `.log`'s prefix whose blocks are allocated, written and synced (their
    /// metadata committed by a data sync that began after they were): a write below it only
    /// changes data, which a write-back and any device flush make durable
    /// ([`SegmentSpace::promises`]).
    durable_prefix: AtomicUsize,
}

impl SegmentSpace {
    /// The space of a segment whose files are `log`, `index` and `time` bytes long. With
    /// `rebuild` (its indexes are about to be rebuilt from its batches) the indexes are grown
    /// at once to what that log can need; otherwise at the first growth of the log, which
    /// the first append needs (the reopened `.log` ends at its batches), so an open that is
    /// followed by no append changes no file.
    /// `written` is where its batches end: what follows in the `.log` is not trusted to be
    /// written blocks until a sync covers it.
    pub(super) fn new(
        segment: Arc<Segment>,
        cfg: SpaceConfig,
        log: usize,
        index: usize,
        time: usize,
        rebuild: bool,
        written: usize,
    ) -> Result<SegmentSpace, IoError> {
        let space = SegmentSpace {
            segment,
            cfg,
            grown: Mutex::new(Grown {
                log,
                index,
                time,
                closed: false,
                unwritten: if log > written {
                    vec![(written, log)]
                } else {
                    Vec::new()
                },
                zeroing_from: None,
            }),
            ready: AtomicUsize::new(log),
            indexes_at_open: (index, time),
            recycled: AtomicBool::new(false),
            durable_prefix: AtomicUsize::new(0),
        };
        if log > 0 && rebuild {
            // A reopened segment's rebuilt indexes get their room before any entry is written.
            let mut g = space.grown.lock();
            space.grow_indexes(&mut g)?;
        }
        Ok(space)
    }

    /// Marks the `.log` as a recycled file (its allocated bytes are old data).
    pub fn mark_recycled(&self) {
        self.recycled.store(true, Ordering::Release);
    }
    /// Whether the `.log` is a recycled file: pages faulted in writable ahead of the writer
    /// would write its old bytes back for nothing.
    pub fn recycled(&self) -> bool {
        self.recycled.load(Ordering::Acquire)
    }
    /// Where the `.log`'s prefix of written blocks will end once a data sync of `[.., to)`
    /// that starts now completes: the allocated end, short of any range that is not written
    /// blocks beyond `to` (a reserved grain, a piece still being zeroed). Taken before the
    /// sync; [`SegmentSpace::synced`] records it after.
    pub fn sync_boundary(&self, to: usize) -> usize {
        let g = self.grown.lock();
        let mut end = g.log;
        if let Some(from) = g.zeroing_from {
            end = end.min(from);
        }
        for &(a, b) in &g.unwritten {
            if b > to {
                end = end.min(a.max(to));
            }
        }
        end.max(to)
    }

    /// A data sync taken at [`SegmentSpace::sync_boundary`] `boundary` completed: the blocks
    /// below it are written and their metadata committed.
    pub fn synced(&self, boundary: usize) {
        self.durable_prefix.fetch_max(boundary, Ordering::AcqRel);
        self.grown.lock().unwritten.retain(|&(_, b)| b > boundary);
    }

    /// Whether a write of the `.log` below `to` only changed data in blocks allocated,
    /// written and synced before: then writing it back, and a cache flush of the device by
    /// any file's data sync, make it durable ([`crate::Log::write_back_for_flush`]).
    pub fn promises(&self, to: usize) -> bool {
        to <= self.durable_prefix.load(Ordering::Acquire)
    }

    /// Bytes of the `.log` the writer may write.
    pub fn ready(&self) -> usize {
        self.ready.load(Ordering::Acquire)
    }
    /// Bytes of the offset index and the time index the writer may write.
    pub fn index_ready(&self) -> (usize, usize) {
        let g = self.grown.lock();
        (g.index, g.time)
    }
    /// The most the `.log` can grow to.
    pub fn capacity(&self) -> usize {
        self.cfg.capacity
    }
    pub fn preallocation(&self) -> Preallocation {
        self.cfg.preallocation
    }
    /// The step of the `.log`'s next allocation, its file allocated to `allocated` bytes.
    fn step(&self, allocated: usize) -> usize {
        step_at(allocated, FIRST_STEP, self.cfg.step)
    }
    /// Where growth ahead of a writer at `written` should reach, if it is due: once less than
    /// half the window is left, to the window past the writer. The window is a step for
    /// reserved space, [`ZERO_AHEAD`] for zeroed space (at most the current step, and half of
    /// it while the steps still grow: a writer that reserved a little for itself near the start
    /// of the file is then zeroed ahead to the end of the first step, not past it).
    pub fn wanted_ahead(&self, written: usize) -> Option<usize> {
        let ready = self.ready();
        let step = self.step(ready);
        let (window, grain) = match self.cfg.preallocation {
            Preallocation::Reserved => (step, step),
            Preallocation::Zeroed => {
                let piece = ZERO_CHUNK.min(step);
                let growing = step < self.cfg.step;
                let window = if growing { step / 2 } else { step };
                (ZERO_AHEAD.min(window).max(1), piece)
            }
        };
        (ready < self.cfg.capacity && ready.saturating_sub(written) < window / 2)
            .then(|| next_end(ready, written.saturating_add(window), grain, self.cfg.capacity))
    }

    /// Makes at least `needed` bytes of the `.log` ready (on the append path): waits for a
    /// growth under way, or grows the file itself. Zeroing is the background thread's: where
    /// there is one, this only reserves the little the writer needs now.
    pub fn ensure(&self, needed: usize) -> Result<(), IoError> {
        if self.ready() >= needed {
            return Ok(());
        }
        let mut g = self.grown.lock();
        while g.log < needed {
            if g.closed {
                return Err(self.closed_error());
            }
            let step = self.step(g.log);
            let growth = match self.cfg.preallocation {
                Preallocation::Reserved => Growth::Reserve(step),
                Preallocation::Zeroed if self.cfg.background => {
                    Growth::Reserve(RESERVE_GRAIN.min(step))
                }
                Preallocation::Zeroed => Growth::Zero,
            };
            self.grow_once(&mut g, needed, growth)?;
        }
        // Again, in case an index could not grow after the log did (a full disk).
        self.grow_indexes(&mut g)?;
        self.ready.store(g.log, Ordering::Release);
        Ok(())
    }

    /// Grows the `.log` toward `target` (ahead of the writer, from the background thread), a
    /// piece at a time so a writer that catches up waits for one piece only. Zeroed pieces
    /// far ahead of the writer are synced once, at the end: one sync per step keeps the window
    /// in which the file's metadata is being changed, and a sync of appended data must write
    /// it too, to one write-back of the step (docs/performance.md has the measurements).
    /// Stops when the segment is closed.
    pub fn grow_ahead(&self, target: usize) -> Result<(), IoError> {
        loop {
            let mut g = self.grown.lock();
            if g.closed || g.log >= target.min(self.cfg.capacity) {
                return Ok(());
            }
            let growth = match self.cfg.preallocation {
                Preallocation::Reserved => Growth::Reserve(self.step(g.log)),
                Preallocation::Zeroed => Growth::Zero,
            };
            let from = g.log;
            self.grow_once(&mut g, target, growth)?;
            let to = g.log;
            if growth == Growth::Zero {
                g.zeroing_from = Some(from);
            }
            drop(g);
            if growth == Growth::Zero {
                // Written back with the lock released: a writer that catches up and reserves a
                // little space for itself must not wait behind the device (under its append
                // lock, with every appender behind it).
                let s = &self.segment;
                let written_back = self
                    .open(&s.log_path)
                    .and_then(|f| {
                        f.write_back(from as u64, (to - from) as u64)
                            .ctx("sync_file_range", &s.log_path)
                    });
                self.grown.lock().zeroing_from = None;
                written_back?;
            }
        }
    }

    /// One of the segment's files, opened for one allocation.
    fn open(&self, path: &std::path::Path) -> Result<Box<dyn File>, IoError> {
        self.segment
            .fs
            .open(path, OpenMode::ReadWrite)
            .ctx("open", path)
    }

    /// No growth after this: the segment is sealed (its files trimmed) or its writer gone.
    /// Waits for an allocation under way.
    pub fn close(&self) {
        self.grown.lock().closed = true;
    }

    /// One allocation toward `wanted`: reserved space, or a piece zeroed and synced; then
    /// the indexes, to what the larger log can need.
    fn grow_once(&self, g: &mut Grown, wanted: usize, growth: Growth) -> Result<(), IoError> {
        let s = &self.segment;
        let end = match growth {
            Growth::Reserve(grain) => {
                let end = next_end(g.log, wanted, grain, self.cfg.capacity);
                self.open(&s.log_path)?
                    .allocate(end as u64)
                    .ctx("fallocate", &s.log_path)?;
                if end > g.log {
                    g.unwritten.push((g.log, end));
                }
                end
            }
            Growth::Zero => {
                let piece = ZERO_CHUNK.min(self.step(g.log));
                let end = next_end(g.log, wanted.min(g.log + piece), piece, self.cfg.capacity);
                let file = self.open(&s.log_path)?;
                file.write_zeros(g.log as u64, (end - g.log) as u64)
                    .ctx("allocate zeroed", &s.log_path)?;
                if !self.cfg.background {
                    // No background thread writes the zeros back ([`SegmentSpace::grow_ahead`]
                    // does, off this lock): written back here, so their blocks are allocated
                    // before a sync counts them written ([`SegmentSpace::sync_boundary`]).
                    file.write_back(g.log as u64, (end - g.log) as u64)
                        .ctx("sync_file_range", &s.log_path)?;
                }
                end
            }
        };
        g.log = end;
        self.grow_indexes(g)?;
        // Published after the indexes: a writer granted the log bytes finds room for their
        // index entries.
        self.ready.store(end, Ordering::Release);
        Ok(())
    }

    fn grow_indexes(&self, g: &mut Grown) -> Result<(), IoError> {
        let log = g.log;
        self.grow_indexes_for(g, log)
    }

    fn grow_indexes_for(&self, g: &mut Grown, log_end: usize) -> Result<(), IoError> {
        let s = &self.segment;
        let interval = self.cfg.index_interval_bytes;
        let (index_at_open, time_at_open) = self.indexes_at_open;
        let index = index_bytes_for(log_end, interval, offset_index::ENTRY_SIZE, self.cfg.index_capacity)
            .saturating_add(index_at_open)
            .min(self.cfg.index_capacity);
        if index > g.index {
            // Reserved a step's worth at a time, not an entry at a time: doubling with the
            // file, as the `.log`'s steps do.
            let grain = step_at(g.index, FIRST_INDEX_STEP, 64 << 10);
            let index = next_end(g.index, index, grain, self.cfg.index_capacity);
            let path = s.index_path();
            self.open(&path)?
                .allocate(index as u64)
                .ctx("fallocate", &path)?;
            g.index = index;
        }
        let time = index_bytes_for(log_end, interval, time_index::ENTRY_SIZE, self.cfg.time_capacity)
            .saturating_add(time_at_open)
            .min(self.cfg.time_capacity);
        if time > g.time {
            let grain = step_at(g.time, FIRST_INDEX_STEP, 96 << 10);
            let time = next_end(g.time, time, grain, self.cfg.time_capacity);
            let path = s.time_index_path();
            self.open(&path)?
                .allocate(time as u64)
                .ctx("fallocate", &path)?;
            g.time = time;
        }
        Ok(())
    }

    fn closed_error(&self) -> IoError {
        IoError::new(
            "allocate",
            &self.segment.log_path,
            std::io::Error::other("the segment is sealed"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_ends_on_whole_steps_within_the_capacity() {
        const MIB: usize = 1 << 20;
        assert_eq!(next_end(0, 1, 32 * MIB, 1 << 30), 32 * MIB);
        assert_eq!(next_end(32 * MIB, 32 * MIB + 1, 32 * MIB, 1 << 30), 64 * MIB);
        // A file cut to an odd length (recovery) grows back onto the step grid.
        assert_eq!(next_end(5_000, 6_000, 4096, 1 << 30), 8192);
        // Several steps at once when the writer needs them.
        assert_eq!(next_end(0, 70 * MIB, 32 * MIB, 1 << 30), 96 * MIB);
        // Never past the capacity, never below what is there.
        assert_eq!(next_end(0, 100, 32 * MIB, 64 * 1024), 64 * 1024);
        assert_eq!(next_end(64 * 1024, 100, 32 * MIB, 64 * 1024), 64 * 1024);
        assert_eq!(next_end(10, 5, 4096, 1 << 20), 4096);
    }

    #[test]
    fn steps_start_small_and_double_with_the_file_up_to_the_configured_step() {
        const MIB: usize = 1 << 20;
        let max = 32 * MIB;
        assert_eq!(step_at(0, FIRST_STEP, max), FIRST_STEP);
        // The allocations a writer makes from an empty file: each doubles the file.
        let mut ends = vec![];
        let mut allocated = 0;
        while allocated < 128 * MIB {
            allocated = next_end(allocated, allocated + 1, step_at(allocated, FIRST_STEP, max), 1 << 30);
            ends.push(allocated / 1024);
        }
        assert_eq!(
            ends,
            [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304, 131072]
        );
        // A file cut to an odd length (recovery) steps from where it is.
        assert_eq!(step_at(5_000, FIRST_STEP, max), FIRST_STEP);
        assert_eq!(step_at(3 * MIB + 5, FIRST_STEP, max), 4 * MIB);
        // A configured step below the first one is the step from the start.
        assert_eq!(step_at(0, FIRST_STEP, 4096), 4096);
        assert_eq!(step_at(1 << 30, FIRST_STEP, 4096), 4096);
    }

    #[test]
    fn indexes_grow_to_what_the_log_can_need() {
        // Kafka's default interval: an entry per 4 KiB of batches at most, plus room for the
        // first and the final one.
        assert_eq!(index_bytes_for(0, 4096, 8, 10 << 20), 16);
        assert_eq!(index_bytes_for(32 << 20, 4096, 8, 10 << 20), (8190 + 2) * 8);
        // Interval 0: an entry per batch, and no batch is shorter than its header.
        assert_eq!(index_bytes_for(61 * 100, 0, 12, 10 << 20), 102 * 12);
        assert_eq!(index_bytes_for(1 << 30, 0, 8, 10 << 20), 10 << 20);
    }
}
