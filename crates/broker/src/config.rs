//! The broker's settings: command-line flags, checked and turned into plain data.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;

use crate::cluster::ClusterNodes;

/// When appends are made durable (`--flush`). Except under `never`, an `acks=all` produce is
/// answered only once its batch is durable; the policy decides what `acks=0` and `acks=1`
/// writes get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// When an `acks=all` produce needs it, and at shutdown.
    Manual,
    /// Only at shutdown: `acks=all` is answered from the page cache, as Kafka answers it by
    /// default (`flush.messages` unset). A crash of the machine can lose acknowledged batches;
    /// a crash of the broker process alone cannot (the page cache survives it).
    Never,
    /// Every append is durable before it is answered, whatever its acks.
    Always,
    /// After this many records since the last flush (Kafka's `flush.messages`).
    EveryMessages(u64),
}

impl FromStr for FlushPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "manual" => Ok(FlushPolicy::Manual),
            "never" => Ok(FlushPolicy::Never),
            "always" => Ok(FlushPolicy::Always),
            _ => match s.strip_prefix("every:").map(str::parse::<u64>) {
                Some(Ok(n)) if n > 0 => Ok(FlushPolicy::EveryMessages(n)),
                _ => Err(format!(
                    "expected manual, never, always or every:N with N >= 1, got {s:?}"
                )),
            },
        }
    }
}

/// Which timestamp a stored batch carries (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimestampType {
    /// The producer's own timestamps.
    CreateTime,
    /// The broker's clock at append.
    LogAppendTime,
}

/// What recovery may cut after an unclean shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecoveryMode {
    /// Cut a torn tail of unflushed writes; damage to durable data refuses to open.
    TolerateTail,
    /// Cut at the first bad batch anywhere (Kafka's behaviour).
    TolerateAny,
    /// Refuse to open on any bad byte.
    Absolute,
}

/// `oncelog-broker`: a Kafka-protocol broker on oncelog partition logs.
#[derive(Debug, Clone, Parser)]
#[command(name = "oncelog-broker", version, about)]
pub struct Args {
    /// Data directory: one `<topic>-<partition>` log directory per partition, as Kafka lays out
    /// a log dir. A fresh temporary directory when absent (printed at start, removed at exit).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Address to listen on; port 0 picks a free one (the bound address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,

    /// HOST:PORT that clients are told to connect to (Kafka's `advertised.listeners`); the
    /// bound address by default. A proxy in front of the broker sets its own address here.
    #[arg(long, value_name = "HOST:PORT")]
    pub advertised_listener: Option<String>,

    /// This broker's node id in Metadata and FindCoordinator answers.
    #[arg(long, default_value_t = 1)]
    pub node_id: i32,

    /// Partitions of a topic created automatically by a Metadata request (`num.partitions`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=10_000))]
    pub partitions: i32,

    /// Refuse to create topics that Metadata asks for (`auto.create.topics.enable=false`).
    #[arg(long)]
    pub no_auto_create_topics: bool,

    /// Segment size in bytes (`segment.bytes`). Each partition's active segment is allocated
    /// to this size on disk, hence a default smaller than Kafka's 1 GiB.
    #[arg(long, default_value_t = 64 << 20)]
    pub segment_bytes: usize,

    /// When appends are made durable: manual (acks=all flushes), never (nothing flushes
    /// before shutdown, as Kafka by default), always, or every:N (records).
    #[arg(long, default_value = "manual")]
    pub flush: FlushPolicy,

    /// Batches remembered per producer for duplicate detection (Kafka: 5, fixed).
    #[arg(long, default_value_t = 5)]
    pub dedup_window: usize,

    /// Bytes of each active segment kept faulted in ahead of the writer (0: none).
    #[arg(long, default_value_t = PREFAULT_BYTES)]
    pub prefault_bytes: usize,

    /// Most producers remembered per partition; the one idle the longest is forgotten first.
    #[arg(long)]
    pub max_producers: Option<usize>,

    /// A producer idle this long is forgotten (`producer.id.expiration.ms`).
    #[arg(long, default_value_t = 86_400_000)]
    pub producer_expiration_ms: i64,

    /// The largest batch accepted (`max.message.bytes`).
    #[arg(long, default_value_t = 1_048_588)]
    pub max_message_bytes: usize,

    /// Timestamps stored in batches (`message.timestamp.type`).
    #[arg(long, value_enum, default_value_t = TimestampType::CreateTime)]
    pub message_timestamp_type: TimestampType,

    /// What recovery may cut after an unclean shutdown.
    #[arg(long, value_enum, default_value_t = RecoveryMode::TolerateTail)]
    pub recovery_mode: RecoveryMode,

    /// The largest request frame accepted (`socket.request.max.bytes`); a larger one closes
    /// the connection. A frame's buffer grows with the bytes received, never to the announced
    /// size up front.
    #[arg(long, default_value_t = 100 << 20)]
    pub max_request_bytes: usize,

    /// Bytes all connections together may hold in requests received but not yet handled
    /// (`queued.max.request.bytes`; Kafka's default is unbounded). A connection whose next
    /// request does not fit stops reading until others are handled. At least
    /// --max-request-bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub queued_max_request_bytes: usize,

    /// A connection with no request under way for this long is closed
    /// (`connections.max.idle.ms`).
    #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_max_idle_ms: u64,

    /// A request must arrive whole within this long of its first byte, or its connection is
    /// closed (a client trickling bytes is not waited on forever). Time a request waits for
    /// --queued-max-request-bytes is not counted.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_read_timeout_ms: u64,

    /// A member of a consumer-protocol group (KIP-848) silent this long is removed
    /// (`group.consumer.session.timeout.ms`).
    #[arg(long, default_value_t = crate::consumer_group::DEFAULT_SESSION_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub group_consumer_session_timeout_ms: u64,

    /// How often members of a consumer-protocol group heartbeat
    /// (`group.consumer.heartbeat.interval.ms`).
    #[arg(long, default_value_t = crate::consumer_group::DEFAULT_HEARTBEAT_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub group_consumer_heartbeat_interval_ms: u64,

    /// How long a share group member holds the records a ShareFetch acquired for it before
    /// they are delivered again (`group.share.record.lock.duration.ms`).
    #[arg(long, default_value_t = crate::share::DEFAULT_LOCK_DURATION_MS,
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub group_share_record_lock_duration_ms: u64,

    /// How many times a share group delivers a record before archiving it
    /// (`group.share.delivery.count.limit`).
    #[arg(long, default_value_t = crate::share::DEFAULT_DELIVERY_COUNT_LIMIT,
          value_parser = clap::value_parser!(i16).range(1..))]
    pub group_share_delivery_count_limit: i16,

    /// A share group member silent this long is removed (`group.share.session.timeout.ms`).
    #[arg(long, default_value_t = crate::share::DEFAULT_SESSION_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub group_share_session_timeout_ms: u64,

    /// Turns tiered storage on (Kafka's `remote.log.storage.system.enable`): sealed segments
    /// of every partition whose `cleanup.policy` does not compact are uploaded to an object
    /// store kept in this directory (object_store's local file system), and fetches below a
    /// partition's local log start are served from it.
    #[arg(long, value_name = "DIR")]
    pub tier_dir: Option<PathBuf>,

    /// Turns tiered storage on with the object store at this URL instead of --tier-dir:
    /// `s3://BUCKET/PATH` (AWS S3, or an S3-compatible server such as MinIO, Ceph or R2 with
    /// `--tier-option endpoint=URL`), `gs://BUCKET/PATH`, `az://CONTAINER/PATH`, or
    /// `file:///DIR`. Credentials and the rest come from --tier-option and the usual
    /// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, ...). The store
    /// must do conditional puts (S3's `If-None-Match`): the broker checks at start.
    #[arg(long, value_name = "URL")]
    pub tier_url: Option<String>,

    /// One setting of the --tier-url store, `KEY=VALUE`, repeated: object_store's
    /// configuration keys (`endpoint`, `region`, `allow_http`, `access_key_id`,
    /// `secret_access_key`, `virtual_hosted_style_request`, `timeout`, `connect_timeout`, ...)
    /// and `max_retries`, `retry_timeout`. An unknown key stops the broker, naming it.
    #[arg(long = "tier-option", value_name = "KEY=VALUE")]
    pub tier_options: Vec<String>,

    /// The key prefix of the broker's objects in the store: partition `<topic>-<n>` lives
    /// under `<prefix>/<topic>-<n>` (what `oncelog tier status --prefix` takes).
    #[arg(long, value_name = "PREFIX", default_value = "oncelog")]
    pub tier_prefix: String,

    /// How often the tiering job uploads and applies local retention
    /// (`remote.log.manager.task.interval.ms`).
    #[arg(long, default_value_t = 30_000, allow_negative_numbers = true)]
    pub tier_interval_ms: i64,

    /// The most bytes the tiering job uploads per second, over all partitions
    /// (`remote.log.manager.copy.max.bytes.per.second`); unbounded when absent.
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true)]
    pub tier_bytes_per_second: Option<i64>,

    /// The most bytes of fetched remote objects (indexes, blocks of segments) kept in memory
    /// to serve reads below the local log start again (`oncelog::tier::CachedStore`; 0: no
    /// cache). Default 256 MiB.
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true)]
    pub tier_cache_bytes: Option<i64>,

    /// Local copies of uploaded segments older than this go (`log.local.retention.ms`; -1: no
    /// limit, the default). Only segments the object store's manifest names are deleted.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub local_retention_ms: i64,

    /// Local copies of uploaded segments go, oldest first, while a partition's local segments
    /// hold more than this (`log.local.retention.bytes`; -1: no limit, the default).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub local_retention_bytes: i64,

    /// Runs this broker as node --node-id of a replicated cluster: every node and its two
    /// listeners, `ID=HOST:KAFKA_PORT:RAFT_PORT,...` (docs/design.md, "A cluster of brokers").
    /// Kafka clients connect to the node's own KAFKA_PORT (--listen is not used), its peers
    /// to its RAFT_PORT. Needs --data; tiered storage, --advertised-listener, --flush other
    /// than manual and log-append-time timestamps are refused with it.
    #[arg(long, value_name = "ID=HOST:KAFKA_PORT:RAFT_PORT,...")]
    pub cluster: Option<String>,

    /// For tests: dial these peers' raft listeners at HOST:PORT instead of their --cluster
    /// entries (a proxy that can cut the link in between). The cluster, its id and every
    /// listener stay as --cluster names them. Needs --cluster.
    #[arg(long, value_name = "ID=HOST:PORT,...", requires = "cluster")]
    pub cluster_dial: Option<String>,

    /// How often retention runs on every partition (`log.retention.check.interval.ms`): the
    /// log manager's job on a single broker, each node's job over its replicas in cluster mode.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_check_interval_ms: u64,

    /// Cluster mode: raft takes a snapshot of a partition every this many entries and keeps
    /// as many after it; each snapshot lets raft purge what it covers, and retention and
    /// DeleteRecords delete bytes only below raft's purge point (docs/design.md, "Retention
    /// and DeleteRecords in a cluster"). Smaller lets them delete sooner, at the cost of
    /// sending a lagging replica an image more often.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..),
          requires = "cluster")]
    pub raft_snapshot_entries: u64,

    /// Cluster mode: how often a partition's raft leader heartbeats each follower, in ms; a
    /// follower that hears nothing for 6 to 12 heartbeats stands for election, and an
    /// AppendEntries answer later than one heartbeat is retried. Every partition heartbeats on
    /// its own, so a node's heartbeats grow with its partitions: shorter fails over and moves
    /// leaders back to their preferred replicas sooner, longer costs less CPU on a node with
    /// many partitions (docs/design.md, "Heartbeats and elections").
    #[arg(long, default_value_t = DEFAULT_RAFT_HEARTBEAT_MS,
          value_parser = clap::value_parser!(u64).range(10..=10_000), requires = "cluster")]
    pub raft_heartbeat_ms: u64,
}

/// `--raft-heartbeat-ms`'s default.
pub const DEFAULT_RAFT_HEARTBEAT_MS: u64 = 50;

/// The read cache's default budget (`--tier-cache-bytes`).
pub const DEFAULT_TIER_CACHE_BYTES: u64 = 256 << 20;

/// The engine's default prefault distance.
pub const PREFAULT_BYTES: usize = 8 << 20;

/// Where tiered storage's object store is (`--tier-dir` or `--tier-url`). Its `Debug` shows
/// the options' keys only: their values may be credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum TierLocation {
    /// A directory on the local file system (`--tier-dir`).
    Dir(PathBuf),
    /// A store URL with its options (`--tier-url`, `--tier-option`), in the order given.
    Url {
        url: String,
        options: Vec<(String, String)>,
    },
}

impl std::fmt::Debug for TierLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TierLocation::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            TierLocation::Url { url, options } => f
                .debug_struct("Url")
                .field("url", url)
                .field(
                    "option_keys",
                    &options.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                )
                .finish(),
        }
    }
}

/// Tiered storage (`--tier-dir` or `--tier-url`, and their settings), checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSettings {
    /// The object store.
    pub location: TierLocation,
    /// The key prefix; a good one (`oncelog::tier::keys::check_partition_prefix`).
    pub prefix: String,
    /// How often the tiering job runs.
    pub interval: Duration,
    /// The job's upload bound; `None`: unbounded.
    pub bytes_per_second: Option<u64>,
    /// The read cache's budget in bytes (0: none).
    pub cache_bytes: u64,
    /// `local.retention.ms`; `None`: no limit.
    pub local_retention_ms: Option<i64>,
    /// `local.retention.bytes`; `None`: no limit.
    pub local_retention_bytes: Option<u64>,
}

/// The settings of every partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub segment_bytes: usize,
    pub flush: FlushPolicy,
    pub dedup_window: usize,
    pub prefault_bytes: usize,
    pub max_producers: Option<usize>,
    pub producer_expiration_ms: i64,
    pub max_message_bytes: usize,
    pub message_timestamp_type: TimestampType,
    pub recovery_mode: RecoveryMode,
    /// Tiered storage; `None`: off.
    pub tier: Option<TierSettings>,
    /// How often retention runs (`log.retention.check.interval.ms`).
    pub retention_check: Duration,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            segment_bytes: 64 << 20,
            flush: FlushPolicy::Manual,
            dedup_window: 5,
            prefault_bytes: PREFAULT_BYTES,
            max_producers: None,
            producer_expiration_ms: 86_400_000,
            max_message_bytes: 1_048_588,
            message_timestamp_type: TimestampType::CreateTime,
            recovery_mode: RecoveryMode::TolerateTail,
            tier: None,
            retention_check: Duration::from_secs(300),
        }
    }
}

/// Everything the broker needs to start.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `None`: a temporary directory.
    pub data: Option<PathBuf>,
    pub listen: SocketAddr,
    pub advertised_listener: Option<(String, u16)>,
    pub node_id: i32,
    pub partitions: i32,
    pub auto_create_topics: bool,
    pub max_request_bytes: usize,
    /// At least `max_request_bytes`.
    pub queued_max_request_bytes: usize,
    pub connections_max_idle: Duration,
    pub request_read_timeout: Duration,
    pub log: LogSettings,
    pub consumer_groups: crate::consumer_group::ConsumerGroupSettings,
    pub share_groups: crate::share::ShareSettings,
    /// Cluster mode: every node; `None`: a single broker.
    pub cluster: Option<ClusterNodes>,
    /// Cluster mode: raft's snapshot interval and the entries kept after it
    /// (`--raft-snapshot-entries`).
    pub raft_snapshot_entries: u64,
    /// Cluster mode: raft's heartbeat interval (`--raft-heartbeat-ms`).
    pub raft_heartbeat: Duration,
}

/// A flag value the broker cannot run with.
#[derive(Debug, thiserror::Error)]
#[error("invalid --{flag} {value:?}: {rule}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub value: String,
    pub rule: &'static str,
}

impl Args {
    /// Checks the flags that clap cannot and returns the configuration.
    pub fn into_config(mut self) -> Result<BrokerConfig, ConfigError> {
        let tier = self.tier_settings()?;
        let cluster = self.cluster_nodes(tier.is_some())?;
        if let Some(c) = &cluster {
            let own = c.own();
            self.listen = format!("{}:{}", own.host, own.kafka_port)
                .parse()
                .or_else(|_| format!("[{}]:{}", own.host, own.kafka_port).parse())
                .map_err(|_| ConfigError {
                    flag: "cluster",
                    value: own.host.clone(),
                    rule: "this node's own host must be an IP address (it is where it listens)",
                })?;
            self.advertised_listener = Some(format!("{}:{}", own.host, own.kafka_port));
        }
        let advertised_listener = match self.advertised_listener {
            None => None,
            Some(value) => Some(parse_host_port(&value).ok_or(ConfigError {
                flag: "advertised-listener",
                value,
                rule: "must be HOST:PORT",
            })?),
        };
        if self.queued_max_request_bytes < self.max_request_bytes {
            return Err(ConfigError {
                flag: "queued-max-request-bytes",
                value: self.queued_max_request_bytes.to_string(),
                rule: "must be at least --max-request-bytes (a larger request could never be read)",
            });
        }
        if self.max_request_bytes > i32::MAX as usize {
            return Err(ConfigError {
                flag: "max-request-bytes",
                value: self.max_request_bytes.to_string(),
                rule: "must fit a frame's int32 size",
            });
        }
        Ok(BrokerConfig {
            cluster,
            data: self.data,
            listen: self.listen,
            advertised_listener,
            node_id: self.node_id,
            partitions: self.partitions,
            auto_create_topics: !self.no_auto_create_topics,
            max_request_bytes: self.max_request_bytes,
            queued_max_request_bytes: self.queued_max_request_bytes,
            connections_max_idle: Duration::from_millis(self.connections_max_idle_ms),
            request_read_timeout: Duration::from_millis(self.request_read_timeout_ms),
            consumer_groups: crate::consumer_group::ConsumerGroupSettings {
                session_timeout: Duration::from_millis(self.group_consumer_session_timeout_ms),
                heartbeat_interval: Duration::from_millis(
                    self.group_consumer_heartbeat_interval_ms,
                ),
            },
            share_groups: crate::share::ShareSettings {
                lock_duration: Duration::from_millis(self.group_share_record_lock_duration_ms),
                delivery_count_limit: self.group_share_delivery_count_limit,
                session_timeout: Duration::from_millis(self.group_share_session_timeout_ms),
                ..crate::share::ShareSettings::default()
            },
            log: LogSettings {
                segment_bytes: self.segment_bytes,
                flush: self.flush,
                dedup_window: self.dedup_window,
                prefault_bytes: self.prefault_bytes,
                max_producers: self.max_producers,
                producer_expiration_ms: self.producer_expiration_ms,
                max_message_bytes: self.max_message_bytes,
                message_timestamp_type: self.message_timestamp_type,
                recovery_mode: self.recovery_mode,
                tier,
                retention_check: Duration::from_millis(self.retention_check_interval_ms),
            },
            raft_snapshot_entries: self.raft_snapshot_entries,
            raft_heartbeat: Duration::from_millis(self.raft_heartbeat_ms),
        })
    }

    /// `--cluster`, checked against the flags cluster mode does not run with (`tiering`: a
    /// tiered-storage flag was given).
    fn cluster_nodes(&self, tiering: bool) -> Result<Option<ClusterNodes>, ConfigError> {
        let Some(value) = &self.cluster else {
            return Ok(None);
        };
        let refuse = |flag: &'static str, value: String, rule: &'static str| {
            Err(ConfigError { flag, value, rule })
        };
        if self.data.is_none() {
            return refuse(
                "cluster",
                value.clone(),
                "needs --data (a node's raft state must outlive the process)",
            );
        }
        if tiering {
            return refuse(
                "cluster",
                value.clone(),
                "cannot be given with tiered storage (--tier-dir, --tier-url): not replicated yet",
            );
        }
        if let Some(a) = &self.advertised_listener {
            return refuse(
                "advertised-listener",
                a.clone(),
                "cannot be given with --cluster (each node is advertised at its --cluster entry)",
            );
        }
        if self.flush != FlushPolicy::Manual {
            return refuse(
                "flush",
                format!("{:?}", self.flush),
                "cannot be given with --cluster (raft makes every append durable on a majority)",
            );
        }
        if self.message_timestamp_type == TimestampType::LogAppendTime {
            return refuse(
                "message-timestamp-type",
                "log-append-time".into(),
                "cannot be given with --cluster (replicas must store the same bytes)",
            );
        }
        let mut nodes = match ClusterNodes::parse(value, self.node_id) {
            Ok(nodes) => nodes,
            Err(e) => return refuse("cluster", e.entry, e.rule),
        };
        if let Some(dial) = &self.cluster_dial {
            if let Err(e) = nodes.dial_through(dial) {
                return refuse("cluster-dial", e.entry, e.rule);
            }
        }
        Ok(Some(nodes))
    }

    /// The tiered-storage flags, checked: each refusal names its flag. A tiering setting
    /// without `--tier-dir` or `--tier-url` is refused rather than ignored, as are both at
    /// once.
    fn tier_settings(&self) -> Result<Option<TierSettings>, ConfigError> {
        let bad = |flag: &'static str, value: String, rule: &'static str| ConfigError {
            flag,
            value,
            rule,
        };
        // Kafka's -1 is no limit; any other negative number is a mistake.
        let limit = |flag: &'static str, value: i64| match value {
            -1 => Ok(None),
            v if v >= 0 => Ok(Some(v)),
            v => Err(bad(
                flag,
                v.to_string(),
                "must be -1 (no limit) or at least 0",
            )),
        };
        let local_retention_ms = limit("local-retention-ms", self.local_retention_ms)?;
        let local_retention_bytes =
            limit("local-retention-bytes", self.local_retention_bytes)?.map(|v| v as u64);
        let bytes_per_second = match self.tier_bytes_per_second {
            None => None,
            Some(v) if v > 0 => Some(v as u64),
            Some(v) => {
                return Err(bad(
                    "tier-bytes-per-second",
                    v.to_string(),
                    "must be at least 1",
                ))
            }
        };
        let cache_bytes = match self.tier_cache_bytes {
            None => None,
            Some(v) if v >= 0 => Some(v as u64),
            Some(v) => return Err(bad("tier-cache-bytes", v.to_string(), "must be at least 0")),
        };
        if self.tier_interval_ms < 1 {
            return Err(bad(
                "tier-interval-ms",
                self.tier_interval_ms.to_string(),
                "must be at least 1",
            ));
        }
        if let Some(rule) = oncelog::tier::keys::check_partition_prefix(&self.tier_prefix) {
            return Err(bad("tier-prefix", self.tier_prefix.clone(), rule));
        }
        let options = self.tier_option_pairs()?;
        let location = match (&self.tier_dir, &self.tier_url) {
            (Some(_), Some(url)) => {
                return Err(bad(
                    "tier-url",
                    url.clone(),
                    "cannot be given with --tier-dir (one object store)",
                ))
            }
            (_, Some(url)) if !url.contains(':') => {
                return Err(bad(
                    "tier-url",
                    url.clone(),
                    "must be a URL (s3://BUCKET/PATH, gs://, az://, file:///DIR)",
                ))
            }
            (_, Some(url)) => Some(TierLocation::Url {
                url: url.clone(),
                options,
            }),
            (Some(dir), None) => match self.tier_options.first() {
                Some(o) => return Err(bad("tier-option", o.clone(), "needs --tier-url")),
                None => Some(TierLocation::Dir(dir.clone())),
            },
            (None, None) => None,
        };
        let Some(location) = location else {
            // Which tiering flag was given without the store it needs.
            let given = [
                ("tier-option", self.tier_options.first().cloned()),
                (
                    "local-retention-ms",
                    local_retention_ms.map(|v| v.to_string()),
                ),
                (
                    "local-retention-bytes",
                    local_retention_bytes.map(|v| v.to_string()),
                ),
                (
                    "tier-bytes-per-second",
                    bytes_per_second.map(|v| v.to_string()),
                ),
                ("tier-cache-bytes", cache_bytes.map(|v| v.to_string())),
            ];
            return match given.into_iter().find_map(|(f, v)| v.map(|v| (f, v))) {
                Some((flag, value)) => Err(bad(
                    flag,
                    value,
                    "needs --tier-dir or --tier-url (tiered storage)",
                )),
                None => Ok(None),
            };
        };
        Ok(Some(TierSettings {
            location,
            prefix: self.tier_prefix.clone(),
            interval: Duration::from_millis(self.tier_interval_ms as u64),
            bytes_per_second,
            cache_bytes: cache_bytes.unwrap_or(DEFAULT_TIER_CACHE_BYTES),
            local_retention_ms,
            local_retention_bytes,
        }))
    }
}

impl Args {
    /// `--tier-option KEY=VALUE`s as pairs: a key, an `=`, each key once.
    fn tier_option_pairs(&self) -> Result<Vec<(String, String)>, ConfigError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for option in &self.tier_options {
            let bad = |value: &str, rule| ConfigError {
                flag: "tier-option",
                value: value.to_string(),
                rule,
            };
            let (key, value) = match option.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => (k.trim(), v),
                _ => return Err(bad(option, "must be KEY=VALUE")),
            };
            if pairs.iter().any(|(k, _)| k == key) {
                // The key alone: the value may be a credential.
                return Err(bad(key, "gives a key a second time"));
            }
            pairs.push((key.to_string(), value.to_string()));
        }
        Ok(pairs)
    }
}

fn parse_host_port(value: &str) -> Option<(String, u16)> {
    let (host, port) = value.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policies_parse_as_the_engine_names_them() {
        assert_eq!("manual".parse(), Ok(FlushPolicy::Manual));
        assert_eq!("always".parse(), Ok(FlushPolicy::Always));
        assert_eq!("never".parse(), Ok(FlushPolicy::Never));
        assert_eq!("every:100".parse(), Ok(FlushPolicy::EveryMessages(100)));
        assert!("every:0".parse::<FlushPolicy>().is_err());
        assert!("every:".parse::<FlushPolicy>().is_err());
        assert!("sometimes".parse::<FlushPolicy>().is_err());
    }

    fn config(flags: &[&str]) -> Result<BrokerConfig, ConfigError> {
        let args = ["oncelog-broker"].iter().chain(flags);
        Args::try_parse_from(args).unwrap().into_config()
    }

    #[test]
    fn tiering_flags_become_tier_settings() {
        assert_eq!(config(&[]).unwrap().log.tier, None);
        let tier = config(&[
            "--tier-dir",
            "/r",
            "--tier-interval-ms",
            "250",
            "--tier-bytes-per-second",
            "1000",
            "--local-retention-ms",
            "60000",
            "--tier-cache-bytes",
            "0",
        ])
        .unwrap()
        .log
        .tier
        .unwrap();
        assert_eq!(
            tier,
            TierSettings {
                location: TierLocation::Dir(PathBuf::from("/r")),
                prefix: "oncelog".to_string(),
                interval: Duration::from_millis(250),
                bytes_per_second: Some(1000),
                cache_bytes: 0,
                local_retention_ms: Some(60_000),
                local_retention_bytes: None,
            }
        );
        let dir_only = config(&["--tier-dir", "/r"]).unwrap().log.tier.unwrap();
        assert_eq!(dir_only.cache_bytes, DEFAULT_TIER_CACHE_BYTES);
    }

    #[test]
    fn a_tier_url_takes_its_options_in_order() {
        let tier = config(&[
            "--tier-url",
            "s3://bucket/oncelog",
            "--tier-option",
            "endpoint=http://127.0.0.1:9000",
            "--tier-option",
            "allow_http=true",
            "--tier-option",
            "secret_access_key=a=b",
        ])
        .unwrap()
        .log
        .tier
        .unwrap();
        let pairs = [
            ("endpoint", "http://127.0.0.1:9000"),
            ("allow_http", "true"),
            ("secret_access_key", "a=b"),
        ];
        assert_eq!(
            tier.location,
            TierLocation::Url {
                url: "s3://bucket/oncelog".into(),
                options: pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }
        );
        assert_eq!(tier.prefix, "oncelog");
        // Values may be credentials: never in the Debug output.
        let shown = format!("{tier:?}");
        assert!(
            shown.contains("secret_access_key") && !shown.contains("a=b"),
            "{shown}"
        );
    }

    #[test]
    fn bad_tier_store_flags_are_refused_by_name() {
        let refused = |flags: &[&str]| {
            let e = config(flags).unwrap_err();
            (e.flag, e.value, e.rule)
        };
        let cases: [(&[&str], &str, &str, &str); 7] = [
            (
                &["--tier-dir", "/r", "--tier-url", "s3://b/p"],
                "tier-url",
                "s3://b/p",
                "cannot be given with --tier-dir (one object store)",
            ),
            (
                &["--tier-url", "bucket"],
                "tier-url",
                "bucket",
                "must be a URL (s3://BUCKET/PATH, gs://, az://, file:///DIR)",
            ),
            (
                &["--tier-url", "s3://b", "--tier-option", "region"],
                "tier-option",
                "region",
                "must be KEY=VALUE",
            ),
            (
                &["--tier-url", "s3://b", "--tier-option", "=x"],
                "tier-option",
                "=x",
                "must be KEY=VALUE",
            ),
            (
                &[
                    "--tier-url",
                    "s3://b",
                    "--tier-option",
                    "region=a",
                    "--tier-option",
                    "region=b",
                ],
                "tier-option",
                "region",
                "gives a key a second time",
            ),
            (
                &["--tier-dir", "/r", "--tier-option", "region=a"],
                "tier-option",
                "region=a",
                "needs --tier-url",
            ),
            (
                &["--tier-option", "region=a"],
                "tier-option",
                "region=a",
                "needs --tier-dir or --tier-url (tiered storage)",
            ),
        ];
        for (flags, flag, value, rule) in cases {
            assert_eq!(refused(flags), (flag, value.to_string(), rule), "{flags:?}");
        }
    }

    #[test]
    fn bad_tiering_flags_are_refused_by_name() {
        let refused = |flags: &[&str]| {
            let e = config(flags).unwrap_err();
            (e.flag, e.value)
        };
        let tiered = |extra: &[&'static str]| [&["--tier-dir", "/r"][..], extra].concat();
        let cases: [(Vec<&str>, &str, &str); 8] = [
            (
                tiered(&["--local-retention-ms", "-2"]),
                "local-retention-ms",
                "-2",
            ),
            (
                tiered(&["--local-retention-bytes", "-5"]),
                "local-retention-bytes",
                "-5",
            ),
            (
                tiered(&["--tier-interval-ms", "0"]),
                "tier-interval-ms",
                "0",
            ),
            (
                tiered(&["--tier-bytes-per-second", "-1"]),
                "tier-bytes-per-second",
                "-1",
            ),
            (tiered(&["--tier-prefix", "a b"]), "tier-prefix", "a b"),
            (vec!["--local-retention-ms", "5"], "local-retention-ms", "5"),
            (
                tiered(&["--tier-cache-bytes", "-1"]),
                "tier-cache-bytes",
                "-1",
            ),
            (
                vec!["--tier-cache-bytes", "1024"],
                "tier-cache-bytes",
                "1024",
            ),
        ];
        for (flags, flag, value) in cases {
            assert_eq!(refused(&flags), (flag, value.to_string()), "{flags:?}");
        }
        assert!(
            config(&["--local-retention-ms", "-1"]).is_ok(),
            "-1 is no limit"
        );
    }

    #[test]
    fn cluster_mode_takes_its_listener_from_its_own_entry() {
        let c = config(&[
            "--data",
            "d",
            "--node-id",
            "2",
            "--cluster",
            "1=127.0.0.1:9092:9192,2=127.0.0.1:9093:9193,3=127.0.0.1:9094:9194",
        ])
        .unwrap();
        let nodes = c.cluster.unwrap();
        assert_eq!(nodes.ids(), vec![1, 2, 3]);
        assert_eq!(c.listen, "127.0.0.1:9093".parse().unwrap());
        assert_eq!(c.advertised_listener, Some(("127.0.0.1".into(), 9093)));
        assert!(config(&[]).unwrap().cluster.is_none());
    }

    #[test]
    fn the_raft_heartbeat_is_a_cluster_flag_within_bounds() {
        let three = "1=127.0.0.1:9092:9192,2=127.0.0.1:9093:9193,3=127.0.0.1:9094:9194";
        let cluster = |more: &[&'static str]| {
            let mut flags = vec!["--data", "d", "--node-id", "1", "--cluster", three];
            flags.extend(more);
            let args = ["oncelog-broker"].into_iter().chain(flags);
            Args::try_parse_from(args).map(|a| a.into_config().unwrap())
        };
        let default = Duration::from_millis(DEFAULT_RAFT_HEARTBEAT_MS);
        assert_eq!(cluster(&[]).unwrap().raft_heartbeat, default);
        let set = cluster(&["--raft-heartbeat-ms", "40"]).unwrap();
        assert_eq!(set.raft_heartbeat, Duration::from_millis(40));
        for bad in ["0", "9", "10001", "x"] {
            assert!(cluster(&["--raft-heartbeat-ms", bad]).is_err(), "{bad}");
        }
        let single = ["oncelog-broker", "--raft-heartbeat-ms", "100"];
        assert!(Args::try_parse_from(single).is_err(), "needs --cluster");
    }

    #[test]
    fn bad_cluster_flags_are_refused_by_name() {
        let three = "1=127.0.0.1:9092:9192,2=127.0.0.1:9093:9193,3=127.0.0.1:9094:9194";
        let refused = |flags: &[&str], flag: &str, rule: &str| {
            let e = config(flags).unwrap_err();
            assert_eq!(e.flag, flag, "{flags:?}: {e}");
            assert!(e.rule.contains(rule), "{flags:?}: {e}");
        };
        let with = |cluster: &'static str| -> Vec<&'static str> {
            vec!["--data", "d", "--node-id", "1", "--cluster", cluster]
        };
        // Malformed entries.
        refused(&with("1=127.0.0.1:9092"), "cluster", "expected ID=HOST");
        refused(
            &with("1:127.0.0.1:9092:9192"),
            "cluster",
            "expected ID=HOST",
        );
        refused(&with("x=127.0.0.1:9092:9192"), "cluster", "not a number");
        refused(&with("1=127.0.0.1:90x:9192"), "cluster", "a port");
        refused(&with("1=127.0.0.1:0:9192"), "cluster", "a port");
        refused(&with("1=:9092:9192"), "cluster", "host is empty");
        refused(
            &with("1=127.0.0.1:9092:9192,,2=127.0.0.1:9093:9193"),
            "cluster",
            "empty entry",
        );
        refused(&with("1=127.0.0.1:9092:9092"), "cluster", "the same");
        refused(&with("1024=127.0.0.1:9092:9192"), "cluster", "0 to 1023");
        // Duplicates.
        refused(
            &with("1=127.0.0.1:9092:9192,1=127.0.0.1:9093:9193"),
            "cluster",
            "named twice",
        );
        refused(
            &with("1=127.0.0.1:9092:9192,2=127.0.0.1:9192:9193"),
            "cluster",
            "another node",
        );
        // A dial address that is not a peer's.
        let mut dial = with(three);
        dial.extend(["--cluster-dial", "1=127.0.0.1:7000"]);
        refused(&dial, "cluster-dial", "does not dial itself");
        let mut dial = with(three);
        dial.extend(["--cluster-dial", "2=127.0.0.1:7000"]);
        assert_eq!(
            config(&dial)
                .unwrap()
                .cluster
                .unwrap()
                .dial_addr(2)
                .unwrap(),
            "127.0.0.1:7000"
        );
        assert!(
            Args::try_parse_from(["oncelog-broker", "--cluster-dial", "2=127.0.0.1:7000"]).is_err(),
            "needs --cluster"
        );
        // This node missing.
        refused(
            &["--data", "d", "--node-id", "4", "--cluster", three],
            "cluster",
            "does not name this node",
        );
        // Its own host must be an address to bind.
        refused(
            &with("1=localhost:9092:9192,2=127.0.0.1:9093:9193"),
            "cluster",
            "IP address",
        );
        // Flags cluster mode does not run with.
        refused(
            &["--node-id", "1", "--cluster", three],
            "cluster",
            "needs --data",
        );
        let mut tiered = with(three);
        tiered.extend(["--tier-dir", "t"]);
        refused(&tiered, "cluster", "tiered storage");
        let mut advertised = with(three);
        advertised.extend(["--advertised-listener", "h:1"]);
        refused(&advertised, "advertised-listener", "--cluster");
        let mut flush = with(three);
        flush.extend(["--flush", "always"]);
        refused(&flush, "flush", "raft");
        let mut stamped = with(three);
        stamped.extend(["--message-timestamp-type", "log-append-time"]);
        refused(&stamped, "message-timestamp-type", "same bytes");
    }

    #[test]
    fn advertised_listener_needs_a_host_and_a_port() {
        assert_eq!(
            parse_host_port("127.0.0.1:9092"),
            Some(("127.0.0.1".to_string(), 9092))
        );
        assert_eq!(parse_host_port("[::1]:9"), Some(("::1".to_string(), 9)));
        assert_eq!(parse_host_port(":9092"), None);
        assert_eq!(parse_host_port("localhost"), None);
        assert_eq!(parse_host_port("localhost:http"), None);
    }
}
