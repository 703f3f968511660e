"""Secrets never leak: with distinctive markers as the values of ``sasl.password`` (a real
SCRAM user's), ``ssl.key.password``, ``ssl.key.pem`` and ``sasl.oauthbearer.client.secret`` in
the Kafka connection (settings librdkafka ignores on a SASL_PLAINTEXT listener), a run of
``kafka_adhoc`` leaves none of them in the task logs, XCom, rendered template fields or the
manifest; a Spark session with its UI on shows none in plans or UI pages; and a refused
``sasl.jaas.config`` is named, its value not shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka_spark.offsets import ConfigurationError, Subscription, resolve_offsets
from tests.support.secured import ROOT
from tools.kafka_records import produce
from tools.local_broker import SecuredBroker

pytestmark = [pytest.mark.secured, pytest.mark.integration, pytest.mark.spark]

MARKERS = {"sasl.password": "MRK-sasl-password-71c4", "ssl.key.password": "MRK-key-password-5e2a",
           "ssl.key.pem": "MRK-key-pem-0b9d",
           "sasl.oauthbearer.client.secret": "MRK-oauth-secret-c3f8"}
JAAS_MARKER = "MRK-jaas-config-8d1e"


@pytest.fixture(scope="module")
def marked_config(secured: SecuredBroker) -> dict[str, Any]:
    """The SASL listener's config for a SCRAM user whose password is a marker, plus markers
    in settings librdkafka does not use on this listener."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(secured.client_config("sasl_plaintext"))
    upsert = UserScramCredentialUpsertion(
        "marked", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        MARKERS["sasl.password"].encode(), b"a-salt-for-tests")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    config = secured.client_config("sasl_plaintext", **{"sasl.username": "marked", **MARKERS})
    deadline = time.monotonic() + 30  # the new credential reaches the listener shortly after
    while True:
        try:
            resolve_offsets(config, Subscription.pattern(".*"), "earliest", "latest", timeout=5)
            return config
        except ConfigurationError:
            assert time.monotonic() < deadline, "the marked SCRAM user never authenticated"
            time.sleep(0.5)
        except Exception:  # the pattern matches no topic yet: authenticated
            return config


def found(text: str) -> list[str]:
    return [m for m in [*MARKERS.values(), JAAS_MARKER] if m in text]


def test_a_dag_run_leaves_no_secret_in_logs_xcom_rendered_fields_or_manifest(
        run_dag: Any, secured: SecuredBroker, secured_topic: Any, marked_config: dict[str, Any],
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    topic = secured_topic(2)
    produce(marked_config, topic, [(p, b"k", b"v", int(time.time() * 1000)) for p in (0, 1)])
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(
        {"conn_type": "kafka", "extra": marked_config}))
    out = tmp_path / "out"

    outcome = run_dag("kafka_adhoc", logical_date=None, conf={
        "topics": topic, "start": "earliest", "stop": "latest", "output_path": str(out)})

    assert outcome.state == "success", outcome.errors
    assert outcome.xcom["ingest"]["records"] == 2
    logs = capsys.readouterr()
    assert found(logs.out + logs.err) == []
    assert found(json.dumps(outcome.xcom)) == []
    with create_session() as session:
        rendered = session.query(RenderedTaskInstanceFields).filter(
            RenderedTaskInstanceFields.dag_id == "kafka_adhoc").all()
        assert rendered
        assert found(json.dumps([r.rendered_fields for r in rendered], default=str)) == []
    assert found((out / "_kafka_spark_manifest.json").read_text()) == []


def test_spark_plans_and_ui_show_no_secret(secured: SecuredBroker, secured_topic: Any,
                                           marked_config: dict[str, Any]) -> None:
    topic = secured_topic(1)
    produce(marked_config, topic, [(0, b"k", b"v", int(time.time() * 1000))] * 3)
    ranges = resolve_offsets(marked_config, Subscription.topics([topic]), "earliest", "latest")
    # The Java client has no equivalent of the OAUTHBEARER secret nor of a key without its
    # certificate: spark-kafka gets the SCRAM password and the key password.
    java = {k: v for k, v in marked_config.items()
            if k not in ("sasl.oauthbearer.client.secret", "ssl.key.pem")}
    spec = {"ranges": ranges.to_json(), "configs": {"python": marked_config, "spark-kafka": java},
            "markers": [*MARKERS.values()]}
    done = subprocess.run([sys.executable, "-m", "tests.secured.spark_ui_probe", json.dumps(spec)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report.pop("rows") == ["3", "3"]
    assert len(report) == 10 and all(hits == [] for hits in report.values()), report


def test_a_refused_jaas_config_is_named_not_shown(marked_config: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="'sasl.jaas.config' is a Java client") as exc:
        resolve_offsets({**marked_config, "sasl.jaas.config": JAAS_MARKER},
                        Subscription.topics(["any"]), "earliest", "latest")
    assert found(str(exc.value)) == []
