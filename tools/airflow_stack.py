"""A real, local Airflow 3 for this provider: one implementation for ``scripts/airflow-local``
(the user-facing launcher), ``make airflow`` and the ``tests/deployed`` fixture.

``start()`` brings up, on loopback, in a run folder (default ``.cache/airflow-local/``):

* a Kafka broker (``scripts/kafka-broker`` into ``DIR/kafka``) unless a bootstrap address is
  given (``KAFKA_BOOTSTRAP_SERVERS`` for the script);
* the metadata DB, ``db``: ``"postgres"`` is a PostgreSQL server of its own in
  ``DIR/postgres`` (``tools/postgres_server``: Debian's binaries, ``initdb`` the first time,
  loopback, by pid) with the database ``airflow``, reached through psycopg2 (and asyncpg,
  which Airflow derives for its async engine), as in production and in docker-compose.yml;
  ``"sqlite"`` is one file, ``DIR/home/airflow.db``, with one writer at a time: ``airflow
  backfill create`` is refused on it and parallel runs can fail (the summary ``start`` prints
  says so). Without ``db``: ``default_db()``, PostgreSQL wherever its server's binaries are;
* ``airflow db migrate`` (``DIR/home`` is the ``AIRFLOW_HOME``), then ``airflow api-server``,
  ``scheduler``, ``dag-processor`` and ``triggerer`` as separate processes (LocalExecutor;
  Airflow 3 accepts SQLite with it, the same pairing ``airflow standalone`` uses), each in its
  own process group, pid in ``DIR/<name>.pid``, log in ``DIR/<name>.log``;
* the ``kafka_default`` connection as ``AIRFLOW_CONN_KAFKA_DEFAULT`` in the services'
  environment, this repo's ``dags/`` as the DAGs folder, and the topic ``demo.events`` with
  some events;
* ``KAFKA_SPARK_OUTPUT_ROOT=DIR/output``: the example DAGs' default output folders go there
  (``DIR/output/kafka_hourly_ingest/<hour>``, ...) instead of ``/tmp``;
* login: the simple auth manager with one user ``admin`` whose password is written to
  ``DIR/home/simple_auth_manager_passwords.json`` (random once, then kept).

With ``extra_dags=FOLDER`` (``scripts/airflow-local start --dags FOLDER``) the DAG files in
that folder are a second DAG bundle, ``extra``, beside the example DAGs, looked at every 2 s (a
user's own DAGs; tests write theirs there). ``restart(stack, name)`` (``scripts/airflow-local
restart NAME``) stops one service by its pid file (SIGTERM, as ``stop`` does), starts it again
with the environment it had and returns once the stack is healthy with it. ``kill(stack,
name)`` SIGKILLs one service instead (its process group, by pid: a crash) and
``relaunch(stack, name)`` starts it again, as ``restart`` does.

It returns once ``/api/v2/monitor/health`` reports the scheduler, triggerer and dag-processor
healthy and ``/api/v2/dags`` lists every example DAG. ``stop()`` ends every process it
started (SIGTERM to each process group, then SIGKILL), then the PostgreSQL server (its data
kept for the next ``start``, unless ``discard``), then the broker if it started one.
``Stack.cli(...)`` runs an ``airflow`` command (``backfill create``, ``dags list``...) as the
services see the installation: same home, metadata DB and connections.

Standard library only at import time (the demo topic is seeded with confluent-kafka, imported
when needed), so the constants below can be imported anywhere, e.g. by the compose-file test.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tools import postgres_server
from tools.processes import alive, end_group, launch, read_pid, stop_service

ROOT = Path(__file__).resolve().parent.parent
DAGS_FOLDER = ROOT / "dags"
BROKER_SCRIPT = ROOT / "scripts" / "kafka-broker"
DEFAULT_DIR = ROOT / ".cache" / "airflow-local"
DEFAULT_PORT = 8080  # the API server (UI); the log servers take the next two ports
HOST = "127.0.0.1"
# The metadata DBs start() can set up; without a choice, default_db(): PostgreSQL where its
# binaries are, as production Airflow runs.
DATABASES = ("sqlite", "postgres")
# What start's summary says of a stack on SQLite: one writer at a time, so a write that waits
# too long for the lock fails (`airflow backfill create` refused with an SQLAlchemy error from
# its INSERT INTO dag_run, seen on an idle machine; under load a task that did its work
# marked failed).
SQLITE_NOTE = ("SQLite takes one writer at a time: `airflow backfill create` fails on it and "
               "parallel runs can fail; backfills want PostgreSQL (--db postgres)")
# What start says when there is no choice but SQLite.
NO_POSTGRES_NOTE = ("PostgreSQL's server binaries were not found (apt-get install postgresql, "
                    "or set POSTGRES_BINDIR): the metadata DB is SQLite")
POSTGRES_DIR = "postgres"  # DIR/postgres: the server's pid, log, data and connection.json
POSTGRES_DATABASE = "airflow"

# The Airflow processes, in start order; each is ``airflow <name>``.
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
# The components /api/v2/monitor/health reports on, besides the metadata DB.
HEALTH_COMPONENTS = ("scheduler", "triggerer", "dag_processor")
EXAMPLE_DAGS = ("kafka_adhoc", "kafka_backfill_by_time", "kafka_daily_rollup",
                "kafka_hourly_ingest", "kafka_hourly_on_data", "kafka_hourly_partitioned",
                "kafka_hourly_report", "kafka_incremental_committed",
                "kafka_to_kafka_exactly_once", "kafka_window_when_complete")
USERNAME = "admin"
PASSWORDS_FILE = "simple_auth_manager_passwords.json"
# LocalExecutor: at most this many task processes at once (a deferred sensor holds none).
PARALLELISM = 4
# Where the example DAGs write by default (their output_root Params read it when parsed).
OUTPUT_ROOT_ENV = "KAFKA_SPARK_OUTPUT_ROOT"
DEMO_TOPIC = "demo.events"
DEMO_EVENTS = 3_000
DEMO_HOURS = 3
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 20.0  # the scheduler ends its running tasks first
EXTRA_BUNDLE = "extra"  # the bundle of start(extra_dags=...)
EXTRA_BUNDLE_REFRESH_S = 2  # how often the dag-processor looks for new files in it
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


class StackError(RuntimeError):
    """The local Airflow could not be started or did not become ready."""


@dataclass(frozen=True)
class Stack:
    """A running local Airflow: where it answers, how to log in, which broker and which
    metadata DB (``database``: its SQLAlchemy URL, no password in it) it uses, and what its
    services' environment adds (``extra_env``, the ``extra_dags`` bundle's folder)."""

    run_dir: Path
    url: str
    username: str
    password: str
    bootstrap: str
    broker_started: bool
    database: str
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_dags: str | None = None

    def token(self) -> str:
        """A JWT for the REST API (``POST /auth/token``)."""
        body = json.dumps({"username": self.username, "password": self.password}).encode()
        request = urllib.request.Request(f"{self.url}/auth/token", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.load(response)["access_token"])

    @property
    def output_root(self) -> Path:
        """Where the example DAGs write by default (``KAFKA_SPARK_OUTPUT_ROOT``)."""
        return output_root(self.run_dir)

    def cli(self, *args: str, timeout: float | None = 300.0,
            capture: bool = True) -> subprocess.CompletedProcess[str]:
        """``airflow <args>`` with the services' environment (same ``AIRFLOW_HOME``, metadata
        DB and connections), e.g. ``stack.cli("backfill", "create", "--dag-id", ...)``;
        ``scripts/airflow-local airflow <args>`` runs it with ``capture=False`` (the output goes
        to this process's). Returns the finished process (with ``capture``, its output as
        text); does not check its exit code."""
        port = urllib.parse.urlsplit(self.url).port
        assert port is not None, self.url
        return subprocess.run([str(airflow_bin()), *args],
                              env=service_env(self.run_dir, port, self.bootstrap, self.database),
                              cwd=self.run_dir, capture_output=capture, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def output_root(run_dir: Path) -> Path:
    """The example DAGs' default output root of the stack in ``run_dir``."""
    return run_dir / "output"


def airflow_bin() -> Path:
    """The ``airflow`` executable of this interpreter's environment, else of ``.venv``."""
    for candidate in (Path(sys.executable).with_name("airflow"), ROOT / ".venv" / "bin" / "airflow"):
        if candidate.exists():
            return candidate
    raise StackError("no `airflow` executable next to this Python or in .venv; run `make setup`.")


def _secrets(run_dir: Path) -> dict[str, str]:
    """Secrets shared by all services (JWT signing key, API secret key, admin password):
    generated once per run folder, then kept so a restart keeps logins and tokens valid."""
    path = run_dir / "secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    values = {"jwt_secret": secrets.token_urlsafe(32), "secret_key": secrets.token_urlsafe(32),
              "password": secrets.token_urlsafe(12)}
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return values


def sqlite_url(run_dir: Path) -> str:
    """The SQLite metadata DB of the stack in ``run_dir``.

    SQLite has one writer at a time: the services and a CLI command (``airflow backfill
    create`` writes all its runs in one transaction) wait up to 60 s for the lock, not 5."""
    return f"sqlite:///{run_dir / 'home' / 'airflow.db'}?timeout=60"


def stack_settings(run_dir: Path, port: int, bootstrap: str,
                   database: str | None = None) -> dict[str, str]:
    """The environment variables the launcher sets for every Airflow service; ``database``
    is the metadata DB's SQLAlchemy URL (default: ``sqlite_url(run_dir)``).
    docker-compose.yml sets the same names (tests/deployed/test_compose_file.py checks it)."""
    home = run_dir / "home"
    keys = _secrets(run_dir)
    url = f"http://{HOST}:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / PASSWORDS_FILE),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database or sqlite_url(run_dir),
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__SECRET_KEY": keys["secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
        OUTPUT_ROOT_ENV: str(output_root(run_dir)),
        "PYSPARK_PYTHON": str(airflow_bin().with_name("python")),
        "SPARK_LOCAL_IP": HOST,
        # The scheduler's and triggerer's log servers (defaults 8793/8794) next to the API port,
        # so two stacks (yours and the tests') do not collide.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port + 1),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(port + 2),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # The dag-processor looks for new or changed DAG files every 30 s.
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
    }


def bundles_env(extra_dags: Path) -> dict[str, str]:
    """The setting that adds the DAG files in ``extra_dags`` as the bundle ``extra`` (looked at
    every ``EXTRA_BUNDLE_REFRESH_S``) beside Airflow's default one, the DAGs folder."""
    return {"AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
        {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
        {"name": EXTRA_BUNDLE, "classpath": LOCAL_BUNDLE,
         "kwargs": {"path": str(extra_dags), "refresh_interval": EXTRA_BUNDLE_REFRESH_S}}])}


def stack_env(stack: Stack) -> dict[str, str]:
    """The environment of ``stack``'s services, as ``start`` built it."""
    port = urllib.parse.urlsplit(stack.url).port
    assert port is not None, stack.url
    extra = bundles_env(Path(stack.extra_dags)) if stack.extra_dags else {}
    return {**service_env(stack.run_dir, port, stack.bootstrap, stack.database),
            **stack.extra_env, **extra}


def service_env(run_dir: Path, port: int, bootstrap: str,
                database: str | None = None) -> dict[str, str]:
    """The environment of every Airflow service: this process's, minus any Airflow settings
    it carries (a test session points Airflow elsewhere), plus ``stack_settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
    env.update(stack_settings(run_dir, port, bootstrap, database))
    return env


def db_kind(database: str) -> str:
    """``"postgres"`` or ``"sqlite"``: the kind of DB a SQLAlchemy URL names."""
    return "postgres" if database.startswith("postgresql") else "sqlite"


def default_db() -> str:
    """The metadata DB ``start`` sets up when none is asked for: ``"postgres"`` where
    PostgreSQL's server binaries are (``tools/postgres_server.bindir``: ``$POSTGRES_BINDIR``,
    Debian's ``/usr/lib/postgresql/<version>/bin``, ``initdb`` on ``PATH``), else ``"sqlite"``
    (``NO_POSTGRES_NOTE``)."""
    try:
        bins = postgres_server.bindir()
    except postgres_server.PostgresError:
        return "sqlite"
    return "postgres" if (bins / "initdb").exists() and (bins / "postgres").exists() else "sqlite"


def _start_db(run_dir: Path, db: str) -> str:
    """Set up the metadata DB ``db`` of the stack in ``run_dir``; its SQLAlchemy URL."""
    if db == "sqlite":
        return sqlite_url(run_dir)
    # Airflow's sync engine uses psycopg2 (the URL says so), its async one asyncpg: both in
    # the services' environment (the project's dev dependencies).
    python = str(airflow_bin().with_name("python"))
    found = subprocess.run([python, "-c", "import psycopg2, asyncpg"], capture_output=True,
                           text=True, check=False)
    if found.returncode:
        raise StackError(f"a PostgreSQL metadata DB needs psycopg2 and asyncpg in {python}'s "
                         f"environment ({found.stderr.strip().splitlines()[-1]}); "
                         f"run `make setup`.")
    try:
        server = postgres_server.start(run_dir / POSTGRES_DIR, database=POSTGRES_DATABASE)
    except postgres_server.PostgresError as exc:
        raise StackError(f"the metadata DB's PostgreSQL: {exc}") from None
    return server.sqlalchemy_url


def _get_json(url: str, token: str | None = None) -> object:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return json.load(r)


def _start_broker(run_dir: Path) -> str:
    from tools.processes import free_port

    out = subprocess.run([sys.executable, str(BROKER_SCRIPT), "start", "--dir",
                          str(run_dir / "kafka"), "--port", str(free_port())],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]


def seed_demo_topic(bootstrap: str) -> int:
    """Create ``demo.events`` (3 partitions) with ``DEMO_EVENTS`` JSON events spread over the
    past ``DEMO_HOURS`` hours, unless the topic exists already; the number produced."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"bootstrap.servers": bootstrap}
    admin = AdminClient(config)
    if DEMO_TOPIC in admin.list_topics(timeout=30).topics:
        return 0
    admin.create_topics([NewTopic(DEMO_TOPIC, num_partitions=3, replication_factor=1)]
                        )[DEMO_TOPIC].result(30)
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    now_ms = int(time.time() * 1000)
    first_ms = now_ms - DEMO_HOURS * 3600 * 1000
    step = DEMO_HOURS * 3600 * 1000 // DEMO_EVENTS
    for i in range(DEMO_EVENTS):
        user = f"user-{i % 50}"
        event = {"id": i, "user": user, "action": ("view", "click", "buy")[i % 3]}
        producer.produce(DEMO_TOPIC, key=user.encode(), value=json.dumps(event).encode(),
                         timestamp=first_ms + i * step)
        producer.poll(0)
    if producer.flush(60):
        raise StackError(f"demo events for {DEMO_TOPIC} still in flight after 60 s")
    return DEMO_EVENTS


def _wait_ready(stack: Stack, pids: Mapping[str, int], dags: Sequence[str],
                heartbeat_since: tuple[str, datetime] | None = None) -> None:
    """Return once every component is healthy and ``dags`` are listed; with
    ``heartbeat_since=(component, moment)``, once that component's latest heartbeat is not
    before ``moment`` too (a service started then)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "the API server did not answer"
    token: str | None = None
    while time.monotonic() < deadline:
        for name, pid in pids.items():
            if not alive(pid):
                raise StackError(f"airflow {name} exited; see {stack.run_dir / (name + '.log')}")
        try:
            health = _get_json(f"{stack.url}/api/v2/monitor/health")
            assert isinstance(health, dict)
            unhealthy = [c for c in HEALTH_COMPONENTS
                         if (health.get(c) or {}).get("status") != "healthy"]
            if heartbeat_since and heartbeat_since[0] in HEALTH_COMPONENTS:
                component, moment = heartbeat_since
                beat = (health.get(component) or {}).get(f"latest_{component}_heartbeat")
                if not beat or datetime.fromisoformat(beat) < moment:
                    unhealthy.append(f"{component} (no heartbeat since its restart)")
            if unhealthy:
                last = f"not healthy yet: {', '.join(unhealthy)}"
            else:
                token = token or stack.token()
                listing = _get_json(f"{stack.url}/api/v2/dags?limit=100", token)
                assert isinstance(listing, dict)
                listed = {d["dag_id"] for d in listing["dags"]}
                missing = sorted(set(dags) - listed)
                if not missing:
                    return
                errors = _get_json(f"{stack.url}/api/v2/importErrors", token)
                assert isinstance(errors, dict)
                if errors.get("import_errors"):
                    raise StackError("DAG import errors: " + "; ".join(
                        f"{e['filename']}: {e['stack_trace'].strip().splitlines()[-1]}"
                        for e in errors["import_errors"]))
                last = f"DAGs not parsed yet: {', '.join(missing)}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = f"the API server did not answer ({exc})"
        time.sleep(1.0)
    raise StackError(f"Airflow was not ready within {READY_TIMEOUT_S:.0f}s: {last}; "
                     f"see the logs in {stack.run_dir}")


def start(run_dir: Path = DEFAULT_DIR, *, port: int = DEFAULT_PORT,
          bootstrap: str | None = None, extra_env: Mapping[str, str] | None = None,
          dags: Sequence[str] = EXAMPLE_DAGS, db: str | None = None,
          extra_dags: Path | None = None) -> Stack:
    """Start everything (see the module docstring) and return once it is ready: ``dags``
    parsed. With ``bootstrap`` the given broker is used and left alone; else one is started in
    DIR/kafka. ``db`` is the metadata DB, ``"postgres"`` (a server in DIR/postgres) or
    ``"sqlite"``; None: ``default_db()`` (a running stack: whichever it has). ``extra_env`` is
    added to the services' environment (e.g. JVM options for Spark, or
    ``AIRFLOW__CORE__DAGS_FOLDER`` for other DAGs than the examples).
    ``extra_dags``: a folder (created) whose DAG files are a second bundle, ``extra``, beside
    the example DAGs. A stack already running in ``run_dir`` is returned as it is (an error
    when it has another metadata DB or ``extra_dags`` folder)."""
    if db is not None and db not in DATABASES:
        raise StackError(f"db={db!r}: the metadata DB is one of {', '.join(DATABASES)}")
    if extra_dags is not None and extra_dags.exists() and not extra_dags.is_dir():
        raise StackError(f"the DAGs folder {extra_dags} is a file; pass the folder it is in.")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    state_file = run_dir / "stack.json"
    if all(read_pid(run_dir, name) for name in SERVICES) and state_file.exists():
        running = running_stack(run_dir)
        if db is not None and db_kind(running.database) != db:
            raise StackError(f"the Airflow in {run_dir} runs on {db_kind(running.database)}; "
                             f"run `scripts/airflow-local stop --dir {run_dir}` first.")
        wanted = None if extra_dags is None else str(extra_dags.resolve())
        if wanted is not None and wanted != running.extra_dags:
            raise StackError(f"the Airflow in {run_dir} runs with the DAGs of "
                             f"{running.extra_dags or 'dags/ only'}, not {wanted}; run "
                             f"`scripts/airflow-local stop --dir {run_dir}` first.")
        return running
    if any(read_pid(run_dir, name) for name in SERVICES):
        raise StackError(f"some Airflow services still run from {run_dir}; "
                         f"run `scripts/airflow-local stop --dir {run_dir}` first.")
    broker_started = bootstrap is None
    try:
        if bootstrap is None:
            bootstrap = _start_broker(run_dir)
        database = _start_db(run_dir, db or default_db())
        if extra_dags is not None:
            extra_dags = extra_dags.resolve()
            extra_dags.mkdir(parents=True, exist_ok=True)
        stack = Stack(run_dir=run_dir, url=f"http://{HOST}:{port}", username=USERNAME,
                      password=_secrets(run_dir)["password"], bootstrap=bootstrap,
                      broker_started=broker_started, database=database,
                      extra_env=dict(extra_env or {}),
                      extra_dags=None if extra_dags is None else str(extra_dags))
        state_file.write_text(json.dumps({**asdict(stack), "run_dir": str(run_dir)}))
        home = run_dir / "home"
        home.mkdir(exist_ok=True)
        (home / PASSWORDS_FILE).write_text(json.dumps({USERNAME: stack.password}) + "\n")
        env = stack_env(stack)
        airflow = str(airflow_bin())
        with open(run_dir / "db-migrate.log", "wb") as log:
            migrated = subprocess.run([airflow, "db", "migrate"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=300)
        if migrated.returncode:
            raise StackError(f"airflow db migrate failed; see {run_dir / 'db-migrate.log'}")
        seed_demo_topic(bootstrap)
        pids = {name: launch(run_dir, name, [airflow, name], env) for name in SERVICES}
        _wait_ready(stack, pids, dags)
        return stack
    except BaseException:
        stop(run_dir)
        raise


def running_stack(run_dir: Path = DEFAULT_DIR) -> Stack:
    """The stack ``start`` started in ``run_dir`` (read from ``DIR/stack.json``)."""
    run_dir = run_dir.resolve()
    state_file = run_dir / "stack.json"
    if not state_file.exists():
        raise StackError(f"no Airflow was started in {run_dir}; run "
                         f"`scripts/airflow-local start --dir {run_dir}` first.")
    state = {"database": sqlite_url(run_dir), **json.loads(state_file.read_text())}
    return Stack(**{**state, "run_dir": Path(state["run_dir"])})


def restart(stack: Stack, name: str) -> int:
    """Stop the service ``name`` of ``stack`` as ``stop`` does (SIGTERM to its process group,
    by its pid file; SIGKILL after ``STOP_GRACE_S``), start it again (:func:`relaunch`) with
    the environment it had (``/proc/<pid>/environ``; a service that had exited gets the one
    ``start`` gave it) and return its new pid once the stack is healthy: every service runs,
    the API server answers and, for a scheduler, triggerer or dag-processor, the restarted
    one has heartbeaten (until then the health endpoint reports the old one's last
    heartbeat)."""
    if name not in SERVICES:
        raise StackError(f"{name!r} is not one of the services {', '.join(SERVICES)}")
    others = {n: read_pid(stack.run_dir, n) for n in SERVICES if n != name}
    gone = [n for n, p in others.items() if p is None]
    if gone:
        raise StackError(f"airflow {', '.join(gone)} does not run from {stack.run_dir}; run "
                         f"`scripts/airflow-local stop --dir {stack.run_dir}`, then `start`.")
    running = read_pid(stack.run_dir, name)
    env = None if running is None else _environment(running)
    stop_service(stack.run_dir, name, grace=STOP_GRACE_S)
    began = datetime.now(UTC)
    pid = relaunch(stack, name, env)
    _wait_ready(stack, {**{n: p for n, p in others.items() if p is not None}, name: pid},
                dags=(), heartbeat_since=(name.replace("-", "_"), began))
    return pid


def _environment(pid: int) -> dict[str, str]:
    """The environment process ``pid`` was started with (``/proc/<pid>/environ``)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {key.decode(): value.decode() for key, value in pairs}


def kill(stack: Stack, name: str) -> int:
    """SIGKILL the service ``name`` of ``stack`` now, as a crash would (its process group and
    every descendant, by pid; nothing by name); the pid it had. Start it again with
    :func:`relaunch`."""
    if name not in SERVICES:
        raise StackError(f"{name!r} is not one of the services {', '.join(SERVICES)}")
    pid = read_pid(stack.run_dir, name)
    if pid is None:
        raise StackError(f"airflow {name} does not run from {stack.run_dir}")
    end_group(pid, grace=0)
    return pid


def relaunch(stack: Stack, name: str, env: Mapping[str, str] | None = None) -> int:
    """Start the service ``name`` of ``stack`` again (after :func:`kill`), with ``env``
    (default: the environment ``start`` gave it); its new pid. Returns at once; see
    :func:`restart` for a stop, start and wait until healthy."""
    if name not in SERVICES:
        raise StackError(f"{name!r} is not one of the services {', '.join(SERVICES)}")
    if read_pid(stack.run_dir, name) is not None:
        raise StackError(f"airflow {name} still runs from {stack.run_dir}")
    return launch(stack.run_dir, name, [str(airflow_bin()), name],
                  stack_env(stack) if env is None else env)


def stop(run_dir: Path = DEFAULT_DIR, *, discard: bool = False) -> None:
    """Stop every service started from ``run_dir``: the triggerer, dag-processor and scheduler
    at once (each SIGTERMed, then SIGKILLed after ``STOP_GRACE_S``; one after the other took
    the sum of their shutdowns), then the API server, which the scheduler's last tasks report
    to; then its PostgreSQL server if it has one (``discard``: also delete that DB), then the
    broker if the stack started it. Safe to call when nothing runs."""
    run_dir = run_dir.resolve()
    first = [name for name in reversed(SERVICES) if name != "api-server"]
    with ThreadPoolExecutor(len(first)) as pool:
        list(pool.map(lambda name: stop_service(run_dir, name, grace=STOP_GRACE_S), first))
    stop_service(run_dir, "api-server", grace=STOP_GRACE_S)
    if (run_dir / POSTGRES_DIR).exists():
        postgres_server.stop(run_dir / POSTGRES_DIR, discard=discard)
    if (run_dir / "kafka" / "broker.pid").exists():
        subprocess.run([sys.executable, str(BROKER_SCRIPT), "stop", "--dir",
                        str(run_dir / "kafka")], check=True)
    (run_dir / "stack.json").unlink(missing_ok=True)


@contextmanager
def airflow_stack(run_dir: Path, *, port: int, bootstrap: str | None = None,
                  extra_env: Mapping[str, str] | None = None,
                  dags: Sequence[str] = EXAMPLE_DAGS, db: str | None = None,
                  extra_dags: Path | None = None) -> Iterator[Stack]:
    """``start()`` on entry, ``stop()`` on exit (also on failure), a PostgreSQL metadata
    DB deleted with its server (a throwaway stack: a test's)."""
    try:
        yield start(run_dir, port=port, bootstrap=bootstrap, extra_env=extra_env, dags=dags,
                    db=db, extra_dags=extra_dags)
    finally:
        stop(run_dir, discard=True)


def login_hint(stack: Stack) -> str:
    """What ``scripts/airflow-local start`` prints once ``stack`` is ready: the UI and login,
    the broker, the metadata DB (on SQLite, ``SQLITE_NOTE`` on the next line, after
    ``NO_POSTGRES_NOTE`` when PostgreSQL is missing), the output and DAG folders, and how to
    restart or stop it."""
    sqlite = db_kind(stack.database) == "sqlite"
    return (f"Airflow UI: {stack.url}  (login: {stack.username} / {stack.password}; the password "
            f"is in {stack.run_dir / 'home' / PASSWORDS_FILE})\n"
            f"Kafka: bootstrap.servers={stack.bootstrap} (connection kafka_default), topic "
            f"{DEMO_TOPIC}\nmetadata DB: {stack.database}\n"
            + (f"{NO_POSTGRES_NOTE}\n" if sqlite and default_db() == "sqlite" else "")
            + (f"{SQLITE_NOTE}\n" if sqlite else "")
            + f"output of the example DAGs: {stack.output_root}/<dag_id>/...\n"
            + (f"your DAGs: {stack.extra_dags} (the bundle {EXTRA_BUNDLE!r}, looked at every "
               f"{EXTRA_BUNDLE_REFRESH_S} s)\n" if stack.extra_dags else "")
            + f"logs: {stack.run_dir}/<service>.log   restart one: scripts/airflow-local "
            f"restart <service>   stop: scripts/airflow-local stop"
            + ("" if stack.run_dir == DEFAULT_DIR.resolve() else f" --dir {stack.run_dir}"))
