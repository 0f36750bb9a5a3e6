# Sourced by the e2e scripts: `start_broker DIR [FLAGS...]` starts an oncelog-broker over DIR/data
# on a free port of 127.0.0.1, sets BROKER_ADDR and BROKER_PID (its log: DIR/broker.log), and
# `stop_broker` stops it with SIGTERM. `start_cluster DIR [FLAGS...]` starts a 3-node cluster
# (`--cluster`, each node over DIR/nodeN) on free ports of 127.0.0.1, sets BROKER_ADDR to the
# three Kafka listeners (a bootstrap list) and CLUSTER_PIDS, and returns once every node
# listens; `stop_cluster` stops them with SIGTERM. The binary is $ONCELOG_BROKER_BIN if set (CI passes the
# one `cargo test --workspace` built), else `cargo build -p oncelog-broker`'s debug build.
broker_bin() {
    local root target
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
    target="${CARGO_TARGET_DIR:-$root/target}"
    if [ -n "${ONCELOG_BROKER_BIN:-}" ]; then
        echo "$ONCELOG_BROKER_BIN"
    else
        (cd "$root" && cargo build -q -p oncelog-broker) || return 1
        echo "$target/debug/oncelog-broker"
    fi
}

start_broker() {
    local dir="$1"
    shift
    local bin
    bin="$(broker_bin)" || return 1
    mkdir -p "$dir"
    "$bin" --data "$dir/data" --listen 127.0.0.1:0 "$@" >"$dir/stdout" 2>"$dir/broker.log" &
    BROKER_PID=$!
    BROKER_ADDR=""
    for _ in $(seq 200); do
        BROKER_ADDR="$(sed -n 's/^listening on //p' "$dir/stdout")"
        [ -n "$BROKER_ADDR" ] && return 0
        kill -0 "$BROKER_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "the broker did not start; its log:" >&2
    cat "$dir/broker.log" >&2
    return 1
}

stop_broker() {
    if [ -n "${BROKER_PID:-}" ]; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
        BROKER_PID=""
    fi
}

start_cluster() {
    local dir="$1"
    shift
    local bin ports spec n
    bin="$(broker_bin)" || return 1
    # Six free ports at once, all different and none ephemeral (ports.py says why).
    ports=($(python3 "$(dirname "${BASH_SOURCE[0]}")/ports.py" 6)) || return 1
    spec="1=127.0.0.1:${ports[0]}:${ports[1]},2=127.0.0.1:${ports[2]}:${ports[3]},3=127.0.0.1:${ports[4]}:${ports[5]}"
    BROKER_ADDR="127.0.0.1:${ports[0]},127.0.0.1:${ports[2]},127.0.0.1:${ports[4]}"
    CLUSTER_PIDS=()
    for n in 1 2 3; do
        mkdir -p "$dir/node$n"
        "$bin" --node-id "$n" --cluster "$spec" --data "$dir/node$n/data" "$@" \
            >"$dir/node$n/stdout" 2>"$dir/node$n/broker.log" &
        CLUSTER_PIDS+=($!)
    done
    for n in 1 2 3; do
        for _ in $(seq 200); do
            grep -q "^listening on " "$dir/node$n/stdout" && break
            kill -0 "${CLUSTER_PIDS[$((n - 1))]}" 2>/dev/null || break
            sleep 0.1
        done
        if ! grep -q "^listening on " "$dir/node$n/stdout"; then
            echo "node $n did not start; its log:" >&2
            cat "$dir/node$n/broker.log" >&2
            return 1
        fi
    done
}

stop_cluster() {
    local pid
    for pid in ${CLUSTER_PIDS[@]+"${CLUSTER_PIDS[@]}"}; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in ${CLUSTER_PIDS[@]+"${CLUSTER_PIDS[@]}"}; do
        wait "$pid" 2>/dev/null || true
    done
    CLUSTER_PIDS=()
}
