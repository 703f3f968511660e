"""Errors a retry cannot fix end the task at once (Airflow's AirflowFailException), as the same
exception of the package's own class; the others keep Airflow's retries."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_kafka_spark.errors import (
    ConfigurationError,
    CorruptRecordError,
    DataLossError,
    IntervalNotCompleteError,
    KafkaReadError,
    OffsetSpecError,
    SinkError,
)
from airflow_provider_kafka_spark.operators import KafkaCommitOffsetsOperator
from airflow_provider_kafka_spark.retries import fail_at_once_when_certain, not_retried
from airflow_provider_kafka_spark.sinks import PublishConflictError


@pytest.mark.parametrize(("error", "retried"), [
    (ConfigurationError("bad"), False),
    (OffsetSpecError("bad spec"), False),
    (CorruptRecordError("bad record", "t", 0, 5), False),
    (DataLossError("gone", {("t", 0): 3}), False),
    (KafkaReadError("broker away"), True),
    (IntervalNotCompleteError("not yet", []), True),
    (SinkError("S3 did not answer"), True),
    (PublishConflictError("another run published"), True),
])
def test_what_a_task_retries(error: Exception, retried: bool) -> None:
    @fail_at_once_when_certain
    def execute() -> None:
        raise error

    with pytest.raises(type(error)) as caught:
        execute()
    assert caught.value is error
    assert isinstance(caught.value, AirflowFailException) is not retried
    assert type(caught.value).__name__ == type(error).__name__


def test_a_certain_error_keeps_its_class_name_message_and_fields() -> None:
    error = not_retried(CorruptRecordError("record 5 of t/0 could not be decoded", "t", 0, 5))
    assert isinstance(error, CorruptRecordError) and isinstance(error, AirflowFailException)
    assert (type(error).__name__, type(error).__module__) == (
        "CorruptRecordError", "airflow_provider_kafka_spark.errors")
    assert str(error) == "record 5 of t/0 could not be decoded"
    assert (error.topic, error.partition, error.offset) == ("t", 0, 5)
    assert not_retried(error) is error


def test_an_operator_with_bad_ranges_fails_without_retries() -> None:
    # Templated: checked once rendered, in execute (here it is left as the template).
    op = KafkaCommitOffsetsOperator(task_id="commit", ranges="{{ 'not ranges' }}", group_id="g")
    with pytest.raises(OffsetSpecError) as caught:
        op.execute({})
    assert isinstance(caught.value, AirflowFailException)
