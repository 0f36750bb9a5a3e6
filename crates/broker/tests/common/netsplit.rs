//! Network partitions between the nodes of a test cluster, on loopback: one TCP proxy per
//! directed link (node `from` dialing node `to`'s raft listener, which each node is told with
//! `--cluster-dial`), so the test cuts and heals each link on its own.
//!
//! A node dials every peer and sends its calls on that connection, the answers coming back on
//! it ("mux" in crates/raft), so the link `from -> to` carries `from`'s calls to `to` and their
//! answers: cutting both links of a pair separates the two nodes.
//!
//! Two ways to cut ([`Cut`]): a black hole (nothing passes; connections stay open and the bytes
//! wait, as TCP's retransmissions do through a short outage, and pass when the link heals), and
//! a reset (every connection closed, new ones closed as soon as they are accepted).

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a link is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing passes; the connections stay and their bytes pass once the link heals.
    BlackHole,
    /// Every connection closed; a new one is closed as soon as it is accepted.
    Reset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Cut(Cut),
}

struct LinkShared {
    state: Mutex<State>,
    /// Bumped at each reset: a connection made before it closes.
    resets: AtomicU64,
    stop: AtomicBool,
}

impl LinkShared {
    fn state(&self) -> State {
        *self.state.lock().unwrap()
    }
}

/// One directed link's proxy.
struct Link {
    addr: SocketAddr,
    shared: Arc<LinkShared>,
}

impl Link {
    fn start(upstream: SocketAddr) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(LinkShared {
            state: Mutex::new(State::Open),
            resets: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let link = Arc::clone(&shared);
        std::thread::spawn(move || accept_loop(listener, upstream, link));
        Link { addr, shared }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, link: Arc<LinkShared>) {
    while !link.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => continue,
        };
        if link.state() == State::Cut(Cut::Reset) {
            drop(client);
            continue;
        }
        // Loopback: the node's raft listener is there whenever the node runs; a node that is
        // down refuses, and so does the proxy then (it closes the client's connection).
        let Ok(server) = TcpStream::connect(upstream) else {
            continue;
        };
        let born = link.resets.load(Ordering::SeqCst);
        for (from, to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let link = Arc::clone(&link);
            std::thread::spawn(move || pump(from, to, &link, born));
        }
    }
}

/// Copies `from` to `to` while the link passes bytes; closes both when the link is reset
/// (after the connection was made), stopped, or either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, link: &LinkShared, born: u64) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let dead = || link.stop.load(Ordering::SeqCst) || link.resets.load(Ordering::SeqCst) != born;
    let mut buf = vec![0u8; 64 << 10];
    'copy: while !dead() {
        // A black hole holds what it read (and reads no more: the sender's buffers fill, as
        // with packets that are not acknowledged) until the link heals or is reset.
        while matches!(link.state(), State::Cut(Cut::BlackHole)) {
            if dead() {
                break 'copy;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        while matches!(link.state(), State::Cut(Cut::BlackHole)) {
            if dead() {
                break 'copy;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if dead() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// The proxies of every directed link between the nodes of a cluster.
pub struct Links {
    links: BTreeMap<(i32, i32), Link>,
}

impl Links {
    /// A proxy for each ordered pair of `raft` (each node's raft listener).
    pub fn start(raft: &BTreeMap<i32, SocketAddr>) -> Links {
        let mut links = BTreeMap::new();
        for from in raft.keys() {
            for (to, upstream) in raft {
                if from != to {
                    links.insert((*from, *to), Link::start(*upstream));
                }
            }
        }
        Links { links }
    }

    /// Node `from`'s `--cluster-dial` value: each peer at the proxy of the link to it.
    pub fn dial_flag(&self, from: i32) -> String {
        self.links
            .iter()
            .filter(|((f, _), _)| *f == from)
            .map(|((_, to), link)| format!("{to}={}", link.addr))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn set(&self, from: i32, to: i32, state: State) {
        let link = &self.links[&(from, to)].shared;
        *link.state.lock().unwrap() = state;
        if state == State::Cut(Cut::Reset) {
            link.resets.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Cuts both links between every node of `a` and every node of `b`.
    pub fn split(&self, a: &[i32], b: &[i32], how: Cut) {
        for x in a {
            for y in b {
                self.set(*x, *y, State::Cut(how));
                self.set(*y, *x, State::Cut(how));
            }
        }
    }

    /// Cuts the one link `from -> to` (`from`'s calls to `to` and their answers).
    pub fn cut(&self, from: i32, to: i32, how: Cut) {
        self.set(from, to, State::Cut(how));
    }

    /// Every link passes again.
    pub fn heal(&self) {
        for link in self.links.values() {
            *link.shared.state.lock().unwrap() = State::Open;
        }
    }
}
