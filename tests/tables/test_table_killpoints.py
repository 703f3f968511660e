"""The Spark driver SIGKILLed before, during and right after an ingest's table commit, then the
same run retried (same application, run, generation and ranges): every record lands in the
table exactly once, and the run's commit record once.

Each case ingests in a child process with its own SparkSession (``tools/table_killpoint.py``)
and kills it at one moment, reached without timing guesses:

* ``before``: the sink's ``commit_rows`` began (the read, the statistics and the look-up of the
  run's writes are done) and waits: nothing of the run is in the table;
* ``during``: the write job's tasks wrote data files into the table's folder, its last task
  never ends: new data files, no new commit;
* ``after_commit``: the commit returned (the commit file is there), the ingest did not.

The retry runs here, in the tier's ``table_spark`` session, which sees the table as it is
(a new driver would).

Each moment runs for tables in a local folder; ``during`` and ``after_commit`` also for tables
on S3 (``*-s3``: Iceberg's JdbcCatalog ``s3`` with its warehouse on the S3 server, a Delta table
at an ``s3a://`` path), where the files the kill leaves are objects, listed through the S3 API.

A run of the records as read into a table of Spark's Kafka schema is committed another way
(issue 43): the readers land its Parquet files into ``<data folder>/kafka-spark-<uuid>/`` and
the sink's ``commit_files`` adds exactly those files. Its moments (local tables):

* ``during``: the landing read's tasks wrote files into the run's landing folder, its first
  task never ends: new files, no new commit;
* ``after_commit``: ``commit_files`` returned, the ingest did not.

(The child holds such a run at ``before``, ``commit_files`` began, too; the table is then as at
``during`` with every file written, so the tier spends no third case on it.)

The retry lands files of its own (or, after the commit, finds the run and writes nothing): the
table's files are exactly one try's, the killed try's files that were not committed stay in its
folder outside the table (the format's orphan-file clean-up removes them).
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from airflow_provider_kafka_spark.decoding import Decoding
from airflow_provider_kafka_spark.shaping import Derived, Shape
from airflow_provider_kafka_spark.sinks.tables import WRITE_COLUMN
from airflow_provider_kafka_spark.sinks.tables.commits import write_id
from airflow_provider_kafka_spark.spark import ingest
from tests.tables.cases import (
    AS_READ_COLUMNS,
    SQL,
    Table,
    create,
    expected,
    ranges_of,
    run_ingest,
)
from tools.kafka_records import produce
from tools.table_killpoint import (
    MOMENTS,
    Job,
    Standby,
    TableFiles,
    kill_table_ingest,
    table_conf,
)

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration]

NOW = int(time.time() * 1000)
PER_PARTITION = 30
BOUNDS = {0: (0, 30), 1: (5, 25), 2: (10, 30)}
# The files a try lands: a split's each, and ingest's default size (at least 50,000 offsets a
# split) makes the three ranges' 70 offsets one split.
SPLITS = 1
"""The run's ranges: 70 of the topic's 90 records."""


@pytest.fixture(scope="module")
def topic(kafka_config: dict[str, Any]) -> Any:
    """A 3-partition topic holding 30 records per partition (offsets 0..29)."""
    import uuid

    from confluent_kafka.admin import AdminClient

    from tests.support.topics import create_topic

    name = f"table-kill-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_config)
    create_topic(admin, name, 3)
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), NOW + i)
            for i in range(PER_PARTITION) for p in range(3)]
    produce(kafka_config, name, data)
    yield name, data
    admin.delete_topics([name])[name].result(30)


@pytest.fixture(scope="module")
def lake(table_spark: Any, warehouses: Any, s3_lake: Any) -> Any:
    """The lake warehouse, once the child's catalogs (local and on S3) are known to be this
    session's."""
    conf = table_conf(warehouses.lake, s3_lake)
    assert {k: table_spark.conf.get(k, None) for k in conf} == conf
    return warehouses.lake


@pytest.fixture(scope="module")
def children(request: pytest.FixtureRequest, lake: Any, s3_lake: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A child driver per case, each started while the case before it runs."""
    cases = sum(1 for item in request.session.items if item.module is request.module)
    standby = Standby(lake, tmp_path_factory.mktemp("table-kill"), cases, s3_lake)
    yield standby
    standby.close()


CASES = [*((kind, moment) for kind in ("iceberg-hadoop", "delta-path") for moment in MOMENTS),
         *((kind, moment) for kind in ("iceberg-s3", "delta-s3")
           for moment in ("during", "after_commit"))]
"""Every moment for local tables; on S3 the two that leave objects behind (``before`` kills a
driver that has written nothing anywhere yet: on S3 as locally)."""


@pytest.mark.parametrize(("kind", "moment"), CASES)
def test_a_driver_killed_at_the_table_commit_leaves_each_record_once_after_the_retry(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, lake: Any, warehouses: Any,
        children: Standby, kind: str, moment: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind))
    # The table is set up for the sinks and loaded by this session before the child writes
    # (a long-lived driver that wrote it before): only a sink that refreshes sees the
    # child's commit.
    table.sink("setup").ensure_write_column(table_spark, table.df(table_spark).schema)
    assert WRITE_COLUMN in table.df(table_spark).columns
    ranges = ranges_of(name, BOUNDS)
    run = f"hour-{moment}"
    wid = write_id("app", run, 0, ranges)
    want = expected(data, ranges)
    assert sum(want.values()) == 70

    kill = kill_table_ingest(children.take(), Job(
        table.format, table.name, kafka_config["bootstrap.servers"], ranges.to_json(), run=run,
        hold=moment, sql=SQL))
    print(f"\n{kind} {moment}: child READY after {kill.ready_s}s (waited {kill.waited_s}s), "
          f"COMMITTING {kill.committing_s}s after the job, killed at {kill.kill_s}s; the "
          f"child's CPU {kill.cpu_s}s")

    # The kill happened, at the moment meant.
    assert kill.returncode == -signal.SIGKILL, kill
    assert kill.write_id == wid
    assert not any(line.startswith("DONE") for line in kill.lines), kill.lines
    if moment == "before":
        assert kill.lines[-1] == f"COMMITTING {wid}", kill.lines
        assert not kill.new_data_files and not kill.new_commit_files, kill
    elif moment == "during":
        assert kill.lines[-1] == f"COMMITTING {wid}", kill.lines
        assert kill.new_data_files and not kill.new_commit_files, kill
    else:
        assert kill.lines[-1] == f"COMMITTED {wid}", kill.lines
        assert kill.new_commit_files, kill

    if moment == "after_commit":
        # The same run again, here, before this session looks at the table: its Iceberg
        # catalog still serves the table as it loaded it before the child's commit (the tier's
        # catalogs cache tables without expiry, as a long-lived driver or Connect server
        # does), so the sink itself must see the newest commit.
        out = run_ingest(table_spark, kafka_config, ranges, table.sink(run))
        assert out["write_id"] == wid
        assert out["skipped"] is True and out["committed"] is False, out
        assert out["records_written"] == 0
    else:
        # Nothing of the run is in the table, as a new driver sees it.
        if table.format == "iceberg":
            table_spark.sql(f"REFRESH TABLE {table.name}")
        assert table.records(table_spark) == []
        assert table.rows(table_spark) == Counter()
        out = run_ingest(table_spark, kafka_config, ranges, table.sink(run))
        assert out["write_id"] == wid
        assert out["committed"] is True and out["skipped"] is False, out
        assert out["records_written"] == 70 and out["replaced"] == []

    if table.format == "iceberg":
        table_spark.sql(f"REFRESH TABLE {table.name}")
    assert table.rows(table_spark) == want
    assert table.writes(table_spark) == Counter({wid: 70})
    records = table.records(table_spark)
    assert [r.write_id for r in records] == [wid]
    assert records[0].offsets == {(name, p): stop for p, (_, stop) in BOUNDS.items()}


LANDED_CASES = [("iceberg-hadoop", "during"), ("delta-path", "during"),
                ("delta-path", "after_commit")]
"""Runs whose readers land the table's files, in local tables: killed while they land, for
both formats; killed after the commit, for Delta (whose commit checks the run's transaction
before delta-rs commits; Iceberg's retry after its commit is the look-up every retry does,
``tests/tables/test_iceberg_landed.py``). Kept to three: the tier's CI job is near its time."""

LANDING_FOLDER = re.compile(r"kafka-spark-[0-9a-f]{32}")


def committed_files(spark: Any, table: Table, files: TableFiles) -> set[str]:
    """The data files of the table's newest version (its metadata's list, as a new driver
    reads it), relative to its data folder."""
    if table.format == "iceberg":
        spark.sql(f"REFRESH TABLE {table.name}")
        uris = [r[0] for r in spark.sql(f"SELECT file_path FROM {table.name}.files").collect()]
    else:
        uris = spark.read.format("delta").load(table.name).inputFiles()
    root = files.data.rstrip("/") + "/"
    paths = {unquote(u.removeprefix("file://").removeprefix("file:")) for u in uris}
    assert all(p.startswith(root) for p in paths), paths
    return {p.removeprefix(root) for p in paths}


@pytest.mark.parametrize(("kind", "moment"), LANDED_CASES)
def test_a_driver_killed_while_its_readers_land_the_tables_files_leaves_each_record_once(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, lake: Any, warehouses: Any,
        children: Standby, kind: str, moment: str) -> None:
    name, data = topic
    table = create(table_spark, kind, warehouses.of(kind), AS_READ_COLUMNS)
    table.sink("setup").ensure_write_column(table_spark, table.df(table_spark).schema)
    assert WRITE_COLUMN in table.df(table_spark).columns
    ranges = ranges_of(name, BOUNDS)
    run = f"landed-{moment}"
    wid = write_id("app", run, 0, ranges)
    want = expected(data, ranges)
    assert sum(want.values()) == 70

    kill = kill_table_ingest(children.take(), Job(
        table.format, table.name, kafka_config["bootstrap.servers"], ranges.to_json(), run=run,
        hold=moment, sql=None))
    print(f"\n{kind} landed {moment}: child READY after {kill.ready_s}s (waited "
          f"{kill.waited_s}s), {kill.lines[-1].split()[0]} {kill.committing_s}s after the job, "
          f"killed at {kill.kill_s}s; the child's CPU {kill.cpu_s}s")

    # The kill happened, at the moment meant, in a run whose readers landed its files.
    assert kill.returncode == -signal.SIGKILL, kill
    assert kill.write_id == wid
    assert kill.landing is not None and LANDING_FOLDER.fullmatch(kill.landing), kill
    assert not any(line.startswith("DONE") for line in kill.lines), kill.lines
    landed = kill.new_data_files
    assert landed and all(f.rpartition("/")[0] == kill.landing for f in landed), kill
    if moment == "during":
        assert kill.lines[-1].startswith(f"LANDING {wid} "), kill.lines
        assert not kill.new_commit_files, kill
    else:
        assert kill.lines[-1] == f"COMMITTED {wid}", kill.lines
        assert len(landed) == SPLITS and kill.new_commit_files, kill  # one file per split

    if moment == "after_commit":
        # The same run again, before this session looks at the table (see above): the sink
        # finds the killed try's commit and deletes the files its own readers landed.
        out = run_ingest(table_spark, kafka_config, ranges, table.sink(run), sql=None)
        assert out["write_id"] == wid
        assert out["skipped"] is True and out["committed"] is False, out
        assert out["records_written"] == 0 and out["landed"] is False, out
    else:
        if table.format == "iceberg":
            table_spark.sql(f"REFRESH TABLE {table.name}")
        assert table.records(table_spark) == []
        assert table.rows(table_spark) == Counter()
        out = run_ingest(table_spark, kafka_config, ranges, table.sink(run), sql=None)
        assert out["write_id"] == wid
        assert out["committed"] is True and out["skipped"] is False, out
        assert out["landed"] is True, out
        assert out["records_written"] == 70 and out["replaced"] == []

    if table.format == "iceberg":
        table_spark.sql(f"REFRESH TABLE {table.name}")
    assert table.rows(table_spark) == want
    assert table.writes(table_spark) == Counter({wid: 70})
    records = table.records(table_spark)
    assert [r.write_id for r in records] == [wid]
    assert records[0].offsets == {(name, p): stop for p, (_, stop) in BOUNDS.items()}

    # The table's files are one try's, one per split, in its landing folder; the killed try's
    # uncommitted files are not among them.
    files = TableFiles.of(table.format, table.name, lake)
    in_table = committed_files(table_spark, table, files)
    stored = files.data_files()
    [folder] = {f.rpartition("/")[0] for f in in_table}
    assert len(in_table) == SPLITS and LANDING_FOLDER.fullmatch(folder), in_table
    assert in_table <= stored
    folders = {p.name for p in Path(files.data).glob("kafka-spark-*")}
    if moment == "after_commit":  # the killed try's files; the retry's own are gone
        assert folder == kill.landing and in_table == landed
        assert stored == in_table and folders == {kill.landing}
    else:  # the retry's files; the killed try's stay in its folder, outside the table
        assert folder != kill.landing
        orphans = stored - in_table
        assert landed <= orphans and all(f.rpartition("/")[0] == kill.landing for f in orphans)
        assert folders == {kill.landing, folder}


DECODED = json.dumps({"key_format": "string", "value_format": "string"})
KP_SHAPE = Shape(["partition", "offset", "key", "value"], {"kp": Derived("partition", "identity")})
KP_COLUMNS = "`partition` INT, `offset` BIGINT, key STRING, value STRING, kp INT"


@pytest.mark.parametrize("moment", ["during", "after_commit"])
def test_a_driver_killed_while_its_readers_land_a_decoded_partitioned_run_leaves_each_record_once(
        table_spark: Any, kafka_config: dict[str, Any], topic: Any, lake: Any, warehouses: Any,
        children: Standby, moment: str) -> None:
    """The records decoded (strings) and shaped by the readers into a Delta table partitioned
    by ``kp`` (a ``kp=<partition>/`` folder each): killed while its readers land the files or
    right after the commit, the retry leaves every record once in its partition."""
    name, data = topic
    table = create(table_spark, "delta-path", warehouses.lake, KP_COLUMNS, "kp")
    table.sink("setup").ensure_write_column(table_spark, table.df(table_spark).schema)
    ranges = ranges_of(name, BOUNDS)
    run = f"decoded-{moment}"
    wid = write_id("app", run, 0, ranges)

    kill = kill_table_ingest(children.take(), Job(
        table.format, table.name, kafka_config["bootstrap.servers"], ranges.to_json(), run=run,
        hold=moment, sql=None, decode=DECODED, shape=json.dumps(KP_SHAPE.to_json())))
    print(f"\ndecoded partitioned {moment}: killed at {kill.kill_s}s; the child's CPU "
          f"{kill.cpu_s}s")

    assert kill.returncode == -signal.SIGKILL, kill
    assert kill.write_id == wid
    assert kill.landing is not None and LANDING_FOLDER.fullmatch(kill.landing), kill
    landed = kill.new_data_files
    assert landed and all(f.startswith(f"{kill.landing}/kp=") for f in landed), kill
    if moment == "during":
        assert kill.lines[-1].startswith(f"LANDING {wid} "), kill.lines
        assert not kill.new_commit_files, kill
    else:
        assert kill.lines[-1] == f"COMMITTED {wid}", kill.lines
        assert {f.split("/")[1] for f in landed} == {"kp=0", "kp=1", "kp=2"}, kill

    out = dict(ingest(table_spark, ranges, kafka_config, table.sink(run),
                      decode=Decoding(**json.loads(DECODED)), shape=KP_SHAPE).output)
    assert out["write_id"] == wid
    if moment == "after_commit":
        assert out["skipped"] is True and out["committed"] is False, out
    else:
        assert out["committed"] is True and out["landed"] is True, out
    assert table.rows(table_spark) == expected(data, ranges)
    assert [r.write_id for r in table.records(table_spark)] == [wid]
    assert all(r.kp == r.partition for r in table.df(table_spark).select("kp", "partition")
               .collect())

