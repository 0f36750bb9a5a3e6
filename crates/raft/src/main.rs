//! `oncelog-raft-node`: one replica of a partition as a process. Raft RPCs between replicas on
//! `--listen` (oncelog_raft::network::tcp), the client protocol on `--client`
//! (oncelog_raft::client). SIGTERM or Ctrl-C stops it cleanly; a SIGKILL is a crash, which the
//! replica recovers from on its next start with the same `--dir`.
//!
//! With `--topic T --partitions N` the process hosts N partitions' groups over one log dir
//! (`--dir`), one connection per peer node shared by all (oncelog_raft::Host).
//!
//! A local 3-replica cluster:
//!
//! ```text
//! P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
//! oncelog-raft-node --id 1 --dir d1 --listen 127.0.0.1:7001 --client 127.0.0.1:7101 --peers $P --init &
//! oncelog-raft-node --id 2 --dir d2 --listen 127.0.0.1:7002 --client 127.0.0.1:7102 --peers $P &
//! oncelog-raft-node --id 3 --dir d3 --listen 127.0.0.1:7003 --client 127.0.0.1:7103 --peers $P &
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use oncelog::Environment;
use oncelog_raft::host::HostConfig;
use oncelog_raft::network::tcp::{self, TcpNetwork};
use oncelog_raft::{client, Host, Node, NodeId, Replica, ReplicaConfig};
use openraft::error::{InitializeError, RaftError};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

/// One replica of an oncelog partition replicated on openraft.
#[derive(Debug, Parser)]
#[command(name = "oncelog-raft-node", version)]
struct Args {
    /// This replica's id (one of those in --peers).
    #[arg(long)]
    id: NodeId,
    /// The partition directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Where raft RPCs from the other replicas arrive (this replica's address in --peers).
    #[arg(long)]
    listen: SocketAddr,
    /// Where clients connect (produce, read committed, status).
    #[arg(long)]
    client: SocketAddr,
    /// Every replica of the group, this one included: ID=HOST:PORT,ID=HOST:PORT,...
    #[arg(long, value_parser = parse_peers)]
    peers: BTreeMap<NodeId, Node>,
    /// Form the group with all --peers as members (on one replica, the first time; ignored if
    /// this replica's log already holds a membership). With --topic: every group.
    #[arg(long)]
    init: bool,
    /// Host many partitions of this topic (docs/design.md, "Many partitions per process"):
    /// --dir is then a log dir holding them all, and clients name the partition.
    #[arg(long)]
    topic: Option<String>,
    /// With --topic: how many partitions (groups TOPIC-0 .. TOPIC-(N-1)), each led by its
    /// preferred node (partition i: the (i mod n)-th of --peers) when it can be.
    #[arg(long, default_value_t = 1, requires = "topic")]
    partitions: i32,
    /// With --topic: the most partitions one raft group replicates (docs/design.md, "Partition
    /// sets"). 1: a group per partition; more: the partitions that prefer the same node go
    /// in sets of up to this many, one consensus round and one flush per replica carrying the
    /// batches waiting for any of them. Every node must be given the same.
    #[arg(long, default_value_t = 1, requires = "topic", value_parser = clap::value_parser!(u16).range(1..=4096))]
    set_size: u16,
}

fn parse_peers(s: &str) -> Result<BTreeMap<NodeId, Node>, String> {
    let mut peers = BTreeMap::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected ID=HOST:PORT"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|e| format!("{part:?}: the id {id:?} is not a number: {e}"))?;
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|e| format!("{part:?}: the address {addr:?}: {e}"))?;
        if peers.insert(id, Node::new(addr.to_string())).is_some() {
            return Err(format!("replica {id} is named twice"));
        }
    }
    if peers.is_empty() {
        return Err("no replica named".into());
    }
    Ok(peers)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oncelog-raft-node: the runtime did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oncelog-raft-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let me = args
        .peers
        .get(&args.id)
        .ok_or_else(|| anyhow::anyhow!("--id {} is not among --peers", args.id))?;
    if me.addr != args.listen.to_string() {
        anyhow::bail!(
            "--listen {} is not replica {}'s address in --peers ({})",
            args.listen,
            args.id,
            me.addr
        );
    }
    // Listen before raft starts, so the first RPCs find the port open.
    let raft_listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("--listen {}: {e}", args.listen))?;
    let client_listener = TcpListener::bind(args.client)
        .await
        .map_err(|e| anyhow::anyhow!("--client {}: {e}", args.client))?;
    let mut term = signal(SignalKind::terminate())?;

    if let Some(topic) = args.topic.clone() {
        return run_host(args, topic, raft_listener, client_listener, term).await;
    }
    let replica = Replica::open(
        args.id,
        &args.dir,
        Environment::default(),
        ReplicaConfig::default(),
        TcpNetwork::default(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{}: {e}", args.dir.display()))?;
    let replica = Arc::new(replica);
    let raft_server = tcp::serve(raft_listener, replica.raft().clone());
    let client_server = client::serve(client_listener, Arc::clone(&replica));

    if args.init {
        match replica.raft().initialize(args.peers.clone()).await {
            Ok(()) => eprintln!(
                "replica {}: group formed with {:?}",
                args.id,
                args.peers.keys()
            ),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                eprintln!(
                    "replica {}: already a member of a group; --init ignored",
                    args.id
                )
            }
            Err(e) => anyhow::bail!("--init: {e}"),
        }
    }
    eprintln!(
        "replica {} serving raft on {} and clients on {}",
        args.id, args.listen, args.client
    );

    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    eprintln!("replica {}: stopping", args.id);
    client_server.abort();
    replica
        .shutdown()
        .await
        .map_err(|e| anyhow::anyhow!("shutdown: {e}"))?;
    raft_server.abort();
    // Raft is stopped, so nothing appends any more: close the log, which records a clean
    // shutdown (the next open reads no segment to recover it).
    if let Err(e) = replica.log().close() {
        anyhow::bail!("closing the log: {e}");
    }
    Ok(())
}

/// Many partitions in one process: a [`Host`] over the log dir `--dir`.
async fn run_host(
    args: Args,
    topic: String,
    raft_listener: TcpListener,
    client_listener: TcpListener,
    mut term: tokio::signal::unix::Signal,
) -> anyhow::Result<()> {
    let config = HostConfig {
        id: args.id,
        peers: args.peers.clone(),
        topic,
        partitions: args.partitions,
        set_size: usize::from(args.set_size),
        replica: ReplicaConfig::default(),
    };
    let host = Host::open(&args.dir, Environment::default(), config)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.dir.display()))?;
    let host = Arc::new(host);
    let raft_server = host.serve_raft(raft_listener);
    let client_server = client::serve(client_listener, Arc::clone(&host));
    if args.init {
        host.initialize()
            .await
            .map_err(|e| anyhow::anyhow!("--init: {e}"))?;
        eprintln!(
            "node {}: {} groups formed with {:?}",
            args.id,
            host.sets().len(),
            args.peers.keys()
        );
    }
    let balancer = host.keep_balanced(std::time::Duration::from_secs(1));
    eprintln!(
        "node {} serving {} partitions in {} groups: raft on {} and clients on {}",
        args.id,
        args.partitions,
        host.sets().len(),
        args.listen,
        args.client
    );
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    eprintln!("node {}: stopping", args.id);
    balancer.abort();
    client_server.abort();
    let _ = balancer.await;
    let _ = client_server.await;
    host.shutdown()
        .await
        .map_err(|e| anyhow::anyhow!("shutdown: {e}"))?;
    raft_server.abort();
    let _ = raft_server.await;
    host.close()
        .await
        .map_err(|e| anyhow::anyhow!("closing the log dir: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{parse_peers, Args};

    #[test]
    fn partitions_need_a_topic() {
        let base = [
            "oncelog-raft-node",
            "--id",
            "1",
            "--dir",
            "d",
            "--listen",
            "127.0.0.1:7001",
            "--client",
            "127.0.0.1:7101",
            "--peers",
            "1=127.0.0.1:7001",
        ];
        let e = Args::try_parse_from(base.iter().chain(&["--partitions", "4"])).unwrap_err();
        assert!(e.to_string().contains("--topic"), "{e}");
        let a = Args::try_parse_from(base.iter().chain(&["--topic", "t", "--partitions", "4"]))
            .unwrap();
        assert_eq!((a.topic.as_deref(), a.partitions), (Some("t"), 4));
        let a = Args::try_parse_from(base).unwrap();
        assert_eq!((a.topic, a.partitions, a.set_size), (None, 1, 1));
        let e = Args::try_parse_from(base.iter().chain(&["--set-size", "4"])).unwrap_err();
        assert!(e.to_string().contains("--topic"), "{e}");
        for bad in ["0", "4097", "x"] {
            let e = Args::try_parse_from(base.iter().chain(&["--topic", "t", "--set-size", bad]))
                .unwrap_err();
            assert!(e.to_string().contains("--set-size"), "{bad}: {e}");
        }
        let a =
            Args::try_parse_from(base.iter().chain(&["--topic", "t", "--set-size", "34"])).unwrap();
        assert_eq!(a.set_size, 34);
    }

    #[test]
    fn peers_parse_and_bad_ones_say_why() {
        let p = parse_peers("1=127.0.0.1:7001,2=127.0.0.1:7002").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[&2].addr, "127.0.0.1:7002");
        assert!(parse_peers("1:127.0.0.1:7001")
            .unwrap_err()
            .contains("expected ID=HOST:PORT"));
        assert!(parse_peers("x=127.0.0.1:7001")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_peers("1=localhost")
            .unwrap_err()
            .contains("the address"));
        assert!(parse_peers("1=127.0.0.1:1,1=127.0.0.1:2")
            .unwrap_err()
            .contains("named twice"));
        assert!(parse_peers("").unwrap_err().contains("no replica"));
    }
}
