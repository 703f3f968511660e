"""Install the `tables` test tier's virtualenv (``.venv-tables``), without building the package.

    .venv-tables/bin/python tools/tables_venv.py      # what `make tables-setup` runs

The tier (tests/tables: Iceberg and Delta sinks) needs a PySpark for which Apache Iceberg and
Delta Lake publish Spark runtimes: ``PYSPARK`` below (Spark 4.1), older than the newest PySpark
that ``.venv`` has. Run with the new venv's own python, this installs into it:

* the package's runtime dependencies, its ``dev`` extra (extras of the package itself, like
  ``[connect,openlineage]``, expanded) and its ``tables`` extra (pyiceberg, deltalake), all read
  from pyproject.toml, with every ``pyspark`` requirement pinned to ``==PYSPARK`` (extras kept);
* the package itself from this source tree, without a build: a ``.pth`` file puts the repo
  root on ``sys.path`` (so ``airflow_provider_kafka_spark`` imports with the
  ``_native.abi3.so`` that ``make setup`` built there for the same Python), and a small
  ``.dist-info`` carries its name, version and entry points, so Airflow finds the provider as
  in ``.venv``'s editable install.

Standard library only (a fresh venv has nothing but pip).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
# The newest PySpark of the Spark line that Iceberg (iceberg-spark-runtime-4.1) and Delta
# (delta-spark_4.1) are built for; tools/tables/pom.xml names the same line.
PYSPARK = "4.1.4"
EXTRAS = ("dev", "tables")
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?")


def _name(requirement: str) -> tuple[str, list[str]]:
    """``"pyspark[connect]>=4.0,<5"`` -> ``("pyspark", ["connect"])`` (normalized name)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"cannot read the requirement {requirement!r} in {PYPROJECT}")
    extras = [e.strip() for e in (match.group(2) or "[]")[1:-1].split(",") if e.strip()]
    return re.sub(r"[-_.]+", "-", match.group(1)).lower(), extras


def requirements(project: dict, extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """The project's dependencies plus those of ``extras`` (self-references expanded), with
    ``pyspark`` pinned to :data:`PYSPARK`."""
    own = _name(project["name"])[0]
    optional = project.get("optional-dependencies", {})
    found: list[str] = []
    seen_extras: set[str] = set()

    def add(requirement: str) -> None:
        name, wanted = _name(requirement)
        if name == own:
            for extra in wanted:
                add_extra(extra)
            return
        if name == "pyspark":
            requirement = f"pyspark{'[' + ','.join(wanted) + ']' if wanted else ''}=={PYSPARK}"
        if requirement not in found:
            found.append(requirement)

    def add_extra(extra: str) -> None:
        if extra in seen_extras:
            return
        if extra not in optional:
            raise ValueError(f"{PYPROJECT} has no optional-dependencies extra {extra!r}")
        seen_extras.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    for requirement in project.get("dependencies", []):
        add(requirement)
    for extra in extras:
        add_extra(extra)
    return found


def link_source_tree(project: dict, site_packages: Path) -> None:
    """Make the package importable from ROOT, and known to importlib.metadata, in the venv of
    ``site_packages``: a ``.pth`` file and a minimal ``.dist-info`` (no build, no copy)."""
    name, version = project["name"], project["version"]
    module = name.replace("-", "_")
    (site_packages / f"{module}.pth").write_text(f"{ROOT}\n")
    info = site_packages / f"{module}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "INSTALLER": "tools/tables_venv.py\n",
        "direct_url.json": json.dumps({"dir_info": {"editable": True},
                                       "url": ROOT.as_uri()}) + "\n",
        "entry_points.txt": "".join(
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items()) + "\n"
            for group, points in project.get("entry-points", {}).items()),
    }
    for file, text in files.items():
        (info / file).write_text(text)
    listed = [f"{module}.pth,,", *(f"{info.name}/{file},," for file in files),
              f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(listed) + "\n")


def main() -> int:
    if sys.prefix == sys.base_prefix:
        print("run this with the python of the virtualenv to fill (.venv-tables/bin/python)",
              file=sys.stderr)
        return 2
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-U", "pip"], check=True)
    subprocess.run([*pip, *requirements(project)], check=True)
    link_source_tree(project, Path(sysconfig.get_paths()["purelib"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
