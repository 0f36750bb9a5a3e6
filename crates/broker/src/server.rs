//! The listener: opens the data directory, accepts connections, and shuts down cleanly.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::api::CommittedOffsets;
use crate::broker::{Broker, Endpoint};
use crate::codec::{FrameLimits, RequestMemory};
use crate::config::{BrokerConfig, FlushPolicy, TimestampType};
use crate::connection;
use crate::consumer_group::ConsumerGroups;
use crate::coordinator::Groups;
use crate::internal_log::StateLogError;
use crate::producer_ids::{ProducerIdError, ProducerIds};
use crate::share::ShareGroups;
use crate::stats::Stats;
use crate::store::{Store, StoreError};
use crate::txn_coordinator::{self, TxnLogError, Txns};

/// In cluster mode, the broker's own directory inside the data directory (the raft host's
/// log dir): not of the form `<topic>-<partition>`, so the log dir leaves it alone.
pub const CLUSTER_NODE_DIR: &str = "oncelog-node-local";

/// How long connections get at shutdown to answer the requests they already read.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create a temporary data directory: {0}")]
    TempDir(io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    ProducerIds(#[from] ProducerIdError),
    /// The offsets log or the share state log (each error names its file).
    #[error(transparent)]
    StateLog(#[from] StateLogError),
    #[error(transparent)]
    Txns(#[from] TxnLogError),
    #[error("cannot settle the transaction of {0}")]
    Settle(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("startup task failed: {0}")]
    Task(String),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// Partitions that could not be closed cleanly at shutdown (they recover on the next start).
#[derive(Debug, thiserror::Error)]
#[error("{} partitions did not close cleanly: {}", .0.len(), .0.iter().map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>().join("; "))]
pub struct ShutdownError(pub Vec<(String, String)>);

/// A bound, ready broker.
pub struct Server {
    listener: TcpListener,
    broker: Arc<Broker>,
    limits: FrameLimits,
    data_dir: PathBuf,
    /// Removed when the server is dropped.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Opens (recovering if need be) every partition of the data directory and binds the
    /// listener.
    pub async fn bind(config: BrokerConfig) -> Result<Server, StartError> {
        let (data_dir, temp_dir) = match &config.data {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("oncelog-broker-")
                    .tempdir()
                    .map_err(StartError::TempDir)?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        // In cluster mode the data directory is the raft host's log dir, and the broker's own
        // state (its producer-id reservation; the single broker's logs, unused) lives in a
        // directory of its own inside it, which the log dir leaves alone (not a partition's
        // name).
        let own_dir = match &config.cluster {
            Some(_) => data_dir.join(CLUSTER_NODE_DIR),
            None => data_dir.clone(),
        };
        let (dir, settings, node_id) = (own_dir, config.log.clone(), config.node_id);
        let consumer_settings = config.consumer_groups;
        let share_settings = config.share_groups;
        let (store, producer_ids, offsets, txns, groups, shares) =
            tokio::task::spawn_blocking(move || {
                let store = Store::open(&dir, &settings, node_id)?;
                let producer_ids = ProducerIds::open(&dir)?;
                let offsets = CommittedOffsets::open(&dir)?;
                let (txns, unsettled) = Txns::open(&dir)?;
                // Transactions a crash left: a decided commit is completed, the rest aborted.
                for ending in &unsettled {
                    txn_coordinator::write_ending(&store, &offsets, &txns, ending).map_err(
                        |e| StartError::Settle(format!("{}: {e:?}", ending.transactional_id)),
                    )?;
                }
                txn_coordinator::abort_orphans(&store);
                // The groups as their last records left them (no rebalance after a restart).
                let now = std::time::Instant::now();
                let groups = Groups::restore(offsets.stored_groups()?, now);
                let topics = crate::api::topic_infos(&store);
                groups.set_consumer_groups(ConsumerGroups::restore(
                    offsets.stored_consumer_groups()?,
                    &topics,
                    now,
                ));
                groups.set_consumer_settings(consumer_settings);
                let shares = ShareGroups::open(&dir, share_settings)?;
                Ok::<_, StartError>((store, producer_ids, offsets, txns, groups, shares))
            })
            .await
            .map_err(|e| StartError::Task(e.to_string()))??;
        let cluster = match config.cluster.clone() {
            Some(nodes) => {
                let tuning = crate::cluster::ClusterTuning {
                    retention_check: config.log.retention_check,
                    raft_snapshot_entries: config.raft_snapshot_entries,
                    raft_heartbeat: config.raft_heartbeat,
                };
                Some(crate::cluster::Cluster::start(&data_dir, nodes, tuning).await?)
            }
            None => None,
        };
        // A cluster node's coordinator writes to and loads from its replica of the offsets
        // group instead (the own log stays unused).
        let offsets = match &cluster {
            Some(c) => {
                let log = c.offsets_log().map_err(|error| {
                    StartError::Cluster(crate::cluster::ClusterError::Host {
                        dir: data_dir.display().to_string(),
                        error,
                    })
                })?;
                let _ = offsets.close();
                CommittedOffsets::replicated(log)
            }
            None => offsets,
        };
        // And its transaction coordinator shares that replica.
        let txns = match &cluster {
            Some(c) => {
                let replicated = c.transactions_log().map_err(|error| {
                    StartError::Cluster(crate::cluster::ClusterError::Host {
                        dir: data_dir.display().to_string(),
                        error,
                    })
                })?;
                let _ = txns.close();
                replicated
            }
            None => txns,
        };
        // And so does its share coordinator.
        let shares = match &cluster {
            Some(c) => {
                let log = c.share_state_log().map_err(|error| {
                    StartError::Cluster(crate::cluster::ClusterError::Host {
                        dir: data_dir.display().to_string(),
                        error,
                    })
                })?;
                let _ = shares.close();
                ShareGroups::replicated(log, share_settings)
            }
            None => shares,
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let local = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        let (host, port) = config
            .advertised_listener
            .clone()
            .unwrap_or_else(|| (local.ip().to_string(), local.port()));
        let broker = Broker {
            store: Arc::new(store),
            producer_ids: Arc::new(producer_ids),
            offsets,
            groups,
            txns,
            shares,
            stats: Stats::default(),
            endpoint: Endpoint {
                node_id: config.node_id,
                host,
                port,
            },
            default_partitions: config.partitions,
            auto_create_topics: config.auto_create_topics,
            log_append_time: config.log.message_timestamp_type == TimestampType::LogAppendTime,
            acks_all_flushes: config.log.flush != FlushPolicy::Never,
            request_memory: RequestMemory::new(config.queued_max_request_bytes),
            cluster,
        };
        let broker = Arc::new(broker);
        if let Some(c) = &broker.cluster {
            let watching =
                crate::cluster::coordinator::keep_coordinating(Arc::clone(&broker), Arc::clone(c));
            c.keep(watching);
        }
        Ok(Server {
            listener,
            broker,
            limits: FrameLimits {
                max_frame: config.max_request_bytes,
                idle: config.connections_max_idle,
                read_deadline: config.request_read_timeout,
            },
            data_dir,
            _temp_dir: temp_dir,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Serves until `shutdown` completes, then stops accepting, lets connections answer what
    /// they already read, and closes every partition cleanly (flush, producer snapshot,
    /// clean-shutdown checkpoint).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ShutdownError> {
        let (stop, stopping) = watch::channel(false);
        // Session timeouts and join-phase deadlines of the groups.
        let ticking = Arc::clone(&self.broker);
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            let mut ticks = 0u64;
            loop {
                every.tick().await;
                // A cluster node expires members only while it coordinates: elsewhere its
                // groups are none (unloaded) or on their way out, and an expiry there would
                // be a change no coordinator made.
                if ticking.cluster.as_ref().is_none_or(|c| c.coordinating()) {
                    ticking.groups.tick();
                }
                ticks += 1;
                // The broker's own compacted logs, every 15 s (Kafka's log.cleaner.backoff.ms).
                if ticks % 150 == 0 {
                    let b = Arc::clone(&ticking);
                    let _ = tokio::task::spawn_blocking(move || {
                        let now = oncelog::Clock::now_ms(&oncelog::SystemClock);
                        if let Err(e) = b.offsets.compact_if_due(now) {
                            tracing::error!(error = %e, "cannot compact the offsets log");
                        }
                        if let Err(e) = b.txns.compact_if_due(now) {
                            tracing::error!(error = %e, "cannot compact the transaction log");
                        }
                        if let Err(e) = b.shares.compact_if_due(now) {
                            tracing::error!(error = %e, "cannot compact the share state log");
                        }
                    })
                    .await;
                }
                // Tiered storage's failures, logged once each (the job retries with backoff).
                if ticks % 10 == 0 {
                    let b = Arc::clone(&ticking);
                    let _ = tokio::task::spawn_blocking(move || {
                        for (topic, partition, status) in b.store.new_tier_failures() {
                            tracing::warn!(
                                topic,
                                partition,
                                failures_in_a_row = status.consecutive_failures,
                                retry_at_ms = status.retry_at_ms,
                                error = status.last_failure.as_deref().unwrap_or(""),
                                "tiered storage: the tiering job failed for the partition"
                            );
                        }
                    })
                    .await;
                }
                let b = Arc::clone(&ticking);
                // Transactions past their timeout are aborted (markers: off the reactor), and
                // the group records the tick queued (an emptied group) are written.
                let _ = tokio::task::spawn_blocking(move || {
                    b.offsets.store_groups(&b.groups);
                    // Share groups: expired acquisition locks and member sessions.
                    // Only where they are coordinated: a deposed node writes no expiry.
                    match &b.cluster {
                        None => b.shares.tick(&crate::api::topic_infos(&b.store)),
                        Some(c) if c.coordinating() => {
                            b.shares.tick(&crate::api::cluster_topic_infos(c))
                        }
                        Some(_) => {}
                    }
                    for ending in b.txns.expired() {
                        let abort = {
                            let b = Arc::clone(&b);
                            move || {
                                if let Err(e) = txn_coordinator::write_ending_of(&b, &ending) {
                                    tracing::error!(error = ?e, "cannot abort a timed-out transaction");
                                }
                            }
                        };
                        // A cluster's markers wait for partition leaders, which may move:
                        // not in the way of the next tick.
                        if b.cluster.is_some() {
                            tokio::runtime::Handle::current().spawn_blocking(abort);
                        } else {
                            abort();
                        }
                    }
                })
                .await;
            }
        });
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        tracing::debug!(client = %peer, "connection accepted");
                        connections.spawn(connection::serve(
                            Arc::clone(&self.broker),
                            stream,
                            peer,
                            self.limits,
                            stopping.clone(),
                        ));
                    }
                    Err(e) => {
                        // Out of file descriptors, or a connection reset before accept: keep
                        // serving the others, after a breath so a persistent error cannot spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        tracing::info!("shutting down");
        drop(self.listener);
        let _ = stop.send(true);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = connections.len(),
                "connections still busy at shutdown; dropping them"
            );
            connections.shutdown().await;
        }
        ticker.abort();
        let store = Arc::clone(&self.broker.store);
        let broker = Arc::clone(&self.broker);
        let failed = tokio::task::spawn_blocking(move || {
            let mut failed = store.close();
            if let Err(e) = broker.offsets.close() {
                failed.push(("__consumer_offsets".to_string(), e.to_string()));
            }
            if let Err(e) = broker.txns.close() {
                failed.push(("__transaction_state".to_string(), e.to_string()));
            }
            if let Err(e) = broker.shares.close() {
                failed.push(("__share_group_state".to_string(), e.to_string()));
            }
            failed
        })
        .await
        .unwrap_or_else(|e| vec![("store".to_string(), e.to_string())]);
        let mut failed = failed;
        if let Some(cluster) = &self.broker.cluster {
            if let Err(e) = cluster.close().await {
                failed.push(("the cluster's raft groups".to_string(), e.to_string()));
            }
        }
        self.broker.stats.log(self.broker.request_memory.peak());
        if failed.is_empty() {
            tracing::info!(data = %self.data_dir.display(), "every partition closed cleanly");
            Ok(())
        } else {
            Err(ShutdownError(failed))
        }
    }
}
