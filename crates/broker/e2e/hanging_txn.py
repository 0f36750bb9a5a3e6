"""Leaves a hanging transaction (KIP-664) in one partition, for `kafka_tools.sh`.

    python hanging_txn.py HOST:PORT TOPIC PARTITION

Over the raw protocol: an InitProducerId without a transactional id (an idempotent producer
id, so no transaction coordinator knows it), then one Produce of a transactional batch of
three records under that id, with timestamps two hours old, and the process exits without
ending the transaction. The partition's last stable offset stays at the batch's offset until
a marker ends it: what `kafka-transactions find-hanging` looks for (an open transaction older
than `--max-transaction-timeout`, 15 minutes, whose producer no coordinator has in a
transaction) and `kafka-transactions abort` clears. Prints `hanging: producer ID EPOCH
offset OFFSET`. Kafka itself accepts such a batch only with
`transaction.partition.verification.enable=false` (with verification on, Kafka 4.4 answers this Produce v3
NOT_ENOUGH_REPLICAS, 19: the transaction has no AddPartitionsToTxn).

The record batch comes from kafka-python's builder (its CRC-32C); the requests are framed here:
InitProducerId v0 and Produce v3, the oldest versions both brokers take, so every field is
spelled out below.
"""

import socket
import struct
import sys
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

INIT_PRODUCER_ID, PRODUCE = 22, 0


def string(s):
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def call(sock, api_key, version, body, correlation):
    header = struct.pack(">hhi", api_key, version, correlation) + string("hanging-txn")
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", read_exact(sock, 4))[0]
    answer = read_exact(sock, size)
    (got,) = struct.unpack(">i", answer[:4])
    if got != correlation:
        raise SystemExit(f"hanging_txn: correlation id {got}, expected {correlation}")
    return answer[4:]


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SystemExit("hanging_txn: the broker closed the connection")
        data += chunk
    return data


def main():
    address, topic, partition = sys.argv[1], sys.argv[2], int(sys.argv[3])
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)

    # InitProducerId v0: transactional_id null, transaction_timeout_ms. A broker just started
    # may answer a retriable COORDINATOR_LOAD_IN_PROGRESS (14) or NOT_COORDINATOR (16) first.
    for attempt in range(1, 61):
        body = string(None) + struct.pack(">i", 60000)
        answer = call(sock, INIT_PRODUCER_ID, 0, body, attempt)
        _throttle, error, producer_id, epoch = struct.unpack(">ihqh", answer[:16])
        if error not in (14, 16):
            break
        time.sleep(0.5)
    if error != 0:
        raise SystemExit(f"hanging_txn: InitProducerId error {error}")

    old = int(time.time() * 1000) - 2 * 3600 * 1000
    batch = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(3):
        batch.append(i, timestamp=old + i, key=None, value=b"hanging-%d" % i, headers=[])
    records = bytes(batch.build())

    # Produce v3: transactional_id (Kafka refuses a transactional batch without one; the id
    # is never registered with a coordinator), acks, timeout_ms, [topic [partition records]].
    body = string("hanging-txn") + struct.pack(">hi", -1, 30000)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">ii", partition, len(records)) + records
    answer = call(sock, PRODUCE, 3, body, 100)
    # [topic: name, [partition, error_code, base_offset, log_append_time]], throttle
    (topics,) = struct.unpack(">i", answer[:4])
    (name_len,) = struct.unpack(">h", answer[4:6])
    at = 6 + name_len
    (partitions,) = struct.unpack(">i", answer[at : at + 4])
    got_partition, error, base_offset = struct.unpack(">ihq", answer[at + 4 : at + 18])
    if topics != 1 or partitions != 1 or got_partition != partition or error != 0:
        raise SystemExit(f"hanging_txn: Produce error {error} (partition {got_partition})")
    print(f"hanging: producer {producer_id} {epoch} offset {base_offset}")
    # Exit without EndTxn or a marker: the transaction stays open.


if __name__ == "__main__":
    main()
