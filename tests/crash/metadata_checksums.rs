//! The engine's own metadata carries checksums, and what the checkpoint vouches for can be
//! checked (docs/format.md "Checkpoint"):
//!
//! - a damaged `oncelog.checkpoint` (one flipped bit) is damage, never an instruction: the
//!   log is validated as if it had none, `verify` reports it, a processed-id store forgets
//!   nothing;
//! - a missing or altered `.txnindex` of a sealed segment is noticed on open (its length and
//!   CRC-32C are in the checkpoint) and rebuilt: aborted data is never served as committed;
//! - a batch header field no CRC covers (a base offset moved into a compaction gap) is found
//!   by `verify` and deep recovery through the header digest of the sealed segment.
//!
//! The sweep flips bits of the checkpoint and of each `.txnindex`, and of the CRC-uncovered
//! header bytes of the batches (every bit with `ONCELOG_CHECKSUM_SWEEP=full`, a sample by
//! default), and checks that nothing is ever silently wrong:
//! an open refuses with a typed error and changes nothing, or recovers exactly the true
//! content (batches at their offsets, and what read_committed returns); `verify` reports
//! every change.

use crate::common;

use std::path::{Path, PathBuf};

use common::{copy_dir, dir_contents, env_with, TestClock, T0};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::RealFs;
use oncelog::log::checkpoint;
use oncelog::processed::{Position, ProcessedConfig, ProcessedStore};
use oncelog::verify::verify_dir;
use oncelog::{
    AppendOutcome, CleanupPolicy, Damage, IsolationLevel, Log, LogConfig, OpenError, RecoveryMode,
    TxnMarker,
};
use oncelog::{BadMetadataFile, MetadataFile};

fn config(mode: RecoveryMode, deep: bool) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(2048)
        .segment_index_bytes(4096)
        .index_interval_bytes(256)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .recovery_mode(mode)
        .deep_recovery(deep)
        .build()
        .unwrap()
}

fn open(dir: &Path, mode: RecoveryMode, deep: bool) -> Result<Log, OpenError> {
    Log::open_in(env_with(TestClock::new(T0)), dir, config(mode, deep))
}

fn keyed(key: &str, value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(T0, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
    b.build().unwrap()
}

fn txn_batch(pid: i64, seq: i32, key: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(true);
    for r in 0..2 {
        b.append(
            T0,
            Some(format!("{key}-{r}").as_bytes()),
            Some(b"txn value"),
            &[],
        );
    }
    b.build().unwrap()
}

fn append(log: &Log, batch: &[u8]) {
    match log.append(batch).unwrap() {
        AppendOutcome::Appended(_) => {}
        other => panic!("{other:?}"),
    }
}

/// Aborted and committed transactions of two producers, interleaved with keyed records.
fn transactions(log: &Log, round: i32, seq: &mut [i32; 2], pids: [i64; 2]) {
    for (i, pid) in pids.into_iter().enumerate() {
        for _ in 0..3 {
            append(log, &txn_batch(pid, seq[i], &format!("t{pid}-{round}")));
            seq[i] += 2;
        }
    }
    log.append_marker(&TxnMarker::abort(pids[0], 0, 0)).unwrap();
    log.append_marker(&TxnMarker::commit(pids[1], 0, 0))
        .unwrap();
    for i in 0..6 {
        append(
            log,
            &keyed(&format!("k{}", i % 3), "filler filler filler filler"),
        );
    }
}

/// The content a recovery must give back: every batch with its offsets and bytes, and the
/// offsets read_committed returns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Content {
    batches: Vec<(i64, i64, Vec<u8>)>,
    committed: Vec<i64>,
    log_start: i64,
    log_end: i64,
}

fn content(log: &Log) -> Result<Content, String> {
    let batches = batches(log)?;
    let mut committed = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let f = log
            .fetch_isolated(next, 1 << 20, IsolationLevel::ReadCommitted)
            .map_err(|e| format!("read_committed at {next}: {e}"))?;
        if f.bytes.is_empty() {
            break;
        }
        for r in f.records() {
            committed.push(r.map_err(|e| format!("{e:?}"))?.offset);
        }
        next = f.next_offset;
    }
    Ok(Content {
        batches,
        committed,
        log_start: log.log_start_offset(),
        log_end: log.log_end_offset(),
    })
}

/// Every batch from the log start, with its offsets and bytes.
#[allow(clippy::type_complexity)]
fn batches(log: &Log) -> Result<Vec<(i64, i64, Vec<u8>)>, String> {
    let mut batches = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log
            .read(next, 1 << 20)
            .map_err(|e| format!("read at {next}: {e}"))?;
        if bytes.is_empty() {
            return Err(format!("empty read at {next}"));
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.map_err(|e| format!("{e:?}"))?;
            batches.push((b.base_offset(), b.last_offset(), b.as_bytes().to_vec()));
            next = b.last_offset() + 1;
        }
    }
    Ok(batches)
}

struct Fixture {
    dir: tempfile::TempDir,
    truth: Content,
    baseline: Vec<(String, Option<usize>, &'static str)>,
}

impl Fixture {
    /// Sealed segments with aborted transactions, compacted ones with gaps between batches,
    /// then more transactions in sealed segments the compaction did not reach; closed cleanly.
    fn new() -> Fixture {
        let mut f = Fixture::build();
        // Each check below looks for what the damage makes `verify` report beyond this: the
        // healthy directory (compacted, with aborted transactions) verifies clean.
        f.baseline = problems(f.path());
        assert!(f.baseline.is_empty(), "{:?}", f.baseline);
        // The sweeps accept refusals: the undamaged directory must open, deep or not, to the
        // truth, or every refusal would be a pass.
        for deep in [false, true] {
            let copy = f.copy();
            let log = open(copy.path(), RecoveryMode::AbsoluteConsistency, deep).unwrap();
            log.flush().unwrap();
            assert_eq!(content(&log).unwrap(), f.truth, "deep {deep}");
        }
        f
    }

    /// What `verify` reports of `dir` that it does not report of the fixture.
    fn new_problems(&self, dir: &Path) -> Vec<&'static str> {
        problems(dir)
            .into_iter()
            .filter(|p| !self.baseline.contains(p))
            .map(|p| p.2)
            .collect()
    }

    fn build() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), RecoveryMode::default(), false).unwrap();
        let mut seq = [0, 0];
        for round in 0..4 {
            transactions(&log, round, &mut seq, [9, 10]);
        }
        log.flush().unwrap();
        log.maintenance().compact(T0).unwrap();
        for round in 4..8 {
            transactions(&log, round, &mut seq, [9, 10]);
        }
        log.flush().unwrap();
        let truth = content(&log).unwrap();
        log.close().unwrap();
        assert!(
            truth.committed.len() + 20
                < truth.batches.iter().map(|b| b.1 - b.0 + 1).sum::<i64>() as usize,
            "aborted records are hidden from read_committed"
        );
        Fixture {
            dir,
            truth,
            baseline: Vec::new(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn files(&self, ext: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        v.sort();
        v
    }

    /// A copy of the directory to damage.
    fn copy(&self) -> tempfile::TempDir {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(self.path(), copy.path());
        copy
    }

    /// The sealed segments' batches: (segment path, position, base offset, previous batch's
    /// last offset in the segment).
    fn batch_headers(&self) -> Vec<(PathBuf, usize, i64, Option<i64>)> {
        let mut out = Vec::new();
        for path in self.files("log") {
            let data = std::fs::read(&path).unwrap();
            let mut previous = None;
            for item in BatchIter::new(&data) {
                let (at, b) = item.unwrap();
                out.push((path.clone(), at, b.base_offset(), previous));
                previous = Some(b.last_offset());
            }
        }
        out
    }
}

fn flip_bit(path: &Path, at: usize, bit: u8) {
    let mut data = std::fs::read(path).unwrap();
    data[at] ^= 1 << bit;
    std::fs::write(path, data).unwrap();
}

/// What `verify` reports: (file name, position, kind).
fn problems(dir: &Path) -> Vec<(String, Option<usize>, &'static str)> {
    verify_dir(&RealFs, dir)
        .unwrap()
        .problems
        .iter()
        .map(|p| {
            let name = p.file.file_name().unwrap_or_default();
            (name.to_string_lossy().into_owned(), p.position, p.kind)
        })
        .collect()
}

/// The contract for one damaged directory: a refusal is typed and changes nothing; an open
/// gives back exactly the true content.
fn refused_or_exact(dir: &Path, mode: RecoveryMode, deep: bool, truth: &Content, ctx: &str) {
    let before = dir_contents(dir);
    match open(dir, mode, deep) {
        Ok(log) => {
            // The high watermark (what read_committed reads up to) is the durable end for a
            // standalone log: a damaged checkpoint's is lost until the next flush.
            if log.recovery_report().checkpoint_damaged.is_some() {
                log.flush().unwrap();
            }
            let got = content(&log).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            if got != *truth {
                let first = got
                    .batches
                    .iter()
                    .zip(&truth.batches)
                    .position(|(a, b)| a != b);
                panic!(
                    "{ctx}: recovered other content (start {} end {}, truth {} {}; {} batches, \
                     truth {}; first difference at batch {first:?}; committed {} truth {})\n\
                     report: {:?}",
                    got.log_start,
                    got.log_end,
                    truth.log_start,
                    truth.log_end,
                    got.batches.len(),
                    truth.batches.len(),
                    got.committed.len(),
                    truth.committed.len(),
                    log.recovery_report()
                );
            }
            // The copy is thrown away: no close (and its syncs) needed.
            log.abandon();
        }
        Err(
            e @ (OpenError::Refused { .. }
            | OpenError::BadMetadataFile(BadMetadataFile {
                file: MetadataFile::Checkpoint,
                ..
            })),
        ) => {
            assert_eq!(
                dir_contents(dir),
                before,
                "{ctx}: the refusal ({e}) changed files"
            );
        }
        Err(e) => panic!("{ctx}: untyped failure: {e}"),
    }
}

// Fault 7: one bit of the checkpoint.

#[test]
fn a_flipped_log_start_in_the_checkpoint_hides_nothing_and_is_reported() {
    let f = Fixture::new();
    let dir = f.copy();
    let p = dir.path().join(checkpoint::FILE_NAME);
    let text = std::fs::read_to_string(&p).unwrap();
    let at = text.find("log_start_offset 0").unwrap() + "log_start_offset ".len();
    // '0' → '1': the log would start at offset 1.
    flip_bit(&p, at, 0);
    assert!(f.new_problems(dir.path()).contains(&"damaged_checkpoint"));

    // Absolute consistency refuses any damage; nothing changes.
    let before = dir_contents(dir.path());
    match open(dir.path(), RecoveryMode::AbsoluteConsistency, false) {
        Err(OpenError::BadMetadataFile(
            bad @ BadMetadataFile {
                file: MetadataFile::Checkpoint,
                ..
            },
        )) => {
            assert!(bad.damaged, "{bad}");
            assert_eq!(bad.kind(), "damaged_checkpoint");
        }
        other => panic!("{:?}", other.map(|l| l.log_start_offset())),
    }
    assert_eq!(dir_contents(dir.path()), before);

    // The default mode validates everything instead, and writes a sound checkpoint.
    let log = open(dir.path(), RecoveryMode::default(), false).unwrap();
    log.flush().unwrap();
    let report = log.recovery_report().clone();
    assert!(report.checkpoint_damaged.is_some(), "{report:?}");
    assert!(!report.checkpoint_found);
    assert_eq!(log.log_start_offset(), 0);
    let got = content(&log).unwrap();
    assert_eq!(got.batches, f.truth.batches);
    assert_eq!(got.committed, f.truth.committed);
    log.close().unwrap();
    assert_eq!(f.new_problems(dir.path()), Vec::<&str>::new());
    assert!(checkpoint::read(&RealFs, dir.path()).unwrap().is_ok());
}

#[test]
fn a_flipped_bit_in_a_processed_store_checkpoint_forgets_no_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-3");
    let cfg = ProcessedConfig::default().with_log(
        ProcessedConfig::default()
            .log
            .into_builder()
            .segment_bytes(4096)
            .segment_index_bytes(4096)
            .build()
            .unwrap(),
    );
    let ids: Vec<String> = (0..60).map(|i| format!("order-{i}")).collect();
    {
        let store = ProcessedStore::open(&dir, cfg.clone()).unwrap();
        for (i, id) in ids.iter().enumerate() {
            let at = Position {
                source: "orders-3",
                offset: i as i64 + 1,
            };
            store.record(id.as_bytes(), at, b"effect").unwrap();
        }
        store.close().unwrap();
    }
    let p = dir.join(checkpoint::FILE_NAME);
    let pristine = std::fs::read(&p).unwrap();
    let at = String::from_utf8_lossy(&pristine)
        .find("log_start_offset 0")
        .unwrap()
        + "log_start_offset ".len();
    let mut cases: Vec<(usize, u8)> = vec![(at, 0)];
    // And a bit of every other byte of the file (each open syncs: the log's sweep below flips
    // every bit of the same format).
    cases.extend((0..pristine.len()).map(|i| (i, (i % 8) as u8)));
    for (i, bit) in cases {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(&dir, copy.path());
        flip_bit(&copy.path().join(checkpoint::FILE_NAME), i, bit);
        match ProcessedStore::open(copy.path(), cfg.clone()) {
            Ok(store) => {
                for id in &ids {
                    assert!(
                        store.is_handled(id.as_bytes()),
                        "byte {i} bit {bit}: {id} forgotten"
                    );
                }
                assert_eq!(store.position("orders-3"), Some(ids.len() as i64));
            }
            Err(e) => {
                // A refusal is fine; forgetting is not.
                let _ = e.to_string();
            }
        }
    }
}

// Fault 4: a missing or altered `.txnindex`.

/// The `.txnindex` files of sealed segments that hold entries.
fn txn_indexes(f: &Fixture) -> Vec<PathBuf> {
    let logs = f.files("log");
    let last = logs.last().cloned().unwrap().with_extension("txnindex");
    f.files("txnindex")
        .into_iter()
        .filter(|p| *p != last && std::fs::metadata(p).unwrap().len() > 0)
        .collect()
}

#[test]
fn a_deleted_txnindex_never_shows_aborted_records_as_committed() {
    let f = Fixture::new();
    let indexes = txn_indexes(&f);
    assert!(indexes.len() >= 2, "{indexes:?}");
    for index in indexes {
        let dir = f.copy();
        let path = dir.path().join(index.file_name().unwrap());
        std::fs::remove_file(&path).unwrap();
        assert!(
            f.new_problems(dir.path())
                .contains(&"txn_index_digest_mismatch"),
            "{}",
            path.display()
        );
        refused_or_exact(
            dir.path(),
            RecoveryMode::default(),
            false,
            &f.truth,
            &format!("{} removed", path.display()),
        );
        // What was rebuilt holds: the checkpoint records it now.
        assert!(!f
            .new_problems(dir.path())
            .contains(&"txn_index_digest_mismatch"));
    }
}

#[test]
fn a_flipped_producer_id_in_a_txnindex_is_rebuilt_from_the_log() {
    let f = Fixture::new();
    for index in txn_indexes(&f) {
        let dir = f.copy();
        let path = dir.path().join(index.file_name().unwrap());
        // The low byte of the first entry's producer id (bytes 2..10).
        flip_bit(&path, 9, 0);
        assert!(f
            .new_problems(dir.path())
            .contains(&"txn_index_digest_mismatch"));
        refused_or_exact(
            dir.path(),
            RecoveryMode::default(),
            false,
            &f.truth,
            &format!("{} producer id flipped", path.display()),
        );
    }
}

// Fault 5: a batch moved into a compaction gap.

#[test]
fn a_batch_moved_into_a_compaction_gap_is_found_by_verify_and_deep_recovery() {
    let f = Fixture::new();
    // A batch after a gap, not its segment's last (whose move the segment's end would show).
    let headers = f.batch_headers();
    let (path, at, base, previous) = headers
        .windows(2)
        .find(|w| w[0].3.is_some_and(|p| w[0].2 > p + 1) && w[1].0 == w[0].0)
        .map(|w| w[0].clone())
        .expect("compaction left a gap inside a segment");
    let dir = f.copy();
    let path = dir.path().join(path.file_name().unwrap());
    let mut data = std::fs::read(&path).unwrap();
    let lowered = previous.unwrap() + 1;
    data[at..at + 8].copy_from_slice(&lowered.to_be_bytes());
    std::fs::write(&path, data).unwrap();
    let ctx = format!("batch at {base} moved to {lowered}");
    assert!(
        f.new_problems(dir.path()).contains(&"digest_mismatch"),
        "{ctx}"
    );
    for mode in [
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::AbsoluteConsistency,
    ] {
        match open(dir.path(), mode, true) {
            Err(OpenError::Refused { damage, .. }) => {
                assert!(
                    matches!(damage, Damage::DigestMismatch { .. }),
                    "{ctx}: {damage}"
                )
            }
            other => panic!("{ctx}: {mode:?}: {:?}", other.map(|l| l.log_end_offset())),
        }
    }
    // An ordinary open reads no batch of a recorded segment; one that must walk its frames
    // anyway (its offset index is gone) checks the digest on the way.
    let walked = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), walked.path());
    std::fs::remove_file(
        walked
            .path()
            .join(path.with_extension("index").file_name().unwrap()),
    )
    .unwrap();
    let walked_log = walked.path().join(path.file_name().unwrap());
    match open(walked.path(), RecoveryMode::default(), false) {
        // The digest, or, when the moved batch was the segment's last, the end it gives.
        Err(OpenError::Refused { damage, path, .. }) => {
            assert!(
                matches!(
                    damage,
                    Damage::DigestMismatch { .. } | Damage::EndDisagrees { .. }
                ),
                "{ctx}: {damage}"
            );
            assert_eq!(path.file_name(), walked_log.file_name(), "{ctx}");
        }
        other => panic!(
            "{ctx}: index removed: {:?}",
            other.map(|l| l.log_end_offset())
        ),
    }
    // Tolerate-any cuts from the segment: what is left is the truth's prefix.
    // (Batches only: a read_committed read at an offset in a compaction gap just below a last
    // stable offset that the cut lowered into the next gap is refused by the read path.)
    let log = open(dir.path(), RecoveryMode::TolerateAnyCorruption, true).unwrap();
    let got = batches(&log).unwrap_or_else(|e| panic!("{e}: {:?}", log.recovery_report()));
    assert!(got.len() < f.truth.batches.len(), "{ctx}");
    assert_eq!(got[..], f.truth.batches[..got.len()], "{ctx}");
}

// The sweep of the class.

/// Whether to flip every bit (`ONCELOG_CHECKSUM_SWEEP=full`) or, by default, two bits of every
/// byte of the metadata files and one bit of every header byte of every fourth batch (the
/// full sweep takes minutes).
fn full_sweep() -> bool {
    std::env::var("ONCELOG_CHECKSUM_SWEEP").is_ok_and(|v| v == "full")
}

/// The bits of byte `at` the sweep flips.
fn bits_of(at: usize, all: bool) -> Vec<u8> {
    match all {
        true => (0..8).collect(),
        false => vec![(at % 8) as u8, ((at + 4) % 8) as u8],
    }
}

#[test]
fn every_flipped_bit_of_the_checkpoint_and_txnindexes_is_refused_or_recovered_exactly() {
    let f = Fixture::new();
    let mut files = vec![f.path().join(checkpoint::FILE_NAME)];
    files.extend(txn_indexes(&f));
    let mut cases = 0;
    for file in files {
        let len = std::fs::metadata(&file).unwrap().len() as usize;
        for at in 0..len {
            for bit in bits_of(at, full_sweep()) {
                let dir = f.copy();
                let path = dir.path().join(file.file_name().unwrap());
                flip_bit(&path, at, bit);
                let ctx = format!("{} byte {at} bit {bit}", path.display());
                assert!(
                    !f.new_problems(dir.path()).is_empty(),
                    "{ctx}: verify finds nothing"
                );
                refused_or_exact(dir.path(), RecoveryMode::default(), false, &f.truth, &ctx);
                cases += 1;
            }
        }
    }
    assert!(cases > 600, "{cases}");
}

#[test]
fn every_flipped_bit_outside_the_batch_crcs_is_found_by_verify_and_deep_recovery() {
    let f = Fixture::new();
    let headers = f.batch_headers();
    assert!(headers.len() > 40, "{}", headers.len());
    let mut cases = 0;
    for (i, (file, at, base, _)) in headers.iter().enumerate() {
        // Bits of baseOffset, batchLength, partitionLeaderEpoch, magic and crc: all of them of
        // every third batch in the full sweep, else one of each byte of every fourth batch.
        let all = full_sweep() && i % 3 == 0;
        if !full_sweep() && i % 4 != 0 {
            continue;
        }
        for byte in 0..21 {
            let bits: Vec<u8> = if all {
                (0..8).collect()
            } else {
                vec![((byte + i / 4) % 8) as u8]
            };
            for bit in bits {
                let dir = f.copy();
                let path = dir.path().join(file.file_name().unwrap());
                flip_bit(&path, at + byte, bit);
                let ctx = format!("batch {base} header byte {byte} bit {bit}");
                assert!(
                    !f.new_problems(dir.path()).is_empty(),
                    "{ctx}: verify finds nothing"
                );
                refused_or_exact(dir.path(), RecoveryMode::default(), true, &f.truth, &ctx);
                cases += 1;
            }
        }
    }
    assert!(cases > 400, "{cases}");
}

/// Every segment the checkpoint on disk records, and whether each has a digest.
fn recorded_digests(dir: &Path) -> Vec<(i64, bool)> {
    let c = checkpoint::read(&RealFs, dir).unwrap().unwrap().unwrap();
    c.segments
        .unwrap()
        .iter()
        .map(|s| (s.base_offset, s.digest.is_some()))
        .collect()
}

#[track_caller]
fn all_digested(dir: &Path, what: &str) {
    let r = recorded_digests(dir);
    assert!(!r.is_empty(), "{what}: nothing recorded");
    assert!(r.iter().all(|(_, d)| *d), "{what}: {r:?}");
}

#[test]
fn every_path_that_records_a_segment_records_its_digest() {
    let f = Fixture::build();
    // Close (the last segment) and compaction (the cleaned ones), in the fixture.
    all_digested(f.path(), "after compaction and close");
    let dir = f.copy();
    // A clean open keeps the record's digests; the roll and flush of new segments add theirs.
    let log = open(dir.path(), RecoveryMode::default(), false).unwrap();
    let mut seq = [0, 0];
    transactions(&log, 100, &mut seq, [20, 21]);
    transactions(&log, 101, &mut seq, [20, 21]);
    log.flush().unwrap();
    all_digested(dir.path(), "after a roll and a flush");
    // A truncation into a sealed segment: the cut segment's digest is of what it keeps.
    let bases = log.maintenance().segment_base_offsets();
    let into = bases[bases.len() - 3] + 1;
    log.replica().truncate_to(into).unwrap();
    all_digested(dir.path(), "after a truncation");
    transactions(&log, 102, &mut [0, 0], [30, 31]);
    log.flush().unwrap();
    all_digested(dir.path(), "after the truncation's next flush");
    let before = content(&log).unwrap();
    log.abandon();
    // Recovery after a crash validates what was not recorded and records it with its digest.
    let log = open(dir.path(), RecoveryMode::default(), false).unwrap();
    assert_eq!(content(&log).unwrap().batches, before.batches);
    all_digested(dir.path(), "after recovery");
    log.close().unwrap();
    all_digested(dir.path(), "after close");
    // And all of them are the digests of what is there: a deep open finds nothing.
    let log = open(dir.path(), RecoveryMode::AbsoluteConsistency, true).unwrap();
    assert_eq!(content(&log).unwrap().batches, before.batches);
    log.close().unwrap();
}

/// Producer snapshots carry their own CRC-32C (over bytes 6..), but not over their version
/// field: every flipped bit of every snapshot the fixture holds is refused by the decoder or
/// the check against its name, never read as another state.
#[test]
fn every_flipped_bit_of_a_producer_snapshot_is_refused() {
    use oncelog::producer::snapshot::decode;
    let f = Fixture::build();
    let snapshots = f.files("snapshot");
    assert!(!snapshots.is_empty());
    for path in snapshots {
        let name = path.file_stem().unwrap().to_str().unwrap();
        let offset: i64 = name.parse().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let good = decode(&bytes).unwrap();
        good.check_at(offset).unwrap();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut changed = bytes.clone();
                changed[at] ^= 1 << bit;
                if let Ok(s) = decode(&changed) {
                    assert!(
                        s.check_at(offset).is_err() || s == good,
                        "{name} byte {at} bit {bit}: read as {s:?}"
                    );
                }
            }
        }
    }
}
