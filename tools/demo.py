"""Demo: the ``kafka_hourly_ingest`` DAG ingests three hours of Kafka events into Parquet.

Run by ``make demo``. It

1. starts the project's local Kafka broker (``scripts/kafka-broker``, run dir
   ``.cache/kafka/run``, port 9092 or a free one) unless one already runs from that dir;
2. (re)creates ``demo.events`` with 3 partitions and produces 10,000 events whose timestamps
   spread over three past hours;
3. runs the real DAG ``dags/kafka_hourly_ingest.py`` with ``dag.test()`` (Airflow 3, a
   throwaway ``AIRFLOW_HOME`` with a SQLite metadata DB) once per hour: sensor -> resolve ->
   Spark ingest -> commit;
4. prints each run's offset ranges and record counts, checks them against what was produced,
   and leaves the Parquet under ``demo-output/kafka_hourly_ingest/<hour>/``;
5. stops the broker if it started it.

It prints those results and nothing else a newcomer could take for a failure: the librdkafka
log of its own clients shows warnings and errors only, with the retries a just-started broker
causes at debug level; Spark's driver has a log configuration of its own and logs errors only.
``--broker-dir`` and ``--output`` move the broker's run folder and the Parquet
(tests/dags/test_demo.py runs it in temporary ones).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BROKER = ROOT / "scripts" / "kafka-broker"
RUN_DIR = ROOT / ".cache" / "kafka" / "run"
OUTPUT = ROOT / "demo-output" / "kafka_hourly_ingest"
DAG_ID = "kafka_hourly_ingest"
TOPIC = "demo.events"
GROUP = "demo-hourly-ingest"
EVENTS = 10_000
HOURS = 3


class ExpectedRetries(logging.Filter):
    """librdkafka's notices of the retries a broker that has just started causes, at debug
    level: until it has loaded its coordinators (producer ids, consumer groups) it answers
    "Coordinator load in progress", and the client retries, as it should."""

    RETRIED = ("Coordinator load in progress",)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and any(m in record.getMessage() for m in self.RETRIED):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def librdkafka_log() -> logging.Logger:
    """The log of the demo's own Kafka clients (their ``logger``): librdkafka's warnings and
    errors on stderr, its informational lines and expected retries at debug level."""
    log = logging.getLogger("kafka_spark.demo.librdkafka")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        log.addHandler(handler)
        log.addFilter(ExpectedRetries())
        log.propagate = False
    return log


def broker_running(run_dir: Path) -> bool:
    """True when a broker process already runs from ``run_dir`` (then the demo leaves it up)."""
    try:
        os.kill(int((run_dir / "broker.pid").read_text()), 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False
    return True


def start_broker(run_dir: Path) -> str:
    with socket.socket() as s:
        port = 9092 if s.connect_ex(("127.0.0.1", 9092)) != 0 else 0
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    out = subprocess.run([sys.executable, str(BROKER), "start", "--dir", str(run_dir),
                          "--port", str(port)], check=True, capture_output=True, text=True)
    return out.stdout.strip().split("=", 1)[1]


def prepare_airflow(bootstrap: str) -> Path:
    """Point Airflow at a throwaway home and migrate its SQLite DB, before importing Airflow."""
    home = Path(tempfile.mkdtemp(prefix="kafka-spark-demo-airflow-"))
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
    })
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
                   check=True, capture_output=True)
    return home


def spark_log_config(home: Path) -> Path:
    """A log4j2 configuration for the demo's Spark driver, so that Spark does not fall back to
    its default profile (and say so): warnings and errors on stderr at the level PySpark
    starts with (WARN; Spark announces any other), but not the warning that Hadoop's native
    library is missing, for which Hadoop uses its built-in Java classes."""
    path = home / "spark-log4j2.properties"
    path.write_text("rootLogger.level = warn\n"
                    "rootLogger.appenderRef.stderr.ref = console\n"
                    "appender.console.type = Console\n"
                    "appender.console.name = console\n"
                    "appender.console.target = SYSTEM_ERR\n"
                    "appender.console.layout.type = PatternLayout\n"
                    "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n\n"
                    "logger.hadoop_native.name = org.apache.hadoop.util.NativeCodeLoader\n"
                    "logger.hadoop_native.level = error\n")
    return path


def shown(path: Path) -> Path:
    """``path`` relative to the repository when it is in it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def recreate_topic(config: dict[str, Any]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    if TOPIC in admin.list_topics(timeout=30).topics:
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        while TOPIC in admin.list_topics(timeout=30).topics:
            time.sleep(0.2)
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[TOPIC].result(30)


def produce_events(config: dict[str, Any], first_hour: datetime) -> list[int]:
    """Produce EVENTS JSON events with increasing timestamps over HOURS hours, keyed by user."""
    from confluent_kafka import Producer

    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    start_ms = int(first_hour.timestamp() * 1000)
    step = HOURS * 3600 * 1000 / EVENTS
    rng = random.Random(7)
    stamps = []
    for i in range(EVENTS):
        ts = start_ms + int(i * step)
        user = f"user-{rng.randrange(50)}"
        event = {"id": i, "user": user, "action": rng.choice(["view", "click", "buy"])}
        producer.produce(TOPIC, key=user.encode(), value=json.dumps(event).encode(), timestamp=ts)
        producer.poll(0)
        stamps.append(ts)
    if producer.flush(60):
        raise RuntimeError("events still in flight after 60 s")
    return stamps


def run_hour(dag: Any, interval_end: datetime, output: Path) -> dict[str, Any]:
    """One ``dag.test()`` run for the hour ending at ``interval_end``; its tasks' XComs."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag_run = dag.test(logical_date=interval_end, run_conf={
        "topics": TOPIC, "output_root": str(output), "group_id": GROUP})
    if str(dag_run.state) != "success":
        raise SystemExit(f"the run for the hour ending {interval_end:%H:%M} ended "
                         f"{dag_run.state}; see the log above.")
    with create_session() as session:
        rows = session.query(XComModel).filter(
            XComModel.dag_id == DAG_ID, XComModel.run_id == dag_run.run_id,
            XComModel.key == "return_value").all()
        return {row.task_id: row.value for row in rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker-dir", type=Path, default=RUN_DIR,
                        help="the local broker's run folder (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=OUTPUT,
                        help="where the Parquet goes, one folder per hour (default: %(default)s)")
    args = parser.parse_args(argv)
    run_dir, output = args.broker_dir.resolve(), args.output.resolve()
    # The Spark driver JVM's lines (spark_session logs them): warnings and errors only, so that
    # what prints between the results needs attention (not the JVM's incubator-module notice).
    logging.getLogger("airflow_provider_kafka_spark.spark.jvm").setLevel(logging.WARNING)
    started = not broker_running(run_dir)
    bootstrap = start_broker(run_dir)
    home: Path | None = None
    try:
        config = {"bootstrap.servers": bootstrap, "logger": librdkafka_log()}
        recreate_topic(config)
        first = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) \
            - timedelta(hours=HOURS + 1)
        stamps = produce_events(config, first)
        print(f"Kafka {bootstrap}: produced {EVENTS} events to {TOPIC} (3 partitions), "
              f"timestamps {first:%Y-%m-%d %H:%M} to {first + timedelta(hours=HOURS):%H:%M} UTC")

        home = prepare_airflow(bootstrap)
        warnings.simplefilter("ignore")  # Airflow's own deprecation notices
        from airflow.dag_processing.dagbag import DagBag

        from airflow_provider_kafka_spark.spark import spark_session

        # The runs' ingest tasks get this session (getOrCreate): quiet, no UI.
        spark_session(conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                            "spark.driver.extraJavaOptions":
                                f"-Dlog4j2.configurationFile={spark_log_config(home)}"}
                      ).sparkContext.setLogLevel("ERROR")

        dag = DagBag(dag_folder=str(ROOT / "dags" / f"{DAG_ID}.py")).get_dag(DAG_ID)
        shutil.rmtree(output, ignore_errors=True)
        total = 0
        for hour in range(HOURS):
            start, end = first + timedelta(hours=hour), first + timedelta(hours=hour + 1)
            began = time.monotonic()
            xcom = run_hour(dag, end, output)
            seconds = time.monotonic() - began
            stats = xcom["ingest"]
            produced = sum(1 for ts in stamps
                           if start.timestamp() * 1000 <= ts < end.timestamp() * 1000)
            print(f"\n{DAG_ID} run for [{start:%Y-%m-%d %H:%M}, {end:%H:%M}) UTC "
                  f"({seconds:.0f}s) -> {shown(Path(stats['output']['path']))}")
            print(f"  {'partition':>9} {'start':>6} {'stop':>6} {'records':>8}")
            for p in stats["partitions"]:
                print(f"  {p['partition']:>9} {p['start']:>6} {p['stop']:>6} {p['records']:>8}")
            committed = {o["partition"]: o["offset"] for o in xcom["commit_offsets"]["offsets"]}
            print(f"  {'total':>9} {'':>6} {'':>6} {stats['records']:>8}   produced in the hour: "
                  f"{produced}; committed to {GROUP!r}: {committed}")
            if stats["records"] != produced:
                raise SystemExit("the run's records do not match the events of its hour")
            total += stats["records"]
        print(f"\n{total} of {EVENTS} events ingested in {HOURS} runs, none twice. Parquet: "
              f"{shown(output)}/<hour>/ (each with _kafka_spark_manifest.json)")
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        if started:
            subprocess.run([sys.executable, str(BROKER), "stop", "--dir", str(run_dir)],
                           check=True)


if __name__ == "__main__":
    main()
