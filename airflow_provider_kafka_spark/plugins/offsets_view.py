"""The offsets view: a page of the Airflow UI showing what a resolve task's runs read.

An Airflow 3 plugin (``KafkaOffsetsViewPlugin``) with two parts, both served by Airflow's own
API server (no other web server):

* a FastAPI app mounted at ``/kafka-spark-offsets``: the page ``/kafka-spark-offsets/`` (a
  form: DAG, task, topic, since, connection; then the audit of the task's pinned ranges as a
  timeline of runs x partitions, :mod:`.offsets_page`) and the same audit as JSON,
  ``/kafka-spark-offsets/audit.json?dag_id=...&task_id=...[&since=7d][&topic=...][&conn_id=...]``
  (:meth:`~airflow_provider_kafka_spark.offsets.audit.Audit.to_dict`, narrowed to ``topic``
  when given);
* an external view: the entry **Browse > Kafka offsets** of the UI's navigation, which shows
  the page inside the UI (``/plugin/kafka-offsets``).

The audit reads the pins through the Kafka connection ``conn_id`` (default ``kafka_default``,
the package's :class:`~airflow_provider_kafka_spark.hooks.kafka.KafkaHook`). The records each
run's ingest read come from the ingest tasks' XComs in Airflow's database; the form offers
the ``(dag, task)`` pairs of ``KafkaResolveOffsetsOperator`` tasks that ran since ``since``.

**Authorization** is Airflow's: plugin apps get no protection of their own, so every request
resolves the user the way Airflow's API does (the JWT of the UI's ``_token`` cookie, or an
``Authorization: Bearer`` header) and asks the configured auth manager: the page needs a
logged-in user; an audit needs read access to the DAG's runs (as for its XComs); a
connection other than ``kafka_default`` needs read access to that connection. Only DAGs the
user may read are offered in the form.

The app is built on its first request: task processes load plugins too, and importing this
module costs them no FastAPI and no API-server import.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations, which
# name classes imported inside create_app.
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from airflow.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from fastapi import FastAPI

    from airflow_provider_kafka_spark.plugins.offsets_page import Query, RecordsRead

URL_PREFIX = "/kafka-spark-offsets"
"""Where the app is mounted in Airflow's API server."""
URL_ROUTE = "kafka-offsets"
"""The UI's route of the embedded page: ``/plugin/kafka-offsets``."""
RESOLVE_OPERATOR = "KafkaResolveOffsetsOperator"
AUDIT_TIMEOUT_S = 15.0
"""Seconds each cluster call of an audit may take before the page reports the cluster."""
_CHUNK = 500  # run ids per XCom query (SQLite's bound-parameter limit)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _AppOnFirstRequest:
    """An ASGI app that builds the FastAPI app on its first request."""

    def __init__(self, build: Callable[[], "FastAPI"]) -> None:
        self._build = build
        self._app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)


def create_app() -> "FastAPI":
    """The offsets view's FastAPI app (the page and the JSON), as mounted at :data:`URL_PREFIX`."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import HTMLResponse

    from airflow_provider_kafka_spark.arguments import DEFAULT_KAFKA_CONN_ID
    from airflow_provider_kafka_spark.plugins.offsets_page import (
        DEFAULT_SINCE,
        Query,
        parse_since,
        render_page,
    )

    app = FastAPI(title="Kafka offsets (airflow-provider-kafka-spark)", docs_url=None,
                  redoc_url=None, openapi_url=None)

    def query_of(request: Request) -> Query:
        values = request.query_params
        return Query(dag_id=values.get("dag_id", "").strip(),
                     task_id=values.get("task_id", "").strip(),
                     since=values.get("since", DEFAULT_SINCE).strip() or DEFAULT_SINCE,
                     conn_id=values.get("conn_id", "").strip() or DEFAULT_KAFKA_CONN_ID,
                     topic=values.get("topic", "").strip())

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, user: Annotated[Any, Depends(get_user)]) -> HTMLResponse:
        query = query_of(request)
        try:
            since = parse_since(query.since, datetime.now(UTC))
        except ValueError as exc:
            return HTMLResponse(render_page(query, error=str(exc)), status_code=400)
        choices = _resolve_tasks(user, since)
        if not (query.dag_id and query.task_id):
            return HTMLResponse(render_page(query, since=since, choices=choices))
        try:
            found = _audit(request, user, query, since)
        except HTTPException as exc:
            return HTMLResponse(render_page(query, since=since, choices=choices,
                                            error=str(exc.detail)), status_code=exc.status_code)
        records = _records_read(query.dag_id, query.task_id,
                                [run["run_id"] for run in found["runs"]])
        return HTMLResponse(render_page(query, since=since, audit=found, records=records,
                                        choices=choices,
                                        json_href=f"audit.json?{query.params()}"))

    @app.get("/audit.json")
    def audit_json(request: Request, user: Annotated[Any, Depends(get_user)]) -> dict[str, Any]:
        query = query_of(request)
        if not (query.dag_id and query.task_id):
            raise HTTPException(400, "pass dag_id and task_id: the resolve task to audit, e.g. "
                                     "?dag_id=kafka_hourly_ingest&task_id=resolve_offsets")
        try:
            since = parse_since(query.since, datetime.now(UTC))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return _audit(request, user, query, since)

    return app


def _audit(request: Any, user: Any, query: "Query", since: datetime) -> dict[str, Any]:
    """The audit dict of the query's task, after the auth manager's checks.

    Raises:
        HTTPException: 403 (no read access to the DAG's runs or to the connection), 400 (the
            connection or an argument is refused), 502 (the cluster refused or did not answer).
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        ConnectionDetails,
        DagAccessEntity,
    )
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import HTTPException

    from airflow_provider_kafka_spark.arguments import DEFAULT_KAFKA_CONN_ID
    from airflow_provider_kafka_spark.errors import ConfigurationError, KafkaSparkError
    from airflow_provider_kafka_spark.hooks.kafka import KafkaHook
    from airflow_provider_kafka_spark.offsets.audit import audit
    from airflow_provider_kafka_spark.plugins.offsets_page import only_topic

    requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=query.dag_id)(request, user)
    if query.conn_id != DEFAULT_KAFKA_CONN_ID and not get_auth_manager().is_authorized_connection(
            method="GET", details=ConnectionDetails(conn_id=query.conn_id), user=user):
        raise HTTPException(403, f"no read access to the connection {query.conn_id!r}")
    try:
        config = KafkaHook(query.conn_id).get_kafka_config()
        found = audit(config, query.dag_id, query.task_id, since=since,
                      timeout=AUDIT_TIMEOUT_S).to_dict()
    except ConfigurationError as exc:
        raise HTTPException(400, str(exc)) from None
    except KafkaSparkError as exc:
        raise HTTPException(502, str(exc)) from None
    return only_topic(found, query.topic) if query.topic else found


def _resolve_tasks(user: Any, since: datetime) -> list[tuple[str, str]]:
    """``(dag_id, task_id)`` of the resolve tasks that ran in DAG runs since ``since``, of the
    DAGs ``user`` may read (task instances by operator name; runs by ``run_after``, indexed)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session(scoped=False) as session:
        permitted = get_auth_manager().get_authorized_dag_ids(user=user, method="GET",
                                                              session=session)
        rows = session.execute(
            select(TaskInstance.dag_id, TaskInstance.task_id).distinct()
            .join(DagRun, (DagRun.dag_id == TaskInstance.dag_id)
                  & (DagRun.run_id == TaskInstance.run_id))
            .where(DagRun.run_after >= since, TaskInstance.operator == RESOLVE_OPERATOR)
        ).all()
    return sorted((dag, task) for dag, task in rows if dag in permitted)


def _records_read(dag_id: str, task_id: str, run_ids: Sequence[str]) -> "RecordsRead":
    """Records the ingest tasks of these runs read, per exact range: every XCom
    ``return_value`` of another task of the run shaped like the ingest's statistics
    (``{"records", "partitions": [{"topic", "partition", "start", "stop", "records"}]}``); of
    two ingest tasks reading the same range (two sinks), the larger count."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: dict[tuple[str, str, int, int, int], int] = {}
    unique = sorted(set(run_ids))
    with create_session(scoped=False) as session:
        for i in range(0, len(unique), _CHUNK):
            rows = session.scalars(select(XComModel).where(
                XComModel.dag_id == dag_id, XComModel.key == "return_value",
                XComModel.task_id != task_id, XComModel.run_id.in_(unique[i:i + _CHUNK])))
            for row in rows:
                value = XComModel.deserialize_value(row)
                if not (isinstance(value, dict) and isinstance(value.get("records"), int)
                        and isinstance(value.get("partitions"), list)):
                    continue
                for p in value["partitions"]:
                    try:
                        key = (row.run_id, p["topic"], p["partition"], p["start"], p["stop"])
                        found[key] = max(found.get(key, 0), int(p["records"]))
                    except (KeyError, TypeError, ValueError):
                        continue
    return found


class KafkaOffsetsViewPlugin(AirflowPlugin):
    """The offsets view in the Airflow UI (Browse > Kafka offsets) and its JSON."""

    name = "kafka_spark_offsets_view"
    fastapi_apps = [{"app": _AppOnFirstRequest(create_app), "url_prefix": URL_PREFIX,
                     "name": "Kafka offsets"}]
    external_views = [{"name": "Kafka offsets", "href": f"{URL_PREFIX.lstrip('/')}/",
                       "url_route": URL_ROUTE, "destination": "nav", "category": "browse"}]
