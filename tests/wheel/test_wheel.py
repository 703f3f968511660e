"""The wheel ``make dist`` built, as a user gets it: a manylinux wheel that needs only the C
library, installed into clean venvs with no build tool on ``PATH`` (the ``ci`` cells of
``tools/version_matrix.py``; ``make matrix`` runs them all), where it parses the example DAGs,
resolves, reads, and ingests into a file sink and Kafka (at least once, exactly once), each
read back exactly, against this session's broker."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.version_matrix import BUILD_TOOL, CI, Cell, newest_wheel, run_cell, toolless_path

ROOT = Path(__file__).resolve().parents[2]
# What a manylinux policy lets a wheel's extension link against without carrying it.
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
                    "librt.so.1", "ld-linux-x86-64.so.2"}


@pytest.fixture(scope="module")
def wheel() -> Path:
    return newest_wheel()


def test_the_wheel_is_manylinux_and_links_only_the_c_library(wheel: Path) -> None:
    assert re.fullmatch(r"airflow_provider_kafka_spark-[\w.]+-cp311-abi3-"
                        r"manylinux2014_x86_64\.manylinux_2_17_x86_64\.whl", wheel.name), wheel.name
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                           capture_output=True, text=True, check=True).stdout
    assert '"manylinux_2_17_x86_64"' in shown, shown
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        native = [n for n in names if n.startswith("airflow_provider_kafka_spark/_native")
                  and n.endswith(".so")]
        assert native == ["airflow_provider_kafka_spark/_native.abi3.so"], names
        assert not [n for n in names if ".libs/" in n], "auditwheel grafted libraries in"
        needed = _needed(archive.read(native[0]))
    assert needed <= SYSTEM_LIBRARIES, needed - SYSTEM_LIBRARIES


def _needed(elf: bytes) -> set[str]:
    """The DT_NEEDED entries of an ELF shared object (pyelftools comes with auditwheel)."""
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    sections = ELFFile(io.BytesIO(elf)).iter_sections()
    return {tag.needed for section in sections if isinstance(section, DynamicSection)
            for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}


def test_make_dists_sdist_step_prints_no_error(tmp_path: Path) -> None:
    """The sdist step of ``make dist``, as the Makefile has it (only the output folder is this
    test's): it builds the sdist and says nothing a newcomer reads as a failure."""
    recipe = subprocess.run(["make", "--dry-run", "--always-make", "dist"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    [line] = [line for line in recipe.splitlines() if " sdist " in line]
    command = shlex.split(line)
    command[command.index("--out") + 1] = str(tmp_path)

    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                           check=False)

    assert built.returncode == 0, built.stderr
    assert [p.name for p in tmp_path.iterdir()] == [
        f"airflow_provider_kafka_spark-{package_version()}.tar.gz"]
    assert "error" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr


def package_version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_cells_path_has_no_build_tool(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("cargo", "cmake", "gcc", "gcc-12", "cc", "x86_64-linux-gnu-gcc-12", "ld",
                 "java", "bash", "python3"):
        (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    folder = Path(toolless_path(tmp_path / "bin", [str(tools)]))
    assert sorted(p.name for p in folder.iterdir()) == ["bash", "java", "python3"]
    assert BUILD_TOOL.match("rustc") and BUILD_TOOL.match("clang-16") and BUILD_TOOL.match("c++")


def _example_dag_ids() -> list[str]:
    ids = re.findall(r'dag_id="([\w.-]+)"', "".join(
        p.read_text() for p in sorted((ROOT / "dags").glob("*.py"))))
    return sorted(ids)


@pytest.mark.integration
@pytest.mark.parametrize("cell", CI, ids=lambda cell: cell.name)
def test_the_wheel_runs_in_a_clean_venv(cell: Cell, wheel: Path, kafka_bootstrap: str) -> None:
    result = run_cell(cell, wheel, kafka_bootstrap)

    assert result["ok"], result.get("error")
    report = result["report"]
    assert report["python"].rsplit(".", 1)[0] == cell.python
    assert (report["pyspark"], report["apache-airflow"]) == (cell.pyspark, cell.airflow)
    assert report["package"].startswith(str(ROOT / ".cache" / "matrix" / cell.name / "venv"))
    assert report["native"] == "_native.abi3.so"
    assert report["dags"] == _example_dag_ids()
    assert report["ranges"] == [[0, 0, 60], [1, 0, 60]]
    assert report["read"] == 120
    assert report["ingested"] == {
        "files": {"records": 120, "read_back": 120},
        "kafka_at_least_once": {"records": 120, "written": 120, "read_back": 120},
        "kafka_exactly_once": {"records": 120, "written": 120, "read_back": 120}}
