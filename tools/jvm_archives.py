"""Class-data-sharing archives for the suite's Spark driver JVMs (Java's AppCDS).

    .venv/bin/python tools/jvm_archives.py .venv/bin/python .venv-tables/bin/python

A Spark driver spends most of its start loading and verifying some ten thousand classes from
PySpark's jars. The suite starts about a hundred of them (session fixtures, kill-point
children, the deployed Airflow's tasks, the tables tier's children), each for a small job, on
a 2-core machine whose CPU is what the test lanes wait for. A dynamic CDS archive of the
classes one small job loads, made once per PySpark install and mapped read-only by every later
driver, takes that work away: measured here, a driver's start and a small job 16.5-19 -> 10.5-12
CPU seconds, 15-17 -> 8.5-9.5 s.

:func:`make_archive` runs one small Spark job under a venv's Python with
``-XX:ArchiveClassesAtExit`` (``.cache/jvm-archives/spark-<key>.jsa``, the key from that
install's jars: their names, sizes and times, as the JVM checks them);
:func:`spark_archive_options` gives the JVM options that use it, or nothing when it is not
there. A JVM whose classpath does not match the archive (another PySpark) runs without it;
its CDS messages are turned off either way, so no driver prints a line about it. Standard
library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = ROOT / ".cache" / "jvm-archives"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""No JVM prints a line about the archive (a mismatch only means it runs without it)."""

_PROBE = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = spark.createDataFrame([(i, f"k{i}", bytes([i % 256])) for i in range(200)],
                           "id long, key string, value binary")
df.groupBy((df.id % 3).alias("g")).count().collect()
df.write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).selectExpr("sum(id)").collect()
jvm = spark.sparkContext._gateway.proc  # the archive is written as the JVM exits: wait for it
spark.stop()
jvm.stdin.close()  # PySpark's gateway server exits when its stdin ends
jvm.wait(timeout=120)
"""


def _jars(python: Path) -> Path | None:
    """The jars folder of the PySpark ``python`` imports (None: it has none)."""
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; s = u.find_spec('pyspark'); "
         "print(s.origin if s else '')"], capture_output=True, text=True, check=False)
    origin = found.stdout.strip()
    return Path(origin).parent / "jars" if origin else None


def archive_path(jars: Path) -> Path:
    """Where the archive of the PySpark install with ``jars`` is."""
    digest = hashlib.sha256()
    for jar in sorted(jars.iterdir()):
        status = jar.stat()
        digest.update(f"{jar}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return ARCHIVES / f"spark-{digest.hexdigest()[:16]}.jsa"


def spark_archive_options() -> str:
    """The JVM options (a leading space) that map the archive of this interpreter's PySpark,
    or "" when it has not been made."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    jars = Path(spec.origin).parent / "jars" if spec and spec.origin else None
    if jars is None or not jars.is_dir():
        return ""
    archive = archive_path(jars)
    return f" -XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""


ARCHIVE_TIMEOUT_S = 1200.0
"""How long one archive's job may take. ``make test`` runs it at the lowest CPU priority beside
the wheel's build, which keeps both cores busy for 8-10 minutes; the job needs about 50 CPU
seconds, mostly after the build (measured: a 300 s limit was reached once, with the S3
server's build at the same priority)."""


def make_archive(python: Path, jvm_options: str = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                 timeout_s: float = ARCHIVE_TIMEOUT_S) -> Path | None:
    """The archive of ``python``'s PySpark, made by one small Spark job under ``python``
    unless it is there; None when that PySpark has no jars, or the job failed or took longer
    than ``timeout_s`` (it is stopped with its JVM, and the suite runs without the archive)."""
    jars = _jars(python)
    if jars is None or not jars.is_dir():
        return None
    archive = archive_path(jars)
    if archive.is_file():
        return archive
    ARCHIVES.mkdir(parents=True, exist_ok=True)
    partial = ARCHIVES / f".{archive.name}.{os.getpid()}.partial"
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
        env = {**os.environ, "PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_SUBMIT_OPTS": f"{jvm_options} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
        # A session of its own: past the time, its process group (PySpark and the JVM) stops.
        job = subprocess.Popen([str(python), "-c", _PROBE, str(Path(scratch) / "out")],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = job.communicate(timeout=timeout_s)
            ended = f"exit {job.returncode}"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            _, stderr = job.communicate()
            ended = f"stopped after {timeout_s:.0f} s"
        if job.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            print(f"jvm_archives: no archive for {python} ({ended}); the suite's Spark drivers "
                  f"start without one:\n{stderr[-2000:]}", file=sys.stderr)
            return None
    os.replace(partial, archive)  # whole or not at all
    return archive


def main(argv: list[str]) -> int:
    for python in argv or [sys.executable]:
        print(f"jvm_archives: {python}: {make_archive(Path(python))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
