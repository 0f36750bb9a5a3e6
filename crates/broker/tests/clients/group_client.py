#!/usr/bin/env python3
"""A librdkafka (confluent-kafka) consumer in a group, for the broker's group tests. One JSON
object per line.

  group BOOTSTRAP TOPIC GROUP [--idle S] [--timeout S] [--stop-after N] [--hang-after N]
      subscribe() to TOPIC in GROUP (JoinGroup, SyncGroup, Heartbeat; the client's own range
      assignor), read with isolation.level=read_committed and manual commits: each record is
      printed {"event":"consumed","partition":..,"offset":..,"value":..} and then committed
      synchronously (offset + 1), then {"event":"committed",..}. Prints {"event":"assigned","partitions":[..]} on every
      rebalance. Stops after S seconds without a record once it had one (or --timeout), or
      after N records (--stop-after), then closes (LeaveGroup) and prints {"event":"done"}.
      --read-uncommitted: isolation.level=read_uncommitted instead.
      --pace-ms MS: sleep MS after each committed record (so one member cannot drain the topic
      before the others have joined).
      --group-protocol consumer: KIP-848's protocol (ConsumerGroupHeartbeat, the broker's
      assignor) instead of the classic one; the session and heartbeat settings are then the
      broker's, as KIP-848 has them.
      --hang-after N: after N records, prints {"event":"hanging"} and sleeps without
      committing the next record it read (a consumer killed between its side effect and its
      commit: the test kills it there).
      SIGTERM: stops as the idle timeout does (the record in hand is finished and committed
      first), so a test can stop it as soon as it has what it waits for.
"""
import argparse
import json
import signal
import time

from confluent_kafka import Consumer, KafkaException


def out(**obj):
    print(json.dumps(obj), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["group"])
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("--idle", type=float, default=8)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--stop-after", type=int, default=0)
    p.add_argument("--hang-after", type=int, default=0)
    p.add_argument("--read-uncommitted", action="store_true")
    p.add_argument("--pace-ms", type=int, default=0)
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    a = p.parse_args()
    config = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted" if a.read_uncommitted else "read_committed",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "reconnect.backoff.max.ms": 500,
    }
    if a.group_protocol == "consumer":
        # KIP-848: the broker owns the session and heartbeat timings.
        del config["session.timeout.ms"], config["heartbeat.interval.ms"]
        config["group.protocol"] = "consumer"
    c = Consumer(config)

    def on_assign(consumer, partitions):
        out(event="assigned", partitions=sorted(tp.partition for tp in partitions))

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    c.subscribe([a.topic], on_assign=on_assign)
    consumed = 0
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
        out(event="consumed", partition=msg.partition(), offset=msg.offset(),
            value=msg.value().decode())
        if a.hang_after and consumed >= a.hang_after:
            out(event="hanging", partition=msg.partition(), offset=msg.offset())
            time.sleep(3600)
        try:
            c.commit(message=msg, asynchronous=False)
            out(event="committed", partition=msg.partition(), offset=msg.offset())
        except KafkaException as e:
            # A commit refused by a rebalance: the record will be read again.
            out(event="commit_failed", partition=msg.partition(), offset=msg.offset(),
                error=str(e))
        consumed += 1
        if a.pace_ms:
            time.sleep(a.pace_ms / 1000)
        if a.stop_after and consumed >= a.stop_after:
            break
    c.close()
    out(event="done", consumed=consumed)


if __name__ == "__main__":
    main()
