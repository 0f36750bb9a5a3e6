//! ApiVersions: the APIs and versions this broker answers.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply, SUPPORTED};
use crate::codec::{self, EncodeError, Request, ResponseFrame};

pub fn handle(request: &Request) -> Result<Reply, HandleError> {
    // The request body (the client's software name and version) changes nothing here; it is
    // still decoded, so a malformed one closes the connection like any other.
    let _: kafka_protocol::messages::ApiVersionsRequest = request.body()?;
    let response = ApiVersionsResponse::default().with_api_keys(api_keys());
    Ok(Reply::Now(respond(request, &response)?))
}

/// The answer to an ApiVersions version newer than this broker knows: UNSUPPORTED_VERSION
/// with the supported ranges, in a version-0 body the client can always parse, as Kafka
/// answers (the client then retries with the newest version both know).
pub fn unsupported_version(request: &Request) -> Result<ResponseFrame, EncodeError> {
    let response = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys());
    codec::encode(request.correlation_id, 0, &response, &[])
}

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}
