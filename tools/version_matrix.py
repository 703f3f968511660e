"""The version matrix: the package's wheel, installed into clean venvs of each Python, PySpark
and Airflow it claims, runs :mod:`tools.wheel_smoke` against a real broker.

    .venv/bin/python tools/version_matrix.py                 # every cell (what `make matrix` runs)
    .venv/bin/python tools/version_matrix.py --cells ci      # the cells `make test` runs
    .venv/bin/python tools/version_matrix.py --cells py3.13-pyspark4.0.5-airflow3.3.0

Each cell is a venv under ``.cache/matrix/<cell>/`` made with ``uv`` (one download cache for all
cells) from the Python of that version this machine has (``pythonX.Y`` on ``PATH``, or
pyenv's), holding only the wheel (``--wheel``, default: the newest ``dist/*manylinux*.whl``
that ``make dist`` built) with ``pyspark==`` and ``apache-airflow==`` pinned. It is removed
after its smoke (about 0.6 GB each, 12 GB for all cells) unless ``--keep``; a kept venv whose
wheel and pins did not change is reused (``tests/wheel`` keeps its cell). Installing the cell
and running its smoke happen with a ``PATH``
that holds no ``cargo``, ``cmake`` or C compiler (:func:`toolless_path`): the wheel must need
none. A broker is started for the run unless ``--bootstrap-servers`` names one.

Writes ``.cache/matrix/results.json`` (per cell: versions, outcome, seconds, the smoke's report
or its error) and prints a table; exits 1 when a cell failed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools/ is sys.path[0], not the repo root
    sys.path.insert(0, str(ROOT))

from tools.local_broker import local_broker  # noqa: E402
from tools.source_venv import forget_pyspark_builds  # noqa: E402
from tools.wheel_smoke import REPORT  # noqa: E402

MATRIX_DIR = ROOT / ".cache" / "matrix"
SMOKE = ROOT / "tools" / "wheel_smoke.py"
DAGS = ROOT / "dags"
PYTHONS = ("3.11", "3.12", "3.13")
# The newest release of each PySpark line the package claims (pyproject: pyspark>=4.0,<5) and
# the first and newest Airflow it claims (apache-airflow>=3.3,<4: 3.1 and 3.2 lack airflow.sdk
# APIs it uses, see docs/versions.md).
PYSPARKS = ("4.0.5", "4.1.4", "4.3.0")
AIRFLOWS = ("3.3.0", "3.3.2")
# Names that must not be on the cells' PATH: Rust, cmake, C/C++ compilers and linkers, make.
BUILD_TOOL = re.compile(r"^(cargo.*|rust.*|maturin|zig|cmake|ctest|cpack|make|gmake|cc|c\+\+|cpp"
                        r"|c89|c99|gcc.*|g\+\+.*|clang.*|tcc|ld|ld\..*|as|x86_64-linux-gnu-.*)$")


@dataclass(frozen=True)
class Cell:
    """One combination of versions."""

    python: str
    pyspark: str
    airflow: str

    @property
    def name(self) -> str:
        return f"py{self.python}-pyspark{self.pyspark}-airflow{self.airflow}"


ALL = tuple(Cell(p, s, a) for p in PYTHONS for s in PYSPARKS for a in AIRFLOWS) + (
    # the releases between the ones above, once each
    Cell("3.12", "4.2.1", "3.3.1"),
)
# What `make test` runs (tests/wheel): the newest Python with the oldest Airflow, away from the
# development venv (.venv: 3.11, 4.3, 3.3.2), on the PySpark .venv-tables installed already
# (uv's cache has it: no second 400 MB download and build on a fresh machine).
CI = (Cell("3.13", "4.1.4", "3.3.0"),)


def select(spec: str) -> tuple[Cell, ...]:
    """``all``, ``ci`` or comma-separated cell names."""
    if spec in ("all", "ci"):
        return ALL if spec == "all" else CI
    by_name = {cell.name: cell for cell in ALL + CI}
    unknown = [name for name in spec.split(",") if name not in by_name]
    if unknown:
        raise SystemExit(f"unknown cells {unknown}; known: {sorted(by_name)}")
    return tuple(by_name[name] for name in spec.split(","))


def find_python(version: str) -> Path:
    """An interpreter of ``version`` (``3.12``): ``python3.12`` on PATH that runs, or pyenv's."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"),
                         reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(map(int, version.split(".")))):
            return Path(candidate)
    raise SystemExit(f"no Python {version} on this machine (looked for python{version} on PATH "
                     f"and in {root}/versions)")


def newest_wheel() -> Path:
    wheels = sorted((ROOT / "dist").glob("*manylinux*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise SystemExit("no manylinux wheel in dist/: run `make dist` first")
    return wheels[-1]


def toolless_path(folder: Path, dirs: Iterable[str] | None = None) -> str:
    """A ``PATH`` of one folder of links to every command of ``dirs`` (default: this ``PATH``)
    except the build tools (:data:`BUILD_TOOL`), what lives under ``~/.cargo`` and venvs'
    ``bin`` folders."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    cargo = str(Path.home() / ".cargo")
    for directory in dirs if dirs is not None else os.environ.get("PATH", "").split(os.pathsep):
        if (not directory or directory.startswith(cargo) or not Path(directory).is_dir()
                or (Path(directory).parent / "pyvenv.cfg").exists()):  # a venv's bin
            continue
        for command in Path(directory).iterdir():
            link = folder / command.name
            if (BUILD_TOOL.match(command.name) or link.exists() or link.is_symlink()
                    or not os.access(command, os.X_OK) or command.is_dir()):
                continue
            link.symlink_to(command.resolve())
    return str(folder)


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        raise SystemExit("uv is missing: it comes with the dev extra (make setup)")
    return found


def install(cell: Cell, wheel: Path, env: dict[str, str]) -> Path:
    """The cell's venv with ``wheel`` and the pins; reused when both are unchanged."""
    venv = MATRIX_DIR / cell.name / "venv"
    stamp = venv / ".installed"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    wanted = json.dumps({"wheel": digest, **asdict(cell)}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    run([uv(), "venv", "-q", "--python", str(find_python(cell.python)), str(venv)], env)
    run([uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel),
         f"pyspark=={cell.pyspark}", f"apache-airflow=={cell.airflow}"], env)
    forget_pyspark_builds(uv())
    stamp.write_text(wanted)
    return venv


def run(command: Sequence[str], env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess:
    done = subprocess.run(list(command), env=env, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise CellFailed(f"`{' '.join(command)}` exited {done.returncode}:\n"
                         f"{done.stdout[-3000:]}{done.stderr[-6000:]}")
    return done


class CellFailed(Exception):
    pass


def run_cell(cell: Cell, wheel: Path, bootstrap: str, *, keep: bool = True) -> dict[str, Any]:
    """Install and smoke one cell; its result (``ok``, ``seconds``, ``report`` or ``error``).
    Without ``keep`` the cell's folder is removed afterwards."""
    try:
        return _run_cell(cell, wheel, bootstrap)
    finally:
        if not keep:
            shutil.rmtree(MATRIX_DIR / cell.name, ignore_errors=True)


def _run_cell(cell: Cell, wheel: Path, bootstrap: str) -> dict[str, Any]:
    started = time.monotonic()
    folder = MATRIX_DIR / cell.name
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VIRTUAL_ENV", "PYTHON", "PYSPARK", "SPARK_HOME", "CONDA"))}
    env["PATH"] = toolless_path(folder / "bin")
    env["UV_PYTHON_DOWNLOADS"] = "never"
    try:
        venv = install(cell, wheel, env)
        installed = time.monotonic() - started
        with tempfile.TemporaryDirectory(prefix="smoke-", dir=folder) as work:
            airflow_home = Path(work) / "airflow"
            smoke_env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
                         "AIRFLOW_HOME": str(airflow_home), "SPARK_LOCAL_IP": "127.0.0.1",
                         "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                         "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
            done = run([str(venv / "bin" / "python"), str(SMOKE), "--bootstrap-servers",
                        bootstrap, "--dags", str(DAGS), "--work", work], smoke_env, cwd=work,
                       timeout=600)
        reports = [line[len(REPORT):] for line in done.stdout.splitlines()
                   if line.startswith(REPORT)]
        if len(reports) != 1:
            raise CellFailed(f"the smoke printed {len(reports)} reports:\n{done.stdout[-3000:]}")
        report = json.loads(reports[0])
        return {**asdict(cell), "name": cell.name, "ok": True, "install_s": round(installed, 1),
                "seconds": round(time.monotonic() - started, 1), "report": report}
    except (CellFailed, subprocess.TimeoutExpired) as failure:
        return {**asdict(cell), "name": cell.name, "ok": False,
                "seconds": round(time.monotonic() - started, 1), "error": str(failure)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", default="all", help="all, ci, or comma-separated cell names")
    parser.add_argument("--wheel", type=Path, help="default: the newest dist/*manylinux*.whl")
    parser.add_argument("--bootstrap-servers", help="default: start a local broker")
    parser.add_argument("--keep", action="store_true",
                        help="keep each cell's venv (reused by the next run)")
    args = parser.parse_args(argv)
    cells, wheel = select(args.cells), (args.wheel or newest_wheel()).resolve()
    results: list[dict[str, Any]] = []
    MATRIX_DIR.mkdir(parents=True, exist_ok=True)
    with local_broker(args.bootstrap_servers) as bootstrap:
        for cell in cells:
            result = run_cell(cell, wheel, bootstrap, keep=args.keep)
            results.append(result)
            outcome = "ok" if result["ok"] else "FAILED"
            print(f"{cell.name:36} {outcome:7} {result['seconds']:7.1f} s", flush=True)
            if not result["ok"]:
                print(result["error"], file=sys.stderr)
            (MATRIX_DIR / "results.json").write_text(json.dumps(  # after each cell
                {"wheel": wheel.name, "cells": results}, indent=2) + "\n")
    failed = [r["name"] for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} of {len(results)} cells passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
