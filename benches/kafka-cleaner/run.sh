#!/usr/bin/env bash
# Kafka's own log cleaner on the data shape of benches/compaction.rs, for the
# comparison in docs/benchmarks.md ("### Compaction").
#
#   benches/kafka-cleaner/run.sh [MB] [KEYS]      defaults 1024 MiB, 1,000,000 keys
#
# Starts a real Kafka 4.4 broker with ../shared/kafka-oracle/kafka.sh (or $KAFKA_SH) in $WORK (default
# ${TMPDIR:-/tmp}/kafka-cleaner-bench, removed first and at the end), one cleaner thread with the
# default 128 MiB dedupe buffer, creates topic `compact` (cleanup.policy=compact, 64 MiB
# segments, min.cleanable.dirty.ratio=0.01, min.compaction.lag.ms=10 years so that nothing is
# cleaned while it is written), fills it with produce.py (confluent-kafka; 10-record
# uncompressed batches, 12-byte keys uniform over KEYS, 100-byte values) until its .log files
# hold MB MiB, then sets min.compaction.lag.ms=0 and waits for the cleaner's round summary in
# server.log (logger LogCleaner$CleanerThread: "... MB of log processed in ... seconds (... MB/sec)", "Buffer utilization"),
# prints it, stops the broker and deletes its data. Kafka's MB are MiB (bytes / 1024 / 1024).
# PYTHON: a python with confluent-kafka (default: the venv of crates/broker/tests/clients/setup.sh).
# Disk: about 2 x MB while the cleaner runs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
MB="${1:-1024}"; KEYS="${2:-1000000}"
KAFKA="${KAFKA_SH:-$ROOT/../shared/kafka-oracle/kafka.sh}"
WORK="${WORK:-${TMPDIR:-/tmp}/kafka-cleaner-bench}"
PORT="${PORT:-19392}"
PYTHON="${PYTHON:-$ROOT/target/broker-clients/venv/bin/python}"
if ! "$PYTHON" -c 'import confluent_kafka' 2>/dev/null; then
  bash "$ROOT/crates/broker/tests/clients/setup.sh" >&2
  PYTHON="$ROOT/target/broker-clients/venv/bin/python"
fi
BS="127.0.0.1:$PORT"

"$KAFKA" stop "$WORK" 2>/dev/null || true
rm -rf "$WORK"; mkdir -p "$WORK"
cleanup() { "$KAFKA" stop "$WORK" || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
cat > "$WORK/extra.properties" <<PROPS
log.cleaner.enable=true
log.cleaner.threads=1
log.cleaner.backoff.ms=1000
log.segment.bytes=67108864
PROPS
"$KAFKA" start "$WORK" "$PORT" >/dev/null

cfg() { "$KAFKA" run org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BS" \
          --entity-type topics --entity-name compact --alter --add-config "$1" >/dev/null; }
"$KAFKA" run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" --create --topic compact \
  --partitions 1 --replication-factor 1 \
  --config cleanup.policy=compact --config segment.bytes=67108864 \
  --config min.cleanable.dirty.ratio=0.01 --config min.compaction.lag.ms=315360000000 >/dev/null

t0=$(date +%s)
"$PYTHON" "$HERE/produce.py" "$BS" compact "$WORK/data/compact-0" "$MB" "$KEYS"
echo "produce: $(( $(date +%s) - t0 )) s; segments: $(ls "$WORK"/data/compact-0/*.log | wc -l)"

cfg min.compaction.lag.ms=0
for _ in $(seq 1 1200); do
  grep -q 'Buffer utilization' "$WORK/logs/server.log" 2>/dev/null && break
  sleep 1
done
sleep 1
grep -A 8 'cleaned log compact-0' "$WORK/logs/server.log" || { echo "no cleaner round in 20 min" >&2; exit 1; }
du -sh "$WORK/data/compact-0"
