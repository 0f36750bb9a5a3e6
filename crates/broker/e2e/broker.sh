# Sourced by the e2e scripts: `start_broker DIR [FLAGS...]` starts an oncelog-broker over DIR/data
# on a free port of 127.0.0.1, sets BROKER_ADDR and BROKER_PID (its log: DIR/broker.log), and
# `stop_broker` stops it with SIGTERM. The binary is $ONCELOG_BROKER_BIN if set (CI passes the
# one `cargo test --workspace` built), else `cargo build -p oncelog-broker`'s debug build.
start_broker() {
    local dir="$1"
    shift
    local root target bin
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
    target="${CARGO_TARGET_DIR:-$root/target}"
    bin="${ONCELOG_BROKER_BIN:-}"
    if [ -z "$bin" ]; then
        (cd "$root" && cargo build -q -p oncelog-broker) || return 1
        bin="$target/debug/oncelog-broker"
    fi
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
