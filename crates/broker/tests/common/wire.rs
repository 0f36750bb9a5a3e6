//! A raw Kafka protocol connection, with kafka-protocol's generated types.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

pub struct Wire {
    pub stream: TcpStream,
    correlation_id: i32,
}

impl Wire {
    pub fn connect(addr: SocketAddr) -> Wire {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Wire {
            stream,
            correlation_id: 0,
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().unwrap()
    }

    /// Sends a request; returns its correlation id.
    pub fn send<Req: Encodable>(&mut self, api_key: ApiKey, version: i16, body: &Req) -> i32 {
        self.correlation_id += 1;
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("raw-test")))
            .encode(&mut buf, api_key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        self.send_frame(&buf);
        self.correlation_id
    }

    /// Sends raw bytes as one frame.
    pub fn send_frame(&mut self, frame: &[u8]) {
        self.stream
            .write_all(&(frame.len() as i32).to_be_bytes())
            .unwrap();
        self.stream.write_all(frame).unwrap();
    }

    /// Reads one response frame: its correlation id and the body after a header of
    /// `header_version`.
    pub fn receive<Resp: Decodable + HeaderVersion>(&mut self, version: i16) -> (i32, Resp) {
        self.receive_with_header::<Resp>(version, Resp::header_version(version))
    }

    pub fn receive_with_header<Resp: Decodable>(
        &mut self,
        version: i16,
        header_version: i16,
    ) -> (i32, Resp) {
        let mut frame = self.read_frame().expect("a response");
        let header = ResponseHeader::decode(&mut frame, header_version).unwrap();
        (
            header.correlation_id,
            Resp::decode(&mut frame, version).unwrap(),
        )
    }

    /// A request and its response.
    pub fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        body: &Req,
    ) -> Resp {
        let id = self.send(api_key, version, body);
        let (got, response) = self.receive::<Resp>(version);
        assert_eq!(got, id, "responses come in request order");
        response
    }

    pub fn read_frame(&mut self) -> io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame)?;
        Ok(Bytes::from(frame))
    }

    /// Whether the broker closed the connection (a read sees the end of the stream).
    pub fn is_closed_by_broker(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0))
            || matches!(self.stream.read(&mut byte), Err(e) if e.kind() == io::ErrorKind::ConnectionReset)
    }
}

/// A protocol string.
pub fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A topic name.
pub fn topic_name(text: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(str_bytes(text))
}

/// A consumer's Fetch (replica -1, read_uncommitted, no session) of `topic`-`partition` from
/// `offset`, answered at once, up to 1 MiB.
pub fn fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest};
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

/// Creates `topic` the way a client does without the admin APIs: a Metadata v12 request that
/// allows auto-creation. Returns the broker's answer for it (the caller asserts what it needs).
pub fn auto_create_topic(
    wire: &mut Wire,
    topic: &str,
) -> kafka_protocol::messages::metadata_response::MetadataResponseTopic {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let mut response: MetadataResponse = wire.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    response.topics.remove(0)
}

/// Creates `topic` through Metadata's auto-creation ([`auto_create_topic`]), which must
/// succeed: the topic's id.
pub fn create_topic(wire: &mut Wire, topic: &str) -> uuid::Uuid {
    let created = auto_create_topic(wire, topic);
    assert_eq!(created.error_code, 0);
    created.topic_id
}

/// Produce v9 (acks=all) of `records` to `topic`-`partition`: the partition's answer (the
/// caller asserts what it needs).
pub fn produce(
    wire: &mut Wire,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
    let mut response: ProduceResponse = wire.call(
        ApiKey::Produce,
        9,
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])]),
    );
    response.responses.remove(0).partition_responses.remove(0)
}

/// The (min, max) versions an ApiVersions answer advertises for `api`, if any.
pub fn advertised(
    response: &kafka_protocol::messages::ApiVersionsResponse,
    api: ApiKey,
) -> Option<(i16, i16)> {
    response
        .api_keys
        .iter()
        .find(|k| k.api_key == api as i16)
        .map(|k| (k.min_version, k.max_version))
}
