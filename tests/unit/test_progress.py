"""``report_progress`` without Spark: the lines of what is left when Spark cannot be asked
(Spark Connect's task counts, nothing at all), and no thread without an interval. (With a
real Spark write: tests/integration/test_progress.py.)"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.spark.progress import report_progress
from tests.support.progress import LINE, LOGGER, lines, reporting_threads


class FakeStage:
    def __init__(self, stage_id: int, done: int, tasks: int) -> None:
        self.stage_id, self.num_completed_tasks, self.num_tasks = stage_id, done, tasks


class FakeConnectSession:
    """What ``report_progress`` uses of a Spark Connect session: its progress handlers."""

    def __init__(self) -> None:
        self.handlers: list[Any] = []

    def registerProgressHandler(self, handler: Any) -> None:  # noqa: N802
        self.handlers.append(handler)

    def removeProgressHandler(self, handler: Any) -> None:  # noqa: N802
        self.handlers.remove(handler)


RANGES = OffsetRanges((PartitionRange("t", 0, 0, 1000), PartitionRange("t", 1, 0, 1000)))


def test_on_spark_connect_the_finished_tasks_share_of_the_slice(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    session = FakeConnectSession()
    with report_progress(session, RANGES, owner="connect", every=0.2):  # type: ignore[arg-type]
        (handler,) = session.handlers
        handler([FakeStage(4, 1, 4)], 3, "op", False)
        time.sleep(0.3)
        handler([FakeStage(4, 3, 4)], 1, "op", False)
        time.sleep(0.25)
    assert session.handlers == []
    found = lines(caplog, "connect")
    reads = [match["read"] for match in map(LINE.fullmatch, found) if match]
    assert len(reads) == len(found) and reads[0] == "500" and reads[-1] == "1,500", found
    assert set(reads) == {"500", "1,500"}
    assert found[0].startswith("connect: 500 of at most 2,000 records read (25%), ")


def test_without_anything_to_ask_the_line_says_how_long_it_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    with report_progress(object(), RANGES, owner="blind", every=0.2):  # type: ignore[arg-type]
        time.sleep(0.3)
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.getMessage() for r in records if r.levelno == logging.INFO] == [
        "blind: still writing after 0 s, of at most 2,000 records; progress unknown"]
    assert records[0].levelno == logging.DEBUG
    assert records[0].getMessage().startswith("blind: no progress from Spark (")


def test_no_interval_no_thread() -> None:
    for every in (None, 0):
        with report_progress(object(), RANGES, owner="off", every=every):  # type: ignore[arg-type]
            assert not reporting_threads("off")
