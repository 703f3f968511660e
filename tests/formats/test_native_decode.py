"""The native decoders (issue 53) give what today's paths give, record for record: Avro in the
Schema Registry wire format against confluent-kafka's deserializer (``decode_batches`` with the
native path turned off), on Arrow batches with a real registry and no Spark; and one read through
``decode_kafka`` on a real broker under each ``on_corrupt`` policy."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import Observation

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.spark import decode_kafka, read_kafka
from airflow_provider_kafka_spark.spark.formats import (
    FieldCodec,
    Subject,
    decode_batches,
    fast,
    frozen_config,
    resolve_schema,
    spark_type_of,
)
from tools.kafka_records import produce

pytestmark = [pytest.mark.formats]

UTC = dt.UTC
# v1, an older writer schema: `legacy` was removed since, `country` not there yet.
V1 = {"type": "record", "name": "Event", "namespace": "t", "fields": [
    {"name": "id", "type": "int"},
    {"name": "legacy", "type": ["null", "string"], "default": None},
    {"name": "name", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "score", "type": "float"},
]}
# v2, the reader schema: id promoted int -> long, score float -> double, and richer fields.
V2 = {"type": "record", "name": "Event", "namespace": "t", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "score", "type": "double"},
    {"name": "country", "type": "string", "default": "NL"},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                         "precision": 10, "scale": 2}], "default": None},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {"name": "at_local", "type": ["null", {"type": "long",
                                           "logicalType": "local-timestamp-micros"}],
     "default": None},
    {"name": "tod", "type": ["null", {"type": "int", "logicalType": "time-millis"}],
     "default": None},
    {"name": "tod_us", "type": ["null", {"type": "long", "logicalType": "time-micros"}],
     "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}, "default": {}},
    {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
        {"name": "a", "type": "long"}, {"name": "b", "type": ["string", "null"]}]}],
     "default": None},
    {"name": "raw", "type": ["null", "bytes"], "default": None},
    {"name": "digest", "type": ["null", {"type": "fixed", "name": "Digest", "size": 4}],
     "default": None},
]}
# Not compatible with the reader schema: `name` is a long.
OTHER = {"type": "record", "name": "Event", "namespace": "t", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "long"}]}


def _v1(i: int) -> dict[str, Any]:
    return {"id": i, "legacy": f"old{i}", "name": f"n{i}", "kind": "ABC"[i % 3],
            "ts": dt.datetime(2026, 1, 1, i % 24, tzinfo=UTC), "score": i / 3}


def _v2(i: int) -> dict[str, Any]:
    full = i % 2 == 0
    return {"id": 10**12 + i, "name": f"name é {i}", "kind": "ABC"[i % 3],
            "ts": dt.datetime(2026, 1, 2, i % 24, 30, tzinfo=UTC), "score": i * 1.5,
            "country": "BE",
            "amount": decimal.Decimal(f"{i}.25") if full else None,
            "day": dt.date(2026, 1, 1 + i % 28) if full else None,
            "at_local": dt.datetime(2026, 1, 2, 3, 4, 5, 6) if full else None,
            "tod": dt.time(1, 2, 3, 4000) if full else None,
            "tod_us": dt.time(4, 5, 6, 7) if full else None,
            "tags": [f"t{i}", "x"] if full else [],
            "attrs": {"k": i, "n": None} if full else {},
            "inner": {"a": i, "b": None if i % 4 == 0 else "b"} if full else None,
            "raw": bytes([i % 256, 0, 255]) if full else None,
            "digest": b"\x00\x01\x02\x03" if full else None}


@pytest.fixture(scope="module")
def records(schema_registry: dict[str, Any]) -> tuple[list[bytes | None], FieldCodec]:
    """Wire-format values of both schema versions, an incompatible one, and corrupt ones;
    the codec of the v2 reader schema."""
    client = SchemaRegistryClient(schema_registry)
    subject = "native-decode-value"
    ctx = SerializationContext("native-decode", MessageField.VALUE)
    old = AvroSerializer(client, json.dumps(V1), conf={"auto.register.schemas": True})
    new = AvroSerializer(client, json.dumps(V2))
    other = AvroSerializer(client, json.dumps(OTHER),
                           conf={"subject.name.strategy": lambda *_: "native-decode-other"})
    olds = [old(_v1(i), ctx) for i in range(40)]
    news = [new(_v2(i), ctx) for i in range(40)]
    unknown = b"\x00" + (987654).to_bytes(4, "big") + news[0][5:]
    values: list[bytes | None] = []
    for i in range(40):
        values += [olds[i], news[i]]
    values += [None, b"plain text", b"\x00\x00", news[1][:-4], olds[2][:8], unknown,
               other({"id": 1, "name": 2}, ctx), news[3] + b"trailing", None]
    config = frozen_config(schema_registry, "test")
    resolved = resolve_schema(config, "avro", Subject(subject))
    assert resolved.schema_id is not None
    return values, FieldCodec("value", resolved, config, spark_type_of(resolved).json())


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([None] * n, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": ["t"] * n, "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64())})


def _decode(batch: pa.RecordBatch, codec: FieldCodec) -> tuple[list[Any], list[str | None]]:
    out = list(decode_batches((codec,), False)(iter([batch])))
    assert len(out) == 1
    return out[0].column("_value_decoded").to_pylist(), out[0].column("_value_error").to_pylist()


def _today(batch: pa.RecordBatch, codec: FieldCodec,
           monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[str | None]]:
    with monkeypatch.context() as m:
        m.setattr(fast, "native_avro", lambda *_: None)
        return _decode(batch, codec)


def test_native_avro_gives_todays_values_and_corrupt_records(
        records: tuple[list[bytes | None], FieldCodec], monkeypatch: pytest.MonkeyPatch) -> None:
    values, codec = records
    batch = _batch(values)
    assert fast.native_avro(codec.field, codec.schema.schema_str, codec.spark_type,
                            codec.registry) is not None
    native_values, native_errors = _decode(batch, codec)
    today_values, today_errors = _today(batch, codec, monkeypatch)

    assert native_values == today_values
    assert [e is None for e in native_errors] == [e is None for e in today_errors]
    corrupt = [i for i, e in enumerate(today_errors) if e is not None]
    assert corrupt == [81, 82, 83, 84, 85, 86]  # text, too short, truncated x2, unknown, other
    # An unknown id is reported as today's path does, not as a decoding failure.
    assert native_errors[85] == today_errors[85]
    assert "the registry has no schema with this record's id" in str(native_errors[85])
    assert "the Avro payload" in str(native_errors[83])  # arrow-avro's reason, not fastavro's
    assert native_values[80] is None and native_errors[80] is None  # a tombstone
    # Resolution: v1's removed field gone, the added one defaulted, int/float promoted.
    assert native_values[0]["country"] == "NL" and "legacy" not in native_values[0]
    assert native_values[0]["id"] == 0 and native_values[2]["score"] == pytest.approx(1 / 3)
    assert native_values[87]["id"] == 10**12 + 3  # bytes after the record are ignored


def test_native_avro_fetches_a_new_writer_schema_once_and_keeps_its_type(
        records: tuple[list[bytes | None], FieldCodec], monkeypatch: pytest.MonkeyPatch) -> None:
    values, codec = records
    decoder = fast.native_avro(codec.field, codec.schema.schema_str, codec.spark_type,
                               codec.registry)
    assert decoder is not None
    fetched: list[int] = []
    real = fast.NativeAvro._fetch

    def counting(self: fast.NativeAvro, schema_id: int, where: str) -> None:
        fetched.append(schema_id)
        real(self, schema_id, where)

    monkeypatch.setattr(fast.NativeAvro, "_fetch", counting)
    for _ in range(3):
        decoded = decoder.decode(pa.array(values, pa.binary()), lambda i: f"t/0 at offset {i}")
        assert decoded.values.type == pa.struct(list(decoded.values.type))
    assert fetched == []  # all known after the first test's batch, or missing (987654)
    assert 987654 in decoder.missing


def test_a_batch_of_only_corrupt_or_null_records(
        records: tuple[list[bytes | None], FieldCodec], monkeypatch: pytest.MonkeyPatch) -> None:
    _, codec = records
    batch = _batch([None, b"x", None])
    values, errors = _decode(batch, codec)
    today_values, today_errors = _today(batch, codec, monkeypatch)
    assert values == today_values == [None, None, None]
    assert [e is None for e in errors] == [e is None for e in today_errors] == [True, False, True]
    empty = _batch([])
    assert _decode(empty, codec) == ([], [])


def _read(spark: Any, kafka_config: dict[str, Any], topic: str, **decode: Any) -> Any:
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    return decode_kafka(read_kafka(spark, ranges, kafka_config), **decode)


@pytest.mark.integration
@pytest.mark.spark
def test_decode_kafka_takes_the_native_path_under_each_policy(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any], records: tuple[list[bytes | None], FieldCodec],
        monkeypatch: pytest.MonkeyPatch) -> None:
    values, codec = records
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, [(0, None, v, 0) for v in values])
    today_values, today_errors = _today(_batch(values), codec, monkeypatch)
    options = {"value_format": "avro", "value_schema": Subject("native-decode-value"),
               "schema_registry": schema_registry}

    with pytest.raises(Exception, match=rf"corrupt record in {topic}/0 at offset 81: value is "
                                        "not avro of the reader schema: not in the Schema "
                                        "Registry wire format"):
        _read(spark, kafka_config, topic, **options).collect()

    seen = Observation("native")
    skipped = _read(spark, kafka_config, topic, on_corrupt="skip", observation=seen, **options)
    rows = sorted((r.offset, _plain(r.value)) for r in skipped.collect())
    assert rows == [(i, _plain(v)) for i, v in enumerate(today_values) if today_errors[i] is None]
    assert seen.get["corrupt_records"] == 6

    dead = _read(spark, kafka_config, topic, on_corrupt="dead_letter", **options)
    got = {r.offset: r for r in dead.collect()}
    assert len(got) == len(values)
    for i, error in enumerate(today_errors):
        assert (got[i].decode_error is None) == (error is None), i
        assert got[i].raw_value == (values[i] if error is not None else None)
    # The native decoder's own reason: the executors took the native path.
    assert "the Avro payload" in got[83].decode_error


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(dict(v) if k == "attrs" and isinstance(v, list) else v)
                for k, v in value.items()}  # the map as Arrow's to_pylist gives it
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC)
    return value
