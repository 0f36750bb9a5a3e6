//! A TCP proxy between a client and the broker that loses acknowledgements: it forwards every
//! request, and for chosen Produce requests it lets the broker process the request, swallows
//! the response, and closes the client's connection, so the client retries the batch.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::Decodable;

/// A batch of a Produce request whose response was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostBatch {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub base_sequence: i32,
    pub records: i32,
}

/// A Produce request whose response the proxy swallowed.
#[derive(Debug, Clone)]
pub struct LostAck {
    /// Which Produce request it was, counting from 1 over all connections.
    pub number: usize,
    pub batches: Vec<LostBatch>,
}

type Hook = Box<dyn FnMut(&LostAck) + Send>;

struct Shared {
    upstream: Mutex<Option<SocketAddr>>,
    produce_requests: AtomicUsize,
    lose: Vec<usize>,
    lost: Mutex<Vec<LostAck>>,
    /// Runs after a response is swallowed and before the client's connection is closed.
    on_lost: Mutex<Option<Hook>>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on a free loopback port; loses the responses of the Produce requests numbered
    /// `lose` (from 1).
    pub fn start(lose: &[usize]) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream: Mutex::new(None),
            produce_requests: AtomicUsize::new(0),
            lose: lose.to_vec(),
            lost: Mutex::new(Vec::new()),
            on_lost: Mutex::new(None),
        });
        let accept = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let shared = Arc::clone(&accept);
                std::thread::spawn(move || relay(shared, client));
            }
        });
        Proxy { addr, shared }
    }

    pub fn set_upstream(&self, broker: SocketAddr) {
        *self.shared.upstream.lock().unwrap() = Some(broker);
    }

    /// Runs `hook` for each lost acknowledgement, before the client's connection closes.
    pub fn on_lost(&self, hook: impl FnMut(&LostAck) + Send + 'static) {
        *self.shared.on_lost.lock().unwrap() = Some(Box::new(hook));
    }

    pub fn lost(&self) -> Vec<LostAck> {
        self.shared.lost.lock().unwrap().clone()
    }

    pub fn produce_requests(&self) -> usize {
        self.shared.produce_requests.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept thread lives on; the hook (which may own a broker process) must not.
        self.shared.on_lost.lock().unwrap().take();
    }
}

fn relay(shared: Arc<Shared>, client: TcpStream) {
    let Some(upstream) = *shared.upstream.lock().unwrap() else {
        return;
    };
    let Ok(broker) = TcpStream::connect(upstream) else {
        // The broker is down (being restarted): the client sees a closed connection and
        // reconnects.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = broker.set_nodelay(true);
    let losing: Arc<Mutex<HashMap<i32, LostAck>>> = Arc::default();

    let (mut from_client, mut to_broker) =
        (client.try_clone().unwrap(), broker.try_clone().unwrap());
    let requests = {
        let (shared, losing) = (Arc::clone(&shared), Arc::clone(&losing));
        std::thread::spawn(move || -> io::Result<()> {
            loop {
                let frame = read_frame(&mut from_client)?;
                if frame.len() >= 8
                    && i16::from_be_bytes([frame[0], frame[1]]) == ApiKey::Produce as i16
                {
                    let number = shared.produce_requests.fetch_add(1, Ordering::SeqCst) + 1;
                    if shared.lose.contains(&number) {
                        let correlation =
                            i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                        let batches = lost_batches(&frame);
                        losing
                            .lock()
                            .unwrap()
                            .insert(correlation, LostAck { number, batches });
                    }
                }
                write_frame(&mut to_broker, &frame)?;
            }
        })
    };
    let (mut from_broker, mut to_client) =
        (broker.try_clone().unwrap(), client.try_clone().unwrap());
    let _ = (|| -> io::Result<()> {
        loop {
            let frame = read_frame(&mut from_broker)?;
            let correlation = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let lost = losing.lock().unwrap().remove(&correlation);
            if let Some(lost) = lost {
                shared.lost.lock().unwrap().push(lost.clone());
                if let Some(hook) = shared.on_lost.lock().unwrap().as_mut() {
                    hook(&lost);
                }
                return Ok(());
            }
            write_frame(&mut to_client, &frame)?;
        }
    })();
    let _ = client.shutdown(Shutdown::Both);
    let _ = broker.shutdown(Shutdown::Both);
    let _ = requests.join();
}

/// The batches of a Produce request frame (for the test to match against the broker's
/// duplicate log lines).
fn lost_batches(frame: &[u8]) -> Vec<LostBatch> {
    let mut buf = Bytes::copy_from_slice(frame);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let header = RequestHeader::decode(&mut buf, ApiKey::Produce.request_header_version(version))
        .expect("a produce header");
    let request =
        ProduceRequest::decode(&mut buf, header.request_api_version).expect("a produce body");
    let mut batches = Vec::new();
    for topic in request.topic_data {
        for p in topic.partition_data {
            let records = p.records.expect("records");
            let batch = oncelog::format::RecordBatch::parse(&records).expect("a batch");
            batches.push(LostBatch {
                topic: topic.name.0.to_string(),
                partition: p.index,
                producer_id: batch.producer_id(),
                base_sequence: batch.base_sequence(),
                records: batch.records_count(),
            });
        }
    }
    batches
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let mut frame = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    stream.read_exact(&mut frame)?;
    Ok(frame)
}

fn write_frame(stream: &mut TcpStream, frame: &[u8]) -> io::Result<()> {
    stream.write_all(&(frame.len() as i32).to_be_bytes())?;
    stream.write_all(frame)
}
