"""A write_id names one write of one input: re-using it for other input is refused.

Every ledger entry records its task's input fingerprint (rows, topics, content digest); a later
write with the same ``(transactional_id_prefix, write_id)`` compares its own pre-pass with the
committed entries before anything is written.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_provider_kafka_spark.errors import LedgerError
from airflow_provider_kafka_spark.spark.write.ledger import LedgerEntry, TaskInput
from airflow_provider_kafka_spark.spark.write.plan import ExactlyOnce, ExactlyOnceWrite
from airflow_provider_kafka_spark.spark.write.task import write_partition
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.write_kafka_rows import partition_batches, read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PREFIX = "test-fingerprint"


def _ledger(new_topic: Any) -> str:
    return new_topic(partitions=1, prefix="ledger", **{"cleanup.policy": "compact"})


def _df(spark: Any, rows: int, value: str = "v") -> Any:
    """Rows ``k0..k<rows-1>`` with values ``<value><i>``, in 2 Spark partitions."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, numPartitions=2)
    return df.select(F.concat(F.lit("k"), df.id).alias("key"),
                     F.concat(F.lit(value), df.id).alias("value"))


def _contents(kafka_config: dict[str, Any], topic: str) -> Counter[tuple[Any, Any]]:
    return Counter((r.key, r.value) for r in
                   read_committed(kafka_config, topic, isolation_level="read_uncommitted"))


def _expected(rows: int, value: str = "v") -> Counter[tuple[Any, Any]]:
    return Counter((f"k{i}".encode(), f"{value}{i}".encode()) for i in range(rows))


@pytest.mark.parametrize(("change", "differs"), [
    ("other values", r"content digest: [0-9a-f]{16} committed, [0-9a-f]{16} now"),
    ("more rows", r"rows: 10 committed, 15 now"),
    ("another topic", r"topics: \['t-\w+'\] committed, \['t-\w+'\] now"),
])
def test_a_reused_write_id_with_other_input_is_refused_and_writes_nothing(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, change: str, differs: str
) -> None:
    out, other, ledger = new_topic(partitions=1), new_topic(partitions=1), _ledger(new_topic)
    write_id = f"reused-{uuid.uuid4().hex}"
    first = write_kafka(_df(spark, 20), kafka_config, topic=out, transactional_id_prefix=PREFIX,
                        write_id=write_id, ledger_topic=ledger)
    assert first.records_written == 20
    df, topic = {"other values": (_df(spark, 20, value="w"), out),
                 "more rows": (_df(spark, 30), out),
                 "another topic": (_df(spark, 20), other)}[change]

    with pytest.raises(LedgerError) as caught:
        write_kafka(df, kafka_config, topic=topic, transactional_id_prefix=PREFIX,
                    write_id=write_id, ledger_topic=ledger)

    message = str(caught.value)
    assert f"write_id {write_id!r} of transactional_id_prefix {PREFIX!r}" in message
    assert "already committed task 0 from other input" in message
    assert "use a new write_id" in message and "Nothing was written" in message
    assert re.search(differs, message), message
    assert _contents(kafka_config, out) == _expected(20)
    assert _contents(kafka_config, other) == Counter()


def test_the_same_rows_in_another_order_are_the_same_input(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """The digest is a sum over rows: the order of rows within a partition does not matter."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    write_id = f"order-{uuid.uuid4().hex}"
    df = _df(spark, 20)

    write_kafka(df, kafka_config, topic=out, transactional_id_prefix=PREFIX, write_id=write_id,
                ledger_topic=ledger)
    again = write_kafka(df.sortWithinPartitions(df.value.desc()), kafka_config, topic=out,
                        transactional_id_prefix=PREFIX, write_id=write_id, ledger_topic=ledger)

    assert (again.records_written, again.skipped_tasks) == (0, (0, 1))
    assert _contents(kafka_config, out) == _expected(20)


def _write_entries(kafka_config: dict[str, Any], ledger: str,
                   entries: list[LedgerEntry]) -> None:
    producer = Producer(kafka_config)
    for entry in entries:
        producer.produce(ledger, entry.value(), entry.key().encode(), 0)
    assert producer.flush(30) == 0


def test_entries_without_a_digest_are_compared_by_rows_and_topics(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """Format-2 entries written before fingerprints (no digest): their content is unknown, but
    their row count and topics are still compared."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    same, fewer = f"nodigest-{uuid.uuid4().hex}", f"nodigest-{uuid.uuid4().hex}"
    _write_entries(kafka_config, ledger, [
        LedgerEntry(PREFIX, same, 0, 2, 10, (out,)),
        LedgerEntry(PREFIX, fewer, 0, 2, 7, (out,)),
    ])

    result = write_kafka(_df(spark, 20), kafka_config, topic=out, transactional_id_prefix=PREFIX,
                         write_id=same, ledger_topic=ledger)
    with pytest.raises(LedgerError, match=r"task 0 from other input \(rows: 7 committed, 10 now"):
        write_kafka(_df(spark, 20), kafka_config, topic=out, transactional_id_prefix=PREFIX,
                    write_id=fewer, ledger_topic=ledger)

    assert (result.skipped_tasks, result.records_per_task) == ((0,), {1: 10})
    assert _contents(kafka_config, out) == Counter(
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(10, 20))


def test_a_task_finding_its_entry_from_other_input_fails(
    kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    """Two writes of one write_id with different input both planned before either committed:
    the second one's task sees the first one's entry after fencing, and refuses it."""
    out, ledger = new_topic(partitions=1), _ledger(new_topic)
    options = ExactlyOnce(PREFIX, f"race-{uuid.uuid4().hex}", ledger_topic=ledger,
                          transaction_timeout_ms=30000)

    with ExactlyOnceWrite(kafka_config, out, options) as one, \
            ExactlyOnceWrite(kafka_config, out, options) as other:
        first = one.prepare(kafka_admin, 1, [TaskInput(100, (out,), "00000000000000aa")])
        second = other.prepare(kafka_admin, 1, [TaskInput(100, (out,), "00000000000000bb")])
        write_partition(first, 0, partition_batches(0, 100, batch_rows=50))

        with pytest.raises(LedgerError, match=r"already committed task 0 from other input "
                                              r"\(content digest: 00000000000000aa committed, "
                                              r"00000000000000bb now\)"):
            write_partition(second, 0, partition_batches(0, 100, batch_rows=50))
    assert sum(_contents(kafka_config, out).values()) == 100


def test_the_pre_pass_counts_every_partition_and_sums_hashes_as_documented(spark: Any) -> None:
    """The pre-pass (a narrow mapInArrow stage, no RDD API) counts empty partitions too, and
    its digest is the documented one: the sum of Spark's xxhash64 of (topic, key, value, ...)
    modulo 2**64, here checked against that sum computed by Spark SQL in decimal(38,0)."""
    from pyspark.sql import functions as F

    from airflow_provider_kafka_spark.spark.write.prepass import scan_input as _scan_input

    # 5 partitions, the last two empty; 3,000 rows so the signed hash sums overflow int64.
    base = spark.range(0, 5000, numPartitions=5).where("id < 3000")
    df = base.select(F.concat(F.lit("k"), base.id).alias("key"),
                     F.concat(F.lit("v"), base.id).alias("value"),
                     F.when(base.id % 7 == 0, None).otherwise(
                         (base.id % 3).cast("int")).alias("partition"))
    expected = df.groupBy(F.spark_partition_id().alias("i")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.xxhash64(F.lit("out"), "key", "value", "partition").cast("decimal(38,0)"))
        .alias("sum"), F.min("partition").alias("low"), F.max("partition").alias("high"))
    by_index = {r["i"]: r for r in expected.collect()}

    scan = _scan_input(df, "out", digest=True)

    assert scan.num_partitions == df.rdd.getNumPartitions() == 5
    assert [t.records for t in scan.inputs()] == [1000, 1000, 1000, 0, 0]
    assert [t.digest for t in scan.inputs()][:3] == [
        f"{int(by_index[i]['sum']) % 2**64:016x}" for i in range(3)]
    assert [(g.index, g.topic, g.min_partition, g.max_partition) for g in scan.groups] == [
        (i, "out", by_index[i]["low"], by_index[i]["high"]) for i in range(3)]
