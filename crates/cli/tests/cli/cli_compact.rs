//! `oncelog compact DIR [--dry-run] [--now MS] [--json]` run as a user would: the dry run
//! reports what a round would remove and changes nothing; the round removes it, keeps the
//! latest value of each key at its offset, and says so in text and JSON; a corrupt batch is
//! refused with exit 1 and nothing changed.

use crate::common_cli;

use std::path::Path;

use common_cli::{json_lines, run, stdout};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{CleanupPolicy, Log, LogConfig};

const T: i64 = 1_700_000_000_000;

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(2048)
        .cleanup_policy(CleanupPolicy::Compact)
        .build()
        .unwrap()
}

/// 120 one-record batches over 6 keys, closed.
fn log_with_versions(dir: &Path) {
    let log = Log::open(dir, config()).unwrap();
    for i in 0..120 {
        let mut b = BatchBuilder::new();
        b.append(
            T + i,
            Some(format!("key{}", i % 6).as_bytes()),
            Some(format!("value {i} padding padding").as_bytes()),
            &[],
        );
        log.append(&b.build().unwrap()).unwrap();
    }
    log.close().unwrap();
}

fn records(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let log = Log::open(dir, config()).unwrap();
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            let buf = b.records_buf().unwrap();
            for r in b.iter_records(&buf) {
                let r = r.unwrap();
                out.push((r.offset, r.key.unwrap().to_vec()));
            }
            next = b.last_offset() + 1;
        }
    }
    log.close().unwrap();
    out
}

#[test]
fn dry_run_then_compact_in_text_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("topic-0");
    log_with_versions(&dir);
    let before = records(&dir);
    let d = dir.to_str().unwrap();
    let now = (T + 1000).to_string();

    let o = run(&["compact", d, "--dry-run", "--now", &now, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["operation"], "compact");
    assert_eq!(v["dry_run"], true);
    let would_remove = v["records_removed"].as_u64().unwrap();
    assert!(would_remove > 50, "{v}");
    assert_eq!(records(&dir), before, "a dry run changes nothing");

    let o = run(&["compact", d, "--now", &now]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(text.contains(&format!("removed {would_remove}")), "{text}");
    assert!(
        text.contains("tombstones:") && text.contains("bytes:"),
        "{text}"
    );
    let after = records(&dir);
    assert_eq!(after.len(), before.len() - would_remove as usize);
    // Every key's latest offset is still there.
    for k in 0..6 {
        let key = format!("key{k}").into_bytes();
        let last = before.iter().filter(|r| r.1 == key).map(|r| r.0).max();
        assert!(after.iter().any(|r| Some(r.0) == last));
    }

    // Nothing dirty any more: a second run removes nothing.
    let o = run(&["compact", d, "--now", &now, "--json"]);
    assert!(o.status.success());
    assert_eq!(json_lines(&o)[0]["records_removed"], 0);
}

#[test]
fn a_corrupt_batch_is_refused_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("topic-0");
    log_with_versions(&dir);
    // A record length that lies, in the first batch, with a CRC to match.
    let seg = dir.join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let size = oncelog::format::RecordBatch::parse(&bytes).unwrap().size();
    bytes[61] = 0x7f;
    oncelog::format::batch::rewrite_crc(&mut bytes[..size]);
    std::fs::write(&seg, &bytes).unwrap();
    let o = run(&["compact", dir.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["error"], "compaction_corrupt", "{v}");
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}

/// A compacted transactional log as an operator meets it: `compact` of a log with aborted
/// transactions, then `verify` (it said the healthy directory was damaged and advised
/// `recover --deep`), then `recover --deep` (which lost in-window retries): the directory
/// verifies clean before and after, and every retry in a window is still a duplicate.
#[test]
fn a_compacted_log_with_aborted_transactions_verifies_clean_and_recover_deep_keeps_dedup() {
    use oncelog::{AppendOutcome, TxnMarker};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txn-0");
    let log = Log::open(&dir, config()).unwrap();
    let mut sent: Vec<(Vec<u8>, i64)> = Vec::new();
    for round in 0..12i32 {
        for pid in 1..=2i64 {
            let mut b = BatchBuilder::new()
                .producer(pid, 0, round * 2)
                .transactional(true);
            for i in 0..2 {
                let key = format!("key{}", (round + i) % 4);
                b.append(
                    T,
                    Some(key.as_bytes()),
                    Some(b"transactional value padding"),
                    &[],
                );
            }
            let client = b.build().unwrap();
            match log.append(&client).unwrap() {
                AppendOutcome::Appended(a) => sent.push((client, a.first_offset)),
                other => panic!("{other:?}"),
            }
        }
        for pid in 1..=2i64 {
            let marker = if (round + pid as i32) % 3 == 0 {
                TxnMarker::abort(pid, 0, 0)
            } else {
                TxnMarker::commit(pid, 0, 0)
            };
            log.append_marker(&marker).unwrap();
        }
    }
    for i in 0..40 {
        let mut b = BatchBuilder::new();
        b.append(
            T,
            Some(format!("plain{}", i % 3).as_bytes()),
            Some(b"plain value padding"),
            &[],
        );
        log.append(&b.build().unwrap()).unwrap();
    }
    log.close().unwrap();
    let d = dir.to_str().unwrap();
    let o = run(&["compact", d, "--now", &T.to_string(), "--json"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        json_lines(&o)[0]["aborted_records_removed"]
            .as_u64()
            .unwrap()
            > 0
    );
    let o = run(&["verify", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let o = run(&["recover", "--deep", d]);
    assert!(o.status.success(), "{o:?}");
    let o = run(&["verify", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let log = Log::open(&dir, config()).unwrap();
    // The last 5 batches of each producer: its dedup window.
    for pid in 1..=2i64 {
        let mine: Vec<&(Vec<u8>, i64)> = sent
            .iter()
            .filter(|(c, _)| {
                oncelog::format::RecordBatch::parse(c)
                    .unwrap()
                    .producer_id()
                    == pid
            })
            .collect();
        for (client, first) in mine.iter().rev().take(5) {
            match log.append(client).unwrap() {
                AppendOutcome::Duplicate(dup) => assert_eq!(dup.first_offset, *first),
                other => panic!("producer {pid}: retry of {first} answered {other:?}"),
            }
        }
    }
    log.close().unwrap();
}
