"""What a table sink records in each table commit, and how the application's offsets are read
back: plain Python (no Spark), shared by the Iceberg and the Delta sink.

Every commit of an application to a table carries, in the table's own commit metadata (an
Iceberg snapshot summary, a Delta ``commitInfo.userMetadata``), a :class:`CommitRecord`:

* ``application`` and ``run``: who wrote, and which run (an Airflow dag run and map index);
* ``write_id``: ``<application>/<run>/<generation>/<digest of the ranges>`` (each part
  URL-quoted, so ``/`` separates parts only). Every row the commit writes carries it in the
  column :data:`WRITE_COLUMN`: that is how a later try finds what its run already committed
  (the data is the truth, also after the table's old commits expired), and which rows a
  reprocessing of the run replaces;
* ``ranges``: the run's ``[start, stop)`` per partition;
* ``offsets``: the application's stops **so far** (per partition, the highest stop of every
  commit of the application the writer saw, including this one), and ``base``: the id of the
  newest commit of the application that the writer saw (None: it saw none).

:func:`application_offsets` reads the application's stops from the newest commits backwards
and stops at the first commit that is the ``base`` of a commit already read: that commit's
stops, and all before it, are included in the commit that names it. Commits that raced each
other (two runs committing concurrently) each name an older base, so both are read. The walk
therefore reads the commits since the application's previous commit (plus those racing it),
not the table's history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from airflow_provider_kafka_spark.errors import ConfigurationError
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges

__all__ = ["PREFIX", "WRITE_COLUMN", "CommitRecord", "application_offsets", "run_prefix",
           "write_id"]

WRITE_COLUMN = "_kafka_spark_write"
"""The column (string) holding, on every row a table sink writes, the write id of the commit
that wrote it."""

PREFIX = "kafka-spark."
"""The prefix of the keys a commit records (Iceberg snapshot summary properties; the keys of
the Delta ``userMetadata`` JSON object)."""

Key = tuple[str, int]


def run_prefix(application: str, run: str) -> str:
    """The start of every write id of ``run`` of ``application``."""
    return f"{quote(application, safe='')}/{quote(run, safe='')}/"


def write_id(application: str, run: str, generation: int | str, ranges: OffsetRanges) -> str:
    """The id of one write of ``ranges`` by ``run`` of ``application``: the same for every try
    of it, another for another generation (a reprocessing on purpose) or other ranges."""
    bounds = json.dumps([[r.topic, r.partition, r.start, r.stop] for r in ranges])
    digest = hashlib.sha256(bounds.encode()).hexdigest()[:16]
    return f"{run_prefix(application, run)}{quote(str(generation), safe='')}/{digest}"


@dataclass(frozen=True)
class CommitRecord:
    """What one table commit of an application records (see the module docs)."""

    application: str
    run: str
    write_id: str
    ranges: tuple[tuple[str, int, int, int], ...]
    offsets: Mapping[Key, int]
    base: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        """String properties with :data:`PREFIX` (``extra`` too: e.g. the Airflow ids)."""
        offsets: dict[str, dict[str, int]] = {}
        for (topic, partition), stop in sorted(self.offsets.items()):
            offsets.setdefault(topic, {})[str(partition)] = stop
        properties = {
            "application": self.application,
            "run": self.run,
            "write-id": self.write_id,
            "ranges": json.dumps([list(r) for r in self.ranges], separators=(",", ":")),
            "offsets": json.dumps(offsets, separators=(",", ":"), sort_keys=True),
            **({"base": self.base} if self.base is not None else {}),
            **dict(self.extra),
        }
        return {PREFIX + k: v for k, v in properties.items()}

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any] | None) -> CommitRecord | None:
        """The record in a commit's properties; None for a commit no table sink made (or
        whose record cannot be read: it is then not the sink's)."""
        if not properties:
            return None
        found = {k[len(PREFIX):]: v for k, v in properties.items()
                 if isinstance(k, str) and k.startswith(PREFIX)}
        try:
            offsets = {(topic, int(p)): int(stop)
                       for topic, stops in json.loads(found["offsets"]).items()
                       for p, stop in stops.items()}
            ranges = tuple((str(t), int(p), int(a), int(b))
                           for t, p, a, b in json.loads(found["ranges"]))
            known = {"application", "run", "write-id", "ranges", "offsets", "base"}
            return cls(str(found["application"]), str(found["run"]), str(found["write-id"]),
                       ranges, offsets, found.get("base"),
                       {k: str(v) for k, v in found.items() if k not in known})
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def merged(offsets: Mapping[Key, int], ranges: OffsetRanges) -> dict[Key, int]:
    """``offsets`` with each range's stop where it is higher."""
    result = dict(offsets)
    for r in ranges:
        key = (r.topic, r.partition)
        result[key] = max(result.get(key, r.stop), r.stop)
    return result


@dataclass(frozen=True)
class ApplicationState:
    """The application's stops (per partition, the highest any of its commits recorded), the
    id of its newest commit (None: none found), how many commits were read, and the id of the
    table's newest commit (``head``: the first one read, whoever made it; None: the table has
    none)."""

    offsets: dict[Key, int]
    newest: str | None
    commits_read: int
    head: str | None = None


def application_offsets(commits: Iterable[tuple[str, Mapping[str, Any] | None]],
                        application: str) -> ApplicationState:
    """The stops ``application`` recorded, from ``commits``: ``(commit id, properties)`` of
    the table's commits, newest first (the current lineage). Reads no further than needed (see
    the module docs): pass a lazy iterable."""
    if not isinstance(application, str) or not application:
        raise ConfigurationError(f"application={application!r} is not valid; pass the name "
                                 "the table sink's commits record, e.g. '<dag_id>.<task_id>'.")
    offsets: dict[Key, int] = {}
    newest: str | None = None
    head: str | None = None
    bases: set[str] = set()
    read = 0
    for commit_id, properties in commits:
        read += 1
        head = head or commit_id
        if commit_id in bases:
            break
        record = CommitRecord.from_properties(properties)
        if record is None or record.application != application:
            continue
        newest = newest or commit_id
        for key, stop in record.offsets.items():
            offsets[key] = max(offsets.get(key, stop), stop)
        if record.base is not None:
            bases.add(record.base)
    return ApplicationState(offsets, newest, read, head)
