"""The levels the driver JVM's printed lines are logged at (spark/session.py): log4j records at
their own, librdkafka's lines at their syslog severity, stack traces with their record, the
rest (the JVM's own notices) at info."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_kafka_spark.spark.session import jvm_line_level


@pytest.mark.parametrize(("line", "level"), [
    ("26/11/28 11:12:22 WARN NativeCodeLoader: Unable to load native-hadoop library", logging.WARNING),
    ("26/11/28 11:12:22 ERROR Executor: Exception in task 0.0", logging.ERROR),
    ("26/11/28 11:12:22 INFO SparkContext: Running Spark version 4.3.0", logging.INFO),
    ("%6|1795864355.567|BGQUEUE|rdkafka#producer-2| [thrd:app]: Purging 1 unserved events",
     logging.INFO),
    ("%4|1795864355.567|GETPID|rdkafka#producer-2| [thrd:main]: Failed to acquire PID",
     logging.WARNING),
    ("%3|1795864376.051|FAIL|rdkafka#producer-1| Connect to ipv4#127.0.0.1:1 failed",
     logging.ERROR),
    ("%7|1795864376.051|INIT|rdkafka#consumer-1| librdkafka v2.12 initialized", logging.DEBUG),
    ("WARNING: Using incubator modules: jdk.incubator.vector", logging.INFO),
    ("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties",
     logging.INFO),
])
def test_each_line_at_its_level(line: str, level: int) -> None:
    assert jvm_line_level(line, logging.INFO) == level


def test_a_stack_trace_stays_with_its_record() -> None:
    assert jvm_line_level("\tat org.apache.spark.scheduler.Task.run(Task.scala:141)",
                          logging.ERROR) == logging.ERROR
    assert jvm_line_level("Caused by: java.io.IOException: boom", logging.ERROR) == logging.ERROR
