//! A request frame: its header, decoded, and its body, decoded on demand into the generated
//! request type of its API.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};

/// Why a request frame cannot be understood. Each one closes the connection (Kafka does the
/// same: a client that sends bytes the broker cannot parse is not one it can answer).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("malformed {api:?} v{version} request header: {reason}")]
    Header {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Body {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// One request, header decoded.
#[derive(Debug, Clone)]
pub struct Request {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<StrBytes>,
    /// The address the request came from, as Kafka writes a client's host (`/127.0.0.1`):
    /// set by the connection, `None` for a frame decoded on its own.
    pub client_host: Option<String>,
    body: Bytes,
}

impl Request {
    /// Decodes the header of `frame` (a frame without its size prefix).
    pub fn parse(frame: Bytes) -> Result<Request, RequestError> {
        if frame.len() < 8 {
            return Err(RequestError::TooShort(frame.len()));
        }
        let key = (&frame[0..2]).get_i16();
        let version = (&frame[2..4]).get_i16();
        let api_key = ApiKey::try_from(key).map_err(|_| RequestError::UnknownApiKey(key))?;
        let mut rest = frame;
        let header = RequestHeader::decode(&mut rest, api_key.request_header_version(version))
            .map_err(|e| RequestError::Header {
                api: api_key,
                version,
                reason: e.to_string(),
            })?;
        Ok(Request {
            api_key,
            version,
            correlation_id: header.correlation_id,
            client_id: header.client_id,
            client_host: None,
            body: rest,
        })
    }

    /// The body as the generated request type of this API and version. Slices of the frame
    /// (a produce request's records) are shared, not copied.
    pub fn body<T: Decodable>(&self) -> Result<T, RequestError> {
        let mut body = self.body.clone();
        T::decode(&mut body, self.version).map_err(|e| RequestError::Body {
            api: self.api_key,
            version: self.version,
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::protocol::Encodable;

    fn frame(api_key: ApiKey, version: i16, body: &impl Encodable) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, api_key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn header_and_body_decode_at_the_requests_version() {
        for version in [1, 9, 12] {
            let request = MetadataRequest::default().with_allow_auto_topic_creation(true);
            let parsed = Request::parse(frame(ApiKey::Metadata, version, &request)).unwrap();
            assert_eq!(
                (parsed.api_key, parsed.version, parsed.correlation_id),
                (ApiKey::Metadata, version, 42)
            );
            assert_eq!(parsed.client_id.as_deref(), Some("test"));
            let body: MetadataRequest = parsed.body().unwrap();
            assert_eq!(body.topics, request.topics);
        }
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(matches!(
            Request::parse(Bytes::from_static(b"\x00\x03")),
            Err(RequestError::TooShort(2))
        ));
        assert!(matches!(
            Request::parse(Bytes::from_static(b"\x7f\x00\x00\x01\x00\x00\x00\x01")),
            Err(RequestError::UnknownApiKey(0x7f00))
        ));
        let whole = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(
            Request::parse(whole.slice(..10)),
            Err(RequestError::Header { .. })
        ));
        let cut_body = Request::parse(whole.slice(..whole.len() - 2)).unwrap();
        assert!(matches!(
            cut_body.body::<MetadataRequest>(),
            Err(RequestError::Body { .. })
        ));
    }
}
