//! A replica's log start raised for DeleteRecords ([`Replica::raise_log_start`], docs/design.md
//! "Retention and DeleteRecords in a cluster"): never past raft's purge point, only to the
//! first offset of a batch, and the replica reopens afterwards (the store requires its log to
//! start at or below the purge point) with the log start it had.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{Environment, PartitionConfig};
use oncelog_raft::{GroupId, Host, Node, Replica, ReplicaConfig};
use tokio::net::TcpListener;

/// A batch of three records, so most offsets are inside a batch.
fn batch(i: usize) -> Bytes {
    let mut b = BatchBuilder::new();
    for r in 0..3 {
        b.append(
            1_700_000_000_000,
            None,
            Some(format!("{i}-{r}").as_bytes()),
            &[],
        );
    }
    Bytes::from(b.build().unwrap())
}

/// raft snapshots every 4 entries, keeps 4, purges at once.
fn config() -> ReplicaConfig {
    let mut c = ReplicaConfig::default();
    c.raft.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(4);
    c.raft.max_in_snapshot_log_to_keep = 4;
    c.raft.purge_batch_size = 1;
    c
}

async fn one_node(dir: &std::path::Path, group: &GroupId) -> (Arc<Host>, Arc<Replica>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peers = BTreeMap::from([(1, Node::new(listener.local_addr().unwrap().to_string()))]);
    let host = Arc::new(Host::start(dir, Environment::default(), 1, peers, config()).unwrap());
    host.serve_raft(listener);
    let settings = PartitionConfig::default().with_segment_bytes(1024);
    host.add_group_with(group.clone(), &[1], settings)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while host.status(group).ok().and_then(|s| s.leader) != Some(1) {
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replica = host.replica(group).unwrap();
    (host, replica)
}

/// The first offset of every batch of the log from its start.
fn boundaries(replica: &Replica) -> Vec<i64> {
    let log = replica.log();
    let mut offset = log.log_start_offset();
    let mut out = Vec::new();
    while offset < log.log_end_offset() {
        let bytes = log.read(offset, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            out.push(b.base_offset());
            offset = b.last_offset() + 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_start_rises_to_a_batch_boundary_never_past_the_purge_point() {
    let tmp = tempfile::tempdir().unwrap();
    let group = GroupId::new("trimmed", 0);
    let (host, replica) = one_node(tmp.path(), &group).await;
    for i in 0..40 {
        replica.append(batch(i)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while replica.partition().purge_end() < 40 {
        assert!(Instant::now() < deadline, "raft never purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let starts = boundaries(&replica);
    let purge = replica.partition().purge_end();
    assert!(starts.contains(&purge), "the purge point ends an entry");

    // Inside a batch below the purge point: the batch's first offset.
    let inside = starts
        .iter()
        .copied()
        .find(|b| *b > 10 && *b + 1 < purge)
        .unwrap();
    assert!(!starts.contains(&(inside + 1)), "a batch of three records");
    assert_eq!(replica.raise_log_start(inside + 1).unwrap(), inside);
    assert_eq!(replica.log().log_start_offset(), inside);
    // Lower: nothing moves.
    assert_eq!(replica.raise_log_start(3).unwrap(), inside);
    // Past the purge point: up to it and no further.
    let end = replica.log().high_watermark();
    assert!(end > purge);
    assert_eq!(replica.raise_log_start(end).unwrap(), purge);
    assert_eq!(replica.log().log_start_offset(), purge);
    // Retention drops the segments below the new start, never one raft still reads from.
    let report = replica.enforce_retention(1_700_000_000_000).unwrap();
    assert!(!report.deleted.is_empty(), "{report:?}");
    assert!(report.deleted.iter().all(|s| s.next_offset <= purge));

    // The replica reopens with that log start, and goes on taking batches.
    host.close().await.unwrap();
    drop(replica);
    let (host, replica) = one_node(tmp.path(), &group).await;
    assert_eq!(replica.log().log_start_offset(), purge);
    replica.append(batch(40)).await.unwrap();
    host.close().await.unwrap();
}
