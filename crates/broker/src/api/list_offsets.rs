//! ListOffsets: the earliest or latest offset of a partition, or the first offset at or after
//! a timestamp.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::errors;
use crate::store::{Partition, ReadRefused, Store, TimestampOffset};

/// Kafka's special timestamps (`ListOffsetsRequest`).
const LATEST: i64 = -1;
/// ListOffsets' `isolation_level` of a read_committed consumer.
const READ_COMMITTED: i8 = 1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: ListOffsetsRequest = request.body()?;
    let version = request.version;
    let store = Arc::clone(&broker.store);
    // A timestamp lookup reads index files and batches, MAX_TIMESTAMP the whole log: off the
    // reactor.
    let topics = tokio::task::spawn_blocking(move || answer(&store, version, body))
        .await
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "list offsets task failed");
            Vec::new()
        });
    let response = ListOffsetsResponse::default().with_topics(topics);
    Ok(Reply::Now(respond(request, &response)?))
}

fn answer(store: &Store, version: i16, body: ListOffsetsRequest) -> Vec<ListOffsetsTopicResponse> {
    let read_committed = body.isolation_level == READ_COMMITTED;
    body.topics
        .into_iter()
        .map(|topic| {
            let found = store.topic(&topic.name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let partition = found.as_ref().and_then(|t| t.partition(p.partition_index));
                    let Some(partition) = partition else {
                        return response
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_timestamp(-1)
                            .with_offset(-1);
                    };
                    match lookup(partition, p.timestamp, read_committed) {
                        Ok(found) => response
                            .with_timestamp(found.timestamp)
                            .with_offset(found.offset)
                            // Leader epochs exist from v4; this broker's is always 0.
                            .with_leader_epoch(if version >= 4 { 0 } else { -1 }),
                        Err(refused) => response
                            .with_error_code(errors::read_error(&refused).code())
                            .with_timestamp(-1)
                            .with_offset(-1),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect()
}

/// The answer for one partition. "None found" is offset -1 and timestamp -1, as Kafka answers.
/// As Kafka's `fetchOffsetForTimestamp`, the answers are bounded by what a consumer of the
/// isolation level may fetch: LATEST is the high watermark (the log end on this broker), or
/// the last stable offset under read_committed, and an offset found by timestamp at or past
/// that bound is none.
fn lookup(
    partition: &Partition,
    timestamp: i64,
    read_committed: bool,
) -> Result<TimestampOffset, ReadRefused> {
    let none = TimestampOffset {
        timestamp: -1,
        offset: -1,
    };
    let fetchable = if read_committed {
        partition.last_stable_offset()
    } else {
        partition.log_end_offset()
    };
    let below =
        |found: Option<TimestampOffset>| found.filter(|f| f.offset < fetchable).unwrap_or(none);
    Ok(match timestamp {
        LATEST => TimestampOffset {
            timestamp: -1,
            offset: fetchable,
        },
        // With tiered storage, where the remote segments start (Kafka's `logStartOffset`);
        // without, the local log start.
        EARLIEST => TimestampOffset {
            timestamp: -1,
            offset: partition.earliest_offset()?,
        },
        // Kafka's `localLogStartOffset` (KIP-1005).
        EARLIEST_LOCAL => TimestampOffset {
            timestamp: -1,
            offset: partition.local_log_start_offset(),
        },
        // As Kafka, the local segments only (`UnifiedLog.fetchOffsetByTimestamp`).
        MAX_TIMESTAMP => below(partition.max_timestamp()?),
        // The last offset uploaded (KIP-1005), -1 when nothing is.
        LATEST_TIERED => TimestampOffset {
            timestamp: -1,
            offset: partition.last_tiered_offset()?.unwrap_or(-1),
        },
        // Through the remote segments below the local log start, then the log.
        timestamp => below(partition.offset_for_timestamp(timestamp)?),
    })
}
