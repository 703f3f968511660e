"""The native producer of a ``write_kafka`` task: built from
:func:`~airflow_provider_kafka_spark.offsets.config.producer_config` (once on the driver to
check the config, once per task to write), and fed the task's Arrow batches, checked and cast
to the types it takes, with errors that say what to do about a record it refused.

Nothing here imports Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    DeliveryError,
    WriteConfigError,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig, native_settings
from airflow_provider_kafka_spark.options import DeliveryGuarantee
from airflow_provider_kafka_spark.spark.native import BatchProducer
from airflow_provider_kafka_spark.spark.write.checks import rows_text


def new_producer(config: Mapping[str, Any], guarantee: DeliveryGuarantee) -> BatchProducer:
    """The native producer of ``config`` (:func:`producer_config` of ``guarantee``); delivery
    reports are counted for ``at_least_once``.

    Raises:
        WriteConfigError: a setting librdkafka refuses, or a Python object in the config.
    """
    try:
        return BatchProducer(native_settings(config), guarantee == "at_least_once")
    except ConfigurationError as exc:
        raise WriteConfigError(f"{exc} Nothing was written.") from None
    except KafkaException as exc:
        # librdkafka's messages name the property, never its value.
        raise WriteConfigError(
            f"kafka_config is not a valid producer config for delivery_guarantee="
            f"{guarantee!r}: {exc.args[0].str()}. Fix or remove that setting (see librdkafka's "
            "CONFIGURATION.md). Nothing was written."
        ) from None


def check_producer_config(
    kafka_config: KafkaConfig,
    guarantee: DeliveryGuarantee,
    *,
    transactional_id: str | None = None,
    transaction_timeout_ms: int | None = None,
) -> None:
    """Build the tasks' producer once on the driver, so that librdkafka rejects a bad setting
    (an unknown property, an invalid value, ``message.timeout.ms`` above
    ``transaction.timeout.ms``, a SASL mechanism this build lacks) before anything runs. The
    producer sends nothing: with ``exactly_once`` it never calls ``init_transactions()``.

    Raises:
        WriteConfigError: see :func:`producer_config`, or librdkafka refused the config.
    """
    config = kafka_config.producer(guarantee, transactional_id=transactional_id,
                                   transaction_timeout_ms=transaction_timeout_ms)
    new_producer(config, guarantee)


def produce_batches(
    producer: BatchProducer,
    batches: Iterable[pa.RecordBatch],
    topic: str | None,
    index: int,
) -> tuple[int, set[str]]:
    """Produce every row of task ``index`` (the native producer, no Python object per row);
    return the row count and the topics written to.

    Raises:
        WriteConfigError: a row has a null ``topic``, a negative ``partition`` or a header with
            a null key. The driver's pre-pass finds these before anything is written; this is
            the task's own check (e.g. ``write_partition`` called without the driver).
        DeliveryError: librdkafka refused a record (unknown topic or partition, too large).
        KafkaException: any other error of the producer (fenced, a transaction state).
    """
    records = 0
    topics: set[str] = set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        producible = producible_batch(batch, index, topic)
        if topic is not None:
            topics.add(topic)
        else:
            topics.update(pc.unique(producible.column("topic")).to_pylist())
        try:
            records += producer.produce_batch(producible, topic)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _RECORD_CODES or len(exc.args) < 2:
                raise
            row = exc.args[1]
            target = topic if topic is not None else producible.column("topic")[row].as_py()
            partition = (producible.column("partition")[row].as_py()
                         if "partition" in producible.schema.names else None)
            where = f"{target}[{partition}]" if partition is not None else repr(target)
            raise DeliveryError(
                f"task {index}: could not produce a record to {where}: "
                f"{error.str()}. {remedy(error)}"
            ) from None
    return records, topics


# The column types the native producer takes (producible_batch brings batches to them).
_PRODUCE_TYPES = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(),
                  "partition": pa.int32(), "timestamp": pa.int64()}


def producible_batch(batch: pa.RecordBatch, index: int, topic: str | None) -> pa.RecordBatch:
    """The batch's columns to produce, checked and in the native producer's types; without
    its ``topic`` column when ``topic`` names the target, and without ``headers`` when no row
    has a header.

    Raises:
        WriteConfigError: a null ``topic``, a negative ``partition``, a header with a null key.
    """
    names = batch.schema.names
    columns: dict[str, pa.Array] = {}
    for name, wanted in _PRODUCE_TYPES.items():
        if name in names and not (name == "topic" and topic is not None):
            column = batch.column(name)
            columns[name] = column if column.type == wanted else column.cast(wanted)
    if "topic" in columns and columns["topic"].null_count:
        nulls = columns["topic"].null_count
        raise WriteConfigError(
            f"task {index}: column 'topic' is null in {rows_text(nulls)}: every row needs a "
            "topic. Fill the column or pass topic=."
        )
    if "partition" in columns:
        lowest = pc.min(columns["partition"]).as_py()
        if lowest is not None and lowest < 0:
            raise WriteConfigError(
                f"task {index}: column 'partition' holds {lowest}: a partition number must "
                "be >= 0 (null lets the partitioner choose). Fix the column."
            )
    if "headers" in names:
        headers = batch.column("headers")
        entries = pc.list_flatten(headers)
        if entries.null_count or entries.field("key").null_count:
            raise WriteConfigError(
                f"task {index}: column 'headers' has a header with a null key: Kafka header keys "
                "must be strings (the Java client rejects a null key too). Fill or drop such "
                "headers, e.g. filter(headers, h -> h.key IS NOT NULL)."
            )
        if len(entries):
            columns["headers"] = headers
        # Else no row has a header, and the column is left out (a row without the column,
        # like one with a null or empty list, gets no headers): an empty entries array may
        # come without offsets. Spark 4.1's Arrow (Java 18) sends a zero-length string or
        # binary array with an empty offsets buffer, which pyarrow takes but hands on through
        # the C Data Interface, where an array always has length + 1 offsets: the native
        # producer would read its first offset from past the buffer (issue 43).
    return pa.RecordBatch.from_pydict(columns)


# produce() errors about the record itself (not the producer's state): a DeliveryError.
_RECORD_CODES = frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
                           KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.MSG_SIZE_TOO_LARGE,
                           KafkaError._MSG_TIMED_OUT, KafkaError._INVALID_ARG})


_REMEDIES: tuple[tuple[frozenset[int], str], ...] = (
    (frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}),
     "The topic does not exist (was it deleted after write_kafka checked it?): create it, then "
     "re-run the write."),
    (frozenset({KafkaError._UNKNOWN_PARTITION}),
     "The partition does not exist (the topic has fewer partitions): fix the 'partition' "
     "column (null lets the partitioner choose), then re-run the write."),
    (frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}),
     "The record is larger than the producer's message.max.bytes or the topic's "
     "max.message.bytes: raise those limits or make the record smaller."),
    (frozenset({KafkaError._MSG_TIMED_OUT}),
     "It was not acknowledged within message.timeout.ms: check that the brokers are up and "
     "reachable from the Spark executors, then re-run the write."),
)


def remedy(err: KafkaError) -> str:
    """What to do about a record that could not be produced or delivered with ``err``."""
    code = err.code()
    for codes, text in _REMEDIES:
        if code in codes:
            return text
    return "Fix the cause, then re-run the write."
