"""The readers' progress reports (spark/progress.py): a reader passes its batches through
unchanged and sends its count so far to the driver's UDP socket while it reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from airflow_provider_kafka_spark.spark.progress import REPORT_EVERY_S, SplitReports, reported


def wait_for(reports: SplitReports, total: int) -> int:
    deadline = time.monotonic() + 10
    while reports.total() < total and time.monotonic() < deadline:
        time.sleep(0.01)
    return reports.total()


def test_counts_arrive_while_the_batches_are_read_and_the_batches_pass_unchanged() -> None:
    reports = SplitReports("127.0.0.1")
    try:
        batch = pa.RecordBatch.from_pydict({"v": list(range(100))})

        def slow() -> Iterator[Any]:
            for _ in range(3):
                yield batch
                time.sleep(REPORT_EVERY_S + 0.1)

        seen = reported(slow(), reports.address, "t/0/0")
        assert next(seen) is batch
        assert next(seen) is batch  # the second batch comes after REPORT_EVERY_S: sent
        assert wait_for(reports, 200) == 200  # while the split is still being read
        assert list(seen) == [batch]
        assert wait_for(reports, 300) == 300  # the last count at the end
        assert list(reported(iter([batch]), reports.address, "t/1/0")) == [batch]
        assert wait_for(reports, 400) == 400  # the latest of each split, summed
    finally:
        reports.close()


def test_an_unreachable_address_never_fails_the_read() -> None:
    batch = pa.RecordBatch.from_pydict({"v": [1]})
    assert list(reported(iter([batch, batch]), "127.0.0.1:1", "t/0/0")) == [batch, batch]
