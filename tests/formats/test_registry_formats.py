"""Schema Registry formats on a real broker, real Spark and a real registry: round trips in
every format (checked against confluent-kafka's stock deserializers too), schema evolution,
schema ids in headers, undecodable records under each ``on_corrupt`` policy, and the registry
going away."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import Observation
from pyspark.sql import functions as F

from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
from airflow_provider_kafka_spark.spark import (
    SchemaRegistryError,
    WriteConfigError,
    decode_kafka,
    kafka_errors,
    read_kafka,
    write_kafka,
)
from airflow_provider_kafka_spark.spark.formats import Subject
from airflow_provider_kafka_spark.spark.formats import protobuf as proto_types
from tools.kafka_records import produce, read_committed
from tools.local_registry import local_registry

pytestmark = [pytest.mark.formats, pytest.mark.integration, pytest.mark.spark]

UTC = dt.UTC
# Columns every format carries; Avro and JSON Schema add a decimal and a date.
COMMON = ("id long not null, name string, tags array<string>, attrs map<string, long>, "
          "at timestamp, inner struct<a long, b string>")
EXTRA = ", amount decimal(10, 2), day date"


def _rows(n: int, extra: bool) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        row: dict[str, Any] = {
            "id": i, "name": None if i == 3 else f"name-{i}", "tags": [f"t{i}", "x"],
            "attrs": {"k": i, "j": -i}, "at": dt.datetime(2026, 11, 20, i % 24, 5, tzinfo=UTC),
            "inner": None if i == 2 else {"a": i * 10, "b": f"b{i}"}}
        if extra:
            row["amount"] = decimal.Decimal(f"{i}.25")
            row["day"] = dt.date(2026, 11, 1 + i % 28)
        rows.append(row)
    return rows


def _read(spark: Any, kafka_config: dict[str, Any], topic: str, **decode: Any) -> Any:
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    return decode_kafka(read_kafka(spark, ranges, kafka_config), **decode)


def _plain(row: Any) -> Any:
    """A Spark Row (or value) as plain Python, timestamps in UTC."""
    if hasattr(row, "asDict"):
        return {k: _plain(v) for k, v in row.asDict().items()}
    if isinstance(row, dict):
        return {k: _plain(v) for k, v in row.items()}
    if isinstance(row, list):
        return [_plain(v) for v in row]
    if isinstance(row, dt.datetime):
        return row.astimezone(UTC) if row.tzinfo else row.replace(tzinfo=UTC)
    return row


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_a_round_trip_writes_every_row_once_and_reads_it_back_identically(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, schema_registry: dict[str, Any],
        fmt: str) -> None:
    topic = new_topic(partitions=2)
    extra = fmt != "protobuf"  # Protobuf has no decimal or date type
    rows = _rows(6, extra)
    df = spark.createDataFrame(rows, COMMON + (EXTRA if extra else ""))
    out = df.select(F.col("name").alias("key"), F.struct("*").alias("value")).repartition(2)

    result = write_kafka(out, kafka_config, topic=topic, value_format=fmt,
                         schema_registry=schema_registry, transactional_id_prefix="formats",
                         write_id=topic)

    assert result.records_written == 6
    client = SchemaRegistryClient(schema_registry)
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.version == 1
    decoded = _read(spark, kafka_config, topic, key_format="string", value_format=fmt,
                    value_schema=Subject(f"{topic}-value"), schema_registry=schema_registry)
    got = sorted((_plain(r.value) for r in decoded.select("value").collect()),
                 key=lambda r: r["id"])
    expected = [dict(r) for r in rows]  # a nullable column is an `optional` Protobuf field
    assert got == expected

    # confluent-kafka's stock deserializer reads what we wrote.
    ctx = SerializationContext(topic, MessageField.VALUE)
    raw = read_committed(kafka_config, topic, 6)
    if fmt == "avro":
        stock = [AvroDeserializer(client)(m.value(), ctx) for m in raw]
    elif fmt == "json_schema":
        schema = client.get_latest_version(f"{topic}-value").schema
        stock = [JSONDeserializer(schema, schema_registry_client=client)(m.value(), ctx)
                 for m in raw]
    else:
        version = client.get_latest_version(f"{topic}-value", fmt="serialized")
        cls = proto_types.message_class(version.schema.schema_str)
        stock = [proto_types.to_spark(ProtobufDeserializer(cls, {}, client)(m.value(), ctx))
                 for m in raw]
    stock.sort(key=lambda r: r["id"])
    assert [r["id"] for r in stock] == list(range(6))
    if fmt == "avro":
        assert stock == expected  # fastavro's logical types are the same Python values
    elif fmt == "json_schema":
        assert stock[1] == {"id": 1, "name": "name-1", "tags": ["t1", "x"],
                            "attrs": {"k": 1, "j": -1}, "at": "2026-11-20T01:05:00+00:00",
                            "inner": {"a": 10, "b": "b1"}, "amount": "1.25",
                            "day": "2026-11-02"}
    else:
        assert stock == expected


def test_records_of_older_schemas_decode_into_the_latest_or_a_pinned_reader_schema(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    subject = f"{topic}-value"
    client = SchemaRegistryClient(schema_registry)
    v1 = json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None}]})
    # v2 adds a field with a default and removes the optional one: BACKWARD compatible.
    v2 = json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "country", "type": "string", "default": "NL"}]})
    ctx = SerializationContext(topic, MessageField.VALUE)
    old = AvroSerializer(client, v1)
    produce(kafka_config, topic, [(0, None, old({"id": 1, "note": "first"}, ctx), 0),
                                  (0, None, old({"id": 2, "note": None}, ctx), 0)])
    new = AvroSerializer(client, v2)
    produce(kafka_config, topic, [(0, None, new({"id": 3, "country": "BE"}, ctx), 0)])
    assert client.get_versions(subject) == [1, 2]

    latest = _read(spark, kafka_config, topic, value_format="avro",
                   value_schema=Subject(subject), schema_registry=schema_registry)
    assert [_plain(r.value) for r in latest.orderBy("offset").collect()] == [
        {"id": 1, "country": "NL"}, {"id": 2, "country": "NL"}, {"id": 3, "country": "BE"}]

    pinned = _read(spark, kafka_config, topic, value_format="avro",
                   value_schema=Subject(subject, 1), schema_registry=schema_registry)
    assert [_plain(r.value) for r in pinned.orderBy("offset").collect()] == [
        {"id": 1, "note": "first"}, {"id": 2, "note": None}, {"id": 3, "note": None}]


def test_schema_ids_in_headers_round_trip(spark: Any, kafka_config: dict[str, Any],
                                          new_topic: Any,
                                          schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    df = spark.createDataFrame([(i, f"a longer name {i}") for i in range(4)],
                               "id long, name string")
    write_kafka(df.select(F.struct("*").alias("value")), kafka_config, topic=topic,
                value_format="avro", schema_registry=schema_registry,
                schema_id_location="headers", delivery_guarantee="at_least_once")

    raw = read_committed(kafka_config, topic, 4)
    assert all(dict(m.headers())["__value_schema_id"][:1] == b"\x01" for m in raw)  # a GUID
    assert all(m.value()[:1] != b"\x00" for m in raw)  # no id in the payload
    decoded = _read(spark, kafka_config, topic, value_format="avro",
                    value_schema=Subject(f"{topic}-value"), schema_registry=schema_registry)
    assert sorted(_plain(r.value)["id"] for r in decoded.collect()) == [0, 1, 2, 3]


def _undecodable(kafka_config: dict[str, Any], schema_registry: dict[str, Any],
                 topic: str) -> dict[int, bytes]:
    """Offsets 0, 1, 3 good; 2 names an unknown schema id; 4 is not wire format at all."""
    client = SchemaRegistryClient(schema_registry)
    schema = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]})
    serializer = AvroSerializer(client, schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = [serializer({"id": i, "name": f"n{i}"}, ctx) for i in (0, 1, 3)]
    unknown = b"\x00" + (987654).to_bytes(4, "big") + good[0][5:]
    values = {0: good[0], 1: good[1], 2: unknown, 3: good[2], 4: b"plain text"}
    produce(kafka_config, topic, [(0, None, values[o], 0) for o in range(5)])
    return values


def test_an_undecodable_record_fails_the_job_naming_where_it_is(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    _undecodable(kafka_config, schema_registry, topic)
    df = _read(spark, kafka_config, topic, value_format="avro",
               value_schema=Subject(f"{topic}-value"), schema_registry=schema_registry)
    with pytest.raises(Exception, match=rf"corrupt record in {topic}/0 at offset 2: value: the "
                                        "registry has no schema with this record's id"):
        df.collect()


def test_undecodable_records_are_skipped_and_counted(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    _undecodable(kafka_config, schema_registry, topic)
    observation = Observation("decode")
    df = _read(spark, kafka_config, topic, value_format="avro",
               value_schema=Subject(f"{topic}-value"), schema_registry=schema_registry,
               on_corrupt="skip", observation=observation)
    assert [(r.offset, _plain(r.value)) for r in df.orderBy("offset").collect()] == [
        (0, {"id": 0, "name": "n0"}), (1, {"id": 1, "name": "n1"}), (3, {"id": 3, "name": "n3"})]
    assert observation.get["corrupt_records"] == 2


def test_undecodable_records_are_dead_lettered_with_their_bytes_and_reason(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    values = _undecodable(kafka_config, schema_registry, topic)
    df = _read(spark, kafka_config, topic, value_format="avro",
               value_schema=Subject(f"{topic}-value"), schema_registry=schema_registry,
               on_corrupt="dead_letter")
    rows = {r.offset: r for r in df.collect()}
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert {o for o, r in rows.items() if r.decode_error is None} == {0, 1, 3}
    assert bytes(rows[2].raw_value) == values[2] and rows[2].value is None
    assert "no schema with this record's id" in rows[2].decode_error
    assert bytes(rows[4].raw_value) == values[4]
    assert rows[4].decode_error.startswith("value is not avro of the reader schema")
    assert _plain(rows[3].value) == {"id": 3, "name": "n3"} and rows[3].raw_value is None


def test_the_registry_going_away_mid_job_fails_it_clearly(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, tmp_path: Any) -> None:
    topic = new_topic(partitions=1)
    with local_registry(tmp_path / "registry") as url:
        config = {"url": url}
        _undecodable(kafka_config, config, topic)
        # The reader schema is fixed now; the executors look up the writer schema later.
        df = _read(spark, kafka_config, topic, value_format="avro",
                   value_schema=Subject(f"{topic}-value"), schema_registry=config,
                   on_corrupt="dead_letter")
    with pytest.raises(SchemaRegistryError,
                       match=rf"Schema Registry at {url} could not be reached for the schema "
                             rf"of {topic}/0 at offset 0"), kafka_errors():
        df.collect()


def test_a_write_with_the_registry_away_writes_nothing(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, tmp_path: Any) -> None:
    topic = new_topic(partitions=1)
    with local_registry(tmp_path / "registry") as url:
        pass
    df = spark.createDataFrame([(1, "a")], "id long, name string")
    with pytest.raises(SchemaRegistryError, match=rf"Schema Registry at {url} could not be "
                                                  rf"reached for registering the value schema "
                                                  rf"under '{topic}-value'"):
        write_kafka(df.select(F.struct("*").alias("value")), kafka_config, topic=topic,
                    value_format="avro", schema_registry={"url": url},
                    transactional_id_prefix="formats", write_id=topic)
    assert _end_offsets(kafka_config, topic) == 0


def test_an_incompatible_schema_is_refused_before_anything_is_written(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient(schema_registry)
    client.register_schema(f"{topic}-value", Schema(json.dumps(
        {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}), "AVRO"))
    df = spark.createDataFrame([("not a number",)], "id string not null")
    with pytest.raises(SchemaRegistryError, match=r"refused registering the value schema under "
                                                  rf"'{topic}-value'.*incompatible.*HTTP 409"):
        write_kafka(df.select(F.struct("*").alias("value")), kafka_config, topic=topic,
                    value_format="avro", schema_registry=schema_registry,
                    transactional_id_prefix="formats", write_id=topic)
    assert _end_offsets(kafka_config, topic) == 0


def test_a_row_that_does_not_fit_the_given_schema_fails_before_anything_is_written(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    schema = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"}]})
    df = spark.createDataFrame([(1,), (None,)], "id long")
    with pytest.raises(WriteConfigError, match=r"a row's value does not fit the avro schema"), \
            kafka_errors():
        write_kafka(df.select(F.struct("*").alias("value")), kafka_config, topic=topic,
                    value_format="avro", value_schema=schema, schema_registry=schema_registry,
                    delivery_guarantee="at_least_once")
    assert _end_offsets(kafka_config, topic) == 0


def _end_offsets(kafka_config: dict[str, Any], topic: str) -> int:
    from confluent_kafka import TopicPartition

    consumer = Consumer({**kafka_config, "group.id": "probe"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return int(high)


def test_subject_strategies_and_a_schema_that_must_already_be_registered(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any]) -> None:
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient(schema_registry)
    schema = json.dumps({"type": "record", "name": "Event", "namespace": f"ns{topic[2:]}",
                         "fields": [{"name": "id", "type": "long"}]})
    df = spark.createDataFrame([(1,), (2,)], "id long").select(F.struct("*").alias("value"))
    record = f"ns{topic[2:]}.Event"

    def write(**options: Any) -> Any:
        return write_kafka(df, kafka_config, topic=topic, value_format="avro",
                           value_schema=schema, schema_registry=schema_registry,
                           delivery_guarantee="at_least_once", **options)

    with pytest.raises(SchemaRegistryError, match=rf"'{record}' \(auto_register_schemas=False\)"
                                                  r".*HTTP 404"):
        write(subject_name_strategy="record", auto_register_schemas=False)
    assert _end_offsets(kafka_config, topic) == 0 and record not in client.get_subjects()
    write(subject_name_strategy="record")
    write(subject_name_strategy="topic_record")
    assert {record, f"{topic}-{record}"} <= set(client.get_subjects())
    write(subject_name_strategy="record", auto_register_schemas=False)  # now it is registered
    decoded = _read(spark, kafka_config, topic, value_format="avro", value_schema=schema,
                    schema_registry=schema_registry)
    assert sorted(_plain(r.value)["id"] for r in decoded.collect()) == [1, 1, 1, 2, 2, 2]
