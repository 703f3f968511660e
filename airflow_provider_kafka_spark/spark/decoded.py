"""The decoding step of :func:`~airflow_provider_kafka_spark.spark.ingest.ingest`:
:func:`decoding_of` (``decode_kafka`` with a :class:`Decoding`'s options, a registry subject
pinned) and :class:`DecodedSlice` (its output after ``on_corrupt``: the records to write, the
dead letters, the counts)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import CorruptRecordError, kafka_errors
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import REGISTRY_FORMATS, bad_argument
from airflow_provider_kafka_spark.spark.formats import Subject, frozen_config, resolve_schema
from airflow_provider_kafka_spark.spark.ingest_result import DecodeCounts
from airflow_provider_kafka_spark.spark.read.decode import (
    DEAD_LETTER_COLUMNS,
    decode_kafka,
    json_struct,
    registry_codec,
    settle_left_to_spark,
)
from airflow_provider_kafka_spark.spark.read.landing import Landing
from airflow_provider_kafka_spark.spark.read.marking import (
    DEAD_LETTER_SOURCES,
    FieldDecoder,
    ReaderDecoding,
)

log = logging.getLogger(__name__)


def decoding_of(owner: str, decoding: Decoding | None,
                ranges: OffsetRanges) -> SliceDecoding | None:
    """``decoding``'s options for ``decode_kafka`` with ``on_corrupt="dead_letter"`` (ingest
    applies its own policy to what it marks), a registry format's default subject filled in
    and a subject's ``latest`` version pinned now; None when nothing is decoded."""
    if decoding is None:
        return None
    registry = decoding.registry_config()
    topics = sorted({r.topic for r in ranges})
    schemas = {}
    for field, fmt, schema in (("key", decoding.key_format, decoding.key_schema),
                               ("value", decoding.value_format, decoding.value_schema)):
        if schema is None and fmt in REGISTRY_FORMATS:
            if len(topics) != 1:
                raise bad_argument(owner, f"{field}_schema", None,
                                   f"the ranges cover {len(topics)} topics {topics}; pass "
                                   f"the reader schema, e.g. Subject('<subject>')",
                                   problem="is missing")
            schema = Subject(f"{topics[0]}-{field}")
        if isinstance(schema, Subject) and schema.version == "latest" and \
                fmt in REGISTRY_FORMATS:
            resolved = resolve_schema(frozen_config(registry, f"{field}_format"),
                                      fmt, schema)
            schema = Subject(schema.name, resolved.version or "latest")
        schemas[field] = schema
    return SliceDecoding({
        "key_format": decoding.key_format, "value_format": decoding.value_format,
        "key_schema": schemas["key"], "value_schema": schemas["value"],
        "schema_registry": registry, "on_corrupt": "dead_letter"})


class SliceDecoding:
    """How an ingest decodes its slice: through Spark (call it on the records read: the
    marked records of ``decode_kafka``) or in the readers (:meth:`in_readers`), with the
    same result."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    def __call__(self, df: DataFrame) -> DataFrame:
        """``df`` (the records read) decoded and marked by ``decode_kafka``."""
        return decode_kafka(df, **self.options)

    def in_readers(self, marked_schema: StructType) -> ReaderDecoding | None:
        """The decoding the readers do themselves, giving ``marked_schema`` (what
        :meth:`__call__` gives of the read); None when a field's format or schema has no
        decoder there with Spark's exact semantics (a json schema ``native_json`` refuses)."""
        registry = self.options["schema_registry"]
        fields = []
        for field in ("key", "value"):
            fmt, schema = self.options[f"{field}_format"], self.options[f"{field}_schema"]
            if fmt in REGISTRY_FORMATS:
                fields.append(FieldDecoder(field, fmt, codec=registry_codec(field, fmt, schema,
                                                                            registry)))
            elif fmt == "json":
                from airflow_provider_kafka_spark.spark.formats.json_arrow import native_json

                struct = json_struct(field, schema)
                text = schema if isinstance(schema, str) else struct.simpleString()
                if native_json(field, struct, text) is None:
                    return None
                fields.append(FieldDecoder(field, fmt, json_struct=struct.json(),
                                           json_text=text))
            else:
                fields.append(FieldDecoder(field, fmt))
        return ReaderDecoding(fields[0], fields[1], marked_schema.json())

    def for_rows(self, in_readers: ReaderDecoding | None) -> ReaderDecoding | None:
        """``in_readers`` for a read whose marked records become Spark rows: the records a
        JSON field leaves to Spark marked for :meth:`settled` (None when the other field is a
        registry format: :meth:`settled` decodes only what Spark's expressions decode)."""
        if in_readers is None or not in_readers.leaves_to_spark:
            return in_readers
        if {in_readers.key.format, in_readers.value.format} & set(REGISTRY_FORMATS):
            return None
        return replace(in_readers, settle_in_spark=True)

    def settled(self, marked: DataFrame) -> DataFrame:
        """``marked`` (the readers' marked records) with those left to Spark decoded here."""
        return settle_left_to_spark(marked, **self.options)


def good_records(marked: DataFrame) -> DataFrame:
    """The decodable records of ``decode_kafka``'s ``dead_letter`` output, without its
    dead-letter columns."""
    return marked.where(F.col("decode_error").isNull()).drop(*DEAD_LETTER_COLUMNS)


class DecodedSlice:
    """A decoded slice (``decode_kafka``'s ``dead_letter`` output) after ``on_corrupt``: the
    records to write (``good``), the dead letters or None, and the counts.

    With ``skip`` and ``fail`` the counts and the first corrupt record are observed in the
    pass that writes the records (``DataFrame.observe``), with no job of their own.
    ``dead_letter`` hands the sink two outputs of one slice, which Spark writes in two jobs:
    the marked slice is cached and counted first (a slice without corrupt records then has no
    dead-letter output).
    """

    def __init__(self, marked: DataFrame, on_corrupt: str, owner: str) -> None:
        self.on_corrupt, self.owner = on_corrupt, owner
        self._row: dict[str, Any] | None = None
        self._cached: DataFrame | None = None
        self.dead_letters: DataFrame | None = None
        if on_corrupt == "dead_letter":
            self._cached = marked.persist(StorageLevel.MEMORY_AND_DISK)
            self._row = self._aggregate(self._cached)
            marked = self._cached
            if self._row["bad"]:
                kept = [c for c in DEAD_LETTER_SOURCES if c in marked.columns]
                self.dead_letters = marked.where(_bad()).select(
                    F.col("raw_key").alias("key"), F.col("raw_value").alias("value"), *kept,
                    F.col("decode_error").alias("error"))
            self._observation = None
        else:
            self._observation = Observation(f"kafka_spark_decode_{uuid.uuid4().hex}")
            marked = marked.observe(self._observation, *_counts())
        self.good = good_records(marked)

    def check(self, marked: Callable[[], DataFrame]) -> None:
        """With ``on_corrupt="fail"``, raise :class:`CorruptRecordError` when a record could not
        be decoded: from what the write's pass observed, else from an aggregation job over
        ``marked()`` (a second read: before the write, for a sink whose write is visible)."""
        if self.on_corrupt != "fail":
            return
        row = self._counted(marked)
        if row["bad"]:
            raise corrupt_records_error(self.owner, row["bad"], row["first"])

    def counts(self, marked: Callable[[], DataFrame]) -> DecodeCounts:
        """The counts, once the records were written (see :meth:`check` for ``marked``)."""
        row = self._counted(marked)
        good, corrupt = int(row["rows"]) - int(row["bad"]), int(row["bad"])
        return DecodeCounts(decoded=good, skipped=corrupt if self.on_corrupt == "skip" else 0,
                            dead_lettered=corrupt if self.dead_letters is not None else 0)

    def release(self) -> None:
        """Drop the cached slice (``dead_letter``)."""
        if self._cached is not None:
            self._cached.unpersist()

    def _counted(self, marked: Callable[[], DataFrame]) -> dict[str, Any]:
        if self._row is None:
            self._row = _observed(self._observation) if self._observation else None
        if self._row is None:
            log.info("Counting the decoded records in a job of their own.")
            self._row = self._aggregate(marked())
        return self._row

    @staticmethod
    def _aggregate(marked: DataFrame) -> dict[str, Any]:
        with kafka_errors():
            row = marked.agg(*_counts()).first()
        assert row is not None
        return row.asDict(recursive=False)


def corrupt_records_error(owner: str, bad: int, first: Mapping[str, Any]) -> CorruptRecordError:
    """The error of ``on_corrupt="fail"``: ``bad`` records could not be decoded, the first
    (``topic``, ``partition``, ``offset``, ``decode_error``) is ``first``."""
    return CorruptRecordError(
        f"{owner}: {bad} record(s) could not be decoded; the first is "
        f"{first['topic']}/{first['partition']} at offset {first['offset']}: "
        f"{first['decode_error']}. Nothing was written. Fix the producer or the reader "
        "schema, or pass on_corrupt='skip' or 'dead_letter'.",
        topic=first["topic"], partition=first["partition"], offset=first["offset"])


def landed_counts(landing: Landing, on_corrupt: str, owner: str) -> DecodeCounts:
    """The decode counts of a landing whose readers decoded the records; with
    ``on_corrupt="fail"`` and a corrupt record, :class:`CorruptRecordError` instead (the
    sink adopts nothing: its staged files go with its abort)."""
    bad = landing.corrupt_records()
    first = landing.first_corrupt()
    if first is not None and on_corrupt == "fail":
        raise corrupt_records_error(owner, bad, first)
    return DecodeCounts(decoded=landing.records() - bad,
                        skipped=bad if on_corrupt == "skip" else 0,
                        dead_lettered=bad if on_corrupt == "dead_letter" else 0)


def _bad() -> Column:
    return F.col("decode_error").isNotNull()


def _counts() -> tuple[Column, ...]:
    """What a decoded slice's pass observes: its rows, the corrupt ones, the first of those."""
    return (F.count(F.lit(1)).alias("rows"), F.count_if(_bad()).alias("bad"),
            F.min(F.when(_bad(), F.struct("topic", "partition", "offset", "decode_error")))
            .alias("first"))


def _observed(observation: Observation) -> dict[str, Any] | None:
    """What ``observation`` saw, or None when the plan that carried it has not run (a
    transform that did not read it, or a sink that has not written yet)."""
    from pyspark.errors import PySparkAssertionError

    java = getattr(observation, "_jo", None)  # a classic session's; Spark Connect has none
    if java is not None and not java.future().isCompleted():
        return None
    try:
        return dict(observation.get)
    except PySparkAssertionError:
        return None
