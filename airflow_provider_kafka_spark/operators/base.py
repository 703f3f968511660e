"""The base of this package's operators, and what they share: the Kafka connection, run Params
and the tables of their task logs.

Modelled on the Amazon provider's base operator: the hook class and the connection argument
are declared once; every argument is keyword-only; the hook is a ``cached_property`` built on
first use (never in ``__init__``, which runs at DAG parse time).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_kafka_spark.arguments import check_conn_id
from airflow_provider_kafka_spark.hooks.kafka import KafkaConnectionMixin, KafkaHook
from airflow_provider_kafka_spark.offsets import ConfigurationError, OffsetRanges
from airflow_provider_kafka_spark.options import shown


class KafkaSparkBaseOperator(KafkaConnectionMixin, BaseOperator):
    """Base of this package's operators: declares ``kafka_conn_id`` and ``kafka_hook`` once.

    Every operator checks its literal arguments in ``__init__`` (when the DAG file is parsed)
    and its rendered template fields at the start of ``execute``, before any cluster call,
    as :mod:`~airflow_provider_kafka_spark.arguments` says.

    :param kafka_conn_id: the Airflow connection whose extra JSON is the librdkafka config
        (default ``kafka_default``).
    """

    template_fields: Sequence[str] = ()

    def __init__(self, *, kafka_conn_id: str = KafkaHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = check_conn_id(self.task_id, "kafka_conn_id", kafka_conn_id)

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the template fields; a value with template fields of its own (a sink) is
        copied first. Airflow renders such a value in place, and each try's task is a shallow
        copy of the DAG's: without the copy the first try's rendering would stay in the DAG's
        value, and the next run in the same process (``dag.test()``, a backfill) would use it."""
        for name in self.template_fields:
            value = getattr(self, name, None)
            if getattr(value, "template_fields", None):
                setattr(self, name, copy.copy(value))
        super().render_template_fields(context, jinja_env)


def bool_param(owner: str, context: Mapping[str, Any], name: str) -> bool:
    """The run's Param ``name`` as a bool (absent or null: False).

    Raises:
        ConfigurationError: it is set to something else than a JSON boolean (``"false"``
            would otherwise count as true).
    """
    value = (context.get("params") or {}).get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ConfigurationError(
        f"{owner}: the Param {name}={shown(value)} is not valid; pass true or false (a JSON "
        f"boolean, e.g. --conf '{{\"{name}\": true}}'), or leave it unset."
    )


def ranges_table(ranges: OffsetRanges) -> str:
    """A fixed-width table of the ranges, one row per partition, and a total line, for task
    logs; ``lag`` is empty for ranges resolved before lag was recorded."""
    table = format_table(("topic", "partition", "start", "stop", "offsets", "lag"),
                         [(r.topic, r.partition, r.start, r.stop, r.size,
                           ranges.lag.get((r.topic, r.partition), "")) for r in ranges])
    return f"{table}\ntotal: {ranges.total()} offset(s), lag {ranges.total_lag()}"


def format_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Rows as a fixed-width text table for task logs; numbers right-aligned."""
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    numeric = [all(row[i].lstrip("-").isdigit() for row in cells[1:]) and len(cells) > 1
               for i in range(len(header))]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(w) if num else cell.ljust(w)
                  for cell, w, num in zip(row, widths, numeric, strict=True)).rstrip()
        for row in cells
    )
