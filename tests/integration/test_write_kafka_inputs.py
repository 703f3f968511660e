"""write_kafka's bad inputs: every one a clear error of this package before any side effect.

A row-level problem sits in the LAST of three Spark partitions, so that a check done only inside
the tasks would come after the other tasks wrote (and, with exactly_once, committed) their rows.
Each case asserts the error (its column, bad value and partition index), that nothing at all
was produced to any target topic (read_uncommitted) and that the ledger holds nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_kafka_spark.errors import KafkaWriteError, WriteConfigError
from airflow_provider_kafka_spark.spark.write.plan import TaskPlan
from airflow_provider_kafka_spark.spark.write.task import write_partition
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.processes import free_port
from tools.write_kafka_rows import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

GUARANTEES = ["none", "at_least_once", "exactly_once"]
ROWS = 30  # ids 0..29 in 3 partitions of spark.range: partition 2 holds ids 20..29
BAD_ID = 25
MISSING = f"missing-{uuid.uuid4().hex[:10]}"


def _everything(kafka_config: dict[str, Any], topic: str) -> list[Any]:
    """Every record of ``topic``, committed or not."""
    return read_committed(kafka_config, topic, isolation_level="read_uncommitted")


def _df(spark: Any, a: str, b: str, case: str) -> Any:
    """Rows routed by a ``topic`` column to ``a`` (2 partitions) and ``b`` (1 partition), with
    ``partition`` and ``headers`` columns; the row ``BAD_ID`` (in Spark partition 2) is bad as
    ``case`` says (``unknown topic``: it goes to the topic ``MISSING``, which does not
    exist)."""
    from pyspark.sql import functions as F

    df = spark.range(0, ROWS, numPartitions=3)
    bad = F.col("id") == BAD_ID
    topic = F.when(F.col("id") % 2 == 0, F.lit(a)).otherwise(F.lit(b))
    partition = F.lit(None).cast("int")
    header = F.struct(F.lit("h").alias("key"), F.lit(b"x").alias("value"))
    if case == "null topic":
        topic = F.when(bad, F.lit(None).cast("string")).otherwise(topic)
    elif case == "negative partition":
        partition = F.when(bad, F.lit(-1)).otherwise(partition)
    elif case == "partition beyond the topic":
        topic, partition = F.when(bad, F.lit(a)).otherwise(topic), F.when(bad, F.lit(5))
    elif case == "null header key":
        header = F.when(bad, F.struct(F.lit(None).cast("string").alias("key"),
                                      F.lit(b"x").alias("value"))).otherwise(header)
    elif case == "unknown topic":
        topic = F.when(bad, F.lit(MISSING)).otherwise(topic)
    else:
        raise AssertionError(case)
    return df.select(
        topic.alias("topic"),
        F.concat(F.lit("k"), df.id).alias("key"),
        F.concat(F.lit("v"), df.id).alias("value"),
        partition.cast("int").alias("partition"),
        F.array(header).alias("headers"),
    )


BAD_ROWS = {
    "null topic": r"column 'topic' is null in 1 row of Spark partition 2\b.*pass topic=",
    "negative partition": r"column 'partition' holds -1 in Spark partition 2\b.*>= 0",
    "partition beyond the topic":
        r"column 'partition' holds 5 in Spark partition 2\b.* has partitions 0\.\.1",
    "null header key": r"column 'headers' has a header with a null key in 1 row of Spark "
                       r"partition 2\b",
    "unknown topic": rf"topic '{MISSING}' \(column 'topic', first in Spark partition 2\) does "
                     r"not exist .* create it",
}


@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_in_the_last_partition_fails_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any, case: str,
    guarantee: str,
) -> None:
    a, b = new_topic(partitions=2), new_topic(partitions=1)
    ledger = new_topic(partitions=1, prefix="ledger", **{"cleanup.policy": "compact"})

    with pytest.raises(WriteConfigError, match=BAD_ROWS[case]):
        write_kafka(_df(spark, a, b, case), kafka_config, delivery_guarantee=guarantee,
                    transactional_id_prefix="test-inputs", write_id=f"bad-{uuid.uuid4().hex}",
                    ledger_topic=ledger)

    assert _everything(kafka_config, a) == []
    assert _everything(kafka_config, b) == []
    assert _everything(kafka_config, ledger) == []
    assert MISSING not in kafka_admin.list_topics(timeout=30).topics


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_topic_argument_naming_no_topic_fails_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, guarantee: str
) -> None:
    ledger = f"ledger-{uuid.uuid4().hex[:10]}"
    df = spark.range(0, ROWS, numPartitions=3).selectExpr("CAST(id AS STRING) AS value")

    with pytest.raises(WriteConfigError, match=rf"topic='{MISSING}' does not exist on the "
                                               r"cluster at bootstrap.servers='[^']+': create it"):
        write_kafka(df, kafka_config, topic=MISSING, delivery_guarantee=guarantee,
                    transactional_id_prefix="test-inputs", write_id=f"bad-{uuid.uuid4().hex}",
                    ledger_topic=ledger)

    topics = kafka_admin.list_topics(timeout=30).topics
    assert MISSING not in topics and ledger not in topics


def _plan(kafka_config: dict[str, Any], topic: str) -> TaskPlan:
    return TaskPlan(kafka_config=kafka_config, guarantee="at_least_once", topic=topic)


def _batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array([b"v0", b"v1"]), **columns})


def test_a_task_refuses_a_null_header_key_or_a_negative_partition_too(
    kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """The driver's pre-pass finds these; a task checks again (e.g. ``write_partition`` called
    without the driver) and never writes a null key as the string 'None'."""
    topic = new_topic(partitions=1)
    headers = pa.array([[("h", b"x")], [(None, b"y")]],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))

    with pytest.raises(WriteConfigError, match=r"task 3: column 'headers' has a header with a "
                                               r"null key"):
        write_partition(_plan(kafka_config, topic), 3, [_batch(headers=headers)])
    with pytest.raises(WriteConfigError, match=r"task 3: column 'partition' holds -2"):
        write_partition(_plan(kafka_config, topic), 3,
                        [_batch(partition=pa.array([0, -2], pa.int32()))])

    assert _everything(kafka_config, topic) == []


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_an_unreachable_cluster_is_a_package_error_within_seconds(
    spark: Any, kafka_admin: Any, guarantee: str
) -> None:
    """Nothing listens on the port: the driver's metadata probe fails fast, before any Spark
    job, naming bootstrap.servers and what to do."""
    bootstrap = f"127.0.0.1:{free_port()}"
    df = spark.range(0, ROWS, numPartitions=3).selectExpr("CAST(id AS STRING) AS value")
    ledger = f"ledger-{uuid.uuid4().hex[:10]}"
    jobs_before = _spark_jobs(spark)

    started = time.monotonic()
    with pytest.raises(KafkaWriteError) as caught:
        write_kafka(df, {"bootstrap.servers": bootstrap}, topic="out",
                    delivery_guarantee=guarantee, transactional_id_prefix="test-inputs",
                    write_id=f"unreachable-{uuid.uuid4().hex}", ledger_topic=ledger)
    elapsed = time.monotonic() - started

    message = str(caught.value)
    assert f"bootstrap.servers='{bootstrap}'" in message
    assert "reachable from the Spark driver" in message and "metadata_timeout_s" in message
    assert "Nothing was written" in message
    assert not isinstance(caught.value, WriteConfigError)
    assert elapsed < 20, elapsed  # a guard only: the probe's default timeout is 10 s
    assert _spark_jobs(spark) == jobs_before


def _spark_jobs(spark: Any) -> int:
    tracker = spark.sparkContext.statusTracker()
    return len(tracker.getJobIdsForGroup(None))


@pytest.mark.parametrize(("guarantee", "config", "match"), [
    ("none", {"no.such.property": "1"}, r'No such configuration property: "no.such.property"'),
    ("at_least_once", {"linger.ms": "soon"},
     r'Invalid value for configuration property "(linger|queue.buffering.max).ms"'),
    ("exactly_once", {"message.timeout.ms": "120000"},
     r"`message.timeout.ms` must be set <= `transaction.timeout.ms`"),
])
def test_a_bad_kafka_config_is_a_write_config_error_before_anything_runs(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any,
    guarantee: str, config: dict[str, Any], match: str,
) -> None:
    topic = new_topic(partitions=1)
    ledger = f"ledger-{uuid.uuid4().hex[:10]}"
    df = spark.range(0, ROWS, numPartitions=3).selectExpr("CAST(id AS STRING) AS value")

    with pytest.raises(WriteConfigError, match=rf"kafka_config is not a valid .*{match}"):
        write_kafka(df, {**kafka_config, **config}, topic=topic, delivery_guarantee=guarantee,
                    transactional_id_prefix="test-inputs", write_id=f"cfg-{uuid.uuid4().hex}",
                    ledger_topic=ledger, transaction_timeout_ms=60000)

    assert _everything(kafka_config, topic) == []
    assert ledger not in kafka_admin.list_topics(timeout=30).topics


def test_column_errors_say_what_to_do(spark: Any, kafka_config: dict[str, Any]) -> None:
    df = spark.range(0, 3).selectExpr("CAST(id AS STRING) AS key", "id AS value")

    with pytest.raises(WriteConfigError, match=r"column 'value' has type bigint; expected "
                                               r"binary or string: cast it"):
        write_kafka(df, kafka_config, topic="out", delivery_guarantee="none")
    with pytest.raises(WriteConfigError, match=r"needs a 'value' column .*: add or rename one"):
        write_kafka(df.select("key"), kafka_config, topic="out", delivery_guarantee="none")
    with pytest.raises(WriteConfigError, match=r"needs a 'topic' column or the topic= argument: "
                                               r"pass topic="):
        write_kafka(df.selectExpr("key AS value"), kafka_config, delivery_guarantee="none")
    with pytest.raises(WriteConfigError, match=r"needs write_id: pass an id"):
        write_kafka(df.selectExpr("key AS value"), kafka_config, topic="out",
                    transactional_id_prefix="p")
    with pytest.raises(WriteConfigError, match=r"transaction_timeout_ms must be a positive int "
                                               r"\(milliseconds\), got 0; pass e.g. 60000"):
        write_kafka(df.selectExpr("key AS value"), kafka_config, topic="out",
                    transactional_id_prefix="p", write_id="w", transaction_timeout_ms=0)


def test_a_write_id_too_long_for_its_ledger_record_fails_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    """The ledger record's key and value both hold the write_id: one whose record would exceed
    the producer's message.max.bytes (librdkafka's default, or kafka_config's) is refused with
    the limit before any topic is created or any record produced; one at the stated limit is
    written."""
    topic = new_topic(partitions=1)
    missing_ledger = f"ledger-{uuid.uuid4().hex[:10]}"
    df = spark.range(0, ROWS, numPartitions=3).selectExpr("CAST(id AS STRING) AS value")

    with pytest.raises(WriteConfigError, match=r"message\.max\.bytes=1000000 \(librdkafka's "
                                               r"default\).*shorter write_id"):
        write_kafka(df, kafka_config, topic=topic, transactional_id_prefix="test-inputs",
                    write_id="w" * 1_000_000, ledger_topic=missing_ledger)
    small = {**kafka_config, "message.max.bytes": 20000}
    with pytest.raises(WriteConfigError, match=r"message\.max\.bytes=20000 \(kafka_config\)"
                                               r".*shorter write_id") as caught:
        write_kafka(df, small, topic=topic, transactional_id_prefix="test-inputs",
                    write_id="w" * 20000, ledger_topic=missing_ledger)

    assert _everything(kafka_config, topic) == []
    assert missing_ledger not in kafka_admin.list_topics(timeout=30).topics

    stated = re.search(r"at most ([\d,]+) characters", str(caught.value))
    assert stated is not None, str(caught.value)
    longest = int(stated.group(1).replace(",", ""))
    with pytest.raises(WriteConfigError, match=r"message\.max\.bytes=20000"):
        write_kafka(df, small, topic=topic, transactional_id_prefix="test-inputs",
                    write_id="w" * (longest + 1), ledger_topic=missing_ledger)
    ledger = new_topic(partitions=1, prefix="ledger", **{"cleanup.policy": "compact"})
    result = write_kafka(df, small, topic=topic, transactional_id_prefix="test-inputs",
                         write_id="w" * longest, ledger_topic=ledger)
    assert result.records_written == ROWS
    assert sorted(r.value for r in read_committed(kafka_config, topic)) == \
        sorted(str(i).encode() for i in range(ROWS))
    # One entry per task (besides them, the write's slot record and its pool lease records).
    assert len([r for r in read_committed(kafka_config, ledger)
                if (r.key or b"").startswith(b'["v2",')]) == 3
