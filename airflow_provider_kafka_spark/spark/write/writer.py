"""``write_kafka``: a Spark-to-Kafka sink with ``none``, ``at_least_once`` and ``exactly_once``.

Each Spark partition is written by one task through ``DataFrame.mapInArrow`` (Arrow batches
into a confluent-kafka producer; see :mod:`~airflow_provider_kafka_spark.spark.write.transactions`).
The tasks report what they wrote as one small row each, which the driver collects into a
:class:`WriteResult`. The exactly-once design is explained in ``docs/exactly-once.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from airflow_provider_kafka_spark.errors import (
    KafkaWriteError,
    LedgerError,
    WriteConfigError,
    kafka_errors,
)
from airflow_provider_kafka_spark.offsets.resolve import (
    RESULT_MARGIN,
    admin_client,
    cluster_metadata,
)
from airflow_provider_kafka_spark.spark.formats import REGISTRY_FORMATS
from airflow_provider_kafka_spark.spark.formats.encode import encode_columns
from airflow_provider_kafka_spark.spark.write.ledger import (
    TaskInput,
    check_inputs,
    ensure_ledger_topic,
    ledger_end_offset,
    ledger_partition,
    ledger_start_offset,
    read_ledger,
)
from airflow_provider_kafka_spark.spark.write.transactions import (
    DELIVERY_GUARANTEES,
    DeliveryGuarantee,
    TaskOutcome,
    TaskPlan,
    check_producer_config,
    fence_tasks,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

ACCEPTED_COLUMNS: tuple[str, ...] = ("key", "value", "topic", "partition", "headers",
                                     "timestamp")

# How long a topic missing from the metadata is looked up again (a topic created a moment ago
# may not be in every broker's metadata yet).
TOPIC_PROPAGATION_S = 5.0

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
    kafka_config: Mapping[str, Any],
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
) -> WriteResult:
    """Write ``df`` to Kafka, one producer per Spark partition.

    Input columns: ``value`` (binary or string; null writes a tombstone) is required;
    optional ``key`` (binary or string), ``topic`` (string; required unless ``topic=`` is
    given, which then wins), ``partition`` (int; null lets the partitioner choose),
    ``headers`` (array<struct<key string, value binary>>) and ``timestamp`` (timestamp).
    A keyed row without a partition goes where the Java producer and Spark's Kafka sink put
    it (``partitioner=murmur2_random``, unless ``kafka_config`` sets ``partitioner``).

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
        ``<transactional_id_prefix>-<hash of write_id>-<partition index>``, together with a
        record in the compacted ``ledger_topic``. Retried tasks, re-run Spark jobs and re-runs
        of the same ``write_id`` skip committed partitions and complete the rest, so every row
        is visible exactly once to readers with ``isolation.level=read_committed``. Requires
        ``df`` to produce the same rows in each partition index on every evaluation (it is
        evaluated twice: the pre-pass, and the write; a re-run of a complete write only runs
        the pre-pass).
        ``transaction_timeout_ms`` must not exceed the brokers' ``transaction.max.timeout.ms``.
        A transaction aborted by an abortable error is retried up to
        ``max_transaction_retries`` times from the task's input kept in memory (up to
        ``retry_buffer_bytes`` per task). ``init_transactions_timeout_s`` bounds each task's
        ``init_transactions()``. ``transactional_id_prefix`` must be non-empty and unique per
        application on the cluster; ``write_id`` must stay the same across retries and re-runs
        of the same write, and names one input: a committed task whose recorded input
        fingerprint differs from this DataFrame's is refused. A write counts only the ledger
        entries of exactly its own ``(transactional_id_prefix, write_id)``; entries of earlier
        versions (ledger format 1) count only under the narrow rule in
        ``docs/exactly-once.md``.

    Raises:
        WriteConfigError: bad arguments, ``kafka_config``, columns or rows, or a missing topic
            (before anything is written).
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
    guarantee = _check_guarantee(delivery_guarantee)
    _check_columns(df, topic, encoded={field for field, fmt in (("key", key_format),
                                                                ("value", value_format))
                                       if fmt in REGISTRY_FORMATS})
    if guarantee == "exactly_once":
        prefix, wid = _check_exactly_once_args(transactional_id_prefix, write_id,
                                               transaction_timeout_ms)
        check_producer_config(kafka_config, guarantee, transactional_id=f"{prefix}-x",
                              transaction_timeout_ms=transaction_timeout_ms)
    else:
        check_producer_config(kafka_config, guarantee)
    admin = admin_client(kafka_config)
    seconds = _check_timeout(metadata_timeout_s)
    cluster = _read_cluster(admin, kafka_config, seconds)
    if topic is not None:
        cluster = _check_topics_exist(admin, cluster, {topic: None}, kafka_config)
    if guarantee == "exactly_once":
        _check_transaction_timeout(admin, cluster, transaction_timeout_ms, seconds)
    df, codecs = encode_columns(
        df, topic=topic, key_format=key_format, value_format=value_format,
        key_schema=key_schema, value_schema=value_schema, schema_registry=schema_registry,
        auto_register_schemas=auto_register_schemas, subject_name_strategy=subject_name_strategy,
        schema_id_location=schema_id_location)
    # The pre-pass: one aggregation over df finds every bad row before anything is written
    # (and counts the rows of each partition for exactly_once). Without a topic, partition or
    # headers column or an encoding there is nothing row-level to check, and only exactly_once
    # needs it.
    scan = None
    if guarantee == "exactly_once" or topic is None or codecs or \
            {"partition", "headers"} & set(df.columns):
        scan = _scan_input(df, topic, digest=guarantee == "exactly_once")
        _check_rows(admin, scan, topic, cluster, kafka_config)
    if guarantee != "exactly_once":
        plan = TaskPlan(kafka_config=dict(kafka_config), guarantee=guarantee, topic=topic)
        outcomes = _run_tasks(df, plan)
        return WriteResult(
            delivery_guarantee=guarantee,
            write_id=None,
            records_per_task={i: n for i, n, _, _ in outcomes},
            topics=tuple(sorted({t for *_, topics in outcomes for t in topics})),
        )

    assert scan is not None
    num_partitions = scan.num_partitions
    plan = _plan_exactly_once(
        admin, kafka_config, topic=topic, transactional_id_prefix=prefix, write_id=wid,
        num_partitions=num_partitions, ledger_topic=ledger_topic,
        transaction_timeout_ms=transaction_timeout_ms,
        init_transactions_timeout_s=init_transactions_timeout_s,
        max_transaction_retries=max_transaction_retries, retry_buffer_bytes=retry_buffer_bytes,
        inputs=scan.inputs(),
    )
    outcomes = []
    if len(plan.committed) < num_partitions:
        outcomes = _run_tasks(df, plan)
    written = {i: n for i, n, skipped, _ in outcomes if not skipped}
    topics = set(plan.committed_topics) | {t for *_, ts in outcomes for t in ts}
    return WriteResult(
        delivery_guarantee=guarantee,
        write_id=wid,
        records_per_task=written,
        skipped_tasks=tuple(sorted(set(range(num_partitions)) - set(written))),
        topics=tuple(sorted(topics)),
    )


def prepare_exactly_once(
    kafka_config: Mapping[str, Any],
    *,
    topic: str | None,
    transactional_id_prefix: str,
    write_id: str,
    num_partitions: int,
    ledger_topic: str,
    transaction_timeout_ms: int,
    init_transactions_timeout_s: float = 60.0,
    max_transaction_retries: int = 3,
    retry_buffer_bytes: int = 256 * 1024 * 1024,
    metadata_timeout_s: float = 10.0,
    inputs: Sequence[TaskInput] | None = None,
) -> TaskPlan:
    """The driver half of an ``exactly_once`` write, without Spark: check the transaction
    timeout against the brokers, create/read the ledger, and return the tasks' plan.

    ``inputs`` (one :class:`TaskInput` per partition index; ``write_kafka``'s pre-pass computes
    them) are compared with the committed ledger entries and set the plan's ``expected_rows``
    and ``digests``; without them nothing is compared and the caller sets ``expected_rows``.

    Raises:
        WriteConfigError: ``transaction_timeout_ms`` exceeds ``transaction.max.timeout.ms``.
        LedgerError: see :func:`write_kafka`.
    """
    check_producer_config(kafka_config, "exactly_once",
                          transactional_id=f"{transactional_id_prefix}-x",
                          transaction_timeout_ms=transaction_timeout_ms)
    admin = admin_client(kafka_config)
    seconds = _check_timeout(metadata_timeout_s)
    cluster = _read_cluster(admin, kafka_config, seconds)
    _check_transaction_timeout(admin, cluster, transaction_timeout_ms, seconds)
    return _plan_exactly_once(
        admin, kafka_config, topic=topic, transactional_id_prefix=transactional_id_prefix,
        write_id=write_id, num_partitions=num_partitions, ledger_topic=ledger_topic,
        transaction_timeout_ms=transaction_timeout_ms,
        init_transactions_timeout_s=init_transactions_timeout_s,
        max_transaction_retries=max_transaction_retries, retry_buffer_bytes=retry_buffer_bytes,
        inputs=inputs)


def _plan_exactly_once(
    admin: AdminClient,
    kafka_config: Mapping[str, Any],
    *,
    topic: str | None,
    transactional_id_prefix: str,
    write_id: str,
    num_partitions: int,
    ledger_topic: str,
    transaction_timeout_ms: int,
    init_transactions_timeout_s: float,
    max_transaction_retries: int,
    retry_buffer_bytes: int,
    inputs: Sequence[TaskInput] | None,
) -> TaskPlan:
    """Create/read the ledger, compare its entries with ``inputs``, and return the tasks'
    plan (the other checks are done)."""
    partitions = ensure_ledger_topic(admin, ledger_topic)
    partition = ledger_partition(write_id, partitions)
    # The driver's view is an optimisation (skip tasks known to be done); every task re-checks
    # the ledger after fencing, so reading only up to the current last stable offset is enough.
    stable = ledger_end_offset(admin, ledger_topic, partition, committed=True)
    view = read_ledger(kafka_config, ledger_topic, partition,
                       transactional_id_prefix=transactional_id_prefix, write_id=write_id,
                       output_topic=topic,
                       start_offset=ledger_start_offset(admin, ledger_topic, partition),
                       until_offset=stable, timeout=transaction_timeout_ms / 1000 + 30)
    other = {e.num_partitions for e in view.entries.values()} - {num_partitions}
    if other:
        raise LedgerError(
            f"write_id {write_id!r} of transactional_id_prefix {transactional_id_prefix!r} was "
            f"started on a DataFrame with {other.pop()} partitions but "
            f"this DataFrame has {num_partitions}. A re-run must produce the same partitions; "
            "use a new write_id for a different DataFrame. Nothing was written."
        )
    if inputs is not None:
        check_inputs(view.entries, inputs, transactional_id_prefix=transactional_id_prefix,
                     write_id=write_id)
    plan = TaskPlan(
        kafka_config=dict(kafka_config),
        guarantee="exactly_once",
        topic=topic,
        write_id=write_id,
        transactional_id_prefix=transactional_id_prefix,
        num_partitions=num_partitions,
        ledger_topic=ledger_topic,
        ledger_partition=partition,
        ledger_offset=view.end_offset,
        committed=frozenset(view.entries),
        committed_topics=tuple(sorted({t for e in view.entries.values() for t in e.topics})),
        transaction_timeout_ms=transaction_timeout_ms,
        init_timeout_s=init_transactions_timeout_s,
        max_transaction_retries=max_transaction_retries,
        retry_buffer_bytes=retry_buffer_bytes,
        expected_rows=None if inputs is None else tuple(t.records for t in inputs),
        digests=None if inputs is None else tuple(t.digest for t in inputs),
    )
    if stable < ledger_end_offset(admin, ledger_topic, partition, committed=False):
        # An open transaction on the ledger partition: maybe a crashed attempt of this write
        # that produced its ledger record but never committed. Fence our unfinished tasks now,
        # rather than let every task wait for the broker to time that transaction out.
        fence_tasks(plan, sorted(set(range(num_partitions)) - plan.committed))
    return plan


def _check_guarantee(delivery_guarantee: str) -> DeliveryGuarantee:
    value = str(delivery_guarantee).lower()
    if value not in DELIVERY_GUARANTEES:
        raise WriteConfigError(
            f"delivery_guarantee={delivery_guarantee!r} is not valid; use one of "
            f"{DELIVERY_GUARANTEES}."
        )
    return value  # type: ignore[return-value]


def _check_exactly_once_args(
    prefix: str | None, write_id: str | None, transaction_timeout_ms: int
) -> tuple[str, str]:
    if not prefix or not str(prefix).strip():
        raise WriteConfigError(
            "delivery_guarantee='exactly_once' needs transactional_id_prefix (got "
            f"{prefix!r}). Pick a prefix unique to this application on this Kafka cluster, e.g. "
            "'<dag_id>.<task_id>': two applications sharing a prefix fence each other's "
            "transactions."
        )
    if not write_id or not str(write_id).strip():
        raise WriteConfigError(
            "delivery_guarantee='exactly_once' needs write_id: pass an id that stays the same "
            "when the same write is retried or re-run (in Airflow: dag_id/task_id/run_id), or "
            "choose delivery_guarantee='at_least_once'."
        )
    if isinstance(transaction_timeout_ms, bool) or not isinstance(transaction_timeout_ms, int) \
            or transaction_timeout_ms <= 0:
        raise WriteConfigError(
            f"transaction_timeout_ms must be a positive int (milliseconds), got "
            f"{transaction_timeout_ms!r}; pass e.g. 60000: long enough for one task, at most "
            "the brokers' transaction.max.timeout.ms."
        )
    return str(prefix), str(write_id)


@dataclass(frozen=True)
class _Cluster:
    """What the driver learned from the cluster's metadata."""

    brokers: tuple[int, ...]
    partitions: Mapping[str, int]  # partitions per existing topic


def _check_timeout(metadata_timeout_s: float) -> float:
    if isinstance(metadata_timeout_s, bool) or not isinstance(metadata_timeout_s, int | float) \
            or not metadata_timeout_s > 0:
        raise WriteConfigError(
            f"metadata_timeout_s must be a positive number of seconds, got "
            f"{metadata_timeout_s!r}; pass e.g. 10."
        )
    return float(metadata_timeout_s)


def _read_cluster(admin: AdminClient, kafka_config: Mapping[str, Any],
                  timeout: float) -> _Cluster:
    """The cluster's brokers and topics, read on the driver before anything else touches the
    cluster (every topic: a metadata request naming a topic could create it where
    ``auto.create.topics.enable`` is on).

    Raises:
        KafkaWriteError: no broker answered within ``timeout`` seconds.
    """
    try:
        metadata = cluster_metadata(admin, timeout)
    except KafkaException as exc:
        raise KafkaWriteError(
            f"could not reach the Kafka cluster at bootstrap.servers="
            f"{_bootstrap(kafka_config)!r}: no metadata within {timeout:g}s "
            f"({exc.args[0].str()}). Check bootstrap.servers, that the brokers are up and "
            "reachable from the Spark driver, and the client's security settings "
            "(security.protocol, sasl.*, ssl.*); if the cluster is only slow to answer, raise "
            "metadata_timeout_s. Nothing was written."
        ) from None
    # A topic listed with partitions exists, even while its leaders are being elected.
    partitions = {name: len(t.partitions) for name, t in metadata.topics.items()
                  if t.partitions and (t.error is None
                                       or t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART)}
    return _Cluster(tuple(sorted(metadata.brokers)), partitions)


def _bootstrap(kafka_config: Mapping[str, Any]) -> str:
    return str(kafka_config.get("bootstrap.servers", ""))


def _check_transaction_timeout(admin: AdminClient, cluster: _Cluster,
                               transaction_timeout_ms: int, seconds: float) -> None:
    """``transaction_timeout_ms`` is not above any answering broker's
    ``transaction.max.timeout.ms``. A broker that does not answer within ``seconds`` (it just
    died; the cluster has not noticed yet) is left out with a warning, unless none answers."""
    # One request per broker: librdkafka allows one BROKER resource per describe_configs.
    futures = [future for b in cluster.brokers for future in admin.describe_configs(
        [ConfigResource(ResourceType.BROKER, str(b))], request_timeout=seconds).items()]
    silent: list[str] = []
    for resource, future in futures:
        try:
            configs = future.result(timeout=seconds + RESULT_MARGIN)
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) or exc.args[0].code() in (
                    KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                silent.append(resource.name)
                continue
            raise KafkaWriteError(
                f"could not read the config of broker {resource.name} to check "
                f"transaction_timeout_ms: {exc.args[0].str()}. Check that the brokers are up "
                "and that this client may describe broker configs (DESCRIBE_CONFIGS on the "
                "cluster). Nothing was written."
            ) from None
        entry = configs.get("transaction.max.timeout.ms")
        if entry is not None and entry.value is not None \
                and transaction_timeout_ms > int(entry.value):
            raise WriteConfigError(
                f"transaction_timeout_ms={transaction_timeout_ms} is above broker "
                f"{resource.name}'s transaction.max.timeout.ms={entry.value}; the broker "
                "would reject every transaction (INVALID_TRANSACTION_TIMEOUT). Pass "
                f"transaction_timeout_ms <= {entry.value} or raise transaction.max.timeout.ms."
            )
    if len(silent) == len(futures):
        raise KafkaWriteError(
            f"no broker answered a request for its config within {seconds}s (brokers "
            f"{', '.join(silent)}), needed to check transaction_timeout_ms. Check that the "
            "brokers are up, or raise metadata_timeout_s. Nothing was written.")
    if silent:
        log.warning("brokers %s did not answer within %ss (down?); transaction_timeout_ms was "
                    "checked against the others", ", ".join(silent), seconds)


def _check_columns(df: DataFrame, topic: str | None, encoded: set[str]) -> None:
    """Refuse unknown, missing or mistyped columns (``encoded`` columns, which a registry
    format encodes, may have any type)."""
    from pyspark.sql import types as T

    binary_or_string = (T.BinaryType, T.StringType)
    fields = {f.name: f.dataType for f in df.schema.fields}
    unknown = sorted(set(fields) - set(ACCEPTED_COLUMNS))
    if unknown:
        raise WriteConfigError(
            f"write_kafka got unknown columns {unknown}; the accepted columns are "
            f"{list(ACCEPTED_COLUMNS)} (select or rename them first)."
        )
    if "value" not in fields:
        raise WriteConfigError(
            "write_kafka needs a 'value' column (binary or string): add or rename one, e.g. "
            "df.select(to_json(struct('*')).alias('value'))."
        )
    if topic is None and "topic" not in fields:
        raise WriteConfigError(
            "write_kafka needs a 'topic' column or the topic= argument: pass topic='name', or "
            "add a string column 'topic' naming each row's topic."
        )
    if topic is not None and not str(topic).strip():
        raise WriteConfigError("topic= is empty; pass a topic name or None.")
    expected: dict[str, tuple[type[T.DataType], ...]] = {
        "value": binary_or_string, "key": binary_or_string, "topic": (T.StringType,),
        "partition": (T.IntegerType, T.ShortType, T.ByteType), "timestamp": (T.TimestampType,),
    }
    for name, types in expected.items():
        if name in fields and name not in encoded and not isinstance(fields[name], types):
            raise WriteConfigError(
                f"column {name!r} has type {fields[name].simpleString()}; expected "
                f"{' or '.join(t.typeName() for t in types)}: cast it, e.g. "
                f"col({name!r}).cast({types[0].typeName()!r})."
            )
    if "headers" in fields and fields["headers"].simpleString() != \
            "array<struct<key:string,value:binary>>":
        raise WriteConfigError(
            f"column 'headers' has type {fields['headers'].simpleString()}; expected "
            "array<struct<key:string,value:binary>>: build it as such, e.g. "
            "array(struct(lit('k').alias('key'), col('v').cast('binary').alias('value')))."
        )


@dataclass(frozen=True)
class _Group:
    """One row of the pre-pass: the rows of Spark partition ``index`` that go to ``topic``
    (``None``: a null ``topic`` column)."""

    index: int
    topic: str | None
    rows: int
    min_partition: int | None  # of the 'partition' column, nulls ignored
    max_partition: int | None
    null_header_key_rows: int  # rows with a header whose key (or the header itself) is null
    hash_sum: int | None  # the sum of the rows' xxhash64 (exactly_once only)


@dataclass(frozen=True)
class _InputScan:
    """What the pre-pass found in the DataFrame, by Spark partition index and topic, and how
    many partitions the DataFrame has (empty ones included)."""

    groups: tuple[_Group, ...]
    num_partitions: int

    def rows_per_index(self) -> tuple[int, ...]:
        counts = [0] * self.num_partitions
        for g in self.groups:
            counts[g.index] += g.rows
        return tuple(counts)

    def inputs(self) -> list[TaskInput]:
        """Each partition's input fingerprint (see :class:`TaskInput` for the digest)."""
        n = self.num_partitions
        rows = self.rows_per_index()
        topics: list[set[str]] = [set() for _ in range(n)]
        sums = [0] * n
        for g in self.groups:
            if g.topic is not None:
                topics[g.index].add(g.topic)
            sums[g.index] += g.hash_sum or 0
        return [TaskInput(rows[i], tuple(sorted(topics[i])), f"{sums[i] % 2**64:016x}")
                for i in range(n)]

    def first_index_of_topics(self) -> dict[str | None, int]:
        """Every topic the rows go to, with the first Spark partition index holding one."""
        first: dict[str | None, int] = {}
        for g in self.groups:
            first[g.topic] = min(first.get(g.topic, g.index), g.index)
        return first


_SCAN_SCHEMA = ("index int, topic string, rows long, min_partition int, max_partition int, "
                "null_header_keys long, hash_high long, hash_low long")


def _scan_input(df: DataFrame, topic: str | None, *, digest: bool) -> _InputScan:
    """The pre-pass: one narrow Spark stage over ``df`` (no RDD API, so it runs on Spark
    Connect too). The JVM projects what each row contributes (its target topic, with
    ``digest`` the row's ``xxhash64``, its ``partition``, whether a header key is null); a
    ``mapInArrow`` task per Spark partition aggregates its rows by topic and always answers,
    so empty partitions are counted too. See :class:`TaskInput` for the digest."""
    from pyspark.sql import functions as F

    columns = set(df.columns)
    target = F.lit(topic) if topic is not None else F.col("topic")
    projected = [] if topic is not None else [F.col("topic")]
    if digest:
        hashed = [target, *(F.col(c) for c in ACCEPTED_COLUMNS if c != "topic" and c in columns)]
        projected.append(F.xxhash64(*hashed).alias("hash"))
    if "partition" in columns:
        projected.append(F.col("partition").cast("int").alias("partition"))
    if "headers" in columns:
        projected.append(F.exists(
            "headers", lambda h: h.isNull() | h["key"].isNull()).alias("null_header_key"))
    with kafka_errors():
        rows = df.select(*projected).mapInArrow(_partition_scanner(topic), _SCAN_SCHEMA) \
            .collect()
    indices = {r["index"] for r in rows}
    num_partitions = max(indices, default=-1) + 1
    if indices != set(range(num_partitions)):  # every task answers, even for no rows
        raise KafkaWriteError(
            f"the pre-pass got answers from Spark partitions {sorted(indices)}, not from each of "
            f"0..{num_partitions - 1}; Spark lost a task's result. Run the write again. "
            "Nothing was written.")
    groups = [
        _Group(index=r["index"], topic=r["topic"], rows=r["rows"],
               min_partition=r["min_partition"], max_partition=r["max_partition"],
               null_header_key_rows=r["null_header_keys"],
               hash_sum=r["hash_high"] * 2**32 + r["hash_low"] if digest else None)
        for r in rows if r["rows"] > 0
    ]
    return _InputScan(tuple(sorted(groups, key=lambda g: (g.index, g.topic or ""))),
                      num_partitions)


def _partition_scanner(topic: str | None) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """The pre-pass task: one row per topic of its Spark partition (one row with 0 rows when
    the partition is empty). Hashes are summed exactly as two int64 halves (``hash >> 32``
    and ``hash & 0xFFFFFFFF``), which cannot overflow below 2**31 rows per partition."""

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        totals: dict[str | None, list[Any]] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            keys = [] if topic is not None else ["topic"]
            aggregates: list[tuple[Any, str]] = [([], "count_all")]
            if "hash" in table.column_names:
                table = table.append_column("hi", pc.shift_right(table["hash"], 32)) \
                    .append_column("lo", pc.bit_wise_and(table["hash"], 0xFFFFFFFF))
                aggregates += [("hi", "sum"), ("lo", "sum")]
            if "partition" in table.column_names:
                aggregates += [("partition", "min"), ("partition", "max")]
            if "null_header_key" in table.column_names:
                aggregates.append(("null_header_key", "sum"))
            for g in table.group_by(keys, use_threads=False).aggregate(aggregates).to_pylist():
                name = topic if topic is not None else g["topic"]
                acc = totals.setdefault(name, [0, None, None, 0, 0, 0])
                acc[0] += g["count_all"]
                low, high = g.get("partition_min"), g.get("partition_max")
                if low is not None:
                    acc[1] = low if acc[1] is None else min(acc[1], low)
                    acc[2] = high if acc[2] is None else max(acc[2], high)
                acc[3] += g.get("null_header_key_sum") or 0
                acc[4] += g.get("hi_sum") or 0
                acc[5] += g.get("lo_sum") or 0
        if not totals:
            totals[None] = [0, None, None, 0, 0, 0]
        names = list(totals)
        values = list(zip(*totals.values(), strict=True))
        yield pa.RecordBatch.from_pydict(
            {"index": pa.array([context.partitionId()] * len(names), pa.int32()),
             "topic": pa.array(names, pa.string()),
             "rows": pa.array(values[0], pa.int64()),
             "min_partition": pa.array(values[1], pa.int32()),
             "max_partition": pa.array(values[2], pa.int32()),
             "null_header_keys": pa.array(values[3], pa.int64()),
             "hash_high": pa.array(values[4], pa.int64()),
             "hash_low": pa.array(values[5], pa.int64())})

    return scan


def _check_rows(admin: AdminClient, scan: _InputScan, topic: str | None, cluster: _Cluster,
                kafka_config: Mapping[str, Any]) -> None:
    """Refuse the first bad row the pre-pass found, naming its column, value and Spark
    partition index (bad rows in other partitions are counted).

    Raises:
        WriteConfigError: a null ``topic``, a topic that does not exist, a ``partition`` that
            is negative or not in its topic, a header with a null key.
    """
    nothing = "Nothing was written."
    null_topics = [g for g in scan.groups if g.topic is None]
    if topic is None and null_topics:
        first = null_topics[0]
        raise WriteConfigError(
            f"column 'topic' is null in {first.rows} {_rows(first.rows)} of Spark partition "
            f"{first.index}{_elsewhere(g.index for g in null_topics[1:])}: every row needs a "
            "topic. Fill the column (e.g. coalesce(topic, lit('fallback'))) or pass topic=. "
            f"{nothing}"
        )
    cluster = _check_topics_exist(admin, cluster, scan.first_index_of_topics(), kafka_config)
    for g in scan.groups:
        if g.topic is None or g.min_partition is None or g.max_partition is None:
            continue
        count = cluster.partitions[g.topic]
        if g.min_partition < 0:
            raise WriteConfigError(
                f"column 'partition' holds {g.min_partition} in Spark partition {g.index} (a "
                f"row for topic {g.topic!r}): a partition number must be >= 0; null lets the "
                f"partitioner choose. Fix the column. {nothing}"
            )
        if g.max_partition >= count:
            raise WriteConfigError(
                f"column 'partition' holds {g.max_partition} in Spark partition {g.index} (a "
                f"row for topic {g.topic!r}), but {g.topic!r} has partitions 0..{count - 1}. "
                "Use an existing partition, or null to let the partitioner choose (or add "
                f"partitions to the topic first). {nothing}"
            )
    bad_headers = [g for g in scan.groups if g.null_header_key_rows]
    if bad_headers:
        index = bad_headers[0].index
        rows = sum(g.null_header_key_rows for g in bad_headers if g.index == index)
        raise WriteConfigError(
            f"column 'headers' has a header with a null key in {rows} {_rows(rows)} of Spark "
            f"partition {index}{_elsewhere(g.index for g in bad_headers if g.index != index)}: "
            "Kafka header keys must be strings (the Java client rejects a null key too). Fill "
            "or drop such headers, e.g. filter(headers, h -> h.key IS NOT NULL). "
            f"{nothing}"
        )


def _check_topics_exist(admin: AdminClient, cluster: _Cluster,
                        first_index: Mapping[str | None, int | None],
                        kafka_config: Mapping[str, Any]) -> _Cluster:
    """Refuse topics the cluster does not have; ``first_index`` maps each topic to the first
    Spark partition index whose rows go to it (``None``: the ``topic=`` argument). A topic
    created a moment ago may take a moment to appear in the brokers' metadata: missing topics
    are looked up again for ``TOPIC_PROPAGATION_S`` seconds. Returns the latest view.

    Raises:
        WriteConfigError: a topic does not exist (or this client may not describe it).
    """
    deadline = time.monotonic() + TOPIC_PROPAGATION_S
    while True:
        missing = sorted((i, t) for t, i in first_index.items()
                         if t is not None and i is not None and t not in cluster.partitions)
        argument = [t for t, i in first_index.items()
                    if t is not None and i is None and t not in cluster.partitions]
        if not missing and not argument:
            return cluster
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
        cluster = _read_cluster(admin, kafka_config, 30.0)
    where = f"on the cluster at bootstrap.servers={_bootstrap(kafka_config)!r}"
    remedy = ("create it first (write_kafka never relies on topic auto-creation), fix the name, "
              "or, if it exists, allow this client to describe it. Nothing was written.")
    if argument:
        raise WriteConfigError(f"topic={argument[0]!r} does not exist {where}: {remedy}")
    named = ", ".join(f"{t!r} (column 'topic', first in Spark partition {i})"
                      for i, t in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    verb = "does" if len(missing) == 1 else "do"
    raise WriteConfigError(f"topic {named}{more} {verb} not exist {where}: {remedy}")


def _rows(n: int) -> str:
    return "row" if n == 1 else "rows"


def _elsewhere(indices: Iterable[int]) -> str:
    others = sorted(set(indices))
    if not others:
        return ""
    shown = ", ".join(map(str, others[:10])) + (", ..." if len(others) > 10 else "")
    return f" (and in Spark partitions {shown})"


def _run_tasks(df: DataFrame, plan: TaskPlan) -> list[tuple[int, int, bool, list[str]]]:
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
