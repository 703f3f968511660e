"""Schedule on data: an Airflow asset whose events are the complete intervals of Kafka topics.

::

    from datetime import timedelta
    from airflow.sdk import DAG
    from airflow_provider_kafka_spark.assets import kafka_interval_asset

    ORDERS_HOURLY = kafka_interval_asset("orders", server="broker1:9092",
                                         every=timedelta(hours=1),
                                         idle_timeout=timedelta(minutes=10))

    with DAG("orders_by_hour", schedule=[ORDERS_HOURLY], ...):
        resolve = KafkaResolveOffsetsOperator(task_id="resolve_offsets", topics="orders")
        ...

The asset's watcher (:class:`~airflow_provider_kafka_spark.triggers.intervals.KafkaIntervalEventTrigger`)
runs in the triggerer while a DAG scheduled on the asset is active, and announces each hour of
``orders`` once it is complete in Kafka (transaction-aware; quiet partitions by
``idle_timeout``), in order, including hours that completed while Airflow was down. Each
announcement is an asset event that starts a run; the run's resolve task takes the interval from
it (``timestamp:<start>`` .. ``timestamp:<end>``, see
:class:`~airflow_provider_kafka_spark.operators.KafkaResolveOffsetsOperator`). See
docs/asset-watcher.md.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, AssetWatcher

from airflow_provider_kafka_spark.arguments import DEFAULT_KAFKA_CONN_ID, subscription_from
from airflow_provider_kafka_spark.offsets.completeness import check_idle_timeout
from airflow_provider_kafka_spark.offsets.intervals import WATCHERS_TOPIC
from airflow_provider_kafka_spark.options import bad_argument, check_text
from airflow_provider_kafka_spark.triggers.intervals import (
    KafkaIntervalEventTrigger,
    interval_grid,
    start_millis,
)

WATCHER_NAME = "kafka_interval"
"""The name of the one watcher of a Kafka interval asset."""

_SERVER = re.compile(r"[A-Za-z0-9._\-\[\]:]+")


def kafka_interval_asset(
    topics: str | Iterable[str],
    *,
    server: str,
    every: timedelta | float | str,
    name: str | None = None,
    timezone: str = "UTC",
    start: datetime | str | None = None,
    idle_timeout: timedelta | float | None = None,
    kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
    poll_interval: float = 30.0,
    state_topic: str = WATCHERS_TOPIC,
    extra: Mapping[str, Any] | None = None,
) -> Asset:
    """An asset with one event per complete interval of ``topics`` (see the module doc).

    Its URI is ``kafka://<server>/<topics>?interval=<every>`` (the Kafka provider's
    ``kafka://host:port/topic``, topics comma-separated, plus the grid, so that an hourly and a
    daily asset of one topic are two assets), e.g.
    ``kafka://broker1:9092/orders?interval=PT1H``; its name is ``name`` or that URI. The name
    also names the watcher's recorded position: keep it when editing the other arguments and the
    watcher resumes where it stood.

    :param topics: the topic name(s): a name, a comma-separated string, or a list.
    :param server: ``host:port`` of the cluster, for the URI only (the watcher connects through
        ``kafka_conn_id``), e.g. the first of the connection's ``bootstrap.servers``.
    :param every: the interval grid: a ``timedelta`` (or seconds), counted from the Unix epoch
        (``timedelta(hours=1)``: whole UTC hours); or a cron expression or preset in
        ``timezone`` (``"0 0 * * *"``: local midnights).
    :param start: the first interval announced on the watcher's very first start is the one
        containing ``start`` (``None``: the one in progress then); ignored afterwards.
    :param idle_timeout: how long a partition without new records waits before it counts as
        complete (``timedelta`` or seconds); ``None``: never (a quiet partition then holds
        every interval back).
    :param poll_interval: seconds between two checks of the cluster once an interval has ended.
    :param state_topic: the compacted topic of the watchers' positions.
    :param extra: the asset's ``extra``.

    Bad arguments raise ``ConfigurationError`` (``OffsetSpecError`` for ``topics``) here, when
    the DAG file is parsed: an import error of the DAG, shown in the UI.
    """
    owner = "kafka_interval_asset"
    subscription = subscription_from(topics=topics, owner=owner)
    host = check_text(owner, "server", server, meaning="host:port of the cluster for the "
                                                       "asset's URI, e.g. 'broker1:9092'")
    assert host is not None
    if "://" in host or not _SERVER.fullmatch(host):
        raise bad_argument(owner, "server", server, "pass host:port of one broker, e.g. "
                                                    "'broker1:9092' (no scheme, no path)")
    grid = interval_grid(owner, every, timezone)
    start_millis(owner, start)
    check_idle_timeout(owner, idle_timeout)
    query = urllib.parse.urlencode({"interval": grid.label} if grid.timezone == "UTC"
                                   else {"interval": grid.label, "tz": grid.timezone})
    uri = f"kafka://{host}/{','.join(subscription.topic_names)}?{query}"
    asset_name = check_text(owner, "name", name if name is not None else uri,
                            meaning="the asset's name (default: its URI)")
    assert asset_name is not None
    trigger = KafkaIntervalEventTrigger(
        watcher=asset_name, every=every, timezone=timezone, start=start,
        idle_timeout=idle_timeout, kafka_conn_id=kafka_conn_id,
        topics=list(subscription.topic_names), poll_interval=poll_interval,
        state_topic=state_topic)
    return Asset(name=asset_name, uri=uri, extra=dict(extra or {}),
                 watchers=[AssetWatcher(name=WATCHER_NAME, trigger=trigger)])
