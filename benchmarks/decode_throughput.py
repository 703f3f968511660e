"""Avro decoding in one process: the native decoder (``_native.AvroDecoder``, arrow-avro) against
confluent-kafka's deserializer path (``decode_batches`` with the native path turned off), on
the same 1 M wire-format records (~200 B, 6 fields), in batches as a reader hands them over.

Both give the same Arrow column (tests/formats/test_native_decode.py); this measures records/s
and CPU seconds per million records of each. A local registry is started for the run.

    .venv/bin/python benchmarks/decode_throughput.py [--records 1000000]

Writes benchmarks/results/decode_throughput.json.
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
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402

from airflow_provider_kafka_spark.spark.formats import (  # noqa: E402
    FieldCodec,
    Subject,
    decode_batches,
    fast,
    frozen_config,
    resolve_schema,
    spark_type_of,
)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir, local_registry(Path(run_dir)) as url:
        config = frozen_config({"url": url}, "benchmark")
        client = SchemaRegistryClient({"url": url})
        schema_id = client.register_schema("events-value", Schema(json.dumps(SCHEMA), "AVRO"))
        resolved = resolve_schema(config, "avro", Subject("events-value"))
        codec = FieldCodec("value", resolved, config, spark_type_of(resolved).json())
        values = _records(args.records, schema_id)
        batches = _batches(values)
        mean_bytes = sum(map(len, values)) / len(values)
        native = _run(codec, batches)
        real = fast.native_avro
        fast.native_avro = lambda *_: None  # type: ignore[assignment]
        try:
            confluent = _run(codec, batches)
        finally:
            fast.native_avro = real
    result: dict[str, Any] = {
        "benchmark": "decode_throughput", "format": "avro (Schema Registry wire format)",
        "records": args.records, "mean_record_bytes": round(mean_bytes, 1), "fields": 6,
        "batch_records": BATCH, "native": native, "confluent_deserializer": confluent,
        "ratio_speed_native_vs_confluent": round(
            native["records_per_s"] / confluent["records_per_s"], 2),
        "ratio_cpu_native_vs_confluent": round(
            native["cpu_s_per_million"] / confluent["cpu_s_per_million"], 4),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    out = ROOT / "benchmarks" / "results" / "decode_throughput.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
