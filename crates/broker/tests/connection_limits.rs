//! What a connection may cost the broker: idle connections are closed
//! (`--connections-max-idle-ms`), a request trickling in is closed at its read deadline
//! (`--request-read-timeout-ms`), an oversized frame is refused, and connections announcing
//! large frames hold memory only for the bytes they sent, within `--queued-max-request-bytes`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::wire::Wire;
use common::BrokerProcess;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::Encodable;

/// Whether the broker closes `stream` within `within` (a read sees the end or a reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// An ApiVersions v3 request frame, size prefix included.
fn api_versions_frame() -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(3)
        .with_correlation_id(1)
        .encode(&mut buf, ApiKey::ApiVersions.request_header_version(3))
        .unwrap();
    ApiVersionsRequest::default().encode(&mut buf, 3).unwrap();
    let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    frame
}

fn api_versions(wire: &mut Wire) {
    let response: ApiVersionsResponse =
        wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(response.error_code, 0);
}

/// A field of the broker's `broker stats` line, logged at shutdown.
fn stat(broker: &BrokerProcess, key: &str) -> u64 {
    let line = broker.wait_for_log("broker stats", Duration::from_secs(30));
    common::field(&line, key)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .parse()
        .unwrap()
}

#[test]
fn an_idle_connection_is_closed_and_an_active_one_is_not() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(data.path(), &["--connections-max-idle-ms", "600"]);
    let mut idle = Wire::connect(broker.addr);
    let mut active = Wire::connect(broker.addr);
    // Requests every 200 ms keep a connection open past the idle limit.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        api_versions(&mut active);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        closed_within(&mut idle.stream, Duration::from_secs(5)),
        "the idle connection is closed"
    );
    api_versions(&mut active);
    broker.terminate();
    assert!(stat(&broker, "connections_timed_out") >= 1);
}

#[test]
fn a_request_trickling_in_is_closed_at_its_read_deadline() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &["--request-read-timeout-ms", "500"]);
    // A whole ApiVersions request, sent one byte every 100 ms: over 2 s in all, four times
    // the deadline.
    let frame = api_versions_frame();
    // The same bytes at once are answered.
    let mut fast = TcpStream::connect(broker.addr).unwrap();
    fast.write_all(&frame).unwrap();
    let mut size = [0u8; 4];
    fast.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    fast.read_exact(&mut size).unwrap();

    let mut slow = TcpStream::connect(broker.addr).unwrap();
    let mut writer = slow.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for byte in frame {
            if writer.write_all(&[byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let started = Instant::now();
    assert!(
        closed_within(&mut slow, Duration::from_secs(10)),
        "the slow request is not answered: its connection is closed"
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "closed at the deadline, before the last byte: {:?}",
        started.elapsed()
    );
    trickle.join().unwrap();
    let mut next = Wire::connect(broker.addr);
    api_versions(&mut next);
}

#[test]
fn an_oversized_frame_is_refused_before_its_bytes_arrive() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        data.path(),
        &[
            "--max-request-bytes",
            "4096",
            "--queued-max-request-bytes",
            "8192",
        ],
    );
    let mut stream = TcpStream::connect(broker.addr).unwrap();
    stream.write_all(&4097i32.to_be_bytes()).unwrap();
    assert!(closed_within(&mut stream, Duration::from_secs(10)));
    let mut next = Wire::connect(broker.addr);
    api_versions(&mut next);
}

/// The broker's virtual data size (`VmData` of /proc/PID/status), in bytes.
fn vm_data(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmData:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn connections_announcing_large_frames_hold_only_what_they_sent() {
    const CONNECTIONS: usize = 200;
    let data = tempfile::tempdir().unwrap();
    // Kafka's default frame limit (100 MiB), and a budget for two such frames.
    let mut broker = BrokerProcess::start(
        data.path(),
        &["--queued-max-request-bytes", &(200u64 << 20).to_string()],
    );
    let before = vm_data(broker.pid());
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(broker.addr).unwrap();
        stream.write_all(&(100i32 << 20).to_be_bytes()).unwrap();
        stream.write_all(&[0u8; 100]).unwrap();
        streams.push(stream);
    }
    // Every connection is read (the broker answers a new one only after it accepted the
    // earlier ones, in order).
    std::thread::sleep(Duration::from_millis(500));
    let mut wire = Wire::connect(broker.addr);
    let grown = vm_data(broker.pid()).saturating_sub(before);
    // A reservation of the announced size per connection would be 20 GB.
    assert!(
        grown < 1 << 30,
        "{CONNECTIONS} connections announcing 100 MiB grew the broker by {grown} bytes"
    );
    drop(streams);
    // Two frames of 100 MiB filled the budget; the small request waited until their
    // connections closed and gave their share back.
    api_versions(&mut wire);
    broker.terminate();
    let peak = stat(&broker, "request_buffer_peak");
    // What the connections sent, with each buffer's read-ahead and doubling: nothing near the
    // announced 20 GB, and within the budget plus a few KiB per connection.
    assert!(
        peak <= (200 << 20) + CONNECTIONS as u64 * (16 << 10),
        "read buffers peaked at {peak} bytes"
    );
    assert!(
        peak <= CONNECTIONS as u64 * (16 << 10),
        "only bytes received are buffered: {peak}"
    );
}

#[test]
fn a_request_waiting_for_the_budget_is_served_once_the_budget_frees() {
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(
        data.path(),
        &[
            "--max-request-bytes",
            "65536",
            "--queued-max-request-bytes",
            "65536",
            "--request-read-timeout-ms",
            "700",
        ],
    );
    // One connection announces a frame as large as the whole budget and stalls.
    let mut hog = TcpStream::connect(broker.addr).unwrap();
    hog.write_all(&65536i32.to_be_bytes()).unwrap();
    hog.write_all(&[0u8; 10]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // A small request waits for the budget, then is answered once the stalled request hits
    // its deadline and its connection is closed.
    let started = Instant::now();
    let mut wire = Wire::connect(broker.addr);
    api_versions(&mut wire);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the budget was full: the request waited ({:?})",
        started.elapsed()
    );
    assert!(closed_within(&mut hog, Duration::from_secs(5)));
}

#[test]
fn pipelined_acks_all_produces_larger_than_the_read_ahead_are_all_answered() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let data = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start(data.path(), &[]);
    let mut wire = Wire::connect(broker.addr);
    let _: kafka_protocol::messages::MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default()
            .with_topics(Some(vec![
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("piped")))),
            ]))
            .with_allow_auto_topic_creation(true),
    );
    // Five acks=all requests of about 200 KiB each, written at once: each frame is read to its
    // end (its buffer grows with it), the next one's bytes are already there, and every
    // produce is answered (none waits forever for the reader to catch up).
    let value = vec![b'v'; 20_000];
    let mut ids = Vec::new();
    for n in 0..5 {
        let mut builder = oncelog::format::BatchBuilder::new().producer(77, 0, n * 10);
        for i in 0..10 {
            builder.append(i, None, Some(&value), &[]);
        }
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("piped")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(bytes::Bytes::from(builder.build().unwrap())))])]);
        ids.push(wire.send(ApiKey::Produce, 9, &request));
    }
    for (n, id) in ids.into_iter().enumerate() {
        let (got, response): (i32, ProduceResponse) = wire.receive(9);
        assert_eq!(got, id);
        let p = &response.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, n as i64 * 10));
    }
}
