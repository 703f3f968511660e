"""Fill a virtualenv with the package's dependencies and this source tree, without building it.

    .venv/bin/python tools/source_venv.py dev                      # .venv's dependencies
    .venv/bin/python tools/source_venv.py --native dist/<wheel>    # .venv's native module
    .venv-tables/bin/python tools/source_venv.py tables            # .venv-tables

Run with the venv's own python, this installs into it (``make setup`` and ``make
tables-setup`` run it; the native module's build, ``make dist``, runs beside the first):

* the package's runtime dependencies and those of its extras (``dev`` for ``.venv``; ``dev``
  and ``tables`` for ``.venv-tables``; extras of the package itself, like
  ``[connect,openlineage]``, expanded), read from pyproject.toml, with ``uv`` (installed into
  the venv first: it resolves and installs Airflow's hundred-odd packages several times faster
  than pip). For ``tables`` every ``pyspark`` requirement is pinned to ``==TABLES_PYSPARK``
  (extras kept): the tier needs a PySpark for which Apache Iceberg and Delta Lake publish Spark
  runtimes (Spark 4.1), older than the newest that ``.venv`` has;
* the package itself from this source tree, without a build: a ``.pth`` file puts the repo
  root on ``sys.path`` and a small ``.dist-info`` carries its name, version, project URLs and
  entry points, so Python, Airflow (the provider, its documentation link, the plugin) and
  Spark's Python workers find it as with an editable install;
* with ``--native WHEEL``: the native module ``_native.abi3.so`` copied out of the manylinux
  wheel ``make dist`` built into the source tree, so the tests run the very module users
  install.

Standard library only (a fresh venv has nothing but pip).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
# The newest PySpark of the Spark line that Iceberg (iceberg-spark-runtime-4.1) and Delta
# (delta-spark_4.1) are built for; tools/tables/pom.xml names the same line.
TABLES_PYSPARK = "4.1.4"
# The venvs this fills: their extras, and the pyspark pin (None: what pyproject allows).
VENVS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "dev": (("dev",), None),
    "tables": (("dev", "tables"), TABLES_PYSPARK),
}
NATIVE = "airflow_provider_kafka_spark/_native.abi3.so"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?")


def _name(requirement: str) -> tuple[str, list[str]]:
    """``"pyspark[connect]>=4.0,<5"`` -> ``("pyspark", ["connect"])`` (normalized name)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"cannot read the requirement {requirement!r} in {PYPROJECT}")
    extras = [e.strip() for e in (match.group(2) or "[]")[1:-1].split(",") if e.strip()]
    return re.sub(r"[-_.]+", "-", match.group(1)).lower(), extras


def requirements(project: dict, extras: tuple[str, ...], pyspark: str | None) -> list[str]:
    """The project's dependencies plus those of ``extras`` (self-references expanded), with
    ``pyspark`` pinned to ``==pyspark`` when one is given."""
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
        if name == "pyspark" and pyspark:
            requirement = f"pyspark{'[' + ','.join(wanted) + ']' if wanted else ''}=={pyspark}"
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
        # Project-URL as in a built wheel: Airflow reads the Documentation one (providers page).
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
            f"Project-URL: {label}, {url}\n" for label, url in project.get("urls", {}).items()),
        "INSTALLER": "tools/source_venv.py\n",
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


def copy_native(wheel: Path) -> Path:
    """Copy the native module out of ``wheel`` into the source tree; its path."""
    target = ROOT / NATIVE
    with zipfile.ZipFile(wheel) as archive, archive.open(NATIVE) as source:
        partial = target.with_suffix(".so.partial")
        with partial.open("wb") as out:
            shutil.copyfileobj(source, out)
    partial.chmod(0o755)
    partial.replace(target)  # atomic: a running process keeps the module it mapped
    return target


def forget_pyspark_builds(uv: str | Path) -> None:
    """Remove ``uv``'s cached builds of PySpark (``uv cache clean pyspark``, which waits for
    other uv processes using the cache).

    PySpark is published as an sdist only, so every install builds it. This machine's route to
    PyPI answers without caching headers, so uv never reuses a build: each install left another
    ~1.9 GB (the unpacked sdist and the built wheel) in ``~/.cache/uv`` until the disk was full.
    Nothing is lost by removing them; other packages' cached wheels stay."""
    subprocess.run([str(uv), "cache", "clean", "-q", "pyspark"], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("venv", nargs="?", choices=sorted(VENVS),
                        help="install the dependencies and link the source tree")
    parser.add_argument("--native", type=Path, metavar="WHEEL",
                        help="copy the native module out of this wheel into the source tree")
    args = parser.parse_args()
    if args.venv is None and args.native is None:
        parser.error("name a venv (dev, tables) or --native WHEEL")
    if args.venv and sys.prefix == sys.base_prefix:
        print("run this with the python of the virtualenv to fill (.venv/bin/python)",
              file=sys.stderr)
        return 2
    if args.venv:
        project = tomllib.loads(PYPROJECT.read_text())["project"]
        extras, pyspark = VENVS[args.venv]
        pip = [sys.executable, "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-U", "pip", "uv"], check=True)
        uv = Path(sys.executable).parent / "uv"
        subprocess.run([str(uv), "pip", "install", "-q", "--python", sys.executable,
                        *requirements(project, extras, pyspark)], check=True)
        forget_pyspark_builds(uv)
        link_source_tree(project, Path(sysconfig.get_paths()["purelib"]))
    if args.native:
        print(f"native module from {args.native.name}: {copy_native(args.native)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
