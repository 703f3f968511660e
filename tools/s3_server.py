"""Start or stop a local S3 server (versitygw, POSIX backend) in a run folder, by pid.

    scripts/s3 start DIR [--port N]   # prints the endpoint as JSON (url, keys, region)
    scripts/s3 status DIR             # exit 0 running, 3 not
    scripts/s3 stop DIR
    scripts/s3 build                  # build the versitygw binary now (make test does)

``start`` runs versitygw (Versity's S3 gateway, Apache-2.0) on a free loopback port with a new
access key and secret, in the background (pid in ``DIR/versitygw.pid``, log in
``DIR/versitygw.log``), and returns once it answers HTTP. Buckets are folders of
``DIR/data``, objects plain files in them; their metadata (ETags, user metadata) lives in
extended attributes, or in ``DIR/sidecar`` where the file system has no user xattrs. Accounts
besides the root one (:func:`create_user`) are kept in ``DIR/iam``. The root secret reaches
versitygw by its environment, not its command line. ``DIR/endpoint.json`` holds the endpoint;
a ``start`` on a folder whose server runs prints it. ``stop`` sends SIGTERM to that pid (never
a name), SIGKILL after ``STOP_GRACE_S``.

Why versitygw: of the S3 servers that run here without Docker it is the one that held
``If-None-Match``/``If-Match`` conditional PUTs under races (no two winners in 700 rounds of 16
writers), starts in 0.1 s and serves about 60 MB resident. The binary is built once with the
machine's Go (``go install ...@VERSION``) into ``.cache/versitygw/bin`` (:func:`versitygw_binary`;
``make test`` builds it beside the venvs).

Standard library only (``scripts/s3`` runs it with the system python3); pyarrow and boto3 are
imported by the :class:`S3Endpoint` methods that need them. Tests use :func:`local_s3`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.go_install import go_installed  # noqa: E402
from tools.processes import alive, free_port, launch, read_pid, stop_service

if TYPE_CHECKING:
    import pyarrow.fs

ROOT = Path(__file__).resolve().parent.parent
NAME = "versitygw"
VERSION = "v1.8.0"
MODULE = "github.com/versity/versitygw/cmd/versitygw"
BIN_DIR = ROOT / ".cache" / "versitygw" / "bin"
REGION = "us-east-1"
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


class S3ServerError(RuntimeError):
    """The server could not be built, started or stopped."""


@dataclass(frozen=True)
class S3Endpoint:
    """How to reach the server: path-style addressing, plain HTTP, static keys."""

    url: str  # "http://127.0.0.1:PORT"
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION

    def spark_conf(self) -> dict[str, str]:
        """The ``spark.hadoop.fs.s3a.*`` settings that point every ``s3a://`` bucket here (the
        s3a jars must be on the classpath: ``tools/s3_jars.py``)."""
        prefix = "spark.hadoop.fs.s3a."
        return {
            prefix + "endpoint": self.url,
            prefix + "endpoint.region": self.region,
            prefix + "path.style.access": "true",
            prefix + "connection.ssl.enabled": "false",
            prefix + "access.key": self.access_key,
            prefix + "secret.key": self.secret_key,
            prefix + "aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }

    def pyarrow_fs(self) -> pyarrow.fs.S3FileSystem:
        """pyarrow's S3 file system on this server (paths are ``bucket/key``)."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(access_key=self.access_key, secret_key=self.secret_key,
                            region=self.region, endpoint_override=self.url.split("://", 1)[1],
                            scheme="http", force_virtual_addressing=False)

    def boto3_client(self) -> Any:
        """A boto3 S3 client on this server (path-style addressing; needs the ``s3`` extra)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.url, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}))

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` (an error if it exists)."""
        self.boto3_client().create_bucket(Bucket=name)


def versitygw_binary() -> Path:
    """The versitygw binary of :data:`VERSION`, built with ``go install`` into
    :data:`BIN_DIR` the first time (2-3 CPU minutes; then a check of a stamp file). Safe to
    call from several processes at once: one builds, the others wait for it."""
    return go_installed(MODULE, VERSION, BIN_DIR, NAME, go_needed="1.25",
                        error=S3ServerError)


def _has_user_xattrs(folder: Path) -> bool:
    """Whether files in ``folder`` take ``user.*`` extended attributes (versitygw keeps object
    metadata there; without them it needs a sidecar folder)."""
    probe = folder / ".xattr-probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` (any status: an unsigned request gets 403)."""
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def start(run_dir: Path, *, port: int = 0, sidecar: bool | None = None) -> S3Endpoint:
    """Start the server of ``run_dir`` unless it runs; its endpoint once it answers HTTP.

    ``sidecar``: keep object metadata in ``DIR/sidecar`` instead of extended attributes (None:
    only where the file system of ``DIR/data`` has no user xattrs). A restarted folder keeps
    its buckets and objects, under a new key."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    info = run_dir / "endpoint.json"
    if read_pid(run_dir, NAME) is not None and info.exists():
        return _load(info)
    binary = versitygw_binary()
    data = run_dir / "data"
    data.mkdir(exist_ok=True)
    if sidecar is None:
        sidecar = not _has_user_xattrs(data)
    backend = ["posix"]
    if sidecar:
        (run_dir / "sidecar").mkdir(exist_ok=True)
        backend += ["--sidecar", str(run_dir / "sidecar")]
    port = port or free_port()
    endpoint = S3Endpoint(f"http://127.0.0.1:{port}", access_key=f"ks{secrets.token_hex(6)}",
                          secret_key=secrets.token_urlsafe(24))
    # --iam-dir: accounts besides the root one (create_user), e.g. a user a bucket policy lets
    # list but not write.
    (run_dir / "iam").mkdir(exist_ok=True)
    command = [str(binary), "--access", endpoint.access_key, "--region", endpoint.region,
               "--port", f"127.0.0.1:{port}", "--quiet", "--iam-dir", str(run_dir / "iam"),
               *backend, str(data)]
    # The secret goes by the environment (versitygw's --secret), not the command line ps shows.
    env = {**os.environ, "ROOT_SECRET_ACCESS_KEY": endpoint.secret_key}
    pid = launch(run_dir, NAME, command, env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers(endpoint.url):
        if not alive(pid) or time.monotonic() > deadline:
            stop(run_dir)
            log = (run_dir / f"{NAME}.log").read_text(errors="replace")[-3000:]
            raise S3ServerError(f"versitygw did not start on 127.0.0.1:{port}:\n{log}")
        time.sleep(0.02)
    info.write_text(json.dumps({**asdict(endpoint), "pid": pid}, indent=2) + "\n")
    return endpoint


def create_user(endpoint: S3Endpoint, access_key: str, secret_key: str) -> S3Endpoint:
    """A new account of the server with the role ``user`` (it owns no bucket and reaches
    another's only as that bucket's policy allows); its endpoint."""
    done = subprocess.run(
        [str(versitygw_binary()), "admin", "--access", endpoint.access_key, "--secret",
         endpoint.secret_key, "--endpoint-url", endpoint.url, "create-user", "--access",
         access_key, "--secret", secret_key, "--role", "user"],
        capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise S3ServerError(f"versitygw admin create-user failed: {done.stderr[-2000:]}")
    return S3Endpoint(endpoint.url, access_key, secret_key, endpoint.region)


def _load(info: Path) -> S3Endpoint:
    fields = json.loads(info.read_text())
    return S3Endpoint(fields["url"], fields["access_key"], fields["secret_key"],
                      fields["region"])


def status(run_dir: Path) -> S3Endpoint | None:
    """The endpoint of the server running from ``run_dir``, or None."""
    run_dir = Path(run_dir).resolve()
    info = run_dir / "endpoint.json"
    if read_pid(run_dir, NAME) is None or not info.exists():
        return None
    return _load(info)


def stop(run_dir: Path, *, grace: float = STOP_GRACE_S) -> None:
    """Stop the server of ``run_dir`` by its pid, if it runs (``processes.stop_service``:
    SIGTERM, then SIGKILL after ``grace`` seconds). Buckets and objects stay in ``DIR/data``."""
    run_dir = Path(run_dir).resolve()
    stop_service(run_dir, NAME, grace)
    (run_dir / "endpoint.json").unlink(missing_ok=True)


@contextmanager
def local_s3(folder: Path, port: int | None = None) -> Iterator[S3Endpoint]:
    """A server in ``folder`` for the ``with`` block, stopped by pid at exit, also on failure
    (``folder/versitygw.log`` and the objects in ``folder/data`` stay)."""
    try:
        yield start(folder, port=port or 0)
    finally:
        stop(folder)


def _endpoint_json(endpoint: S3Endpoint) -> str:
    return json.dumps(asdict(endpoint), indent=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start the server of DIR, wait until it answers")
    p_start.add_argument("dir", type=Path)
    p_start.add_argument("--port", type=int, default=0, help="default: a free port")
    p_start.add_argument("--sidecar", action="store_true", default=None,
                         help="metadata in DIR/sidecar, not xattrs (default: only where the "
                              "file system has no user xattrs)")
    p_status = sub.add_parser("status", help="print the endpoint of DIR's server if it runs")
    p_status.add_argument("dir", type=Path)
    p_stop = sub.add_parser("stop", help="stop the server of DIR (by pid)")
    p_stop.add_argument("dir", type=Path)
    sub.add_parser("build", help=f"build versitygw {VERSION} into {BIN_DIR} unless built")
    args = parser.parse_args()
    try:
        if args.command == "start":
            print(_endpoint_json(start(args.dir, port=args.port, sidecar=args.sidecar)),
                  flush=True)
        elif args.command == "status":
            endpoint = status(args.dir)
            if endpoint is None:
                print(f"no S3 server runs from {args.dir}")
                return 3
            print(_endpoint_json(endpoint))
        elif args.command == "stop":
            stop(args.dir)
        else:
            print(versitygw_binary())
    except S3ServerError as exc:
        print(f"s3: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
