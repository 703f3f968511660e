"""The catalog's database reset during an Iceberg commit (issue 55), through a real TCP fault
proxy (``tests/support/network.py``) in front of the tier's PostgreSQL: a JDBC catalog of this
test reaches it only through the proxy."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_kafka_spark.errors import KafkaSparkError
from airflow_provider_kafka_spark.sinks.tables import IcebergSink
from tests.support.network import (  # noqa: F401  # fixtures
    clean_proxies,
    postgres_proxy,
    toxiproxy,
)
from tests.tables.cases import COLUMNS, Table, expected, ranges_of, run_ingest
from tools.fault_proxy import Proxy
from tools.kafka_records import produce

pytestmark = [pytest.mark.tables, pytest.mark.spark, pytest.mark.integration,
              pytest.mark.faults]

CATALOG = "pgnet"
"""An Iceberg JDBC catalog on the tier's PostgreSQL, reached through the proxy."""


@pytest.fixture
def proxied_catalog(table_spark: Any, postgres: Any, warehouses: Any,
                    postgres_proxy: Proxy,  # noqa: F811
                    clean_proxies: None) -> Iterator[str]:  # noqa: F811
    prefix = f"spark.sql.catalog.{CATALOG}"
    for key, value in {
            "": "org.apache.iceberg.spark.SparkCatalog",
            ".catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            ".uri": f"jdbc:postgresql://{postgres_proxy.address}/{postgres.database}",
            ".jdbc.user": postgres.user,
            ".jdbc.schema-version": "V1",
            ".warehouse": warehouses.pg.joinpath("through-proxy").as_uri()}.items():
        table_spark.conf.set(prefix + key, value)
    table_spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    yield CATALOG


def test_the_catalog_database_reset_during_an_iceberg_commit_commits_once_or_not_at_all(
        table_spark: Any, kafka_config: dict[str, Any], new_topic: Any, proxied_catalog: str,
        postgres_proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The run committed once or not at all (never its rows twice, never a part of them), the
    failure the package's retryable error; the retry leaves the run's rows in the table
    exactly once, in one commit: every connection to the catalog's database is reset from
    the moment the sink commits."""
    topic = new_topic(partitions=2)
    now = int(time.time() * 1000)
    data = [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), now + i)
            for i in range(30) for p in range(2)]
    produce(kafka_config, topic, data)
    name = f"{proxied_catalog}.db.t_{uuid.uuid4().hex[:10]}"
    table_spark.sql(f"CREATE TABLE {name} ({COLUMNS}) USING iceberg")
    table = Table("iceberg-jdbc", name, "iceberg")
    ranges = ranges_of(topic, {0: (0, 30), 1: (0, 30)})

    def reset_first(method: Any) -> Any:
        def commit(self: Any, *args: Any) -> Any:
            postgres_proxy.add("reset_peer", stream="downstream", name="at_commit", timeout=0)
            return method(self, *args)
        return commit

    monkeypatch.setattr(IcebergSink, "commit_rows", reset_first(IcebergSink.commit_rows))
    monkeypatch.setattr(IcebergSink, "commit_files", reset_first(IcebergSink.commit_files))
    try:
        with pytest.raises(KafkaSparkError) as raised:
            run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    finally:
        monkeypatch.undo()
        postgres_proxy.clear()
    print(f"catalog reset at the commit: {type(raised.value).__name__}: {raised.value}")
    assert raised.value.retryable, repr(raised.value)
    table_spark.sql(f"REFRESH TABLE {name}")
    rows = table.rows(table_spark)
    assert rows in (Counter(), expected(data, ranges)), "a part of the run was committed"

    again = run_ingest(table_spark, kafka_config, ranges, table.sink("run-1"))
    print(f"the retry: {again}")
    assert again["committed"] != bool(rows)  # it commits only what was not committed
    table_spark.sql(f"REFRESH TABLE {name}")
    assert table.rows(table_spark) == expected(data, ranges)
    assert len(table.writes(table_spark)) == 1
    assert table.commit_count(table_spark) == 1
