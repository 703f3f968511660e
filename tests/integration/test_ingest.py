"""``ingest`` in a plain PySpark job, no Airflow: the README's example against the real broker
and Spark (exact records and offsets written, the result's statistics, the manifest), decoding
with dead letters, empty ranges, and bad arguments refused before anything is read."""

from __future__ import annotations

import importlib
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka_spark.errors import ConfigurationError, KafkaSparkError
from airflow_provider_kafka_spark.offsets import OffsetRanges, Subscription, resolve_offsets
from airflow_provider_kafka_spark.sinks import MANIFEST_NAME, FileSink, KafkaSink, Sink
from airflow_provider_kafka_spark.spark import (
    DecodeCounts,
    Decoding,
    IngestResult,
    PartitionStats,
    ingest,
    kafka_schema,
    read_kafka,
    spark_session,
)
from tools.kafka_records import (
    produce,
    read_committed,
    transactional_producer,
    wait_for_markers,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SQL = "SELECT CAST(key AS STRING) AS key, CAST(value AS STRING) AS value, `offset` FROM kafka"


@pytest.fixture
def orders(new_topic: Any, kafka_config: dict[str, Any]) -> tuple[str, int]:
    """A topic of two partitions: 3 records in 0 and 2 in 1 (a retained, recent timestamp);
    (topic, the first timestamp)."""
    topic = new_topic(partitions=2)
    ms = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [
        (0, b"k0", b'{"id": 0}', ms), (1, b"k1", b'{"id": 1}', ms + 1),
        (0, b"k2", b'{"id": 2}', ms + 2), (1, b"k3", b"not json", ms + 3),
        (0, b"k4", b'{"id": 4}', ms + 4)])
    return topic, ms


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_the_readme_example(spark: Any, kafka_config: dict[str, Any],
                            orders: tuple[str, int], tmp_path: Path) -> None:
    topic, ms = orders
    out = str(tmp_path / "orders" / "2024-05-01")

    config = kafka_config
    ranges = resolve_offsets(config, Subscription.topics([topic]), "earliest", "latest")
    result = ingest(
        spark_session(), ranges, config, FileSink(out, format="json"),
        sql=SQL,
    )

    written = spark.read.json(out).collect()
    assert sorted((r["key"], r["value"], r["offset"]) for r in written) == [
        ("k0", '{"id": 0}', 0), ("k1", '{"id": 1}', 0), ("k2", '{"id": 2}', 1),
        ("k3", "not json", 1), ("k4", '{"id": 4}', 2)]
    assert isinstance(result, IngestResult)
    assert result.partitions == (
        PartitionStats(topic, 0, 0, 3, records=3, bytes=3 * (2 + 9), lost=0, lag=0,
                       first_offset=0, last_offset=2, min_timestamp=utc(ms),
                       max_timestamp=utc(ms + 4)),
        PartitionStats(topic, 1, 0, 2, records=2, bytes=2 + 9 + 2 + 8, lost=0, lag=0,
                       first_offset=0, last_offset=1, min_timestamp=utc(ms + 1),
                       max_timestamp=utc(ms + 3)))
    assert (result.records, result.bytes, result.lost, result.lag) == (5, 54, 0, 0)
    assert (result.min_timestamp, result.max_timestamp) == (utc(ms), utc(ms + 4))
    assert result.output == {"path": out, "format": "json", "manifest": f"{out}/{MANIFEST_NAME}"}
    assert result.decode is None
    assert result.seconds > 0 and result.records_per_second > 0 and result.bytes_per_second > 0

    manifest = json.loads((Path(out) / MANIFEST_NAME).read_text())
    assert manifest.pop("version") == 1
    assert OffsetRanges.from_json(manifest.pop("ranges")) == ranges
    assert manifest.pop("written_at").endswith("+00:00")
    assert manifest == result.to_dict()
    assert manifest["partitions"][0] == {
        "topic": topic, "partition": 0, "start": 0, "stop": 3, "records": 3, "bytes": 33,
        "lost": 0, "lag": 0, "first_offset": 0, "last_offset": 2,
        "min_timestamp": utc(ms).isoformat(), "max_timestamp": utc(ms + 4).isoformat()}
    assert list(result.to_dict()) == ["records", "bytes", "lost", "lag", "partitions", "min_timestamp",
                              "max_timestamp", "output", "seconds", "records_per_second",
                              "bytes_per_second"]


def test_decoding_with_dead_letters(spark: Any, kafka_config: dict[str, Any],
                                    orders: tuple[str, int], tmp_path: Path) -> None:
    topic, _ = orders
    out = str(tmp_path / "decoded")
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")

    result = ingest(spark, ranges, kafka_config, FileSink(out),
                    decode=Decoding(key_format="string", value_format="json",
                                    value_schema="id long", on_corrupt="dead_letter"),
                    transform=lambda df: df.select("key", "value.id"),
                    manifest={"job": "nightly"}, owner="orders-job")

    assert sorted((r["key"], r["id"]) for r in spark.read.parquet(out).collect()) == [
        ("k0", 0), ("k1", 1), ("k2", 2), ("k4", 4)]
    dead = spark.read.parquet(f"{out}/_dead_letter/*.parquet").collect()
    assert [(bytes(r["key"]), bytes(r["value"]), r["topic"], r["partition"], r["offset"],
             r["error"]) for r in dead] == [
        (b"k3", b"not json", topic, 1, 1, "value is not JSON matching the schema id long")]
    assert result.records == 5
    assert result.decode == DecodeCounts(decoded=4, skipped=0, dead_lettered=1)
    assert result.output["dead_letter"] == {"path": f"{out}/_dead_letter", "format": "parquet",
                                            "records": 1}
    manifest = json.loads((Path(out) / MANIFEST_NAME).read_text())
    assert manifest["job"] == "nightly"
    assert manifest["decode"] == {"decoded": 4, "skipped": 0, "dead_lettered": 1}


def test_empty_ranges_read_and_write_nothing(spark: Any, kafka_config: dict[str, Any],
                                             new_topic: Any, tmp_path: Path) -> None:
    topic = new_topic(partitions=1)
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = tmp_path / "empty"

    result = ingest(spark, ranges, kafka_config, FileSink(str(out)))

    assert result.to_dict() == {
        "records": 0, "bytes": 0, "lost": 0, "lag": 0,
        "partitions": [{"topic": topic, "partition": 0, "start": 0, "stop": 0, "records": 0,
                        "bytes": 0, "lost": 0, "lag": 0, "first_offset": None,
                        "last_offset": None, "min_timestamp": None, "max_timestamp": None}],
        "min_timestamp": None, "max_timestamp": None,
        "output": {"path": str(out), "format": "parquet",
                   "manifest": f"{out}/{MANIFEST_NAME}"},
        "seconds": 0.0, "records_per_second": 0.0, "bytes_per_second": 0.0}
    assert not out.exists()


def _stages_of(spark: Any, group: str) -> list[Any]:
    tracker = spark.sparkContext.statusTracker()
    stages = []
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        stages += [tracker.getStageInfo(s) for s in job.stageIds]
    return [s for s in stages if s is not None]


def _read_once(spark: Any, run: Any, splits: int) -> Any:
    """``run()``'s result, asserting that one Spark stage read the slice (``splits`` tasks):
    no stage over a cached copy, no statistics job over the records."""
    group = f"one-pass-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "one pass")
    try:
        result = run()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    reading = [s.numTasks for s in _stages_of(spark, group) if s.numTasks == splits]
    assert reading == [splits], [(s.name, s.numTasks) for s in _stages_of(spark, group)]
    return result


def test_one_pass_gives_exact_statistics(spark: Any, kafka_config: dict[str, Any],
                                         new_topic: Any, tmp_path: Path) -> None:
    """Each record is read once (one stage of the splits, no cache, no statistics job), and
    the statistics gathered in that pass are exact, split by split and partition by
    partition, also across a split that a transaction marker ends."""
    topic = new_topic(partitions=2)
    ms = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [(i % 2, f"k{i}".encode(), b"v" * (i % 7), ms + i)
                                  for i in range(40)])
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = str(tmp_path / "one-pass")

    result = _read_once(spark, lambda: ingest(spark, ranges, kafka_config, FileSink(out),
                                              max_records_per_split=7), splits=6)

    assert spark.read.parquet(out).count() == 40
    expected = []
    for p in (0, 1):
        items = [i for i in range(40) if i % 2 == p]
        expected.append(PartitionStats(
            topic, p, 0, 20, records=20,
            bytes=sum(len(f"k{i}") + i % 7 for i in items), lost=0, lag=0, first_offset=0,
            last_offset=19, min_timestamp=utc(ms + items[0]), max_timestamp=utc(ms + items[-1])))
    assert result.partitions == tuple(expected)
    manifest = json.loads((Path(out) / MANIFEST_NAME).read_text())
    assert manifest["records"] == 40 and manifest["partitions"][1]["bytes"] == expected[1].bytes


def test_a_transform_that_stops_reading_early_still_counts_the_slice(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int],
        tmp_path: Path) -> None:
    """``limit`` leaves splits unread: the readers cannot count them, and a second read
    does, so the statistics still describe the whole slice."""
    topic, ms = orders
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = str(tmp_path / "limited")

    result = ingest(spark, ranges, kafka_config, FileSink(out),
                    transform=lambda df: df.orderBy("offset").limit(1))

    assert spark.read.parquet(out).count() == 1
    assert [(p.records, p.first_offset, p.last_offset) for p in result.partitions] == [
        (3, 0, 2), (2, 0, 1)]
    assert (result.records, result.bytes) == (5, 54)


def test_decode_counts_are_observed_in_the_write_pass(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int],
        tmp_path: Path) -> None:
    """``on_corrupt="skip"``: the decode counts come from the pass that writes (one stage)."""
    topic, _ = orders
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = str(tmp_path / "skipped")

    result = _read_once(spark, lambda: ingest(
        spark, ranges, kafka_config, FileSink(out),
        decode=Decoding(value_format="json", value_schema="id long", on_corrupt="skip"),
        max_records_per_split=1), splits=5)

    assert sorted(r["value"]["id"] for r in spark.read.parquet(out).collect()) == [0, 1, 2, 4]
    assert result.decode == DecodeCounts(decoded=4, skipped=1, dead_lettered=0)
    assert result.records == 5


def test_a_corrupt_record_fails_a_staged_write_before_its_commit(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int],
        tmp_path: Path) -> None:
    """``on_corrupt="fail"`` into files: found in the write's own pass, and the previous
    output survives (the staging folder is dropped, never swapped in)."""
    topic, _ = orders
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = tmp_path / "kept"
    ingest(spark, ranges, kafka_config, FileSink(str(out)))
    before = sorted(p.name for p in out.iterdir())

    with pytest.raises(KafkaSparkError, match=rf"ingest: 1 record\(s\) could not be decoded; "
                       rf"the first is {topic}/1 at offset 1: value is not JSON"):
        ingest(spark, ranges, kafka_config, FileSink(str(out)),
               decode=Decoding(value_format="json", value_schema="id long"))

    assert sorted(p.name for p in out.iterdir()) == before
    assert spark.read.parquet(str(out)).count() == 5
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]


def test_readers_land_parquet_as_spark_would_write_it(
        spark: Any, kafka_config: dict[str, Any], new_topic: Any, tmp_path: Path) -> None:
    """No transform, Parquet on the local file system: the readers write the files themselves.
    The output holds exactly the committed records, with headers, as ``read_kafka`` returns
    them, in the codec asked for, and nothing a task did not report; a slice of aborted
    records only lands as an empty output with the schema."""
    topic = new_topic(partitions=2)
    ms = int(time.time() * 1000) - 60_000
    produce(kafka_config, topic, [(p, b"k%d" % i, b"v%d" % i, ms + i) for i in range(6)
                                  for p in (0, 1)])
    producer = transactional_producer(kafka_config)
    producer.begin_transaction()
    produce(kafka_config, topic, [(0, b"aborted", b"x", ms + 50)], producer=producer)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"v-committed", key=b"k", partition=1, timestamp=ms + 60,
                     headers=[("h", b"1"), ("empty", None)])
    producer.commit_transaction(30)
    wait_for_markers(AdminClient(kafka_config), topic, 2)
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    out = tmp_path / "landed"

    result = ingest(spark, ranges, kafka_config,
                    FileSink(str(out), options={"compression": "zstd"}))

    def rows(df: Any) -> Counter[Any]:
        return Counter((r["topic"], r["partition"], r["offset"], bytes(r["key"]),
                        bytes(r["value"]), r["timestamp"], r["timestampType"],
                        tuple((h["key"], None if h["value"] is None else bytes(h["value"]))
                              for h in r["headers"] or ())) for r in df.collect())

    landed = spark.read.parquet(str(out))
    assert rows(landed) == rows(read_kafka(spark, ranges, kafka_config))
    assert [r["headers"] for r in landed.where("offset < 2").collect()] == \
        [r["headers"] for r in read_kafka(spark, ranges, kafka_config).where("offset < 2").collect()]
    assert sum(rows(landed).values()) == 13 == result.records
    assert landed.schema.simpleString() == kafka_schema().simpleString()
    data = sorted(p.name for p in out.iterdir() if p.name.startswith("part-"))
    # one split of both partitions' ranges: one file
    assert len(data) == 1 and all(n.endswith(".zstd.parquet") for n in data), data
    assert [p.records for p in result.partitions] == [6, 7]

    aborted = new_topic(partitions=1)
    producer.begin_transaction()
    produce(kafka_config, aborted, [(0, b"a", b"b", ms)], producer=producer)
    producer.flush(30)
    producer.abort_transaction(30)
    wait_for_markers(AdminClient(kafka_config), aborted, 1)
    empty_ranges = resolve_offsets(kafka_config, Subscription.topics([aborted]), "earliest",
                                   "latest")
    assert empty_ranges.total() == 2
    nothing = ingest(spark, empty_ranges, kafka_config, FileSink(str(tmp_path / "none")))
    assert nothing.records == 0
    empty = spark.read.parquet(str(tmp_path / "none"))
    assert empty.count() == 0 and empty.columns == kafka_schema().fieldNames()


def test_exactly_once_into_kafka_reads_the_slice_once(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int],
        new_topic: Any) -> None:
    """An ingest's KafkaSink gets the slice's identity: the exactly-once write reads its input
    once (no pre-pass), and a re-run of the write id writes nothing again."""
    topic, _ = orders
    out = new_topic(partitions=1)
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")

    def run() -> IngestResult:
        return ingest(spark, ranges, kafka_config, KafkaSink(
            out, kafka_config=kafka_config, write_id="w-once",
            transactional_id_prefix=f"once-{out}"), max_records_per_split=1)

    first = _read_once(spark, run, splits=5)
    again = run()

    assert first.output["records_written"] == 5 and again.output["records_written"] == 0
    assert sorted(bytes(m.value()) for m in read_committed(kafka_config, out, 5)) == sorted(
        [b'{"id": 0}', b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'])


class Collected(Sink):
    """A sink of one's own with only the abstract steps: it keeps the rows it is given."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []

    def describe(self) -> dict[str, Any]:
        return {"sink": "collected"}

    def write(self, df: Any, dead_letters: Any = None) -> dict[str, Any]:
        self.rows = [(r["partition"], r["offset"], bytes(r["value"])) for r in df.collect()]
        return {**self.describe(), "rows": len(self.rows)}


def test_a_sink_of_your_own_with_only_the_abstract_steps_ingests(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int]) -> None:
    """``Sink``'s default answer to ``intake``: Spark rows through ``write``, read once, the
    statistics from the readers' reports of that pass."""
    topic, ms = orders
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    sink = Collected()

    result = _read_once(spark, lambda: ingest(spark, ranges, kafka_config, sink,
                                              max_records_per_split=1), splits=5)

    assert sorted(sink.rows) == [(0, 0, b'{"id": 0}'), (0, 1, b'{"id": 2}'),
                                 (0, 2, b'{"id": 4}'), (1, 0, b'{"id": 1}'),
                                 (1, 1, b"not json")]
    assert result.output == {"sink": "collected", "rows": 5}
    assert [(p.partition, p.records, p.first_offset, p.last_offset, p.min_timestamp)
            for p in result.partitions] == [(0, 3, 0, 2, utc(ms)), (1, 2, 0, 1, utc(ms + 1))]
    assert (result.records, result.bytes) == (5, 54)


BAD_ARGUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"spark": None}, "job: spark=None is not a SparkSession"),
    ({"sink": "/data/out"}, "job: sink='/data/out' is not valid; pass a sink: FileSink(path)"),
    ({"decode": {"value_format": "json"}},
     "job: decode={'value_format': 'json'} is not valid; pass Decoding(value_format=...)"),
    ({"sink": KafkaSink("out"), "decode": Decoding(value_format="json", on_corrupt="dead_letter")},
     "job: KafkaSink: dead_letter_topic=None is missing; on_corrupt='dead_letter' needs"),
    ({"transform": lambda df: df, "sql": "SELECT 1"}, "job: pass transform= or sql=, not both"),
    ({"transform": "SELECT 1"}, "job: transform='SELECT 1' is not valid"),
    ({"sql": " "}, "job: sql=' ' is empty"),
    ({"engine": "java"}, "job: engine='java' is not valid; pass one of 'python', 'spark-kafka'"),
    ({"max_records_per_split": 0}, "job: max_records_per_split=0 is not valid"),
    ({"on_data_loss": "ignore"}, "job: on_data_loss='ignore' is not valid"),
    ({"manifest": ["version"]}, "job: manifest=['version'] is not valid"),
    ({"owner": ""}, "owner='' is not valid"),
    ({"transform": lambda df: df.select("offset", "offset")},
     "job: transform='<lambda>' returns the columns ['offset', 'offset'], which Spark cannot "
     "tell apart"),
    ({"sql": "SELECT nothing FROM kafka"}, "job: sql='SELECT nothing FROM kafka' is not one query"),
]


@pytest.mark.parametrize(("change", "fragment"), BAD_ARGUMENTS,
                         ids=[f"bad{i}" for i in range(len(BAD_ARGUMENTS))])
def test_bad_arguments_fail_before_the_read(
        spark: Any, kafka_config: dict[str, Any], orders: tuple[str, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], fragment: str) -> None:
    topic, _ = orders
    reads: list[Any] = []
    pipeline = importlib.import_module("airflow_provider_kafka_spark.spark.ingest")
    monkeypatch.setattr(pipeline, "read_kafka", lambda *a, **k: reads.append(a))
    ranges = resolve_offsets(kafka_config, Subscription.topics([topic]), "earliest", "latest")
    arguments: dict[str, Any] = {"spark": spark, "ranges": ranges, "kafka_config": kafka_config,
                                 "sink": FileSink(str(tmp_path / "out")), "owner": "job",
                                 **change}

    with pytest.raises(KafkaSparkError) as caught:
        ingest(**arguments)

    assert isinstance(caught.value, ConfigurationError), repr(caught.value)
    assert fragment in str(caught.value)
    assert reads == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("arguments", "fragment"), [
    # on_corrupt without decoding (on_corrupt is the Decoding's now)
    ({"on_corrupt": "skip"}, "Decoding: value_format='bytes' decodes nothing"),
    ({}, "Decoding: value_format='bytes' decodes nothing"),
    ({"value_format": "xml"}, "Decoding: value_format='xml' is not valid"),
])
def test_a_bad_decoding_is_refused_when_built(arguments: dict[str, Any], fragment: str) -> None:
    with pytest.raises(KafkaSparkError) as caught:
        Decoding(**arguments)
    assert type(caught.value) is ConfigurationError, repr(caught.value)
    assert str(caught.value).startswith(fragment), str(caught.value)
