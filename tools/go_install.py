"""``go install`` of a pinned Go tool into a cache folder, once: the tests' S3 server
(``tools/s3_server.py``) and fault proxy (``tools/fault_proxy.py``) are built this way."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path


def go_installed(module: str, version: str, bin_dir: Path, binary: str, *, go_needed: str,
                 error: type[Exception]) -> Path:
    """``bin_dir/binary``, built from ``module@version`` with ``go install`` the first time
    (then a check of the stamp file ``bin_dir/.version``). Safe from several processes at
    once: one builds, the others wait for it. ``go install`` names the file after the
    package's folder; it is renamed ``binary``.

    Raises:
        error: no ``go`` on PATH (``go_needed``: the version to install), or the build failed.
    """
    path, stamp = bin_dir / binary, bin_dir / ".version"

    def built() -> bool:
        return path.exists() and stamp.exists() and stamp.read_text().strip() == version

    if built():
        return path
    bin_dir.mkdir(parents=True, exist_ok=True)
    with open(bin_dir.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built():
            return path
        go = shutil.which("go")
        if go is None:
            raise error(f"Go is needed once to build {binary} {version} (go install "
                        f"{module}@{version}): install Go {go_needed} or newer "
                        "(https://go.dev/dl) and put it on PATH.")
        print(f"building {binary} {version} with {go} into {bin_dir} (once)", file=sys.stderr,
              flush=True)
        stamp.unlink(missing_ok=True)
        done = subprocess.run([go, "install", f"{module}@{version}"],
                              env={**os.environ, "GOBIN": str(bin_dir)},
                              capture_output=True, text=True, check=False)
        installed = bin_dir / module.rstrip("/").rsplit("/", 1)[-1]
        if done.returncode != 0 or not installed.exists():
            raise error(f"go install {module}@{version} failed ({done.returncode}): "
                        f"{(done.stdout + done.stderr).strip()[-2000:]}")
        if installed != path:
            installed.replace(path)
        stamp.write_text(version + "\n")
    return path
