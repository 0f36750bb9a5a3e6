#!/usr/bin/env python3
"""Group churn with Kafka's own test clients: a VerifiableProducer (acks=all) writes N records
to a 6-partition topic while three VerifiableConsumers of one group run and, every 5 s for
CHURN_SECONDS (45), one of them is stopped (SIGTERM: it leaves the group) and a new one joins.
Prints one JSON line: records acknowledged, offsets consumed, offsets consumed more than once
(the issue: a commit refused during a rebalance hands processed offsets to the next owner), and
acknowledged offsets never consumed. Exits 1 if any offset was consumed twice or any
acknowledged one was lost.

    crates/broker/e2e/churn.py BOOTSTRAP N WORKDIR [TOPIC] [--group-protocol classic|consumer]

`--group-protocol consumer` runs the consumers with KIP-848's protocol (ConsumerGroupHeartbeat,
the broker's assignor) instead of the classic one (JoinGroup/SyncGroup, the client's).

Runs against any broker: oncelog-broker or Kafka itself (`kafka.sh start`); e2e/churn.sh starts
an oncelog-broker and runs it (CI). The Kafka jars: $KAFKA_TOOLS_LIB (a folder of jars, as
tests/clients/setup.sh installs them in target/broker-clients/tools/lib), else the class runner
of ../shared/kafka-oracle/kafka.sh (or $KAFKA_SH).
"""
import json, os, random, signal, subprocess, sys, time
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K = os.environ.get("KAFKA_SH", os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh"))
args = sys.argv[1:]; protocol = "classic"
if "--group-protocol" in args:
    i = args.index("--group-protocol"); protocol = args[i + 1]; del args[i:i + 2]
sys.argv[1:] = args
B = sys.argv[1]; N = int(sys.argv[2]); work = sys.argv[3]; topic = sys.argv[4] if len(sys.argv) > 4 else "churn"
os.makedirs(work, exist_ok=True)
SECONDS = float(os.environ.get("CHURN_SECONDS", "45"))
LIB = os.environ.get("KAFKA_TOOLS_LIB")
def command(*a):
    if LIB:
        return ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.path.join(LIB, "*"), *a]
    return ["bash", K, "run", *a]
def run(*a, **kw): return subprocess.Popen(command(*a), **kw)
subprocess.run(command("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", B, "--create", "--topic", topic, "--partitions", "6", "--replication-factor", "1"), check=False, capture_output=True)
prod = run("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", B, "--topic", topic, "--max-messages", str(N), "--throughput", "1500", "--acks", "-1", stdout=open(f"{work}/producer.log", "w"), stderr=subprocess.STDOUT)
consumers = []; n = 0
def start():
    global n
    n += 1
    p = run("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", B, "--topic", topic, "--group-id", "g", "--reset-policy", "earliest", "--group-protocol", protocol, stdout=open(f"{work}/consumer-{n}.log", "w"), stderr=subprocess.DEVNULL)
    consumers.append(p)
for _ in range(3): start()
rng = random.Random(7)
t0 = time.time()
while time.time() - t0 < SECONDS:
    time.sleep(5)
    victim = consumers.pop(rng.randrange(len(consumers)))
    victim.send_signal(signal.SIGTERM); victim.wait()
    start()
prod.wait()
def consumed():
    seen = {}; total = 0
    for f in os.listdir(work):
        if not f.startswith("consumer-"): continue
        for line in open(f"{work}/{f}"):
            try: e = json.loads(line)
            except Exception: continue
            if e.get("name") != "records_consumed": continue
            for p in e["partitions"]:
                for o in range(p["minOffset"], p["maxOffset"] + 1):
                    seen[(p["partition"], o)] = seen.get((p["partition"], o), 0) + 1
                total += p["count"]
    return seen, total
deadline = time.time() + 120
while time.time() < deadline:
    seen, total = consumed()
    if len(seen) >= N: break
    time.sleep(3)
for p in consumers: p.send_signal(signal.SIGTERM)
for p in consumers: p.wait()
seen, total = consumed()
acked = set()
for line in open(f"{work}/producer.log"):
    try: e = json.loads(line)
    except Exception: continue
    if e.get("name") == "producer_send_success": acked.add((e["partition"], e["offset"]))
dups = sum(c - 1 for c in seen.values() if c > 1)
lost = len(acked - set(seen))
print(json.dumps({"acked": len(acked), "unique_consumed": len(seen), "records_consumed": total, "offsets_consumed_twice_or_more": dups, "acked_not_consumed": lost, "consumers_started": n, "group_protocol": protocol}))
sys.exit(1 if dups or lost or len(acked) < N else 0)
