//! oncelog's tiered storage over the [`object_store`] crate (docs/design.md, "Tiered
//! storage"): [`ObjectStoreRemote`] implements the library's synchronous
//! [`oncelog::tier::RemoteStore`] over any `object_store` backend, running each call to
//! completion on a small Tokio runtime of its own. The `oncelog` library stays free of async
//! and network dependencies; this crate is where they live.
//!
//! The local file system backend is built in ([`ObjectStoreRemote::local`]), with `fsync` on,
//! so a put that returned survives a power cut of the machine that holds the directory, as an
//! object store's acknowledged put does. S3, GCS and Azure are `object_store` features not
//! enabled yet.
//!
//! Every call blocks its thread: call from a plain thread (a `LogManager` job, a thread of
//! the embedder's), not from inside an async task, where Tokio refuses to block
//! (`spawn_blocking` it there).
//!
//! ```
//! use oncelog::tier::{self, RemoteStore};
//! use oncelog::{Log, LogConfig};
//! use oncelog_tier::ObjectStoreRemote;
//!
//! let (data, remote) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let log = Log::open(data.path(), LogConfig::builder().segment_bytes(4096).build()?)?;
//! # for i in 0..60 {
//! #     let mut b = oncelog::format::BatchBuilder::new();
//! #     b.append(1_700_000_000_000 + i, None, Some(&[1u8; 100][..]), &[]);
//! #     log.append(&b.build()?)?;
//! # }
//! log.flush()?;
//! let store = ObjectStoreRemote::local(remote.path())?;
//! for (base, _end) in tier::uploadable_segments(&log) {
//!     tier::upload_segment(&log, &store, "orders-0", base)?;
//! }
//! let manifest = tier::read_manifest(&store, "orders-0")?.expect("written");
//! assert!(!manifest.segments.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use oncelog::tier::{Created, RemoteError, RemoteErrorKind, RemoteObject, RemoteStore};

/// Objects larger than this are put in parts of this size (each part copied once, so an upload
/// holds at most a few parts in memory, not the whole segment).
const PART_BYTES: usize = 8 << 20;
/// Parts in flight at once in a multipart put.
const PARTS_IN_FLIGHT: usize = 2;

/// An [`object_store::ObjectStore`] as oncelog's [`RemoteStore`].
pub struct ObjectStoreRemote {
    store: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for ObjectStoreRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreRemote")
            .field("store", &self.store.to_string())
            .finish()
    }
}

/// Setting a store up failed: its runtime could not start, or its root is unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The runtime's thread could not be started.
    #[error("starting the object store's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The local root directory could not be created or used.
    #[error("object store root {}: {reason}", root.display())]
    Root {
        /// The directory.
        root: std::path::PathBuf,
        /// Why.
        reason: String,
    },
}

impl ObjectStoreRemote {
    /// Wraps any `object_store` backend.
    pub fn new(store: Arc<dyn ObjectStore>) -> Result<ObjectStoreRemote, SetupError> {
        // One worker: the calls are few and large; the blocking pool does the file I/O of the
        // local backend. Multi-threaded, so several threads may block on calls at once.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("oncelog-tier")
            .enable_all()
            .build()
            .map_err(SetupError::Runtime)?;
        Ok(ObjectStoreRemote { store, runtime })
    }

    /// A store kept in the directory `root` (created if missing) on the local file system,
    /// every put synced with its directory before it returns.
    pub fn local(root: &Path) -> Result<ObjectStoreRemote, SetupError> {
        let bad = |reason: String| SetupError::Root {
            root: root.to_path_buf(),
            reason,
        };
        std::fs::create_dir_all(root).map_err(|e| bad(e.to_string()))?;
        let fs = LocalFileSystem::new_with_prefix(root)
            .map_err(|e| bad(e.to_string()))?
            .with_fsync(true);
        ObjectStoreRemote::new(Arc::new(fs))
    }

    fn path(op: &'static str, key: &str) -> Result<ObjectPath, RemoteError> {
        ObjectPath::parse(key)
            .map_err(|e| RemoteError::new(op, key, RemoteErrorKind::Other, e.to_string()))
    }

    async fn put_parts(&self, path: &ObjectPath, bytes: &[u8]) -> object_store::Result<()> {
        let upload = self.store.put_multipart(path).await?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        for chunk in bytes.chunks(PART_BYTES) {
            w.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            w.write(chunk);
        }
        w.finish().await.map(|_| ())
    }
}

/// The kind of an `object_store` failure: a missing object, a refusal that trying again does
/// not cure, or anything else (a network error, a 5xx, a timeout, an I/O error), which may or
/// may not have happened and may pass.
fn kind(e: &object_store::Error) -> RemoteErrorKind {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => RemoteErrorKind::NotFound,
        E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. } => RemoteErrorKind::Other,
        _ => RemoteErrorKind::Unavailable,
    }
}

fn error(op: &'static str, key: &str, e: object_store::Error) -> RemoteError {
    RemoteError::new(op, key, kind(&e), e.to_string())
}

impl RemoteStore for ObjectStoreRemote {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        let path = Self::path("put", key)?;
        self.runtime
            .block_on(async {
                if bytes.len() > PART_BYTES {
                    self.put_parts(&path, bytes).await
                } else {
                    let payload = PutPayload::from(bytes.to_vec());
                    self.store.put(&path, payload).await.map(|_| ())
                }
            })
            .map_err(|e| error("put", key, e))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
        let path = Self::path("put_if_absent", key)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let put = self.runtime.block_on(self.store.put_opts(
            &path,
            PutPayload::from(bytes.to_vec()),
            opts,
        ));
        match put {
            Ok(_) => Ok(Created::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::AlreadyExists),
            Err(e) => Err(error("put_if_absent", key, e)),
        }
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        let path = Self::path("get", key)?;
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map(|b| b.to_vec())
            .map_err(|e| error("get", key, e))
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        let path = Self::path("get_range", key)?;
        let got = self
            .runtime
            .block_on(self.store.get_range(&path, range.clone()))
            .map_err(|e| error("get_range", key, e))?;
        // A store may answer a range past the end with what it has: that is not the range.
        if got.len() as u64 != range.end.saturating_sub(range.start) {
            return Err(RemoteError::new(
                "get_range",
                key,
                RemoteErrorKind::Other,
                format!(
                    "asked bytes {}..{}, got {} bytes (past the object's end)",
                    range.start,
                    range.end,
                    got.len()
                ),
            ));
        }
        Ok(got.to_vec())
    }

    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
        let path = Self::path("list", prefix)?;
        let metas: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&path)).try_collect())
            .map_err(|e| error("list", prefix, e))?;
        Ok(metas
            .into_iter()
            .map(|m| RemoteObject {
                key: m.location.to_string(),
                size: m.size,
            })
            .collect())
    }

    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let path = Self::path("delete", key)?;
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(error("delete", key, e)),
        }
    }
}
