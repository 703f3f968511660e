"""tools/test_lanes.py: every test file of the suite runs in exactly one job, under the venv
its tier needs, and the lanes take the jobs in the order that ends them soonest."""

from __future__ import annotations

from pathlib import Path

from tools.test_lanes import JOBS, ROOT, TABLES_BIN, VENV_BIN, Job, lanes_end, queue


def _selects(args: tuple[str, ...], test_file: Path) -> bool:
    """Whether a pytest run with ``args`` (from the repository's root) collects ``test_file``
    (its testpaths, its --ignore= options, and .venv's conftest leaving tests/tables out)."""
    paths = [ROOT / a for a in args[1:] if not a.startswith("-")] or [ROOT / "tests"]
    ignored = [ROOT / a.split("=", 1)[1] for a in args[1:] if a.startswith("--ignore=")]
    if args[0].startswith(str(VENV_BIN)):
        ignored.append(ROOT / "tests" / "tables")
    return (any(test_file.is_relative_to(p) for p in paths)
            and not any(test_file.is_relative_to(p) for p in ignored))


def test_every_test_file_runs_in_exactly_one_job_under_its_tiers_venv() -> None:
    test_files = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(test_files) > 100
    for test_file in test_files:
        runs = [(job.name, step[0]) for job in JOBS for step in job.steps
                if step[0].endswith("/pytest") and _selects(step, test_file)]
        assert len(runs) == 1, (test_file, runs)
        tables = test_file.is_relative_to(ROOT / "tests" / "tables")
        assert runs[0][1] == str((TABLES_BIN if tables else VENV_BIN) / "pytest"), test_file


def test_the_lanes_take_the_longest_job_first_when_that_ends_them_soonest() -> None:
    jobs = [Job("a", (), 1.0), Job("b", (), 5.0), Job("c", (), 3.0), Job("d", (), 5.0)]
    assert [job.name for job in queue(jobs)] == ["b", "d", "c", "a"]


def test_the_queue_ends_the_lanes_sooner_than_the_longest_job_first() -> None:
    # The longest first: lane 1 runs a then d (5 + 3), lane 2 b, c, e (4 + 3 + 3).
    jobs = [Job("a", (), 5.0), Job("b", (), 4.0), Job("c", (), 3.0), Job("d", (), 3.0),
            Job("e", (), 3.0)]
    assert lanes_end(jobs) == 10.0
    order = queue(jobs)
    # Lane 1 runs a then b (5 + 4), lane 2 c, d, e (3 + 3 + 3).
    assert [job.name for job in order] == ["a", "c", "d", "b", "e"]
    assert lanes_end(order) == 9.0


def test_the_suites_queue_ends_no_later_than_the_longest_job_first() -> None:
    longest_first = sorted(JOBS, key=lambda job: -job.minutes)
    assert lanes_end(queue(JOBS)) <= lanes_end(longest_first)
