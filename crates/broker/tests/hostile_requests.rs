//! No request, whatever its bytes, takes the broker down or makes it allocate out of proportion
//! to the request.
//!
//! For every API and version the broker advertises, a request with every array, string and
//! bytes field filled is encoded; then every length the frame could hold is set, position by
//! position, to the largest value of each encoding (int16 and int32 for strings, arrays, bytes
//! and records; an unsigned varint for the compact forms of flexible versions and tagged
//! fields), and the frame is decoded through the broker's own entry point
//! (`api::decode_frame`) under an allocator that measures what the decode holds at its peak.
//! Each array shape (plain, compact, nullable, nested), strings and bytes/records have a test
//! of their own that checks the shape was actually hit. The committed seed corpus of the
//! `request_frame` fuzz target is replayed here too, and the reproductions of the issue are
//! sent to a broker process whose address space is limited, which must answer the next client.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use oncelog_broker::api::{decode_frame, SUPPORTED};

// ---------------------------------------------------------------------------------------------
// An allocator that tracks, per thread, the bytes live and their peak since the last reset.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: the thread-locals may already be gone while a thread exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; the counters are plain
// thread-local cells that allocate nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Decodes `frame` and returns the error text (None: it decoded) and the most bytes the
/// decode held at once beyond what was live before it.
fn decode_measured(frame: &[u8]) -> (Option<String>, usize) {
    let frame = Bytes::copy_from_slice(frame);
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let result = decode_frame(frame).map(drop).map_err(|e| e.to_string());
    let peak = PEAK.with(Cell::get) - base;
    (result.err(), peak.max(0) as usize)
}

/// What a decode may hold: a constant for the header and the error, and a multiple of the
/// frame (each byte of input can become at most one array element, of at most a few hundred
/// bytes in memory).
fn bound(frame_len: usize) -> usize {
    (16 << 10) + 256 * frame_len
}

// ---------------------------------------------------------------------------------------------
// Requests with every field that carries a length filled, at each version.

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn topic(text: &str) -> TopicName {
    TopicName(s(text))
}

/// Applies each step that the version can carry: a step setting a field this version does not
/// have makes the encoder refuse, and is skipped.
fn fill<T: Encodable + Clone>(base: T, version: i16, steps: &[&dyn Fn(T) -> T]) -> T {
    let mut request = base;
    for step in steps {
        let candidate = step(request.clone());
        if candidate.encode(&mut BytesMut::new(), version).is_ok() {
            request = candidate;
        }
    }
    request
}

/// A record batch as a client sends it.
fn records() -> Bytes {
    let mut builder = oncelog::format::BatchBuilder::new();
    builder.append(1, Some(b"k"), Some(b"value"), &[]);
    Bytes::from(builder.build().unwrap())
}

fn encode_body(api: ApiKey, version: i16) -> BytesMut {
    let mut buf = BytesMut::new();
    let v = version;
    let id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    macro_rules! enc {
        ($request:expr) => {
            $request.encode(&mut buf, v).unwrap()
        };
    }
    use kafka_protocol::messages::*;
    match api {
        ApiKey::Produce => {
            use produce_request::*;
            let partition = PartitionProduceData::default()
                .with_index(1)
                .with_records(Some(records()));
            enc!(fill(
                ProduceRequest::default().with_acks(-1),
                v,
                &[
                    &|r: ProduceRequest| r.with_transactional_id(Some(TransactionalId(s("tx")))),
                    &|r: ProduceRequest| {
                        r.with_topic_data(vec![TopicProduceData::default()
                            .with_name(topic("t"))
                            .with_partition_data(vec![partition.clone(), partition.clone()])])
                    },
                    &|r: ProduceRequest| {
                        // From v13 topics are named by id only.
                        if !r.topic_data.is_empty() {
                            return r;
                        }
                        r.with_topic_data(vec![TopicProduceData::default()
                            .with_topic_id(id)
                            .with_partition_data(vec![partition.clone(), partition.clone()])])
                    },
                ],
            ))
        }
        ApiKey::Fetch => {
            use fetch_request::*;
            let partition = FetchPartition::default().with_partition_max_bytes(1 << 20);
            enc!(fill(
                FetchRequest::default().with_replica_id(BrokerId(-1)),
                v,
                &[
                    &|r: FetchRequest| {
                        r.with_topics(vec![FetchTopic::default()
                            .with_topic(topic("t"))
                            .with_partitions(vec![partition.clone(), partition.clone()])])
                    },
                    &|r: FetchRequest| {
                        // From v13 topics are named by id only.
                        if !r.topics.is_empty() {
                            return r;
                        }
                        r.with_topics(vec![FetchTopic::default()
                            .with_topic_id(id)
                            .with_partitions(vec![partition.clone(), partition.clone()])])
                    },
                    &|r: FetchRequest| {
                        r.with_forgotten_topics_data(vec![ForgottenTopic::default()
                            .with_topic(topic("f"))
                            .with_partitions(vec![1, 2])])
                    },
                    &|r: FetchRequest| {
                        if !r.forgotten_topics_data.is_empty() {
                            return r;
                        }
                        r.with_forgotten_topics_data(vec![ForgottenTopic::default()
                            .with_topic_id(id)
                            .with_partitions(vec![1, 2])])
                    },
                    &|r: FetchRequest| r.with_rack_id(s("rack")),
                    &|r: FetchRequest| r.with_cluster_id(Some(s("cluster"))),
                ],
            ))
        }
        ApiKey::ListOffsets => {
            use list_offsets_request::*;
            enc!(ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![
                        ListOffsetsPartition::default(),
                        ListOffsetsPartition::default()
                    ])]))
        }
        ApiKey::Metadata => {
            use metadata_request::*;
            enc!(fill(
                MetadataRequest::default(),
                v,
                &[
                    &|r: MetadataRequest| {
                        r.with_topics(Some(vec![
                            MetadataRequestTopic::default().with_name(Some(topic("a"))),
                            MetadataRequestTopic::default().with_name(Some(topic("b"))),
                        ]))
                    },
                    &|r: MetadataRequest| r.with_allow_auto_topic_creation(false),
                ],
            ))
        }
        ApiKey::OffsetCommit => {
            use offset_commit_request::*;
            let partition = OffsetCommitRequestPartition::default().with_committed_offset(5);
            enc!(fill(
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_member_id(s("m"))
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partitions(vec![partition.clone(), partition])]),
                v,
                &[
                    &|r: OffsetCommitRequest| {
                        let mut r = r;
                        for p in &mut r.topics[0].partitions {
                            p.committed_metadata = Some(s("meta"));
                        }
                        r
                    },
                    &|r: OffsetCommitRequest| r.with_group_instance_id(Some(s("i"))),
                ],
            ))
        }
        ApiKey::OffsetFetch => {
            use offset_fetch_request::*;
            enc!(fill(
                OffsetFetchRequest::default(),
                v,
                &[
                    &|r: OffsetFetchRequest| {
                        r.with_group_id(GroupId(s("g"))).with_topics(Some(vec![
                            OffsetFetchRequestTopic::default()
                                .with_name(topic("t"))
                                .with_partition_indexes(vec![0, 1]),
                        ]))
                    },
                    &|r: OffsetFetchRequest| {
                        r.with_groups(vec![OffsetFetchRequestGroup::default()
                            .with_group_id(GroupId(s("g")))
                            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                                .with_name(topic("t"))
                                .with_partition_indexes(vec![0, 1])]))])
                    },
                    &|r: OffsetFetchRequest| {
                        let mut r = r;
                        for x in r.groups.iter_mut().take(1) {
                            x.member_id = Some(s("m"));
                        }
                        r
                    },
                ],
            ))
        }
        ApiKey::FindCoordinator => enc!(fill(
            FindCoordinatorRequest::default(),
            v,
            &[
                &|r: FindCoordinatorRequest| r.with_key(s("group")),
                &|r: FindCoordinatorRequest| r.with_coordinator_keys(vec![s("a"), s("b")]),
            ],
        )),
        ApiKey::JoinGroup => {
            use join_group_request::*;
            let protocol = JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"\x00\x01metadata"));
            enc!(fill(
                JoinGroupRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_member_id(s("m"))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![protocol.clone(), protocol]),
                v,
                &[
                    &|r: JoinGroupRequest| r.with_group_instance_id(Some(s("i"))),
                    &|r: JoinGroupRequest| r.with_reason(Some(s("why"))),
                ],
            ))
        }
        ApiKey::Heartbeat => enc!(fill(
            HeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_member_id(s("m")),
            v,
            &[&|r: HeartbeatRequest| r.with_group_instance_id(Some(s("i")))],
        )),
        ApiKey::LeaveGroup => {
            use leave_group_request::*;
            enc!(fill(
                LeaveGroupRequest::default().with_group_id(GroupId(s("g"))),
                v,
                &[
                    &|r: LeaveGroupRequest| r.with_member_id(s("m")),
                    &|r: LeaveGroupRequest| {
                        r.with_members(vec![
                            MemberIdentity::default().with_member_id(s("a")),
                            MemberIdentity::default().with_member_id(s("b")),
                        ])
                    },
                    &|r: LeaveGroupRequest| {
                        let mut r = r;
                        for x in r.members.iter_mut().take(1) {
                            x.group_instance_id = Some(s("i"));
                        }
                        r
                    },
                    &|r: LeaveGroupRequest| {
                        let mut r = r;
                        for x in r.members.iter_mut().take(1) {
                            x.reason = Some(s("why"));
                        }
                        r
                    },
                ],
            ))
        }
        ApiKey::SyncGroup => {
            use sync_group_request::*;
            let assignment = SyncGroupRequestAssignment::default()
                .with_member_id(s("m"))
                .with_assignment(Bytes::from_static(b"\x00\x01assignment"));
            enc!(fill(
                SyncGroupRequest::default()
                    .with_group_id(GroupId(s("g")))
                    .with_member_id(s("m"))
                    .with_assignments(vec![assignment.clone(), assignment]),
                v,
                &[
                    &|r: SyncGroupRequest| r.with_group_instance_id(Some(s("i"))),
                    &|r: SyncGroupRequest| r.with_protocol_type(Some(s("consumer"))),
                    &|r: SyncGroupRequest| r.with_protocol_name(Some(s("range"))),
                ],
            ))
        }
        ApiKey::ApiVersions => enc!(fill(
            ApiVersionsRequest::default(),
            v,
            &[
                &|r: ApiVersionsRequest| r.with_client_software_name(s("raw")),
                &|r: ApiVersionsRequest| r.with_client_software_version(s("1.0")),
            ],
        )),
        ApiKey::InitProducerId => enc!(InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s("tx"))))
            .with_transaction_timeout_ms(60_000)),
        ApiKey::AddPartitionsToTxn => {
            use add_partitions_to_txn_request::*;
            let topics = vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![0, 1]),
                AddPartitionsToTxnTopic::default()
                    .with_name(topic("u"))
                    .with_partitions(vec![2]),
            ];
            if v >= 4 {
                // The batched form: several transactions, each with its topics.
                let txn = AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_verify_only(true)
                    .with_topics(topics);
                enc!(AddPartitionsToTxnRequest::default().with_transactions(vec![
                    txn.clone(),
                    txn.with_transactional_id(TransactionalId(s("ty"))),
                ]))
            } else {
                enc!(AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
                    .with_v3_and_below_topics(topics))
            }
        }
        ApiKey::AddOffsetsToTxn => enc!(AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_group_id(GroupId(s("g")))),
        ApiKey::EndTxn => {
            enc!(EndTxnRequest::default().with_transactional_id(TransactionalId(s("tx"))))
        }
        ApiKey::TxnOffsetCommit => {
            use txn_offset_commit_request::*;
            let partition = TxnOffsetCommitRequestPartition::default()
                .with_committed_offset(5)
                .with_committed_metadata(Some(s("meta")));
            enc!(fill(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_group_id(GroupId(s("g")))
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partitions(vec![partition.clone(), partition])]),
                v,
                &[
                    &|r: TxnOffsetCommitRequest| r.with_member_id(s("m")),
                    &|r: TxnOffsetCommitRequest| r.with_group_instance_id(Some(s("i"))),
                ],
            ))
        }
        ApiKey::CreateTopics => {
            use create_topics_request::*;
            let assignment = CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1), BrokerId(2)]);
            let config = CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("1000")));
            enc!(CreateTopicsRequest::default().with_topics(vec![
                CreatableTopic::default()
                    .with_name(topic("t"))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(vec![assignment.clone(), assignment])
                    .with_configs(vec![config.clone(), config]),
                CreatableTopic::default().with_name(topic("u")),
            ]))
        }
        ApiKey::DeleteTopics => {
            use delete_topics_request::*;
            enc!(fill(
                DeleteTopicsRequest::default(),
                v,
                &[
                    &|r: DeleteTopicsRequest| r.with_topic_names(vec![topic("a"), topic("b")]),
                    &|r: DeleteTopicsRequest| {
                        r.with_topics(vec![
                            DeleteTopicState::default().with_name(Some(topic("a"))),
                            DeleteTopicState::default().with_topic_id(id),
                        ])
                    },
                ],
            ))
        }
        ApiKey::DescribeConfigs => {
            use describe_configs_request::*;
            enc!(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configuration_keys(Some(vec![s("retention.ms"), s("segment.bytes")])),
                DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1")),
            ]))
        }
        ApiKey::CreatePartitions => {
            use create_partitions_request::*;
            let assignment = CreatePartitionsAssignment::default()
                .with_broker_ids(vec![BrokerId(1), BrokerId(2)]);
            enc!(CreatePartitionsRequest::default().with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(topic("t"))
                    .with_count(3)
                    .with_assignments(Some(vec![assignment.clone(), assignment])),
                CreatePartitionsTopic::default()
                    .with_name(topic("u"))
                    .with_count(2),
            ]))
        }
        ApiKey::IncrementalAlterConfigs => {
            use incremental_alter_configs_request::*;
            let config = AlterableConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("1000")));
            enc!(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(s("t"))
                        .with_configs(vec![config.clone(), config]),
                    AlterConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(s("1")),
                ])
            )
        }
        ApiKey::AlterConfigs => {
            use alter_configs_request::*;
            let config = AlterableConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("1000")));
            enc!(AlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configs(vec![config.clone(), config]),
                AlterConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1")),
            ]))
        }
        ApiKey::DescribeCluster => enc!(DescribeClusterRequest::default()),
        ApiKey::DescribeGroups => enc!(fill(
            DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g")), GroupId(s("h"))]),
            v,
            &[&|r: DescribeGroupsRequest| r.with_include_authorized_operations(true)],
        )),
        ApiKey::ListGroups => enc!(fill(
            ListGroupsRequest::default(),
            v,
            &[
                &|r: ListGroupsRequest| r.with_states_filter(vec![s("Stable"), s("Empty")]),
                &|r: ListGroupsRequest| r.with_types_filter(vec![s("classic"), s("consumer")]),
            ],
        )),
        ApiKey::DeleteRecords => {
            use delete_records_request::*;
            let partition = DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(5);
            enc!(DeleteRecordsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![partition.clone(), partition])]))
        }
        ApiKey::OffsetForLeaderEpoch => {
            use offset_for_leader_epoch_request::*;
            let partition = OffsetForLeaderPartition::default()
                .with_current_leader_epoch(0)
                .with_leader_epoch(0);
            enc!(fill(
                OffsetForLeaderEpochRequest::default().with_topics(vec![
                    OffsetForLeaderTopic::default()
                        .with_topic(topic("t"))
                        .with_partitions(vec![partition.clone(), partition])
                ]),
                v,
                &[&|r: OffsetForLeaderEpochRequest| r.with_replica_id(BrokerId(-1))],
            ))
        }
        ApiKey::DescribeLogDirs => {
            use describe_log_dirs_request::*;
            enc!(DescribeLogDirsRequest::default().with_topics(Some(vec![
                DescribableLogDirTopic::default()
                    .with_topic(topic("t"))
                    .with_partitions(vec![0, 1]),
                DescribableLogDirTopic::default()
                    .with_topic(topic("u"))
                    .with_partitions(vec![2]),
            ])))
        }
        ApiKey::DeleteGroups => enc!(DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(s("g")), GroupId(s("h"))])),
        ApiKey::OffsetDelete => {
            use offset_delete_request::*;
            let partition = OffsetDeleteRequestPartition::default().with_partition_index(0);
            enc!(OffsetDeleteRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(vec![OffsetDeleteRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![partition.clone(), partition])]))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            use consumer_group_heartbeat_request::*;
            let owned = TopicPartitions::default()
                .with_topic_id(uuid::Uuid::from_u128(7))
                .with_partitions(vec![0, 1]);
            enc!(ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_member_id(s("m"))
                .with_instance_id(Some(s("i")))
                .with_rack_id(Some(s("r")))
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![topic("t"), topic("u")]))
                .with_subscribed_topic_regex((v >= 1).then(|| s("t.*")))
                .with_server_assignor(Some(s("uniform")))
                .with_topic_partitions(Some(vec![owned.clone(), owned])))
        }
        ApiKey::ConsumerGroupDescribe => enc!(ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(s("g")), GroupId(s("h"))])),
        ApiKey::WriteTxnMarkers => {
            use write_txn_markers_request::*;
            let marker = WritableTxnMarker::default()
                .with_producer_id(ProducerId(7))
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(topic("t"))
                    .with_partition_indexes(vec![0, 1])]);
            enc!(WriteTxnMarkersRequest::default().with_markers(vec![marker.clone(), marker]))
        }
        ApiKey::DescribeProducers => {
            use describe_producers_request::*;
            let t = TopicRequest::default()
                .with_name(topic("t"))
                .with_partition_indexes(vec![0, 1]);
            enc!(DescribeProducersRequest::default().with_topics(vec![t.clone(), t]))
        }
        ApiKey::DescribeTransactions => enc!(DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s("tx")), TransactionalId(s("ty"))])),
        ApiKey::ListTransactions => enc!(fill(
            ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing"), s("Empty")])
                .with_producer_id_filters(vec![ProducerId(1), ProducerId(2)]),
            v,
            &[&|r: ListTransactionsRequest| r.with_duration_filter(60_000)],
        )),
        ApiKey::ShareGroupHeartbeat => enc!(ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_id(s("m"))
            .with_rack_id(Some(s("r")))
            .with_subscribed_topic_names(Some(vec![topic("t"), topic("u")]))),
        ApiKey::ShareGroupDescribe => enc!(ShareGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(s("g")), GroupId(s("h"))])),
        ApiKey::ShareFetch => {
            use share_fetch_request::*;
            let ack = AcknowledgementBatch::default()
                .with_first_offset(0)
                .with_last_offset(1)
                .with_acknowledge_types(vec![1, 2]);
            let partition = FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(vec![ack.clone(), ack]);
            let forgotten = ForgottenTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![0, 1]);
            enc!(ShareFetchRequest::default()
                .with_group_id(Some(GroupId(s("g"))))
                .with_member_id(Some(s("m")))
                .with_topics(vec![FetchTopic::default()
                    .with_topic_id(id)
                    .with_partitions(vec![partition.clone(), partition])])
                .with_forgotten_topics_data(vec![forgotten.clone(), forgotten]))
        }
        ApiKey::ShareAcknowledge => {
            use share_acknowledge_request::*;
            let ack = AcknowledgementBatch::default()
                .with_first_offset(0)
                .with_last_offset(1)
                .with_acknowledge_types(vec![1, 3]);
            let partition = AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(vec![ack.clone(), ack]);
            enc!(ShareAcknowledgeRequest::default()
                .with_group_id(Some(GroupId(s("g"))))
                .with_member_id(Some(s("m")))
                .with_topics(vec![AcknowledgeTopic::default()
                    .with_topic_id(id)
                    .with_partitions(vec![partition.clone(), partition])]))
        }
        ApiKey::DescribeShareGroupOffsets => {
            use describe_share_group_offsets_request::*;
            let t = DescribeShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic("t"))
                .with_partitions(vec![0, 1]);
            let g = DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(Some(vec![t.clone(), t]));
            enc!(DescribeShareGroupOffsetsRequest::default().with_groups(vec![g.clone(), g]))
        }
        ApiKey::AlterShareGroupOffsets => {
            use alter_share_group_offsets_request::*;
            let p = AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(0)
                .with_start_offset(5);
            let t = AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic("t"))
                .with_partitions(vec![p.clone(), p]);
            enc!(AlterShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(vec![t.clone(), t.with_topic_name(topic("u"))]))
        }
        ApiKey::DeleteShareGroupOffsets => {
            use delete_share_group_offsets_request::*;
            enc!(DeleteShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(vec![
                    DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(topic("t")),
                    DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(topic("u")),
                ]))
        }
        other => panic!("{other:?} is advertised but has no request here"),
    }
    buf
}

/// A whole request frame (without its size prefix) of `api` at `version`, every length-carrying
/// field filled.
fn full_frame(api: ApiKey, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(s("hostile-test")))
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    buf.extend_from_slice(&encode_body(api, version));
    buf.to_vec()
}

/// Every advertised API and version.
fn advertised() -> Vec<(ApiKey, i16)> {
    SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |v| (api, v)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The sweep.

/// How a length is overwritten at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Longest {
    /// int16 lengths (strings): 0x7fff.
    Int16,
    /// int32 lengths (arrays, bytes, records): 0x7fffffff.
    Int32,
    /// Unsigned varint lengths (compact forms, tagged fields): the varint at the position is
    /// replaced by u32::MAX.
    Varint,
}

fn mutate(frame: &[u8], at: usize, how: Longest) -> Option<Vec<u8>> {
    let mut out = frame.to_vec();
    match how {
        Longest::Int16 => out
            .get_mut(at..at + 2)?
            .copy_from_slice(&i16::MAX.to_be_bytes()),
        Longest::Int32 => out
            .get_mut(at..at + 4)?
            .copy_from_slice(&i32::MAX.to_be_bytes()),
        Longest::Varint => {
            let len = frame[at..].iter().take(5).position(|b| b & 0x80 == 0)? + 1;
            out.splice(at..at + len, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        }
    }
    Some(out)
}

/// What the sweep of one mutation over one API and version saw: per refusal message (its
/// first words, up to the length), the positions that drew it.
type Refusals = BTreeMap<String, BTreeSet<usize>>;

/// Overwrites every position of the full frame of `api`/`version` with `how` and decodes each;
/// panics if a decode held more than [`bound`]. Returns the refusals seen.
fn sweep(api: ApiKey, version: i16, how: Longest) -> Refusals {
    let frame = full_frame(api, version);
    let (error, _) = decode_measured(&frame);
    assert_eq!(
        error, None,
        "the unmutated {api:?} v{version} frame decodes"
    );
    let mut refusals = Refusals::new();
    for at in 0..frame.len() {
        let Some(hostile) = mutate(&frame, at, how) else {
            continue;
        };
        let (error, peak) = decode_measured(&hostile);
        assert!(
            peak <= bound(hostile.len()),
            "{api:?} v{version}, {how:?} at byte {at}: the decode of a {}-byte frame held {peak} bytes",
            hostile.len()
        );
        if let Some(error) = error {
            if let Some(end) = error.find(" of length ") {
                let start = error[..end].rfind(": ").map_or(0, |i| i + 2);
                refusals
                    .entry(error[start..end].to_string())
                    .or_default()
                    .insert(at);
            }
        }
    }
    refusals
}

/// Whether `api` at `version` uses flexible (compact) encodings.
fn flexible(api: ApiKey, version: i16) -> bool {
    api.request_header_version(version) >= 2
}

/// The APIs whose requests nest an array in the elements of another.
const NESTED: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::AddPartitionsToTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::CreateTopics,
    ApiKey::DescribeConfigs,
    ApiKey::CreatePartitions,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AlterConfigs,
    ApiKey::DeleteRecords,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::DescribeLogDirs,
    ApiKey::OffsetDelete,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::WriteTxnMarkers,
    ApiKey::DescribeProducers,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
];

/// The APIs whose requests have no array at all.
const NO_ARRAY: &[ApiKey] = &[
    ApiKey::Heartbeat,
    ApiKey::ApiVersions,
    ApiKey::InitProducerId,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::DescribeCluster,
];

fn has_array(api: ApiKey, version: i16) -> bool {
    match api {
        ApiKey::FindCoordinator => version >= 4,
        ApiKey::LeaveGroup => version >= 3,
        // The states filter from v4.
        ApiKey::ListGroups => version >= 4,
        _ => !NO_ARRAY.contains(&api),
    }
}

#[test]
fn plain_array_counts_of_every_request_are_refused_within_the_bound() {
    for (api, version) in advertised() {
        let refusals = sweep(api, version, Longest::Int32);
        if has_array(api, version) && !flexible(api, version) {
            assert!(
                refusals.contains_key("Array"),
                "{api:?} v{version}: no array count was hit: {refusals:?}"
            );
        }
    }
}

#[test]
fn compact_array_counts_of_every_request_are_refused_within_the_bound() {
    for (api, version) in advertised() {
        let refusals = sweep(api, version, Longest::Varint);
        if has_array(api, version) && flexible(api, version) {
            assert!(
                refusals.contains_key("CompactArray"),
                "{api:?} v{version}: no compact array count was hit: {refusals:?}"
            );
        }
    }
}

#[test]
fn nullable_array_counts_are_refused_within_the_bound() {
    // Metadata's topics (null: every topic), OffsetFetch's topics (null: every partition) and
    // DescribeLogDirs' topics (null: every partition) are nullable arrays; in Metadata they
    // are the only array.
    for (api, version) in advertised() {
        if ![
            ApiKey::Metadata,
            ApiKey::OffsetFetch,
            ApiKey::DescribeLogDirs,
        ]
        .contains(&api)
        {
            continue;
        }
        let (how, shape) = if flexible(api, version) {
            (Longest::Varint, "CompactArray")
        } else {
            (Longest::Int32, "Array")
        };
        let refusals = sweep(api, version, how);
        assert!(
            refusals.contains_key(shape),
            "{api:?} v{version}: the nullable array was not hit: {refusals:?}"
        );
    }
}

#[test]
fn nested_array_counts_are_refused_within_the_bound() {
    for (api, version) in advertised() {
        if !NESTED.contains(&api) {
            continue;
        }
        let (how, shape) = if flexible(api, version) {
            (Longest::Varint, "CompactArray")
        } else {
            (Longest::Int32, "Array")
        };
        let refusals = sweep(api, version, how);
        let hit = refusals.get(shape).map_or(0, BTreeSet::len);
        assert!(
            hit >= 2,
            "{api:?} v{version}: the outer and the inner array counts were not both hit: {refusals:?}"
        );
    }
}

#[test]
fn string_lengths_are_refused_within_the_bound() {
    for (api, version) in advertised() {
        sweep(api, version, Longest::Int16);
        sweep(api, version, Longest::Varint);
        // The client id is a string of every header: at byte 8, after the API key, version
        // and correlation id.
        let hostile = mutate(&full_frame(api, version), 8, Longest::Int16).unwrap();
        let (error, _) = decode_measured(&hostile);
        assert!(
            error.is_some(),
            "{api:?} v{version}: a client id longer than the frame decoded"
        );
    }
}

#[test]
fn bytes_and_records_lengths_are_refused_within_the_bound() {
    for (api, version) in advertised() {
        if ![ApiKey::Produce, ApiKey::JoinGroup, ApiKey::SyncGroup].contains(&api) {
            continue;
        }
        let how = if flexible(api, version) {
            Longest::Varint
        } else {
            Longest::Int32
        };
        sweep(api, version, how);
        // The bytes field is the last length before its content: find the content, set the
        // length in front of it to the maximum, and the request is refused.
        let frame = full_frame(api, version);
        let content: &[u8] = match api {
            ApiKey::Produce => &records()[..],
            ApiKey::JoinGroup => b"\x00\x01metadata",
            _ => b"\x00\x01assignment",
        };
        let at = frame
            .windows(content.len())
            .position(|w| w == content)
            .unwrap();
        let length_at = if how == Longest::Int32 {
            at - 4
        } else {
            at - 1
        };
        let hostile = mutate(&frame, length_at, how).unwrap();
        let (error, peak) = decode_measured(&hostile);
        assert!(
            error.is_some(),
            "{api:?} v{version}: a bytes field longer than the frame decoded"
        );
        assert!(peak <= bound(hostile.len()));
    }
}

#[test]
fn every_advertised_request_with_every_field_filled_decodes() {
    for (api, version) in advertised() {
        let frame = full_frame(api, version);
        let (error, peak) = decode_measured(&frame);
        assert_eq!(error, None, "{api:?} v{version}");
        assert!(peak <= bound(frame.len()), "{api:?} v{version}: {peak}");
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzz target's seed corpus.

fn corpus_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_frame")
}

/// The seeds: each advertised request at each version, and for each, the frames where a length
/// set to the maximum of its encoding is refused as one that cannot fit (every such position
/// of an array, string or bytes length: the outer and inner arrays of nested requests, nullable
/// and compact ones).
fn seeds() -> BTreeMap<String, Vec<u8>> {
    let mut seeds: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (api, version) in advertised() {
        let frame = full_frame(api, version);
        let name = format!("{api:?}-v{version}");
        for how in [Longest::Int32, Longest::Varint, Longest::Int16] {
            for at in 0..frame.len() {
                let Some(hostile) = mutate(&frame, at, how) else {
                    continue;
                };
                let Err(error) = decode_frame(Bytes::from(hostile.clone())) else {
                    continue;
                };
                let error = error.to_string();
                if let Some(end) = error.find(" of length ") {
                    let what = error[..end].rsplit(' ').next().unwrap_or_default();
                    // The first three positions of each kind: the outer and inner arrays
                    // of a nested request, without a file per byte of it.
                    let kind = format!("{name}-{how:?}-{what}");
                    if seeds.keys().filter(|k| k.starts_with(&kind)).count() < 3 {
                        seeds.insert(format!("{kind}-at{at}.bin"), hostile);
                    }
                }
            }
        }
        seeds.insert(format!("{name}.bin"), frame);
    }
    seeds
}

#[test]
fn the_request_frame_corpus_replays_within_the_bound() {
    let dir = corpus_dir();
    if std::env::var_os("ONCELOG_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let (_, peak) = decode_measured(&bytes);
        assert!(
            peak <= bound(bytes.len()),
            "{}: {peak} bytes for a {}-byte frame",
            path.display(),
            bytes.len()
        );
        oncelog_broker::api::fuzz_request_frame(&bytes);
        n += 1;
    }
    assert!(n > 0, "empty corpus {}", dir.display());
}

// ---------------------------------------------------------------------------------------------
// The reproductions of the issue, sent to a broker.

/// The issue's frames: Metadata v1 (plain array) and v12 (compact array), Produce v3 (topic
/// data), Fetch v4 (topics) and ListOffsets v1, each with its first array claiming the most
/// elements its encoding can.
fn issue_frames() -> Vec<(String, Vec<u8>)> {
    let header = |api: ApiKey, version: i16| {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(s("x")))
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        buf.to_vec()
    };
    let max = i32::MAX.to_be_bytes();
    let mut frames = Vec::new();
    let mut metadata_v1 = header(ApiKey::Metadata, 1);
    metadata_v1.extend_from_slice(&max);
    frames.push(("Metadata v1".to_string(), metadata_v1));
    let mut metadata_v12 = header(ApiKey::Metadata, 12);
    metadata_v12.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    frames.push(("Metadata v12".to_string(), metadata_v12));
    // Produce v3: transactional id (null), acks, timeout, then the topic data.
    let mut produce = header(ApiKey::Produce, 3);
    produce.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x75, 0x30]);
    produce.extend_from_slice(&max);
    frames.push(("Produce v3".to_string(), produce));
    // Fetch v4: replica id, max wait, min bytes, max bytes, isolation level, then the topics.
    let mut fetch = header(ApiKey::Fetch, 4);
    fetch.extend_from_slice(&[0xff; 4]);
    fetch.extend_from_slice(&[0; 13]);
    fetch.extend_from_slice(&max);
    frames.push(("Fetch v4".to_string(), fetch));
    // ListOffsets v1: replica id, then the topics.
    let mut list = header(ApiKey::ListOffsets, 1);
    list.extend_from_slice(&[0xff; 4]);
    list.extend_from_slice(&max);
    frames.push(("ListOffsets v1".to_string(), list));
    frames
}

#[test]
fn the_issues_frames_are_refused_by_a_broker_with_little_address_space() {
    for (name, frame) in issue_frames() {
        let (error, peak) = decode_measured(&frame);
        let error = error.unwrap_or_else(|| panic!("{name} decoded"));
        assert!(error.contains("cannot fit"), "{name}: {error}");
        assert!(peak <= bound(frame.len()), "{name}: {peak}");
    }
    // The broker runs with 16 GiB of address space (its segment maps, thread stacks and heap
    // fit many times over; a reservation of 2^31 elements of the first array of any of these
    // requests, over 100 GiB, does not), so a decoder that trusts a count fails its allocation
    // and aborts instead of refusing the frame.
    let data = tempfile::tempdir().unwrap();
    let broker = common::BrokerProcess::start_limited(data.path(), &[], 16 << 30);
    for (name, frame) in issue_frames() {
        let mut wire = common::wire::Wire::connect(broker.addr);
        wire.send_frame(&frame);
        assert!(
            wire.is_closed_by_broker(),
            "{name}: the connection is closed"
        );
        let mut next = common::wire::Wire::connect(broker.addr);
        let response: ApiVersionsResponse =
            next.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        assert_eq!(
            response.error_code, 0,
            "after {name}, the broker still answers"
        );
    }
    std::thread::sleep(Duration::from_millis(100));
    let _ = std::io::stderr().flush();
}
