//! A partition set's store (docs/design.md, "Partition sets"): one raft log whose entries
//! span batches of several partitions, each partition's batches in its own log at a Kafka
//! partition's offsets. Driven through openraft's storage traits: entries written, read back
//! as one run per partition, replicated to another set, applied, truncated, purged, imaged and
//! installed; reopened after each; cut by a power failure at every file operation of a
//! persist (a record survives only with every run it names, every batch only with its
//! record); and damaged or mismatched files refused, naming them.

#[path = "one_disk/mod.rs"]
mod one_disk;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::{SimFs, SimOp};
use oncelog::Log;
use oncelog_raft::entry::{self, EntriesFile, Entry, Kind, Record, ENTRIES_FILE};
use oncelog_raft::store::{Image, LogStore, Partition, StateMachine, STATE_FILE};
use oncelog_raft::{synced_every_entry, Request, Response};
use one_disk::{env, log_config};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{EntryPayload, RaftLogReader, RaftSnapshotBuilder};

/// The partitions of the set.
const MEMBERS: usize = 3;

fn dir(root: &str, m: usize) -> PathBuf {
    Path::new(root).join(format!("t-{m}"))
}

/// A batch of producer `producer` (one per partition in these tests) at sequence `seq`.
fn batch(producer: i64, seq: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(producer, 0, seq);
    b.append(1_000 + i64::from(seq), None, Some(&[b'x'; 60][..]), &[]);
    b.append(1_001 + i64::from(seq), None, Some(&[b'y'; 60][..]), &[]);
    Bytes::from(b.build().unwrap())
}

/// Each partition's log as a replica runs it: synced at every entry, zeroed ahead, written
/// through its file (so a set's persist writes the logs back for one device flush).
fn open_logs(fs: &SimFs, root: &str) -> Result<Vec<Arc<Log>>, String> {
    (0..MEMBERS)
        .map(|m| {
            Log::open_in(env(fs), dir(root, m), synced_every_entry(log_config()))
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn open_set(fs: &SimFs, root: &str) -> Result<Arc<Partition>, String> {
    Partition::open_set(open_logs(fs, root)?, fs.as_dyn()).map(Arc::new)
}

/// Drops a set as a crash would: nothing flushed on the way out.
fn abandon(set: Arc<Partition>) {
    for log in set.logs() {
        log.abandon_on_drop();
    }
}

fn produce(index: u64, term: u64, batches: Vec<(u32, Bytes)>) -> Entry {
    Entry {
        log_id: entry::log_id(term, index),
        payload: EntryPayload::Normal(Request::Produce { batches, notice: 0 }),
    }
}

fn blank(index: u64, term: u64) -> Entry {
    Entry {
        log_id: entry::log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// Each log's batches: (base offset, last offset, producer, first sequence).
fn batches(log: &Log) -> Vec<(i64, i64, i64, i32)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let bytes = log.read(offset, 1 << 20).unwrap();
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            if b.last_offset() >= offset {
                out.push((
                    b.base_offset(),
                    b.last_offset(),
                    b.producer_id(),
                    b.base_sequence(),
                ));
                offset = b.last_offset() + 1;
            }
        }
    }
    out
}

fn every_log(set: &Partition) -> Vec<Vec<(i64, i64, i64, i32)>> {
    set.logs().iter().map(|l| batches(l)).collect()
}

/// The runs of a read-back entry (`None` for a blank or membership entry).
fn runs(e: &Entry) -> Option<Vec<Bytes>> {
    match &e.payload {
        EntryPayload::Normal(Request::Stored(parts)) => Some(parts.clone()),
        EntryPayload::Normal(other) => panic!("read back as {other:?}"),
        _ => None,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_set_writes_each_partition_at_its_offsets_and_replicates_reads_back_truncates_purges_and_installs(
) {
    runtime().block_on(async {
        let fs = SimFs::new();
        let set = open_set(&fs, "/sim/a").unwrap();
        let mut store = LogStore(Arc::clone(&set));
        store
            .blocking_append([
                blank(1, 1),
                produce(
                    2,
                    1,
                    vec![(0, batch(1, 0)), (2, batch(3, 0)), (0, batch(1, 2))],
                ),
                produce(3, 1, vec![(1, batch(2, 0))]),
                blank(4, 2),
                produce(5, 2, vec![(2, batch(3, 2)), (1, batch(2, 2))]),
            ])
            .await
            .unwrap();
        // Each partition's batches at a Kafka partition's offsets, in raft order.
        let held = every_log(&set);
        assert_eq!(
            held,
            vec![
                vec![(0, 1, 1, 0), (2, 3, 1, 2)],
                vec![(0, 1, 2, 0), (2, 3, 2, 2)],
                vec![(0, 1, 3, 0), (2, 3, 3, 2)],
            ]
        );
        // Read back: one run per partition, empty where the entry wrote nothing.
        let read = store.try_get_log_entries(1..6).await.unwrap();
        assert_eq!(read.len(), 5);
        let lens: Vec<Option<Vec<usize>>> = read
            .iter()
            .map(|e| runs(e).map(|r| r.iter().map(|b| b.len()).collect()))
            .collect();
        let one = batch(1, 0).len();
        assert_eq!(
            lens,
            vec![
                None,
                Some(vec![2 * one, 0, one]),
                Some(vec![0, one, 0]),
                None,
                Some(vec![0, one, one]),
            ]
        );

        // A follower's set takes the entries as read back, batch for batch.
        let follower = open_set(&fs, "/sim/b").unwrap();
        let mut fstore = LogStore(Arc::clone(&follower));
        fstore.blocking_append(read.clone()).await.unwrap();
        assert_eq!(every_log(&follower), held);
        // A replicated entry naming another number of partitions is refused, changing nothing.
        let wrong = Entry {
            log_id: entry::log_id(2, 6),
            payload: EntryPayload::Normal(Request::Stored(vec![Bytes::new(), Bytes::new()])),
        };
        let e = fstore.blocking_append([wrong]).await.unwrap_err();
        assert!(e.to_string().contains("2 partitions"), "{e}");

        // Applied: each partition's high watermark at the entry's end there.
        let mut sm = StateMachine(Arc::clone(&set));
        let answers = sm.apply(read[..3].to_vec()).await.unwrap();
        assert_eq!(answers.len(), 3);
        assert!(matches!(answers[1], Response::Answers(ref a) if a.len() == 3));
        let hws: Vec<i64> = set.logs().iter().map(|l| l.high_watermark()).collect();
        assert_eq!(hws, vec![4, 2, 2]);

        // Reopened: the same entries.
        drop(store);
        drop(sm);
        let set = reopen(set, &fs, "/sim/a");
        let mut store = LogStore(Arc::clone(&set));
        let again = store.try_get_log_entries(1..6).await.unwrap();
        assert_eq!(again, read);
        assert_eq!(every_log(&set), held);

        // Truncated from entry 5: each partition cut where it starts there.
        store.truncate(entry::log_id(2, 5)).await.unwrap();
        let cut = every_log(&set);
        assert_eq!(cut[0], held[0]);
        assert_eq!(cut[1], held[1][..1].to_vec());
        assert_eq!(cut[2], held[2][..1].to_vec());
        drop(store);
        let set = reopen(set, &fs, "/sim/a");
        assert_eq!(every_log(&set), cut);
        let mut store = LogStore(Arc::clone(&set));
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(entry::log_id(2, 4))
        );

        // Purged up to entry 2: the purge point's end in each partition, kept across a reopen.
        store.purge(entry::log_id(1, 2)).await.unwrap();
        let ends: Vec<i64> = (0..MEMBERS).map(|m| set.purge_end_in(m)).collect();
        assert_eq!(ends, vec![4, 0, 2]);
        drop(store);
        let set = reopen(set, &fs, "/sim/a");
        let ends: Vec<i64> = (0..MEMBERS).map(|m| set.purge_end_in(m)).collect();
        assert_eq!(ends, vec![4, 0, 2]);
        let state =
            String::from_utf8(fs.read_live(&dir("/sim/a", 0).join(STATE_FILE)).unwrap()).unwrap();
        assert!(state.contains("more_end_offsets"), "{state}");

        // An image of the set as of entry 4 (applied), installed on a fresh set: the same
        // batches in each partition, and the purge point's ends.
        let mut sm = StateMachine(Arc::clone(&set));
        sm.apply(
            LogStore(Arc::clone(&set))
                .try_get_log_entries(3..5)
                .await
                .unwrap(),
        )
        .await
        .unwrap();
        sm.build_snapshot().await.unwrap();
        let snapshot = sm.get_current_snapshot().await.unwrap().unwrap();
        let fresh = open_set(&fs, "/sim/c").unwrap();
        let mut fsm = StateMachine(Arc::clone(&fresh));
        fsm.install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap();
        drop(fsm);
        assert_eq!(every_log(&fresh), cut);
        let fresh = reopen(fresh, &fs, "/sim/c");
        assert_eq!(every_log(&fresh), cut);
        let ends: Vec<i64> = (0..MEMBERS).map(|m| fresh.purge_end_in(m)).collect();
        assert_eq!(ends, vec![4, 2, 2]);
        let hws: Vec<i64> = fresh.logs().iter().map(|l| l.high_watermark()).collect();
        assert_eq!(hws, vec![4, 2, 2]);
    });
}

/// Closes `set` (its logs flushed) and opens it again.
fn reopen(set: Arc<Partition>, fs: &SimFs, root: &str) -> Arc<Partition> {
    let set = Arc::into_inner(set).expect("the set is not shared");
    drop(set);
    open_set(fs, root).unwrap()
}

/// Writes `entries` set entries from index `from`, entry `i` a batch for partition
/// `i % MEMBERS` and one for `(i + 1) % MEMBERS` (each of a producer of its own); answers how
/// many were reported persisted.
async fn write_entries(set: &Arc<Partition>, from: u64, entries: u64) -> u64 {
    let mut store = LogStore(Arc::clone(set));
    for i in from..from + entries {
        let a = (i as usize % MEMBERS) as u32;
        let b = ((i as usize + 1) % MEMBERS) as u32;
        let producer = |m: u32| i as i64 * 10 + i64::from(m);
        let e = produce(
            i,
            1,
            vec![(a, batch(producer(a), 0)), (b, batch(producer(b), 0))],
        );
        if store.blocking_append([e]).await.is_err() {
            return i - from;
        }
    }
    entries
}

#[test]
fn a_set_persist_cut_at_any_file_operation_keeps_only_whole_entries() {
    runtime().block_on(async {
        for n in 1.. {
            let fs = SimFs::new();
            let set = open_set(&fs, "/sim/s").unwrap();
            LogStore(Arc::clone(&set))
                .blocking_append([blank(1, 1)])
                .await
                .unwrap();
            fs.fail_from(SimOp::Any, n, libc::EIO);
            let persisted = write_entries(&set, 2, 6).await;
            abandon(set);
            fs.clear_faults();
            fs.crash(n);
            let set = match open_set(&fs, "/sim/s") {
                Ok(s) => s,
                Err(e) => panic!("cut at op {n}: the set does not reopen: {e}"),
            };
            let mut store = LogStore(Arc::clone(&set));
            let last = store.get_log_state().await.unwrap().last_log_id;
            let last = last.map_or(0, |l| l.index);
            assert!(
                last > persisted,
                "cut at op {n}: {persisted} entries reported persisted, the log ends at {last}"
            );
            // Every entry kept has each of its runs whole, at the offsets that follow the
            // entry before it in each partition; nothing beyond the last entry.
            let read = store.try_get_log_entries(2..last + 1).await.unwrap();
            assert_eq!(read.len() as u64, last - 1, "cut at op {n}");
            let mut ends = vec![0i64; MEMBERS];
            for e in &read {
                let i = e.log_id.index as usize;
                let parts = runs(e).unwrap();
                for (m, part) in parts.iter().enumerate() {
                    let touched = m == i % MEMBERS || m == (i + 1) % MEMBERS;
                    let held: Vec<i64> = BatchIter::new(part)
                        .map(|b| b.unwrap().1.base_offset())
                        .collect();
                    if touched {
                        assert_eq!(held, vec![ends[m]], "cut at op {n}: entry {i} in {m}");
                        ends[m] += 2;
                    } else {
                        assert!(held.is_empty(), "cut at op {n}: entry {i} in {m}");
                    }
                }
            }
            let log_ends: Vec<i64> = set.logs().iter().map(|l| l.log_end_offset()).collect();
            assert_eq!(
                log_ends, ends,
                "cut at op {n}: batches beyond the last entry"
            );
            // The set goes on from there.
            let more = write_entries(&set, last + 1, 2).await;
            assert_eq!(more, 2, "cut at op {n}");
            abandon(set);
            if persisted == 6 {
                assert!(n > 10, "the sweep cut no persist");
                break;
            }
        }
    });
}

#[test]
fn a_set_refuses_records_purge_points_and_images_of_another_number_of_partitions() {
    runtime().block_on(async {
        let fs = SimFs::new();
        let set = open_set(&fs, "/sim/d").unwrap();
        write_entries(&set, 1, 2).await;
        drop(set);
        // A record naming two partitions in a set of three.
        let path = dir("/sim/d", 0).join(ENTRIES_FILE);
        let (file, read) = EntriesFile::open(fs.as_dyn(), &dir("/sim/d", 0)).unwrap();
        assert_eq!(read.len(), 2);
        let mut bytes = fs.read_live(&path).unwrap();
        bytes.truncate(file.len() as usize);
        drop(file);
        let extra = Record {
            index: 3,
            term: 1,
            spans: vec![(4, 4), (4, 4)],
            kind: Kind::Blank,
        };
        bytes.extend(extra.encode().unwrap());
        fs.as_dyn().write_atomically(&path, &bytes).unwrap();
        let e = open_set(&fs, "/sim/d").err().expect("refused");
        assert!(
            e.contains(ENTRIES_FILE) && e.contains("spans 2 partitions"),
            "{e}"
        );
        // As a group of one, the same files are refused too.
        let one = Log::open_in(env(&fs), dir("/sim/d", 0), log_config()).unwrap();
        let e = Partition::open(one, fs.as_dyn()).err().expect("refused");
        assert!(e.contains("partitions, the group has 1"), "{e}");

        // An image of a set of two for a set of three, and a single partition's image.
        let image = Image {
            start: 0,
            producers: Vec::new(),
            batches: Vec::new(),
        };
        let two = Image::encode_set(&[image.clone(), image.clone()]);
        let e = Image::decode_set(&two, 3).unwrap_err();
        assert!(e.contains("set of 2 partitions, for a set of 3"), "{e}");
        let e = Image::decode_set(&image.encode(), 3).unwrap_err();
        assert!(e.contains("bad magic"), "{e}");
        let three = Image::encode_set(&[image.clone(), image.clone(), image.clone()]);
        assert_eq!(Image::decode_set(&three, 3).unwrap().len(), 3);
        for cut in 0..three.len() {
            assert!(Image::decode_set(&three[..cut], 3).is_err(), "cut at {cut}");
        }
    });
}
