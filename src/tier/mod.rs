//! Tiered storage: a partition's sealed segments in an object store (Kafka's KIP-405;
//! docs/design.md, "Tiered storage"; keys and the manifest in docs/format.md).
//!
//! The library is synchronous: it defines the seam, [`RemoteStore`] (put, a conditional
//! put-if-absent, get, get a range, list, delete), and the tiering logic over it. The
//! workspace crate `oncelog-tier` implements the trait over the `object_store` crate with its
//! own runtime.
//!
//! Built so far: [`upload_segment`] uploads one sealed segment of a [`Log`](crate::Log), with
//! its `.index`, `.timeindex`, `.txnindex`, the producer snapshot at its end and the
//! leader-epoch entries it covers, after the engine's own checks of every byte; then it creates
//! the next generation of the partition's [`Manifest`] with a put-if-absent, so of two writers
//! exactly one wins. No local file is changed. [`enforce_local_retention`] then deletes local
//! copies past `local_retention_ms` / `local_retention_bytes`, only those the manifest read back
//! from the store names, [`read`] serves offsets below the local log start from the store
//! ([`fetch_committed`] under read_committed, with the aborted transactions;
//! [`offset_for_timestamp`] by time), and
//! [`restore`] starts a partition whose disk was lost over at the remote end with its producers'
//! windows; [`enforce_remote_retention`] applies the partition's retention to its remote
//! segments. [`delete_records`] raises the partition's log start across tiers (recorded in the
//! manifest first, then the local log's; [`log_start_offset`] answers it), [`reconcile`]
//! brings the local log and the manifest back into agreement (after a crash between those two
//! steps, or a truncation of the log below what is uploaded), and [`remove_orphans`] deletes
//! objects no manifest names. A `LogManager` runs reconciliation, uploads, both retentions and
//! orphan removal as its tiering job. [`CachedStore`] keeps fetched indexes and blocks of
//! segments within a byte budget.
//!
//! ```
//! # use std::sync::Mutex; use std::collections::BTreeMap; use std::ops::Range;
//! # use oncelog::tier::{self, Created, RemoteError, RemoteErrorKind, RemoteObject, RemoteStore};
//! # #[derive(Debug, Default)] struct Mem(Mutex<BTreeMap<String, Vec<u8>>>);
//! # impl RemoteStore for Mem {
//! #   fn put(&self, k: &str, b: &[u8]) -> Result<(), RemoteError> { self.0.lock().unwrap().insert(k.into(), b.to_vec()); Ok(()) }
//! #   fn put_if_absent(&self, k: &str, b: &[u8]) -> Result<Created, RemoteError> {
//! #     let mut m = self.0.lock().unwrap();
//! #     if m.contains_key(k) { return Ok(Created::AlreadyExists) }
//! #     m.insert(k.into(), b.to_vec()); Ok(Created::Created) }
//! #   fn get(&self, k: &str) -> Result<Vec<u8>, RemoteError> {
//! #     self.0.lock().unwrap().get(k).cloned().ok_or_else(|| RemoteError::new("get", k, RemoteErrorKind::NotFound, "no such key")) }
//! #   fn get_range(&self, k: &str, r: Range<u64>) -> Result<Vec<u8>, RemoteError> { Ok(self.get(k)?[r.start as usize..r.end as usize].to_vec()) }
//! #   fn list(&self, p: &str) -> Result<Vec<RemoteObject>, RemoteError> {
//! #     Ok(self.0.lock().unwrap().iter().filter(|(k, _)| k.starts_with(&format!("{p}/")))
//! #       .map(|(k, v)| RemoteObject { key: k.clone(), size: v.len() as u64 }).collect()) }
//! #   fn delete(&self, k: &str) -> Result<(), RemoteError> { self.0.lock().unwrap().remove(k); Ok(()) }
//! # }
//! use oncelog::format::BatchBuilder;
//! use oncelog::{Log, LogConfig};
//!
//! let dir = tempfile::tempdir()?;
//! let log = Log::open(dir.path(), LogConfig::builder().segment_bytes(4096).build()?)?;
//! for i in 0..100 {
//!     let mut b = BatchBuilder::new();
//!     b.append(1_700_000_000_000 + i, None, Some(&[7u8; 100][..]), &[]);
//!     log.append(&b.build()?)?;
//! }
//! log.flush()?;
//! let store = Mem::default(); // an `oncelog_tier::ObjectStoreRemote` in a real deployment
//! for (base, _end) in tier::uploadable_segments(&log) {
//!     tier::upload_segment(&log, &store, "orders-0", base)?;
//! }
//! let manifest = tier::read_manifest(&store, "orders-0")?.expect("written");
//! assert_eq!(manifest.segments.len(), tier::uploadable_segments(&log).len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
mod committed;
mod delete_records;
mod error;
mod generation;
pub mod keys;
mod local;
mod manifest;
mod orphans;
mod read;
mod reconcile;
mod remote_retention;
mod restore;
mod store;
mod timestamp;
mod upload;

pub use cache::{CacheStats, CachedStore, CACHE_BLOCK_BYTES, DEFAULT_LIST_TTL};
pub use committed::fetch_committed;
pub use delete_records::{delete_records, RecordsDeleted};
pub use error::{NotUploadable, TierError};
pub use keys::{SegmentObject, UploadId};
pub use local::{enforce_local_retention, LocalRetention};
pub use manifest::{Manifest, ManifestProblem, ObjectDigest, RemoteSegment};
pub use orphans::{remove_orphans, OrphanSightings, OrphansRemoved};
pub use read::{log_start_offset, read, read_remote, settle_log_start};
pub use reconcile::{reconcile, reconcile_with, Reconciled, Verified};
pub use remote_retention::{enforce_remote_retention, RemoteRetentionReport};
pub use restore::{restore, Restored};
pub use store::{Created, RemoteError, RemoteErrorKind, RemoteObject, RemoteStore};
pub use timestamp::offset_for_timestamp;
pub use upload::{read_manifest, upload_segment, uploadable_segments, Uploaded};
