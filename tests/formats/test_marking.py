"""Decoding in the readers (``spark/read/marking.py``) gives what the Spark path gives, record
by record, on the same slice: every registry format with good, corrupt and null records, a
key decoded as text, older writer schemas, schema ids in headers; and ``ingest`` landing a
decoded, partitioned slice through the readers lands the same rows, dead letters and counts
as Spark's writer does, or fails naming the first corrupt record with nothing published."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import functions as F

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.errors import CorruptRecordError
from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.sinks import FileSink
from airflow_provider_kafka_spark.spark import decode_kafka, ingest, read_kafka, write_kafka
from airflow_provider_kafka_spark.spark.decoded import SliceDecoding
from airflow_provider_kafka_spark.spark.formats import Subject
from tools.kafka_records import produce

pytestmark = [pytest.mark.formats, pytest.mark.integration, pytest.mark.spark]

UTC = dt.UTC
HOUR_MS = 3_600_000
COLUMNS = ("id long not null, name string, tags array<string>, attrs map<string, long>, "
           "at timestamp, inner struct<a long, b string>")


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def _both(spark: Any, kafka_config: dict[str, Any], topic: str,
          **options: Any) -> tuple[Any, Any]:
    """The marked records of ``topic`` decoded by Spark's path and by the readers."""
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    decoding = SliceDecoding({"key_format": "bytes", "value_format": "bytes", "key_schema": None,
                              "value_schema": None, "schema_registry": None,
                              **options, "on_corrupt": "dead_letter"})
    spark_path = decoding(read_kafka(spark, ranges, kafka_config))
    in_readers = decoding.in_readers(spark_path.schema)
    assert in_readers is not None
    return spark_path, read_kafka(spark, ranges, kafka_config, decoding=in_readers)


def _same(spark_path: Any, readers: Any) -> list[dict[str, Any]]:
    assert readers.schema == spark_path.schema
    rows = sorted((_plain(r) for r in readers.collect()), key=lambda r: r["offset"])
    expected = sorted((_plain(r) for r in spark_path.collect()), key=lambda r: r["offset"])
    assert rows == expected
    return rows


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_the_readers_decode_each_registry_format_as_the_spark_path_does(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, schema_registry: dict[str, Any],
        fmt: str) -> None:
    topic = new_topic(partitions=2)
    rows = [{"id": i, "name": None if i == 3 else f"name-{i}", "tags": [f"t{i}"],
             "attrs": {"k": i}, "at": dt.datetime(2026, 11, 20, i, 5, tzinfo=UTC),
             "inner": None if i == 2 else {"a": i, "b": f"b{i}"}} for i in range(8)]
    df = spark.createDataFrame(rows, COLUMNS)
    write_kafka(df.select(F.col("name").alias("key"), F.struct("*").alias("value")),
                kafka_config, topic=topic, value_format=fmt, schema_registry=schema_registry,
                delivery_guarantee="at_least_once")
    good = b"\x00" + (987654).to_bytes(4, "big") + b"\x02"
    produce(kafka_config, topic, [(0, b"k\xff", b"not wire format", 0),  # key not UTF-8 too
                                  (1, None, good, 0),  # an unknown schema id
                                  (1, b"tomb", None, 0),  # a tombstone: not corrupt
                                  (0, None, b"\x00\x00", 0)])  # truncated

    spark_path, readers = _both(spark, kafka_config, topic, key_format="string",
                                value_format=fmt, value_schema=Subject(f"{topic}-value"),
                                schema_registry=schema_registry)
    marked = _same(spark_path, readers)

    assert len(marked) == 12
    bad = [r for r in marked if r["decode_error"] is not None]
    assert len(bad) == 3
    assert {r["decode_error"] for r in bad if r["raw_key"] == b"k\xff"} == {
        "key is not valid string"}
    assert sorted(r["value"]["id"] for r in marked if r["value"] is not None) == list(range(8))


def test_older_writer_schemas_and_ids_in_headers_decode_as_the_spark_path_does(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient(schema_registry)
    v1 = json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None}]})
    v2 = json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "country", "type": "string", "default": "NL"}]})
    ctx = SerializationContext(topic, MessageField.VALUE)
    old = AvroSerializer(client, v1)
    produce(kafka_config, topic, [(0, None, old({"id": i, "note": f"n{i}"}, ctx), 0)
                                  for i in range(3)])
    new = AvroSerializer(client, v2)
    produce(kafka_config, topic, [(0, None, new({"id": 3, "country": "BE"}, ctx), 0)])
    headers = spark.createDataFrame([(4, "DE, a country")], "id long not null, country string not null")
    write_kafka(headers.select(F.struct("*").alias("value")), kafka_config, topic=topic,
                value_format="avro", value_schema=Subject(f"{topic}-value", 2),
                schema_registry=schema_registry,
                schema_id_location="headers", delivery_guarantee="at_least_once")

    for version in ("latest", 1):
        spark_path, readers = _both(spark, kafka_config, topic, value_format="avro",
                                    value_schema=Subject(f"{topic}-value", version),
                                    schema_registry=schema_registry)
        marked = _same(spark_path, readers)
        assert [r["decode_error"] for r in marked] == [None] * 5, marked
        assert [r["value"]["id"] for r in marked] == [0, 1, 2, 3, 4]
    assert [r["value"] for r in marked][:2] == [{"id": 0, "note": "n0"}, {"id": 1, "note": "n1"}]


@pytest.fixture
def events(kafka_config: dict[str, Any], new_topic: Any,
           schema_registry: dict[str, Any]) -> tuple[str, int]:
    """Avro events over 3 partitions and 3 hours, with two corrupt records."""
    topic = new_topic(partitions=3)
    client = SchemaRegistryClient(schema_registry)
    schema = json.dumps({"type": "record", "name": "Event", "fields": [
        {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
        {"name": "ts", "type": "long"}]})
    serializer = AvroSerializer(client, schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    start = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    records = [(i % 3, None, serializer({"id": i, "user": f"u{i % 5}",
                                         "ts": start + (i % 3) * HOUR_MS + i}, ctx), 0)
               for i in range(90)]
    records[40] = (1, None, b"garbage", 0)
    records[71] = (2, None, b"\x00\x00\x00\x00\x07", 0)
    produce(kafka_config, topic, records)
    return topic, start


SHAPE = Shape(["partition", "offset", "value.*"], {"hour": Derived("value.ts", "hour", "ms")})


def _decoding(schema_registry: dict[str, Any], on_corrupt: str) -> Decoding:
    return Decoding(value_format="avro", schema_registry=schema_registry, on_corrupt=on_corrupt)


def _landed(spark: Any, path: Path) -> Counter[str]:
    """The rows of the Parquet folder ``path`` (a multiset, each row as JSON text)."""
    return Counter(json.dumps(_plain(r), sort_keys=True, default=repr)
                   for r in spark.read.parquet(str(path)).collect())


def test_a_decoded_partitioned_landing_lands_what_sparks_writer_lands(
        spark: Any, kafka_config: dict[str, Any], events: tuple[str, int],
        schema_registry: dict[str, Any], tmp_path: Path) -> None:
    topic, start = events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"

    result = ingest(spark, ranges, kafka_config, FileSink(str(ours), partition_by=["hour"]),
                    decode=_decoding(schema_registry, "dead_letter"), shape=SHAPE)
    spark_writer = ingest(spark, ranges, kafka_config, FileSink(
        str(theirs), partition_by=["hour"],
        options={"compression": "snappy", "parquet.enable.dictionary": "true"}),
        decode=_decoding(schema_registry, "dead_letter"), shape=SHAPE)

    assert result.records == 90
    assert result.decode is not None and result.decode.to_dict() == {
        "decoded": 88, "skipped": 0, "dead_lettered": 2}
    assert spark_writer.decode == result.decode
    assert result.output["dead_letter"]["records"] == 2
    hours = sorted(p.name for p in ours.iterdir() if p.name.startswith("hour="))
    assert hours == [f"hour={time.strftime('%Y-%m-%d-%H', time.gmtime(start / 1000 + h * 3600))}"
                     for h in range(3)]
    assert _landed(spark, ours) == _landed(spark, theirs)
    assert sum(_landed(spark, ours).values()) == 88
    assert spark.read.parquet(str(ours)).schema == spark.read.parquet(str(theirs)).schema
    dead = ours / "_dead_letter"
    assert _landed(spark, dead) == _landed(spark, theirs / "_dead_letter")
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in
                  spark.read.parquet(str(dead)).collect()) == [
        (1, 13, b"garbage"), (2, 23, b"\x00\x00\x00\x00\x07")]


def test_a_corrupt_record_fails_a_decoded_landing_naming_it_and_skip_counts_it(
        spark: Any, kafka_config: dict[str, Any], events: tuple[str, int],
        schema_registry: dict[str, Any], tmp_path: Path) -> None:
    topic, _ = events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    failed = tmp_path / "failed"
    with pytest.raises(CorruptRecordError, match=rf"2 record\(s\) could not be decoded; the "
                                                 rf"first is {topic}/1 at offset 13: value is "
                                                 "not avro of the reader schema") as caught:
        ingest(spark, ranges, kafka_config, FileSink(str(failed), partition_by=["hour"]),
               decode=_decoding(schema_registry, "fail"), shape=SHAPE)
    assert (caught.value.partition, caught.value.offset) == (1, 13)
    assert not failed.exists() or not any(failed.rglob("*.parquet"))

    skipped = ingest(spark, ranges, kafka_config,
                     FileSink(str(tmp_path / "skipped"), partition_by=["hour"]),
                     decode=_decoding(schema_registry, "skip"), shape=SHAPE)
    assert skipped.decode is not None and skipped.decode.to_dict() == {
        "decoded": 88, "skipped": 2, "dead_lettered": 0}
    assert "dead_letter" not in skipped.output
    assert sum(_landed(spark, tmp_path / "skipped").values()) == 88
    assert not (tmp_path / "skipped" / "_dead_letter").exists()


JSON_SCHEMA = "id long, user string, ts long, tags array<string>"


@pytest.fixture
def json_events(kafka_config: dict[str, Any], new_topic: Any) -> tuple[str, int]:
    """JSON events over 2 partitions and 2 hours: good ones, a corrupt one, a tombstone, one
    with an unknown field and one whose ``user`` is a number (its JSON text)."""
    topic = new_topic(partitions=2)
    start = (int(time.time() * 1000) // HOUR_MS - 2) * HOUR_MS
    values: list[bytes | None] = [json.dumps({
        "id": i, "user": f"u{i % 3}", "ts": start + (i % 2) * HOUR_MS + i,
        "tags": [f"t{i}"], "extra": {"x": i}}).encode() for i in range(40)]
    values[7] = b'{"id": 7, "user": "u1", "ts": "not a number"}'
    values[9] = None
    values[11] = f'{{"id": 11, "user": 42, "ts": {start + HOUR_MS + 11}}}'.encode()
    produce(kafka_config, topic, [(i % 2, None, v, 0) for i, v in enumerate(values)])
    return topic, start


JSON_SHAPE = Shape(["partition", "offset", "value.*"], {"hour": Derived("value.ts", "hour", "ms")})


def test_json_decodes_in_the_readers_as_from_json_does(
        spark: Any, kafka_config: dict[str, Any], json_events: tuple[str, int]) -> None:
    topic, _ = json_events
    spark_path, readers = _both(spark, kafka_config, topic, value_format="json",
                                value_schema=JSON_SCHEMA)
    marked = _same(spark_path, readers)
    assert [r["offset"] for r in marked if r["decode_error"]] == [3]  # record 7: offset 3
    assert next(r for r in marked if r["partition"] == 1 and r["offset"] == 5)["value"][
        "user"] == "42"


def test_a_json_landing_lands_what_sparks_writer_lands_also_when_spark_must_decode_some(
        spark: Any, kafka_config: dict[str, Any], json_events: tuple[str, int],
        tmp_path: Path, caplog: Any) -> None:
    topic, _ = json_events
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    decode = Decoding(value_format="json", value_schema=JSON_SCHEMA, on_corrupt="dead_letter")
    spark_writer = {"compression": "snappy", "parquet.enable.dictionary": "true"}

    ours = ingest(spark, ranges, kafka_config,
                  FileSink(str(tmp_path / "ours"), partition_by=["hour"]),
                  decode=decode, shape=JSON_SHAPE)
    ingest(spark, ranges, kafka_config, FileSink(str(tmp_path / "theirs"), partition_by=["hour"],
                                                 options=spark_writer),
           decode=decode, shape=JSON_SHAPE)
    assert ours.decode is not None and ours.decode.to_dict() == {
        "decoded": 39, "skipped": 0, "dead_lettered": 1}
    assert _landed(spark, tmp_path / "ours") == _landed(spark, tmp_path / "theirs")
    assert _landed(spark, tmp_path / "ours" / "_dead_letter") == _landed(
        spark, tmp_path / "theirs" / "_dead_letter")
    assert "decoding the slice through Spark instead" not in caplog.text

    # a string field given a fraction: Spark prints it with the JVM's Double.toString
    produce(kafka_config, topic, [(0, None, b'{"id": 99, "user": 0.1, "ts": 5}', 0)])
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    again = ingest(spark, ranges, kafka_config,
                   FileSink(str(tmp_path / "again"), partition_by=["hour"]),
                   decode=decode, shape=JSON_SHAPE)
    ingest(spark, ranges, kafka_config, FileSink(str(tmp_path / "again_theirs"),
                                                 partition_by=["hour"], options=spark_writer),
           decode=decode, shape=JSON_SHAPE)
    assert "decoding the slice through Spark instead" in caplog.text
    assert again.records == 41 and again.decode is not None and again.decode.decoded == 40
    assert _landed(spark, tmp_path / "again") == _landed(spark, tmp_path / "again_theirs")
    assert ("0.1" in {r.user for r in spark.read.parquet(str(tmp_path / "again")).collect()})


def test_json_rows_for_a_transform_are_decoded_by_the_readers_and_the_rest_by_spark(
        spark: Any, kafka_config: dict[str, Any], json_events: tuple[str, int],
        tmp_path: Path) -> None:
    topic, _ = json_events
    produce(kafka_config, topic, [(0, None, b'{"id": 99, "user": 0.1, "ts": 5}', 0),
                                  (1, b"\xff", b'{"id": 98, "user": 1e300, "ts": 6}', 0)])
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    options = {"key_format": "string", "value_format": "json", "value_schema": JSON_SCHEMA}
    spark_path = decode_kafka(read_kafka(spark, ranges, kafka_config), **options,
                              on_corrupt="dead_letter")

    result = ingest(spark, ranges, kafka_config, FileSink(str(tmp_path / "out")),
                    decode=Decoding(**options, on_corrupt="dead_letter"),
                    transform=lambda df: df.select("partition", "offset", "key", "value.*"))

    expected = spark_path.where("decode_error IS NULL").select("partition", "offset", "key",
                                                                "value.*")
    assert _landed(spark, tmp_path / "out") == Counter(
        json.dumps(_plain(r), sort_keys=True, default=repr) for r in expected.collect())
    assert result.decode is not None and result.decode.to_dict() == {
        "decoded": 40, "skipped": 0, "dead_lettered": 2}
    assert {r.user for r in spark.read.parquet(str(tmp_path / "out")).collect()} >= {"0.1", "42"}
    dead = spark.read.parquet(str(tmp_path / "out" / "_dead_letter")).collect()
    assert sorted((r.partition, r.error) for r in dead) == [
        (1, "key is not valid string"),
        (1, "value is not JSON matching the schema " + JSON_SCHEMA)]
