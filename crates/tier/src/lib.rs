//! oncelog's tiered storage over the [`object_store`] crate (docs/design.md, "Tiered
//! storage"): [`ObjectStoreRemote`] implements the library's synchronous
//! [`oncelog::tier::RemoteStore`] over any `object_store` backend, running each call to
//! completion on a small Tokio runtime of its own. The `oncelog` library stays free of async
//! and network dependencies; this crate is where they live.
//!
//! The local file system backend is built in ([`ObjectStoreRemote::local`]), with `fsync` on,
//! so a put that returned survives a power cut of the machine that holds the directory, as an
//! object store's acknowledged put does. [`ObjectStoreRemote::from_url`] builds any of
//! `file://`, `memory://`, `s3://` (AWS and S3-compatible servers: MinIO, Ceph, R2, with an
//! endpoint), `gs://` and `az://` stores from a URL and options, credentials from the usual
//! environment variables, each HTTP call bounded by timeouts and a bounded number of retries.
//! Every backend it builds does the manifest's put-if-absent for real (S3's `If-None-Match: *`);
//! one configured without it is refused ([`SetupError::NoConditionalPut`]), and
//! [`ObjectStoreRemote::check_conditional_put`] proves it against the live store.
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

mod url_store;

pub use url_store::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RETRIES, DEFAULT_TIMEOUT};

/// Objects larger than this are put in parts of this size (each part copied once, so an upload
/// holds at most a few parts in memory, not the whole segment).
const PART_BYTES: usize = 8 << 20;
/// Parts in flight at once in a multipart put.
const PARTS_IN_FLIGHT: usize = 2;

/// An [`object_store::ObjectStore`] as oncelog's [`RemoteStore`].
pub struct ObjectStoreRemote {
    store: Arc<dyn ObjectStore>,
    runtime: Runtime,
}

/// The store's runtime, shut down without waiting when the store drops: a store may be dropped
/// on an async task (a broker shutting down drops its partitions' handles there), where
/// dropping a Tokio runtime the ordinary way blocks, and Tokio panics. No call is in flight by
/// then: each call blocks its caller until it is done.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.0
            .as_ref()
            .expect("the runtime is taken only when the store drops")
            .block_on(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for ObjectStoreRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreRemote")
            .field("store", &self.store.to_string())
            .finish()
    }
}

/// Setting a store up failed: its runtime could not start, its root is unusable, its URL or
/// an option is refused, or it cannot do the manifest's conditional put.
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
    /// The store's URL does not parse, or names no store this crate builds.
    #[error("object store URL {url:?}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// An option is unknown for the URL's kind of store, or its value is refused.
    #[error("object store option {key:?} for {url:?}: {reason}")]
    Option {
        /// The URL the option was given with.
        url: String,
        /// The option's key as given.
        key: String,
        /// Why.
        reason: String,
    },
    /// `object_store` refused to build the store from the URL and options (a missing bucket,
    /// a bad endpoint, a bad credential file, ...).
    #[error("building the object store for {url:?}: {reason}")]
    Build {
        /// The URL.
        url: String,
        /// `object_store`'s words.
        reason: String,
    },
    /// The store cannot create an object only if it is absent, which the manifest's put needs
    /// so that two writers cannot both win: refused rather than degraded to an overwrite.
    #[error("object store {store}: no conditional put (put-if-absent): {reason}")]
    NoConditionalPut {
        /// The store.
        store: String,
        /// What showed it.
        reason: String,
    },
    /// [`ObjectStoreRemote::check_conditional_put`] could not finish: the store did not answer
    /// (the error's kind says whether trying again may help).
    #[error("checking the conditional put of object store {store}: {error}")]
    Check {
        /// The store.
        store: String,
        /// The failed call.
        #[source]
        error: RemoteError,
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
        Ok(ObjectStoreRemote {
            store,
            runtime: Runtime(Some(runtime)),
        })
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

    /// Proves against the live store that a put-if-absent of a key that exists neither
    /// overwrites it nor claims to have created it: puts a probe object under
    /// `_oncelog_probe/`, puts it again with other bytes, reads it back, deletes it. A store
    /// that answers the second put `Created` or holds its bytes (an S3-compatible server that
    /// ignores `If-None-Match`) is [`SetupError::NoConditionalPut`]; a call that fails is
    /// [`SetupError::Check`]. A broker runs it at start.
    pub fn check_conditional_put(&self) -> Result<(), SetupError> {
        let key = format!("_oncelog_probe/{}", oncelog::tier::UploadId::fresh());
        let check = |error| SetupError::Check {
            store: self.store.to_string(),
            error,
        };
        let first = self.put_if_absent(&key, b"first").map_err(check)?;
        let second = self.put_if_absent(&key, b"second").map_err(check);
        let held = self.get(&key).map_err(check);
        // Cleanup is best effort: a probe object left behind is named by nothing.
        let _ = self.delete(&key);
        let (second, held) = (second?, held?);
        let refused = |reason: String| SetupError::NoConditionalPut {
            store: self.store.to_string(),
            reason,
        };
        if first != Created::Created {
            return Err(refused(format!(
                "a put-if-absent of the fresh key {key} answered {first:?}"
            )));
        }
        if second != Created::AlreadyExists || held != b"first" {
            return Err(refused(format!(
                "a second put-if-absent of {key} answered {second:?} and left {:?}: the store \
                 overwrites where it must refuse (does it honour If-None-Match?)",
                String::from_utf8_lossy(&held)
            )));
        }
        Ok(())
    }

    fn path(op: &'static str, key: &str) -> Result<ObjectPath, RemoteError> {
        ObjectPath::parse(key)
            .map_err(|e| RemoteError::new(op, key, RemoteErrorKind::Other, e.to_string()))
    }

    async fn put_parts(&self, path: &ObjectPath, bytes: &[u8]) -> object_store::Result<()> {
        let upload = self.store.put_multipart(path).await?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        for chunk in bytes.chunks(PART_BYTES) {
            if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                // A part failed: the upload is aborted, so a store such as S3 keeps no parts
                // of it (best effort: the part's error is the one that matters).
                let _ = w.abort().await;
                return Err(e);
            }
            w.write(chunk);
        }
        // It aborts the upload itself when a part or the completion fails.
        w.finish().await.map(|_| ())
    }
}

/// The kind of an `object_store` failure: a missing object, a refusal that trying again does
/// not cure, or anything else (a network error, a 5xx, a 429, a timeout, an I/O error of the
/// local file system), which may or may not have happened and may pass.
///
/// HTTP answers reach here after object_store's own retries: 404 is `NotFound`; 401, 403, 409,
/// 412 and 304 are their own variants (refusals); a 5xx, 408 or 429 that outlived the retries
/// and every transport failure (refused connection, timeout, dropped connection) are `Generic`
/// with the status or the transport error in their source chain. A `Generic` whose chain names
/// another 4xx status (400, 405, 416, ...) is a refusal too.
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
        | E::NotModified { .. }
        | E::Precondition { .. } => RemoteErrorKind::Other,
        E::Generic { source, .. } => match http_status(source.as_ref()) {
            Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => RemoteErrorKind::Other,
            _ => RemoteErrorKind::Unavailable,
        },
        _ => RemoteErrorKind::Unavailable,
    }
}

/// The HTTP status an `object_store` HTTP failure answered with, if it got an answer: its
/// retry error shows it as `... status code: 503 Service Unavailable ...` (the type itself is
/// private to `object_store`). A transport failure (an `HttpError` in the chain) has none.
fn http_status(e: &(dyn std::error::Error + 'static)) -> Option<u16> {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<object_store::client::HttpError>()
            .is_some()
        {
            return None;
        }
        let text = e.to_string();
        for marker in ["status code: ", "status: "] {
            if let Some(at) = text.find(marker) {
                let digits = &text[at + marker.len()..];
                if let Some(code) = digits.get(..3).and_then(|d| d.parse::<u16>().ok()) {
                    return Some(code);
                }
            }
        }
        next = e.source();
    }
    None
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

    /// `PutMode::Create`: S3's `If-None-Match: *`, GCS's `ifGenerationMatch=0`, Azure's
    /// `If-None-Match: *`, a hard link on the local file system.
    ///
    /// object_store retries a put after a 5xx or a connection dropped before the answer, the
    /// conditional one included; when the first attempt was stored, the retry is refused (412)
    /// by the very object it wrote. So an `AlreadyExists` is checked: an object holding
    /// exactly `bytes` is this call's own (the manifest's bytes name a fresh upload id, no
    /// other writer's hold the same), and answers `Created`. Without that, a manifest put that
    /// succeeded but reported failure would read as a lost race, and the uploader would delete
    /// the objects its own manifest names.
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
            Err(object_store::Error::AlreadyExists { .. }) => match self.get(key) {
                Ok(held) if held == bytes => Ok(Created::Created),
                Ok(_) => Ok(Created::AlreadyExists),
                // A 409 for a put in flight that did not land, or the object deleted since:
                // nothing says who holds the key now.
                Err(e) => Err(RemoteError::new(
                    "put_if_absent",
                    key,
                    RemoteErrorKind::Unavailable,
                    format!(
                        "refused as existing, then reading it back failed: {}",
                        e.reason
                    ),
                )),
            },
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
