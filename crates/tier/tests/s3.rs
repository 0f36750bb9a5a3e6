//! `ObjectStoreRemote` over S3 against a real S3-compatible server started by the test
//! (tests/support: s3s over s3s-fs, in-process, port 0): the store contract, the conditional
//! put as `If-None-Match: *` and honoured, parts, the error kinds of S3's answers; uploads
//! under injected faults (5xx, a stall past the timeout, a dropped connection, a put that lands
//! but reports failure), each a typed error with nothing local changed and the next attempt
//! whole; and a partition's round trip: upload, local retention, reads, read_committed and
//! restore on an empty disk with its producers' windows.

mod support;

use http::Method;
use oncelog::format::BatchBuilder;
use oncelog::tier::{
    self, Created, LocalRetention, RemoteErrorKind, RemoteStore, SegmentObject, TierError, Uploaded,
};
use oncelog::{AppendOutcome, IsolationLevel, Log, LogConfig, TxnMarker};
use oncelog_tier::{ObjectStoreRemote, SetupError};
use support::{files, Fault, S3Server, BUCKET};

const T0: i64 = 1_700_000_000_000;
const P: &str = "tier/orders-0";

#[test]
fn every_call_keeps_the_contract_and_the_conditional_put_is_if_none_match() {
    let server = S3Server::start();
    let s = server.store("cluster-1", &[]);
    s.put("a/b/one", b"first").unwrap();
    s.put("a/b/one", b"hello world").unwrap();
    assert_eq!(s.get("a/b/one").unwrap(), b"hello world");
    // The URL's path is a key prefix in the bucket.
    assert_eq!(
        std::fs::read(server.bucket_dir().join("cluster-1/a/b/one")).unwrap(),
        b"hello world"
    );
    assert_eq!(s.get_range("a/b/one", 6..11).unwrap(), b"world");
    let e = s.get_range("a/b/one", 6..40).unwrap_err();
    assert_eq!((e.op, e.kind), ("get_range", RemoteErrorKind::Other), "{e}");
    let e = s.get("a/b/two").unwrap_err();
    assert_eq!(
        (e.op, e.kind, e.key.as_str()),
        ("get", RemoteErrorKind::NotFound, "a/b/two")
    );
    assert_eq!(s.put_if_absent("a/m/1", b"x").unwrap(), Created::Created);
    assert_eq!(
        s.put_if_absent("a/m/1", b"y").unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(s.get("a/m/1").unwrap(), b"x");
    // Each conditional put went out as S3's `If-None-Match: *`, the server refused the second.
    let conditional: Vec<_> = server
        .seen()
        .into_iter()
        .filter(|r| r.method == Method::PUT && r.path.contains("/a/m/1"))
        .map(|r| r.if_none_match)
        .collect();
    assert_eq!(
        conditional,
        vec![Some("*".to_string()), Some("*".to_string())]
    );
    let mut listed: Vec<(String, u64)> = s
        .list("a")
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    listed.sort();
    assert_eq!(listed, vec![("a/b/one".into(), 11), ("a/m/1".into(), 1)]);
    assert!(s.list("nothing/here").unwrap().is_empty());
    s.delete("a/b/one").unwrap();
    s.delete("a/b/one").unwrap();
    assert_eq!(
        s.get("a/b/one").unwrap_err().kind,
        RemoteErrorKind::NotFound
    );
    s.check_conditional_put().unwrap();
}

#[test]
fn a_put_larger_than_a_part_is_a_multipart_upload_and_reads_back_whole() {
    let server = S3Server::start();
    // A debug-built server hashes 8 MiB parts slowly: a long timeout.
    let s = server.store("c", &[("timeout", "30s")]);
    let big: Vec<u8> = (0..(8 << 20) + 17)
        .map(|i: u32| (i * 7 % 251) as u8)
        .collect();
    s.put("big/object", &big).unwrap();
    let seen = server.seen();
    assert!(
        seen.iter()
            .any(|r| r.method == Method::POST && r.path.contains("uploads")),
        "no multipart upload: {seen:?}"
    );
    assert_eq!(s.get("big/object").unwrap(), big);
    assert_eq!(
        s.get_range("big/object", 8 << 20..(8 << 20) + 9).unwrap(),
        &big[8 << 20..(8 << 20) + 9]
    );
    assert_eq!(s.list("big").unwrap()[0].size, big.len() as u64);
    // A part the server fails: the put is a typed error, the upload aborted, no object made.
    server.fail(Method::PUT, "partNumber=", Fault::Status(500), usize::MAX);
    let e = s.put("big/other", &big).unwrap_err();
    server.heal();
    assert_eq!((e.op, e.kind), ("put", RemoteErrorKind::Unavailable), "{e}");
    assert!(
        server
            .seen()
            .iter()
            .any(|r| r.method == Method::DELETE && r.path.contains("uploadId=")),
        "the multipart upload was not aborted"
    );
    assert_eq!(
        s.get("big/other").unwrap_err().kind,
        RemoteErrorKind::NotFound
    );
    assert_eq!(s.list("big").unwrap().len(), 1);
}

#[test]
fn of_many_threads_creating_one_key_exactly_one_wins() {
    let server = S3Server::start();
    let s = std::sync::Arc::new(server.store("c", &[]));
    let start = std::sync::Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let (s, start) = (s.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (
                    i,
                    s.put_if_absent("p/manifest/00000000000000000001", &[i])
                        .unwrap(),
                )
            })
        })
        .collect();
    let results: Vec<(u8, Created)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<u8> = results
        .iter()
        .filter(|(_, c)| *c == Created::Created)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert_eq!(
        s.get("p/manifest/00000000000000000001").unwrap(),
        vec![winners[0]]
    );
}

#[test]
fn a_server_that_ignores_if_none_match_is_refused() {
    let server = S3Server::start();
    let s = server.store("c", &[]);
    server.fail(Method::PUT, "_oncelog_probe", Fault::IgnoreIfNoneMatch, 2);
    match s.check_conditional_put() {
        Err(e @ SetupError::NoConditionalPut { .. }) => {
            assert!(e.to_string().contains("overwrites"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // A store that does not answer cannot be checked: said so, with the kind.
    server.fail(
        Method::PUT,
        "_oncelog_probe",
        Fault::Status(503),
        usize::MAX,
    );
    match s.check_conditional_put() {
        Err(SetupError::Check { error, .. }) => {
            assert_eq!(error.kind, RemoteErrorKind::Unavailable, "{error}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_answers_map_to_their_kinds() {
    let server = S3Server::start();
    let s = server.store("c", &[]);
    let quick = server.store("c", &[("timeout", "1s")]);
    s.put("k", b"v").unwrap();
    let cases = [
        (Fault::Status(500), RemoteErrorKind::Unavailable),
        (Fault::Status(503), RemoteErrorKind::Unavailable),
        (Fault::Status(429), RemoteErrorKind::Unavailable),
        (Fault::Stall, RemoteErrorKind::Unavailable),
        (Fault::Drop, RemoteErrorKind::Unavailable),
        (Fault::Status(400), RemoteErrorKind::Other),
        (Fault::Status(403), RemoteErrorKind::Other),
        (Fault::Status(404), RemoteErrorKind::NotFound),
    ];
    for (fault, want) in cases {
        server.fail(Method::GET, "/c/k", fault, usize::MAX);
        let started = std::time::Instant::now();
        let e = quick.get("k").unwrap_err();
        assert_eq!((e.op, e.kind), ("get", want), "{fault:?}: {e}");
        // One retry of a one-second timeout at most: never a hang.
        assert!(started.elapsed().as_secs() < 5, "{fault:?}");
        server.heal();
        assert_eq!(s.get("k").unwrap(), b"v");
    }
}

#[test]
fn urls_and_options_are_checked_before_anything_is_sent() {
    let server = S3Server::start();
    let url = format!("s3://{BUCKET}/p");
    let opts = |extra: &[(&str, &str)]| {
        let mut o = server.options();
        for (k, v) in extra {
            o.retain(|(key, _)| key != k);
            o.push((k.to_string(), v.to_string()));
        }
        o
    };
    let refused = |url: &str, options: Vec<(String, String)>| {
        ObjectStoreRemote::from_url_env(url, &options, []).unwrap_err()
    };
    let e = refused(&url, opts(&[("no_such_key", "1")]));
    assert!(
        matches!(&e, SetupError::Option { key, .. } if key == "no_such_key"),
        "{e}"
    );
    let e = refused(&url, opts(&[("max_retries", "many")]));
    assert!(
        matches!(&e, SetupError::Option { key, .. } if key == "max_retries"),
        "{e}"
    );
    let e = refused(&url, opts(&[("retry_timeout", "10")]));
    assert!(
        matches!(&e, SetupError::Option { key, .. } if key == "retry_timeout"),
        "{e}"
    );
    let e = refused(&url, opts(&[("allow_http", "false")]));
    assert!(
        matches!(&e, SetupError::Option { key, .. } if key == "endpoint"),
        "{e}"
    );
    let e = refused(&url, opts(&[("conditional_put", "disabled")]));
    assert!(matches!(e, SetupError::NoConditionalPut { .. }), "{e}");
    let e = refused(&url, opts(&[("timeout", "soon")]));
    assert!(matches!(e, SetupError::Build { .. }), "{e}");
    let e = refused("ftp://host/x", vec![]);
    assert!(matches!(e, SetupError::Url { .. }), "{e}");
    let e = refused("https://example.com/x", vec![]);
    assert!(matches!(e, SetupError::Url { .. }), "{e}");
    let e = refused("not a url", vec![]);
    assert!(matches!(e, SetupError::Url { .. }), "{e}");
    let e = refused("memory://", opts(&[]));
    assert!(matches!(e, SetupError::Option { .. }), "{e}");
    // Credentials and the rest from the environment, when the options leave them out.
    let env: Vec<(String, String)> = server
        .options()
        .into_iter()
        .filter(|(k, _)| {
            ["access_key_id", "secret_access_key", "endpoint", "region"].contains(&k.as_str())
        })
        .map(|(k, v)| (format!("AWS_{}", k.to_uppercase()), v))
        .collect();
    let s = ObjectStoreRemote::from_url_env(&url, &[("allow_http".into(), "true".into())], env)
        .unwrap();
    s.put("from-env", b"x").unwrap();
    assert_eq!(s.get("from-env").unwrap(), b"x");
    // GCS and Azure stores are built the same way, their options checked by their own keys
    // (nothing is sent while building).
    let key = |k: &str, v: &str| (k.to_string(), v.to_string());
    let az = [key("account_name", "devacct"), key("access_key", "a2V5")];
    ObjectStoreRemote::from_url_env("az://container/p", &az, []).unwrap();
    ObjectStoreRemote::from_url_env("gs://bucket/p", &[], []).unwrap();
    for url in ["az://container/p", "gs://bucket/p"] {
        let e = refused(url, vec![key("endpoint_of_s3", "x")]);
        assert!(
            matches!(&e, SetupError::Option { key, .. } if key == "endpoint_of_s3"),
            "{e}"
        );
    }
    // file:// and memory:// need nothing.
    let dir = tempfile::tempdir().unwrap();
    let f = ObjectStoreRemote::from_url(&format!("file://{}", dir.path().display()), &[]).unwrap();
    f.put("a/b", b"x").unwrap();
    assert_eq!(std::fs::read(dir.path().join("a/b")).unwrap(), b"x");
    let m = ObjectStoreRemote::from_url("memory://", &[]).unwrap();
    assert_eq!(m.put_if_absent("k", b"1").unwrap(), Created::Created);
    assert_eq!(m.put_if_absent("k", b"2").unwrap(), Created::AlreadyExists);
}

fn producer_batch(pid: i64, seq: i32, transactional: bool, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(transactional);
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[b'x'; 200][..]), &[]);
    }
    b.build().unwrap()
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .index_interval_bytes(512)
        .build()
        .unwrap()
}

/// A log of sealed, flushed segments: producer 7's plain batches, producer 8's aborted
/// transaction among them; returns each batch sent with its first offset.
fn sealed_log(dir: &std::path::Path) -> (Log, Vec<(Vec<u8>, i64)>) {
    let log = Log::open(dir, config()).unwrap();
    log.replica().set_leader_epoch(3).unwrap();
    let mut sent = Vec::new();
    for i in 0..80 {
        let b = producer_batch(7, 4 * i, false, T0 + i as i64);
        let AppendOutcome::Appended(info) = log.append(&b).unwrap() else {
            panic!()
        };
        sent.push((b, info.first_offset));
        if i == 12 {
            log.append(&producer_batch(8, 0, true, T0 + 100)).unwrap();
            log.append_marker(&TxnMarker::abort(8, 0, 0)).unwrap();
        }
    }
    log.roll().unwrap();
    log.flush().unwrap();
    (log, sent)
}

fn unavailable(e: &TierError) -> bool {
    matches!(e, TierError::Remote { error, .. } if error.kind == RemoteErrorKind::Unavailable)
}

#[test]
fn an_upload_under_each_fault_fails_typed_changes_nothing_local_and_the_next_completes() {
    let server = S3Server::start();
    let data = tempfile::tempdir().unwrap();
    let (log, _) = sealed_log(data.path());
    let s = server.store("c", &[]);
    // The faulted attempts time out after a second (a stall).
    let quick = server.store("c", &[("timeout", "1s")]);
    let segments = tier::uploadable_segments(&log);
    // Each fault on the segment objects' puts and on the manifest's; and a segment object's
    // put that lands but reports failure (its object must go with the attempt's others).
    let mut cases = Vec::new();
    for fault in [
        Fault::Status(500),
        Fault::Status(503),
        Fault::Stall,
        Fault::Drop,
    ] {
        cases.extend([(fault, "/segments/"), (fault, "/manifest/")]);
    }
    cases.push((Fault::ForwardThenStatus(500), "/segments/"));
    assert!(segments.len() >= cases.len(), "{segments:?}");
    let mut uploaded = 0;
    for (fault, step) in cases {
        let before = files(data.path());
        let objects_before = s.list(&format!("{P}/segments")).unwrap().len();
        server.fail(Method::PUT, step, fault, usize::MAX);
        let base = segments[uploaded].0;
        let e = tier::upload_segment(&log, &quick, P, base).unwrap_err();
        assert!(unavailable(&e), "{fault:?} on {step}: {e}");
        server.heal();
        assert_eq!(
            files(data.path()),
            before,
            "{fault:?} on {step}: local files changed"
        );
        let current = tier::read_manifest(&s, P).unwrap();
        assert_eq!(
            current.map_or(0, |m| m.segments.len()),
            uploaded,
            "{fault:?} {step}"
        );
        if step == "/segments/" {
            // What the attempt put is gone: no manifest names it. (After a failed manifest
            // put they stay: a manifest may name them.)
            let objects = s.list(&format!("{P}/segments")).unwrap().len();
            assert_eq!(objects, objects_before, "{fault:?}");
        }
        // Healed, the same segment goes up and the manifest names it.
        match tier::upload_segment(&log, &s, P, base).unwrap() {
            Uploaded::Uploaded {
                generation,
                segment,
            } => {
                uploaded += 1;
                assert_eq!(generation, uploaded as u64);
                assert_eq!(segment.base_offset, base);
            }
            other => panic!("{other:?}"),
        }
    }
    let m = tier::read_manifest(&s, P).unwrap().unwrap();
    assert_eq!(m.segments.len(), uploaded);
    log.close().unwrap();
}

#[test]
fn a_manifest_put_that_lands_but_reports_failure_neither_forks_nor_blocks_the_next_upload() {
    let server = S3Server::start();
    let data = tempfile::tempdir().unwrap();
    let (log, _) = sealed_log(data.path());
    // Without retries too, so the uploader's own read-back settles it.
    let stores = [
        server.store("c", &[]),
        server.store("c", &[("max_retries", "0")]),
    ];
    let segments = tier::uploadable_segments(&log);
    let cases = [
        (0, Fault::ForwardThenStatus(500), 1),
        (0, Fault::ForwardThenStatus(503), usize::MAX),
        (0, Fault::ForwardThenDrop, 1),
        (1, Fault::ForwardThenStatus(500), 1),
        (1, Fault::ForwardThenDrop, 1),
    ];
    assert!(segments.len() > cases.len(), "{segments:?}");
    for (i, (store, fault, times)) in cases.into_iter().enumerate() {
        let s = &stores[store];
        server.fail(Method::PUT, "/manifest/", fault, times);
        // The put landed: whatever the answer said, the upload is done, and its manifest
        // names objects that are all there.
        let done = tier::upload_segment(&log, s, P, segments[i].0);
        server.heal();
        match done {
            Ok(Uploaded::Uploaded { generation, .. }) => assert_eq!(generation, i as u64 + 1),
            other => panic!("{fault:?} x{times} (store {store}): {other:?}"),
        }
        let m = tier::read_manifest(s, P).unwrap().unwrap();
        assert_eq!((m.generation, m.segments.len()), (i as u64 + 1, i + 1));
        for r in &m.segments {
            for o in SegmentObject::ALL {
                let key = o.key(P, r.base_offset, r.end_offset, r.upload_id);
                assert_eq!(s.get(&key).unwrap().len() as u64, r.object(o).size, "{key}");
            }
        }
    }
    // The next upload, with no fault, builds on the last generation.
    let next = segments[cases.len()].0;
    match tier::upload_segment(&log, &stores[0], P, next).unwrap() {
        Uploaded::Uploaded { generation, .. } => assert_eq!(generation, cases.len() as u64 + 1),
        other => panic!("{other:?}"),
    }
    log.close().unwrap();
}

#[test]
fn a_partition_round_trips_through_s3_and_restores_with_its_producers_windows() {
    let server = S3Server::start();
    let data = tempfile::tempdir().unwrap();
    let (log, sent) = sealed_log(data.path());
    let s = server.store("cluster-1", &[]);
    let end = log.log_end_offset();
    // Every 7th offset (each remote read costs a few requests to a debug-built server).
    let offsets: Vec<i64> = (0..end).step_by(7).collect();
    let reads: Vec<Vec<u8>> = offsets
        .iter()
        .map(|&o| log.read(o, 1 << 20).unwrap().to_vec())
        .collect();
    let fetches: Vec<_> = offsets
        .iter()
        .map(|&o| {
            let f = log
                .fetch_isolated(o, 1 << 20, IsolationLevel::ReadCommitted)
                .unwrap();
            (f.bytes.to_vec(), f.next_offset, f.aborted_transactions)
        })
        .collect();
    for (base, _) in tier::uploadable_segments(&log) {
        tier::upload_segment(&log, &s, P, base).unwrap();
    }
    let all = LocalRetention::new(None, Some(0));
    let r = tier::enforce_local_retention(&log, &s, P, all, T0).unwrap();
    assert!(r.deleted.len() >= 4, "{r:?}");
    let start = log.log_start_offset();
    assert!(start > 0);
    let mut aborted = 0;
    for (i, &o) in offsets.iter().enumerate() {
        // Below the local start from the store, byte for byte what the log answered (within
        // the segment holding the offset, as a remote read is).
        let got = tier::read(&log, &s, P, o, 1 << 20).unwrap();
        assert!(got[..] == reads[i][..], "offset {o} (local start {start})");
        let f = tier::fetch_committed(&log, &s, P, o, 1 << 20).unwrap();
        let want = &fetches[i];
        assert!(f.bytes[..] == want.0[..], "offset {o}");
        assert_eq!(
            (f.next_offset, &f.aborted_transactions),
            (want.1, &want.2),
            "offset {o}"
        );
        if o < start {
            aborted += f.aborted_transactions.map_or(0, |a| a.len());
        }
    }
    assert!(
        aborted > 0,
        "the aborted transaction is seen below the local start"
    );
    log.close().unwrap();
    // The disk is lost: a new, empty log starts over at the remote end, every producer's
    // window intact.
    drop(data);
    let fresh = tempfile::tempdir().unwrap();
    let log = Log::open(fresh.path(), config()).unwrap();
    let restored = tier::restore(&log, &s, P).unwrap();
    assert_eq!(restored.log_end_offset, end);
    assert_eq!(log.replica().leader_epoch(), 3);
    for (b, first) in &sent[sent.len() - 5..] {
        match log.append(b).unwrap() {
            AppendOutcome::Duplicate(d) => assert_eq!(d.first_offset, *first),
            other => panic!("{other:?}"),
        }
    }
    assert!(tier::read(&log, &s, P, 0, 1 << 20).unwrap()[..] == reads[0][..]);
    log.close().unwrap();
}
