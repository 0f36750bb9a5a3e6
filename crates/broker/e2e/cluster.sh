#!/usr/bin/env bash
# Kafka's VerifiableProducer (idempotent, acks=all) against a 3-node oncelog-broker cluster while
# the node leading the most partitions (every other round: the group coordinator's) is
# SIGKILLed and restarted in a loop, and Kafka's VerifiableConsumer reads it in a group
# (e2e/cluster.py), failing on any acknowledged record lost or stored twice, never read by the
# group, or a group's last commit short of a partition's end. Then Kafka's
# TransactionalMessageCopier copies a topic through kills of the transaction coordinator's
# node and of partition leaders (e2e/cluster_txn.py), failing on any record not copied
# exactly once.
#
#   crates/broker/e2e/cluster.sh                       short form (CI): 5,000 records, 3 kills
#                                                      (the third with its data wiped), and
#                                                      the VerifiableConsumer group; 1,500
#                                                      copied, 2 kills
#   ONCELOG_CLUSTER=long crates/broker/e2e/cluster.sh  long form: 30,000 records, 20 kills, and
#                                                      the VerifiableConsumer group; 20,000
#                                                      copied, 10 kills
#
# The binary is $ONCELOG_BROKER_BIN if set (CI passes the one `cargo test --workspace` built),
# else `cargo build -p oncelog-broker`'s debug build; the Kafka jars are those
# crates/broker/tests/clients/setup.sh installs (run it first). Needs java 17+ and python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CLIENTS="${ONCELOG_CLIENTS_DIR:-$ROOT/target/broker-clients}"
[ -f "$CLIENTS/tools/.stamp" ] || { echo "cluster.sh: run crates/broker/tests/clients/setup.sh first" >&2; exit 1; }
if [ "${ONCELOG_CLUSTER:-}" = long ]; then
    records=30000 rounds=20 group=1 copied=20000 txn_rounds=10
else
    records=5000 rounds=3 group=1 copied=1500 txn_rounds=2
fi
# The VerifiableConsumer group runs in both forms (ONCELOG_CLUSTER_GROUP=0: without it). In one
# CI run it once read no record; the probable cause, found and fixed since: a JoinGroup waiting
# when the offsets group's leadership moved (the balancer moves it to node 1 soon after start;
# a kill moves it) was answered as joined with no member id and no protocol, on which the Java
# consumer throws (tests/cluster/partition.rs reproduces the move). cluster.py prints the
# consumer's stderr on a failure.
export ONCELOG_CLUSTER_GROUP="${ONCELOG_CLUSTER_GROUP:-$group}"
bin="${ONCELOG_BROKER_BIN:-}"
if [ -z "$bin" ]; then
    (cd "$ROOT" && cargo build -q -p oncelog-broker)
    bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug/oncelog-broker"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/oncelog-cluster.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "cluster.sh: $records records, $rounds leader kills, 3 nodes"
if ! KAFKA_TOOLS_LIB="$CLIENTS/tools/lib" python3 "$HERE/cluster.py" "$bin" "$WORK" "$records" "$rounds"; then
    for n in 1 2 3; do
        echo "cluster.sh: node $n's log (last 20 lines):" >&2
        tail -20 "$WORK/node$n/broker.log" >&2 || true
    done
    exit 1
fi
echo "cluster.sh: every acknowledged record in the log once (${SECONDS} s)"
# Kafka's TransactionalMessageCopier through SIGKILLs of the transaction coordinator's node and
# of partition leaders (e2e/cluster_txn.py): every input record in the output once, as
# read_committed consumers read it.
echo "cluster.sh: TransactionalMessageCopier, $copied records, $txn_rounds kills"
mkdir -p "$WORK/txn"
if ! KAFKA_TOOLS_LIB="$CLIENTS/tools/lib" python3 "$HERE/cluster_txn.py" "$bin" "$WORK/txn" "$copied" "$txn_rounds"; then
    for n in 1 2 3; do
        echo "cluster.sh: node $n's log (last 20 lines):" >&2
        tail -20 "$WORK/txn/node$n/broker.log" >&2 || true
    done
    exit 1
fi
echo "cluster.sh: every copied record in the output once (${SECONDS} s)"
