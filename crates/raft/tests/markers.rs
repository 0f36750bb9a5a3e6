//! Transaction markers through raft ([`Replica::append_marker`], docs/design.md "The
//! transaction coordinator in a cluster"): a transaction's batch holds every replica's last
//! stable offset back until the leader writes its COMMIT marker, which every replica then
//! holds as the same control batch, and which completes the transaction on each (the last
//! stable offset reaches the high watermark). A marker of a stale producer epoch is refused
//! (its entry holds only its head); a follower answers NOT_LEADER; a client's control batch is
//! refused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{Environment, TxnMarker};
use oncelog_raft::{GroupId, Host, Node, NodeId, ReplicaConfig, ReplicaError};
use tokio::net::TcpListener;

const PRODUCER: i64 = 7;

fn transactional(epoch: i16, seq: i32) -> Bytes {
    let mut b = BatchBuilder::new()
        .producer(PRODUCER, epoch, seq)
        .transactional(true);
    b.append(1_700_000_000_000, None, Some(b"in a transaction"), &[]);
    Bytes::from(b.build().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_through_the_leader_completes_the_transaction_on_every_replica() {
    let tmp = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers: BTreeMap<NodeId, Node> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, Node::new(l.local_addr().unwrap().to_string())))
        .collect();
    let group = GroupId::new("orders", 0);
    let mut hosts = BTreeMap::new();
    let mut serving = Vec::new();
    for (id, listener) in (1..=3).zip(listeners) {
        let host = Arc::new(
            Host::start(
                tmp.path().join(format!("node-{id}")),
                Environment::default(),
                id,
                peers.clone(),
                ReplicaConfig::default(),
            )
            .unwrap(),
        );
        serving.push(host.serve_raft(listener));
        hosts.insert(id, host);
    }
    for host in hosts.values() {
        host.add_group(group.clone(), &[1, 2, 3]).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        if let Some(l) = hosts[&1].status(&group).ok().and_then(|s| s.leader) {
            break l;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let on_leader = hosts[&leader].replica(&group).unwrap();
    let follower = *hosts.keys().find(|id| **id != leader).unwrap();
    let on_follower = hosts[&follower].replica(&group).unwrap();

    // A client cannot write a marker: the log refuses a control batch from a producer.
    let forged = oncelog::format::end_txn_marker(
        0,
        0,
        PRODUCER,
        0,
        1_700_000_000_000,
        oncelog::format::ControlType::Commit,
        0,
    );
    assert!(matches!(
        on_leader.append(Bytes::from(forged)).await,
        Err(ReplicaError::Refused { .. })
    ));

    let first = on_leader.append(transactional(1, 0)).await.unwrap();
    let (data_at, _) = first.offsets();
    assert!(
        on_leader.log().last_stable_offset() <= data_at,
        "the open transaction holds the last stable offset back"
    );

    // A follower does not write markers; a stale epoch is refused with nothing written.
    let commit = TxnMarker::commit(PRODUCER, 1, 3);
    assert!(matches!(
        on_follower.append_marker(&commit).await,
        Err(ReplicaError::NotLeader { .. })
    ));
    let end_before = on_leader.log().log_end_offset();
    assert!(matches!(
        on_leader
            .append_marker(&TxnMarker::commit(PRODUCER, 0, 3))
            .await,
        Err(ReplicaError::Refused { .. })
    ));
    // Nothing was written (as for a refused client batch: the entry takes no offset): the
    // transaction is still open.
    assert_eq!(on_leader.log().log_end_offset(), end_before);
    assert!(on_leader.log().last_stable_offset() <= data_at);

    let at = on_leader.append_marker(&commit).await.unwrap().offsets().0;
    assert!(at > data_at);
    // Every replica holds the marker as the same control batch, and its transaction is
    // complete there: the last stable offset reaches the high watermark.
    for (id, host) in &hosts {
        let replica = host.replica(&group).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while replica.log().high_watermark() <= at {
            assert!(
                Instant::now() < deadline,
                "node {id} never committed the marker"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let log = replica.log();
        assert_eq!(
            log.last_stable_offset(),
            log.high_watermark(),
            "node {id}: the transaction is complete"
        );
        let bytes = log.read(at, 1 << 20).unwrap();
        let (_, marker) = BatchIter::new(&bytes).next().unwrap().unwrap();
        assert!(marker.is_control() && marker.producer_id() == PRODUCER);
        assert_eq!(
            (marker.base_offset(), marker.producer_epoch()),
            (at, 1),
            "node {id}"
        );
    }
    for host in hosts.values() {
        host.close().await.unwrap();
    }
    for s in serving {
        s.abort();
    }
}
