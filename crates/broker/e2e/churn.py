#!/usr/bin/env python3
"""Group churn with Kafka's own test clients: a VerifiableProducer (acks=all) writes N records
to a 6-partition topic while three VerifiableConsumers of one group run and, every 5 s for 45 s,
one of them is stopped (SIGTERM: it leaves the group) and a new one joins. Prints one JSON line:
records acknowledged, offsets consumed, and offsets consumed more than once (the issue: a
commit refused during a rebalance hands processed offsets to the next owner).

    crates/broker/e2e/churn.py BOOTSTRAP N WORKDIR [TOPIC] [--group-protocol classic|consumer]

`--group-protocol consumer` runs the consumers with KIP-848's protocol (ConsumerGroupHeartbeat,
the broker's assignor) instead of the classic one (JoinGroup/SyncGroup, the client's).

Runs against any broker: oncelog-broker (start it with --partitions 6 if it lacks
CreateTopics) or Kafka itself (`kafka.sh start`). Needs the Kafka jars of
../shared/kafka-oracle/kafka.sh (or $KAFKA_SH); not part of `cargo test`.
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
def run(*a, **kw): return subprocess.Popen(["bash", K, "run", *a], **kw)
subprocess.run(["bash", K, "run", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", B, "--create", "--topic", topic, "--partitions", "6", "--replication-factor", "1"], check=False, capture_output=True)
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
while time.time() - t0 < 45:
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
acked = sum(1 for l in open(f"{work}/producer.log") if '"producer_send_success"' in l)
dups = sum(c - 1 for c in seen.values() if c > 1)
print(json.dumps({"acked": acked, "unique_consumed": len(seen), "records_consumed": total, "offsets_consumed_twice_or_more": dups, "consumers_started": n, "group_protocol": protocol}))
