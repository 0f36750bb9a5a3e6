"""Writes the compaction bench's data shape to a Kafka topic (benches/kafka-cleaner/run.sh).

Same as benches/compaction.rs: 10-record uncompressed batches, 12-byte keys "key-%08d" drawn
from N keys by the same xorshift64 sequence, 100-byte values "v" * 100, no idempotence.
Stops when the topic's partition directory holds at least MB MiB of .log files.

    python produce.py BOOTSTRAP TOPIC PARTITION_DIR MB KEYS
"""
import glob
import os
import sys

from confluent_kafka import Producer

bootstrap, topic, pdir, mb, keys = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
p = Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": False,
    "acks": "1",
    "compression.type": "none",
    "batch.num.messages": 10,
    "linger.ms": 50,
    "queue.buffering.max.messages": 1000000,
    "queue.buffering.max.kbytes": 1048576,
})
M = (1 << 64) - 1
x = 0x9E3779B97F4A7C15
value = b"v" * 100
target = mb << 20


def size():
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(pdir, "*.log")))


n = 0
while True:
    for _ in range(100000):
        x ^= (x << 13) & M
        x ^= x >> 7
        x ^= (x << 17) & M
        while True:
            try:
                p.produce(topic, value=value, key=b"key-%08d" % (x % keys), partition=0)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    p.poll(0)
    p.flush()
    if size() >= target:
        break
print(f"produced {n} records, {size()} bytes of .log", flush=True)
