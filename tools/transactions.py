"""The transactional ids a Kafka cluster's transaction coordinators know (``__transaction_state``).

confluent-kafka's ``AdminClient`` (2.16 here, librdkafka 2.16) has no ``list_transactions`` or
``describe_transactions``, so :func:`transactional_ids` runs Kafka's own
``kafka-transactions.sh --bootstrap-server B list`` (the class
``org.apache.kafka.tools.TransactionsCommand``) with ``java`` and the broker's jars of
``tools/kafka_broker.py`` (``.cache/kafka/jars``, the same JVM options and classpath as the
local brokers). That class lives in the ``kafka-tools`` artifact, which the broker's
``tools/kafka/pom.xml`` does not pull in: the first call fetches ``kafka-tools-<version>.jar``
alone (the broker's Kafka version, no dependencies: the broker's jars have them) with Maven
into ``.cache/kafka/tools-jars`` (git-ignored). Each call then starts one JVM (about 2 s).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools import kafka_broker

TOOLS_JARS = kafka_broker.ROOT / ".cache" / "kafka" / "tools-jars"
TOOL_CLASS = "org.apache.kafka.tools.TransactionsCommand"
HEADER = "TransactionalId"
LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


class TransactionsToolError(RuntimeError):
    """``kafka-transactions.sh list`` could not be fetched or run, failed, or printed
    something that is not its table."""


def transactional_ids(bootstrap: str, prefix: str, *, timeout_s: float = 120.0) -> list[str]:
    """The transactional ids the transaction coordinators of the cluster at ``bootstrap``
    (``bootstrap.servers``, plaintext) know, whose id starts with ``prefix + "-"``; sorted.

    These are the ids in ``__transaction_state`` in any state (``Empty``, ``Ongoing``,
    ``CompleteCommit``, ``CompleteAbort``, ...), until the brokers expire an idle one
    (``transactional.id.expiration.ms``, 7 days by default): every ``transactional.id`` a
    producer ran ``init_transactions`` with. ``prefix`` is matched literally (``"p"`` finds
    ``p-0`` and ``p-a-1``, not ``q-0`` or ``pa-0``).

    Runs ``org.apache.kafka.tools.TransactionsCommand --bootstrap-server <bootstrap> list``
    (one JVM; see the module docstring) and parses its table: a header line
    ``TransactionalId  Coordinator  ProducerId  TransactionState`` and one line per id,
    columns separated by tabs and padded with spaces.

    Raises:
        TransactionsToolError: Maven or ``java`` missing, the jar could not be fetched, the
            tool exited non-zero (an unreachable cluster: after its 60 s admin timeout) or
            ran longer than ``timeout_s``, or its output has no such table; the message quotes
            the tool's output.
    """
    command = _command(bootstrap)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise TransactionsToolError(
            f"kafka-transactions.sh --bootstrap-server {bootstrap} list did not finish within "
            f"{timeout_s:.0f}s: {_text(exc.stderr)[-2000:]}") from None
    if done.returncode != 0:
        raise TransactionsToolError(
            f"kafka-transactions.sh --bootstrap-server {bootstrap} list failed "
            f"({done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}")
    return sorted(i for i in parse_list_output(done.stdout) if i.startswith(f"{prefix}-"))


def parse_list_output(out: str) -> list[str]:
    """The transactional ids (first column) of ``TransactionsCommand list``'s table."""
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines or lines[0].split("\t")[0].strip() != HEADER:
        raise TransactionsToolError(
            f"kafka-transactions.sh list printed no {HEADER} table: {out.strip()[-2000:]!r}")
    return [line.split("\t")[0].strip() for line in lines[1:]]


def _command(bootstrap: str) -> list[str]:
    """``java ... TransactionsCommand --bootstrap-server <bootstrap> list``: the broker's
    command line (:func:`tools.kafka_broker.java_command`), the tools jar added to its
    classpath."""
    try:
        kafka_broker.ensure_jars()
        jar = ensure_tools_jar()
        command = kafka_broker.java_command(TOOL_CLASS, "--bootstrap-server", bootstrap, "list",
                                            log4j=jar.parent / "log4j2.properties",
                                            heap="256m")
    except (kafka_broker.BrokerError, subprocess.CalledProcessError) as exc:
        raise TransactionsToolError(f"cannot run kafka-transactions.sh: {exc}") from exc
    classpath = command.index("-cp") + 1
    command[classpath] += os.pathsep + str(jar)
    return command


def kafka_version() -> str:
    """The Kafka version of the broker's jars (``kafka_2.13-<version>.jar``)."""
    for jar in kafka_broker.JARS.glob("kafka_2.13-*.jar"):
        if match := re.fullmatch(r"kafka_2\.13-(.+)\.jar", jar.name):
            return match.group(1)
    raise TransactionsToolError(f"no kafka_2.13-<version>.jar in {kafka_broker.JARS}")


def ensure_tools_jar() -> Path:
    """``kafka-tools-<version>.jar`` of the broker's Kafka version in ``TOOLS_JARS``, fetched
    once with Maven (idempotent), and the tool's log4j2 configuration (warnings to stderr)."""
    version = kafka_version()
    jar = TOOLS_JARS / f"kafka-tools-{version}.jar"
    if not jar.exists():
        if shutil.which("mvn") is None:
            raise TransactionsToolError("Maven (mvn) is needed once to fetch the kafka-tools "
                                        "jar; install it.")
        print(f"fetching kafka-tools {version} into {TOOLS_JARS} ...", file=sys.stderr)
        TOOLS_JARS.mkdir(parents=True, exist_ok=True)
        # Into a folder of its own, then renamed: a concurrent caller never sees half a jar.
        with tempfile.TemporaryDirectory(dir=TOOLS_JARS) as scratch:
            done = subprocess.run(
                ["mvn", "-q", "dependency:copy",
                 f"-Dartifact=org.apache.kafka:kafka-tools:{version}",
                 f"-DoutputDirectory={scratch}"],
                capture_output=True, text=True, cwd=scratch, stdin=subprocess.DEVNULL)
            fetched = Path(scratch) / jar.name
            if done.returncode != 0 or not fetched.exists():
                raise TransactionsToolError(
                    f"mvn could not fetch org.apache.kafka:kafka-tools:{version}: "
                    f"{(done.stdout + done.stderr).strip()[-2000:]}")
            os.replace(fetched, jar)
    log4j = TOOLS_JARS / "log4j2.properties"
    if not log4j.exists() or log4j.read_text() != LOG4J2:
        scratch_file = log4j.with_name(f"{log4j.name}.{os.getpid()}")
        scratch_file.write_text(LOG4J2)
        os.replace(scratch_file, log4j)
    return jar


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""
