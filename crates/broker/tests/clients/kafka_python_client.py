#!/usr/bin/env python3
"""kafka-python client for the broker's tests, with the same commands and output as
confluent_client.py (the consumer has no group id: kafka-python then needs no coordinator)."""
import argparse
import json
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def out(**obj):
    print(json.dumps(obj), flush=True)


def produce(args):
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=1,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=500,
        request_timeout_ms=10000,
        delivery_timeout_ms=120000,
    )
    delivered = failed = 0
    pending = []
    for i in range(args.count):
        value = f"{args.prefix}-{i}".ljust(args.size, ".")
        pending.append((i, producer.send(args.topic, value=value.encode())))
        if args.wave and (i + 1) % args.wave == 0 or i + 1 == args.count:
            producer.flush(120)
            for j, future in pending:
                try:
                    meta = future.get(timeout=120)
                    delivered += 1
                    out(event="delivered", i=j, partition=meta.partition, offset=meta.offset)
                except Exception as e:  # the client's own error types, reported as text
                    failed += 1
                    out(event="failed", i=j, error=repr(e))
            pending = []
            if args.pace_ms:
                time.sleep(args.pace_ms / 1000)
    producer.close(30)
    out(event="done", delivered=delivered, failed=failed, unflushed=0)


def consume(args):
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        reconnect_backoff_max_ms=500,
    )
    deadline = time.time() + args.timeout
    partitions = None
    while partitions is None and time.time() < deadline:
        partitions = consumer.partitions_for_topic(args.topic)
        if partitions is None:
            time.sleep(0.2)
    tps = [TopicPartition(args.topic, p) for p in sorted(partitions or [])]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    consumed = 0
    while consumed < args.count and time.time() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            for r in records:
                consumed += 1
                out(event="consumed", partition=tp.partition, offset=r.offset,
                    value=r.value.decode().rstrip("."))
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
    args = parser.parse_args()
    produce(args) if args.command == "produce" else consume(args)


if __name__ == "__main__":
    main()
