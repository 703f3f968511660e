"""The :class:`Sink` protocol: how the ingest hands its records to a destination."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Sink(ABC):
    """One destination of a bounded read, in four steps, like Spark's own ``DataSourceWriter``
    (driver-side setup and commit around the tasks' write)::

        sink.prepare(spark, shaped)   # on the driver, before anything is read
        sink.write(df, dead_letters)  # the Spark job (dead_letters: undecodable records or None)
        sink.commit(manifest)         # on the driver: make the write visible
        sink.abort()                  # instead of commit, after any failure

    * :meth:`prepare` checks everything that can be checked without the records (the
      output's schema from ``shaped``, an empty DataFrame with it; formats; locations) and
      raises :class:`ConfigurationError` before anything is read or written. It may set up
      private state (the file sink's staging folder), never visible output.
    * :meth:`write` runs the Spark job and returns the JSON-ready description of the output
      (:meth:`describe` plus what the write reports). ``dead_letters`` (the records that
      could not be decoded: ``key``, ``value`` as read, ``topic``, ``partition``, ``offset``,
      ``timestamp``, ``headers``, ``error``) go to the sink's dead-letter output, published
      and committed together with the output.
    * :meth:`commit` publishes the write with the run's ``manifest`` (ranges and statistics);
      what it returns (a mapping, or None) is added to the output's description.
    * :meth:`abort` undoes what :meth:`prepare` and :meth:`write` left behind, as far as the
      sink can; it never raises (it runs while another exception propagates).

    A sink is used once: build a new one for each write. Every sink satisfies
    :class:`~airflow_provider_kafka_spark.spark.ingest.SinkProtocol`, what
    :func:`~airflow_provider_kafka_spark.spark.ingest.ingest` takes.
    """

    stages_write: ClassVar[bool] = False
    """True when nothing :meth:`write` does is visible before :meth:`commit` (the file sink's
    staging folder): ``ingest`` then finds corrupt records (``on_corrupt="fail"``) in the
    write's own pass; otherwise in a read before the write."""

    writes_in_commit: ClassVar[bool] = False
    """True when :meth:`commit` writes the records (a table's one commit): ``ingest`` knows
    the statistics after the commit; the manifest it passes holds the ranges but no counts."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The JSON-ready description of the output before anything ran (for XCom)."""

    def prepare(self, spark: SparkSession, shaped: DataFrame) -> None:  # noqa: B027
        """Checks before the read; ``shaped`` has the output's schema and no rows."""

    @abstractmethod
    def write(self, df: DataFrame, dead_letters: DataFrame | None = None) -> dict[str, Any]:
        """Write ``df`` (and ``dead_letters``); return :meth:`describe` completed with the
        write's results."""

    def commit(self, manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:  # noqa: B027
        """Make the write visible, with the run's manifest; optionally return what the
        commit adds to the output's description (a table sink writes in its commit)."""

    def abort(self) -> None:  # noqa: B027
        """Undo what :meth:`prepare` and :meth:`write` left behind; never raises."""
