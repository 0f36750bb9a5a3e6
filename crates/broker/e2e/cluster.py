#!/usr/bin/env python3
"""Kafka's own tools against a 3-node oncelog-broker cluster while its leaders are killed.

Three oncelog-broker processes in cluster mode on loopback (`--node-id`, `--cluster`), a topic
of 3 partitions with replication factor 3 made by Kafka's TopicCommand, and Kafka's
VerifiableProducer (idempotent, acks=all) writing N records while, in each of ROUNDS rounds,
a node leading partitions (the one leading the most, not the one killed the round before) is
SIGKILLed and started again over the same directory; every third round its data directory is
removed first (a lost disk), so it rejoins under its id and catches up from the others.
Every other round the victim is the group coordinator's node instead (the leader of the
replicated offsets group, asked with FindCoordinator), while Kafka's VerifiableConsumer (a
group, synchronous commits after each poll) reads the topic from the start.
Then Kafka's ConsoleConsumer reads every partition from its start (assigned, no group), and:

- every acknowledged record is in the log, at the offset and with the value its
  acknowledgement named (nothing acknowledged is lost);
- no value is in the log twice (no retry stored twice);
- the group consumed every acknowledged record (at least once: a record read again after a
  rebalance is counted, not failed), and its last successful commit of each partition
  reaches the partition's end (the committed offsets survived the coordinator's moves).

(Fetch is served by leaders only, so that every replica holds the same batches is checked by
crates/broker/tests/cluster/kills.rs, which reads each node's log directory.)

Prints one JSON line with the counts, and exits 1 on any loss or duplicate.

    crates/broker/e2e/cluster.py BROKER_BIN WORKDIR N ROUNDS

The Kafka jars: $KAFKA_TOOLS_LIB (a folder of jars, as tests/clients/setup.sh installs them in
target/broker-clients/tools/lib), else the class runner of ../shared/kafka-oracle/kafka.sh (or
$KAFKA_SH).
"""
import json, os, re, shutil, signal, socket, struct, subprocess, sys, time

from ports import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K = os.environ.get("KAFKA_SH", os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh"))
LIB = os.environ.get("KAFKA_TOOLS_LIB")
BIN, WORK, N, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# The VerifiableConsumer group (ONCELOG_CLUSTER_GROUP=0: without it; see cluster.sh for the
# fault that once made it read nothing, fixed since).
GROUP = os.environ.get("ONCELOG_CLUSTER_GROUP", "1") != "0"
TOPIC = "replicated"
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


def leaders():
    """Partition -> leader id (-1 when none), from TopicCommand --describe; None if it failed
    or took over 30 s (a JVM on a loaded machine: wait_led asks again until its deadline)."""
    try:
        out = tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", BOOTSTRAP,
                   "--describe", "--topic", TOPIC, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    found = {int(p): int(l) for p, l in
             re.findall(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)", out.stdout)}
    return found if len(found) == 3 else None


def coordinator(group):
    """The group's coordinator node id (FindCoordinator v0 to a live node), or None."""
    for n, (k, _) in ports.items():
        if procs[n].poll() is not None:
            continue
        try:
            with socket.create_connection(("127.0.0.1", k), timeout=5) as s:
                client, key = b"cluster.py", group.encode()
                body = (struct.pack(">hhih", 10, 0, 1, len(client)) + client
                        + struct.pack(">h", len(key)) + key)
                s.sendall(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                frame = s.recv(size, socket.MSG_WAITALL)
                _, error, node = struct.unpack(">ihi", frame[:10])
                if error == 0:
                    return node
        except OSError:
            continue
    return None


def group_log():
    """The VerifiableConsumer's events so far."""
    events = []
    for line in open(f"{WORK}/consumer.log"):
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def last_commits():
    """Partition -> the offset of the group's last successful commit of it."""
    last = {}
    for e in group_log():
        if e.get("name") == "offsets_committed" and e.get("success"):
            for o in e.get("offsets", []):
                last[o["partition"]] = o["offset"]
    return last


def wait_led(within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        led = leaders()
        if led and all(l in NODES and procs[l].poll() is None for l in led.values()):
            return led
        time.sleep(1)
    raise SystemExit(f"cluster.py: partitions without a live leader after {within} s: {leaders()}")


for n in NODES:
    start(n)
try:
    deadline = time.time() + 60
    while True:
        made = tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", BOOTSTRAP,
                    "--create", "--topic", TOPIC, "--partitions", "3",
                    "--replication-factor", "3", timeout=30)
        if made.returncode == 0 or "already exists" in made.stdout + made.stderr:
            break
        if time.time() > deadline:
            raise SystemExit(f"cluster.py: the topic was not created: {made.stdout}{made.stderr}")
        time.sleep(1)
    wait_led()
    with open(f"{WORK}/producer.properties", "w") as f:
        # VerifiableProducer sets retries=0 unless told: an idempotent producer retries.
        f.write("enable.idempotence=true\nacks=all\nretries=2147483647\n"
                "request.timeout.ms=5000\ndelivery.timeout.ms=120000\nretry.backoff.ms=200\n")
    # Spread over the kill rounds (each about 8 s: a describe, the kill, the restart), so
    # every kill lands while records are being acknowledged.
    rate = max(50, N // (ROUNDS * 8 + 5))
    prod = subprocess.Popen(
        command("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", BOOTSTRAP,
                "--topic", TOPIC, "--max-messages", str(N), "--throughput", str(rate),
                "--acks", "-1", "--command-config", f"{WORK}/producer.properties"),
        stdout=open(f"{WORK}/producer.log", "w"), stderr=subprocess.STDOUT)
    group = None if not GROUP else subprocess.Popen(
        command("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", BOOTSTRAP,
                "--topic", TOPIC, "--group-id", "verifiable", "--reset-policy", "earliest",
                "--session-timeout", "30000", "--verbose"),
        stdout=open(f"{WORK}/consumer.log", "w"), stderr=open(f"{WORK}/consumer.err", "w"))
    killed, wiped, coordinator_kills = [], [], 0
    for round in range(ROUNDS):
        time.sleep(3)
        led = wait_led()
        # The node leading the most partitions, but not the one killed last when another
        # leads any: the preferred leaders come back to their nodes, so the same node would
        # lead the most every round. Every other round, the group coordinator's node.
        count = lambda n: sum(1 for l in led.values() if l == n)
        ranked = sorted(NODES, key=count, reverse=True)
        victim = next((n for n in ranked if count(n) and killed[-1:] != [n]), ranked[0])
        if round % 2 == 1:
            c = coordinator("verifiable")
            if c in NODES:
                victim = c
        if victim == coordinator("verifiable"):
            coordinator_kills += 1
        kill(victim)
        killed.append(victim)
        if round % 3 == 2:
            # Every third round the killed node's disk is lost: it comes back with an empty
            # data directory and rejoins under its id, catching up from the others.
            shutil.rmtree(f"{WORK}/node{victim}/data")
            wiped.append(victim)
        time.sleep(2)
        start(victim)
    if prod.wait(timeout=300) != 0:
        raise SystemExit(f"cluster.py: VerifiableProducer failed; see {WORK}/producer.log")
    wait_led()
    consumed = {}
    # The three partitions are read at once: each reader ends 10 s after its last record, and
    # one after another those idle ends added up.
    readers = [subprocess.Popen(
        command("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                BOOTSTRAP, "--topic", TOPIC, "--partition", str(p), "--offset", "earliest",
                "--timeout-ms", "10000", "--property", "print.offset=true",
                "--property", "print.partition=true"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(3)]
    for reader in readers:
        try:
            stdout, _ = reader.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for r in readers:
                r.kill()
            raise
        for line in stdout.splitlines():
            m = re.match(r"Partition:(\d+)\s+Offset:(\d+)\s+(.*)$", line)
            if m:
                consumed[(int(m[1]), int(m[2]))] = m[3]
    acked = {}
    for line in open(f"{WORK}/producer.log"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("name") == "producer_send_success":
            acked[(e["partition"], e["offset"])] = str(e["value"])
    # The group: until its commits reach every partition's end (or 120 s), then stopped.
    ends = {}
    for (p, o) in consumed:
        ends[p] = max(ends.get(p, 0), o + 1)
    deadline = time.time() + 120
    while GROUP and time.time() < deadline and group.poll() is None:
        last = last_commits()
        if all(last.get(p, -1) >= end for p, end in ends.items()):
            break
        time.sleep(1)
    exited = None if not GROUP else group.poll()
    if GROUP:
        group.send_signal(signal.SIGTERM)
        try:
            group.wait(timeout=30)
        except subprocess.TimeoutExpired:
            group.kill()
    events = group_log() if GROUP else []
    group_seen = {(e["partition"], e["offset"]) for e in events if e.get("name") == "record_data"}
    group_missing = [k for k in acked if k not in group_seen] if GROUP else []
    last = last_commits() if GROUP else {}
    commits_short = {} if not GROUP else {
        p: (last.get(p), end) for p, end in ends.items() if last.get(p, -1) < end}
    failed_commits = sum(1 for e in events
                         if e.get("name") == "offsets_committed" and not e.get("success"))
    lost = [k for k, v in acked.items() if consumed.get(k) != v]
    values = {}
    for v in consumed.values():
        values[v] = values.get(v, 0) + 1
    dups = sum(c - 1 for c in values.values() if c > 1)
    print(json.dumps({"acked": len(acked), "consumed": len(consumed), "kills": killed,
                      "wiped": wiped,
                      "lost": len(lost), "duplicates": dups,
                      "group": {"ran": GROUP, "exited_early_with": exited,
                                "coordinator_kills": coordinator_kills,
                                "records_read": sum(1 for e in events
                                                    if e.get("name") == "record_data"),
                                "missing": len(group_missing),
                                "failed_commits": failed_commits,
                                "commits_short_of_end": commits_short}}))
    if lost[:5]:
        print(f"cluster.py: acknowledged and not in the log (first 5): {lost[:5]}", file=sys.stderr)
    if group_missing[:5]:
        print(f"cluster.py: acknowledged and never read by the group (first 5): "
              f"{group_missing[:5]}; see {WORK}/consumer.log", file=sys.stderr)
    if commits_short:
        print(f"cluster.py: the group's last commits short of the end: {commits_short}",
              file=sys.stderr)
    if group_missing or commits_short:
        err = open(f"{WORK}/consumer.err").read().splitlines()
        print("cluster.py: the VerifiableConsumer's stderr (last 30 lines):", *err[-30:],
              sep="\n", file=sys.stderr)
    sys.exit(1 if lost or dups or not acked or group_missing or commits_short else 0)
finally:
    for n, p in procs.items():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
