//! Damage is found, never "could not run": a damaged
//! `leader-epoch-checkpoint` made `recover` exit 2. For every file a partition directory holds
//! (segments, offset, time and transaction indexes, producer snapshots, the leader-epoch
//! checkpoint, the engine's checkpoint, Kafka's `partition.metadata`, the cleaner's offset
//! checkpoint), cut short, overwritten with garbage, or with one bit flipped: `verify` exits 1,
//! `recover` exits 0, 1 or 3, and neither exits 2 or panics.

use crate::common_cli;

use std::fs;
use std::path::{Path, PathBuf};

use common_cli::{run_path, stdout};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kafka-broker")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        fs::copy(&p, &dest).unwrap();
        let mut perms = fs::metadata(&dest).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&dest, perms).unwrap();
    }
}

/// The partitions to damage, each healthy and holding every kind of file: Kafka's
/// transactional partition once oncelog has recovered it (its checkpoint added), and its
/// compacted one once oncelog has compacted it (the cleaner's offset checkpoint added).
fn healthy_partitions(root: &Path) -> Vec<PathBuf> {
    let txn = root.join("txn-0");
    copy_dir(&fixture("txn-0"), &txn);
    let o = run_path(&["recover"], &txn);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let compacted = root.join("compacted-0");
    copy_dir(&fixture("compacted-0"), &compacted);
    let o = run_path(&["compact"], &compacted);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let dirs = vec![txn, compacted];
    for d in &dirs {
        let o = run_path(&["verify"], d);
        assert_eq!(o.status.code(), Some(0), "healthy: {}", stdout(&o));
    }
    let names: Vec<String> = dirs.iter().flat_map(|d| file_names(d)).collect();
    for kind in [
        ".log",
        ".index",
        ".timeindex",
        ".txnindex",
        ".snapshot",
        "leader-epoch-checkpoint",
        "oncelog.checkpoint",
        "partition.metadata",
        "cleaner-offset-checkpoint",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(kind)),
            "no {kind} to damage in {names:?}"
        );
    }
    dirs
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "oncelog.lock")
        .collect();
    names.sort();
    names
}

#[derive(Debug, Clone, Copy)]
enum Harm {
    /// Cut to half its length.
    Truncate,
    /// Every byte replaced (same length, at least 16 bytes).
    Garbage,
    /// The top bit of its middle byte flipped.
    Flip,
}

/// Damages `path`; false when the harm cannot change it (half of an empty file).
fn harm(path: &Path, how: Harm) -> bool {
    let bytes = fs::read(path).unwrap();
    let damaged = match how {
        Harm::Truncate if bytes.is_empty() => return false,
        Harm::Truncate => bytes[..bytes.len() / 2].to_vec(),
        Harm::Garbage => (0..bytes.len().max(16))
            .map(|i| (i as u8).wrapping_mul(151).wrapping_add(77))
            .collect(),
        Harm::Flip if bytes.is_empty() => return false,
        Harm::Flip => {
            let mut b = bytes.clone();
            b[bytes.len() / 2] ^= 0x80;
            b
        }
    };
    fs::write(path, damaged).unwrap();
    true
}

#[test]
fn damage_to_any_file_of_a_partition_is_found_never_a_failure_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let healthy = healthy_partitions(&tmp.path().join("healthy"));
    let mut missed = Vec::new();
    let mut cases = 0;
    for base in &healthy {
        for name in file_names(base) {
            for how in [Harm::Truncate, Harm::Garbage, Harm::Flip] {
                let dir = tmp.path().join(format!("case-{cases}"));
                copy_dir(base, &dir);
                if !harm(&dir.join(&name), how) {
                    fs::remove_dir_all(&dir).unwrap();
                    continue;
                }
                cases += 1;
                let what = format!("{how:?} {name} of {}", base.display());
                // An offset index cut at an entry boundary is a shorter sparse index, which
                // Kafka's sanity check accepts too: lookups scan a little further. Not damage
                // if every record is still read as it was.
                let len = fs::metadata(dir.join(&name)).unwrap().len();
                let sparse = matches!(how, Harm::Truncate)
                    && name.ends_with(".index")
                    && len.is_multiple_of(8);
                let o = run_path(&["verify"], &dir);
                match o.status.code() {
                    Some(1) => {}
                    Some(0) if sparse => {
                        let read = |d: &Path| stdout(&run_path(&["read", "--json"], d));
                        let healthy = tmp.path().join("healthy-read");
                        copy_dir(base, &healthy);
                        assert_eq!(read(&dir), read(&healthy), "{what}: reads changed");
                        fs::remove_dir_all(&healthy).unwrap();
                    }
                    Some(0) => missed.push(what.clone()),
                    code => panic!(
                        "verify after {what}: exit {code:?}\n{}{}",
                        stdout(&o),
                        String::from_utf8_lossy(&o.stderr)
                    ),
                }
                for mode in ["tolerate-tail", "tolerate-any", "absolute"] {
                    let o = run_path(&["recover", "--mode", mode, "--dry-run"], &dir);
                    assert!(
                        matches!(o.status.code(), Some(0 | 1 | 3)),
                        "recover --dry-run --mode {mode} after {what}: exit {:?}\n{}{}",
                        o.status.code(),
                        stdout(&o),
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
                // The other commands that open the log refuse damage as damage too.
                for args in [&["read"][..], &["compact", "--dry-run"]] {
                    let o = run_path(args, &dir);
                    assert!(
                        matches!(o.status.code(), Some(0 | 1)),
                        "{args:?} after {what}: exit {:?}\n{}{}",
                        o.status.code(),
                        stdout(&o),
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
                let o = run_path(&["recover", "--mode", "tolerate-any"], &dir);
                assert!(
                    matches!(o.status.code(), Some(0 | 1 | 3)),
                    "recover after {what}: exit {:?}\n{}{}",
                    o.status.code(),
                    stdout(&o),
                    String::from_utf8_lossy(&o.stderr)
                );
                fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
    assert!(cases > 60, "{cases} cases");
    assert!(missed.is_empty(), "verify called these clean: {missed:#?}");
}

/// The reproduction: a `leader-epoch-checkpoint` that does not parse is damage the open refuses
/// (exit 1, named with its file and line, nothing changed), not a failure to run.
#[test]
fn recover_of_a_damaged_leader_epoch_checkpoint_exits_1_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txn-0");
    copy_dir(&fixture("txn-0"), &dir);
    fs::write(dir.join("leader-epoch-checkpoint"), b"0\n1\nzero 0\n").unwrap();
    let before = common_cli::contents(&dir);
    let o = run_path(&["recover"], &dir);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let text = stdout(&o);
    assert!(text.contains("REFUSED"), "{text}");
    assert!(text.contains("leader-epoch-checkpoint: line 3"), "{text}");
    assert_eq!(common_cli::contents(&dir), before);
    let o = run_path(&["verify"], &dir);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}
