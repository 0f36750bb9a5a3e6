#!/usr/bin/env bash
# Kafka 4.4's own command-line tools scripted against oncelog-broker, each step's output
# checked: kafka-topics (create, list, describe, alter partitions, delete), kafka-consumer-groups
# (list, describe with lag, reset-offsets, delete-offsets, delete), kafka-delete-records,
# kafka-get-offsets, kafka-configs (describe, alter), kafka-log-dirs and kafka-transactions (list,
# describe, describe-producers, find-hanging, abort of a hanging transaction). Fails at the end if
# any step failed; prints PASS/FAIL per step.
#
#   crates/broker/e2e/kafka_tools.sh                     against a fresh oncelog-broker (e2e/broker.sh)
#   KAFKA_TOOLS_BOOTSTRAP=127.0.0.1:19092 crates/broker/e2e/kafka_tools.sh
#                                                        against a broker already running there
#                                                        (Kafka 4.4 from ../shared/kafka-oracle,
#                                                        started with
#                                                        transaction.partition.verification.enable=false
#                                                        in its extra.properties, or it refuses
#                                                        hanging_txn.py's batch with error 19)
#
# The tools' jars are those crates/broker/tests/clients/setup.sh installs (DIR/tools/lib, from
# Maven Central; run it first). Needs java 17+.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CLIENTS="${ONCELOG_CLIENTS_DIR:-$ROOT/target/broker-clients}"
[ -f "$CLIENTS/tools/.stamp" ] || { echo "kafka_tools.sh: run crates/broker/tests/clients/setup.sh first" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/oncelog-tools.XXXXXX")"
source "$HERE/broker.sh"
cleanup() {
    stop_broker
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${KAFKA_TOOLS_BOOTSTRAP:-}" ]; then
    B="$KAFKA_TOOLS_BOOTSTRAP"
else
    start_broker "$WORK" --segment-bytes 1048576 --prefault-bytes 0 || exit 1
    B="$BROKER_ADDR"
fi
echo "kafka_tools.sh: Kafka 4.4's tools against $B"

# One JVM per tool run, as the kafka-*.sh scripts start them; C1 only: these runs are short.
kafka() {
    java -Xmx256m -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -cp "$CLIENTS/tools/lib/*" "$@"
}
TOPICS=org.apache.kafka.tools.TopicCommand
CGROUPS=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
CONFIGS=org.apache.kafka.tools.ConfigCommand

passed=0
failed=()
OUT=""
# step NAME CHECK -- COMMAND...: runs the command (output in $OUT), then the check, a shell
# expression over $OUT.
step() {
    local name="$1" check="$2"
    shift 3
    OUT="$("$@" 2>&1)"
    if eval "$check"; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        echo "  command: $*"
        echo "$OUT" | sed 's/^/  | /' | head -40
        failed+=("$name")
    fi
}
has() { grep -qE -- "$1" <<<"$OUT"; }
# The sum of column N (1-based) over the lines of $OUT that start with the group and topic.
column_sum() { awk -v col="$1" '$1 == "g1" && $2 == "orders" {s += $col} END {print s + 0}' <<<"$OUT"; }

T=orders
step "kafka-topics --create (3 partitions, 2 configs)" 'has "Created topic $T"' -- \
    kafka $TOPICS --bootstrap-server "$B" --create --topic $T --partitions 3 --replication-factor 1 \
    --config retention.ms=3600000 --config segment.ms=600000
step "kafka-topics --create again (TopicExistsException)" 'has "TopicExistsException"' -- \
    kafka $TOPICS --bootstrap-server "$B" --create --topic $T --partitions 3 --replication-factor 1
step "kafka-topics --list" 'has "^$T\$"' -- \
    kafka $TOPICS --bootstrap-server "$B" --list --exclude-internal
step "kafka-topics --describe" 'has "PartitionCount: 3" && has "retention.ms=3600000" && has "Partition: 2"' -- \
    kafka $TOPICS --bootstrap-server "$B" --describe --topic $T
step "kafka-topics --alter --partitions 5" 'true' -- \
    kafka $TOPICS --bootstrap-server "$B" --alter --topic $T --partitions 5
step "kafka-topics --describe after the alter" 'has "PartitionCount: 5" && has "Partition: 4"' -- \
    kafka $TOPICS --bootstrap-server "$B" --describe --topic $T

step "produce 100 records (ProducerPerformance, acks=all)" 'has "^100 records sent"' -- \
    kafka org.apache.kafka.tools.ProducerPerformance --topic $T --num-records 100 --record-size 20 \
    --throughput -1 --producer-props bootstrap.servers="$B" acks=all
step "consume them in group g1 (ConsoleConsumer)" 'has "Processed a total of 100 messages"' -- \
    kafka org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$B" --topic $T \
    --group g1 --from-beginning --max-messages 100 --timeout-ms 30000
step "kafka-consumer-groups --list" 'has "^g1\$"' -- \
    kafka $CGROUPS --bootstrap-server "$B" --list
step "kafka-consumer-groups --describe (offsets 100, lag 0)" \
    '[ "$(column_sum 4)" = 100 ] && [ "$(column_sum 6)" = 0 ] && [ "$(column_sum 5)" = 100 ]' -- \
    kafka $CGROUPS --bootstrap-server "$B" --describe --group g1
step "produce 10 more" 'has "^10 records sent"' -- \
    kafka org.apache.kafka.tools.ProducerPerformance --topic $T --num-records 10 --record-size 20 \
    --throughput -1 --producer-props bootstrap.servers="$B" acks=all
step "kafka-consumer-groups --describe (lag 10)" '[ "$(column_sum 6)" = 10 ] && [ "$(column_sum 5)" = 110 ]' -- \
    kafka $CGROUPS --bootstrap-server "$B" --describe --group g1
step "kafka-consumer-groups --describe --state (Empty)" 'has "Empty" && has "0 *$"' -- \
    kafka $CGROUPS --bootstrap-server "$B" --describe --group g1 --state
step "kafka-consumer-groups --reset-offsets --to-earliest --execute" \
    '[ "$(awk '"'"'$1 == "g1" && $2 == "orders" {n++; s += $4} END {print n "/" s}'"'"' <<<"$OUT")" = 5/0 ]' -- \
    kafka $CGROUPS --bootstrap-server "$B" --reset-offsets --group g1 --topic $T --to-earliest --execute
step "kafka-consumer-groups --describe after the reset (lag 110)" '[ "$(column_sum 4)" = 0 ] && [ "$(column_sum 6)" = 110 ]' -- \
    kafka $CGROUPS --bootstrap-server "$B" --describe --group g1

# delete-records: up to the end offset of the partition holding the most records, read with
# kafka-get-offsets.
step "kafka-get-offsets (latest)" 'has "^$T:4:[0-9]+\$"' -- \
    kafka org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic $T
read -r p end < <(sed -n "s/^$T:\([0-9]*\):\([0-9]*\)\$/\1 \2/p" <<<"$OUT" | sort -k2 -n | tail -1)
echo "{\"partitions\": [{\"topic\": \"$T\", \"partition\": ${p:-0}, \"offset\": ${end:-0}}], \"version\": 1}" >"$WORK/delete.json"
step "kafka-delete-records (partition $p up to $end)" '[ "${end:-0}" -gt 0 ] && has "partition: $T-$p[[:space:]]+low_watermark: $end\$"' -- \
    kafka org.apache.kafka.tools.DeleteRecordsCommand --bootstrap-server "$B" --offset-json-file "$WORK/delete.json"
step "kafka-get-offsets (earliest: partition $p starts at $end)" 'has "^$T:$p:$end\$" && [ "$(grep -c ":0\$" <<<"$OUT")" = 4 ]' -- \
    kafka org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$B" --topic $T --time -2
echo "{\"partitions\": [{\"topic\": \"$T\", \"partition\": ${p:-0}, \"offset\": 1000000}], \"version\": 1}" >"$WORK/beyond.json"
step "kafka-delete-records beyond the end (OffsetOutOfRangeException)" 'has "OffsetOutOfRangeException"' -- \
    kafka org.apache.kafka.tools.DeleteRecordsCommand --bootstrap-server "$B" --offset-json-file "$WORK/beyond.json"

step "kafka-consumer-groups --delete-offsets" 'has "^$T +[0-9]+ +Successful"' -- \
    kafka $CGROUPS --bootstrap-server "$B" --delete-offsets --group g1 --topic $T
step "kafka-consumer-groups --delete" 'has "Deletion of requested consumer groups .*g1.* was successful"' -- \
    kafka $CGROUPS --bootstrap-server "$B" --delete --group g1
step "kafka-consumer-groups --delete again (GroupIdNotFoundException)" 'has "GroupIdNotFoundException"' -- \
    kafka $CGROUPS --bootstrap-server "$B" --delete --group g1

step "kafka-configs --describe (topic)" 'has "retention.ms=3600000" && has "segment.ms=600000"' -- \
    kafka $CONFIGS --bootstrap-server "$B" --describe --entity-type topics --entity-name $T
step "kafka-configs --alter --add-config" 'has "Completed updating config for topic $T"' -- \
    kafka $CONFIGS --bootstrap-server "$B" --alter --entity-type topics --entity-name $T \
    --add-config retention.ms=7200000,cleanup.policy=compact
step "kafka-configs --alter --delete-config" 'has "Completed updating config for topic $T"' -- \
    kafka $CONFIGS --bootstrap-server "$B" --alter --entity-type topics --entity-name $T \
    --delete-config segment.ms
step "kafka-configs --describe after the alters" 'has "retention.ms=7200000" && has "cleanup.policy=compact" && ! has "segment.ms="' -- \
    kafka $CONFIGS --bootstrap-server "$B" --describe --entity-type topics --entity-name $T
step "kafka-configs --describe --all (broker 1)" 'has "log.retention.ms=" && has "log.segment.bytes="' -- \
    kafka $CONFIGS --bootstrap-server "$B" --describe --entity-type brokers --entity-name 1 --all

step "kafka-log-dirs --describe" 'has "\"partition\":\"$T-4\"" && has "\"size\":[0-9]+"' -- \
    kafka org.apache.kafka.tools.LogDirsCommand --bootstrap-server "$B" --describe --topic-list $T

# kafka-transactions (TransactionsCommand) over topic txn: partition 0 holds tx-open's Ongoing
# transaction (open_txn.py: a confluent-kafka transactional producer that exits mid-transaction);
# partition 1 a hanging one (hanging_txn.py: a transactional batch, two hours old, from an
# idempotent producer id no coordinator knows), which find-hanging must find and abort clear.
TXN="org.apache.kafka.tools.TransactionsCommand --bootstrap-server $B"
PY="$CLIENTS/venv/bin/python"
# The command's exit status as a last line of output, for the checks.
status() { "$@"; echo "exit $?"; }
# The rows of $OUT whose column $1 is $2.
rows() { awk -v col="$1" -v want="$2" '$col == want' <<<"$OUT"; }
step "kafka-topics --create txn (2 partitions)" 'has "Created topic txn"' -- \
    kafka $TOPICS --bootstrap-server "$B" --create --topic txn --partitions 2 --replication-factor 1
step "a transactional producer dies mid-transaction (txn-0)" 'has "^open: tx-open\$"' -- \
    "$PY" "$HERE/open_txn.py" "$B" txn 0 tx-open
step "a hanging transaction (txn-1, offset 0)" 'has "^hanging: producer [0-9]+ [0-9]+ offset 0\$"' -- \
    "$PY" "$HERE/hanging_txn.py" "$B" txn 1
hanging="$(sed -n 's/^hanging: producer \([0-9]*\) .*/\1/p' <<<"$OUT")"
step "kafka-transactions list (tx-open Ongoing)" '[ "$(rows 1 tx-open | awk "{print \$4}")" = Ongoing ]' -- \
    kafka $TXN list
step "kafka-transactions describe (Ongoing, its timeout, txn-0)" \
    '[ "$(rows 2 tx-open | awk "{print \$5, \$6, \$9}")" = "Ongoing 600000 txn-0" ]' -- \
    kafka $TXN describe --transactional-id tx-open
step "kafka-transactions describe of an unknown id (not found, exit 1)" 'has "could not be found" && has "^exit 1\$"' -- \
    status kafka $TXN describe --transactional-id nobody
step "kafka-transactions describe-producers (the hanging producer, start offset 0)" \
    '[ -n "$hanging" ] && [ "$(rows 1 "$hanging" | awk "{print \$4, \$6}")" = "2 0" ]' -- \
    kafka $TXN describe-producers --topic txn --partition 1
step "kafka-transactions find-hanging (txn-1 only)" \
    '[ "$(rows 1 txn | awk "{print \$2, \$3, \$6}")" = "1 $hanging 0" ]' -- \
    kafka $TXN find-hanging --topic txn
step "kafka-transactions abort (txn-1 at offset 0)" 'has "^exit 0\$"' -- \
    status kafka $TXN abort --topic txn --partition 1 --start-offset 0
step "kafka-transactions find-hanging after the abort (none)" '[ -z "$(rows 1 txn)" ] && has "^exit 0\$"' -- \
    status kafka $TXN find-hanging --topic txn
step "kafka-transactions describe-producers after the abort (no open transaction)" \
    '[ -n "$hanging" ] && [ "$(rows 1 "$hanging" | awk "{print \$6}")" = None ]' -- \
    kafka $TXN describe-producers --topic txn --partition 1
step "kafka-transactions abort again (no open transaction at 0, exit 1)" \
    'has "Could not find any open transactions starting at offset 0" && has "^exit 1\$"' -- \
    status kafka $TXN abort --topic txn --partition 1 --start-offset 0

step "kafka-topics --delete" 'true' -- \
    kafka $TOPICS --bootstrap-server "$B" --delete --topic $T
step "kafka-topics --list after the delete" '! has "^$T\$"' -- \
    kafka $TOPICS --bootstrap-server "$B" --list --exclude-internal
step "kafka-topics --create --replication-factor 3 (InvalidReplicationFactorException)" 'has "InvalidReplicationFactorException"' -- \
    kafka $TOPICS --bootstrap-server "$B" --create --topic x --partitions 1 --replication-factor 3

echo "kafka_tools.sh: $passed of $((passed + ${#failed[@]})) steps passed (${SECONDS} s)"
[ ${#failed[@]} -eq 0 ] || { echo "kafka_tools.sh: failed: ${failed[*]}" >&2; [ -z "${BROKER_PID:-}" ] || tail -20 "$WORK/broker.log" >&2; exit 1; }
