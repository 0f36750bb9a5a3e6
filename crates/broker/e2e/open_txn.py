"""Leaves transaction `TXN_ID` open (Ongoing) in its coordinator, for `kafka_tools.sh`.

    python open_txn.py HOST:PORT TOPIC PARTITION TXN_ID

A confluent-kafka (librdkafka) transactional producer begins a transaction, sends three
records to the partition, waits for their acknowledgement, and exits without committing or
aborting (os._exit: no close, no abort on the way out). Its transaction timeout is 10 minutes,
so the transaction stays Ongoing while `kafka-transactions list` and `describe` look at it.
Prints `open: TXN_ID`.
"""

import os
import sys

from confluent_kafka import Producer


def main():
    address, topic, partition, txn_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    producer = Producer(
        {
            "bootstrap.servers": address,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 600000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"open-%d" % i, partition=partition)
    if producer.flush(30) != 0:
        raise SystemExit("open_txn: records not acknowledged")
    print(f"open: {txn_id}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
