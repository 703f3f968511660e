"""``report_progress`` around a real Spark write of a real slice: lines every ``every`` seconds
whose counts only grow, a split at a time, up to the slice's size; none for a short write;
the thread and the job tag gone on exit, also after an exception. (Without Spark:
tests/unit/test_progress.py.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.spark.progress import report_progress
from airflow_provider_kafka_spark.spark.read.reader import read_kafka
from tests.support.progress import LINE, LOGGER, lines, reporting_threads
from tools.kafka_records import produce


def slowly(seconds: float) -> Any:
    """A ``mapInArrow`` function that waits ``seconds`` per partition, then passes it on."""
    def apply(batches: Iterator[Any]) -> Iterator[Any]:
        time.sleep(seconds)
        yield from batches
    return apply


@pytest.mark.integration
@pytest.mark.spark
class TestWithSpark:
    @pytest.fixture
    def slice_1200(self, new_topic: Any, kafka_config: dict[str, Any]) -> OffsetRanges:
        """1,200 records in two partitions of a new topic, as ranges."""
        topic = new_topic(partitions=2)
        ms = int(time.time() * 1000)
        produce(kafka_config, topic, [(i % 2, None, b"v%d" % i, ms) for i in range(1200)])
        return OffsetRanges((PartitionRange(topic, 0, 0, 600), PartitionRange(topic, 1, 0, 600)))

    def test_a_long_write_logs_growing_counts_a_split_at_a_time(
            self, spark: Any, kafka_config: dict[str, Any], slice_1200: OffsetRanges,
            tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, LOGGER)
        # 6 splits of 200 records, each task 0.8 s or more on local[2]: 3 s of writing or more.
        records = read_kafka(spark, slice_1200, kafka_config, max_records_per_split=200)
        began = time.monotonic()
        with report_progress(spark, slice_1200, owner="load_orders", every=0.5):
            records.mapInArrow(slowly(0.8), records.schema).write.parquet(str(tmp_path / "o"))
        took = time.monotonic() - began

        found = lines(caplog, "load_orders")
        assert len(found) >= 3, (took, found)
        counts = []
        for line in found:
            match = LINE.fullmatch(line)
            assert match, line  # the Spark UI is disabled in the shared session: no UI part
            read = int(match["read"].replace(",", ""))
            assert match["size"] == "1,200"
            assert int(match["percent"]) == read * 100 // 1200
            counts.append(read)
        # Spark counts a split's records when its task ends: whole splits of 200, growing.
        assert counts == sorted(counts)
        assert all(c % 200 == 0 and 0 <= c <= 1200 for c in counts), counts
        assert counts[-1] > 0, found
        assert not reporting_threads("load_orders")
        assert not any(t.startswith("kafka-spark-progress-")
                       for t in spark.sparkContext.getJobTags())

    def test_the_readers_counts_move_while_their_task_runs(
            self, spark: Any, kafka_config: dict[str, Any], new_topic: Any, tmp_path: Path,
            caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, LOGGER)
        topic = new_topic(partitions=1)
        ms = int(time.time() * 1000)
        produce(kafka_config, topic, [(0, None, b"v%d" % i, ms) for i in range(60_000)])
        ranges = OffsetRanges((PartitionRange(topic, 0, 0, 60_000),))
        released = tmp_path / "released"  # when the task let its last batch go

        def per_batch(batches: Iterator[Any]) -> Iterator[Any]:  # 1 s a batch downstream
            for batch in batches:
                time.sleep(1.0)
                yield batch
            released.write_text(repr(time.time()))

        with report_progress(spark, ranges, owner="one_split", every=0.25) as progress_to:
            assert progress_to is not None
            records = read_kafka(spark, ranges, kafka_config, progress_to=progress_to)
            records.mapInArrow(per_batch, records.schema).write.parquet(str(tmp_path / "o"))

        ended = float(released.read_text())
        found = [(r.created, LINE.fullmatch(r.getMessage())) for r in caplog.records
                 if r.name == LOGGER and r.getMessage().startswith("one_split:")]
        counts = [(at, int(m["read"].replace(",", ""))) for at, m in found if m]
        assert [c for _, c in counts] == sorted(c for _, c in counts), counts
        # One split, one task: Spark counts its records when the task ends; the reader's
        # reports show them while the task still runs.
        assert any(c > 0 and at < ended for at, c in counts), (ended, counts)

    def test_a_short_write_logs_nothing(self, spark: Any, kafka_config: dict[str, Any],
                                        slice_1200: OffsetRanges, tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.DEBUG, LOGGER)
        began = time.monotonic()
        with report_progress(spark, slice_1200, owner="short", every=30):
            read_kafka(spark, slice_1200, kafka_config).write.parquet(str(tmp_path / "o"))
        assert time.monotonic() - began < 30  # left at once, not after an interval
        assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []
        assert not reporting_threads("short")

    def test_an_exception_stops_the_thread_and_passes_through(
            self, spark: Any, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, LOGGER)
        ranges = OffsetRanges((PartitionRange("t", 0, 0, 10),))
        with pytest.raises(ZeroDivisionError), \
                report_progress(spark, ranges, owner="failing", every=0.2):
            spark.sparkContext.parallelize([1, 2, 3], 2).collect()
            time.sleep(0.5)
            assert reporting_threads("failing")
            1 / 0  # noqa: B018
        assert not reporting_threads("failing")
        logged = len(lines(caplog, "failing"))
        assert logged >= 1
        time.sleep(0.5)
        assert len(lines(caplog, "failing")) == logged
        # The job reads nothing (no inputRecords): no records, and its finished tasks are no
        # read's.
        assert lines(caplog, "failing")[-1] == (
            "failing: 0 of at most 10 records read (0%), 0 records/s, time left unknown")
        assert not any(t.startswith("kafka-spark-progress-")
                       for t in spark.sparkContext.getJobTags())
