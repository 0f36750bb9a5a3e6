//! What the seeded simulations share (tests/sim.rs, one group; tests/sim_groups.rs, several
//! groups per node): the replicas' configuration, the idempotent producers, and the committed
//! batches of a replica as the checkers read them.

#![allow(dead_code)]

use std::collections::BTreeMap;

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::LogConfig;
use oncelog_raft::network::mem::Rng;
use oncelog_raft::{Replica, ReplicaConfig};
use openraft::SnapshotPolicy;

pub fn config() -> ReplicaConfig {
    let defaults = ReplicaConfig::default();
    ReplicaConfig {
        log: LogConfig::builder()
            // Small segments and a size limit: retention deletes segments, so snapshot images
            // start inside the log and carry the producer state at their start.
            .segment_bytes(8 * 1024)
            .retention_bytes(Some(32 * 1024))
            .build()
            .unwrap(),
        raft: openraft::Config {
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            // Frequent snapshots and purges, and a small lag threshold: lagging replicas are
            // caught up with snapshot images as well as with entries.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(40),
            max_in_snapshot_log_to_keep: 10,
            purge_batch_size: 1,
            replication_lag_threshold: 60,
            max_payload_entries: 16,
            ..defaults.raft
        },
        // Small entries, two in flight: the producers' batches are split between entries as
        // well as joined, and entries are proposed while others are replicated.
        max_entry_bytes: 2 * 1024,
        max_entries_in_flight: 2,
    }
}

/// One producer: its id and the batch it is sending (retried until it has an answer).
pub struct Producer {
    pub id: i64,
    pub next_seq: i32,
    pub pending: Option<Sent>,
    /// The last acknowledged batch, to retry at the end.
    pub last_acked: Option<Sent>,
}

#[derive(Clone)]
pub struct Sent {
    pub seq: i32,
    pub records: i32,
    pub bytes: Bytes,
}

impl Producer {
    pub fn batch(&mut self, rng: &mut Rng) -> Sent {
        if let Some(s) = &self.pending {
            return s.clone();
        }
        let records = 1 + rng.below(3) as i32;
        let mut b = BatchBuilder::new().producer(self.id, 0, self.next_seq);
        for r in 0..records {
            let value = format!("p{}-s{}-r{r}", self.id, self.next_seq);
            b.append(
                1_000 + i64::from(self.next_seq),
                None,
                Some(value.as_bytes()),
                &[],
            );
        }
        let sent = Sent {
            seq: self.next_seq,
            records,
            bytes: Bytes::from(b.build().expect("batch")),
        };
        self.pending = Some(sent.clone());
        sent
    }
}

/// What a checker knows was acknowledged (of one group): (producer, sequence) -> offsets.
pub type Acked = BTreeMap<(i64, i32), (i64, i64)>;

/// The committed batches of a replica, from its log start to its high watermark.
pub fn committed(r: &Replica) -> Vec<(i64, i64, Bytes)> {
    committed_in(r, 0)
}

/// [`committed`] of partition `member` of a replica's set.
pub fn committed_in(r: &Replica, member: usize) -> Vec<(i64, i64, Bytes)> {
    let log = r.log_of(member).expect("the set has the partition");
    let hw = log.high_watermark();
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < hw {
        let bytes = log.read(offset, 1 << 20).expect("read");
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let (at, b) = item.expect("a stored batch parses");
            if b.last_offset() < offset {
                continue;
            }
            if b.base_offset() >= hw {
                break;
            }
            out.push((
                b.base_offset(),
                b.last_offset(),
                bytes.slice(at..at + b.size()),
            ));
            offset = b.last_offset() + 1;
        }
    }
    out
}
