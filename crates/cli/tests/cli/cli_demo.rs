//! `oncelog demo`, run as a user would: every step told, and a clean log left behind.

use crate::common_cli;

use std::process::Command;

use common_cli::{run_path, stdout, BIN};

#[test]
fn demo_exits_0_and_tells_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let o = Command::new(BIN)
        .arg("demo")
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for step in 1..=6 {
        assert!(
            text.contains(&format!("step {step}: ")),
            "step {step}: {text}"
        );
    }
    for expected in [
        "appended at offsets 0..2",
        "duplicate, the original offsets 9..11",
        "killed by signal 9 (SIGKILL)",
        "unclean shutdown",
        "out_of_order_sequence: expected 21, got 24",
        "invalid_producer_epoch: current 1, got 0",
        "exactly once",
        "demo passed",
    ] {
        assert!(text.contains(expected), "missing `{expected}`: {text}");
    }
    assert_eq!(text.matches("-> duplicate").count(), 1 + 5, "{text}");
    // The kept directory is a clean log.
    assert_eq!(run_path(&["verify"], &dir).status.code(), Some(0));
}

#[test]
fn the_consumer_demo_skips_the_redelivered_order_and_leaves_its_store_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let o = Command::new(BIN)
        .args(["demo", "--consumer", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for expected in [
        "killed by SIGKILL",
        "the committed offset is 2",
        "offset 2: order-2 already handled",
        "offset 5: order-5 applied and recorded",
        "demo passed",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    assert_eq!(text.matches("shipped order-2").count(), 1, "{text}");
    // The store it left is what `oncelog processed dump` reads: six ids, one effect each.
    let o = Command::new(BIN)
        .args(["processed", "dump"])
        .arg(dir.join("consumer-store"))
        .output()
        .unwrap();
    let dump = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{dump}");
    assert_eq!(dump.matches("shipped order-").count(), 6, "{dump}");
}
