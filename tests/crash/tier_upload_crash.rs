//! Crashes at every file operation of a segment's upload to an object store kept on the same
//! simulated file system as the log, and of local retention after uploads (docs/design.md,
//! "Tiered storage": the crash rule). A seeded log of several flushed segments, some of them
//! uploaded already; then the upload of the next one (or local retention of everything the
//! manifest names) whose Nth file operation fails and every one after it, as a power cut would
//! (the log's reads and writes and the store's alike); then a crash that keeps a seeded choice
//! of what was not synced, and a reopen.
//!
//! After each crash every segment is local, or local and remote, or remote where the manifest
//! confirms it, never neither. After an upload: the log reopens with every batch it held, the
//! current manifest always reads (never torn), every segment it names has all six objects with
//! the recorded sizes and CRCs and its `.log` object holds the log's batches of those offsets
//! byte for byte; an upload that answered `Ok` is in it. After local retention: every batch
//! of the log reads back, from the log at and above its start and from the store below it,
//! byte for byte. After total retention over the remote segments: the current manifest names
//! no missing or different object, and every batch from the first offset the store or the log
//! holds reads back as written.
//!
//! Environment:
//! * `ONCELOG_TIER_CRASH_POINTS=<n>`: crash points (default 600).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;
use crate::common_tier::FsStore;

use std::path::PathBuf;
use std::sync::Arc;

use common_sim::{client_batch, describe_dir, open, sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchIter;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::tier::{self, SegmentObject, TierError, Uploaded};
use oncelog::{AppendOutcome, Log, LogConfig};

const DEFAULT_POINTS: u64 = 600;
pub(super) const T0: i64 = 1_700_000_000_000;
pub(super) const P: &str = "tier/topic-0";
const TEST: &str = "a_crash_at_any_file_operation_of_an_upload_leaves_the_segment_local_or_remote";

pub(super) struct Built {
    pub(super) fs: SimFs,
    pub(super) clock: Arc<StepClock>,
    pub(super) cfg: LogConfig,
    pub(super) log: Log,
    pub(super) store: FsStore,
    /// The segment to upload.
    pub(super) base: i64,
    /// Segments uploaded before it.
    pub(super) before: usize,
    pub(super) rng: SplitMix64,
}

/// Every batch from the log start to the log end.
pub(super) fn content(ctx: &Ctx, log: &Log) -> Vec<Vec<u8>> {
    let end = log.log_end_offset();
    let mut next = log.log_start_offset();
    let mut out = Vec::new();
    while next < end {
        let bytes = log
            .read(next, 1 << 20)
            .unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
        if bytes.is_empty() {
            ctx.fail(format!("empty read at {next} below the end {end}"));
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            next = b.last_offset() + 1;
            out.push(b.as_bytes().to_vec());
        }
    }
    out
}

/// The log's batches with offsets in `[base, end)`, back to back.
fn batches_in(batches: &[Vec<u8>], base: i64, end: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for b in batches {
        let batch = oncelog::format::RecordBatch::parse(b).unwrap();
        if batch.base_offset() >= base && batch.last_offset() < end {
            out.extend_from_slice(b);
        }
    }
    out
}

pub(super) fn build(seed: u64, ctx: &mut Ctx, uploaded_first: bool) -> Built {
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .segment_bytes((4 + rng.below(8) as usize) * 1024)
        .segment_index_bytes(96 + 12 * rng.below(20) as usize)
        .index_interval_bytes(rng.below(1024) as usize)
        // No background thread: the file operations are the same on every replay.
        .prefault_bytes(0)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let batches = 30 + rng.below(40);
    for i in 0..batches {
        let client = client_batch(
            1 + rng.below(6) as usize,
            rng.below(400) as usize,
            T0 + i as i64,
            None,
            i as u8,
        );
        match log.append(&client) {
            Ok(AppendOutcome::Appended(_)) => {}
            other => ctx.fail(format!("append {i}: {other:?}")),
        }
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
    let store = FsStore {
        fs: fs.as_dyn(),
        root: PathBuf::from("/remote"),
    };
    let segments = tier::uploadable_segments(&log);
    if segments.is_empty() {
        ctx.fail(format!("no segment to upload\n{}", describe_dir(&fs)));
    }
    let before = rng.below(segments.len() as u64) as usize + usize::from(uploaded_first);
    for &(base, _) in &segments[..before] {
        tier::upload_segment(&log, &store, P, base)
            .unwrap_or_else(|e| ctx.fail(format!("upload of {base} without faults: {e}")));
    }
    let base = segments.get(before).map_or(-1, |s| s.0);
    ctx.note(format!(
        "{cfg:?}\n{batches} batches, segments {segments:?}, {before} uploaded, uploading {base}\n{}",
        describe_dir(&fs)
    ));
    Built {
        fs,
        clock,
        cfg,
        log,
        store,
        base,
        before,
        rng,
    }
}

/// The crash rule, checked after a crash and a reopen.
fn check_after(
    ctx: &Ctx,
    (fs, store, before): (&SimFs, &FsStore, usize),
    log: &Log,
    want: &[Vec<u8>],
    uploaded: bool,
) {
    let seen = content(ctx, log);
    if seen != want {
        ctx.fail(format!(
            "the log lost batches: {} (want {})\n{}",
            seen.len(),
            want.len(),
            describe_dir(fs)
        ));
    }
    let manifest = match tier::read_manifest(store, P) {
        Ok(m) => m,
        Err(e) => ctx.fail(format!("the manifest after the crash: {e}")),
    };
    let named = manifest.as_ref().map_or(0, |m| m.segments.len());
    let least = before + usize::from(uploaded);
    if named < least || named > before + 1 {
        ctx.fail(format!(
            "the manifest names {named} segments; {before} were uploaded before, the upload answered \
             {uploaded}"
        ));
    }
    for s in manifest.iter().flat_map(|m| &m.segments) {
        for o in SegmentObject::ALL {
            let key = o.key(P, s.base_offset, s.end_offset, s.upload_id);
            let bytes = tier_object(ctx, store, &key);
            let want = s.object(o);
            if bytes.len() as u64 != want.size || crc32c::crc32c(&bytes) != want.crc32c {
                ctx.fail(format!(
                    "{key}: {} bytes, not the {} with CRC {:08x} the manifest names",
                    bytes.len(),
                    want.size,
                    want.crc32c
                ));
            }
            if o == SegmentObject::Log && bytes != batches_in(&seen, s.base_offset, s.end_offset) {
                ctx.fail(format!(
                    "{key}: not the log's batches of [{}, {})",
                    s.base_offset, s.end_offset
                ));
            }
        }
    }
}

pub(super) fn tier_object(ctx: &Ctx, store: &FsStore, key: &str) -> Vec<u8> {
    use oncelog::tier::RemoteStore;
    store
        .get(key)
        .unwrap_or_else(|e| ctx.fail(format!("an object the manifest names: {e}")))
}

fn crash_every_op(seed: u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, "tier_upload_crash", TEST);
    let b = build(seed, &mut ctx, false);
    let want = content(&ctx, &b.log);
    let ops_before = b.fs.counters().ops;
    match tier::upload_segment(&b.log, &b.store, P, b.base) {
        Ok(Uploaded::Uploaded { .. }) => {}
        other => ctx.fail(format!("the upload without faults: {other:?}")),
    }
    let ops = b.fs.counters().ops - ops_before;
    b.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "tier_upload_crash", TEST);
        let mut b = build(seed, &mut ctx, false);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = tier::upload_segment(&b.log, &b.store, P, b.base);
        ctx.note(format!("upload: {result:?}"));
        let uploaded = match &result {
            Ok(Uploaded::Uploaded { .. }) => true,
            Ok(other) => ctx.fail(format!("not uploaded nor failed: {other:?}")),
            Err(TierError::Remote { .. } | TierError::LocalFile { .. }) if n <= ops => false,
            Err(TierError::ProducerState { .. }) if n <= ops => false,
            Err(e) => ctx.fail(format!("the upload failed with {e} (kind {})", e.kind())),
        };
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {report:?}\n{}", describe_dir(&b.fs)));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                describe_dir(&b.fs)
            ))
        });
        check_after(&ctx, (&b.fs, &b.store, b.before), &log, &want, uploaded);
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_an_upload_leaves_the_segment_local_or_remote() {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_TIER_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "tier upload crash points",
        crash_every_op,
    );
    assert!(points > 0);
}

const RETENTION_TEST: &str =
    "a_crash_at_any_file_operation_of_local_retention_keeps_every_batch_local_or_remote";

/// Every batch from offset 0 to the log end, through `tier::read`: from the store below the
/// log start, from the log above it.
fn content_through_tier(ctx: &Ctx, log: &Log, store: &FsStore) -> Vec<Vec<u8>> {
    let end = log.log_end_offset();
    let mut next = 0;
    let mut out = Vec::new();
    while next < end {
        let bytes = tier::read(log, store, P, next, 1 << 20).unwrap_or_else(|e| {
            ctx.fail(format!(
                "read at {next} (log start {}): {e}",
                log.log_start_offset()
            ))
        });
        if bytes.is_empty() {
            ctx.fail(format!("empty read at {next} below the end {end}"));
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            next = b.last_offset() + 1;
            out.push(b.as_bytes().to_vec());
        }
    }
    out
}

pub(super) fn retain(b: &Built) -> Result<usize, TierError> {
    let all = tier::LocalRetention::new(None, Some(0));
    tier::enforce_local_retention(&b.log, &b.store, P, all, T0).map(|r| r.deleted.len())
}

fn crash_every_retention_op(seed: u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, "tier_upload_crash", RETENTION_TEST);
    let b = build(seed, &mut ctx, true);
    let want = content(&ctx, &b.log);
    let ops_before = b.fs.counters().ops;
    match retain(&b) {
        Ok(n) if n == b.before => {}
        other => ctx.fail(format!(
            "retention without faults, {} uploaded: {other:?}",
            b.before
        )),
    }
    let ops = b.fs.counters().ops - ops_before;
    if content_through_tier(&ctx, &b.log, &b.store) != want {
        ctx.fail("the batches read through tier::read differ, without a crash");
    }
    b.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "tier_upload_crash", RETENTION_TEST);
        let mut b = build(seed, &mut ctx, true);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = retain(&b);
        ctx.note(format!("local retention: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!(
                "local retention failed with no fault in it: {result:?}"
            ));
        }
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {report:?}\n{}", describe_dir(&b.fs)));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                describe_dir(&b.fs)
            ))
        });
        let seen = content_through_tier(&ctx, &log, &b.store);
        if seen != want {
            ctx.fail(format!(
                "batches lost or changed: {} read back (want {}), log start {}\n{}",
                seen.len(),
                want.len(),
                log.log_start_offset(),
                describe_dir(&b.fs)
            ));
        }
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_local_retention_keeps_every_batch_local_or_remote() {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_TIER_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "tier local retention crash points",
        crash_every_retention_op,
    );
    assert!(points > 0);
}

const REMOTE_RETENTION_TEST: &str =
    "a_crash_at_any_file_operation_of_remote_retention_leaves_no_manifest_naming_a_missing_object";

/// Every remote segment the current manifest names has its six objects as recorded, and every
/// batch from the first offset the store or the log holds reads back as it was written.
fn check_remote_consistent(ctx: &Ctx, log: &Log, store: &FsStore, want: &[Vec<u8>]) {
    let manifest = tier::read_manifest(store, P)
        .unwrap_or_else(|e| ctx.fail(format!("the manifest after the crash: {e}")));
    for s in manifest.iter().flat_map(|m| &m.segments) {
        for o in SegmentObject::ALL {
            let key = o.key(P, s.base_offset, s.end_offset, s.upload_id);
            let bytes = tier_object(ctx, store, &key);
            if oncelog::tier::ObjectDigest::of(&bytes) != s.object(o) {
                ctx.fail(format!("{key}: not the object the manifest names"));
            }
        }
    }
    let first = manifest
        .as_ref()
        .and_then(|m| m.segments.first())
        .map_or(log.log_start_offset(), |s| s.base_offset);
    let end = log.log_end_offset();
    let mut next = first;
    let mut seen = Vec::new();
    while next < end {
        let bytes = tier::read(log, store, P, next, 1 << 20)
            .unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            next = b.last_offset() + 1;
            seen.push(b.as_bytes().to_vec());
        }
    }
    let tail: Vec<Vec<u8>> = want
        .iter()
        .filter(|b| {
            oncelog::format::RecordBatch::parse(b)
                .unwrap()
                .base_offset()
                >= first
        })
        .cloned()
        .collect();
    if seen != tail {
        ctx.fail(format!(
            "from offset {first}: {} batches read back, {} written",
            seen.len(),
            tail.len()
        ));
    }
}

/// Local retention of everything uploaded, then total retention a week and a day later (every
/// remote-only segment expired under the default seven days).
fn crash_every_remote_retention_op(seed: u64) -> u64 {
    let later = T0 + 8 * 24 * 3_600_000;
    let setup = |ctx: &mut Ctx| {
        let b = build(seed, ctx, true);
        retain(&b).unwrap_or_else(|e| ctx.fail(format!("local retention: {e}")));
        b
    };
    let mut ctx = Ctx::in_file(seed, "tier_upload_crash", REMOTE_RETENTION_TEST);
    let b = setup(&mut ctx);
    let ops_before = b.fs.counters().ops;
    match tier::enforce_remote_retention(&b.log, &b.store, P, later) {
        Ok(r) if r.removed.len() == b.before => {}
        other => ctx.fail(format!("remote retention without faults: {other:?}")),
    }
    let ops = b.fs.counters().ops - ops_before;
    b.log.abandon();
    // The batches as written: what the log held before any retention.
    let mut ctx0 = Ctx::in_file(seed, "tier_upload_crash", REMOTE_RETENTION_TEST);
    let b0 = build(seed, &mut ctx0, true);
    let written = content(&ctx0, &b0.log);
    b0.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "tier_upload_crash", REMOTE_RETENTION_TEST);
        let mut b = setup(&mut ctx);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = tier::enforce_remote_retention(&b.log, &b.store, P, later);
        ctx.note(format!("remote retention: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!(
                "remote retention failed with no fault in it: {result:?}"
            ));
        }
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {report:?}\n{}", describe_dir(&b.fs)));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                describe_dir(&b.fs)
            ))
        });
        check_remote_consistent(&ctx, &log, &b.store, &written);
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_remote_retention_leaves_no_manifest_naming_a_missing_object() {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_TIER_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "tier remote retention crash points",
        crash_every_remote_retention_op,
    );
    assert!(points > 0);
}
