#!/usr/bin/env bash
# franz-go's own integration tests (`pkg/kgo` of the Go module github.com/twmb/franz-go v1.22.3,
# unmodified: the module zip from the Go module proxy carries its `_test.go` files) run against
# oncelog-broker, one test at a time, each with its own time limit. Fails if any listed test fails.
#
#   crates/broker/e2e/kgo.sh                  the tests marked `quick` in kgo-tests.txt (CI)
#   ONCELOG_KGO=full crates/broker/e2e/kgo.sh every test of kgo-tests.txt (those Kafka 4.4 passes)
#   crates/broker/e2e/kgo.sh TestA TestB ...  these tests only
#   ONCELOG_KGO_CLUSTER=1 crates/broker/e2e/kgo.sh
#                                             against a 3-node cluster (`--cluster`, RF 3): the
#                                             tests of the list with no fourth column (with
#                                             ONCELOG_KGO=full also `cluster-full`; see
#                                             kgo-tests.txt), or those named
#   KGO_SEEDS=127.0.0.1:19092 crates/broker/e2e/kgo.sh ...
#                                             against a broker already running there (Kafka 4.4
#                                             from ../shared/kafka-oracle/kafka.sh, to compare)
#
# Without KGO_SEEDS it starts oncelog-broker ($ONCELOG_BROKER_BIN, else the debug build of
# `cargo build -p oncelog-broker`) on a free port over a fresh data directory (with
# ONCELOG_KGO_CLUSTER=1 three nodes of one cluster, each over its own), stopping it (SIGTERM)
# at the end. Needs `go` (1.23+) and the module proxy (GOPROXY). Per test: PASS, SKIP
# or FAIL and seconds on stdout, its output in $CARGO_TARGET_DIR/kgo/logs/BROKER/NAME.log (BROKER:
# `oncelog`, with the broker's own log as broker.log, `oncelog-cluster` with nodeN.log, or the
# KGO_SEEDS address).
# Environment given to the tests: KGO_TEST_RF (1, or 3 against the cluster; a value already set
# is kept, e.g. for a Kafka cluster at KGO_SEEDS), KGO_TEST_RECORDS (default 2000,
# franz-go's own default is 500000), KGO_LOG_LEVEL=info; ONCELOG_KGO_TIMEOUT seconds per test (180).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
MODULE=github.com/twmb/franz-go
VERSION=v1.22.3
WORK="$TARGET/kgo"
SRC="$WORK/franz-go-$VERSION"
BIN="$WORK/kgo-$VERSION.test"
LIST="$HERE/kgo-tests.txt"
PER_TEST="${ONCELOG_KGO_TIMEOUT:-180}"
mkdir -p "$WORK/logs"

# The test binary, built once from the module as the proxy serves it.
if [ ! -x "$BIN" ] || [ ! -d "$SRC/pkg/kgo" ]; then
    dir="$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$dir/pkg/kgo" ] || { echo "kgo.sh: go mod download gave no module dir" >&2; exit 1; }
    rm -rf "$SRC"
    cp -r "$dir" "$SRC"
    chmod -R u+w "$SRC"
    (cd "$SRC" && go test -c -o "$BIN.tmp" ./pkg/kgo/)
    mv "$BIN.tmp" "$BIN"
fi

# Which tests: the arguments, else the list (all of it, or the `quick` ones).
cluster="${ONCELOG_KGO_CLUSTER:-}"
[ "$cluster" = 0 ] && cluster=""
if [ $# -gt 0 ]; then
    tests=("$@")
elif [ "${ONCELOG_KGO:-}" = full ]; then
    mapfile -t tests < <(grep -v '^#' "$LIST" | awk -v c="$cluster" 'NF && $2 != "missing" && !(c && NF > 3 && $4 != "cluster-full") {print $1}')
else
    mapfile -t tests < <(grep -v '^#' "$LIST" | awk -v c="$cluster" '$2 == "quick" && !(c && NF > 3) {print $1}')
fi

source "$HERE/broker.sh"
data=""
logs=""
cleanup() {
    stop_broker
    stop_cluster
    if [ -n "$data" ]; then
        if [ -n "$logs" ]; then
            cp "$data/broker.log" "$logs/broker.log" 2>/dev/null || true
            for n in 1 2 3; do
                cp "$data/node$n/broker.log" "$logs/node$n.log" 2>/dev/null || true
            done
        fi
        rm -rf "$data"
    fi
}
trap cleanup EXIT

if [ -z "${KGO_SEEDS:-}" ]; then
    data="$(mktemp -d "${TMPDIR:-/tmp}/oncelog-kgo.XXXXXX")"
    # Small segments: franz-go's tests create many topics, and each active segment is
    # allocated whole.
    if [ -n "$cluster" ]; then
        start_cluster "$data" --segment-bytes 8388608 --prefault-bytes 0
    else
        start_broker "$data" --segment-bytes 8388608 --prefault-bytes 0
    fi
    export KGO_SEEDS="$BROKER_ADDR"
fi
rf=1
[ -z "$cluster" ] || rf=3
export KGO_TEST_RF="${KGO_TEST_RF:-$rf}" KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-2000}" KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-info}"
echo "kgo.sh: franz-go $VERSION, ${#tests[@]} tests against $KGO_SEEDS"

# One log folder per broker compared.
logs="$WORK/logs/${KGO_SEEDS//[:,]/_}"
[ -z "$data" ] || logs="$WORK/logs/oncelog${cluster:+-cluster}"
rm -rf "$logs"
mkdir -p "$logs"
failed=()
passed=0
for t in "${tests[@]}"; do
    start=$SECONDS
    # A test franz-go skips (a feature the broker does not advertise) counts as failed.
    rc=0
    (cd "$SRC/pkg/kgo" && timeout -k 10 $((PER_TEST + 30)) "$BIN" -test.run "^$t\$" \
        -test.count 1 -test.timeout "${PER_TEST}s" -test.v) >"$logs/$t.log" 2>&1 || rc=$?
    status=FAIL
    [ $rc -eq 0 ] && grep -q "^--- PASS: $t " "$logs/$t.log" && status=PASS
    grep -q "^--- SKIP: $t " "$logs/$t.log" && status=SKIP
    echo "$status $t $((SECONDS - start))s"
    if [ $status = PASS ]; then
        passed=$((passed + 1))
    else
        failed+=("$t")
        # The test's own verdict, for a run whose logs are gone with its directory (CI).
        grep -E "^[[:space:]]+[a-z_]+_test\.go:[0-9]+: |^(--- |panic:)" "$logs/$t.log" \
            | grep -v "deleting topic\|unable to delete" | tail -n 20 | sed "s/^/    $t: /" || true
    fi
done
echo "kgo.sh: $passed of ${#tests[@]} passed (${SECONDS} s)"
[ ${#failed[@]} -eq 0 ] || { echo "kgo.sh: not passed: ${failed[*]} (logs: $logs)" >&2; exit 1; }
