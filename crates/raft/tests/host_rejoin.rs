//! A member that lost its data rejoins a group under its id (docs/design.md, "A wiped node
//! rejoins under its id"): the other members' durable states give its floor, it saves a vote
//! above every term, refuses a candidate behind the floor at the RPC layer (one openraft alone
//! would vote for: its own log is empty), catches up byte for byte without the leader's
//! "follower log reversion" panic, and with the member that held the data down, the group
//! still keeps every committed batch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::BatchBuilder;
use oncelog::Environment;
use oncelog_raft::network::mux::Mux;
use oncelog_raft::openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use oncelog_raft::openraft::raft::VoteRequest;
use oncelog_raft::openraft::{CommittedLeaderId, LogId, Vote};
use oncelog_raft::{GroupId, Host, Node, NodeId, RejoinFloor, ReplicaConfig};
use tokio::net::TcpListener;

fn batch(seq: i32) -> Bytes {
    let mut b = BatchBuilder::new().producer(7, 0, seq);
    b.append(
        1_700_000_000_000,
        None,
        Some(format!("v{seq}").as_bytes()),
        &[],
    );
    Bytes::from(b.build().unwrap())
}

async fn leader_among(hosts: &[&Arc<Host>], group: &GroupId) -> Arc<Host> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for h in hosts {
            if h.status(group).ok().and_then(|s| s.leader) == Some(h.id()) {
                return Arc::clone(h);
            }
        }
        assert!(Instant::now() < deadline, "{group}: no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Appends `n` batches from `seq` through whichever host leads, retrying through elections.
async fn append(hosts: &[&Arc<Host>], group: &GroupId, seq: i32, n: i32) -> i64 {
    let mut last = -1;
    for s in seq..seq + n {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let leader = leader_among(hosts, group).await;
            match leader.replica(group).unwrap().append(batch(s)).await {
                Ok(ack) => {
                    last = ack.offsets().1;
                    break;
                }
                Err(e) => assert!(Instant::now() < deadline, "seq {s}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    last
}

fn log_bytes(host: &Host, group: &GroupId, end: i64) -> Vec<u8> {
    let replica = host.replica(group).unwrap();
    let log = replica.log();
    let mut bytes = Vec::new();
    let mut offset = 0;
    while offset < end {
        let read = log.fetch(offset, 1 << 20).unwrap();
        assert!(
            !read.bytes.is_empty(),
            "node {}: ends at {offset}",
            host.id()
        );
        bytes.extend_from_slice(&read.bytes);
        offset = read.next_offset;
    }
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_rejoins_refuses_a_stale_candidate_and_catches_up() {
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
    let mut listeners: BTreeMap<NodeId, TcpListener> = (1..=3).zip(listeners).collect();
    let open = |id: NodeId| {
        Arc::new(
            Host::start(
                tmp.path().join(format!("node-{id}")),
                Environment::default(),
                id,
                peers.clone(),
                ReplicaConfig::default(),
            )
            .unwrap(),
        )
    };
    let group = GroupId::new("orders", 0);
    let members = [1, 2, 3];
    let (h1, h2, h3) = (open(1), open(2), open(3));
    let mut serving = BTreeMap::new();
    for h in [&h1, &h2, &h3] {
        serving.insert(h.id(), h.serve_raft(listeners.remove(&h.id()).unwrap()));
        h.add_group(group.clone(), &members).await.unwrap();
        tokio::time::sleep(Duration::from_millis(7)).await;
    }
    let before = append(&[&h1, &h2, &h3], &group, 0, 20).await;

    // Node 3 loses its data: stopped, its directory removed, started again empty.
    h3.close().await.unwrap();
    serving.remove(&3).unwrap().abort();
    std::fs::remove_dir_all(tmp.path().join("node-3")).unwrap();
    let before = before.max(append(&[&h1, &h2], &group, 20, 5).await);
    let h3 = open(3);
    let listener = TcpListener::bind(&peers[&3].addr).await.unwrap();
    serving.insert(3, h3.serve_raft(listener));
    assert!(!h3.local_state(&group).unwrap().holds_state());

    // Its floor, from every other member's durable state.
    let mut states = Vec::new();
    for m in [1, 2] {
        states.push(h3.peer_state(m, &group).await.unwrap());
    }
    assert!(states.iter().all(|s| s.holds_state()), "{states:?}");
    let floor = RejoinFloor::from_states(&states);
    for s in &states {
        assert!(floor.term > s.vote.unwrap().leader_id().term);
        assert!(floor.last_log_id >= s.last_log_id);
    }
    h3.add_group_rejoining(group.clone(), &members, floor)
        .await
        .unwrap();
    assert_eq!(
        h3.local_state(&group).unwrap().vote,
        Some(Vote::new(floor.term, 3)),
        "the vote is saved before raft runs"
    );

    // A candidate in a far term whose log is behind the floor (though ahead of node 3's
    // empty log, so openraft alone would grant it) is refused at the RPC layer.
    let stale = VoteRequest::new(
        Vote::new(floor.term + 10, 9),
        Some(LogId::new(CommittedLeaderId::new(0, 0), 0)),
    );
    let mut to_3 = Mux::new(Duration::from_millis(10))
        .group(group.clone())
        .new_client(3, &peers[&3])
        .await;
    let answer = to_3
        .vote(stale, RPCOption::new(Duration::from_secs(2)))
        .await
        .unwrap();
    assert!(!answer.vote_granted, "{answer:?}");
    assert_eq!(answer.last_log_id, floor.last_log_id);

    // It catches up (the leader does not panic on its shorter log) and the group goes on.
    let hosts = [&h1, &h2, &h3];
    let after = append(&hosts, &group, 25, 5).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h3.replica(&group).unwrap().log().high_watermark() <= after {
        assert!(Instant::now() < deadline, "node 3 did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let end = after + 1;
    assert!(end > before);
    assert_eq!(log_bytes(&h3, &group, end), log_bytes(&h1, &group, end));
    assert_eq!(log_bytes(&h2, &group, end), log_bytes(&h1, &group, end));

    // Node 1 stops: nodes 2 and 3 elect and keep every committed batch.
    h1.close().await.unwrap();
    serving.remove(&1).unwrap().abort();
    let last = append(&[&h2, &h3], &group, 30, 3).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h3.replica(&group).unwrap().log().high_watermark() <= last
        || h2.replica(&group).unwrap().log().high_watermark() <= last
    {
        assert!(Instant::now() < deadline, "nodes 2 and 3 did not commit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        log_bytes(&h3, &group, last + 1),
        log_bytes(&h2, &group, last + 1)
    );

    for h in [&h2, &h3] {
        h.close().await.unwrap();
    }
    for (_, s) in serving {
        s.abort();
    }
}
