"""How the package's modules import each other: one way, no circles (function-local imports
included), sensors and triggers on the core rather than on the operators, the core free of
Airflow; and the argument checks that sensors, triggers and the core's checks share."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.arguments import DEFAULT_KAFKA_CONN_ID, check_conn_id
from airflow_provider_kafka_spark.errors import ConfigurationError, OffsetSpecError
from airflow_provider_kafka_spark.offsets import Subscription
from airflow_provider_kafka_spark.offsets.completeness import (
    check_idle_timeout,
    check_min_partitions,
)
from airflow_provider_kafka_spark.offsets.subscription import check_subscription

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_kafka_spark"
NAME = PACKAGE.name


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (function-local imports too); a package's
    ``__init__`` only where a name of it is imported (not for its submodules)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # a submodule, else a name of the module
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def test_no_module_of_the_package_imports_in_a_circle() -> None:
    graph = {name: {m for m in _imports(path) if m in MODULES and m != name}
             for name, path in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.parametrize("layer", ["sensors", "triggers", "hooks", "offsets", "spark", "sinks",
                                   "arguments", "options", "errors", "causes", "naming",
                                   "decoding"])
def test_the_layers_below_the_operators_never_import_them(layer: str) -> None:
    for name, path in MODULES.items():
        if _in(name, f"{NAME}.{layer}"):
            wrong = sorted(m for m in _imports(path) if _in(m, f"{NAME}.operators"))
            assert not wrong, f"{name} imports {wrong}"


@pytest.mark.parametrize("layer", ["offsets", "arguments", "options", "errors", "causes",
                                   "naming", "decoding"])
def test_the_core_and_the_shared_arguments_import_neither_airflow_nor_spark(layer: str) -> None:
    for name, path in MODULES.items():
        if _in(name, f"{NAME}.{layer}"):
            wrong = sorted(m for m in _imports(path)
                           if _in(m, "airflow", "pyspark", f"{NAME}.spark", f"{NAME}.hooks"))
            assert not wrong, f"{name} imports {wrong}"


def test_the_lineage_values_know_nothing_of_openlineage() -> None:
    imported = _imports(MODULES[f"{NAME}.operators.lineage"])
    assert not [m for m in imported if "openlineage" in m or m.endswith("lineage_facets")]


def test_the_airflow_layer_imports_without_pyspark_and_the_openlineage_client() -> None:
    """A DAG file imports the operators, sensors and triggers (and checks engines, guarantees
    and formats against options.py) without loading pyspark or the OpenLineage client."""
    code = ("import sys, airflow_provider_kafka_spark.operators, airflow_provider_kafka_spark.sensors,"
            " airflow_provider_kafka_spark.triggers;"
            " print(sorted(m for m in sys.modules if m.split('.')[0] in ('openlineage', 'pyspark')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _message(check: Any, owner: str, value: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigurationError) as caught:
        check(owner, value, **kwargs)
    assert type(caught.value) is ConfigurationError
    return str(caught.value)


def test_min_partitions_is_checked_in_one_place_for_sensor_trigger_and_check() -> None:
    assert _message(check_min_partitions, "discover", 0) == (
        "discover: min_partitions=0 is not valid; pass a positive int (how many partitions to "
        "wait for), e.g. min_partitions=3.")
    assert _message(check_min_partitions, "t", "2") == (
        "t: min_partitions='2' is not valid; pass a positive int (how many partitions to wait "
        "for), e.g. min_partitions=3.")
    assert check_min_partitions("t", " 2 ", allow_text=True) == 2
    assert check_min_partitions("t", 5) == 5


def test_idle_timeout_is_checked_in_one_place_for_sensor_trigger_and_check() -> None:
    assert _message(check_idle_timeout, "complete", -1) == (
        "complete: idle_timeout=-1 is not a positive, finite duration; pass a positive number "
        "of seconds or a timedelta (how long a partition without new records waits before it "
        "counts as idle), e.g. idle_timeout=600, or None.")
    assert check_idle_timeout("complete", None) is None
    assert check_idle_timeout("complete", 30) == 30.0


def test_a_connection_id_must_be_a_non_empty_string() -> None:
    assert DEFAULT_KAFKA_CONN_ID == "kafka_default"
    assert check_conn_id("t", "kafka_conn_id", " other ") == "other"
    assert _message(lambda owner, value: check_conn_id(owner, "kafka_conn_id", value),
                    "t", "") == ("t: kafka_conn_id='' is empty; pass an Airflow connection id, "
                                 "e.g. 'kafka_default'.")


def test_check_subscription_names_the_three_ways_to_build_one() -> None:
    subscription = Subscription.topics(["orders"])
    assert check_subscription(subscription) is subscription
    with pytest.raises(OffsetSpecError) as caught:
        check_subscription(["orders"])
    assert str(caught.value) == (
        "subscription=['orders'] is not a Subscription; build one with "
        "Subscription.topics([...]), Subscription.pattern('...') or "
        "Subscription.partitions([...]).")
