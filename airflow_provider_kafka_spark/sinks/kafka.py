"""The Kafka sink: ``write_kafka`` behind the :class:`Sink` steps."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_kafka_spark.arguments import checkable
from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError, WriteConfigError
from airflow_provider_kafka_spark.naming import Dataset, dataset_of_topic
from airflow_provider_kafka_spark.options import (
    DELIVERY_GUARANTEES,
    bad_argument,
    check_choice,
    check_text,
    check_topic_name,
)
from airflow_provider_kafka_spark.sinks.base import KafkaConfig, RunInfo, Sink, kafka_config_of
from airflow_provider_kafka_spark.spark.intake import Intake, RowsWithSplitEnds, SinkInput, SparkRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges

RECORD_COLUMNS: tuple[str, ...] = ("key", "value", "headers", "timestamp")
"""What a record read from Kafka keeps when it is written to Kafka unchanged."""


class KafkaSink(Sink):
    """Write a DataFrame to the Kafka topic ``topic`` with
    :func:`~airflow_provider_kafka_spark.spark.write.writer.write_kafka`.

    There is nothing to stage: with ``delivery_guarantee="exactly_once"`` each Spark task
    commits its own Kafka transaction (recorded in the ledger under ``write_id``, so a re-run
    of the same ``write_id`` skips what is committed), so :meth:`commit` and :meth:`abort` do
    nothing and the manifest stays with the caller (the ingest task's XCom).

    Records straight from the read (no transform, no SQL) keep their ``key``, ``value``,
    ``headers`` and ``timestamp``, and the partitioner chooses the output partition.

    :param topic: the output topic; templated in the ingest operator.
    :param kafka_config: the output cluster's librdkafka config, or a function returning it
        (called when the sink writes), e.g. ``KafkaConnection("other_cluster")``; in the
        ingest operator, None writes to the input's cluster.
    :param delivery_guarantee: ``exactly_once`` (default), ``at_least_once`` or ``none``.
    :param transactional_id_prefix: for ``exactly_once``; a prefix unique to this application
        on the cluster (the operator's default: ``<dag_id>.<task_id>``).
    :param write_id: for ``exactly_once``; templated in the operator. The operator's default
        is stable for the run and its ranges (``<dag_id>/<task_id>/<run_id>/<digest of the
        ranges>``; ``partition=<key>`` for the run id in a partitioned run, which Airflow
        reprocesses as a new run): a retry of the task, or a clear of the run (whose resolve
        task returns the run's pinned ranges), skips what an earlier attempt committed, so ``read_committed``
        readers see every record once; ranges resolved anew on purpose are a new write.
    :param dead_letter_topic: where undecodable records go (``on_corrupt="dead_letter"``),
        written by the same ``write_kafka`` call as the output (with ``exactly_once``: the
        same write id and ledger, so a re-run writes each record once in one of the two
        topics): the record's key, value, timestamp and headers as read, plus the headers
        ``kafka_spark.error``, ``kafka_spark.topic``, ``kafka_spark.partition``,
        ``kafka_spark.offset`` and ``kafka_spark.timestamp`` (epoch milliseconds).
    :param ledger_since: for ``exactly_once``: no attempt of ``write_id`` began before it, so
        the ledger is read from there (``write_kafka``'s ``ledger_since``; the operator's
        default write id sets it).
    """

    template_fields: Sequence[str] = ("topic", "write_id")

    def __init__(self, topic: str, *, kafka_config: KafkaConfig | None = None,
                 delivery_guarantee: str = "exactly_once",
                 transactional_id_prefix: str | None = None, write_id: str | None = None,
                 dead_letter_topic: str | None = None,
                 ledger_since: datetime | None = None) -> None:
        self.topic = topic
        self.kafka_config = kafka_config
        self.delivery_guarantee = delivery_guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.write_id = write_id
        self.dead_letter_topic = dead_letter_topic
        self.ledger_since = ledger_since
        self.records_as_read = False  # told by intake(): records not transformed
        self.input_identity: str | None = None  # told by intake()
        self._columns: list[str] | None = None  # the output's, from prepare()
        self._check(rendered=False)

    def _check(self, *, rendered: bool) -> None:
        owner = "KafkaSink"
        if checkable(self.topic, rendered=rendered):
            self.topic = check_topic_name(owner, "topic", self.topic)
        if self.kafka_config is not None and not (
                callable(self.kafka_config) or isinstance(self.kafka_config, Mapping)):
            raise bad_argument(owner, "kafka_config", type(self.kafka_config).__name__,
                               "pass a librdkafka config dict, a function returning one "
                               "(e.g. KafkaConnection('kafka_default')), or None")
        self.delivery_guarantee = check_choice(owner, "delivery_guarantee",
                                               self.delivery_guarantee, DELIVERY_GUARANTEES,
                                               ignore_case=True)
        self.transactional_id_prefix = check_text(
            owner, "transactional_id_prefix", self.transactional_id_prefix, allow_none=True,
            meaning="a prefix unique to this application on the cluster")
        if checkable(self.write_id, rendered=rendered):
            self.write_id = check_text(
                owner, "write_id", self.write_id, allow_none=True,
                meaning="an id that stays the same when the same write is retried")
        if self.dead_letter_topic is not None:
            self.dead_letter_topic = check_topic_name(owner, "dead_letter_topic",
                                                      self.dead_letter_topic)
        if self.ledger_since is not None and not isinstance(self.ledger_since, datetime):
            raise bad_argument(owner, "ledger_since", self.ledger_since,
                               "pass a timezone-aware datetime, or None")

    def __repr__(self) -> str:  # never the config: it may hold secrets
        shown = {"delivery_guarantee": self.delivery_guarantee,
                 "transactional_id_prefix": self.transactional_id_prefix,
                 "write_id": self.write_id, "dead_letter_topic": self.dead_letter_topic}
        return f"KafkaSink({self.topic!r}" + "".join(
            f", {k}={v!r}" for k, v in shown.items() if v is not None) + ")"

    def for_run(self, run: RunInfo) -> KafkaSink:
        """The sink of ``run``: the input's cluster unless ``kafka_config`` was given; the
        default transactional id prefix and write id (and the ledger's start) of the run."""
        sink = KafkaSink(
            self.topic, kafka_config=run.kafka_config if self.kafka_config is None
            else self.kafka_config,
            delivery_guarantee=self.delivery_guarantee,
            transactional_id_prefix=self.transactional_id_prefix or run.application,
            write_id=self.write_id or default_write_id(run.dag_id, run.task_id, run.run_key,
                                                       run.ranges),
            dead_letter_topic=self.dead_letter_topic,
            ledger_since=self.ledger_since if self.write_id else run.ledger_since)
        sink._check(rendered=True)
        return sink

    def dataset(self, location: str | None = None) -> Dataset | None:
        """``(kafka://<host:port>, topic)``; None before the cluster is known."""
        if self.kafka_config is None:
            return None
        return dataset_of_topic(kafka_config_of(self.kafka_config), self.topic)

    def accepts_dead_letters(self, wanted: bool) -> None:
        """``on_corrupt="dead_letter"`` needs ``dead_letter_topic``, which needs it.

        Raises:
            ConfigurationError: one without the other.
        """
        if wanted and self.dead_letter_topic is None:
            raise bad_argument("KafkaSink", "dead_letter_topic", None,
                               "on_corrupt='dead_letter' needs the topic to write "
                               "undecodable records to", problem="is missing")
        if not wanted and self.dead_letter_topic is not None:
            raise bad_argument("KafkaSink", "dead_letter_topic", self.dead_letter_topic,
                               "it applies with on_corrupt='dead_letter'; remove it, or "
                               "dead-letter the undecodable records", problem="is not used")

    def intake(self, given: SinkInput) -> Intake:
        """Spark rows, written as they come (nothing staged). The DataFrames :meth:`write`
        gets are a deterministic function of ``given.identity`` (the pinned slice), passed to
        ``write_kafka`` as ``input_identity``: with ``exactly_once`` a re-run of ``write_id``
        with another identity is refused. Records not transformed (as read, or decoded) keep
        only their ``key``, ``value``, ``headers`` and ``timestamp`` (their ``topic`` and
        ``partition`` columns would send each record back to where it was read).

        With ``exactly_once`` and records as read by the native readers, the readers' end row
        after each split (:class:`RowsWithSplitEnds`): the input is read once, each task
        checking by its end row that its input is whole before it commits; otherwise
        ``write_kafka`` counts each partition in a pre-pass.

        Raises:
            WriteConfigError: the output's columns (from :meth:`prepare`, as this sink writes
                them) have one ``write_kafka`` does not take, or no ``value``.
        """
        from airflow_provider_kafka_spark.spark.write.checks import ACCEPTED_COLUMNS

        if self._columns is None:
            raise SinkError("KafkaSink.intake() called without prepare(); call "
                            "prepare(spark, shaped) first, once per write.")
        self.input_identity = given.identity
        self.records_as_read = given.records != "transformed"
        columns = self._kept(self._columns)
        unknown = [c for c in columns if c not in ACCEPTED_COLUMNS]
        if unknown or "value" not in columns:
            raise WriteConfigError(
                f"the records to write to topic {self.topic!r} have the columns {columns}: "
                + (f"{unknown} cannot be written" if unknown else "no 'value'")
                + f". write_kafka takes {list(ACCEPTED_COLUMNS)} and needs 'value'; make the "
                "transform or sql return those (select or rename the columns). Nothing was read "
                "or written."
            )
        marked = (given.native_as_read and given.shape is None
                  and self.delivery_guarantee == "exactly_once")
        return Intake(RowsWithSplitEnds() if marked else SparkRows())

    def describe(self) -> dict[str, Any]:
        """``{"topic", "delivery_guarantee", "write_id", "records_written": 0,
        "skipped_tasks": []}``."""
        return {"topic": self.topic, "delivery_guarantee": self.delivery_guarantee,
                "write_id": self.write_id, "records_written": 0, "skipped_tasks": []}

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:
        """Keep the output's column names: :meth:`intake` checks them once it knows which of
        them this sink writes (``write_kafka`` checks their types too, before it writes)."""
        self._columns = list(shaped.columns)

    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """``write_kafka`` (one call for the output and the dead letters); returns
        :meth:`describe` with ``records_written`` and ``skipped_tasks``."""
        from airflow_provider_kafka_spark.spark import kafka_errors
        from airflow_provider_kafka_spark.spark.write.writer import write_kafka

        if self.kafka_config is None:
            raise ConfigurationError(f"KafkaSink({self.topic!r}): no kafka_config; pass the "
                                     "output cluster's librdkafka config.")
        config = kafka_config_of(self.kafka_config)
        records, topic = self._selected(df), self.topic
        if dead_letters is not None:
            if self.dead_letter_topic is None:
                raise ConfigurationError("KafkaSink: undecodable records to dead-letter but no "
                                         "dead_letter_topic; pass one.")
            records = _with_topic(records, self.topic).unionByName(
                _dead_letter_records(dead_letters, self.dead_letter_topic),
                allowMissingColumns=True)
            topic = None
        with kafka_errors():
            result = write_kafka(
                records, config, topic=topic,
                delivery_guarantee=self.delivery_guarantee,
                transactional_id_prefix=self.transactional_id_prefix, write_id=self.write_id,
                ledger_since=self.ledger_since, input_identity=self.input_identity,
            )
        described = {**self.describe(), "records_written": result.records_written,
                     "skipped_tasks": list(result.skipped_tasks)}
        if dead_letters is not None:
            described["dead_letter"] = {"topic": self.dead_letter_topic}
        return described

    def _kept(self, columns: Sequence[str]) -> list[str]:
        """Of ``columns``, those this sink writes: all, or the records' own when they were
        not transformed (and the readers' end rows' column)."""
        from airflow_provider_kafka_spark.spark.split_ends import SPLIT_END_COLUMN

        if not self.records_as_read:
            return list(columns)
        return [c for c in (*RECORD_COLUMNS, SPLIT_END_COLUMN) if c in columns]

    def _selected(self, df: DataFrame) -> DataFrame:
        if not self.records_as_read:
            return df
        from pyspark.sql import functions as F

        # Header keys read from Kafka are never null; saying so in the type spares write_kafka
        # a pre-pass over the records looking for null keys.
        return df.select(*[_non_null_header_keys(F) if c == "headers" else c
                           for c in self._kept(df.columns)])


def _non_null_header_keys(F: Any) -> Any:
    """The ``headers`` column with a non-nullable element and key type (same values: a
    header read from Kafka always has a key)."""
    return F.transform("headers", lambda h: F.struct(
        F.coalesce(h["key"], F.lit("")).alias("key"), h["value"].alias("value"))).alias("headers")


def _with_topic(df: DataFrame, topic: str) -> DataFrame:
    """The output rows with a ``topic`` column; string keys and values as UTF-8 bytes (what
    ``write_kafka`` writes for them), so that they union with the dead letters' bytes."""
    from pyspark.sql import functions as F

    columns = [F.col(c).cast("binary").alias(c) if c in ("key", "value") else F.col(c)
               for c in df.columns if c != "topic"]
    return df.select(*columns, F.lit(topic).alias("topic"))


def _dead_letter_records(dead_letters: DataFrame, topic: str) -> DataFrame:
    """Undecodable records as ``write_kafka`` rows for the dead-letter ``topic``."""
    from pyspark.sql import functions as F

    def header(name: str, value: Any) -> Any:
        return F.struct(F.lit(f"kafka_spark.{name}").alias("key"),
                        value.cast("string").cast("binary").alias("value"))

    added = F.array(
        header("error", F.col("error")), header("topic", F.col("topic")),
        header("partition", F.col("partition")), header("offset", F.col("offset")),
        header("timestamp", F.unix_millis(F.col("timestamp"))))
    headers = F.concat(F.coalesce(F.col("headers"), F.array().cast(
        "array<struct<key:string,value:binary>>")), added) \
        if "headers" in dead_letters.columns else added
    return dead_letters.select(F.col("key"), F.col("value"), headers.alias("headers"),
                               F.col("timestamp"), F.lit(topic).alias("topic"))


def default_write_id(dag_id: str, task_id: str, run_id: str, ranges: OffsetRanges) -> str:
    """``<dag_id>/<task_id>/<run_id>/<digest>``: the same for a retry of the task (same XCom
    ranges), different when the ranges were resolved again to other offsets."""
    bounds = json.dumps([[r.topic, r.partition, r.start, r.stop] for r in ranges])
    return f"{dag_id}/{task_id}/{run_id}/{hashlib.sha256(bounds.encode()).hexdigest()[:16]}"
