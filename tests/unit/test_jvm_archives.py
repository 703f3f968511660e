"""tools/jvm_archives.py: an archive job that does not end in time is stopped with everything it
started, and the suite goes on without the archive (the set-up does not fail for it)."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from tools import jvm_archives
from tools.processes import alive


def test_an_archive_job_past_its_time_is_stopped_whole_and_gives_no_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A "python" that answers where PySpark is (the real one), but whose Spark job hangs in a
    # child of its own, as a Spark driver's JVM is PySpark's child.
    child_pid = tmp_path / "child.pid"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/bash\n"
        f'if [ "$#" -eq 3 ]; then sleep 600 & echo $! > {child_pid}; wait; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(jvm_archives, "ARCHIVES", tmp_path / "archives")

    began = time.monotonic()
    assert jvm_archives.make_archive(python, timeout_s=2.0) is None
    assert time.monotonic() - began < 30
    assert not alive(int(child_pid.read_text()))
    assert list((tmp_path / "archives").iterdir()) == []  # no partial archive left
