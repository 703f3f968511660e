"""``write_kafka``: a Spark-to-Kafka sink with ``none``, ``at_least_once`` and ``exactly_once``.

The orchestration only, in the order it runs: the argument checks
(:mod:`~airflow_provider_kafka_spark.spark.write.checks`), the cluster's metadata
(:mod:`~airflow_provider_kafka_spark.spark.write.cluster`), the pre-pass over the input
(:mod:`~airflow_provider_kafka_spark.spark.write.prepass`), for ``exactly_once`` the plan
against the ledger (:mod:`~airflow_provider_kafka_spark.spark.write.plan`), then one Spark task
per partition through ``DataFrame.mapInArrow`` (Arrow batches into a native producer; see
:mod:`~airflow_provider_kafka_spark.spark.write.task`). The tasks report what they wrote as one
small row each, which the driver collects into a :class:`WriteResult`. The exactly-once design
is explained in ``docs/exactly-once.md`` and
:mod:`~airflow_provider_kafka_spark.spark.write.transactions`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_kafka_spark.errors import kafka_errors
from airflow_provider_kafka_spark.offsets.cluster import admin_client
from airflow_provider_kafka_spark.offsets.config import KafkaConfig
from airflow_provider_kafka_spark.options import REGISTRY_FORMATS, DeliveryGuarantee
from airflow_provider_kafka_spark.spark.formats.encode import FieldCodec, encode_columns
from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN
from airflow_provider_kafka_spark.spark.write.checks import (
    check_columns,
    check_guarantee,
    check_metadata_timeout,
    rows_need_checking,
)
from airflow_provider_kafka_spark.spark.write.cluster import check_topics_exist, read_cluster
from airflow_provider_kafka_spark.spark.write.plan import (
    ExactlyOnce,
    ExactlyOnceWrite,
    TaskPlan,
)
from airflow_provider_kafka_spark.spark.write.prepass import check_rows, scan_input
from airflow_provider_kafka_spark.spark.write.producer import check_producer_config
from airflow_provider_kafka_spark.spark.write.task import TaskOutcome, write_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_RESULT_SCHEMA = "index int, records long, skipped boolean, topics array<string>"


@dataclass(frozen=True)
class WriteResult:
    """What one ``write_kafka`` call did.

    Attributes:
        delivery_guarantee: ``none``, ``at_least_once`` or ``exactly_once``.
        write_id: the write's id (``exactly_once``), else ``None``.
        records_per_task: records produced by this call, by Spark partition index; a task
            that was skipped is absent.
        skipped_tasks: partition indices an earlier attempt of the same write had already
            committed, so this call wrote nothing for them (``exactly_once`` only).
        topics: every topic the write's records went to, including those written by the
            earlier attempts whose tasks were skipped.
    """

    delivery_guarantee: str
    write_id: str | None
    records_per_task: Mapping[int, int] = field(default_factory=dict)
    skipped_tasks: tuple[int, ...] = ()
    topics: tuple[str, ...] = ()

    @property
    def records_written(self) -> int:
        """Records produced by this call (0 for a re-run of a completed write)."""
        return sum(self.records_per_task.values())


def write_kafka(
    df: DataFrame,
    kafka_config: KafkaConfig | Mapping[str, Any],
    *,
    topic: str | None = None,
    key_format: str = "bytes",
    value_format: str = "bytes",
    key_schema: Any = None,
    value_schema: Any = None,
    schema_registry: Mapping[str, Any] | None = None,
    auto_register_schemas: bool = True,
    subject_name_strategy: str = "topic",
    schema_id_location: str = "payload",
    delivery_guarantee: str = "exactly_once",
    transactional_id_prefix: str | None = None,
    write_id: str | None = None,
    ledger_topic: str = "_kafka_spark_ledger",
    transaction_timeout_ms: int = 60000,
    init_transactions_timeout_s: float = 60.0,
    max_transaction_retries: int = 3,
    retry_buffer_bytes: int = 256 * 1024 * 1024,
    metadata_timeout_s: float = 10.0,
    ledger_since: datetime | None = None,
    input_identity: str | None = None,
) -> WriteResult:
    """Write ``df`` to Kafka, one producer per Spark partition.

    Input columns: ``value`` (binary or string; null writes a tombstone) is required;
    optional ``key`` (binary or string), ``topic`` (string; required unless ``topic=`` is
    given, which then wins), ``partition`` (int; null lets the partitioner choose),
    ``headers`` (array<struct<key string, value binary>>) and ``timestamp`` (timestamp).
    A keyed row without a partition goes where the Java producer and Spark's Kafka sink put
    it (``partitioner=murmur2_random``, unless ``kafka_config`` sets ``partitioner``).
    The end rows of ``read_kafka(..., split_ends=True)`` (its column ``_kafka_spark_split_end``)
    are never written: the tasks strip them.

    Schema Registry formats: with ``value_format`` (or ``key_format``) ``"avro"``,
    ``"protobuf"`` or ``"json_schema"``, the column holds rows (any type for Avro and JSON
    Schema, a struct for Protobuf) that confluent-kafka's serializers encode to Confluent wire
    format with the writer schema ``value_schema``: ``Subject(name, version)``, inline (Avro
    or JSON Schema text, a Protobuf message class), or ``None`` to derive it from the column's
    type (the mapping in :mod:`~airflow_provider_kafka_spark.spark.formats`). The schema is
    fixed on the driver before anything is written: registered under the subject
    ``subject_name_strategy`` names (``"topic"``: ``<topic>-value``; ``"record"``: the record's
    full name; ``"topic_record"``: ``<topic>-<record>``; a ``Subject`` names its own) when
    ``auto_register_schemas``, else looked up there (missing: :class:`SchemaRegistryError`).
    ``schema_id_location="headers"`` puts the schema's id in the ``__value_schema_id`` /
    ``__key_schema_id`` header instead of the payload (the registry must give schemas GUIDs).
    ``schema_registry`` is confluent-kafka's ``SchemaRegistryClient`` config. Every guarantee
    works with them; a row that does not fit the schema fails the pre-pass (nothing written).

    Before anything is written, the driver checks the arguments and ``kafka_config`` (by
    building the tasks' producer once), reads the cluster's metadata (an unreachable cluster
    fails within ``metadata_timeout_s``), and runs one aggregation over ``df`` (the pre-pass;
    ``none``/``at_least_once`` skip it when ``topic=`` is given and there is no ``partition``
    or ``headers`` column) that refuses a null ``topic``, a topic the cluster does not have
    (topics are never auto-created), a ``partition`` that is negative or not in its topic, and
    a header with a null key.

    Delivery guarantees:

    ``none``
        ``acks=1``, bounded flush at the end, delivery reports not checked.
    ``at_least_once``
        Idempotent producer, ``acks=all``, bounded flush, every delivery report checked: one record
        not acknowledged fails the task (:class:`DeliveryError`). A retried task or a re-run
        writes its partition again, so records can be duplicated.
    ``exactly_once``
        Every task writes its partition in one Kafka transaction with ``transactional.id``
        ``<transactional_id_prefix>-p<slot>-<partition index>``, together with a record in the
        compacted ``ledger_topic``. ``slot`` is the write's slot of the application's pool of
        transactional ids (leased for the write's duration, recorded in the ledger, the same
        on every attempt): the application uses ``slots x partitions`` ids, however many writes
        it makes, and two of its writes running at once use different slots. Retried tasks,
        re-run Spark jobs and re-runs of the same ``write_id`` skip committed partitions and
        complete the rest, so every row is visible exactly once to readers with
        ``isolation.level=read_committed``. Requires ``df`` to produce the same rows in each
        partition index on every evaluation (it is evaluated twice: the pre-pass, and the
        write; a re-run of a complete write only runs the pre-pass).
        ``transaction_timeout_ms`` must not exceed the brokers' ``transaction.max.timeout.ms``.
        A transaction aborted by an abortable error is retried up to
        ``max_transaction_retries`` times from the task's input kept in memory (up to
        ``retry_buffer_bytes`` per task). ``init_transactions_timeout_s`` bounds each task's
        ``init_transactions()``. ``transactional_id_prefix`` must be non-empty and unique per
        application on the cluster; ``write_id`` must stay the same across retries and re-runs
        of the same write, and names one input: a committed task whose recorded input
        fingerprint differs from this DataFrame's is refused. A write counts only the ledger
        entries of exactly its own ``(transactional_id_prefix, write_id)``.
        ``input_identity``: ``df`` is a deterministic function of the pinned input this string
        names (e.g. the offset ranges of a bounded Kafka read);
        the ledger records its SHA-256 instead of fingerprinting ``df``, a re-run of the same
        write id with another identity is refused (:class:`LedgerError`, nothing written), and
        when ``df`` holds the end rows of ``read_kafka(..., split_ends=True)`` (``ingest``
        into a ``KafkaSink`` of the records as read), on a classic session ``df`` is
        evaluated once: no pre-pass, unless a row can be refused (a ``topic`` or
        ``partition`` column, headers whose type admits a null key, a registry encoding), and
        each task strips the end rows and checks by them that its input is whole instead of
        comparing its rows with a pre-pass's count (else :class:`InputTruncatedError`, the
        transaction aborted; see :mod:`~airflow_provider_kafka_spark.spark.split_ends`).
        Without end rows the pre-pass counts the rows of each partition (with no
        fingerprints). A bad row still fails the
        write before anything is visible, through that pre-pass: tasks commit independently,
        so a row refused inside one task would leave the others' rows committed.
        ``ledger_since`` (an aware datetime): no attempt of this
        write began before it; the driver reads the write's ledger partition from there (a few
        minutes earlier, found by time) instead of from its start, so the check costs the same
        however long the ledger's history is. Give it only when it is certain (an attempt that
        began earlier would not be found, and its tasks would be written again).

    Raises:
        WriteConfigError: bad arguments, ``kafka_config``, columns or rows, a missing topic, or
            (``exactly_once``) a ``write_id`` too long for its ledger record to fit in the
            producer's ``message.max.bytes`` (before anything is written).
        KafkaWriteError: the cluster did not answer within ``metadata_timeout_s``, or the
            brokers' configs could not be read (before anything is written).
        KafkaAuthenticationError: the cluster refused the client's credentials or TLS setup
            (before anything is written).
        LedgerError: the ledger topic cannot be created/read, or this ``write_id`` was
            started on a DataFrame with a different number of partitions or committed a task
            from other input (its recorded rows, topics or content digest differ; see
            :class:`~airflow_provider_kafka_spark.spark.write.ledger.TaskInput`).
        DeliveryError: a record could not be produced, or (``at_least_once``) was not
            acknowledged, or (``none``/``at_least_once``) records were still unacknowledged
            ``message.timeout.ms`` (default two minutes) plus a few seconds after the last.
        TransactionError: ``exactly_once`` could not commit; subclasses
            :class:`TransactionInitTimeoutError`, :class:`ProducerFencedError`,
            :class:`InputTruncatedError` name the cause.
    """
    guarantee = check_guarantee(delivery_guarantee)
    encoding = Encoding(key_format, value_format, key_schema, value_schema, schema_registry,
                        auto_register_schemas, subject_name_strategy, schema_id_location)
    df = check_columns(df, topic, encoding.registry_columns())
    delivery: DeliveryGuarantee | ExactlyOnce = guarantee
    if guarantee == "exactly_once":
        delivery = ExactlyOnce(  # None for either id is refused with what to pass
            transactional_id_prefix, write_id,  # type: ignore[arg-type]
            ledger_topic=ledger_topic, transaction_timeout_ms=transaction_timeout_ms,
            init_transactions_timeout_s=init_transactions_timeout_s,
            max_transaction_retries=max_transaction_retries,
            retry_buffer_bytes=retry_buffer_bytes, ledger_since=ledger_since,
            input_identity=input_identity)
    return _write(df, KafkaConfig.of(kafka_config), topic, encoding, delivery,
                  metadata_timeout_s)


@dataclass(frozen=True)
class Encoding:
    """How ``write_kafka`` encodes the ``key`` and ``value`` columns: its arguments of the
    same names, checked when applied (:func:`encode_columns`)."""

    key_format: str = "bytes"
    value_format: str = "bytes"
    key_schema: Any = None
    value_schema: Any = None
    schema_registry: Mapping[str, Any] | None = None
    auto_register_schemas: bool = True
    subject_name_strategy: str = "topic"
    schema_id_location: str = "payload"

    def registry_columns(self) -> set[str]:
        """The columns a registry format encodes (they may have any type)."""
        return {name for name, fmt in (("key", self.key_format), ("value", self.value_format))
                if fmt in REGISTRY_FORMATS}

    def apply(self, df: DataFrame, topic: str | None) -> tuple[DataFrame, tuple[FieldCodec, ...]]:
        """``df`` with its registry-format columns encoded, and the codecs (see
        :func:`encode_columns`)."""
        return encode_columns(df, topic=topic,
                              **{f.name: getattr(self, f.name) for f in fields(self)})


def _write(df: DataFrame, kafka_config: KafkaConfig, topic: str | None,
           encoding: Encoding, delivery: DeliveryGuarantee | ExactlyOnce,
           metadata_timeout_s: float) -> WriteResult:
    """``write_kafka`` once its arguments are values: ``delivery`` is ``none`` or
    ``at_least_once``, or the options of an ``exactly_once`` write."""
    exactly_once = None
    if isinstance(delivery, ExactlyOnce):
        exactly_once = ExactlyOnceWrite(kafka_config, topic, delivery)
    else:
        check_producer_config(kafka_config, delivery)
    admin = admin_client(kafka_config)
    seconds = check_metadata_timeout(metadata_timeout_s)
    cluster = read_cluster(admin, kafka_config, seconds)
    if topic is not None:
        cluster = check_topics_exist(admin, cluster, {topic: None}, kafka_config)
    if exactly_once is not None:
        exactly_once.check_cluster(admin, cluster, seconds)
    df, codecs = encoding.apply(df, topic)
    split_ends = SPLIT_END_COLUMN in df.columns  # read_kafka(split_ends=True)'s end rows
    # The pre-pass: one aggregation over df finds every bad row before anything is written
    # (and, for exactly_once, counts and fingerprints the rows of each partition). Without a
    # row that can be refused it is only needed by exactly_once, and not with an
    # input_identity when the tasks can tell a whole input by its end rows and Spark can say
    # the number of partitions without a job.
    pinned = exactly_once is not None and exactly_once.options.input_identity is not None
    planned = _planned_partitions(df) if pinned and split_ends else None
    scan = None
    if (exactly_once is not None and planned is None) or \
            rows_need_checking(df, topic, bool(codecs)):
        scan = scan_input(_records(df) if split_ends else df, topic,
                          digest=exactly_once is not None and not pinned)
        check_rows(admin, scan, topic, cluster, kafka_config)
    if exactly_once is None:
        assert isinstance(delivery, str)
        outcomes = _run_tasks(df, TaskPlan(kafka_config=kafka_config, guarantee=delivery,
                                           topic=topic, split_ends=split_ends))
        return WriteResult(
            delivery_guarantee=delivery,
            write_id=None,
            records_per_task={i: n for i, n, _, _ in outcomes},
            topics=tuple(sorted({t for *_, topics in outcomes for t in topics})),
        )

    num_partitions = scan.num_partitions if scan is not None else planned
    assert num_partitions is not None
    with exactly_once:
        plan = exactly_once.prepare(admin, num_partitions,
                                    scan.inputs() if scan is not None else None,
                                    split_ends=split_ends)
        outcomes = _run_tasks(df, plan) if plan.unfinished() else []
    written = {i: n for i, n, skipped, _ in outcomes if not skipped}
    topics = set(plan.committed_topics) | {t for *_, ts in outcomes for t in ts}
    return WriteResult(
        delivery_guarantee="exactly_once",
        write_id=plan.write_id,
        records_per_task=written,
        skipped_tasks=tuple(sorted(set(range(num_partitions)) - set(written))),
        topics=tuple(sorted(topics)),
    )


def _records(df: DataFrame) -> DataFrame:
    """``df`` without the readers' end rows and their column."""
    from pyspark.sql import functions as F

    return df.where(F.col(SPLIT_END_COLUMN).isNull()).drop(SPLIT_END_COLUMN)


def _planned_partitions(df: DataFrame) -> int | None:
    """The number of Spark partitions of ``df`` from its physical plan, without a job for a
    plan with no shuffle; ``None`` on Spark Connect (no RDD API)."""
    from pyspark.errors import PySparkNotImplementedError

    try:
        rdd = df.rdd
    except (PySparkNotImplementedError, AttributeError):
        return None
    return int(rdd.getNumPartitions())


def _run_tasks(df: DataFrame, plan: TaskPlan) -> list[tuple[int, int, bool, list[str]]]:
    """One Spark task per partition of ``df`` runs :func:`write_partition` with ``plan`` (a
    partition with no rows to write reports 0 records without a producer); returns each
    task's ``(index, records, skipped, topics)``, by index."""
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        index = context.partitionId()
        if plan.expected_rows is not None and plan.expected_rows[index] == 0:
            outcome = TaskOutcome(index, 0, False, ())  # nothing to write, nothing to remember
        else:
            outcome = write_partition(plan, index, batches)
        yield pa.RecordBatch.from_pydict(
            {"index": pa.array([index], pa.int32()),
             "records": pa.array([outcome.records], pa.int64()),
             "skipped": pa.array([outcome.skipped], pa.bool_()),
             "topics": pa.array([list(outcome.topics)], pa.list_(pa.string()))}
        )

    with kafka_errors():
        rows = df.mapInArrow(task, _RESULT_SCHEMA).collect()
    return sorted((r["index"], r["records"], r["skipped"], list(r["topics"])) for r in rows)
