"""``write_kafka``'s argument and column checks, run on the driver before it touches the
cluster: the delivery guarantee, the timeouts, the exactly-once arguments (including whether
the write's ledger record fits in one Kafka message) and the DataFrame's columns.

The checks of the cluster (topics exist, ``transaction.max.timeout.ms``) are in
:mod:`~airflow_provider_kafka_spark.spark.write.cluster`; those of the rows, in the pre-pass
(:mod:`~airflow_provider_kafka_spark.spark.write.prepass`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_provider_kafka_spark.errors import WriteConfigError
from airflow_provider_kafka_spark.offsets.config import (
    RECORD_OVERHEAD_BYTES,
    KafkaConfig,
    message_max_bytes,
)
from airflow_provider_kafka_spark.options import (
    DELIVERY_GUARANTEES,
    DeliveryGuarantee,
    shown,
)
from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN, SPLIT_END_DDL
from airflow_provider_kafka_spark.spark.write.ledger import LedgerEntry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ACCEPTED_COLUMNS: tuple[str, ...] = ("key", "value", "topic", "partition", "headers",
                                     "timestamp")
"""The columns ``write_kafka`` takes (``value`` is required)."""


def check_guarantee(delivery_guarantee: str) -> DeliveryGuarantee:
    """``delivery_guarantee`` lower-cased, if it is one of :data:`DELIVERY_GUARANTEES`."""
    value = str(delivery_guarantee).lower()
    if value not in DELIVERY_GUARANTEES:
        raise WriteConfigError(
            f"delivery_guarantee={delivery_guarantee!r} is not valid; use one of "
            f"{DELIVERY_GUARANTEES}."
        )
    return value  # type: ignore[return-value]


def check_exactly_once_args(
    prefix: str | None, write_id: str | None, transaction_timeout_ms: int
) -> tuple[str, str]:
    """``(transactional_id_prefix, write_id)`` as strings, if both are non-blank and
    ``transaction_timeout_ms`` is a positive int."""
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


def check_ledger_since(ledger_since: object) -> int | None:
    """``ledger_since`` (an aware datetime, or ``None``) as epoch milliseconds."""
    if ledger_since is None:
        return None
    if not isinstance(ledger_since, datetime) or ledger_since.utcoffset() is None:
        raise WriteConfigError(
            f"ledger_since must be an aware datetime (a time zone set), or None, got "
            f"{ledger_since!r}; pass the time before which no attempt of this write began, e.g. "
            "datetime(2026, 5, 1, tzinfo=timezone.utc), or None to read the ledger from its "
            "start.")
    return int(ledger_since.timestamp() * 1000)


# The largest numbers a ledger entry can hold (Spark partition indices are ints, row counts
# longs), so that the size of the largest record of a write is known before its pre-pass.
_LARGEST_INDEX = 2**31 - 1
_LARGEST_COUNT = 2**63 - 1


def check_ledger_record_fits(prefix: str, write_id: str, topic: str | None,
                             kafka_config: KafkaConfig, *, identity: bool = False) -> None:
    """Refuse a ``write_id`` (or ``transactional_id_prefix``) so long that a task's ledger
    record could not be produced: its key and value both hold them, JSON-escaped (see
    :mod:`~airflow_provider_kafka_spark.spark.write.ledger`), and librdkafka refuses a record
    whose key, value and :data:`RECORD_OVERHEAD_BYTES` exceed the producer's
    ``message.max.bytes`` (``kafka_config``'s, else 1,000,000). Sized with the largest index,
    counts and digest (and, with ``identity``, input identity) an entry can hold, and the
    topics of ``topic=`` (a ``topic`` column's
    topics are not known yet). Call it after the producer config was checked.

    Raises:
        WriteConfigError: the ledger record would be larger than ``message.max.bytes``.
    """
    limit = message_max_bytes(kafka_config)
    if limit is None:
        return
    largest = LedgerEntry(prefix, write_id, _LARGEST_INDEX, _LARGEST_INDEX, _LARGEST_COUNT,
                          (topic,) if topic is not None else (), "f" * 16,
                          "f" * 64 if identity else None)
    size = RECORD_OVERHEAD_BYTES + len(largest.key().encode()) + len(largest.value())
    if size <= limit:
        return
    source = "kafka_config" if "message.max.bytes" in kafka_config else "librdkafka's default"
    escaped = len(json.dumps(write_id)) - 2  # the write_id's bytes in each of key and value
    longest = (limit - (size - 2 * escaped)) // 2
    remedy = (f"Pass a shorter write_id: at most {longest:,} characters of ASCII (JSON "
              "escapes quotes, backslashes and non-ASCII characters to 2 to 12 bytes each), "
              "e.g. a hash of the long id"
              if longest > 0 else
              "Pass a shorter write_id and transactional_id_prefix")
    raise WriteConfigError(
        f"write_id={shown(write_id)} ({len(write_id):,} characters) is too long: each task "
        "records it twice (key and value) in its ledger record, which would be "
        f"{size:,} bytes, above the producer's message.max.bytes={limit} ({source}), so the "
        f"write would fail mid-transaction. {remedy}. Nothing was written."
    )


def check_input_identity(input_identity: object) -> str | None:
    """``input_identity`` if it is ``None`` or a non-blank string."""
    if input_identity is None or (isinstance(input_identity, str) and input_identity.strip()):
        return input_identity
    raise WriteConfigError(
        f"input_identity={shown(input_identity)} is not valid; pass a non-empty string that "
        "names the pinned input the DataFrame is computed from (e.g. the JSON of the offset "
        "ranges it reads), or None.")


def rows_need_checking(df: DataFrame, topic: str | None, encoded: bool) -> bool:
    """Whether a row of ``df`` can be refused (the pre-pass's checks), judged from its schema:
    a ``topic`` column (null, or a topic the cluster lacks), a ``partition`` column (out of
    its topic's range), a ``headers`` column whose type admits a null header or key, or a
    registry encoding (a row that does not fit the schema)."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    if topic is None or encoded or "partition" in fields:
        return True
    headers = fields.get("headers")
    if not isinstance(headers, T.ArrayType):
        return False
    element = headers.elementType
    key = next((f for f in element.fields if f.name == "key"), None) \
        if isinstance(element, T.StructType) else None
    return headers.containsNull or key is None or key.nullable


def check_metadata_timeout(metadata_timeout_s: float) -> float:
    """``metadata_timeout_s`` as a float, if it is a positive number."""
    if isinstance(metadata_timeout_s, bool) or not isinstance(metadata_timeout_s, int | float) \
            or not metadata_timeout_s > 0:
        raise WriteConfigError(
            f"metadata_timeout_s must be a positive number of seconds, got "
            f"{metadata_timeout_s!r}; pass e.g. 10."
        )
    return float(metadata_timeout_s)


def check_columns(df: object, topic: str | None, encoded: set[str]) -> DataFrame:
    """``df``, once it is a DataFrame without unknown, missing, mistyped or same-named columns
    (``encoded`` columns, which a registry format encodes, may have any type); besides the
    :data:`ACCEPTED_COLUMNS`, the end rows' column of ``read_kafka(split_ends=True)``."""
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T

    from airflow_provider_kafka_spark.spark.schema import same_columns, spark_compares

    if not isinstance(df, DataFrame):
        raise WriteConfigError(
            f"write_kafka needs a pyspark DataFrame as df, got a {type(df).__name__}; build "
            "one from the rows first, e.g. spark.createDataFrame(rows), and pass it. Nothing "
            "was written.")
    same = same_columns(df)
    if same:
        raise WriteConfigError(
            f"write_kafka cannot tell the columns {same} of df apart ({spark_compares(df)}); "
            "keep one of them, or give each its own name (df.toDF(*names), or .alias() in the "
            "select that made them). Nothing was written.")
    binary_or_string = (T.BinaryType, T.StringType)
    fields = {f.name: f.dataType for f in df.schema.fields}
    ends = fields.pop(SPLIT_END_COLUMN, None)  # the readers' end rows, if read with them
    if ends is not None and ends.simpleString() != SPLIT_END_DDL:
        raise WriteConfigError(
            f"column {SPLIT_END_COLUMN!r} has type {ends.simpleString()}; it holds the end rows "
            f"of read_kafka(split_ends=True) ({SPLIT_END_DDL}): drop or rename the column.")
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
    return df


def rows_text(n: int) -> str:
    """``"1 row"``, ``"3 rows"``: a row count in an error message."""
    return f"{n} {'row' if n == 1 else 'rows'}"
