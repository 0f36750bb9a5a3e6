//! Loopback ports for test processes that must be told their ports before they start (a
//! cluster's nodes name each other's ports in `--cluster`).
//!
//! A port found by binding port 0 and letting go is unsafe twice over: the kernel may hand the
//! same port to the next such bind in this process (two nodes of one cluster, or two clusters
//! of tests running side by side, were both given 37483), and it is a port of the ephemeral
//! range, which any outgoing connection of any process (the clients, the e2e lane beside the
//! tests) may take before the node binds it. So the ports come from below the ephemeral range,
//! where neither the kernel's picks nor outgoing connections go, each is bound to prove it
//! free, and none is handed out twice by this process. The broker's and the raft crate's
//! tests share this file (`#[path]`).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports this process handed out: never handed out again.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The lowest port of the ephemeral range (`ip_local_port_range`), 32768 if unreadable.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// `n` distinct free loopback ports, none of them ephemeral and none handed out before by this
/// process. The ports are free when returned; a process of another test run could still bind
/// one first, which shows as the node's typed "cannot listen" error, never as a silent mix-up.
pub fn free_ports(n: usize) -> Vec<u16> {
    let (low, high) = (10_000u32, u32::from(ephemeral_low()).max(10_001));
    let span = high - low;
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    // Start at a point that differs between processes and runs, then walk the range.
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    let mut held = Vec::with_capacity(n);
    for step in 0..span {
        if held.len() == n {
            break;
        }
        let port = (low + (seed.wrapping_add(step.wrapping_mul(7919))) % span) as u16;
        if taken.contains(&port) {
            continue;
        }
        // Held until all are found, so a port is proven free while the others are sought.
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            taken.insert(port);
            held.push(listener);
        }
    }
    assert_eq!(held.len(), n, "{n} free loopback ports below {high}");
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One port of [`free_ports`].
pub fn free_port() -> u16 {
    free_ports(1)[0]
}
