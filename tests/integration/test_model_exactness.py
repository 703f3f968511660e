"""The model-based exactness test (see ``tests/support/model_exactness.py``): a fixed number
of derandomized examples in CI; ``tools/model_soak.py`` runs more, at random."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.support.model_exactness import PROGRAMS, TALLY, examples, run_program, tally_json

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_every_committed_record_is_read_once_or_reported_lost(
        kafka_config: dict[str, Any], kafka_admin: Any, spark: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    soak = bool(os.environ.get("MODEL_SOAK"))

    @settings(max_examples=examples(), derandomize=not soak, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink] if soak else [Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(PROGRAMS)
    def check(program: Any) -> None:
        run_program(kafka_config, kafka_admin, spark, program)

    check()
    print(f"\nMODEL TALLY {tally_json()}")
    assert TALLY["examples"] >= examples()
