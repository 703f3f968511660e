"""A smoke of the installed package, run by the interpreter of a venv that holds its wheel.

    <venv>/bin/python tools/wheel_smoke.py --bootstrap-servers HOST:PORT --dags DIR --work DIR

What :mod:`tools.version_matrix` runs in each cell (and ``tests/wheel``), against a real broker:

1. the package imports from this venv's site-packages (never a source tree), with its native
   module, and no ``cargo``, ``cmake`` or C compiler is on ``PATH``;
2. Airflow parses the example DAGs of ``--dags`` with no import error;
3. ``resolve_offsets`` pins exactly the records produced into a new 2-partition topic (those
   of partition 1 with headers, those of partition 0 without);
4. ``read_kafka`` (the native reader, in Spark's Python workers) reads exactly those records;
5. ``ingest`` writes them into each sink the cell can run (:data:`SINKS`): a ``FileSink``
   (Parquet, read back with Spark), and a ``KafkaSink`` with ``at_least_once`` and with
   ``exactly_once`` (a new topic each, read back with a ``read_committed`` consumer); each
   read back as exactly the multiset of records produced, headers included. Iceberg and
   Delta are not among them: their Spark runtimes are jars (``tools/tables/pom.xml``) that no
   cell has (its venv holds the wheel, PySpark and Airflow only); ``tests/tables`` runs those
   sinks on PySpark 4.1.

Prints one JSON object (the versions found and what was read and written) on a line that
starts with :data:`REPORT`;
exits non-zero, with the reason, on any mismatch. Imports nothing from this repository.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

COMPILERS = ("cargo", "rustc", "cmake", "cc", "gcc", "c++", "clang")
RECORDS_PER_PARTITION = 60
REPORT = "wheel smoke report: "  # the line tools/version_matrix.py reads


def fail(message: str) -> None:
    print(f"wheel smoke failed: {message}", file=sys.stderr)
    sys.exit(1)


def check_installation() -> dict[str, Any]:
    import airflow_provider_kafka_spark
    from airflow_provider_kafka_spark import _native

    package = Path(airflow_provider_kafka_spark.__file__).resolve()
    site = Path(sys.prefix).resolve()
    if site not in package.parents:
        fail(f"the package was imported from {package}, not from this venv ({site})")
    found = {name: shutil.which(name) for name in COMPILERS if shutil.which(name)}
    if found:
        fail(f"a build tool is on PATH, so the smoke proves nothing about the wheel: {found}")
    return {"python": sys.version.split()[0], "package": str(package.parent),
            "native": Path(_native.__file__).name,
            **{name: importlib.metadata.version(name)
               for name in ("pyspark", "apache-airflow", "confluent-kafka", "pyarrow",
                            "airflow-provider-kafka-spark")}}


def parse_dags(dags: Path) -> list[str]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(dags))  # AIRFLOW__CORE__LOAD_EXAMPLES=False: the examples of --dags only
    if bag.import_errors:
        fail(f"DAG import errors: {bag.import_errors}")
    if not bag.dag_ids:
        fail(f"no DAG found in {dags}")
    return sorted(bag.dag_ids)


Headers = tuple[tuple[str, bytes | None], ...]
Produced = tuple[int, bytes, bytes, Headers]
"""(partition, key, value, headers) of a record produced."""


def produce(config: dict[str, Any], topic: str) -> set[Produced]:
    """Records into partitions 0 (no headers) and 1 (two headers each, one with a null
    value)."""
    from confluent_kafka import Producer

    producer = Producer({**config, "enable.idempotence": True})
    expected = set()
    now_ms = int(time.time() * 1000)
    for partition in (0, 1):
        for i in range(RECORDS_PER_PARTITION):
            key, value = f"k{partition}-{i}".encode(), f"v{partition}-{i}".encode()
            headers: Headers = (("n", str(i).encode()), ("none", None)) if partition else ()
            producer.produce(topic, value, key, partition=partition, timestamp=now_ms + i,
                             headers=list(headers) or None)
            expected.add((partition, key, value, headers))
    if producer.flush(30):
        fail("the records were not all delivered within 30 s")
    return expected


def create_topics(config: dict[str, Any], *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)  # held until the futures resolve
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).values():
        future.result(30)


def read_back(config: dict[str, Any], topic: str) -> list[tuple[Any, ...]]:
    """Every committed record of ``topic`` (2 partitions), read to the end of each: (key,
    value, headers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": f"smoke-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in (0, 1)}
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    found: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        positions = {tp.partition: tp.offset for tp in consumer.position(
            [TopicPartition(topic, p) for p in (0, 1)])}
        if all(ends[p] == 0 or positions[p] >= ends[p] for p in (0, 1)):
            break
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found.append((message.key(), message.value(), tuple(message.headers() or ())))
    else:
        fail(f"{topic} was not read to its end {ends} within 60 s")
    consumer.close()
    return found


SINKS = ("files", "kafka_at_least_once", "kafka_exactly_once")
"""The sinks each cell ingests into (``kafka_<delivery guarantee>``)."""


def headers_of(row: Any) -> Headers:
    """A Spark row's ``headers`` as (key, value) pairs (an empty list, or none: ())."""
    return tuple((h["key"], None if h["value"] is None else bytes(h["value"]))
                 for h in row["headers"] or ())


def ingest_into(sink: str, spark: Any, ranges: Any, config: dict[str, Any], topic: str | None,
                folder: Path, expected: set[Produced]) -> dict[str, int]:
    """``ingest`` the pinned ``ranges`` into ``sink`` (of :data:`SINKS`; ``topic`` for a Kafka
    sink, ``folder`` for the file sink); read them back and require exactly the records
    produced. Returns the records ingested, written (Kafka) and read back."""
    from airflow_provider_kafka_spark.sinks import FileSink, KafkaSink
    from airflow_provider_kafka_spark.spark import ingest

    if sink == "files":
        result = ingest(spark, ranges, config, FileSink(str(folder)))
        rows = spark.read.parquet(str(folder)).collect()
        back = [(bytes(r["key"]), bytes(r["value"]), headers_of(r)) for r in rows]
        counts = {"records": result.records}
    elif topic is None:
        fail(f"no topic for the sink {sink}")
    else:
        guarantee = sink.removeprefix("kafka_")
        result = ingest(spark, ranges, config, KafkaSink(
            topic, kafka_config=config, delivery_guarantee=guarantee,
            transactional_id_prefix=f"smoke-{topic}", write_id=f"smoke-{uuid.uuid4().hex}"))
        back = read_back(config, topic)
        counts = {"records": result.records, "written": result.output["records_written"]}
    wanted = sorted((key, value, headers) for _, key, value, headers in expected)
    if sorted(back) != wanted:
        fail(f"ingest into {sink}: read back {len(back)} records, expected once each of the "
             f"{len(wanted)} produced")
    return {**counts, "read_back": len(back)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--dags", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()

    report = check_installation()
    report["dags"] = parse_dags(args.dags)

    from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets
    from airflow_provider_kafka_spark.spark import read_kafka, spark_session

    config = {"bootstrap.servers": args.bootstrap_servers}
    source = f"smoke.in.{uuid.uuid4().hex[:8]}"
    outputs = {sink: f"smoke.{sink}.{uuid.uuid4().hex[:8]}" for sink in SINKS if sink != "files"}
    create_topics(config, source, *outputs.values())
    expected = produce(config, source)

    ranges = resolve_offsets(config, Subscription.topics([source]), "earliest", "latest")
    pinned = sorted((r.partition, r.start, r.stop) for r in ranges)
    if pinned != [(0, 0, RECORDS_PER_PARTITION), (1, 0, RECORDS_PER_PARTITION)]:
        fail(f"resolved {pinned}, expected [0, {RECORDS_PER_PARTITION}) on both partitions")
    report["ranges"] = pinned

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = spark_session("local[2]", conf={"spark.ui.enabled": "false",
                                            "spark.sql.shuffle.partitions": "2",
                                            "spark.local.dir": str(args.work)})
    try:
        df = read_kafka(spark, ranges, config, max_records_per_split=25)
        rows = df.select("partition", "key", "value", "headers").collect()
        read = {(r["partition"], bytes(r["key"]), bytes(r["value"]), headers_of(r))
                for r in rows}
        if len(rows) != len(expected) or read != expected:
            fail(f"read {len(rows)} records, expected exactly the {len(expected)} produced")
        report["read"] = len(rows)
        report["ingested"], report["ingest_seconds"] = {}, {}
        for sink in SINKS:
            started = time.monotonic()
            report["ingested"][sink] = ingest_into(sink, spark, ranges, config,
                                                   outputs.get(sink), args.work / "files",
                                                   expected)
            report["ingest_seconds"][sink] = round(time.monotonic() - started, 1)
    finally:
        spark.stop()
    print(REPORT + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
