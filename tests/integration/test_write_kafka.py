"""write_kafka against the real broker and real Spark: contents per guarantee, errors, zombies."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import (
    DeliveryError,
    ProducerFencedError,
    TransactionError,
    TransactionInitTimeoutError,
    WriteConfigError,
)
from airflow_provider_kafka_spark.spark.write.plan import ExactlyOnce, ExactlyOnceWrite
from airflow_provider_kafka_spark.spark.write.task import write_partition
from airflow_provider_kafka_spark.spark.write.writer import write_kafka
from tools.write_kafka_rows import (
    expected_keys,
    partition_batches,
    read_committed,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

T0 = datetime(2024, 5, 1, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def _rows(n: int) -> list[tuple[Any, ...]]:
    """(key, value, partition, headers, timestamp): every column write_kafka accepts."""
    return [
        (f"k{i}", f"v{i}".encode(), i % 2, [(f"h{i}", b"x")], T0 + timedelta(seconds=i))
        for i in range(n)
    ]


def _full_df(spark: Any, n: int) -> Any:
    schema = ("key string, value binary, partition int, "
              "headers array<struct<key:string,value:binary>>, timestamp timestamp")
    return spark.createDataFrame(_rows(n), schema).repartition(3)


def _expected(n: int) -> Counter[tuple[Any, ...]]:
    return Counter(
        (i % 2, f"k{i}".encode(), f"v{i}".encode(), ((f"h{i}", b"x"),), T0_MS + 1000 * i)
        for i in range(n)
    )


def _contents(kafka_config: dict[str, Any], topic: str) -> Counter[tuple[Any, ...]]:
    return Counter((r.partition, r.key, r.value, r.headers, r.timestamp)
                   for r in read_committed(kafka_config, topic))


@pytest.mark.parametrize("guarantee", ["none", "at_least_once", "exactly_once"])
def test_each_guarantee_writes_every_row_once_with_all_columns(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any, guarantee: str
) -> None:
    topic = new_topic(partitions=2)
    result = write_kafka(_full_df(spark, 300), kafka_config, topic=topic,
                         delivery_guarantee=guarantee, transactional_id_prefix="test-modes",
                         write_id=f"modes-{uuid.uuid4().hex}")

    assert _contents(kafka_config, topic) == _expected(300)
    assert result.records_written == 300
    assert sorted(result.records_per_task) == [0, 1, 2]
    assert result.skipped_tasks == ()
    assert result.topics == (topic,)


def test_exactly_once_routes_by_topic_column_and_a_rerun_writes_nothing(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    a, b = new_topic(partitions=3), new_topic(partitions=1)
    df = spark.createDataFrame(
        [(a if i % 3 else b, f"k{i}", f"v{i}") for i in range(600)],
        "topic string, key string, value string",
    ).repartition(4)
    write_id = f"route-{uuid.uuid4().hex}"

    first = write_kafka(df, kafka_config, transactional_id_prefix="test-route", write_id=write_id)
    again = write_kafka(df, kafka_config, transactional_id_prefix="test-route", write_id=write_id)

    in_a = Counter(r.key for r in read_committed(kafka_config, a))
    in_b = Counter(r.key for r in read_committed(kafka_config, b))
    assert in_a == Counter(f"k{i}".encode() for i in range(600) if i % 3)
    assert in_b == Counter(f"k{i}".encode() for i in range(600) if not i % 3)
    assert first.records_written == 600 and first.skipped_tasks == ()
    assert first.topics == tuple(sorted([a, b]))
    assert again.records_written == 0 and again.skipped_tasks == (0, 1, 2, 3)
    assert again.topics == first.topics


def test_at_least_once_fails_when_a_record_is_not_delivered(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    topic = new_topic(partitions=1, **{"max.message.bytes": "1000"})
    df = spark.createDataFrame([("small", b"x" * 10), ("big", b"x" * 5000)],
                               "key string, value binary")

    with pytest.raises(DeliveryError, match=rf"1 of \d+ records were not delivered; "
                                            rf"first failure on {topic}\[0\]"):
        write_kafka(df, kafka_config, topic=topic, delivery_guarantee="at_least_once")


def test_exactly_once_retries_an_aborted_transaction_a_bounded_number_of_times(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    topic = new_topic(partitions=1, **{"max.message.bytes": "1000"})
    df = spark.createDataFrame([("small", b"x" * 10), ("big", b"x" * 5000)],
                               "key string, value binary").coalesce(1)

    with pytest.raises(TransactionError,
                       match=r"was aborted .* not retried further \(3 attempts\)"):
        write_kafka(df, kafka_config, topic=topic, transactional_id_prefix="test-abort",
                    write_id=f"abort-{uuid.uuid4().hex}", max_transaction_retries=2)
    assert read_committed(kafka_config, topic) == []


def test_bad_arguments_fail_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    topic = new_topic(partitions=1)
    ledger = f"ledger-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    eos = {"topic": topic, "ledger_topic": ledger, "write_id": "w"}

    with pytest.raises(WriteConfigError,
                       match="needs transactional_id_prefix .* unique to this application"):
        write_kafka(df, kafka_config, **eos)
    with pytest.raises(WriteConfigError, match="needs transactional_id_prefix"):
        write_kafka(df, kafka_config, transactional_id_prefix="  ", **eos)
    with pytest.raises(WriteConfigError, match="needs write_id"):
        write_kafka(df, kafka_config, topic=topic, transactional_id_prefix="p", ledger_topic=ledger)
    with pytest.raises(WriteConfigError, match=r"transaction_timeout_ms=900001 is above broker "
                       r"\d+'s transaction.max.timeout.ms=900000"):
        write_kafka(df, kafka_config, transactional_id_prefix="p", transaction_timeout_ms=900001,
                    **eos)
    with pytest.raises(WriteConfigError,
                       match=r"unknown columns \['extra'\]; the accepted columns are"):
        write_kafka(df.withColumn("extra", df.key), kafka_config, transactional_id_prefix="p",
                    **eos)
    with pytest.raises(WriteConfigError, match="needs a 'value' column"):
        write_kafka(df.select("key"), kafka_config, transactional_id_prefix="p", **eos)
    with pytest.raises(WriteConfigError, match="needs a 'topic' column or the topic= argument"):
        write_kafka(df, kafka_config, delivery_guarantee="at_least_once")
    with pytest.raises(WriteConfigError, match="delivery_guarantee='twice' is not valid"):
        write_kafka(df, kafka_config, topic=topic, delivery_guarantee="twice")
    with pytest.raises(WriteConfigError, match=r"kafka_config sets \['transactional.id'\]"):
        write_kafka(df, {**kafka_config, "transactional.id": "mine"}, transactional_id_prefix="p",
                    **eos)

    assert ledger not in kafka_admin.list_topics(timeout=30).topics
    assert read_committed(kafka_config, topic) == []


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_dataframe_with_two_value_columns_is_refused_before_anything_is_written(
    spark: Any, kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any, guarantee: str
) -> None:
    topic, ledger = new_topic(partitions=1), f"ledger-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([("k", "v1", "v2")], "key string, value string, other string")
    twice = df.select("key", "value", df.other.alias("value"))

    with pytest.raises(WriteConfigError, match=r"cannot tell the columns \['value', "
                                               r"'value'\] of df apart.*own name.*Nothing was "
                                               r"written"):
        write_kafka(twice, kafka_config, topic=topic, delivery_guarantee=guarantee,
                    transactional_id_prefix="p", write_id="w", ledger_topic=ledger)

    assert ledger not in kafka_admin.list_topics(timeout=30).topics
    assert read_committed(kafka_config, topic) == []


def test_a_list_of_dicts_instead_of_a_dataframe_is_refused_before_anything_is_written(
    kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    topic, ledger = new_topic(partitions=1), f"ledger-{uuid.uuid4().hex[:8]}"
    rows = [{"key": "k", "value": "v"}]

    with pytest.raises(WriteConfigError, match=r"needs a pyspark DataFrame as df, got a list.*"
                                               r"spark.createDataFrame\(rows\)"):
        write_kafka(rows, kafka_config, topic=topic,  # type: ignore[arg-type]
                    transactional_id_prefix="p", write_id="w", ledger_topic=ledger)

    assert ledger not in kafka_admin.list_topics(timeout=30).topics
    assert read_committed(kafka_config, topic) == []


def test_init_transactions_timeout_names_the_transaction_state_settings(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    topic = new_topic(partitions=1)
    df = spark.createDataFrame([("k", "v")], "key string, value string")

    with pytest.raises(TransactionInitTimeoutError, match="transaction.state.log.min.isr"):
        write_kafka(df, kafka_config, topic=topic, transactional_id_prefix="test-init",
                    write_id=f"init-{uuid.uuid4().hex}", init_transactions_timeout_s=0.001)


def test_a_zombie_with_the_same_prefix_and_write_id_is_fenced_and_rows_appear_once(
    kafka_config: dict[str, Any], kafka_admin: Any, new_topic: Any
) -> None:
    """Two attempts of task 0 overlap: the zombie has produced half its rows when the newer
    attempt fences it, writes and commits; the zombie's commit then fails as fenced."""
    topic = new_topic(partitions=2)
    rows = 400
    with ExactlyOnceWrite(kafka_config, topic, ExactlyOnce(
            "test-zombie", f"zombie-{uuid.uuid4().hex}", transaction_timeout_ms=30000)) as write:
        plan = replace(write.prepare(kafka_admin, num_partitions=1),
                       expected_rows=(rows,))
        zombie_produced_half, newer_done = threading.Event(), threading.Event()
        zombie_error: list[BaseException] = []

        def zombie_batches() -> Any:
            for n, batch in enumerate(partition_batches(0, rows, batch_rows=100)):
                if n == 2:
                    zombie_produced_half.set()
                    assert newer_done.wait(60)
                yield batch

        def zombie() -> None:
            try:
                write_partition(plan, 0, zombie_batches())
            except BaseException as exc:  # handed to the test thread
                zombie_error.append(exc)

        thread = threading.Thread(target=zombie)
        thread.start()
        assert zombie_produced_half.wait(60)
        newer = write_partition(plan, 0, partition_batches(0, rows, batch_rows=100))
        newer_done.set()
        thread.join(60)

        assert newer.records == rows and not newer.skipped
        assert len(zombie_error) == 1 and isinstance(zombie_error[0], ProducerFencedError)
        assert "unique per application" in str(zombie_error[0])
        keys = Counter(r.key for r in read_committed(kafka_config, topic))
        assert keys == expected_keys(1, rows)
        # A third attempt (e.g. an Airflow re-run) finds the task in the ledger and skips it.
        third = write_partition(plan, 0, partition_batches(0, rows, batch_rows=100))
        assert third.skipped and third.records == 0
        assert Counter(r.key for r in read_committed(kafka_config, topic)) == expected_keys(1, rows)


def _ledger(new_topic: Any, partitions: int = 1) -> str:
    """A fresh compacted ledger topic, so that the literal write ids below never meet the
    entries of an earlier test run."""
    return new_topic(partitions=partitions, prefix="ledger", **{"cleanup.policy": "compact"})


def _keyed_df(spark: Any, rows: int, partitions: int) -> Any:
    """Rows ``k0..k<rows-1>``; partition ``i`` holds a contiguous block of them."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, numPartitions=partitions)
    return df.select(F.concat(F.lit("k"), df.id).alias("key"),
                     F.concat(F.lit("v"), df.id).alias("value"))


def _keys(kafka_config: dict[str, Any], topic: str) -> Counter[bytes | None]:
    return Counter(r.key for r in read_committed(kafka_config, topic))


def _expected_keys(ids: range, copies: int = 1) -> Counter[bytes | None]:
    return Counter({f"k{i}".encode(): copies for i in ids})


def test_two_applications_with_the_same_write_id_each_write_their_own_rows(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """Two applications (own prefixes, own topics) both name their write ``2024-05-01``: the
    ledger keeps their tasks apart."""
    ledger, out_a, out_b = _ledger(new_topic), new_topic(partitions=2), new_topic(partitions=2)
    df = _keyed_df(spark, 10, partitions=2)

    a = write_kafka(df, kafka_config, topic=out_a, transactional_id_prefix="app-a",
                    write_id="2024-05-01", ledger_topic=ledger)
    b = write_kafka(df, kafka_config, topic=out_b, transactional_id_prefix="app-b",
                    write_id="2024-05-01", ledger_topic=ledger)
    b_again = write_kafka(df, kafka_config, topic=out_b, transactional_id_prefix="app-b",
                          write_id="2024-05-01", ledger_topic=ledger)

    assert (a.records_written, a.skipped_tasks, a.topics) == (10, (), (out_a,))
    assert (b.records_written, b.skipped_tasks, b.topics) == (10, (), (out_b,))
    assert (b_again.records_written, b_again.skipped_tasks, b_again.topics) == \
        (0, (0, 1), (out_b,))
    assert _keys(kafka_config, out_a) == _expected_keys(range(10))
    assert _keys(kafka_config, out_b) == _expected_keys(range(10))


def test_a_write_id_that_is_a_prefix_of_an_earlier_write_id_is_a_different_write(
    spark: Any, kafka_config: dict[str, Any], new_topic: Any
) -> None:
    """``orders/clean`` is not ``orders/clean/2024-05-04``, though the one starts with the other
    and a slash (both in the same ledger partition here: the ledger has one)."""
    ledger, out = _ledger(new_topic), new_topic(partitions=1)
    df = _keyed_df(spark, 10, partitions=2)

    daily = write_kafka(df, kafka_config, topic=out, transactional_id_prefix="orders",
                        write_id="orders/clean/2024-05-04", ledger_topic=ledger)
    whole = write_kafka(df, kafka_config, topic=out, transactional_id_prefix="orders",
                        write_id="orders/clean", ledger_topic=ledger)

    assert (daily.records_written, daily.skipped_tasks) == (10, ())
    assert (whole.records_written, whole.skipped_tasks) == (10, ())
    assert _keys(kafka_config, out) == _expected_keys(range(10), copies=2)
