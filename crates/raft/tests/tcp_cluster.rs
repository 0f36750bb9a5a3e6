//! Three replicas in one process over the TCP transport, each serving the client protocol:
//! every answer of the protocol, good and bad requests alike.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::Environment;
use oncelog_raft::client::{self, Client, ClientReply, ClientRequest};
use oncelog_raft::network::tcp::{self, TcpNetwork};
use oncelog_raft::{Ack, Node, Replica, ReplicaConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

struct Up {
    replicas: Vec<Arc<Replica>>,
    clients: Vec<String>,
    _tmp: tempfile::TempDir,
}

async fn cluster() -> Up {
    let tmp = tempfile::tempdir().unwrap();
    let mut raft_listeners = Vec::new();
    let mut client_listeners = Vec::new();
    for _ in 0..3 {
        raft_listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        client_listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let members: BTreeMap<u64, Node> = raft_listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, Node::new(l.local_addr().unwrap().to_string())))
        .collect();
    let clients = client_listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let mut replicas = Vec::new();
    for (i, (rl, cl)) in raft_listeners.into_iter().zip(client_listeners).enumerate() {
        let id = i as u64 + 1;
        let r = Replica::open(
            id,
            tmp.path().join(format!("replica-{id}")),
            Environment::default(),
            ReplicaConfig::default(),
            TcpNetwork::default(),
        )
        .await
        .unwrap();
        let r = Arc::new(r);
        tcp::serve(rl, r.raft().clone());
        client::serve(cl, Arc::clone(&r));
        replicas.push(r);
    }
    replicas[0].initialize(members).await.unwrap();
    Up {
        replicas,
        clients,
        _tmp: tmp,
    }
}

async fn ask(addr: &str, request: ClientRequest) -> ClientReply {
    let mut c = Client::connect(addr).await.unwrap();
    c.call(&request).await.unwrap()
}

async fn leader(up: &Up) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let ClientReply::Status(s) = ask(&up.clients[0], ClientRequest::Status).await {
            if let Some(l) = s.leader {
                return l as usize - 1;
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn batch(sequence: i32, value: &str) -> Bytes {
    let mut b = BatchBuilder::new().producer(7, 0, sequence);
    b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    Bytes::from(b.build().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_protocol_over_a_tcp_cluster() {
    let up = cluster().await;
    let l = leader(&up).await;
    let follower = (l + 1) % 3;

    // Appended, then the retry of the same batch is a duplicate with the same offsets.
    let first = ask(&up.clients[l], ClientRequest::Produce(batch(0, "a"))).await;
    let ClientReply::Acked(Ack::Appended {
        first_offset,
        last_offset,
    }) = first
    else {
        panic!("{first:?}");
    };
    assert_eq!(first_offset, last_offset);
    assert_eq!(
        ask(&up.clients[l], ClientRequest::Produce(batch(0, "a"))).await,
        ClientReply::Acked(Ack::Duplicate {
            first_offset,
            last_offset
        })
    );
    // A follower names the leader.
    assert_eq!(
        ask(&up.clients[follower], ClientRequest::Produce(batch(1, "b"))).await,
        ClientReply::NotLeader {
            leader: Some(l as u64 + 1)
        }
    );
    // Bytes that are no batch, and a sequence gap: refused with the log's error kind.
    match ask(
        &up.clients[l],
        ClientRequest::Produce(Bytes::from_static(b"not a batch")),
    )
    .await
    {
        ClientReply::Refused { kind, message } => assert!(!kind.is_empty() && !message.is_empty()),
        other => panic!("{other:?}"),
    }
    match ask(&up.clients[l], ClientRequest::Produce(batch(5, "gap"))).await {
        ClientReply::Refused { kind, .. } => assert!(kind.contains("sequence"), "{kind}"),
        other => panic!("{other:?}"),
    }
    let next = ask(&up.clients[l], ClientRequest::Produce(batch(1, "b"))).await;
    let ClientReply::Acked(Ack::Appended {
        first_offset: b_first,
        ..
    }) = next
    else {
        panic!("{next:?}");
    };
    assert!(b_first > last_offset);

    // Status and reads on a follower once it has caught up.
    let hw = up.replicas[l].log().high_watermark();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let ClientReply::Status(s) = ask(&up.clients[follower], ClientRequest::Status).await else {
            panic!("status");
        };
        if s.high_watermark == hw {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the follower did not catch up: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.id, follower as u64 + 1);
    assert_eq!(status.leader, Some(l as u64 + 1));
    assert_eq!(status.log_end_offset, hw);
    let ClientReply::Batches {
        bytes,
        next_offset,
        high_watermark,
        log_start_offset,
    } = ask(
        &up.clients[follower],
        ClientRequest::Read {
            offset: 0,
            max_bytes: 1 << 20,
        },
    )
    .await
    else {
        panic!("read");
    };
    assert_eq!((next_offset, high_watermark, log_start_offset), (hw, hw, 0));
    let data: Vec<(i64, i32)> = BatchIter::new(&bytes)
        .map(|b| b.unwrap().1)
        .filter(|b| !b.is_control())
        .map(|b| (b.base_offset(), b.base_sequence()))
        .collect();
    assert_eq!(data, vec![(first_offset, 0), (b_first, 1)]);
    // At the high watermark: nothing yet; past the log end: an error that says where.
    match ask(
        &up.clients[follower],
        ClientRequest::Read {
            offset: hw,
            max_bytes: 1024,
        },
    )
    .await
    {
        ClientReply::Batches {
            bytes, next_offset, ..
        } => assert!(bytes.is_empty() && next_offset == hw),
        other => panic!("{other:?}"),
    }
    match ask(
        &up.clients[follower],
        ClientRequest::Read {
            offset: hw + 100,
            max_bytes: 1024,
        },
    )
    .await
    {
        ClientReply::Error(e) => assert!(e.contains(&format!("offset {}", hw + 100)), "{e}"),
        other => panic!("{other:?}"),
    }

    // A client that sends a malformed frame loses its connection; the replica serves others.
    let mut raw = tokio::net::TcpStream::connect(&up.clients[l])
        .await
        .unwrap();
    raw.write_all(&3u32.to_be_bytes()).await.unwrap();
    raw.write_all(&[0xff, 0xff, 0xff]).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut raw, &mut buf),
    )
    .await
    .expect("the connection is closed")
    .unwrap_or(0);
    assert_eq!(n, 0, "no answer to a malformed frame");
    assert!(matches!(
        ask(&up.clients[l], ClientRequest::Status).await,
        ClientReply::Status(_)
    ));

    for r in &up.replicas {
        r.shutdown().await.unwrap();
    }
}
