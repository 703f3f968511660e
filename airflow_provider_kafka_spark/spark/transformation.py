"""The transformation step of :func:`~airflow_provider_kafka_spark.spark.ingest.ingest`: its
``transform`` or ``sql`` (or neither), checked on an empty DataFrame before the read and then
applied to the records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka_spark.causes import classify
from airflow_provider_kafka_spark.errors import ConfigurationError, TransientError, error_line
from airflow_provider_kafka_spark.options import SQL_VIEW, bad_argument, shown
from airflow_provider_kafka_spark.spark.schema import same_columns, spark_compares

Transform = Callable[[DataFrame], DataFrame]
"""``callable(DataFrame) -> DataFrame``: an ingest's ``transform``."""


@dataclass(frozen=True)
class Transformation:
    """An ingest's ``transform`` or ``sql`` (or neither), applied to the records."""

    spark: SparkSession
    owner: str
    transform: Transform | None
    sql: str | None

    def is_identity(self) -> bool:
        """Whether the records are written as read (no ``transform``, no ``sql``)."""
        return self.transform is None and not self.sql

    def apply(self, records: DataFrame, *, checking: bool) -> DataFrame:
        """``records`` through ``transform`` or ``sql``. With ``checking`` (``records`` is
        empty, before the read), a failure is a ConfigurationError about the argument, or a
        :class:`TransientError` when its cause is one a retry can change (a store or metastore
        that did not answer: :func:`~airflow_provider_kafka_spark.causes.classify`)."""
        if self.transform is not None:
            result = self._transformed(records, checking=checking)
        elif self.sql:
            records.createOrReplaceTempView(SQL_VIEW)
            if checking:
                self.check_sql(records.columns)
            result = self.spark.sql(self.sql)
        else:
            return records
        if checking:
            self.check_columns(result)
        return result

    def _transformed(self, records: DataFrame, *, checking: bool) -> DataFrame:
        assert self.transform is not None
        name = self._name()
        try:
            result = self.transform(records)
        except Exception as exc:
            if not checking:
                raise
            failed = (f"{self.owner}: transform={name} failed on an empty DataFrame with the "
                      f"records' columns {records.columns} (called once before the read, to "
                      f"check it): {error_line(exc)}.")
            cause = classify(exc, otherwise=False)  # the user's code on no rows: deterministic
            if cause.retryable:  # e.g. a table it reads whose metastore did not answer
                raise TransientError(f"{failed} {cause.says()} Nothing was read or written."
                                     ) from exc
            raise ConfigurationError(
                f"{failed} Fix the transform: it takes the records read and returns a pyspark "
                "DataFrame. Nothing was read or written."
            ) from exc
        if not isinstance(result, DataFrame):
            raise bad_argument(
                self.owner, "transform", name,
                "it must return a pyspark.sql.DataFrame (e.g. return df.select(...))",
                problem=f"returned {type(result).__name__}, not a DataFrame")
        return result

    def _name(self) -> str:
        return getattr(self.transform, "__qualname__", None) or shown(self.transform)

    def check_columns(self, shaped: DataFrame) -> None:
        """Columns of the output that Spark cannot tell apart fail here, before the read (no
        sink could write them)."""
        same = same_columns(shaped)
        if same:
            argument, value = (("transform", self._name()) if self.transform is not None
                               else ("sql", self.sql))
            raise bad_argument(
                self.owner, argument, value,
                "give each column its own name (e.g. .alias() or AS in the select that makes "
                "them), so that the sink can write them. Nothing was read or written",
                problem=f"returns the columns {same}, which Spark cannot tell apart "
                        f"({spark_compares(shaped)})")

    def check_sql(self, columns: list[str]) -> None:
        """Parse ``sql`` and analyse it as a subquery over the (empty) view: a syntax error,
        an unknown column, a command or several statements fail here, before the read."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import AnalysisException

        assert isinstance(self.sql, str)
        problem = "is not valid Spark SQL"
        try:
            jsession = getattr(self.spark, "_jsparkSession", None)
            if jsession is not None:  # the parser alone: positions as the user wrote them
                jsession.sessionState().sqlParser().parsePlan(self.sql)
            problem = "is not one query Spark can run over the records"
            query = self.sql.strip()
            while query.endswith(";"):
                query = query[:-1].rstrip()
            self.spark.sql(f"SELECT * FROM (\n{query}\n) AS _kafka_spark_sql").schema  # noqa: B018
        except (AnalysisException, Py4JJavaError) as exc:
            cause = classify(exc, otherwise=False)
            if cause.retryable:  # a table the query reads, whose metastore did not answer
                raise TransientError(
                    f"{self.owner}: sql={shown(self.sql)} could not be analysed over the view "
                    f"'{SQL_VIEW}': {error_line(exc)}. {cause.says()} Nothing was read or "
                    "written.") from exc
            raise bad_argument(
                self.owner, "sql", self.sql,
                f"pass one query (SELECT, WITH ... SELECT, VALUES or TABLE; not a command nor "
                f"several statements) over the view '{SQL_VIEW}', whose columns are {columns}. "
                f"Spark said: {error_line(exc)}. Nothing was read or written",
                problem=problem) from exc
