"""The command line: ``python -m airflow_provider_kafka_spark audit ...``, and the same command
as ``airflow kafka-spark audit ...``.

``audit`` prints what a task's runs read (:func:`airflow_provider_kafka_spark.offsets.audit`):
per partition the offsets covered, the gaps and the overlaps. Exit status: 0 when the audit is
ok, 1 on an unexplained gap or an overlap, 2 on bad arguments or configuration (refused before
any cluster call; nothing audited), 3 when the cluster could not answer or holds no pins topic.

Airflow 3.2 and later run the functions that a provider lists under ``"cli"`` in its provider
info and add the commands they return to the ``airflow`` command
(``ProvidersManager.cli_command_functions``); :func:`get_airflow_cli_commands` is ours. Without
Airflow's CLI the command is ``python -m airflow_provider_kafka_spark``.

This module is imported by every ``airflow`` command (to list its commands): it imports
neither Airflow nor the offset core until a command runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from airflow_provider_kafka_spark.offsets.audit import Audit, PartitionAudit

PROG = "python -m airflow_provider_kafka_spark"
DEFAULT_SINCE = "7d"
DEFAULT_PINS_TOPIC = "_kafka_spark_pins"
"""``offsets.pins.PINS_TOPIC``, spelled out so that listing the commands imports nothing
(a unit test keeps the two equal)."""

EXIT_OK, EXIT_NOT_OK, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
_DURATION = re.compile(r"(?:\d+[wdhms])+")
_SERVER = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_SHOWN_RANGES = 6  # covered ranges printed per partition; the JSON has them all


class UsageError(Exception):
    """A bad command-line argument: the message names it and says what to pass."""


@dataclass(frozen=True)
class Option:
    """One option of a command, for argparse and for Airflow's ``Arg`` alike."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


AUDIT_OPTIONS: tuple[Option, ...] = (
    Option(("--dag-id",), {"metavar": "DAG_ID", "required": True, "help": "the DAG of the resolving task"}),
    Option(("--task-id",), {"metavar": "TASK_ID", "required": True,
                            "help": "the resolving task (all map indexes of a mapped task)"}),
    Option(("--since",), {"metavar": "TIME|DURATION", "default": DEFAULT_SINCE,
                          "help": "audit the pins written since then: an ISO-8601 time with a "
                                  "zone (2024-05-01T00:00:00Z) or a duration back from now "
                                  f"(7d, 24h, 90m, 1w2d; default {DEFAULT_SINCE})"}),
    Option(("--bootstrap-servers",), {"metavar": "HOST:PORT[,HOST:PORT...]",
                                      "help": "the cluster, without authentication (else "
                                              "--conn-id)"}),
    Option(("--conn-id",), {"metavar": "CONN_ID",
                            "help": "an Airflow connection whose extra is the librdkafka "
                                    "config, e.g. kafka_default (else --bootstrap-servers)"}),
    Option(("--group-id",), {"metavar": "GROUP_ID",
                             "help": "also report this consumer group's committed offsets per "
                                     "partition (the group the commit task commits to)"}),
    Option(("--pins-topic",), {"metavar": "TOPIC", "default": DEFAULT_PINS_TOPIC,
                               "help": f"the pins topic (default {DEFAULT_PINS_TOPIC})"}),
    Option(("--timeout",), {"metavar": "SECONDS", "default": "30",
                            "help": "seconds for each cluster call (default 30)"}),
    Option(("--json",), {"action": "store_true", "dest": "as_json",
                         "help": "print the audit as JSON (Audit.to_dict()) instead of a "
                                 "summary"}),
)

AUDIT_HELP = "Audit what a task's runs read: gaps and overlaps between their pinned ranges."
AUDIT_EPILOG = ("Exit status: 0 ok; 1 an unexplained gap or an overlap; 2 bad arguments or "
                "configuration (nothing audited); 3 the cluster did not answer or has no pins "
                "topic.")


@dataclass(frozen=True)
class AuditRequest:
    """The checked arguments of ``audit``."""

    dag_id: str
    task_id: str
    since: datetime
    bootstrap_servers: str | None
    conn_id: str | None
    pins_topic: str
    timeout: float
    as_json: bool
    group_id: str | None = None


def check_audit_arguments(args: argparse.Namespace, *,
                          now: datetime | None = None) -> AuditRequest:
    """The arguments of ``audit``, checked without contacting anything.

    Raises:
        UsageError: a missing or bad argument (the message says which and what to pass).
    """
    dag_id = _text(args.dag_id, "--dag-id", "the DAG id, e.g. --dag-id kafka_hourly_ingest")
    task_id = _text(args.task_id, "--task-id", "the resolving task's id, e.g. --task-id resolve")
    servers = _optional_text(args.bootstrap_servers, "--bootstrap-servers")
    conn_id = _optional_text(args.conn_id, "--conn-id")
    where = ("pass --bootstrap-servers HOST:PORT (a cluster without authentication) or "
             "--conn-id CONN_ID (an Airflow connection, e.g. kafka_default)")
    if servers is None and conn_id is None:
        raise UsageError(f"no cluster given; {where}.")
    if servers is not None and conn_id is not None:
        raise UsageError(f"both --bootstrap-servers and --conn-id given; {where}, not both.")
    if servers is not None:
        for server in servers.split(","):
            found = _SERVER.match(server.strip())
            if not found or not 0 < int(found.group(1)) < 65536:
                raise UsageError(f"--bootstrap-servers {server.strip()!r} is not HOST:PORT; pass "
                                 "e.g. --bootstrap-servers broker-1:9092,broker-2:9092.")
    pins_topic = _text(args.pins_topic, "--pins-topic",
                       f"a topic name, e.g. --pins-topic {DEFAULT_PINS_TOPIC}")
    if len(pins_topic) > 249 or not re.fullmatch(r"[A-Za-z0-9._-]+", pins_topic):
        raise UsageError(f"--pins-topic {pins_topic!r} is not a Kafka topic name (1 to 249 of "
                         f"a-z A-Z 0-9 . _ -); the default is {DEFAULT_PINS_TOPIC}.")
    return AuditRequest(dag_id, task_id, parse_since(args.since, now=now), servers, conn_id,
                        pins_topic, _timeout(args.timeout), bool(args.as_json),
                        _optional_text(getattr(args, "group_id", None), "--group-id"))


def parse_since(text: object, *, now: datetime | None = None) -> datetime:
    """``--since``: an ISO-8601 time with a zone, or a duration back from ``now`` made of
    ``<n>w``, ``<n>d``, ``<n>h``, ``<n>m``, ``<n>s`` (``7d``, ``1d12h``).

    Raises:
        UsageError: neither, a time without a zone, a zero duration or a time in the future.
    """
    now = now or datetime.now(UTC)
    value = str(text).strip()
    help_ = ("pass an ISO-8601 time with a zone, e.g. --since 2024-05-01T00:00:00Z, or a "
             "duration back from now, e.g. --since 7d (w, d, h, m, s)")
    if _DURATION.fullmatch(value):
        parts = re.findall(r"(\d+)([wdhms])", value)
        if len({unit for _, unit in parts}) < len(parts):
            raise UsageError(f"--since {value!r} gives a unit twice; {help_}.")
        try:
            since = now - timedelta(**{_UNITS[unit]: int(n) for n, unit in parts})
        except OverflowError:
            raise UsageError(f"--since {value!r} is before the year 1; {help_}.") from None
        if since >= now:
            raise UsageError(f"--since {value!r} is no time at all; {help_}.")
        return since
    try:
        since = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--since {value!r} is neither a time nor a duration; {help_}.") from None
    if since.utcoffset() is None:
        raise UsageError(f"--since {value!r} has no zone; add one, e.g. "
                         f"--since {since.isoformat()}Z (UTC) or +02:00.")
    if since > now:
        raise UsageError(f"--since {value!r} is in the future; {help_}.")
    return since


def run_audit(args: argparse.Namespace, *, out: TextIO | None = None,
              err: TextIO | None = None) -> int:
    """Run ``audit`` with parsed ``args``; print the summary (or JSON) to ``out`` and errors
    to ``err``. Returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        request = check_audit_arguments(args)
    except UsageError as exc:
        print(f"audit: error: {exc}", file=err)
        return EXIT_USAGE
    from airflow_provider_kafka_spark.errors import ConfigurationError, KafkaSparkError
    from airflow_provider_kafka_spark.offsets.audit import audit

    try:
        kafka_config = _kafka_config(request)
        result = audit(kafka_config, request.dag_id, request.task_id, since=request.since,
                       group_id=request.group_id, pins_topic=request.pins_topic,
                       timeout=request.timeout)
    except ConfigurationError as exc:
        print(f"audit: error: {exc}", file=err)
        return EXIT_USAGE
    except KafkaSparkError as exc:
        print(f"audit: the audit could not be made: {exc}", file=err)
        return EXIT_UNAVAILABLE
    if request.as_json:
        print(json.dumps(result.to_dict(), indent=2), file=out)
    else:
        print(format_audit(result), file=out)
    if not result.runs:
        print(f"audit: no pins of {result.dag_id}/{result.task_id} since "
              f"{result.since.isoformat()} in {result.pins_topic!r}; check --dag-id, "
              "--task-id, --since and --pins-topic.", file=err)
    return EXIT_OK if result.ok else EXIT_NOT_OK


def format_audit(result: Audit) -> str:
    """The audit as a few lines of text: one per partition, one per gap and overlap, and a
    verdict."""
    lines = [f"Audit of {result.dag_id}/{result.task_id}: {len(result.runs)} run(s) pinned in "
             f"{result.pins_topic!r} since {result.since.astimezone(UTC).isoformat()}"]
    for partition in result.partitions:
        lines.append(_partition_line(partition))
        for gap in partition.gaps:
            verdict = "explained" if gap.explained else "UNEXPLAINED"
            lines.append(f"    gap [{gap.start}, {gap.stop}): {gap.size} offset(s) after run "
                         f"{gap.after_run}, before run {gap.before_run}, {gap.deleted} deleted, "
                         f"{verdict}: {gap.reason}")
        for overlap in partition.overlaps:
            runs = ", ".join(str(run) for run in overlap.runs)
            lines.append(f"    OVERLAP [{overlap.start}, {overlap.stop}): {overlap.size} "
                         f"offset(s) read by runs {runs}")
    counts = (f"{len(result.gaps)} gap(s), {len(result.unexplained_gaps)} unexplained, "
              f"{len(result.overlaps)} overlap(s)")
    lines.append(f"OK: {counts}." if result.ok else f"NOT OK: {counts}.")
    return "\n".join(lines)


def _partition_line(partition: PartitionAudit) -> str:
    where = f"  {partition.topic}/{partition.partition}"
    log_start = ("partition deleted" if partition.log_start is None
                 else f"log start {partition.log_start}")
    if not partition.covered:
        return f"{where}: nothing read (empty ranges only; {log_start})"
    shown = ", ".join(f"[{start}, {stop})" for start, stop in partition.covered[:_SHOWN_RANGES])
    more = len(partition.covered) - _SHOWN_RANGES
    if more > 0:
        shown += f" and {more} more"
    group = ""
    if partition.committed is not None:
        group = (f"; the group is at {partition.committed}"
                 + ("" if partition.committed == partition.last else
                    f", NOT where the runs end ({partition.last})"))
    return f"{where}: read {shown} ({log_start}{group})"


def _kafka_config(request: AuditRequest) -> dict[str, Any]:
    """The librdkafka config: ``bootstrap.servers`` alone, or the Airflow connection's extra
    through the package's Kafka hook (Airflow is imported only here)."""
    if request.conn_id is None:
        assert request.bootstrap_servers is not None
        return {"bootstrap.servers": request.bootstrap_servers}
    from airflow_provider_kafka_spark.hooks.kafka import KafkaHook

    return KafkaHook(kafka_conn_id=request.conn_id).get_kafka_config()


def _text(value: object, flag: str, what: str) -> str:
    text = _optional_text(value, flag)
    if text is None:
        raise UsageError(f"{flag} is missing; pass {what}.")
    return text


def _optional_text(value: object, flag: str) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise UsageError(f"{flag} is empty; pass a value or leave the option out.")
    return text


def _timeout(value: object) -> float:
    try:
        seconds = float(str(value))
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 3600:  # also false for nan and inf
        raise UsageError(f"--timeout {value!r} is not a number of seconds; pass a positive "
                         "number of at most 3600, e.g. --timeout 30.")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m airflow_provider_kafka_spark``."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Commands of the Kafka-on-Spark Airflow provider.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    audit = commands.add_parser("audit", help=AUDIT_HELP, description=AUDIT_HELP,
                                epilog=AUDIT_EPILOG)
    for option in AUDIT_OPTIONS:
        audit.add_argument(*option.flags, **option.kwargs)
    audit.set_defaults(func=run_audit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m airflow_provider_kafka_spark``: parse ``argv`` and run the command. Returns
    the exit status (argparse exits with 2 on an unknown option or command)."""
    args = build_parser().parse_args(argv)
    status: int = args.func(args)
    return status


def get_airflow_cli_commands() -> list[Any]:
    """The commands this provider adds to ``airflow`` (Airflow 3.2+, provider info ``"cli"``):
    ``airflow kafka-spark audit``, the same options and exit status as
    ``python -m airflow_provider_kafka_spark audit``."""
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

    audit = ActionCommand(
        name="audit", help=AUDIT_HELP, description=AUDIT_HELP, epilog=AUDIT_EPILOG,
        func=_airflow_audit,
        args=tuple(Arg(option.flags, **option.kwargs) for option in AUDIT_OPTIONS),
    )
    return [GroupCommand(name="kafka-spark", help="Kafka on Spark provider commands",
                         subcommands=(audit,))]


def _airflow_audit(args: argparse.Namespace) -> None:
    """Airflow ignores a command's return value: exit with the status."""
    sys.exit(run_audit(args))
