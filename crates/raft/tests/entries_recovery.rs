//! `raft-entries` and the log recover together (docs/design.md, "Entries beside the
//! batches"): appends cut by a power failure at every file operation in turn (oncelog's SimFs: a
//! crash keeps what was synced and a seeded choice of the rest, so a record can survive
//! without its batches and batches without their record) reopen with every acknowledged batch
//! at its offset and the offsets a Kafka partition's (the first record at 0, dense); and a
//! damaged or missing file is refused, naming it, with nothing changed.

#[path = "one_disk/mod.rs"]
mod one_disk;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::SimFs;
use oncelog::io::SimOp as OpKind;
use oncelog::{Log, LogConfig};
use oncelog_raft::entry::{Record, ENTRIES_FILE};
use oncelog_raft::network::mem::Router;
use oncelog_raft::{Replica, ReplicaConfig};
use one_disk::{env, open_partition, DIR};
use openraft::BasicNode;

fn batch(seq: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(1, 0, seq);
    b.append(1_000 + i64::from(seq), None, Some(&[b'x'; 100][..]), &[]);
    b.append(1_001 + i64::from(seq), None, Some(&[b'y'; 100][..]), &[]);
    Bytes::from(b.build().unwrap())
}

/// A one-replica group on `fs` that took `batches` batches (its acks).
async fn leader(fs: &SimFs, batches: i32) -> (Replica, Vec<(i64, i64)>) {
    leader_with(fs, batches, 4 * 1024).await
}

/// [`leader`] with segments of `segment_bytes`.
async fn leader_with(fs: &SimFs, batches: i32, segment_bytes: usize) -> (Replica, Vec<(i64, i64)>) {
    let router = Router::new(1);
    let config = ReplicaConfig {
        log: LogConfig::builder()
            .segment_bytes(segment_bytes)
            .build()
            .unwrap(),
        ..ReplicaConfig::default()
    };
    let replica = Replica::open(1, DIR, env(fs), config, router.endpoint(1))
        .await
        .unwrap();
    router.add(1, replica.raft().clone());
    replica
        .initialize(BTreeMap::from([(1, BasicNode::default())]))
        .await
        .unwrap();
    let mut acks = Vec::new();
    for seq in 0..batches {
        let mut tries = 0;
        loop {
            match replica.append(batch(seq * 2)).await {
                Ok(ack) => break acks.push(ack.offsets()),
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "append: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    (replica, acks)
}

/// The log's batches: (base offset, last offset, first sequence).
fn batches(log: &Log) -> Vec<(i64, i64, i32)> {
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
                out.push((b.base_offset(), b.last_offset(), b.base_sequence()));
                offset = b.last_offset() + 1;
            }
        }
    }
    out
}

#[test]
fn appends_cut_at_any_point_keep_every_acknowledged_batch_at_kafka_offsets() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cut_points = 0;
        for n in 1.. {
            let fs = SimFs::new();
            let (replica, mut acks) = leader(&fs, 2).await;
            // A Kafka partition's offsets: raft's own entries (the membership, the leader's
            // blank) take none.
            assert_eq!(acks, vec![(0, 1), (2, 3)]);
            fs.fail_from(OpKind::Any, n, libc::EIO);
            let mut finished = true;
            for seq in 2..6 {
                match tokio::time::timeout(Duration::from_secs(5), replica.append(batch(seq * 2)))
                    .await
                {
                    Ok(Ok(ack)) => acks.push(ack.offsets()),
                    _ => {
                        finished = false;
                        break;
                    }
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), replica.shutdown()).await;
            replica.log().abandon_on_drop();
            drop(replica);
            fs.clear_faults();
            fs.crash(n);
            let reopened = match open_partition(&fs) {
                Ok(p) => p,
                Err(e) => panic!("cut at op {n}: the partition does not reopen: {e}"),
            };
            let log = reopened.log();
            let held = batches(log);
            // Dense from 0, each batch the one the producer sent at that place.
            let mut next = 0;
            for (i, &(base, last, seq)) in held.iter().enumerate() {
                assert_eq!(base, next, "cut at op {n}: offsets not dense: {held:?}");
                assert_eq!(
                    seq,
                    i as i32 * 2,
                    "cut at op {n}: batch {i} is not the {i}th"
                );
                next = last + 1;
            }
            // Every acknowledged batch is there, at its offsets.
            for &(first, last) in &acks {
                assert!(
                    held.iter().any(|&(b, l, _)| (b, l) == (first, last)),
                    "cut at op {n}: acknowledged {first}..={last} is gone: {held:?}"
                );
            }
            assert!(log.high_watermark() <= log.log_end_offset());
            log.abandon_on_drop();
            drop(reopened);
            cut_points += 1;
            if finished {
                break;
            }
        }
        assert!(
            cut_points > 10,
            "the appends made {cut_points} file operations"
        );
        eprintln!("appends cut at {cut_points} points");
    });
}

/// An entry's record takes no sync of its own: written back before the log's sync, it is made
/// durable by that sync's device flush (docs/design.md, "One device flush a round"), which the
/// cut-at-every-operation test above holds to its promise.
#[test]
fn an_append_costs_one_device_flush_not_one_per_file() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fs = SimFs::new();
        // Past the first appends, which sync the records' file once to commit its growth.
        let (replica, _) = leader_with(&fs, 4, 1 << 20).await;
        let before = fs.counters().data_syncs;
        let appends = 10;
        for seq in 4..4 + appends {
            replica.append(batch(seq * 2)).await.unwrap();
        }
        let syncs = fs.counters().data_syncs - before;
        assert_eq!(
            syncs, appends as u64,
            "{appends} appends took {syncs} data syncs"
        );
        replica.shutdown().await.unwrap();
    });
}

/// The bytes of every file in the partition's directory.
fn files(fs: &SimFs) -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(DIR);
    fs.as_dyn()
        .list(dir)
        .unwrap()
        .into_iter()
        .map(|name| {
            let bytes = fs.read_live(&dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect()
}

/// A partition with four committed entries of client batches, closed.
fn committed(fs: &SimFs) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (replica, _) = leader(fs, 4).await;
        replica.shutdown().await.unwrap();
    });
}

fn refused(fs: &SimFs, what: &str) -> String {
    let before = files(fs);
    let e = match open_partition(fs) {
        Err(e) => e,
        Ok(_) => panic!("{what}: accepted"),
    };
    assert!(e.contains(ENTRIES_FILE), "{what}: {e}");
    assert_eq!(files(fs), before, "{what}: a refused open changed files");
    e
}

#[test]
fn a_missing_entries_file_is_refused_and_nothing_is_created() {
    let fs = SimFs::new();
    committed(&fs);
    fs.as_dyn()
        .remove_file(&Path::new(DIR).join(ENTRIES_FILE))
        .unwrap();
    let e = refused(&fs, "no raft-entries");
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn damaged_records_are_refused_without_cutting_committed_batches() {
    let path = Path::new(DIR).join(ENTRIES_FILE);
    let fs = SimFs::new();
    committed(&fs);
    let good = fs.read_live(&path).unwrap();
    // Where each record starts: the membership, the leader's blank, the four runs.
    let mut starts = Vec::new();
    let mut pos = 0;
    while let Some((_, n)) = Record::decode(&good[pos..]).unwrap() {
        starts.push(pos);
        pos += n;
    }
    assert_eq!(starts.len(), 6, "{starts:?}");
    // Then zeros: the file grows ahead of its records.
    assert!(good[pos..].iter().all(|&b| b == 0));
    // The high watermark on disk covers at least the third run (each append's flush writes
    // the one the entry before it was committed with), so a record damaged before the last
    // one loses records of committed entries: refused, byte by byte, whatever the damage
    // makes of the rest. (Damage to the last record reads as a torn write: its entry is
    // dropped if the high watermark does not cover it, as the log drops a damaged last
    // batch.)
    let last = starts[5];
    for i in 0..last {
        let mut bad = good.clone();
        bad[i] ^= 0x04;
        fs.as_dyn().write_atomically(&path, &bad).unwrap();
        let e = refused(&fs, &format!("bit flipped in byte {i}"));
        assert!(
            e.contains("committed") || e.contains("damaged"),
            "byte {i}: {e}"
        );
    }
    fs.as_dyn()
        .write_atomically(&path, &good[..last - 3])
        .unwrap();
    refused(&fs, "records cut short");
    // Records that do not follow one another (the third run's before the second's).
    let mut swapped = good[..starts[3]].to_vec();
    swapped.extend_from_slice(&good[starts[4]..starts[5]]);
    swapped.extend_from_slice(&good[starts[3]..starts[4]]);
    swapped.extend_from_slice(&good[starts[5]..]);
    fs.as_dyn().write_atomically(&path, &swapped).unwrap();
    let e = refused(&fs, "records out of order");
    assert!(e.contains("damaged"), "{e}");
    // Whole, it opens again with everything.
    fs.as_dyn().write_atomically(&path, &good).unwrap();
    let p = open_partition(&fs).unwrap();
    assert_eq!(p.log().log_end_offset(), 8);
    p.log().abandon_on_drop();
}
