//! `oncelog tier status`: a tiered partition's segments against its manifest in a local object
//! store, read-only; a manifest that cannot be used or a segment that differs is exit 1, a
//! store root that is not there exit 2.

use std::path::Path;

use crate::common::tree_digest;
use crate::common_cli::{batch, contents, json_lines, run, stdout};
use oncelog::tier::{self, LocalRetention};
use oncelog::{Log, LogConfig};
use oncelog_tier::ObjectStoreRemote;

const P: &str = "cluster/orders-0";

/// A log of several segments, all but the active one uploaded, the first two gone locally.
fn tiered(dir: &Path, root: &Path) -> Vec<(i64, i64)> {
    let cfg = LogConfig::builder()
        .segment_bytes(4096)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = Log::open(dir, cfg).unwrap();
    for i in 0..60 {
        log.append(&batch(1 + i % 3, None)).unwrap();
    }
    log.flush().unwrap();
    let store = ObjectStoreRemote::local(root).unwrap();
    let segments = tier::uploadable_segments(&log);
    for &(base, _) in &segments {
        tier::upload_segment(&log, &store, P, base).unwrap();
    }
    let total = log.size_bytes();
    let first_two: u64 = 2 * 4096;
    tier::enforce_local_retention(
        &log,
        &store,
        P,
        LocalRetention::new(None, Some(total - first_two)),
        0,
    )
    .unwrap();
    log.close().unwrap();
    segments
}

fn status(dir: &Path, root: &Path, json: bool) -> std::process::Output {
    let (dir, root) = (dir.to_str().unwrap(), root.to_str().unwrap());
    let mut args = vec!["tier", "status", dir, "--store", root, "--prefix", P];
    if json {
        args.push("--json");
    }
    run(&args)
}

#[test]
fn status_places_every_segment_local_remote_or_both_and_changes_nothing() {
    let (data, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let segments = tiered(data.path(), remote.path());
    let (before, store_before) = (contents(data.path()), tree_digest(remote.path()));
    let out = status(data.path(), remote.path(), true);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report = &json_lines(&out)[0];
    assert_eq!(report["generation"], segments.len() as u64);
    assert_eq!(report["remote"][0], segments[0].0);
    assert_eq!(report["remote"][1], segments.last().unwrap().1);
    let lines = report["segments"].as_array().unwrap();
    let places: Vec<&str> = lines.iter().map(|l| l["place"].as_str().unwrap()).collect();
    // Remote only, then local and remote, then the active segment, local only.
    let gone = places.iter().take_while(|p| **p == "remote").count();
    assert!(gone >= 1, "{places:?}");
    assert!(
        places[gone..places.len() - 1].iter().all(|p| *p == "both"),
        "{places:?}"
    );
    assert_eq!(places.last(), Some(&"local"));
    assert!(lines.last().unwrap()["end_offset"].is_null());
    assert_eq!(lines.len(), segments.len() + 1);
    // The text form says the same, a line per segment.
    let out = status(data.path(), remote.path(), false);
    let text = stdout(&out);
    assert!(text.starts_with("remote: offsets [0, "), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("SEGMENT ")).count(),
        lines.len()
    );
    assert!(text.contains(": local and remote"), "{text}");
    assert_eq!(contents(data.path()), before);
    assert_eq!(tree_digest(remote.path()), store_before);
}

#[test]
fn a_bad_manifest_or_a_differing_segment_is_exit_1_and_a_missing_store_exit_2() {
    let (data, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tiered(data.path(), remote.path());
    // A local segment that is not what was uploaded: one byte more.
    let manifest = tier::read_manifest(&ObjectStoreRemote::local(remote.path()).unwrap(), P)
        .unwrap()
        .unwrap();
    let both = manifest
        .segments
        .iter()
        .find(|s| {
            data.path()
                .join(format!("{:020}.log", s.base_offset))
                .exists()
        })
        .unwrap();
    let log_path = data.path().join(format!("{:020}.log", both.base_offset));
    let mut bytes = std::fs::read(&log_path).unwrap();
    bytes.push(0);
    std::fs::write(&log_path, &bytes).unwrap();
    let out = status(data.path(), remote.path(), false);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("DIFFERS"), "{}", stdout(&out));
    // The newest manifest cut short.
    let key = remote
        .path()
        .join(P)
        .join("manifest")
        .join(format!("{:020}", manifest.generation));
    let m = std::fs::read(&key).unwrap();
    std::fs::write(&key, &m[..m.len() - 4]).unwrap();
    let out = status(data.path(), remote.path(), false);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("PROBLEM manifest "),
        "{}",
        stdout(&out)
    );
    // A store root that is not there is not created.
    let missing = remote.path().join("nowhere");
    let out = status(data.path(), &missing, false);
    assert_eq!(out.status.code(), Some(2));
    assert!(!missing.exists());
}

#[test]
fn a_store_named_by_url_reads_as_the_same_store_by_directory() {
    let (data, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tiered(data.path(), remote.path());
    let by_dir = json_lines(&status(data.path(), remote.path(), true))[0].clone();
    assert_eq!(by_dir["log_start_offset"], 0);
    let dir = data.path().to_str().unwrap();
    let url = format!("file://{}", remote.path().display());
    let out = run(&[
        "tier",
        "status",
        dir,
        "--store-url",
        &url,
        "--prefix",
        P,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(json_lines(&out)[0], by_dir);
    let text = stdout(&run(&[
        "tier",
        "status",
        dir,
        "--store-url",
        &url,
        "--prefix",
        P,
    ]));
    assert!(
        text.contains("log start offset: 0 (across tiers)"),
        "{text}"
    );
    // An option the store does not know, one that is not KEY=VALUE, both stores, neither:
    // exit 2, nothing read.
    for args in [
        vec!["--store-url", &url, "--store-option", "colour=blue"],
        vec!["--store-url", &url, "--store-option", "novalue"],
        vec![
            "--store-url",
            &url,
            "--store",
            remote.path().to_str().unwrap(),
        ],
        vec![],
    ] {
        let mut all = vec!["tier", "status", dir, "--prefix", P];
        all.extend(args.iter().copied());
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
        if args.contains(&"colour=blue") {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("colour"), "the key is named: {err}");
        }
    }
}
