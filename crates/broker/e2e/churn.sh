#!/usr/bin/env bash
# The VerifiableConsumer group-churn run (e2e/churn.py) against a fresh oncelog-broker, failing on
# any offset consumed twice or any acknowledged record never consumed.
#
#   crates/broker/e2e/churn.sh                     short form (CI): 10,000 records, 20 s of churn
#   ONCELOG_CHURN=long crates/broker/e2e/churn.sh  long form: 30,000 records, 45 s (the hand run)
#
# The broker as e2e/broker.sh starts it; the Kafka jars are those
# crates/broker/tests/clients/setup.sh installs (run it first). Needs java 17+ and python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CLIENTS="${ONCELOG_CLIENTS_DIR:-$ROOT/target/broker-clients}"
[ -f "$CLIENTS/tools/.stamp" ] || { echo "churn.sh: run crates/broker/tests/clients/setup.sh first" >&2; exit 1; }
if [ "${ONCELOG_CHURN:-}" = long ]; then
    records=30000 seconds=45
else
    records=10000 seconds=20
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/oncelog-churn.XXXXXX")"
source "$HERE/broker.sh"
cleanup() {
    stop_broker
    rm -rf "$WORK"
}
trap cleanup EXIT

start_broker "$WORK" --segment-bytes 8388608 --prefault-bytes 0
B="$BROKER_ADDR"
echo "churn.sh: $records records, $seconds s of churn against $B"
if ! KAFKA_TOOLS_LIB="$CLIENTS/tools/lib" CHURN_SECONDS=$seconds \
    python3 "$HERE/churn.py" "$B" "$records" "$WORK/run"; then
    echo "churn.sh: duplicates or lost records; the broker's log:" >&2
    tail -30 "$WORK/broker.log" >&2 || true
    exit 1
fi
echo "churn.sh: no offset consumed twice, no acknowledged record lost (${SECONDS} s)"
