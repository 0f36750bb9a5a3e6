//! Groups added to a running [`Host`] (docs/design.md, "A cluster of brokers"): a host opened
//! with no group, groups added with members in assignment order, formed by every member at
//! open (so a group forms while one of its replicas is down), led by their preferred member
//! once it is up, and described from raft's metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::BatchBuilder;
use oncelog::Environment;
use oncelog_raft::{GroupId, Host, HostError, Node, NodeId, ReplicaConfig};
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

/// Waits until `host`'s replica of `group` knows a leader.
async fn leader_of(host: &Host, group: &GroupId) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = host.status(group) {
            if let Some(l) = s.leader {
                return l;
            }
        }
        assert!(Instant::now() < deadline, "{group}: no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three nodes' addresses (nodes 1 to 3, on loopback) and the listeners bound to them.
async fn three_nodes() -> (BTreeMap<NodeId, Node>, BTreeMap<NodeId, TcpListener>) {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, Node::new(l.local_addr().unwrap().to_string())))
        .collect();
    (peers, (1..=3).zip(listeners).collect())
}

/// Node `id`'s host over its own directory under `dir`.
fn open_host(dir: &std::path::Path, id: NodeId, peers: &BTreeMap<NodeId, Node>) -> Arc<Host> {
    Arc::new(
        Host::start(
            dir.join(format!("node-{id}")),
            Environment::default(),
            id,
            peers.clone(),
            ReplicaConfig::default(),
        )
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_group_is_first_led_by_its_preferred_member() {
    let tmp = tempfile::tempdir().unwrap();
    let (peers, listeners) = three_nodes().await;
    let hosts: Vec<Arc<Host>> = (1..=3)
        .map(|id| open_host(tmp.path(), id, &peers))
        .collect();
    let serving: Vec<_> = listeners
        .into_values()
        .zip(&hosts)
        .map(|(l, h)| h.serve_raft(l))
        .collect();
    // No balancer runs: the first election alone must pick the preferred member. The members
    // open the group in turn, a little apart, as nodes apply a topic's record.
    let groups: Vec<(GroupId, [NodeId; 3])> = (0..6)
        .map(|p| {
            let first = p as u64 % 3 + 1;
            let members = [first, first % 3 + 1, (first + 1) % 3 + 1];
            (GroupId::new("first", p), members)
        })
        .collect();
    for (group, members) in &groups {
        for h in hosts.iter().rev() {
            h.add_group(group.clone(), members).await.unwrap();
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
    for (group, members) in &groups {
        for h in &hosts {
            assert_eq!(leader_of(h, group).await, members[0], "{group}");
        }
    }
    for h in &hosts {
        h.close().await.unwrap();
    }
    for s in serving {
        s.abort();
    }
}

/// A TCP proxy to `target` that holds every chunk it reads `delay` before passing it on: a
/// slow link, or a loaded peer that answers late. Answers the address to dial.
async fn slow_link(target: String, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                let (from_in, to_in) = inbound.into_split();
                let (from_out, to_out) = outbound.into_split();
                tokio::spawn(delayed_copy(from_in, to_out, delay));
                tokio::spawn(delayed_copy(from_out, to_in, delay));
            });
        }
    });
    addr
}

async fn delayed_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        tokio::time::sleep(delay).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A new group's preferred member wins its first election when every vote is answered late
/// (each link holds each chunk 40 ms: a loaded cluster). Its first candidacy must be given
/// time to gather the votes: a preferred member that stood again at every change of raft's
/// metrics (its own new term among them) cancelled each candidacy before an answer came, stood
/// hundreds of times a second, and with its ever higher terms kept the others from winning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_groups_first_election_ends_when_votes_are_answered_late() {
    let tmp = tempfile::tempdir().unwrap();
    let (peers, listeners) = three_nodes().await;
    let hosts: Vec<Arc<Host>> = (1..=3)
        .map(|id| open_host(tmp.path(), id, &peers))
        .collect();
    for (id, h) in (1..=3).zip(&hosts) {
        for (peer, node) in &peers {
            if *peer != id {
                let link = slow_link(node.addr.clone(), Duration::from_millis(40)).await;
                h.dial_through(*peer, link);
            }
        }
    }
    let serving: Vec<_> = listeners
        .into_values()
        .zip(&hosts)
        .map(|(l, h)| h.serve_raft(l))
        .collect();
    let group = GroupId::new("late", 0);
    let members = [2, 3, 1];
    for h in hosts.iter().rev() {
        h.add_group(group.clone(), &members).await.unwrap();
    }
    for h in &hosts {
        assert_eq!(leader_of(h, &group).await, 2);
        let term = h.status(&group).unwrap().term;
        assert!(term < 10, "elected in term {term}: an election storm");
    }
    for h in &hosts {
        h.close().await.unwrap();
    }
    for s in serving {
        s.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_added_at_run_time_form_without_one_member_and_describe_themselves() {
    let tmp = tempfile::tempdir().unwrap();
    let (peers, mut listeners) = three_nodes().await;
    let open = |id: NodeId| open_host(tmp.path(), id, &peers);
    // Nodes 1 and 2 only: node 3 is down when the group is added.
    let h1 = open(1);
    let h2 = open(2);
    let s1 = h1.serve_raft(listeners.remove(&1).unwrap());
    let s2 = h2.serve_raft(listeners.remove(&2).unwrap());
    assert!(h1.replicas().is_empty());
    let group = GroupId::new("orders", 1);
    let members = [2, 3, 1];
    h1.add_group(group.clone(), &members).await.unwrap();
    tokio::time::sleep(Duration::from_millis(7)).await;
    h2.add_group(group.clone(), &members).await.unwrap();
    // A second add of the same group keeps the one replica.
    let first = h1.replica(&group).unwrap();
    h1.add_group(group.clone(), &members).await.unwrap();
    assert!(Arc::ptr_eq(&first, &h1.replica(&group).unwrap()));
    assert_eq!(h1.preferred(&group), Some(2));

    // Two of three members form the group and commit.
    let leader = leader_of(&h1, &group).await;
    let on_leader = if leader == 1 { &h1 } else { &h2 };
    let ack = on_leader
        .replica(&group)
        .unwrap()
        .append(batch(0))
        .await
        .unwrap();
    assert_eq!(ack.offsets().1 - ack.offsets().0, 0);
    let status = on_leader.status(&group).unwrap();
    assert_eq!(status.members, vec![2, 3, 1]);
    assert_eq!(status.leader, Some(leader));
    assert!(status.term >= 1);
    // Node 3 is down: it is not in step; the leader is.
    let isr = status.in_sync();
    assert!(isr.contains(&leader) && !isr.contains(&3), "{status:?}");

    // Node 3 comes up, adds the group (its initialize is refused: it learns the group from
    // the leader instead) and catches up; the balancer moves the lead to node 2, preferred.
    let h3 = open(3);
    let s3 = h3.serve_raft(listeners.remove(&3).unwrap());
    h3.add_group(group.clone(), &members).await.unwrap();
    let balancers = [&h1, &h2, &h3].map(|h| h.keep_balanced(Duration::from_millis(300)));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = h2.status(&group).unwrap();
        if s.leader == Some(2) && s.in_sync() == vec![2, 3, 1] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not led by node 2 in step: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r3 = h3.replica(&group).unwrap();
    // Node 3 holds the batch committed before it came up (its commit point follows the
    // leader's by a heartbeat).
    while r3.log().high_watermark() <= ack.offsets().1 {
        assert!(Instant::now() < deadline, "node 3 did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Elsewhere than on the leader the progress of the others is not known.
    assert!(h3.status(&group).unwrap().matched.is_empty());

    // A peer says who leads the groups it hosts (how a node without a replica learns it),
    // and leaves out those it does not host.
    let said = h1
        .peer_leaders(2, vec![GroupId::new("none", 0), group.clone()])
        .await
        .unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(
        (&said[0].group, said[0].leader, said[0].term),
        (&group, Some(2), h2.status(&group).unwrap().term)
    );
    assert!(h1.peer_leaders(9, vec![group.clone()]).await.is_err());

    // A read barrier: the leader, idle and having applied all it holds, vouches for its last
    // entry, asked by a peer or by itself; a replica that applied up to it holds every
    // batch committed before. A node that does not lead vouches for nothing.
    let settled = h1.settled_at(&group, 2).await.unwrap();
    let on_2 = h2.status(&group).unwrap();
    assert!(
        settled.is_some() && settled == on_2.applied,
        "{settled:?} {on_2:?}"
    );
    assert_eq!(h2.settled_at(&group, 2).await.unwrap(), settled);
    assert_eq!(h2.settled_at(&group, 3).await.unwrap(), None);
    while h3.status(&group).unwrap().applied < settled {
        assert!(
            Instant::now() < deadline,
            "node 3 never applied {settled:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(r3.log().high_watermark() > ack.offsets().1);
    assert!(h1.settled_at(&group, 9).await.is_err());

    // Refusals: a group this node is not a member of, a member twice, an unknown node.
    for bad in [&[2, 3][..], &[1, 1, 2][..], &[1, 9][..]] {
        assert!(
            matches!(
                h1.add_group(GroupId::new("bad", 0), bad).await,
                Err(HostError::Config(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        h1.status(&GroupId::new("none", 0)),
        Err(HostError::UnknownPartition(_))
    ));

    for b in balancers {
        b.abort();
    }
    for h in [&h1, &h2, &h3] {
        h.close().await.unwrap();
    }
    for s in [s1, s2, s3] {
        s.abort();
    }
}

/// The directories in `dir` whose name starts with `prefix`.
fn dirs_named(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_group_stops_answers_not_hosted_and_its_partition_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    for _ in 0..2 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let peers: BTreeMap<NodeId, Node> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, Node::new(l.local_addr().unwrap().to_string())))
        .collect();
    let dir = |id: NodeId| tmp.path().join(format!("node-{id}"));
    let open = |id: NodeId| {
        Arc::new(
            Host::start(
                dir(id),
                Environment::default(),
                id,
                peers.clone(),
                ReplicaConfig::default(),
            )
            .unwrap(),
        )
    };
    let hosts = [open(1), open(2)];
    let serving: Vec<_> = hosts
        .iter()
        .zip(listeners)
        .map(|(h, l)| h.serve_raft(l))
        .collect();
    let (gone, kept) = (GroupId::new("gone", 0), GroupId::new("kept", 0));
    for h in &hosts {
        h.add_group(gone.clone(), &[1, 2]).await.unwrap();
        h.add_group(kept.clone(), &[2, 1]).await.unwrap();
    }
    let leader = leader_of(&hosts[0], &gone).await;
    let old = hosts[leader as usize - 1].replica(&gone).unwrap();
    let first = old.append(batch(0)).await.unwrap();
    for seq in 1..5 {
        old.append(batch(seq)).await.unwrap();
    }
    drop(old);

    for h in &hosts {
        assert!(h.remove_group(&gone).await.unwrap());
        assert!(matches!(
            h.status(&gone),
            Err(HostError::UnknownPartition(_))
        ));
        assert!(!h.partitions_on_disk().unwrap().contains(&gone));
        // Removing it again finds nothing.
        assert!(!h.remove_group(&gone).await.unwrap());
    }
    for id in [1, 2] {
        // Renamed to Kafka's `<topic>-<n>.<id>-delete` for the deletion job: never `gone-0`.
        let left = dirs_named(&dir(id), "gone-");
        assert!(
            left.iter().all(|n| n.ends_with("-delete")),
            "node {id}: {left:?}"
        );
    }
    // A peer no longer names a leader for it; the other group still commits.
    assert!(hosts[0]
        .peer_leaders(2, vec![gone.clone()])
        .await
        .unwrap()
        .is_empty());
    let leader = leader_of(&hosts[0], &kept).await;
    hosts[leader as usize - 1]
        .replica(&kept)
        .unwrap()
        .append(batch(0))
        .await
        .unwrap();

    // The same name again is a new, empty partition.
    for h in &hosts {
        h.add_group(gone.clone(), &[1, 2]).await.unwrap();
    }
    let leader = leader_of(&hosts[0], &gone).await;
    let ack = hosts[leader as usize - 1]
        .replica(&gone)
        .unwrap()
        .append(batch(0))
        .await
        .unwrap();
    // It starts where the first one started, not after the removed one's five batches.
    assert!(
        ack.offsets().0 <= first.offsets().0,
        "{ack:?} after {first:?}"
    );

    // A partition left on disk by a host that was closed is deleted without being hosted.
    hosts[1].close().await.unwrap();
    let reopened = open(2);
    assert!(reopened.partitions_on_disk().unwrap().contains(&gone));
    assert!(reopened.replica(&gone).is_err());
    assert!(reopened.remove_group(&gone).await.unwrap());
    assert!(!reopened.partitions_on_disk().unwrap().contains(&gone));
    reopened.close().await.unwrap();
    hosts[0].close().await.unwrap();
    for s in serving {
        s.abort();
    }
}
