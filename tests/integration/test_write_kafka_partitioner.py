"""Keyed records land where Java producers and Spark's own Kafka sink put them.

The expected partition of every key is computed here, independently of librdkafka, with
Java's ``org.apache.kafka.common.utils.Utils.murmur2`` written out in Python and checked
against known values of the Java implementation.
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

import pytest

from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.write_kafka_rows import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_MASK = 0xFFFFFFFF


def java_murmur2(data: bytes) -> int:
    """``Utils.murmur2(data)`` of the Java client: a signed 32-bit int."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = (int.from_bytes(data[i:i + 4], "little") * m) & _MASK
        k = ((k ^ (k >> 24)) * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    if length % 4:  # the switch's fall-through cases 3, 2, 1
        h = ((h ^ int.from_bytes(data[body:], "little")) * m) & _MASK
    h = ((h ^ (h >> 13)) * m) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, num_partitions: int) -> int:
    """The Java producer's partition of a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % num_partitions


def test_the_reference_murmur2_matches_the_java_client() -> None:
    """Values of the Java client's ``Utils.murmur2`` (from its unit tests and Akka's Kafka
    sharding tests), covering every tail length."""
    known = {
        b"1": -1993445489, b"12": 126087238, b"123": -267702483, b"1234": -1614185708,
        b"12345": -1188365604, b"21": -973932308, b"foobar": -790332482, b"abc": 479470107,
        b"a-little-bit-long-string": -985981536, b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    }
    assert {key: java_murmur2(key) for key in known} == known


@pytest.mark.parametrize("guarantee", ["none", "at_least_once", "exactly_once"])
def test_keyed_rows_land_in_the_java_producers_partition(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, guarantee: str
) -> None:
    topic = new_topic(partitions=5)
    keys = [f"order-{i}".encode() for i in range(200)]
    expected = {key: java_partition(key, 5) for key in keys}
    # The check tells the partitioners apart: librdkafka's own default (consistent_random)
    # places keys by CRC-32.
    assert any(expected[key] != zlib.crc32(key) % 5 for key in keys)
    df = spark.createDataFrame([(key, b"v") for key in keys],
                               "key binary, value binary").repartition(3)

    write_kafka(df, kafka_config, topic=topic, delivery_guarantee=guarantee,
                transactional_id_prefix="test-partitioner",
                write_id=f"partitioner-{uuid.uuid4().hex}")

    placed = {r.key: r.partition for r in read_committed(kafka_config, topic)}
    assert placed == expected
