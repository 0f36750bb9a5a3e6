#!/usr/bin/env bash
# Installs the real Kafka clients the broker's tests run, once, into DIR (default
# target/broker-clients at the repository root):
#   DIR/venv           python3 venv with confluent-kafka (librdkafka inside) and kafka-python
#   DIR/java/lib       org.apache.kafka:kafka-clients and its dependencies, from Maven Central
#   DIR/java/classes   the compiled Java test client (tests/java/OncelogClient.java)
#   DIR/tools/lib      org.apache.kafka:kafka-tools 4.4 and its dependencies (Kafka's CLI tools
#                      and Verifiable* clients, for e2e/kafka_tools.sh and e2e/churn.py)
# Re-running it is cheap: each part is redone only when its pinned versions or sources change.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../../.." && pwd)"
DIR="${1:-${ONCELOG_CLIENTS_DIR:-$ROOT/target/broker-clients}}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

# One installer at a time (test binaries and CI may call this concurrently).
exec 9>"$DIR/.lock"
flock 9

PY_PINS="confluent-kafka==2.16.1 kafka-python==3.0.12"
if [ "$(cat "$DIR/venv/.pins" 2>/dev/null || true)" != "$PY_PINS" ]; then
    echo "setup: python venv with $PY_PINS" >&2
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check $PY_PINS
    echo "$PY_PINS" > "$DIR/venv/.pins"
fi

JAVA_SRC="$HERE/../java"
JAVA_STAMP="$(cat "$JAVA_SRC/pom.xml" "$JAVA_SRC/OncelogClient.java" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$DIR/java/.stamp" 2>/dev/null || true)" != "$JAVA_STAMP" ]; then
    echo "setup: kafka-clients from Maven Central, and the Java test client" >&2
    rm -rf "$DIR/java"
    mkdir -p "$DIR/java/lib" "$DIR/java/classes"
    mvn -q -B -f "$JAVA_SRC/pom.xml" dependency:copy-dependencies -DoutputDirectory="$DIR/java/lib" >&2
    javac -d "$DIR/java/classes" -cp "$DIR/java/lib/*" "$JAVA_SRC/OncelogClient.java"
    echo "$JAVA_STAMP" > "$DIR/java/.stamp"
fi
TOOLS_POM="$HERE/../java/tools/pom.xml"
TOOLS_STAMP="$(sha256sum "$TOOLS_POM" | cut -d' ' -f1)"
if [ "$(cat "$DIR/tools/.stamp" 2>/dev/null || true)" != "$TOOLS_STAMP" ]; then
    echo "setup: kafka-tools from Maven Central" >&2
    rm -rf "$DIR/tools"
    mkdir -p "$DIR/tools/lib"
    mvn -q -B -f "$TOOLS_POM" dependency:copy-dependencies -DoutputDirectory="$DIR/tools/lib" >&2
    echo "$TOOLS_STAMP" > "$DIR/tools/.stamp"
fi
echo "$DIR"
