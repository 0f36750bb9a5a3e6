#!/usr/bin/env python3
"""The seeds' consumer, made exactly-once with oncelog's processed-id store. One JSON object per
line.

  eos BOOTSTRAP TOPIC GROUP STORES ONCELOG [--idle S] [--hang-after N] [--no-store]
      A librdkafka consumer in GROUP (subscribe(), read_committed, manual commits). For every
      partition it is assigned it runs `ONCELOG processed serve STORES/<topic>-<p>` (one store
      per input partition, opened by whichever member owns it; a store still held by the
      previous owner is retried until its lock is free). Per record: the side effect is
      recorded with the message id (the value) and the position after it in one atomic
      append; {"event":"applied",..} if the store says new, {"event":"skipped",..} if it was
      handled already; then the offset is committed to the group. --hang-after N: after the
      N-th applied record, prints {"event":"hanging"} and sleeps before committing (the test
      kills it there: after its side effect, before its commit). --no-store: the plain
      at-least-once consumer, every delivery applied (the control).
      SIGTERM: stops as the idle timeout does (the record in hand is finished and committed
      first), so a test can stop it as soon as it has what it waits for.
"""
import argparse
import json
import os
import signal
import subprocess
import time

from confluent_kafka import Consumer, KafkaException


def out(**obj):
    print(json.dumps(obj), flush=True)


class Store:
    def __init__(self, oncelog, path):
        deadline = time.time() + 60
        while True:
            self.proc = subprocess.Popen([oncelog, "processed", "serve", path],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            ready = json.loads(self.proc.stdout.readline())
            if ready.get("ready"):
                return
            self.proc.wait()
            if ready.get("error") != "locked" or time.time() > deadline:
                raise RuntimeError(f"cannot open {path}: {ready}")
            time.sleep(0.2)

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["eos"])
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("stores")
    p.add_argument("oncelog")
    p.add_argument("--idle", type=float, default=20)
    p.add_argument("--timeout", type=float, default=150)
    p.add_argument("--hang-after", type=int, default=0)
    p.add_argument("--no-store", action="store_true")
    a = p.parse_args()
    stores = {}
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    })

    def on_assign(consumer, partitions):
        if not a.no_store:
            for tp in partitions:
                name = f"{tp.topic}-{tp.partition}"
                stores[tp.partition] = Store(a.oncelog, os.path.join(a.stores, name))
        out(event="assigned", partitions=sorted(tp.partition for tp in partitions))

    def on_revoke(consumer, partitions):
        for tp in partitions:
            store = stores.pop(tp.partition, None)
            if store:
                store.close()
        out(event="revoked", partitions=sorted(tp.partition for tp in partitions))

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    c.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    applied = 0
    start = time.time()
    last = None
    while not stopping and time.time() - start < a.timeout:
        if last is not None and time.time() - last > a.idle:
            break
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            out(event="error", error=str(msg.error()))
            continue
        last = time.time()
        value = msg.value().decode()
        at = dict(partition=msg.partition(), offset=msg.offset(), value=value)
        if a.no_store:
            new = True
        else:
            answer = stores[msg.partition()].call(
                op="record", id=value, source=f"{msg.topic()}-{msg.partition()}",
                offset=msg.offset() + 1, effect=f"applied {value}")
            if "error" in answer:
                out(event="store_error", **at, answer=answer)
                continue
            new = answer["new"]
        out(event="applied" if new else "skipped", **at)
        applied += int(new)
        if a.hang_after and applied >= a.hang_after:
            out(event="hanging", **at)
            time.sleep(3600)
        try:
            c.commit(message=msg, asynchronous=False)
        except KafkaException as e:
            out(event="commit_failed", **at, error=str(e))
    c.close()
    for store in stores.values():
        store.close()
    out(event="done", applied=applied)


if __name__ == "__main__":
    main()
