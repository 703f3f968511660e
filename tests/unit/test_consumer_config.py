"""consumer_config: the settings a bounded reader owns win over the user's, with one warning."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_kafka_spark.offsets import config as config_module
from airflow_provider_kafka_spark.offsets.config import consumer_config

BASE = {"bootstrap.servers": "127.0.0.1:9092", "sasl.password": "s3cret"}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing warned yet, as in a new process."""
    monkeypatch.setattr(config_module, "_warned_overrides", set())
    caplog.set_level(logging.WARNING, logger=config_module.__name__)


def test_an_overridden_setting_is_warned_once_per_key_and_value(
        caplog: pytest.LogCaptureFixture) -> None:
    user = {**BASE, "enable.auto.commit": True, "auto.offset.reset": "earliest"}

    config = consumer_config(user, isolation_level="read_committed")
    consumer_config(user, isolation_level="read_committed")

    assert (config["enable.auto.commit"], config["auto.offset.reset"]) == (False, "error")
    records = [r for r in caplog.records if r.name == config_module.__name__]
    assert [r.getMessage() for r in records] == [
        "kafka_config sets enable.auto.commit=True, but a bounded read uses False "
        "(offsets move only through commit_offsets()); the setting is ignored. Remove it from "
        "the config (the Kafka connection's extra) to silence this warning.",
        "kafka_config sets auto.offset.reset='earliest', but a bounded read uses 'error' "
        "(offsets move only through commit_offsets()); the setting is ignored. Remove it from "
        "the config (the Kafka connection's extra) to silence this warning.",
    ]
    assert all(r.levelno == logging.WARNING for r in records)
    assert "s3cret" not in caplog.text


def test_another_value_of_the_same_key_warns_again(caplog: pytest.LogCaptureFixture) -> None:
    consumer_config({**BASE, "enable.partition.eof": False}, isolation_level="read_committed")
    consumer_config({**BASE, "enable.partition.eof": "false"}, isolation_level="read_committed")
    assert len([r for r in caplog.records if r.name == config_module.__name__]) == 2


def test_isolation_level_comes_from_the_argument(caplog: pytest.LogCaptureFixture) -> None:
    user = {**BASE, "isolation.level": "read_uncommitted"}

    config = consumer_config(user, isolation_level="read_committed")
    consumer_config(user, isolation_level="read_committed")

    assert config["isolation.level"] == "read_committed"
    records = [r for r in caplog.records if r.name == config_module.__name__]
    assert [r.getMessage() for r in records] == [
        "kafka_config sets isolation.level='read_uncommitted', but this consumer uses "
        "'read_committed', its isolation_level argument; the setting is ignored. Choose the "
        "level with isolation_level= (of resolve_offsets / the resolve operator; the ranges "
        "carry it to the read) instead."]


def test_equal_values_are_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    consumer_config({**BASE, "enable.auto.commit": False, "enable.auto.offset.store": "false",
                     "enable.partition.eof": "True", "auto.offset.reset": "error",
                     "isolation.level": "read_uncommitted"},
                    isolation_level="read_uncommitted")
    consumer_config(BASE, isolation_level="read_committed")
    assert [r for r in caplog.records if r.name == config_module.__name__] == []
