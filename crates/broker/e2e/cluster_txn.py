#!/usr/bin/env python3
"""Kafka's TransactionalMessageCopier against a 3-node oncelog-broker cluster while the
transaction coordinator's node and partition leaders are killed.

Three oncelog-broker processes in cluster mode on loopback, an input topic of one partition
and an output topic of 3 partitions (replication factor 3, made by Kafka's TopicCommand).
Kafka's VerifiableProducer (idempotent, acks=all) writes N records to the input; then Kafka's
TransactionalMessageCopier copies the input partition to the output topic in transactions
(read_committed consumer, the consumed offsets committed in each transaction with
sendOffsetsToTransaction, random aborts on), while, in each of ROUNDS rounds, the
transaction coordinator's node (even rounds; FindCoordinator for the copier's group, which
the transaction coordinator shares) or the node leading the most output partitions (odd
rounds) is SIGKILLed and started again over the same directory. Then Kafka's ConsoleConsumer
reads every output partition with isolation.level=read_committed, and:

- every acknowledged input record is in the output once (exactly once: nothing lost through
  a kill, no aborted or retried copy visible to read_committed);
- nothing else is.

Prints one JSON line with the counts, and exits 1 on any loss or duplicate, or when the
copier failed.

    crates/broker/e2e/cluster_txn.py BROKER_BIN WORKDIR N ROUNDS

The Kafka jars: $KAFKA_TOOLS_LIB (a folder of jars), else ../shared/kafka-oracle/kafka.sh.
"""
import json, os, re, signal, socket, struct, subprocess, sys, time

from ports import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K = os.environ.get("KAFKA_SH", os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh"))
LIB = os.environ.get("KAFKA_TOOLS_LIB")
BIN, WORK, N, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
INPUT, OUTPUT, GROUP, TXN_ID = "copier-input", "copier-output", "copier", "copier-0"
NODES = (1, 2, 3)
os.makedirs(WORK, exist_ok=True)


def command(*a):
    if LIB:
        return ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", os.path.join(LIB, "*"), *a]
    return ["bash", K, "run", *a]


def tool(*a, timeout=60):
    return subprocess.run(command(*a), capture_output=True, text=True, timeout=timeout)


_six = iter(free_ports(6))
ports = {n: (next(_six), next(_six)) for n in NODES}
CLUSTER = ",".join(f"{n}=127.0.0.1:{k}:{r}" for n, (k, r) in ports.items())
BOOTSTRAP = ",".join(f"127.0.0.1:{k}" for k, _ in ports.values())
procs = {}


def start(n):
    d = f"{WORK}/node{n}"
    os.makedirs(d, exist_ok=True)
    procs[n] = subprocess.Popen(
        [BIN, "--node-id", str(n), "--cluster", CLUSTER, "--data", f"{d}/data",
         "--segment-bytes", "8388608", "--prefault-bytes", "0"],
        stdout=open(f"{d}/stdout", "a"), stderr=open(f"{d}/broker.log", "a"))


def kill(n):
    procs[n].send_signal(signal.SIGKILL)
    procs[n].wait()


def leaders(topic, partitions):
    """Partition -> leader id, from TopicCommand --describe; None if it failed."""
    try:
        out = tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", BOOTSTRAP,
                   "--describe", "--topic", topic, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    found = {int(p): int(l) for p, l in
             re.findall(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)", out.stdout)}
    return found if len(found) == partitions else None


def wait_led(topic, partitions, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        led = leaders(topic, partitions)
        if led and all(l in NODES and procs[l].poll() is None for l in led.values()):
            return led
        time.sleep(1)
    raise SystemExit(f"cluster_txn.py: {topic} without live leaders after {within} s")


def coordinator(key, key_type):
    """The coordinator of `key` (FindCoordinator v1 to a live node), or None."""
    for n, (k, _) in ports.items():
        if procs[n].poll() is not None:
            continue
        try:
            with socket.create_connection(("127.0.0.1", k), timeout=5) as s:
                client, key_bytes = b"cluster_txn.py", key.encode()
                body = (struct.pack(">hhih", 10, 1, 1, len(client)) + client
                        + struct.pack(">h", len(key_bytes)) + key_bytes + struct.pack(">b", key_type))
                s.sendall(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                frame = s.recv(size, socket.MSG_WAITALL)
                # v1: correlation id, throttle time, error code, error message, node id.
                _, _, error = struct.unpack(">iih", frame[:10])
                message_len = struct.unpack(">h", frame[10:12])[0]
                at = 12 + max(message_len, 0)
                node = struct.unpack(">i", frame[at:at + 4])[0]
                if error == 0:
                    return node
        except OSError:
            continue
    return None


def create(topic, partitions):
    deadline = time.time() + 60
    while True:
        made = tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", BOOTSTRAP,
                    "--create", "--topic", topic, "--partitions", str(partitions),
                    "--replication-factor", "3", timeout=30)
        if made.returncode == 0 or "already exists" in made.stdout + made.stderr:
            return
        if time.time() > deadline:
            raise SystemExit(f"cluster_txn.py: {topic} not created: {made.stdout}{made.stderr}")
        time.sleep(1)


def read_committed(topic, partition):
    """(offset, value) of every record a read_committed consumer reads from the partition."""
    out = tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
               BOOTSTRAP, "--topic", topic, "--partition", str(partition), "--offset", "earliest",
               "--timeout-ms", "4000", "--consumer-property", "isolation.level=read_committed",
               "--property", "print.offset=true", timeout=120)
    return [(int(m[1]), m[2]) for m in
            (re.match(r"Offset:(\d+)\s+(.*)$", l) for l in out.stdout.splitlines()) if m]


for n in NODES:
    start(n)
try:
    create(INPUT, 1)
    create(OUTPUT, 3)
    wait_led(INPUT, 1)
    wait_led(OUTPUT, 3)
    with open(f"{WORK}/producer.properties", "w") as f:
        f.write("enable.idempotence=true\nacks=all\nretries=2147483647\n"
                "request.timeout.ms=5000\ndelivery.timeout.ms=120000\n")
    produced = tool("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", BOOTSTRAP,
                    "--topic", INPUT, "--max-messages", str(N), "--throughput", "-1",
                    "--acks", "-1", "--command-config", f"{WORK}/producer.properties",
                    timeout=300)
    acked = {}
    for line in produced.stdout.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("name") == "producer_send_success":
            acked[e["offset"]] = str(e["value"])
    if len(acked) != N:
        raise SystemExit(f"cluster_txn.py: {len(acked)} of {N} input records acknowledged")
    # Small transactions, so that the copy spans the kills.
    copier = subprocess.Popen(
        command("org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", BOOTSTRAP,
                "--input-topic", INPUT, "--input-partition", "0", "--output-topic", OUTPUT,
                "--consumer-group", GROUP, "--transactional-id", TXN_ID,
                "--transaction-size", "20", "--transaction-timeout", "30000",
                "--max-messages", str(N), "--enable-random-aborts"),
        stdout=open(f"{WORK}/copier.log", "w"), stderr=open(f"{WORK}/copier.err", "w"))
    killed, during_copy, began = [], 0, time.time()
    for r in range(ROUNDS):
        time.sleep(2)
        if r % 2 == 0:
            victim = coordinator(GROUP, 0)
            what = "coordinator"
        else:
            led = wait_led(OUTPUT, 3)
            count = lambda n: sum(1 for l in led.values() if l == n)
            victim, what = max(NODES, key=count), "leader"
        if victim not in NODES:
            continue
        if copier.poll() is None:
            during_copy += 1
        kill(victim)
        killed.append((victim, what, round(time.time() - began, 1)))
        time.sleep(2)
        start(victim)
    try:
        exit_code = copier.wait(timeout=300)
    except subprocess.TimeoutExpired:
        copier.kill()
        exit_code = "timeout"
    wait_led(OUTPUT, 3)
    copied = []
    for p in range(3):
        copied.extend(v for _, v in read_committed(OUTPUT, p))
    counts = {}
    for v in copied:
        counts[v] = counts.get(v, 0) + 1
    wanted = set(acked.values())
    lost = sorted(wanted - counts.keys())
    dups = {v: c for v, c in counts.items() if c > 1}
    extra = sorted(counts.keys() - wanted)
    aborted = sum(1 for l in open(f"{WORK}/copier.log") if "abort" in l.lower())
    print(json.dumps({"input": len(acked), "copied": len(copied), "kills": killed,
                      "kills_during_copy": during_copy, "copier_exit": exit_code,
                      "lost": len(lost), "duplicates": len(dups), "unknown": len(extra)}))
    if exit_code != 0:
        err = open(f"{WORK}/copier.err").read().splitlines()
        print("cluster_txn.py: the copier failed; its stderr (last 30 lines):", *err[-30:],
              sep="\n", file=sys.stderr)
    if lost[:5] or dups or extra[:5]:
        print(f"cluster_txn.py: lost {lost[:5]}, twice {list(dups.items())[:5]}, "
              f"unknown {extra[:5]}", file=sys.stderr)
    ok = exit_code == 0 and not lost and not dups and not extra and during_copy > 0
    if during_copy == 0:
        print("cluster_txn.py: the copy ended before the first kill", file=sys.stderr)
    sys.exit(0 if ok else 1)
finally:
    if "copier" in globals() and copier.poll() is None:
        copier.kill()
    for n, p in procs.items():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
