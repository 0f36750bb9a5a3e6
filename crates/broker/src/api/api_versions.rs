//! ApiVersions: the APIs and versions this broker answers, and (from v3) the features it
//! finalizes: `transaction.version=2`, which Kafka's Java producer (4.x) reads to run
//! transactions under KIP-890 part 2 (no AddPartitionsToTxn; EndTxn v5 bumps the epoch).

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply, SUPPORTED};
use crate::codec::{self, EncodeError, Request, ResponseFrame};

pub fn handle(request: &Request) -> Result<Reply, HandleError> {
    answer(request, api_keys(), TRANSACTION_VERSION_LEVEL)
}

/// ApiVersions advertising only `apis` (of [`SUPPORTED`], at their versions): cluster mode's.
/// It finalizes `transaction.version=1`: a cluster's partition leaders do not add partitions
/// to a transaction themselves (KIP-890 part 2), so clients send AddPartitionsToTxn.
pub fn handle_only(
    request: &Request,
    apis: &[kafka_protocol::messages::ApiKey],
) -> Result<Reply, HandleError> {
    let keys = api_keys()
        .into_iter()
        .filter(|k| apis.iter().any(|a| *a as i16 == k.api_key))
        .collect();
    answer(request, keys, CLUSTER_TRANSACTION_VERSION_LEVEL)
}

fn answer(
    request: &Request,
    keys: Vec<ApiVersion>,
    transaction_version: i16,
) -> Result<Reply, HandleError> {
    // The request body (the client's software name and version) changes nothing here; it is
    // still decoded, so a malformed one closes the connection like any other.
    let _: kafka_protocol::messages::ApiVersionsRequest = request.body()?;
    let mut response = ApiVersionsResponse::default().with_api_keys(keys);
    if request.version >= 3 {
        response = response
            .with_supported_features(vec![SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(TRANSACTION_VERSION))
                .with_min_version(0)
                .with_max_version(transaction_version)])
            // Fixed for the broker's life: the client re-reads the features only when the
            // epoch grows, and nothing here ever changes them.
            .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
            .with_finalized_features(vec![FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(TRANSACTION_VERSION))
                .with_min_version_level(transaction_version)
                .with_max_version_level(transaction_version)]);
    }
    Ok(Reply::Now(respond(request, &response)?))
}

/// Kafka's feature naming the transaction protocol a cluster runs.
const TRANSACTION_VERSION: &str = "transaction.version";
/// KIP-890 part 2 (Kafka 4.0's default); levels 0 and 1 (the older protocol) are also
/// answered, by request version.
const TRANSACTION_VERSION_LEVEL: i16 = crate::txn_coordinator::EPOCH_BUMPING_VERSION as i16;
/// Cluster mode's: the protocol before KIP-890 part 2 (AddPartitionsToTxn from the client).
const CLUSTER_TRANSACTION_VERSION_LEVEL: i16 = 1;
/// The epoch of the finalized features (Kafka's metadata offset); any value from 0 makes a
/// client that has seen none (-1) read them.
const FINALIZED_FEATURES_EPOCH: i64 = 1;

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
