"""Decoding in one process, natively against today's path, on the same 1 M records (~200 B,
6 fields), in batches as a reader hands them over:

* ``avro``: the native decoder (``_native.AvroDecoder``, arrow-avro) against confluent-kafka's
  deserializer path (``decode_batches`` with the native path turned off), on Schema Registry
  wire-format records; a local registry is started for the run;
* ``json``: the native JSON decoder (``formats/json_arrow.py``: pyarrow's JSON reader, Spark's
  semantics) against Spark's path, ``decode_kafka(df, value_format="json", ...,
  on_corrupt="dead_letter")`` (``from_json`` in the JVM, ``local[2]``) on a cached DataFrame of
  the same records written to Spark's ``noop`` sink; Spark's CPU is every process's (JVM,
  workers, driver), and the same job without decoding (the cached scan) is measured too and
  taken off (``spark_from_json_net``). One warm-up run of each side first.

Both sides give the same column (tests/formats/test_native_decode.py,
tests/formats/test_native_json.py); this measures records/s and CPU seconds per million records
of each.

    .venv/bin/python benchmarks/decode_throughput.py [--records 1000000] [--formats avro,json]

Writes benchmarks/results/decode_throughput.json (``--out``): Avro's figures at the top level,
JSON's under ``json``; a format not run keeps its figures from the file.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from airflow_provider_kafka_spark.spark import decode_kafka, spark_session  # noqa: E402
from airflow_provider_kafka_spark.spark.formats import (  # noqa: E402
    FieldCodec,
    Subject,
    decode_batches,
    fast,
    frozen_config,
    resolve_schema,
    spark_type_of,
)
from airflow_provider_kafka_spark.spark.formats.json_arrow import NativeJson  # noqa: E402
from benchmarks.measure import ProcessTree  # noqa: E402
from tools.local_registry import local_registry  # noqa: E402

SCHEMA = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"},
    {"name": "user", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["view", "click", "buy"]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": "double"},
    {"name": "payload", "type": "string"},
]}
BATCH = 10_000


def _records(n: int, schema_id: int) -> list[bytes]:
    parsed = fastavro.parse_schema(SCHEMA)
    prefix = b"\x00" + struct.pack(">I", schema_id)
    out = []
    for i in range(n):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, {
            "id": i, "user": f"user-{i % 5000:05d}", "kind": ("view", "click", "buy")[i % 3],
            "ts": 1_790_000_000_000 + i * 37, "amount": i * 0.25,
            "payload": "x" * (130 + i % 40)})
        out.append(prefix + buffer.getvalue())
    return out


def _batches(values: list[bytes]) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(values), BATCH):
        chunk = values[start:start + BATCH]
        n = len(chunk)
        out.append(pa.RecordBatch.from_pydict({
            "key": pa.array([None] * n, pa.binary()), "value": pa.array(chunk, pa.binary()),
            "topic": ["events"] * n, "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64())}))
    return out


def _run(codec: FieldCodec, batches: list[pa.RecordBatch]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    rows = 0
    for out in decode_batches((codec,), False)(iter(batches)):
        rows += out.num_rows
        assert out.column("_value_error").null_count == out.num_rows
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"records": rows, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "records_per_s": round(rows / wall), "cpu_s_per_million": round(cpu / rows * 1e6, 3)}


JSON_DDL = "id long, user string, kind string, ts long, amount double, payload string"
JSON_SCHEMA = T.StructType([
    T.StructField("id", T.LongType()), T.StructField("user", T.StringType()),
    T.StructField("kind", T.StringType()), T.StructField("ts", T.LongType()),
    T.StructField("amount", T.DoubleType()), T.StructField("payload", T.StringType())])


def _json_records(n: int) -> list[bytes]:
    return [json.dumps({
        "id": i, "user": f"user-{i % 5000:05d}", "kind": ("view", "click", "buy")[i % 3],
        "ts": 1_790_000_000_000 + i * 37, "amount": i * 0.25,
        "payload": "x" * (85 + i % 40)}, separators=(",", ":")).encode() for i in range(n)]


def _run_native_json(batches: list[pa.RecordBatch]) -> dict[str, float]:
    decoder = NativeJson("value", JSON_SCHEMA, JSON_DDL)
    decoder.decode(batches[0].column("value"))  # warm-up
    decoder.counts.update(read=0, one_by_one=0)
    wall, cpu = time.perf_counter(), time.process_time()
    rows = 0
    for batch in batches:
        decoded = decoder.decode(batch.column("value"))
        rows += len(decoded.values)
        assert not decoded.fallback and all(e is None for e in decoded.errors)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert decoder.counts == {"read": rows, "one_by_one": 0}, decoder.counts
    return {"records": rows, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "records_per_s": round(rows / wall), "cpu_s_per_million": round(cpu / rows * 1e6, 3)}


def _run_spark(batches: list[pa.RecordBatch]) -> dict[str, Any]:
    """Spark's path on a cached DataFrame of the records (read from a Parquet file, to the
    ``noop`` sink), and the same job without decoding."""
    spark = spark_session("local[2]", app_name="decode-throughput-benchmark",
                          conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    try:
        with tempfile.TemporaryDirectory() as folder:
            table = pa.Table.from_batches(batches)
            rows = table.num_rows
            table = (table
                     .append_column("timestamp", pa.nulls(rows, pa.timestamp("us", "UTC")))
                     .append_column("timestampType", pa.array([0] * rows, pa.int32())))
            pq.write_table(table, f"{folder}/records.parquet")
            df = spark.read.parquet(f"{folder}/records.parquet").cache()
            df.count()
            decoded = decode_kafka(df, value_format="json", value_schema=JSON_DDL,
                                   on_corrupt="dead_letter")
            out: dict[str, Any] = {}
            for name, frame in (("scan_only", df), ("from_json", decoded)):
                frame.write.format("noop").mode("overwrite").save()  # warm-up
                with ProcessTree() as tree:
                    wall = time.perf_counter()
                    frame.write.format("noop").mode("overwrite").save()
                    wall = time.perf_counter() - wall
                cpu = tree.total_cpu_s
                out[name] = {"records": rows, "seconds": round(wall, 3),
                             "cpu_seconds": round(cpu, 3),
                             "cpu_by_process": {k: round(v, 3) for k, v in tree.cpu_s.items()},
                             "records_per_s": round(rows / wall),
                             "cpu_s_per_million": round(cpu / rows * 1e6, 3)}
            df.unpersist()
        return out
    finally:
        spark.stop()


def _avro(records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir, local_registry(Path(run_dir)) as url:
        config = frozen_config({"url": url}, "benchmark")
        client = SchemaRegistryClient({"url": url})
        schema_id = client.register_schema("events-value", Schema(json.dumps(SCHEMA), "AVRO"))
        resolved = resolve_schema(config, "avro", Subject("events-value"))
        codec = FieldCodec("value", resolved, config, spark_type_of(resolved).json())
        values = _records(records, schema_id)
        batches = _batches(values)
        mean_bytes = sum(map(len, values)) / len(values)
        native = _run(codec, batches)
        real = fast.native_avro
        fast.native_avro = lambda *_: None  # type: ignore[assignment]
        try:
            confluent = _run(codec, batches)
        finally:
            fast.native_avro = real
    return {
        "format": "avro (Schema Registry wire format)",
        "records": records, "mean_record_bytes": round(mean_bytes, 1), "fields": 6,
        "batch_records": BATCH, "native": native, "confluent_deserializer": confluent,
        "ratio_speed_native_vs_confluent": round(
            native["records_per_s"] / confluent["records_per_s"], 2),
        "ratio_cpu_native_vs_confluent": round(
            native["cpu_s_per_million"] / confluent["cpu_s_per_million"], 4),
    }


def _json(records: int) -> dict[str, Any]:
    values = _json_records(records)
    batches = _batches(values)
    native = _run_native_json(batches)
    spark = _run_spark(batches)
    net_cpu = spark["from_json"]["cpu_s_per_million"] - spark["scan_only"]["cpu_s_per_million"]
    return {
        "format": "json (value_schema " + JSON_DDL + ")",
        "records": records, "mean_record_bytes": round(sum(map(len, values)) / records, 1),
        "fields": 6, "batch_records": BATCH, "native": native,
        "spark_from_json": spark["from_json"], "spark_scan_only": spark["scan_only"],
        "spark_from_json_net_cpu_s_per_million": round(net_cpu, 3),
        "ratio_speed_native_vs_spark": round(
            native["records_per_s"] / spark["from_json"]["records_per_s"], 2),
        "ratio_cpu_native_vs_spark": round(
            native["cpu_s_per_million"] / spark["from_json"]["cpu_s_per_million"], 4),
        "ratio_cpu_native_vs_spark_net": round(native["cpu_s_per_million"] / net_cpu, 4)
        if net_cpu > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--formats", default="avro,json",
                        help="comma-separated: avro, json (default both)")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / "decode_throughput.json")
    args = parser.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = set(formats) - {"avro", "json"}
    if unknown:
        parser.error(f"unknown formats {sorted(unknown)}; use avro, json")
    result: dict[str, Any] = (json.loads(args.out.read_text()) if args.out.exists() else {})
    result.update({"benchmark": "decode_throughput",
                   "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}})
    if "avro" in formats:
        result.update(_avro(args.records))
    if "json" in formats:
        result["json"] = _json(args.records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
