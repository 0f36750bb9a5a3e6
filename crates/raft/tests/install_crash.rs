//! A snapshot image installed on a follower, cut by a power failure at every file operation
//! in turn (oncelog's SimFs): the reopened follower is either as it was before the install or
//! exactly the image (its batches, its high watermark, its producers), never between, and an
//! install that returned is never undone. The image is kept in `raft-install.image` until
//! the install is complete, so a reopen finishes what the crash cut.

#[path = "one_disk/mod.rs"]
mod one_disk;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use oncelog::format::BatchBuilder;
use oncelog::io::SimFs;
use oncelog::io::SimOp as OpKind;
use oncelog::{AppendOutcome, LogConfig};
use oncelog_raft::network::mem::Router;
use oncelog_raft::store::{Image, StateMachine};
use oncelog_raft::{Replica, ReplicaConfig};
use one_disk::{env, open_partition, DIR};
use openraft::storage::RaftStateMachine;
use openraft::{BasicNode, RaftSnapshotBuilder};

fn batch(pid: i64, seq: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    b.append(1_000 + i64::from(seq), None, Some(&[b'x'; 100][..]), &[]);
    Bytes::from(b.build().unwrap())
}

#[test]
fn an_install_cut_at_any_point_leaves_the_old_state_or_the_image() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A one-replica leader with 40 batches of 2 producers, and its image.
        let leader_fs = SimFs::new();
        let router = Router::new(1);
        let config = ReplicaConfig {
            log: LogConfig::builder()
                .segment_bytes(4 * 1024)
                .build()
                .unwrap(),
            ..ReplicaConfig::default()
        };
        let leader = Replica::open(1, DIR, env(&leader_fs), config, router.endpoint(1))
            .await
            .unwrap();
        router.add(1, leader.raft().clone());
        leader
            .initialize(BTreeMap::from([(1, BasicNode::default())]))
            .await
            .unwrap();
        for i in 0..40 {
            let mut tries = 0;
            while let Err(e) = leader.append(batch(1 + i % 2, (i / 2) as i32)).await {
                tries += 1;
                assert!(tries < 100, "append: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        // Retention removes the first segments, so the image starts inside the log.
        leader
            .log()
            .replica()
            .set_high_watermark(leader.log().log_end_offset())
            .unwrap();
        let mut sm = StateMachine(Arc::clone(leader.partition()));
        let meta = sm.build_snapshot().await.unwrap().meta;
        let snapshot = sm
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("a snapshot");
        assert_eq!(snapshot.meta, meta);
        let data = snapshot.snapshot.get_ref().clone();
        let image = Image::decode(&data).unwrap();
        let image_end = leader.log().log_end_offset();
        assert!(!image.batches.is_empty());

        let mut cut_points = 0;
        for n in 1.. {
            let fs = SimFs::new();
            let part = open_partition(&fs).unwrap();
            fs.fail_from(OpKind::Any, n, libc::EIO);
            let mut sm = StateMachine(Arc::new(part));
            let result = sm
                .install_snapshot(&meta, Box::new(std::io::Cursor::new(data.clone())))
                .await;
            sm.0.log().abandon_on_drop();
            drop(sm);
            fs.clear_faults();
            fs.crash(n);
            let reopened = match open_partition(&fs) {
                Ok(p) => p,
                Err(e) => panic!("cut at op {n}: the follower does not reopen: {e}"),
            };
            let log = reopened.log();
            let installed = reopened.applied() == meta.last_log_id;
            if result.is_ok() {
                assert!(
                    installed,
                    "cut at op {n}: an install that returned was undone"
                );
            }
            if installed {
                assert_eq!(log.log_start_offset(), image.start, "cut at op {n}");
                assert_eq!(log.log_end_offset(), image_end, "cut at op {n}");
                assert_eq!(log.high_watermark(), image_end, "cut at op {n}");
                // The producers came with the image: a retry of the last batch is a duplicate.
                match log.append(&batch(2, 19)).unwrap() {
                    AppendOutcome::Duplicate(d) => {
                        assert_eq!(d.last_offset, image_end - 1, "cut at op {n}")
                    }
                    other => panic!("cut at op {n}: retry answered {other:?}"),
                }
            } else {
                // The message (read only on a failure) says what the reopened replica holds.
                assert_eq!(
                    log.log_end_offset(),
                    0,
                    "cut at op {n}: a partial install is visible (install answered {result:?}; \
                     state file {:?}; applied {:?}, log start {}, high watermark {})",
                    fs.read_live(&Path::new(DIR).join(oncelog_raft::store::STATE_FILE))
                        .map(|b| String::from_utf8_lossy(&b).to_string()),
                    reopened.applied(),
                    log.log_start_offset(),
                    log.high_watermark()
                );
                assert_eq!(reopened.applied(), None, "cut at op {n}");
            }
            log.abandon_on_drop();
            drop(reopened);
            cut_points += 1;
            if result.is_ok() {
                break;
            }
        }
        assert!(
            cut_points > 10,
            "the install made {cut_points} file operations"
        );
        eprintln!("install cut at {cut_points} points");
        let _ = leader.shutdown().await;
    });
}

#[test]
fn a_malformed_raft_state_file_is_refused_naming_it() {
    let fs = SimFs::new();
    drop(open_partition(&fs).unwrap());
    let path = Path::new(DIR).join(oncelog_raft::store::STATE_FILE);
    fs.as_dyn()
        .write_atomically(&path, b"{\"vote\": 7")
        .unwrap();
    match open_partition(&fs) {
        Err(e) => {
            assert!(e.contains("raft-state.json"), "{e}");
            assert!(e.contains("malformed"), "{e}");
        }
        Ok(_) => panic!("a malformed raft-state.json was accepted"),
    }
}
