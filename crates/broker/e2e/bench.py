#!/usr/bin/env python3
"""End to end: oncelog-broker against Apache Kafka 4.4 on this machine, same clients, same
settings, rounds interleaved; writes the medians and ratios to docs/benchmarks.md.

    crates/broker/e2e/run.sh [--rounds 5] [--records-100 1000000] [--records-1k 300000]

(run.sh builds the release broker and the client venv, then runs this with the venv's python.)

Workloads, each on a fresh one-partition topic, idempotent producer, acks=all:
  pp-100, pp-1k     Kafka's own ProducerPerformance (kafka-clients 4.4, its defaults:
                    batch.size 16384, linger.ms 5), records of 100 B / 1 KB, unthrottled;
                    records/s and its latency percentiles (send to acknowledgement).
  rd-100, rd-1k     a librdkafka (confluent-kafka 2.16) producer, unthrottled, librdkafka's
                    defaults; records/s and send-to-delivery-report percentiles.
  e2e               librdkafka producer at a fixed rate and a librdkafka consumer in another
                    process; produce-to-consume latency percentiles (same clock).
Three brokers run for the whole benchmark: Kafka, oncelog-broker as shipped (acks=all
answered after fdatasync) and oncelog-broker with `--flush never` (answered from the page
cache, as Kafka does). Only one is measured at a time; each round starts with another.

Internal subcommands (run by the driver in a child process):
  rdkafka-produce BOOTSTRAP TOPIC COUNT SIZE
  e2e BOOTSTRAP TOPIC RATE SECONDS
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
KAFKA_SH = os.path.join(ROOT, "..", "shared", "kafka-oracle", "kafka.sh")
SEGMENT_BYTES = 256 << 20  # the same segment size on both brokers
BEGIN = "<!-- broker-e2e:begin -->"
END = "<!-- broker-e2e:end -->"


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


# ---------------------------------------------------------------- librdkafka workloads


def rdkafka_produce(bootstrap, topic, count, size):
    """Unthrottled: records/s, and send-to-delivery-report latency of every record."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
    })
    payload = b"x" * size
    latencies = []
    errors = [0]

    def delivered(sent):
        def report(err, _msg):
            if err is not None:
                errors[0] += 1
            else:
                latencies.append(time.perf_counter() - sent)
        return report

    # Warm the connection and the topic (auto-creation) before timing.
    producer.produce(topic, b"warm-up")
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=delivered(time.perf_counter()))
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    lat = sorted(latencies)
    print(json.dumps({
        "records": count,
        "seconds": elapsed,
        "records_per_s": count / elapsed,
        "mb_per_s": count * size / elapsed / 1e6,
        "p50_ms": percentile(lat, 0.50) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "errors": errors[0],
    }), flush=True)


def e2e(bootstrap, topic, rate, seconds):
    """A producer at `rate` records/s for `seconds`, a consumer in a child process; each
    record carries its send time, the consumer takes the difference on receipt."""
    from confluent_kafka import Producer

    # Create the topic first, so the consumer can be positioned before anything is sent.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    producer.produce(topic, b"warm-up")
    producer.flush(60)
    consumer = subprocess.Popen(
        [sys.executable, __file__, "e2e-consume", bootstrap, topic, str(int(rate * seconds))],
        stdout=subprocess.PIPE, text=True)
    ready = consumer.stdout.readline()
    assert ready.strip() == "ready", ready
    total = int(rate * seconds)
    start = time.time()
    for i in range(total):
        due = start + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, str(time.time_ns()).encode().ljust(100, b"."))
        producer.poll(0)
    producer.flush(120)
    out, _ = consumer.communicate(timeout=300)
    print(out.strip().splitlines()[-1], flush=True)


def e2e_consume(bootstrap, topic, count):
    from confluent_kafka import Consumer, TopicPartition, OFFSET_END

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"e2e-{topic}",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    # Wait until the assignment has a position, then tell the producer to start.
    deadline = time.time() + 60
    while time.time() < deadline:
        consumer.poll(0.1)
        if consumer.position([TopicPartition(topic, 0)])[0].offset >= 0:
            break
    print("ready", flush=True)
    latencies = []
    deadline = time.time() + 300
    while len(latencies) < count and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        now = time.time_ns()
        latencies.append((now - int(msg.value().rstrip(b"."))) / 1e6)
    consumer.close()
    lat = sorted(latencies)
    print(json.dumps({
        "records": len(lat),
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": lat[-1] if lat else float("nan"),
    }), flush=True)


# ---------------------------------------------------------------- the driver


class Broker:
    def __init__(self, name, bootstrap):
        self.name = name
        self.bootstrap = bootstrap


def start_kafka(work, port):
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "extra.properties"), "w") as f:
        f.write(f"log.segment.bytes={SEGMENT_BYTES}\n")
    subprocess.run(["bash", KAFKA_SH, "start", work, str(port)], check=True, stdout=subprocess.DEVNULL)
    return Broker("kafka", f"127.0.0.1:{port}")


def start_oncelog(name, binary, data, port, log, extra):
    proc = subprocess.Popen(
        [binary, "--data", data, "--listen", f"127.0.0.1:{port}",
         "--segment-bytes", str(SEGMENT_BYTES), *extra],
        stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        if line.startswith("listening on "):
            break
    return proc, Broker(name, f"127.0.0.1:{port}")


PP_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def producer_performance(broker, topic, records, size):
    out = subprocess.run(
        ["bash", KAFKA_SH, "run", "org.apache.kafka.tools.ProducerPerformance",
         "--topic", topic, "--num-records", str(records), "--record-size", str(size),
         "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
         "acks=all", "enable.idempotence=true"],
        check=True, capture_output=True, text=True, timeout=900).stdout
    m = None
    for line in out.splitlines():
        m = PP_LINE.search(line) or m
    if m is None:
        raise RuntimeError(f"no summary line from ProducerPerformance:\n{out}")
    return {"records_per_s": float(m.group(2)), "mb_per_s": float(m.group(3)),
            "p50_ms": float(m.group(6)), "p99_ms": float(m.group(8))}


def child(*args, timeout=900):
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                         text=True, timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


def median(values):
    return statistics.median(values) if values else float("nan")


def write_markdown(results, args, started):
    def med(broker, workload, key):
        return median([r[key] for r in results if r["broker"] == broker and r["workload"] == workload])

    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [BEGIN, "", "## End to end: oncelog-broker against Apache Kafka 4.4", "",
             f"Measured {started:%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores ({cpu}), "
             f"{platform.system()} {platform.release()}, by `crates/broker/e2e/run.sh "
             f"--rounds {args.rounds}`: {args.rounds} rounds, interleaved (each round starts "
             "with another broker), medians. The three brokers run side by side on this shared "
             "machine for the whole run (other engineers' builds ran at the same time); each "
             "run gets a fresh one-partition topic; segments of "
             f"{SEGMENT_BYTES >> 20} MiB; every producer is idempotent with acks=all. "
             "Kafka 4.4.0 (KRaft, one node, from Maven Central via "
             "`../shared/kafka-oracle/kafka.sh`) keeps its default `flush.messages`: it "
             "acknowledges from the page cache, without fsync. **oncelog** (the default "
             "`--flush manual`) acknowledges acks=all only after fdatasync, shared by the "
             "requests in flight; **oncelog never** (`--flush never`) acknowledges from the "
             "page cache as Kafka does.", "",
             "Cells: records/s, then p50 / p99 latency in ms. Ratios: throughput "
             "oncelog / Kafka, and p99 Kafka / oncelog (above 1: oncelog's p99 is lower).", "",
             "| workload | Kafka | oncelog (fsync) | ratio: throughput, p99 | oncelog never | ratio: throughput, p99 |",
             "|---|---|---|---|---|---|"]
    names = {
        "pp-100": f"ProducerPerformance, {args.records_100:,} x 100 B",
        "pp-1k": f"ProducerPerformance, {args.records_1k:,} x 1 KB",
        "rd-100": f"librdkafka producer, {args.records_100:,} x 100 B",
        "rd-1k": f"librdkafka producer, {args.records_1k:,} x 1 KB",
        "e2e": f"produce to consume, librdkafka, {args.e2e_rate:,} records/s x {args.e2e_seconds} s",
    }

    def cell(broker, workload):
        p50, p99 = med(broker, workload, "p50_ms"), med(broker, workload, "p99_ms")
        if workload == "e2e":
            return f"{p50:.1f} / {p99:.1f}"
        return f"{med(broker, workload, 'records_per_s'):,.0f}/s, {p50:.1f} / {p99:.1f}"

    def ratio(broker, workload):
        p99 = med("kafka", workload, "p99_ms") / med(broker, workload, "p99_ms")
        if workload == "e2e":
            return f"p99 **{p99:.2f}x**"
        thr = med(broker, workload, "records_per_s") / med("kafka", workload, "records_per_s")
        return f"**{thr:.2f}x**, p99 **{p99:.2f}x**"

    for workload in ["pp-100", "pp-1k", "rd-100", "rd-1k", "e2e"]:
        if not any(r["workload"] == workload for r in results):
            continue
        lines.append(f"| {names[workload]} | {cell('kafka', workload)} | "
                     f"{cell('oncelog', workload)} | {ratio('oncelog', workload)} | "
                     f"{cell('oncelog-never', workload)} | {ratio('oncelog-never', workload)} |")
    lines += ["", "Every run (records/s, p50 ms, p99 ms):", "", "```text"]
    for r in results:
        rate = f"{r['records_per_s']:>10,.0f}/s" if "records_per_s" in r else " " * 12
        lines.append(f"round {r['round']} {r['workload']:<7} {r['broker']:<14} {rate} "
                     f"p50 {r['p50_ms']:8.1f}  p99 {r['p99_ms']:8.1f}")
    lines += ["```", "", END]
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = open(path).read() if os.path.exists(path) else ""
    block = "\n".join(lines) + "\n"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block.rstrip("\n") + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    with open(path, "w") as f:
        f.write(text)
    print("\n".join(lines))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "rdkafka-produce":
        return rdkafka_produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    if len(sys.argv) > 1 and sys.argv[1] == "e2e":
        return e2e(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    if len(sys.argv) > 1 and sys.argv[1] == "e2e-consume":
        return e2e_consume(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker-bin", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records-100", type=int, default=1_000_000)
    parser.add_argument("--records-1k", type=int, default=300_000)
    parser.add_argument("--e2e-rate", type=int, default=5_000)
    parser.add_argument("--e2e-seconds", type=int, default=10)
    parser.add_argument("--workloads", default="pp-100,pp-1k,rd-100,rd-1k,e2e")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/")
    parser.add_argument("--kafka-port", type=int, default=19192)
    parser.add_argument("--oncelog-port", type=int, default=19292)
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    started = datetime.datetime.now(datetime.timezone.utc)
    work = tempfile.mkdtemp(prefix="broker-e2e-")
    kafka_work = os.path.join(work, "kafka")
    oncelog_log = open(os.path.join(work, "oncelog.log"), "w")
    procs = []
    results = []
    try:
        brokers = [start_kafka(kafka_work, args.kafka_port)]
        for name, port, extra in [("oncelog", args.oncelog_port, []),
                                  ("oncelog-never", args.oncelog_port + 1, ["--flush", "never"])]:
            proc, broker = start_oncelog(name, args.broker_bin, os.path.join(work, name), port,
                                         oncelog_log, extra)
            procs.append(proc)
            brokers.append(broker)
        for rnd in range(1, args.rounds + 1):
            # Every round starts with another broker, so none always runs first or last.
            order = brokers[rnd % len(brokers):] + brokers[:rnd % len(brokers)]
            for workload in workloads:
                for broker in order:
                    topic = f"{workload}-r{rnd}"
                    if workload == "pp-100":
                        r = producer_performance(broker, topic, args.records_100, 100)
                    elif workload == "pp-1k":
                        r = producer_performance(broker, topic, args.records_1k, 1000)
                    elif workload == "rd-100":
                        r = child("rdkafka-produce", broker.bootstrap, topic, str(args.records_100), "100")
                    elif workload == "rd-1k":
                        r = child("rdkafka-produce", broker.bootstrap, topic, str(args.records_1k), "1000")
                    else:
                        r = child("e2e", broker.bootstrap, topic, str(args.e2e_rate), str(args.e2e_seconds))
                    r.update(broker=broker.name, workload=workload, round=rnd)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        subprocess.run(["bash", KAFKA_SH, "stop", kafka_work], check=False)
        oncelog_log.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.no_write:
        print(json.dumps(results))
    else:
        write_markdown(results, args, started)


if __name__ == "__main__":
    main()
