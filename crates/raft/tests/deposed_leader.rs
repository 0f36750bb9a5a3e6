//! A leader cut off from the others keeps writing batches no majority has; a new leader is
//! elected and writes others; when the partition heals, the deposed leader's uncommitted tail
//! is truncated away, its log becomes the new leader's, and a retry of the batch it never
//! committed is appended once (then a duplicate), while a retry of a batch committed under the
//! old leader is a duplicate with its original offsets.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use oncelog::format::BatchBuilder;
use oncelog_raft::network::mem::Router;
use oncelog_raft::{Ack, NodeId, Replica, ReplicaConfig};
use openraft::BasicNode;

fn batch(pid: i64, seq: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    b.append(1_000, None, Some(format!("p{pid}-s{seq}").as_bytes()), &[]);
    Bytes::from(b.build().unwrap())
}

async fn leader_among(replicas: &BTreeMap<NodeId, Replica>, among: &[NodeId]) -> NodeId {
    for _ in 0..400 {
        for &id in among {
            if replicas[&id].raft().ensure_linearizable().await.is_ok() {
                return id;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let states: Vec<String> = among
        .iter()
        .map(|id| {
            let m = replicas[id].raft().metrics().borrow().clone();
            format!(
                "node {id}: {:?} in term {}, vote {}, last log {:?}, applied {:?}, leader {:?}",
                m.state, m.current_term, m.vote, m.last_log_index, m.last_applied, m.current_leader
            )
        })
        .collect();
    panic!("no leader among {among:?}: {states:#?}");
}

fn all_bytes(r: &Replica) -> Vec<u8> {
    let log = r.log();
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let b = log.read(offset, 1 << 20).unwrap();
        let mut last = offset;
        for item in oncelog::format::BatchIter::new(&b) {
            let (_, batch) = item.unwrap();
            out.extend_from_slice(batch.as_bytes());
            last = batch.last_offset() + 1;
        }
        offset = last;
    }
    out
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_deposed_leaders_uncommitted_tail_is_truncated_and_never_answered() {
    let router = Router::new(7);
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let replicas = router
        .open_replicas(&ids, &ReplicaConfig::default())
        .await
        .unwrap();
    let members = ids.iter().map(|&i| (i, BasicNode::default())).collect();
    replicas[&1].initialize(members).await.unwrap();
    let old = leader_among(&replicas, &ids).await;
    let a = replicas[&old].append(batch(1, 0)).await.unwrap();
    assert!(matches!(a, Ack::Appended { .. }));

    // The leader alone: what it writes now reaches no majority.
    router.partition(&[old], &ids);
    let lost =
        tokio::time::timeout(Duration::from_secs(2), replicas[&old].append(batch(1, 1))).await;
    assert!(
        lost.is_err() || lost.unwrap().is_err(),
        "a batch without a majority was acknowledged"
    );
    let old_log = replicas[&old].log();
    assert!(
        old_log.log_end_offset() > old_log.high_watermark(),
        "the old leader holds an uncommitted tail"
    );

    let others: Vec<NodeId> = ids.iter().copied().filter(|&i| i != old).collect();
    let new = leader_among(&replicas, &others).await;
    let c = replicas[&new].append(batch(2, 0)).await.unwrap();
    assert!(matches!(c, Ack::Appended { .. }));

    router.heal();
    let last = replicas[&new]
        .raft()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap();
    replicas[&old]
        .wait_applied(last, Duration::from_secs(30))
        .await
        .unwrap();
    // The deposed leader's log is now the new leader's, byte for byte: its tail is gone.
    assert_eq!(all_bytes(&replicas[&old]), all_bytes(&replicas[&new]));

    // The batch the old leader never committed is written once, now; the committed one is a
    // duplicate with its first offsets.
    let retried = replicas[&new].append(batch(1, 1)).await.unwrap();
    let Ack::Appended {
        first_offset,
        last_offset,
    } = retried
    else {
        panic!("the uncommitted batch was answered {retried:?}");
    };
    assert_eq!(
        replicas[&new].append(batch(1, 1)).await.unwrap(),
        Ack::Duplicate {
            first_offset,
            last_offset
        }
    );
    let (af, al) = a.offsets();
    assert_eq!(
        replicas[&new].append(batch(1, 0)).await.unwrap(),
        Ack::Duplicate {
            first_offset: af,
            last_offset: al
        }
    );
    // A retry sent to a follower is told where the leader is.
    match replicas[&old].append(batch(1, 0)).await {
        Err(oncelog_raft::ReplicaError::NotLeader { leader }) => assert_eq!(leader, Some(new)),
        other => panic!("a follower answered {other:?}"),
    }
    for r in replicas.values() {
        r.shutdown().await.unwrap();
    }
}

/// `Submitted::written` (Kafka's acks=1) answers once the leader's own log holds the batch
/// durably, before any follower has it, while `Submitted::answer` (acks=all) waits for a
/// majority. A leader cut off from the others so answers a batch no majority ever gets, and
/// the batch is lost when the new leader's log replaces its tail: Kafka's acks=1 trade.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn acks_1_is_answered_by_the_leaders_own_write_and_lost_with_a_deposed_leader() {
    let router = Router::new(11);
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let replicas = router
        .open_replicas(&ids, &ReplicaConfig::default())
        .await
        .unwrap();
    let members = ids.iter().map(|&i| (i, BasicNode::default())).collect();
    replicas[&1].initialize(members).await.unwrap();
    let old = leader_among(&replicas, &ids).await;
    // With a majority both answers agree.
    let both = replicas[&old].submit(batch(1, 0)).await.unwrap();
    let a = both.written().await.unwrap();
    assert!(matches!(a, Ack::Appended { .. }));

    router.partition(&[old], &ids);
    let cut = replicas[&old].submit(batch(1, 1)).await.unwrap();
    let all = replicas[&old].submit(batch(1, 2)).await.unwrap();
    let written = tokio::time::timeout(Duration::from_secs(2), cut.written())
        .await
        .expect("acks=1 answered without a majority")
        .unwrap();
    let Ack::Appended { first_offset, .. } = written else {
        panic!("answered {written:?}");
    };
    assert!(first_offset > a.offsets().1);
    let log = replicas[&old].log();
    assert!(
        log.high_watermark() <= first_offset,
        "the batch is not served: no majority holds it"
    );
    let majority = tokio::time::timeout(Duration::from_secs(2), all.answer()).await;
    assert!(
        majority.is_err() || majority.unwrap().is_err(),
        "acks=all answered without a majority"
    );

    let holds = |r: &Replica, value: &[u8]| all_bytes(r).windows(value.len()).any(|w| w == value);
    assert!(holds(&replicas[&old], b"p1-s1"), "the old leader wrote it");

    // A new leader writes elsewhere; once healed the old leader's tail is gone, and with it
    // the batch acks=1 answered.
    let others: Vec<NodeId> = ids.iter().copied().filter(|&i| i != old).collect();
    let new = leader_among(&replicas, &others).await;
    let c = replicas[&new].append(batch(2, 0)).await.unwrap();
    router.heal();
    // (The metrics' borrow ends before the wait: held, it would stop raft's own updates.)
    let last = replicas[&new]
        .raft()
        .metrics()
        .borrow()
        .last_log_index
        .unwrap();
    replicas[&old]
        .wait_applied(last, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(all_bytes(&replicas[&old]), all_bytes(&replicas[&new]));
    assert!(holds(&replicas[&new], b"p2-s0") && holds(&replicas[&new], b"p1-s0"));
    assert!(
        !holds(&replicas[&old], b"p1-s1"),
        "the batch acks=1 answered is gone with the old leader's tail"
    );
    assert!(c.offsets().0 > a.offsets().1);
    // A follower never writes a client batch itself: acks=1 there is raft's NotLeader.
    let follower = replicas[&old].submit(batch(3, 0)).await.unwrap();
    assert!(matches!(
        follower.written().await,
        Err(oncelog_raft::ReplicaError::NotLeader { .. })
    ));
    for r in replicas.values() {
        r.shutdown().await.unwrap();
    }
}
