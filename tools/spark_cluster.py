"""A real, local Spark standalone cluster and Spark Connect server, from the pip ``pyspark``:
one implementation for ``scripts/spark-local`` (the user-facing launcher) and the
``tests/cluster`` fixture.

``start()`` brings up, on loopback (127.0.0.1, free ports), in a run folder (default
``.cache/spark-local/``), each with ``$SPARK_HOME/bin/spark-class`` / ``spark-submit`` of the
installed pyspark (``SPARK_HOME`` is the pyspark package folder; pip's pyspark has no
``sbin/start-master.sh``):

* a standalone **master** (``org.apache.spark.deploy.master.Master``);
* two **workers** (``org.apache.spark.deploy.worker.Worker``), ``WORKER_CORES`` cores and
  ``WORKER_MEMORY`` each;
* a **Spark Connect server** (``spark-submit --class ...SparkConnectServer``) whose master is
  that standalone master, so a Connect client's queries run on the workers' executors.

Every application is capped at ``APP_CORES`` cores in 1-core executors (the master spreads
them, one per worker), so the long-running Connect server and one classic application
(``spark-submit --master <master_url>``) run side by side, each with an executor on each
worker. Every Python worker runs this interpreter (``PYSPARK_PYTHON``), where this package,
confluent-kafka and pyarrow are installed.

Each process runs in its own process group, its pid in ``DIR/<name>.pid``, its log in
``DIR/<name>.log`` (names: ``master``, ``worker-1``, ``worker-2``, ``connect``). ``start()``
returns once the master's JSON lists both workers ALIVE and a Connect session runs a query;
``stop()`` ends every process it started (SIGTERM to each process group, then SIGKILL to the
group and every descendant noted before), also when ``start()`` fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tools.processes import alive, end_group, free_port, launch, read_pid, stop_service

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".cache" / "spark-local"
HOST = "127.0.0.1"
WORKERS = ("worker-1", "worker-2")
SERVICES = ("master", *WORKERS, "connect")  # start order; stopped in reverse
WORKER_CORES = 2      # advertised; one 1-core executor of each of two applications
WORKER_MEMORY = "1g"  # two 512m executors
EXECUTOR_MEMORY = "512m"
APP_CORES = 2         # spark.cores.max: one 1-core executor per worker
DAEMON_MEMORY = "512m"  # master and worker JVMs
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT_S = 120.0


class ClusterError(RuntimeError):
    """The local Spark cluster could not be started or did not become ready."""


def spark_home() -> Path:
    """The pip pyspark package folder: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class Cluster:
    """A running local cluster. ``master_url`` for ``--master``/``SparkSession.builder.master``,
    ``connect_url`` for ``SparkSession.builder.remote``; the rest is for tests and humans."""

    run_dir: Path
    master_url: str        # spark://127.0.0.1:<port>
    master_ui: str         # http://127.0.0.1:<port>; /json/ lists workers and applications
    connect_url: str       # sc://127.0.0.1:<port>
    connect_ui: str        # the Connect server's driver UI; /api/v1/applications/...
    python: str            # the interpreter of every driver and Python worker
    ports: Mapping[str, int]

    def pid(self, name: str) -> int | None:
        """The pid of service ``name`` (``master``, ``worker-1``, ...) if it runs."""
        return read_pid(self.run_dir, name)

    @property
    def worker_pids(self) -> dict[str, int]:
        """``{"worker-1": pid, "worker-2": pid}`` of the workers running now."""
        return {name: pid for name in WORKERS if (pid := self.pid(name)) is not None}

    def master_state(self) -> dict[str, object]:
        """The master's ``/json/`` document (workers, their state, active applications)."""
        state = _get_json(f"{self.master_ui}/json/")
        assert isinstance(state, dict)
        return state

    def alive_workers(self) -> int:
        return sum(1 for w in self.master_state().get("workers", [])  # type: ignore[union-attr]
                   if w.get("state") == "ALIVE")

    def executor_pids(self, app_id: str | None = None) -> dict[str, list[int]]:
        """Per worker, the pids of its executor JVMs (``CoarseGrainedExecutorBackend``
        children in the worker's process tree), only ``app_id``'s when given."""
        import psutil

        found: dict[str, list[int]] = {}
        for name, pid in self.worker_pids.items():
            found[name] = []
            with suppress(psutil.NoSuchProcess):
                for child in psutil.Process(pid).children(recursive=True):
                    with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        cmd = child.cmdline()
                        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd and (
                                app_id is None or app_id in cmd):
                            found[name].append(child.pid)
        return found

    def env(self) -> dict[str, str]:
        """The environment of a driver on this cluster (``spark-submit``, a Python script)."""
        return spark_env(self.run_dir, self.python)

    def submit_command(self, app: str | Path, *args: str,
                       conf: Mapping[str, str] | None = None) -> list[str]:
        """``spark-submit`` of a Python ``app`` to the standalone master (client mode)."""
        settings = {**app_conf(self.python), **(conf or {})}
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, str(app), *args]

    def submit(self, app: str | Path, *args: str, conf: Mapping[str, str] | None = None,
               log: Path | None = None, timeout: float = 300.0,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``app`` with ``spark-submit`` to completion (its own process group, killed on
        timeout), in the folder ``cwd`` (default: this process's); stdout is returned, stderr
        goes to ``log`` (default: returned too)."""
        with open(log, "w") if log else _null() as err:
            proc = subprocess.Popen(
                self.submit_command(app, *args, conf=conf), env=self.env(), text=True,
                stdout=subprocess.PIPE, stderr=err or subprocess.PIPE,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
            try:
                out, errs = proc.communicate(timeout=timeout)
            finally:
                end_group(proc.pid)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, errs or "")

    def start_worker(self, name: str) -> int:
        """(Re)start worker ``name`` on its ports (e.g. after a test killed it); its pid."""
        if (pid := self.pid(name)) is not None:
            return pid
        pid = launch(self.run_dir, name, _worker_command(self, name), self.env())
        _wait_workers(self, {name: pid}, READY_TIMEOUT_S)
        return pid

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name`` with everything in its process group (its executors)."""
        stop_service(self.run_dir, name, grace=0.0)


def app_conf(python: str) -> dict[str, str]:
    """Settings of every application on the cluster (the Connect server's and submitted
    apps'): 1-core executors, ``APP_CORES`` in all, this interpreter for Python workers, the
    driver on loopback, Kafka timestamps in UTC."""
    return {
        "spark.cores.max": str(APP_CORES),
        "spark.executor.cores": "1",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.sql.session.timeZone": "UTC",
    }


def spark_env(run_dir: Path, python: str) -> dict[str, str]:
    """The environment of every cluster process: this one's minus settings that would point
    Spark elsewhere, plus ``SPARK_HOME``, loopback, this interpreter and an empty conf dir."""
    dropped = ("SPARK_", "PYSPARK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    conf_dir = run_dir / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # An application without spark.cores.max takes APP_CORES, not every core.
        "SPARK_MASTER_OPTS": f"-Dspark.deploy.defaultCores={APP_CORES}",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
    })
    jvm_opts = os.environ.get("SPARK_CLUSTER_JVM_OPTS", "").strip()
    if jvm_opts:
        # Extra JVM options for every JVM of the cluster: the master and workers
        # (SPARK_DAEMON_JAVA_OPTS), the Connect server and submitted drivers
        # (SPARK_SUBMIT_OPTS) and the executors the workers start (spark-defaults.conf).
        env["SPARK_DAEMON_JAVA_OPTS"] = jvm_opts
        env["SPARK_SUBMIT_OPTS"] = jvm_opts
        (conf_dir / "spark-defaults.conf").write_text(
            f"spark.executor.extraJavaOptions {jvm_opts}\n")
    return env


def _worker_command(cluster: Cluster, name: str) -> list[str]:
    work_dir = cluster.run_dir / name
    work_dir.mkdir(exist_ok=True)
    return [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--port", str(cluster.ports[f"{name}.rpc"]),
            "--webui-port", str(cluster.ports[f"{name}.ui"]),
            "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--work-dir", str(work_dir), cluster.master_url]


def _connect_command(cluster: Cluster, jars: Sequence[str | Path]) -> list[str]:
    settings = {
        **app_conf(cluster.python),
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(cluster.ports["connect.grpc"]),
        "spark.ui.port": str(cluster.ports["connect.ui"]),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_CLASS,
               "--name", "Spark Connect server", "--master", cluster.master_url]
    if jars:
        command += ["--jars", ",".join(str(Path(j).resolve()) for j in jars)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return command


def start(run_dir: Path = DEFAULT_DIR, *, python: str | None = None,
          jars: Sequence[str | Path] = ()) -> Cluster:
    """Start the master, both workers and the Connect server (see the module docstring) and
    return once they are ready. ``python`` is the interpreter of drivers and Python workers
    (default: this one); ``jars`` go on the Connect server's classpath (e.g. Spark's Kafka
    source for ``engine="spark-kafka"``). Returns the running cluster as it is when every
    service already runs from ``run_dir``."""
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    state_file = run_dir / "cluster.json"
    if all(read_pid(run_dir, name) for name in SERVICES) and state_file.exists():
        return _from_state(json.loads(state_file.read_text()))
    if any(read_pid(run_dir, name) for name in SERVICES):
        raise ClusterError(f"some Spark processes still run from {run_dir}; "
                           f"run `scripts/spark-local stop --dir {run_dir}` first.")
    names = ("master.rpc", "master.ui", *(f"{w}.{p}" for w in WORKERS for p in ("rpc", "ui")),
             "connect.grpc", "connect.ui")
    ports = {name: free_port(HOST) for name in names}
    cluster = Cluster(
        run_dir=run_dir, master_url=f"spark://{HOST}:{ports['master.rpc']}",
        master_ui=f"http://{HOST}:{ports['master.ui']}",
        connect_url=f"sc://{HOST}:{ports['connect.grpc']}",
        connect_ui=f"http://{HOST}:{ports['connect.ui']}",
        python=python or sys.executable, ports=ports)
    try:
        state_file.write_text(json.dumps(
            {**cluster.__dict__, "run_dir": str(run_dir), "ports": dict(ports)}, indent=1))
        env = cluster.env()
        master = launch(run_dir, "master", [
            str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
            "--host", HOST, "--port", str(ports["master.rpc"]),
            "--webui-port", str(ports["master.ui"])], env)
        _wait_master(cluster, master, READY_TIMEOUT_S)
        workers = {name: launch(run_dir, name, _worker_command(cluster, name), env)
                   for name in WORKERS}
        _wait_workers(cluster, {"master": master, **workers}, READY_TIMEOUT_S)
        # Only once both workers are ALIVE: the master places an application's executors on
        # the workers registered at that moment, so a server started with the workers could
        # get both of its executors on the first worker to join and leave the other's cores
        # to the next application (seen in CI under load).
        connect = launch(run_dir, "connect", _connect_command(cluster, jars), env)
        _wait_connect(cluster, connect, READY_TIMEOUT_S)
        return cluster
    except BaseException:
        stop(run_dir)
        raise


def _from_state(state: Mapping[str, object]) -> Cluster:
    return Cluster(**{**state, "run_dir": Path(str(state["run_dir"]))})  # type: ignore[arg-type]


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read()
    try:
        return json.loads(body)
    except ValueError:
        raise ClusterError(f"{url} answered with something else than JSON (another server on "
                           f"the port?): {body[:120]!r}") from None


def _check_running(cluster: Cluster, pids: Mapping[str, int]) -> None:
    for name, pid in pids.items():
        if not alive(pid):
            raise ClusterError(f"Spark {name} exited during start-up; see "
                               f"{cluster.run_dir / (name + '.log')}")


def _wait_master(cluster: Cluster, pid: int, timeout: float) -> None:
    """Until the master's JSON says it is ALIVE (it leads and accepts registrations)."""
    def missing(state: Mapping[str, object]) -> str | None:
        status = state.get("status")
        return None if status == "ALIVE" else f"the master is {status}"

    _poll_master(cluster, {"master": pid}, timeout, missing, cluster.run_dir / "master.log")


def _wait_workers(cluster: Cluster, pids: Mapping[str, int], timeout: float) -> None:
    """Until the master's JSON lists every worker ALIVE (a restarted worker: its new id)."""
    def missing(state: Mapping[str, object]) -> str | None:
        workers = state.get("workers", [])
        ready = {w["port"] for w in workers if w.get("state") == "ALIVE"}  # type: ignore[union-attr]
        wanted = {cluster.ports[f"{w}.rpc"] for w in WORKERS if cluster.pid(w) is not None}
        if wanted <= ready and len(wanted) == len(WORKERS):
            return None
        return f"{len(ready & wanted)} of {len(WORKERS)} workers ALIVE"

    _poll_master(cluster, pids, timeout, missing, cluster.run_dir)


def _poll_master(cluster: Cluster, pids: Mapping[str, int], timeout: float,
                 missing: Callable[[Mapping[str, object]], str | None], logs: Path) -> None:
    """Poll the master's JSON until ``missing(state)`` is None (else it says what is missing);
    fails at once when one of ``pids`` exits."""
    deadline = time.monotonic() + timeout
    last = "the master did not answer"
    while time.monotonic() < deadline:
        _check_running(cluster, pids)
        try:
            problem = missing(cluster.master_state())
            if problem is None:
                return
            last = problem
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = f"the master did not answer ({exc})"
        time.sleep(0.25)
    raise ClusterError(f"the Spark master was not ready within {timeout:.0f}s: {last}; "
                       f"see {logs}")


CONNECT_PROBE = """\
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
assert spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"] == 45
print(spark.version)
"""


def _wait_connect(cluster: Cluster, pid: int, timeout: float) -> None:
    """Until the gRPC port accepts connections, then until a Connect session runs a query
    (on the cluster's executors)."""
    deadline = time.monotonic() + timeout
    while True:
        _check_running(cluster, {"connect": pid})
        with socket.socket() as s, suppress(OSError):
            s.settimeout(1.0)
            s.connect((HOST, cluster.ports["connect.grpc"]))
            break
        if time.monotonic() > deadline:
            raise ClusterError(f"the Spark Connect server did not listen within {timeout:.0f}s; "
                               f"see {cluster.run_dir / 'connect.log'}")
        time.sleep(0.5)
    left = max(deadline - time.monotonic(), 30.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    try:
        probe = subprocess.run([cluster.python, "-c", CONNECT_PROBE, cluster.connect_url],
                               env=env, capture_output=True, text=True, timeout=left)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"a Spark Connect session did not run a query within {left:.0f}s; "
                           f"see {cluster.run_dir / 'connect.log'}") from None
    if probe.returncode:
        tail = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ClusterError(f"a Spark Connect session failed: {tail}; "
                           f"see {cluster.run_dir / 'connect.log'}")


def stop(run_dir: Path = DEFAULT_DIR) -> None:
    """Stop every process started from ``run_dir`` (reverse start order). Safe to call when
    nothing runs."""
    run_dir = run_dir.resolve()
    for name in reversed(SERVICES):
        stop_service(run_dir, name)
    (run_dir / "cluster.json").unlink(missing_ok=True)


@contextmanager
def spark_cluster(run_dir: Path, *, python: str | None = None,
                  jars: Sequence[str | Path] = ()) -> Iterator[Cluster]:
    """``start()`` on entry, ``stop()`` on exit (also on failure)."""
    try:
        yield start(run_dir, python=python, jars=jars)
    finally:
        stop(run_dir)


@contextmanager
def _null() -> Iterator[None]:
    yield None


def hint(cluster: Cluster) -> str:
    stop_cmd = "scripts/spark-local stop" + (
        "" if cluster.run_dir == DEFAULT_DIR.resolve() else f" --dir {cluster.run_dir}")
    return (f"master:  {cluster.master_url}   (UI {cluster.master_ui})\n"
            f"connect: {cluster.connect_url}   (UI {cluster.connect_ui})\n"
            f"python:  {cluster.python}\n"
            f"logs:    {cluster.run_dir}/<master|worker-1|worker-2|connect>.log   stop: {stop_cmd}")
