#!/usr/bin/env python3
"""librdkafka (confluent-kafka) client for the broker's tests. One JSON object per line.

  produce BOOTSTRAP TOPIC COUNT [--wave K] [--pace-ms MS] [--size BYTES] [--prefix P]
          [--no-idempotence] [--spread]
      Idempotent producer (acks=all, retries on; --no-idempotence for the negative control). Messages are P-<i>, padded to BYTES. After
      every K messages it waits for their delivery reports, so each wave goes out as its own
      produce request. Prints {"event":"delivered","i":..,"partition":..,"offset":..} per
      message (or "failed" with the error), then {"event":"done",...}. --spread sends each
      message to a random partition (sticky partitioning off), so every partition gets some.
  consume BOOTSTRAP TOPIC COUNT [--timeout S] [--group G]
      Consumer with a group id and assign() of every partition from the beginning (so it
      uses FindCoordinator, OffsetCommit and OffsetFetch). Prints {"event":"consumed",
      "partition":..,"offset":..,"value":..} per record, commits, prints the committed offsets
      read back, then {"event":"done",...}.
"""
import argparse
import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def out(**obj):
    print(json.dumps(obj), flush=True)


def produce(args):
    conf = {
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": not args.no_idempotence,
        "acks": "all",
        "linger.ms": 1,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "message.timeout.ms": 120000,
        "socket.timeout.ms": 10000,
    }
    if args.spread:
        # Keyless messages go to a random partition each, not a batch's worth to one.
        conf["sticky.partitioning.linger.ms"] = 0
    producer = Producer(conf)
    delivered = failed = 0

    def report(i):
        def cb(err, msg):
            nonlocal delivered, failed
            if err is not None:
                failed += 1
                out(event="failed", i=i, error=str(err))
            else:
                delivered += 1
                out(event="delivered", i=i, partition=msg.partition(), offset=msg.offset())
        return cb

    for i in range(args.count):
        value = f"{args.prefix}-{i}".ljust(args.size, ".")
        while True:
            try:
                producer.produce(args.topic, value=value.encode(), on_delivery=report(i))
                break
            except BufferError:
                producer.poll(0.05)
        if args.wave and (i + 1) % args.wave == 0:
            producer.flush(120)
            if args.pace_ms:
                time.sleep(args.pace_ms / 1000)
    left = producer.flush(120)
    out(event="done", delivered=delivered, failed=failed, unflushed=left)


def consume(args):
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group or f"oncelog-test-{args.topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.max.ms": 500,
    })
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    consumed = 0
    deadline = time.time() + args.timeout
    while consumed < args.count and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            out(event="error", error=str(msg.error()))
            continue
        consumed += 1
        out(event="consumed", partition=msg.partition(), offset=msg.offset(),
            value=msg.value().decode().rstrip("."))
    if consumed and not args.no_commit:
        consumer.commit(asynchronous=False)
        for tp in consumer.committed([TopicPartition(args.topic, p) for p in partitions], timeout=30):
            out(event="committed", partition=tp.partition, offset=tp.offset)
    consumer.close()
    out(event="done", consumed=consumed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["produce", "consume"])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("count", type=int)
    parser.add_argument("--wave", type=int, default=0)
    parser.add_argument("--pace-ms", type=int, default=0)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--prefix", default="m")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--group")
    parser.add_argument("--no-idempotence", action="store_true")
    parser.add_argument("--spread", action="store_true")
    # Nothing committed (the partitions are assigned, never joined through the group): a
    # cluster-mode broker has no group coordinator yet.
    parser.add_argument("--no-commit", action="store_true")
    args = parser.parse_args()
    try:
        produce(args) if args.command == "produce" else consume(args)
    except KafkaException as e:
        out(event="fatal", error=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
