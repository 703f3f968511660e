"""The packed executor environment of docs/cluster.md ("Getting the package onto the
executors", option 2), made by running that page's recipe as it is, so the page's commands
are the tested ones.

The page marks two ``bash`` blocks with HTML comments: ``<!-- recipe: pack -->`` (run here,
line for line, with ``bash -euo pipefail`` in an empty folder, in the driver's environment as
if activated: ``VIRTUAL_ENV`` and its ``bin/`` first on ``PATH``; ``WHEEL`` is the package's
wheel) and ``<!-- recipe: submit -->`` (its lines before ``spark-submit`` run the same way in
the same folder; :func:`submit_conf` turns the ``spark-submit`` line's ``--archives`` and
``--conf`` options into the settings of a test job submitted from that folder).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tools.source_venv import forget_pyspark_builds

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster.md"
ARCHIVE = "executor-env.tar.gz"  # what the pack block writes
LEFT_OUT = {"apache-airflow", "pyspark"}
"""Requirements of the package the executors do without: Airflow (spark/, sinks/ and offsets/
never import it) and pyspark (Spark puts its own ``pyspark.zip`` and py4j on the Python
workers' ``PYTHONPATH``)."""


def recipe_block(name: str, doc: Path = DOC) -> str:
    """The ``bash`` block right after ``<!-- recipe: NAME -->`` in ``doc``."""
    text = doc.read_text()
    found = re.search(rf"<!-- recipe: {re.escape(name)} -->\s*```bash\n(.*?)```", text, re.S)
    assert found, f"{doc} has no ```bash block after <!-- recipe: {name} -->"
    return found.group(1)


def executor_requirements(wheel: Path) -> list[str]:
    """The wheel's own requirements (``Requires-Dist`` without an extra) but :data:`LEFT_OUT`,
    as written in its metadata: what the executors' environment must hold beside the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    requirements = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                    if line.startswith("Requires-Dist:") and ";" not in line]
    return [r for r in requirements if re.split(r"[\[<>=!~ ]", r, maxsplit=1)[0] not in LEFT_OUT]


@dataclass(frozen=True)
class PackedEnv:
    """The recipe's outcome: run ``spark-submit`` in ``folder`` with ``conf``."""

    folder: Path             # the recipe's folder: the archive, and ./environment for the driver
    conf: dict[str, str]     # the settings of the page's spark-submit line
    seconds: float           # how long the pack block took


def pack(wheel: Path, folder: Path, driver_python: str) -> PackedEnv:
    """Run the page's pack block for ``wheel`` in the new folder ``folder``, in this
    interpreter's environment (the driver's), then the submit block's lines before
    ``spark-submit``; what the ``spark-submit`` line sets (:func:`submit_conf`)."""
    for tool in ("uv", "uvx"):
        assert shutil.which(tool, path=_path()), (
            f"docs/cluster.md's recipe needs {tool}, from the uv package (the dev extra): "
            f"not found in {sys.prefix}/bin nor on PATH; run `make setup`")
    folder.mkdir(parents=True, exist_ok=False)
    began = time.monotonic()
    try:
        _run(recipe_block("pack"), folder, wheel)
        seconds = time.monotonic() - began
    finally:
        forget_pyspark_builds(shutil.which("uv", path=_path()))  # the executors' PySpark build
    archive = folder / ARCHIVE
    assert archive.is_file(), f"the pack recipe wrote no {ARCHIVE} in {folder}"
    lines = recipe_block("submit").replace("\\\n", " ").splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith("spark-submit")]
    _run("\n".join(lines[:at]), folder, wheel)
    return PackedEnv(folder, submit_conf(lines[at], archive, driver_python), seconds)


def _run(script: str, folder: Path, wheel: Path) -> None:
    """``script`` with ``bash -euo pipefail`` in ``folder``, in this interpreter's environment
    as if activated, ``WHEEL`` set."""
    env = {**os.environ, "WHEEL": str(wheel.resolve()), "VIRTUAL_ENV": sys.prefix,
           "PATH": _path()}
    env.pop("PYTHONHOME", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (f"docs/cluster.md's recipe failed ({done.returncode}) at:\n"
                                  f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _path() -> str:
    """``PATH`` with this environment's ``bin/`` first, as activating it does."""
    return f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def submit_conf(line: str, archive: Path, driver_python: str) -> dict[str, str]:
    """The settings the page's ``spark-submit`` ``line`` gives, for a job submitted with the
    packed ``archive``: ``--archives X#F`` -> ``spark.archives`` (this ``archive``, fragment
    ``F``), each ``--conf k=v``; ``spark.pyspark.driver.python=python`` (the activated
    driver environment's ``python``) -> ``driver_python``."""
    words = shlex.split(line)
    assert words[0] == "spark-submit", words
    conf: dict[str, str] = {}
    for option, value in zip(words, words[1:], strict=False):
        if option == "--archives":
            name, fragment = value.split("#")
            assert name == ARCHIVE, f"--archives names {name}, the pack block writes {ARCHIVE}"
            conf["spark.archives"] = f"{archive}#{fragment}"
        elif option == "--conf":
            key, setting = value.split("=", 1)
            conf[key] = setting
    assert conf.get("spark.pyspark.driver.python") == "python", conf
    conf["spark.pyspark.driver.python"] = driver_python
    return conf
