//! A real S3-compatible server for the tests, in-process: s3s's S3 protocol (SigV4 checked,
//! multipart, `If-None-Match`) over s3s-fs's file-system backend in a temp dir, on
//! 127.0.0.1 port 0, on a Tokio runtime of its own that is shut down when the [`S3Server`]
//! drops (a panicking test included). In front of it, in the same HTTP server, a fault layer
//! that the test arms per request: answer a status without passing the request on, stall past
//! the client's timeout, drop the connection, or pass it on and then answer a failure (the
//! put happened but reports failure), or overwrite where `If-None-Match: *` asks not to (a
//! server that ignores it).

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use oncelog_tier::ObjectStoreRemote;

pub const BUCKET: &str = "oncelog-test";
const ACCESS_KEY: &str = "test-access-key";
const SECRET_KEY: &str = "test-secret-key-0123456789";

/// What the fault layer does to a request it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status; the server never sees the request.
    Status(u16),
    /// Never answer (the client's timeout ends the call).
    Stall,
    /// Close the connection without an answer; the server never sees the request.
    Drop,
    /// Pass the request on, then answer this status instead of the server's answer.
    ForwardThenStatus(u16),
    /// Pass the request on, then close the connection without an answer.
    ForwardThenDrop,
    /// Behave as a server that ignores `If-None-Match`: remove the object first, so the put
    /// overwrites it.
    IgnoreIfNoneMatch,
}

#[derive(Debug)]
struct Rule {
    method: Method,
    path_part: String,
    fault: Fault,
    /// How many more requests it applies to.
    left: usize,
}

/// A request the layer saw: method, path and query, and its `If-None-Match` header.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub if_none_match: Option<String>,
}

#[derive(Debug, Default)]
struct Faults {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
}

/// The server. Its store URL is `s3://oncelog-test/<prefix>` with [`S3Server::options`].
pub struct S3Server {
    pub endpoint: String,
    faults: Arc<Faults>,
    root: tempfile::TempDir,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl S3Server {
    pub fn start() -> S3Server {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("s3-test-server")
            .enable_all()
            .build()
            .unwrap();
        let fs = s3s_fs::FileSystem::new(root.path()).unwrap();
        let mut b = s3s::service::S3ServiceBuilder::new(fs);
        b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = b.build();
        let faults = Arc::new(Faults::default());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let front = Front {
            service,
            faults: Arc::clone(&faults),
            bucket_dir: root.path().join(BUCKET),
            conditional: Arc::new(tokio::sync::Mutex::new(())),
        };
        runtime.spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                // As servers do: without it an answer's last small write waits for the
                // client's delayed ACK (40 ms a request on loopback).
                let _ = socket.set_nodelay(true);
                let front = front.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let front = front.clone();
                        async move { front.handle(req).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), svc)
                        .await;
                });
            }
        });
        S3Server {
            endpoint,
            faults,
            root,
            runtime: Some(runtime),
        }
    }

    /// The options of a store on this server: endpoint, credentials, a region, plain HTTP,
    /// one retry, and a ten-second timeout (a healthy call of a debug-built server on a busy
    /// machine stays well inside it; a test that stalls calls sets `timeout=1s`).
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("endpoint", self.endpoint.as_str()),
            ("allow_http", "true"),
            ("region", "us-east-1"),
            ("access_key_id", ACCESS_KEY),
            ("secret_access_key", SECRET_KEY),
            ("timeout", "10s"),
            ("max_retries", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// A store on this server under `prefix`, with [`S3Server::options`] and `extra`.
    pub fn store(&self, prefix: &str, extra: &[(&str, &str)]) -> ObjectStoreRemote {
        let mut options = self.options();
        for (k, v) in extra {
            options.retain(|(key, _)| key != k);
            options.push((k.to_string(), v.to_string()));
        }
        let url = format!("s3://{BUCKET}/{prefix}");
        ObjectStoreRemote::from_url_env(&url, &options, []).unwrap()
    }

    /// Where s3s-fs keeps the bucket's objects.
    pub fn bucket_dir(&self) -> std::path::PathBuf {
        self.root.path().join(BUCKET)
    }

    /// Applies `fault` to the next `times` requests of `method` whose path holds `path_part`.
    pub fn fail(&self, method: Method, path_part: &str, fault: Fault, times: usize) {
        self.faults.rules.lock().unwrap().push(Rule {
            method,
            path_part: path_part.to_string(),
            fault,
            left: times,
        });
    }

    /// Removes every fault.
    pub fn heal(&self) {
        self.faults.rules.lock().unwrap().clear();
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.faults.seen.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct Front {
    service: s3s::service::S3Service,
    faults: Arc<Faults>,
    bucket_dir: std::path::PathBuf,
    /// s3s-fs checks `If-None-Match` and then writes, two steps: conditional puts go one at a
    /// time here, so the check and the write are atomic as S3's are.
    conditional: Arc<tokio::sync::Mutex<()>>,
}

type Reply = Response<s3s::Body>;

impl Front {
    async fn handle(&self, req: Request<Incoming>) -> Result<Reply, std::io::Error> {
        let path = req
            .uri()
            .path_and_query()
            .map_or(String::new(), |p| p.to_string());
        let if_none_match = req
            .headers()
            .get(http::header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.faults.seen.lock().unwrap().push(Seen {
            method: req.method().clone(),
            path: path.clone(),
            if_none_match: if_none_match.clone(),
        });
        let fault = {
            let mut rules = self.faults.rules.lock().unwrap();
            let hit = rules.iter_mut().find(|r| {
                r.left > 0 && r.method == req.method() && path.contains(r.path_part.as_str())
            });
            hit.map(|r| {
                r.left -= 1;
                r.fault
            })
        };
        // The whole request first, so a fault answers a request fully sent.
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        let forward = |body: hyper::body::Bytes| {
            let req = Request::from_parts(parts.clone(), s3s::Body::from(body));
            self.forward(req, if_none_match.is_some())
        };
        match fault {
            None => forward(body).await,
            Some(Fault::Status(code)) => Ok(status(code)),
            Some(Fault::Stall) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(status(500))
            }
            Some(Fault::Drop) => Err(dropped()),
            Some(Fault::ForwardThenStatus(code)) => {
                drain(forward(body).await?).await;
                Ok(status(code))
            }
            Some(Fault::ForwardThenDrop) => {
                drain(forward(body).await?).await;
                Err(dropped())
            }
            Some(Fault::IgnoreIfNoneMatch) => {
                let key = parts.uri.path().trim_start_matches(&format!("/{BUCKET}/"));
                let _ = std::fs::remove_file(self.bucket_dir.join(key));
                forward(body).await
            }
        }
    }

    async fn forward(
        &self,
        req: Request<s3s::Body>,
        conditional: bool,
    ) -> Result<Reply, std::io::Error> {
        let _one_at_a_time = if conditional {
            Some(self.conditional.lock().await)
        } else {
            None
        };
        self.service
            .call(req)
            .await
            .map_err(|e| std::io::Error::other(format!("{e:?}")))
    }
}

async fn drain(reply: Reply) {
    let _ = reply.into_body().collect().await;
}

fn status(code: u16) -> Reply {
    let mut r = Response::new(s3s::Body::from(format!(
        "<?xml version=\"1.0\"?><Error><Code>Injected</Code><Message>fault {code}</Message></Error>"
    )));
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

fn dropped() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "fault: connection dropped",
    )
}

/// Every file under `dir` with its bytes, sorted: what a test compares before and after.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            out.push((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            ));
        }
    }
    out.sort();
    out
}
