#!/usr/bin/env python3
"""Kafka's ProducerPerformance against a 3-node oncelog-broker cluster and a 3-node Kafka 4.4
cluster on this machine, side by side (issue 31's benchmark; docs/benchmarks.md, "A cluster of
brokers").

Each round starts a fresh cluster of each (alternating which goes first), creates a topic of
PARTITIONS partitions with replication factor 3 (Kafka's `min.insync.replicas` 2, raft's
majority on oncelog), runs one ProducerPerformance (idempotent, acks=all, 100-byte records, as
fast as it can) and stops the cluster. Kafka's nodes are combined broker+controller nodes with a
static quorum of the three, each started by ../shared/kafka-oracle/kafka.sh over its own work dir
and ports. Prints one line per run and a last JSON line with the medians and
`cluster_vs_kafka` (oncelog's records/s over Kafka's).

    crates/broker/e2e/cluster_bench.py BROKER_BIN WORKDIR [--records N] [--rounds R]
        [--partitions P] [--throughput RECORDS_PER_S]

BROKER_BIN is a release build (`cargo build --release -p oncelog-broker`).
"""
import argparse, json, os, re, shutil, signal, statistics, subprocess, time

from ports import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K = os.environ.get("KAFKA_SH", os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh"))
ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("work")
ap.add_argument("--records", type=int, default=500000)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--partitions", type=int, default=3)
# Records a second ProducerPerformance asks for (-1: as fast as it can, the default). At full
# speed the latencies are mostly the time records wait in the producer's own buffer; at a rate
# both clusters sustain they are the time to a replicated acknowledgement.
ap.add_argument("--throughput", type=int, default=-1)
args = ap.parse_args()
LIB = subprocess.run(["bash", K, "lib"], capture_output=True, text=True, check=True).stdout.strip()


def java(*a, **kw):
    return subprocess.run(["java", "-Xmx512m", "-cp", os.path.join(LIB, "*"), *a],
                          capture_output=True, text=True, **kw)


def create_topic(bootstrap):
    deadline = time.time() + 90
    while True:
        try:
            r = java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                     "--create", "--topic", "perf", "--partitions", str(args.partitions),
                     "--replication-factor", "3", timeout=60)
            if r.returncode == 0:
                return
            why = r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            why = "TopicCommand did not answer within 60 s"
        if time.time() > deadline:
            raise SystemExit(f"the topic was not created: {why}")
        time.sleep(1)


def perf(bootstrap):
    r = java("org.apache.kafka.tools.ProducerPerformance", "--topic", "perf", "--num-records",
             str(args.records), "--record-size", "100", "--throughput", str(args.throughput),
             "--producer-props",
             f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true",
             timeout=1200)
    last = [l for l in r.stdout.splitlines() if "records sent" in l]
    if r.returncode != 0 or not last:
        raise SystemExit(f"ProducerPerformance failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    m = re.search(r"([\d.]+) records/sec.*?([\d.]+) ms 99th", last[-1])
    return float(m[1]), float(m[2])


def kafka_cluster(work):
    _six = iter(free_ports(6))
    ports = {n: (next(_six), next(_six)) for n in (1, 2, 3)}
    voters = ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in ports.items())
    cid = java("kafka.tools.StorageTool", "random-uuid").stdout.strip().splitlines()[-1]
    for n, (p, c) in ports.items():
        d = f"{work}/kafka{n}"
        os.makedirs(d)
        props = f"{d}/server.properties"
        with open(props, "w") as f:
            f.write(f"""process.roles=broker,controller
node.id={n}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}
advertised.listeners=PLAINTEXT://127.0.0.1:{p}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={d}/data
metadata.log.dir={d}/meta
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
group.initial.rebalance.delay.ms=0
""")
        f = java("kafka.tools.StorageTool", "format", "-t", cid, "-c", props)
        if f.returncode != 0:
            raise SystemExit(f"kafka format: {f.stdout}{f.stderr}")
    starts = [subprocess.Popen(["bash", K, "start", f"{work}/kafka{n}", str(p)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for n, (p, _) in ports.items()]
    for s in starts:
        if s.wait(timeout=180) != 0:
            raise SystemExit(f"a Kafka node did not start: {s.stdout.read()}")
    stop = lambda: [subprocess.run(["bash", K, "stop", f"{work}/kafka{n}"], capture_output=True)
                    for n in ports]
    return ",".join(f"127.0.0.1:{p}" for p, _ in ports.values()), stop


def oncelog_cluster(work):
    _six = iter(free_ports(6))
    ports = {n: (next(_six), next(_six)) for n in (1, 2, 3)}
    spec = ",".join(f"{n}=127.0.0.1:{k}:{r}" for n, (k, r) in ports.items())
    procs = [subprocess.Popen([args.bin, "--node-id", str(n), "--cluster", spec,
                               "--data", f"{work}/oncelog{n}"],
                              stdout=open(f"{work}/oncelog{n}.out", "w"),
                              stderr=open(f"{work}/oncelog{n}.log", "w"))
             for n in ports]

    def stop():
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    return ",".join(f"127.0.0.1:{k}" for k, _ in ports.values()), stop


results = {"kafka": [], "oncelog": []}
for r in range(args.rounds):
    order = ["kafka", "oncelog"] if r % 2 == 0 else ["oncelog", "kafka"]
    for which in order:
        work = os.path.join(args.work, f"{which}-{r}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        load = os.getloadavg()[0]
        bootstrap, stop = (kafka_cluster if which == "kafka" else oncelog_cluster)(work)
        try:
            create_topic(bootstrap)
            rate, p99 = perf(bootstrap)
        finally:
            stop()
        shutil.rmtree(work, ignore_errors=True)
        results[which].append((rate, p99))
        print(f"round {r} {which:8} {rate:10.0f} records/s  p99 {p99:8.1f} ms  (load {load:.1f})",
              flush=True)
med = {w: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
       for w, v in results.items()}
print(json.dumps({"records": args.records, "partitions": args.partitions, "rounds": args.rounds,
                  "throughput": args.throughput,
                  "kafka_records_per_s": round(med["kafka"][0]),
                  "kafka_p99_ms": med["kafka"][1],
                  "oncelog_records_per_s": round(med["oncelog"][0]),
                  "oncelog_p99_ms": med["oncelog"][1],
                  "cluster_vs_kafka": round(med["oncelog"][0] / med["kafka"][0], 3)}))
