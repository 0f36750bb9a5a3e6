#!/usr/bin/env python3
"""A librdkafka (confluent-kafka) transactional producer for the broker's transaction tests.
One JSON object per line.

  txns BOOTSTRAP TOPIC COUNT TXN_ID [--abort-every K]
      One transaction per message m-<i>; every K-th is aborted. Prints
      {"event":"committed"|"aborted","i":..} per transaction, then {"event":"done"}.
  hang BOOTSTRAP TOPIC TXN_ID [--timeout-ms MS]
      Begins a transaction, produces z-0..z-4, flushes them, prints {"event":"hanging"} and
      sleeps (the test kills it, or the broker, mid-transaction).
  zombie BOOTSTRAP TOPIC TXN_ID
      Producer A begins a transaction and produces zombie-0; producer B initialises the same
      transactional id (bumping the epoch), produces fresh-0 and commits; A's commit must fail
      fenced. Prints {"event":"fenced","error":..} or {"event":"not_fenced"}.
  transform BOOTSTRAP IN OUT GROUP COUNT TXN_ID [--abort-first]
      Consume-transform-produce: a consumer in GROUP reads IN (read_committed); per record
      one transaction produces out-<value> to OUT and sends the consumer's offsets to the
      transaction (send_offsets_to_transaction); with --abort-first the first transaction is
      aborted and the record is processed again. Prints {"event":"transformed",..}.
"""
import argparse
import json
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def out(**obj):
    print(json.dumps(obj), flush=True)


def producer(bootstrap, txn_id, timeout_ms=60000):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
        "linger.ms": 1,
        "reconnect.backoff.max.ms": 500,
    })
    p.init_transactions(30)
    return p


def txns(a):
    p = producer(a.bootstrap, a.txn_id)
    for i in range(a.count):
        p.begin_transaction()
        p.produce(a.topic, value=f"m-{i}".encode())
        if a.abort_every and i % a.abort_every == a.abort_every - 1:
            # Delivered first: an abort would purge records still queued in the client, and
            # the test wants them in the log.
            p.flush(30)
            p.abort_transaction(30)
            out(event="aborted", i=i)
        else:
            p.commit_transaction(30)
            out(event="committed", i=i)
    out(event="done")


def hang(a):
    p = producer(a.bootstrap, a.txn_id, a.timeout_ms)
    p.begin_transaction()
    for i in range(5):
        p.produce(a.topic, value=f"z-{i}".encode())
    p.flush(30)
    out(event="hanging")
    time.sleep(3600)


def zombie(a):
    first = producer(a.bootstrap, a.txn_id)
    first.begin_transaction()
    first.produce(a.topic, value=b"zombie-0")
    first.flush(30)
    second = producer(a.bootstrap, a.txn_id)
    second.begin_transaction()
    second.produce(a.topic, value=b"fresh-0")
    second.commit_transaction(30)
    out(event="second_committed")
    try:
        first.commit_transaction(30)
        out(event="not_fenced")
    except KafkaException as e:
        out(event="fenced", error=str(e), fatal=e.args[0].fatal())
    out(event="done")


def transform(a):
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 6000,
    })
    c.subscribe([a.input])
    p = producer(a.bootstrap, a.txn_id)
    done = 0
    abort_next = a.abort_first
    deadline = time.time() + 120
    while done < a.count and time.time() < deadline:
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        p.begin_transaction()
        p.produce(a.output, value=b"out-" + msg.value())
        offsets = [TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)]
        p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
        if abort_next:
            abort_next = False
            p.flush(30)
            p.abort_transaction(30)
            out(event="aborted", offset=msg.offset())
            # Read it again from the committed position.
            c.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
            continue
        p.commit_transaction(30)
        done += 1
        out(event="transformed", offset=msg.offset(), value=msg.value().decode())
    committed = c.committed([TopicPartition(a.input, 0)], timeout=30)
    out(event="committed_offset", offset=committed[0].offset)
    c.close()
    out(event="done", transformed=done)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("txns")
    t.add_argument("bootstrap"); t.add_argument("topic"); t.add_argument("count", type=int)
    t.add_argument("txn_id"); t.add_argument("--abort-every", type=int, default=0)
    h = sub.add_parser("hang")
    h.add_argument("bootstrap"); h.add_argument("topic"); h.add_argument("txn_id")
    h.add_argument("--timeout-ms", type=int, default=60000)
    z = sub.add_parser("zombie")
    z.add_argument("bootstrap"); z.add_argument("topic"); z.add_argument("txn_id")
    x = sub.add_parser("transform")
    x.add_argument("bootstrap"); x.add_argument("input"); x.add_argument("output")
    x.add_argument("group"); x.add_argument("count", type=int); x.add_argument("txn_id")
    x.add_argument("--abort-first", action="store_true")
    a = ap.parse_args()
    {"txns": txns, "hang": hang, "zombie": zombie, "transform": transform}[a.command](a)


if __name__ == "__main__":
    main()
