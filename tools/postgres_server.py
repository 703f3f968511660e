"""Start or stop a local PostgreSQL server (Debian's binaries) in a run folder, by pid.

    scripts/postgres start DIR [--port N] [--database NAME]   # prints the connection as JSON
    scripts/postgres status DIR                                # exit 0 running, 3 not
    scripts/postgres stop DIR [--discard]                      # --discard: delete the cluster

``start`` makes a cluster with ``initdb`` in ``DIR/data`` (superuser ``postgres``, ``trust``
authentication: it listens on 127.0.0.1 only and is for tests), launches ``postgres`` on a free
loopback port (the unix socket in the data folder, never /var/run/postgresql) in the background
(pid in ``DIR/postgres.pid``, log in ``DIR/postgres.log``), waits until it accepts connections
and creates the database (default ``kafka_spark``). ``DIR/connection.json`` then holds host,
port, user, database, the JDBC URL and the SQLAlchemy URL. A ``start`` on a folder whose server
runs prints its connection; on a stopped folder it starts the existing cluster again.
``stop`` sends the postmaster (its pid, never a name) SIGINT, PostgreSQL's "fast" shutdown
(SIGTERM is its "smart" one, which waits for every client to leave, such as a Spark JVM's
connection pool), and SIGKILL to it and its children after ``STOP_GRACE_S``.

As root: PostgreSQL refuses to run as root, so ``initdb`` and ``postgres`` run as an
unprivileged user through ``setpriv`` (which execs, so the pid is the postmaster's):
``$POSTGRES_RUN_AS``, else ``postgres`` (Debian's package creates it), else ``nobody``. The
data folder is theirs; when that user cannot reach ``DIR`` (say under pytest's 0700
``/tmp/pytest-of-root``), the cluster lives in a new folder under the system temp folder and
``DIR/data`` is a symlink to it.

Binaries: ``$POSTGRES_BINDIR``, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian's
``postgresql`` package), else ``initdb`` on ``PATH``. Standard library only;
``scripts/postgres`` calls :func:`main`, tests use :func:`local_postgres`.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.processes import alive, end_group, free_port, launch, read_pid

NAME = "postgres"
SUPERUSER = "postgres"
DATABASE = "kafka_spark"
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 20.0
SOCKET_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux
SETTINGS = {
    # A throwaway test cluster: no durability work, small memory.
    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
    "shared_buffers": "32MB", "max_connections": "50",
}


class PostgresError(RuntimeError):
    """The server could not be set up, started or stopped."""


@dataclass(frozen=True)
class Connection:
    """How to reach the server: no password (``trust`` on 127.0.0.1)."""

    host: str
    port: int
    user: str
    database: str
    pid: int

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def sqlalchemy_url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@{self.host}:{self.port}/{self.database}"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "jdbc_url": self.jdbc_url,
                           "sqlalchemy_url": self.sqlalchemy_url}, indent=2)


def bindir() -> Path:
    """The folder of ``initdb`` and ``postgres``."""
    if os.environ.get("POSTGRES_BINDIR"):
        return Path(os.environ["POSTGRES_BINDIR"])
    debian = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
    if debian:
        return max(debian, key=lambda p: [int(x) for x in p.parent.name.split(".")
                                          if x.isdigit()])
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PostgresError("PostgreSQL's server binaries (initdb, postgres) were not found: "
                        "apt-get install postgresql, or set POSTGRES_BINDIR.")


def _run_as() -> pwd.struct_passwd | None:
    """The user the server runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in filter(None, (os.environ.get("POSTGRES_RUN_AS"), "postgres", "nobody")):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            if name == os.environ.get("POSTGRES_RUN_AS"):
                raise PostgresError(f"POSTGRES_RUN_AS={name}: no such user") from None
    raise PostgresError("running as root, and neither a 'postgres' nor a 'nobody' user exists "
                        "to run PostgreSQL as (it refuses root); set POSTGRES_RUN_AS.")


def _as_user(user: pwd.struct_passwd | None) -> list[str]:
    if user is None:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise PostgresError("running as root needs util-linux's setpriv to start PostgreSQL "
                            "as an unprivileged user")
    return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]


def _reachable(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may pass through every folder from / down to ``path``."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for folder in (path, *path.parents):
        st = folder.stat()
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _data_dir(run_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """The cluster's folder (created, empty or not): ``DIR/data`` or what it links to."""
    link = run_dir / "data"
    if link.exists():
        return link.resolve()
    if user is not None and not _reachable(run_dir, user):
        link.symlink_to(tempfile.mkdtemp(prefix="postgres-"))
    else:
        link.mkdir(mode=0o700)
    data = link.resolve()
    if user is not None:
        os.chown(data, user.pw_uid, user.pw_gid)
    data.chmod(0o700)
    return data


def _check(command: list[str], what: str, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise PostgresError(f"{what} failed ({done.returncode}): "
                            f"{(done.stdout + done.stderr).strip()[-2000:]}")
    return done


def _ready(data: Path, pid: int) -> bool:
    """postmaster.pid names ``pid`` and says ``ready`` (accepting connections)."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"


def start(run_dir: Path, *, port: int = 0, database: str = DATABASE) -> Connection:
    """Start the server of ``run_dir`` (a new cluster the first time) unless it runs; its
    connection once it accepts connections and ``database`` exists."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    info = run_dir / "connection.json"
    if read_pid(run_dir, NAME) is not None and info.exists():
        return _load(info)
    bins, user = bindir(), _run_as()
    data = _data_dir(run_dir, user)
    if not (data / "PG_VERSION").exists():
        _check([*_as_user(user), str(bins / "initdb"), "-D", str(data), "-U", SUPERUSER,
                "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"],
               "initdb", cwd=data)
    port = port or free_port()
    socket_dir = str(data) if len(f"{data}/.s.PGSQL.{port}") <= SOCKET_PATH_MAX else ""
    command = [*_as_user(user), str(bins / "postgres"), "-D", str(data), "-p", str(port),
               "-h", "127.0.0.1", "-k", socket_dir,
               *(arg for key, value in SETTINGS.items() for arg in ("-c", f"{key}={value}"))]
    pid = launch(run_dir, NAME, command, os.environ)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(data, pid):
        if not alive(pid) or time.monotonic() > deadline:
            stop(run_dir)
            log = (run_dir / f"{NAME}.log").read_text(errors="replace")[-3000:]
            raise PostgresError(f"PostgreSQL did not start on 127.0.0.1:{port}:\n{log}")
        time.sleep(0.05)
    connection = Connection("127.0.0.1", port, SUPERUSER, database, pid)
    try:
        exists = _check([str(bins / "psql"), "-h", connection.host, "-p", str(port), "-U",
                         SUPERUSER, "-d", "postgres", "-tAc",
                         f"SELECT 1 FROM pg_database WHERE datname = '{database}'"], "psql")
        if exists.stdout.strip() != "1":
            _check([str(bins / "createdb"), "-h", connection.host, "-p", str(port), "-U",
                    SUPERUSER, database], "createdb")
    except BaseException:
        stop(run_dir)
        raise
    info.write_text(connection.to_json() + "\n")
    return connection


def _load(info: Path) -> Connection:
    fields = json.loads(info.read_text())
    return Connection(fields["host"], fields["port"], fields["user"], fields["database"],
                      fields["pid"])


def status(run_dir: Path) -> Connection | None:
    """The connection of the server running from ``run_dir``, or None."""
    run_dir = Path(run_dir).resolve()
    info = run_dir / "connection.json"
    if read_pid(run_dir, NAME) is None or not info.exists():
        return None
    return _load(info)


def stop(run_dir: Path, *, discard: bool = False, grace: float = STOP_GRACE_S) -> None:
    """Stop the server of ``run_dir`` by its pid, if it runs: SIGINT (fast shutdown), then
    SIGKILL to it and its children after ``grace`` seconds. ``discard`` also deletes the
    cluster (and the folder ``DIR/data`` links to)."""
    run_dir = Path(run_dir).resolve()
    pid = read_pid(run_dir, NAME)
    if pid is not None:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        end_group(pid, grace=0)  # SIGKILL to whatever is left (nothing after a clean stop)
    (run_dir / f"{NAME}.pid").unlink(missing_ok=True)
    (run_dir / "connection.json").unlink(missing_ok=True)
    if discard:
        link = run_dir / "data"
        if link.is_symlink():
            shutil.rmtree(link.resolve(), ignore_errors=True)
            link.unlink()
        else:
            shutil.rmtree(link, ignore_errors=True)


@contextmanager
def local_postgres(run_dir: Path, *, database: str = DATABASE) -> Iterator[Connection]:
    """A new server in ``run_dir`` for the ``with`` block: stopped by pid and its cluster
    deleted at exit, also on failure (``DIR/postgres.log`` stays)."""
    try:
        yield start(run_dir, database=database)
    finally:
        stop(run_dir, discard=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start the server of DIR, wait until it answers")
    p_start.add_argument("dir", type=Path)
    p_start.add_argument("--port", type=int, default=0, help="default: a free port")
    p_start.add_argument("--database", default=DATABASE)
    p_status = sub.add_parser("status", help="print the connection of DIR's server if it runs")
    p_status.add_argument("dir", type=Path)
    p_stop = sub.add_parser("stop", help="stop the server of DIR (by pid)")
    p_stop.add_argument("dir", type=Path)
    p_stop.add_argument("--discard", action="store_true", help="also delete the cluster")
    args = parser.parse_args()
    try:
        if args.command == "start":
            print(start(args.dir, port=args.port, database=args.database).to_json(), flush=True)
        elif args.command == "status":
            connection = status(args.dir)
            if connection is None:
                print(f"no PostgreSQL server runs from {args.dir}")
                return 3
            print(connection.to_json())
        else:
            stop(args.dir, discard=args.discard)
    except PostgresError as exc:
        print(f"postgres: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
