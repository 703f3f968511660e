"""The log of the demo's own Kafka clients (tools/demo.py): librdkafka's notice that a broker
which has just started is still loading its coordinators (the client retries) is a debug
record; its other warnings stay warnings, shown on stderr."""

from __future__ import annotations

import logging

from tools.demo import librdkafka_log

RETRY = ("[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: Broker: "
         "Coordinator load in progress: retrying")
REFUSED = ("[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to "
           "ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.levelno, record.getMessage()))


def test_a_starting_brokers_retry_is_debug_and_other_warnings_are_warnings() -> None:
    log = librdkafka_log()
    records = Records()
    log.addHandler(records)
    try:
        # As confluent-kafka passes librdkafka's lines to a client's ``logger``.
        log.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-2", RETRY)
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    finally:
        log.removeHandler(records)

    assert records.seen == [(logging.DEBUG, f"GETPID [rdkafka#producer-2] {RETRY}"),
                            (logging.ERROR, f"FAIL [rdkafka#producer-1] {REFUSED}")]
    shown = [h.level for h in log.handlers]
    assert shown == [logging.WARNING]
