"""What the progress tests read: ``report_progress``'s lines in pytest's ``caplog`` and its
reporting thread."""

from __future__ import annotations

import logging
import re
import threading

import pytest

LOGGER = "airflow_provider_kafka_spark.spark.ingest"
LINE = re.compile(r"(?P<owner>[\w.-]+): (?P<read>[\d,]+) of at most (?P<size>[\d,]+) records "
                  r"read \((?P<percent>\d+)%\), (?P<rate>[\d,]+) records/s, "
                  r"(?:about \d+ (?:s|min \d+ s) left|time left unknown)")


def lines(caplog: pytest.LogCaptureFixture, owner: str) -> list[str]:
    """The progress lines of ``owner``."""
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.INFO
            and r.getMessage().startswith(f"{owner}:")]


def reporting_threads(owner: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"progress-{owner}"]
