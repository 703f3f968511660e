"""Demo: resolve one hour of Kafka data to exact offset ranges against a local broker.

Run by ``make demo``. Starts the project's local broker, (re)creates ``demo.events`` with
3 partitions, produces 10,000 events spread over three past hours, resolves the middle hour
``[h1, h2)`` and prints a per-partition table. Stops the broker it started.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_provider_kafka_spark.offsets import Subscription, Timestamp, resolve_offsets

ROOT = Path(__file__).resolve().parent.parent
BROKER = ROOT / "scripts" / "kafka-broker"
RUN_DIR = ROOT / ".cache" / "kafka" / "demo"
TOPIC = "demo.events"
EVENTS = 10_000


def start_broker() -> str:
    out = subprocess.run([sys.executable, str(BROKER), "start", "--dir", str(RUN_DIR),
                          "--port", "9092"], check=True, capture_output=True, text=True)
    return out.stdout.strip().split("=", 1)[1]


def recreate_topic(admin: AdminClient) -> None:
    if TOPIC in admin.list_topics(timeout=30).topics:
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        while TOPIC in admin.list_topics(timeout=30).topics:
            time.sleep(0.2)
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[TOPIC].result(30)


def produce_events(config: dict[str, str], first_hour: datetime) -> list[int]:
    """Produce EVENTS events with increasing timestamps over 3 hours; return their timestamps."""
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    start_ms = int(first_hour.timestamp() * 1000)
    step = 3 * 3600 * 1000 / EVENTS
    rng = random.Random(7)
    stamps = []
    for i in range(EVENTS):
        ts = start_ms + int(i * step)
        user = f"user-{rng.randrange(50)}"
        event = {"id": i, "user": user, "action": rng.choice(["view", "click", "buy"])}
        producer.produce(TOPIC, key=user.encode(), value=json.dumps(event).encode(), timestamp=ts)
        producer.poll(0)
        stamps.append(ts)
    if producer.flush(60):
        raise RuntimeError("events still in flight after 60 s")
    return stamps


def count_in_range(config: dict[str, str], topic: str, partition: int, start: int,
                   stop: int) -> int:
    """Read [start, stop) back with a plain consumer, as a cross-check of the table."""
    if start == stop:
        return 0
    consumer = Consumer({**config, "group.id": "demo-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, start)])
    seen = 0
    while True:
        msg = consumer.poll(10)
        if msg is None or msg.error():
            raise RuntimeError(f"could not read {topic}/{partition} back: {msg and msg.error()}")
        seen += 1
        if msg.offset() >= stop - 1:
            break
    consumer.close()
    return seen


def main() -> None:
    bootstrap = start_broker()
    try:
        config = {"bootstrap.servers": bootstrap}
        admin = AdminClient(config)
        recreate_topic(admin)
        now = datetime.now(UTC)
        h0 = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
        h1, h2 = h0 + timedelta(hours=1), h0 + timedelta(hours=2)
        stamps = produce_events(config, h0)
        print(f"broker {bootstrap}: produced {EVENTS} events to {TOPIC} from {h0:%H:%M} to "
              f"{h0 + timedelta(hours=3):%H:%M} UTC")

        ranges = resolve_offsets(config, Subscription.topics([TOPIC]),
                                 Timestamp.from_datetime(h1), Timestamp.from_datetime(h2))
        print(f"\nresolved [{h1:%Y-%m-%d %H:%M}, {h2:%H:%M}) UTC, {ranges.isolation_level}:")
        print(f"{'partition':>9} {'start':>7} {'stop':>7} {'count':>7} {'read back':>9}")
        for r in ranges:
            read_back = count_in_range(config, r.topic, r.partition, r.start, r.stop)
            print(f"{r.partition:>9} {r.start:>7} {r.stop:>7} {r.size:>7} {read_back:>9}")
        expected = sum(1 for ts in stamps if h1.timestamp() * 1000 <= ts < h2.timestamp() * 1000)
        print(f"{'total':>9} {'':>7} {'':>7} {ranges.total():>7}   (events produced in the hour: "
              f"{expected})")
        if ranges.total() != expected:
            raise SystemExit("the resolved ranges do not match the produced hour")
        print("\nXCom-ready ranges:", ranges.to_json()[:160], "...")
    finally:
        subprocess.run([sys.executable, str(BROKER), "stop", "--dir", str(RUN_DIR)], check=True)


if __name__ == "__main__":
    main()
