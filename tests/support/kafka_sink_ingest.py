"""One test body, run on each Spark line the package supports (``tests/integration`` under
``.venv``, ``tests/tables`` under ``.venv-tables``): ``ingest`` into a ``KafkaSink`` of
records with headers, without, and with some, read back from the output topic as an exact
multiset of key, value, headers and timestamp.

The Arrow batches Spark hands the writer are kept small (:data:`ROWS_PER_ARROW_BATCH`), so a
task gets batches in which no record has a header, and, for an exactly-once write of the
records as read, batches without the readers' split-end row: Spark 4.1's Arrow (Java 18)
sends the empty header entries of such a batch without an offsets buffer (issue 43).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from confluent_kafka import Producer

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.sinks import KafkaSink
from airflow_provider_kafka_spark.spark import ingest
from tools.kafka_records import read_committed

__all__ = ["CASES", "HeaderShape", "RECORDS_PER_PARTITION", "ROWS_PER_ARROW_BATCH",
           "ingest_into_kafka_sink"]

RECORDS_PER_PARTITION = 1000
ROWS_PER_ARROW_BATCH = 300
"""``spark.sql.execution.arrow.maxRecordsPerBatch`` during the ingest."""
ARROW_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"

HeaderShape = Literal["as_read", "null", "left_out"]
"""``as_read``: the records as read (an empty list where a record has no header; with
``exactly_once`` the readers' split-end rows come along); ``null``: a SQL query sets every
record's headers to null (a transformed input: ``write_kafka`` counts it in a pre-pass);
``left_out``: ``include_headers=False``."""

CASES: tuple[tuple[str, HeaderShape], ...] = (
    ("at_least_once", "as_read"), ("exactly_once", "as_read"), ("exactly_once", "null"),
    ("at_least_once", "left_out"))
"""(delivery guarantee, headers) of each Spark line's test."""

NULL_HEADERS_SQL = ("SELECT key, value, CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>)"
                    " AS headers, timestamp FROM kafka")

Headers = tuple[tuple[str, bytes | None], ...]
Written = tuple[bytes | None, bytes, Headers, int]
"""(key, value, headers, timestamp millis) of a record."""


def source_records(now_ms: int) -> dict[int, list[Written]]:
    """Per partition of a 3-partition topic: no record with a header (0), every record with
    two, one of them with a null value (1), every other record with one (2)."""
    def headers(partition: int, i: int) -> Headers:
        if partition == 1:
            return (("trace", f"t{i}".encode()), ("empty", None))
        if partition == 2 and i % 2:
            return (("trace", f"t{i}".encode()),)
        return ()

    return {p: [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), headers(p, i), now_ms + i)
                for i in range(RECORDS_PER_PARTITION)] for p in range(3)}


def produce_with_headers(config: dict[str, Any], topic: str,
                         records: dict[int, list[Written]]) -> None:
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
    for partition, written in records.items():
        for key, value, headers, ts in written:
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                             headers=list(headers) or None)
            producer.poll(0)
    assert producer.flush(30) == 0, "records still in flight after 30 s"


def ingest_into_kafka_sink(spark: Any, kafka_config: dict[str, Any],
                           new_topic: Callable[..., str], guarantee: str,
                           shape: HeaderShape) -> None:
    """Ingest the 3,000 records of :func:`source_records` into a new topic with a
    ``KafkaSink(delivery_guarantee=guarantee)``; assert the records written and the exact
    multiset a ``read_committed`` consumer reads back."""
    source, out = new_topic(partitions=3), new_topic(partitions=2)
    records = source_records(int(time.time() * 1000) - 60_000)
    produce_with_headers(kafka_config, source, records)
    ranges = resolve_offsets(kafka_config, Subscription.topics([source]), "earliest", "latest")
    sink = KafkaSink(out, kafka_config=kafka_config, delivery_guarantee=guarantee,
                     transactional_id_prefix=f"headers-{out}", write_id=f"headers-{out}")

    before = spark.conf.get(ARROW_BATCH_ROWS, None)
    spark.conf.set(ARROW_BATCH_ROWS, str(ROWS_PER_ARROW_BATCH))
    try:
        result = ingest(spark, ranges, kafka_config, sink,
                        include_headers=shape != "left_out",
                        sql=NULL_HEADERS_SQL if shape == "null" else None)
    finally:
        if before is None:
            spark.conf.unset(ARROW_BATCH_ROWS)
        else:
            spark.conf.set(ARROW_BATCH_ROWS, before)

    total = 3 * RECORDS_PER_PARTITION
    assert (result.records, result.output["records_written"]) == (total, total)
    read_back = Counter((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])
                        for m in read_committed(kafka_config, out, total))
    kept_headers = shape == "as_read"
    assert read_back == Counter((key, value, headers if kept_headers else (), ts)
                                for written in records.values()
                                for key, value, headers, ts in written)
