"""The native reader and writer (``airflow_provider_kafka_spark._native``) field by field,
against confluent-kafka's view of the same records, without Spark."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from airflow_provider_kafka_spark.errors import ConfigurationError, WriteConfigError
from airflow_provider_kafka_spark.offsets import PartitionRange
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, native_settings
from airflow_provider_kafka_spark.spark import read_split
from airflow_provider_kafka_spark.spark.native import librdkafka_version
from airflow_provider_kafka_spark.spark.write.plan import TaskPlan
from airflow_provider_kafka_spark.spark.write.producer import check_producer_config
from airflow_provider_kafka_spark.spark.write.task import write_partition
from tools.write_kafka_rows import read_committed

pytestmark = pytest.mark.integration

NOW_MS = 1_790_000_000_000


def test_the_module_carries_its_own_librdkafka() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", librdkafka_version())


def test_read_split_returns_each_field_as_produced(kafka_config: dict[str, Any],
                                                   new_topic: Any) -> None:
    """Null keys, tombstones, records without headers, headers with a null value and repeated
    keys, CreateTime timestamps; a sub-range [2, 6) gives exactly offsets 2..5."""
    topic = new_topic(partitions=1)
    producer = Producer({**kafka_config, "enable.idempotence": True})
    produced = [
        (b"k0", b"v0", None),
        (None, b"v1", [("a", b"1")]),
        (b"k2", None, [("a", None), ("a", b"again")]),
        (b"", b"", []),
        (b"k4", b"v4" * 1000, [("h", b"")]),
        (None, None, None),
        (b"k6", b"v6", None),
    ]
    for i, (key, value, headers) in enumerate(produced):
        producer.produce(topic, value=value, key=key, partition=0, timestamp=NOW_MS + i,
                         headers=headers)
    assert producer.flush(30) == 0

    batches = list(read_split(PartitionRange(topic, 0, 0, 7), kafka_config))
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(7))
    assert table.column("key").to_pylist() == [k for k, _, _ in produced]
    assert table.column("value").to_pylist() == [v for _, v, _ in produced]
    assert table.column("topic").to_pylist() == [topic] * 7
    assert table.column("partition").to_pylist() == [0] * 7
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        (NOW_MS + i) * 1000 for i in range(7)]
    assert table.column("timestampType").to_pylist() == [0] * 7  # CreateTime
    # librdkafka sends an empty header list as no headers (confluent-kafka sees None too).
    expected_headers = [None if not h else [{"key": k, "value": v} for k, v in h]
                        for _, _, h in produced]
    assert table.column("headers").to_pylist() == expected_headers

    middle = pa.Table.from_batches(list(read_split(PartitionRange(topic, 0, 2, 6), kafka_config,
                                                   include_headers=False)))
    assert middle.column("offset").to_pylist() == [2, 3, 4, 5]
    assert "headers" not in middle.column_names


def test_write_partition_produces_each_column_as_given(kafka_config: dict[str, Any],
                                                       new_topic: Any) -> None:
    """string and binary values, null keys, tombstones, explicit partitions and timestamps,
    headers with a null value, rows without headers: what confluent-kafka reads back."""
    topic = new_topic(partitions=2)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array(["k0", None, "k2", "k3"], pa.string()),
        "value": pa.array([b"v0", b"v1", None, b"v3"], pa.binary()),
        "partition": pa.array([1, 0, 1, None], pa.int32()),
        "timestamp": pa.array([(NOW_MS + i) * 1000 for i in range(3)] + [None],
                              pa.timestamp("us", tz="UTC")),
        "headers": pa.array([[{"key": "a", "value": b"1"}], None,
                             [{"key": "a", "value": None}, {"key": "b", "value": b""}], []],
                            header_type),
    })
    outcome = write_partition(TaskPlan(kafka_config=kafka_config, guarantee="at_least_once",
                                       topic=topic), 0, [batch])
    assert (outcome.records, outcome.topics) == (4, (topic,))

    records = sorted(read_committed(kafka_config, topic), key=lambda r: r.key or b"")
    by_key = {r.key: r for r in records}
    assert len(records) == 4
    assert (by_key[b"k0"].partition, by_key[b"k0"].value, by_key[b"k0"].headers,
            by_key[b"k0"].timestamp) == (1, b"v0", (("a", b"1"),), NOW_MS)
    assert (by_key[None].partition, by_key[None].value, by_key[None].headers,
            by_key[None].timestamp) == (0, b"v1", None, NOW_MS + 1)
    assert (by_key[b"k2"].partition, by_key[b"k2"].value, by_key[b"k2"].headers,
            by_key[b"k2"].timestamp) == (1, None, (("a", None), ("b", b"")), NOW_MS + 2)
    # No timestamp: the producer stamps the time of producing.
    assert by_key[b"k3"].value == b"v3" and by_key[b"k3"].timestamp > NOW_MS + 2


def test_an_unknown_setting_is_a_clear_error_of_ours(kafka_config: dict[str, Any],
                                                     new_topic: Any) -> None:
    """librdkafka refuses what it does not know: the native reader and writer say which key,
    and nothing is produced."""
    topic = new_topic(partitions=1)
    bad = {**kafka_config, "fetch.max.wait.millis": "10"}
    with pytest.raises(ConfigurationError, match=r"fetch\.max\.wait\.millis"):
        list(read_split(PartitionRange(topic, 0, 0, 1), bad, poll_timeout=2))
    with pytest.raises(WriteConfigError, match=r"fetch\.max\.wait\.millis.*Nothing was written"):
        check_producer_config(KafkaConfig.of(bad), "at_least_once")  # as write_kafka passes it
    with pytest.raises(WriteConfigError, match=r"fetch\.max\.wait\.millis"):
        write_partition(TaskPlan(kafka_config=bad, guarantee="at_least_once", topic=topic), 0,
                        [pa.RecordBatch.from_pydict({"value": [b"x"]})])
    assert read_committed(kafka_config, topic, isolation_level="read_uncommitted") == []


def test_a_python_object_in_the_config_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"kafka_config\['oauth_cb'\].*sasl\.oauthbearer"):
        native_settings({"bootstrap.servers": "x:1", "oauth_cb": print})
    assert native_settings({"a": True, "b": 5, "c": "s"}) == {"a": "true", "b": "5", "c": "s"}


def test_topic_argument_wins_over_a_topic_column(kafka_config: dict[str, Any],
                                                 new_topic: Any) -> None:
    """As Spark's sink: with topic= every row goes there, whatever (even null) its column says."""
    topic = new_topic(partitions=1)
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b"],
                                        "topic": pa.array([None, "elsewhere"], pa.string())})
    outcome = write_partition(TaskPlan(kafka_config=kafka_config, guarantee="at_least_once",
                                       topic=topic), 0, [batch])
    assert (outcome.records, outcome.topics) == (2, (topic,))
    assert sorted(r.value for r in read_committed(kafka_config, topic)) == [b"a", b"b"]
