#!/usr/bin/env python3
"""A broker SIGKILL in the middle of a consumer-protocol group's work, with Kafka's own test
clients: a VerifiableProducer (acks=all) writes N records to a 6-partition topic while two
VerifiableConsumers of one group (`--group-protocol consumer`, KIP-848) read and commit; after
KILL_AFTER (8) seconds the broker is SIGKILLed and restarted on the same port and data. Prints one
JSON line: records acknowledged, offsets consumed, offsets consumed more than once (a group the
restart forgot makes its members rejoin and re-read from their last commits), acknowledged
offsets never consumed, and the consumers' heartbeat errors after the restart. Exits 1 if any
offset was consumed twice or any acknowledged one was lost.

    crates/broker/e2e/restart_consumer.py WORK [N] [--kafka]

The broker is the debug oncelog-broker of $CARGO_TARGET_DIR (or target/; `cargo build -p
oncelog-broker` first) or $ONCELOG_BROKER_BIN; with `--kafka`, Kafka 4.4 itself
(../shared/kafka-oracle/kafka.sh start/kill, or $KAFKA_SH). The Kafka jars: $KAFKA_TOOLS_LIB (a
folder of jars), else kafka.sh's class runner.
"""
import json, os, signal, socket, subprocess, sys, time

from ports import free_ports
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K = os.environ.get("KAFKA_SH", os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh"))
LIB = os.environ.get("KAFKA_TOOLS_LIB")
args = sys.argv[1:]
kafka = "--kafka" in args
args = [a for a in args if a != "--kafka"]
work = os.path.abspath(args[0]); N = int(args[1]) if len(args) > 1 else 2000
KILL_AFTER = float(os.environ.get("KILL_AFTER", "8"))
os.makedirs(work, exist_ok=True)
port = free_ports(1)[0]  # restarted on this port: never an ephemeral one (ports.py)
B = f"127.0.0.1:{port}"
BIN = os.environ.get("ONCELOG_BROKER_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "oncelog-broker")

def command(*a):
    if LIB:
        return ["java", "-Xmx256m", "-cp", os.path.join(LIB, "*"), *a]
    return ["bash", K, "run", *a]

broker = None
def start_broker():
    global broker
    if kafka:
        subprocess.run(["bash", K, "start", f"{work}/kafka", str(port)], check=True, capture_output=True)
    else:
        broker = subprocess.Popen([BIN, "--data", f"{work}/data", "--listen", B, "--partitions", "6"],
                                  stdout=open(f"{work}/broker.out", "a"), stderr=open(f"{work}/broker.log", "a"))
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close(); return
        except OSError:
            time.sleep(0.2)
    sys.exit("the broker did not start")

def kill_broker():
    if kafka:
        subprocess.run(["bash", K, "kill", f"{work}/kafka"], check=True, capture_output=True)
    else:
        broker.send_signal(signal.SIGKILL); broker.wait()

start_broker()
subprocess.run(command("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", B, "--create", "--topic", "rc", "--partitions", "6", "--replication-factor", "1"), capture_output=True)
prod = subprocess.Popen(command("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", B, "--topic", "rc", "--max-messages", str(N), "--throughput", str(max(N // 20, 1)), "--acks", "-1"), stdout=open(f"{work}/producer.log", "w"), stderr=subprocess.STDOUT)
consumers = [subprocess.Popen(command("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", B, "--topic", "rc", "--group-id", "rc", "--reset-policy", "earliest", "--group-protocol", "consumer"), stdout=open(f"{work}/consumer-{i}.log", "w"), stderr=open(f"{work}/consumer-{i}.err", "w")) for i in range(2)]
time.sleep(KILL_AFTER)
kill_broker()
time.sleep(1)
start_broker()
prod.wait()

def consumed():
    seen = {}
    for i in range(len(consumers)):
        for line in open(f"{work}/consumer-{i}.log"):
            try: e = json.loads(line)
            except Exception: continue
            if e.get("name") != "records_consumed": continue
            for p in e["partitions"]:
                for o in range(p["minOffset"], p["maxOffset"] + 1):
                    seen[(p["partition"], o)] = seen.get((p["partition"], o), 0) + 1
    return seen
acked = set()
for line in open(f"{work}/producer.log"):
    try: e = json.loads(line)
    except Exception: continue
    if e.get("name") == "producer_send_success": acked.add((e["partition"], e["offset"]))
deadline = time.time() + 120
while time.time() < deadline and not acked <= set(consumed()):
    time.sleep(2)
time.sleep(3)
for c in consumers: c.send_signal(signal.SIGTERM)
for c in consumers: c.wait()
if kafka: subprocess.run(["bash", K, "stop", f"{work}/kafka"], capture_output=True)
else: broker.send_signal(signal.SIGTERM); broker.wait()
seen = consumed()
dups = sum(c - 1 for c in seen.values() if c > 1)
lost = len(acked - set(seen))
errors = 0
for i in range(len(consumers)):
    errors += sum(1 for line in open(f"{work}/consumer-{i}.err") if "UNKNOWN_MEMBER_ID" in line or "FENCED_MEMBER_EPOCH" in line)
print(json.dumps({"broker": "kafka" if kafka else "oncelog", "acked": len(acked), "unique_consumed": len(seen), "offsets_consumed_twice_or_more": dups, "acked_not_consumed": lost, "member_errors_logged": errors}))
sys.exit(1 if dups or lost else 0)
