"""The ingest operator decoding a Schema Registry format (real broker, Spark and registry): the
registry from an Airflow connection, the reader schema defaulting to ``<topic>-value``, and
``on_corrupt`` with real dead-letter outputs (a folder covered by the manifest; a topic written
by the same exactly-once write), the counts in XCom, manifest and log."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.hooks import SchemaRegistryConnection
from airflow_provider_kafka_spark.offsets import ConfigurationError, Subscription, resolve_offsets
from airflow_provider_kafka_spark.operators import KafkaSparkIngestOperator
from airflow_provider_kafka_spark.operators.ingest import MANIFEST_NAME
from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink
from airflow_provider_kafka_spark.spark import KafkaReadError
from tools.kafka_records import produce, read_committed

pytestmark = [pytest.mark.formats, pytest.mark.integration, pytest.mark.spark]

TEMPLATED = "{{ ti.xcom_pull(task_ids='resolve') }}"  # checked only once rendered
SCHEMA = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]})


@pytest.fixture
def registry_connection(schema_registry: dict[str, Any]) -> Iterator[str]:
    """``schema_registry_default`` pointing at the test registry (host and port fields)."""
    host, port = schema_registry["url"].removeprefix("http://").split(":")
    os.environ["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = json.dumps(
        {"conn_type": "http", "host": host, "port": int(port)})
    yield "schema_registry_default"
    os.environ.pop("AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT", None)


@pytest.fixture
def orders(kafka_config: dict[str, Any], new_topic: Any,
           schema_registry: dict[str, Any]) -> tuple[str, dict[str, Any], dict[int, bytes]]:
    """An Avro topic (one partition): offsets 0, 1, 3, 5 decode; 2 names an unknown schema
    id; 4 is not wire format. Returns (topic, its ranges, the undecodable values)."""
    topic = new_topic(partitions=1)
    serializer = AvroSerializer(SchemaRegistryClient(schema_registry), SCHEMA)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = {o: serializer({"id": o, "item": f"item-{o}"}, ctx) for o in (0, 1, 3, 5)}
    bad = {2: b"\x00" + (424242).to_bytes(4, "big") + good[0][5:], 4: b"not avro"}
    values = {**good, **bad}
    produce(kafka_config, topic, [(0, f"k{o}".encode(), values[o], 0) for o in range(6)])
    ranges = resolve_offsets(kafka_config, Subscription.topics(topic), "earliest", "latest")
    return topic, ranges.to_dict(), bad


def test_avro_into_parquet_with_a_dead_letter_folder_in_the_manifest(
        kafka_connection: None, registry_connection: str, spark: Any, tmp_path: Path,
        orders: tuple[str, dict[str, Any], dict[int, bytes]],
        capsys: pytest.CaptureFixture[str]) -> None:
    topic, ranges, bad = orders
    out = tmp_path / "orders"
    stats = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges, sink=FileSink(str(out)),
        decode=Decoding(value_format="avro",
                        schema_registry=SchemaRegistryConnection(registry_connection),
                        on_corrupt="dead_letter"),
        transform=lambda df: df.select("offset", "value.*"),
    ).execute({"run_id": "manual__1"})

    assert stats["records"] == 6
    assert stats["decode"] == {"decoded": 4, "skipped": 0, "dead_lettered": 2}
    assert stats["output"]["dead_letter"] == {"path": f"{out}/_dead_letter",
                                              "format": "parquet", "records": 2}
    written = spark.read.parquet(str(out)).orderBy("offset").collect()
    assert [(r["offset"], r["id"], r["item"]) for r in written] == [
        (o, o, f"item-{o}") for o in (0, 1, 3, 5)]
    # Spark skips a folder named _... even when asked for it; a glob of its files reads it.
    dead = {r["offset"]: r
            for r in spark.read.parquet(f"{out}/_dead_letter/*.parquet").collect()}
    assert sorted(dead) == [2, 4]
    for offset, value in bad.items():
        row = dead[offset]
        assert (bytes(row["value"]), bytes(row["key"]), row["topic"], row["partition"]) == \
            (value, f"k{offset}".encode(), topic, 0)
        assert row["timestamp"] is not None
    assert "no schema with this record's id" in dead[2]["error"]
    assert dead[4]["error"].startswith("value is not avro of the reader schema")
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["decode"] == stats["decode"]
    assert manifest["output"]["dead_letter"]["records"] == 2
    assert "Decoded 4 record(s); 0 skipped and 2 dead-lettered as undecodable." in \
        capsys.readouterr().out


def test_skip_drops_and_counts_and_fail_writes_nothing(
        kafka_connection: None, registry_connection: str, spark: Any, tmp_path: Path,
        orders: tuple[str, dict[str, Any], dict[int, bytes]]) -> None:
    topic, ranges, _ = orders
    skipped = KafkaSparkIngestOperator(
        task_id="ingest", ranges=ranges, sink=FileSink(str(tmp_path / "skip")),
        decode=Decoding(value_format="avro",
                        schema_registry=SchemaRegistryConnection(registry_connection),
                        on_corrupt="skip"),
    ).execute({"run_id": "manual__1"})
    assert skipped["decode"] == {"decoded": 4, "skipped": 2, "dead_lettered": 0}
    assert sorted(r["offset"] for r in spark.read.parquet(str(tmp_path / "skip")).collect()) \
        == [0, 1, 3, 5]
    assert not (tmp_path / "skip" / "_dead_letter").exists()

    with pytest.raises(KafkaReadError, match=rf"2 record\(s\) could not be decoded; the first is "
                                             rf"{topic}/0 at offset 2: value: the registry has "
                                             r"no schema.*Nothing was written"):
        KafkaSparkIngestOperator(
            task_id="ingest", ranges=ranges, sink=FileSink(str(tmp_path / "fail")),
            decode=Decoding(value_format="avro",
                            schema_registry=SchemaRegistryConnection(registry_connection)),
        ).execute({"run_id": "manual__1"})
    assert not (tmp_path / "fail").exists()


def test_a_kafka_sink_dead_letters_to_a_topic_in_the_same_exactly_once_write(
        kafka_connection: None, registry_connection: str, spark: Any, kafka_config: dict[str, Any],
        new_topic: Any, orders: tuple[str, dict[str, Any], dict[int, bytes]]) -> None:
    topic, ranges, bad = orders
    output, dead_topic = new_topic(partitions=1), new_topic(partitions=1)

    def run() -> dict[str, Any]:
        return KafkaSparkIngestOperator(
            task_id="ingest", ranges=ranges,
            sink=KafkaSink(output, dead_letter_topic=dead_topic),
            decode=Decoding(value_format="avro",
                            schema_registry=SchemaRegistryConnection(registry_connection),
                            on_corrupt="dead_letter"),
            sql="SELECT key, to_json(value) AS value FROM kafka",
        ).execute({"run_id": "manual__1"})

    first = run()
    assert first["decode"] == {"decoded": 4, "skipped": 0, "dead_lettered": 2}
    assert first["output"]["records_written"] == 6
    assert first["output"]["dead_letter"] == {"topic": dead_topic, "records": 2}
    again = run()  # a retry of the same run: the ledger skips what was committed
    assert again["output"]["records_written"] == 0

    main = read_committed(kafka_config, output, 4)
    assert sorted(json.loads(m.value())["id"] for m in main) == [0, 1, 3, 5]
    dead = {int(dict(m.headers())["kafka_spark.offset"]): m
            for m in read_committed(kafka_config, dead_topic, 2)}
    assert sorted(dead) == [2, 4]
    for offset, value in bad.items():
        headers = dict(dead[offset].headers())
        assert dead[offset].value() == value and dead[offset].key() == f"k{offset}".encode()
        assert headers["kafka_spark.topic"] == topic.encode()
        assert headers["kafka_spark.partition"] == b"0"
        assert int(headers["kafka_spark.timestamp"]) == dead[offset].timestamp()[1]
    assert b"no schema with this record's id" in dict(dead[2].headers())["kafka_spark.error"]


@pytest.mark.parametrize(("arguments", "match"), [
    ({"value_format": "avro"}, "^Decoding: schema_registry=None is missing"),
    ({"value_format": "xml"}, "^Decoding: value_format='xml'"),
    # on_corrupt without decoding: a Decoding that decodes nothing
    ({"on_corrupt": "skip"}, "^Decoding: value_format='bytes' decodes nothing"),
    ({"value_format": "string", "schema_registry": SchemaRegistryConnection("r")},
     "^Decoding: schema_registry='...' is not used"),
])
def test_bad_decode_arguments_fail_when_the_dag_is_parsed(arguments: dict[str, Any],
                                                          match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Decoding(**arguments)


def test_a_dead_letter_topic_applies_only_to_a_kafka_sink_with_dead_letters() -> None:
    # a file sink's dead letters go to <path>/_dead_letter: it takes no topic for them
    with pytest.raises(TypeError, match="dead_letter_topic"):
        FileSink("/x", dead_letter_topic="dlq")  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="^ingest: KafkaSink: dead_letter_topic='dlq' "
                                                 "is not used"):
        KafkaSparkIngestOperator(task_id="ingest", ranges=TEMPLATED,
                                 sink=KafkaSink("out", dead_letter_topic="dlq"),
                                 decode=Decoding(value_format="string"))


def test_a_kafka_sink_dead_letter_needs_its_topic() -> None:
    with pytest.raises(ConfigurationError, match="dead_letter_topic=None is missing"):
        KafkaSparkIngestOperator(task_id="ingest", ranges=TEMPLATED, sink=KafkaSink("out"),
                                 decode=Decoding(value_format="string",
                                                 on_corrupt="dead_letter"))


def test_the_example_dag_ingests_an_hour_of_avro_with_its_dead_letters(
        run_dag: Any, registry_connection: str, kafka_config: dict[str, Any], new_topic: Any,
        schema_registry: dict[str, Any], spark: Any, tmp_path: Path) -> None:
    import pendulum

    end = pendulum.now("UTC").start_of("hour").subtract(hours=1)
    start = end.subtract(hours=1)
    ms = int(start.timestamp() * 1000)
    topic = new_topic(partitions=2)
    serializer = AvroSerializer(SchemaRegistryClient(schema_registry), SCHEMA)
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = [(1, b"early", serializer({"id": 99, "item": "before"}, ctx), ms - 1)]
    records += [(i % 2, f"k{i}".encode(), serializer({"id": i, "item": f"item-{i}"}, ctx),
                 ms + i * 60_000) for i in range(8)]
    records += [(0, b"bad", b"\x00\x00\x01\xe2\x40garbage", ms + 30 * 60_000)]  # unknown id
    produce(kafka_config, topic, records)

    outcome = run_dag("kafka_avro_to_parquet", logical_date=end,
                      conf={"topic": topic, "output_root": str(tmp_path)})

    assert outcome.state == "success", outcome.errors
    assert outcome.data_interval == (start, end)
    assert outcome.xcom["ingest"]["decode"] == {"decoded": 8, "skipped": 0, "dead_lettered": 1}
    folder = tmp_path / start.strftime("%Y-%m-%dT%H")
    written = spark.read.parquet(str(folder)).collect()
    assert sorted((r["key"], r["id"], r["item"]) for r in written) == \
        sorted((f"k{i}", i, f"item-{i}") for i in range(8))
    dead = spark.read.parquet(f"{folder}/_dead_letter/*.parquet").collect()
    assert [(bytes(r["key"]), r["partition"], r["offset"]) for r in dead] == [(b"bad", 0, 4)]
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["output"]["dead_letter"]["records"] == 1


def test_a_registry_connection_becomes_the_client_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    from airflow_provider_kafka_spark.hooks.schema_registry import SchemaRegistryHook

    monkeypatch.setenv("AIRFLOW_CONN_SR_SECURED", json.dumps(
        {"conn_type": "http", "host": "registry.example", "port": 8443, "schema": "https",
         "login": "svc", "password": "s3cret", "extra": {"ssl.ca.location": "/ca.pem"}}))
    monkeypatch.setenv("AIRFLOW_CONN_SR_BEARER", json.dumps(
        {"conn_type": "http", "host": "http://registry", "extra": {
            "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": "tok-9f8e7d",
            "bearer.auth.logical.cluster": "lsrc-1", "bearer.auth.identity.pool.id": "pool"}}))
    assert SchemaRegistryHook("sr_secured").get_config() == {
        "url": "https://registry.example:8443", "basic.auth.user.info": "svc:s3cret",
        "ssl.ca.location": "/ca.pem"}
    assert SchemaRegistryHook("sr_bearer").get_config()["url"] == "http://registry"
    for secret in ("s3cret", "svc:s3cret", "tok-9f8e7d"):
        assert secret not in str(redact(f"the secret is {secret}"))
    monkeypatch.setenv("AIRFLOW_CONN_SR_NO_HOST", json.dumps({"conn_type": "http"}))
    with pytest.raises(ConfigurationError, match="'sr_no_host' has no host"):
        SchemaRegistryHook("sr_no_host").get_config()
    with pytest.raises(ConfigurationError, match="'sr_missing' does not exist"):
        SchemaRegistryHook("sr_missing").get_config()
