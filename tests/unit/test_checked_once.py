"""Every option is checked in one place: the package's ``check_*`` and ``bad_argument`` calls,
found in its source, name each option (their second argument) in one module only.

The options that several modules check on purpose are listed with the reason; the list may only
shrink. An option checked in a second module fails this test: check it where the value enters
(a value's constructor, such as ``ReadOptions``, ``Decoding`` or a sink, or an entry function)
and pass the checked value on.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_kafka_spark"

SEVERAL_ON_PURPOSE: dict[str, str] = {
    # Arguments of the same name that belong to different operators, sensors or triggers.
    "group_id": "the commit and the resolve operator's own argument",
    "timeout": "the commit and the resolve operator's own argument",
    "spark_conf": "the ingest and the resolve operator's own argument",
    "spark_conn_id": "the ingest and the resolve operator's own argument",
    "kafka_conn_id": "the operators' base, the sensors, the triggers and the hook each take one",
    "on_data_loss": "the resolve operator's, which applies to resolution, not to the read",
    # Checks that need Spark, after the static check of the same argument.
    "sql": "arguments.check_stages checks it is text; spark/ingest.py analyses it on Spark",
    "transform": "arguments.check_stages checks it is callable; spark/ingest.py calls it on an "
                 "empty DataFrame",
    "on_corrupt": "Decoding checks the value; a table sink refuses 'dead_letter' (it has no "
                  "dead-letter output)",
    "table": "the resolve operator's table argument is a table sink value; the sink checks its "
             "table name",
    # Not yet moved to one place (issue 37).
    "poll_timeout": "read_kafka's and the data source's option, before read_kafka passes a "
                    "checked value",
}


def _checked_options() -> dict[str, set[str]]:
    places: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = (node.func.id if isinstance(node.func, ast.Name)
                    else node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if not (name.startswith("check_") or name == "bad_argument"):
                continue
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str):
                places[node.args[1].value].add(str(path.relative_to(PACKAGE)))
    return places


def test_every_option_is_checked_in_one_module() -> None:
    places = _checked_options()
    assert len(places) > 40  # the scan finds the checks (it would pass vacuously otherwise)
    several = {option: sorted(found) for option, found in places.items() if len(found) > 1}
    unexplained = {o: f for o, f in several.items() if o not in SEVERAL_ON_PURPOSE}
    assert not unexplained, f"checked in several modules: {unexplained}"


def test_the_list_of_exceptions_only_shrinks() -> None:
    places = _checked_options()
    stale = [o for o in SEVERAL_ON_PURPOSE if len(places.get(o, ())) < 2]
    assert not stale, f"checked in one module now: remove {stale} from SEVERAL_ON_PURPOSE"
