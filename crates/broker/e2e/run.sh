#!/usr/bin/env bash
# End-to-end benchmark (not a test): oncelog-broker against Apache Kafka 4.4 on this machine.
#   crates/broker/e2e/run.sh [--rounds 5] [--records-100 N] [--records-1k N] [--no-write] ...
# Builds the release broker, installs the clients (tests/clients/setup.sh), fetches Kafka's
# jars once (../shared/kafka-oracle/kafka.sh), then runs bench.py, which writes its section of
# docs/benchmarks.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$ROOT"
cargo build --release -p oncelog-broker
CLIENTS="$(bash crates/broker/tests/clients/setup.sh)"
bash ../shared/kafka-oracle/kafka.sh lib >/dev/null
exec "$CLIENTS/venv/bin/python" "$HERE/bench.py" --broker-bin "$ROOT/target/release/oncelog-broker" "$@"
