"""The file sink's swap protocol: the folders of one attempt (:class:`Layout`) and the steps
that inspect, commit and abort it, each ``step(files, notes, layout, path, ...)`` on a
:class:`~airflow_provider_kafka_spark.sinks.files.filesystems.Files` and returning a
JSON-ready value (so it can run on an executor over Spark Connect).

* :func:`inspect` (step 1, before the empty write): refuse a file, recover an interrupted swap;
* :func:`check_staged` (step 1 over Spark Connect): the executor sees the staging folder;
* :func:`commit` (step 3): the manifest, the two renames, the cleanup;
* :func:`abort` (step 4): put the previous output back, delete the staging folder.

The protocol, and which renames are atomic on which file system, is described in
:mod:`airflow_provider_kafka_spark.sinks.files`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError, error_line
from airflow_provider_kafka_spark.sinks.files.filesystems import Files, Notes

MANIFEST_NAME = "_kafka_spark_manifest.json"
"""The manifest file in each output folder; Spark's readers skip names starting with ``_``."""
STAGING_MARK = "._kafka_spark_staging-"
"""``.<name>`` + this + ``<token>``: the folder an attempt writes before the swap."""
PREVIOUS_MARK = "._kafka_spark_previous-"
"""``.<name>`` + this + ``<token>``: where the previous output waits during the swap."""


@dataclass(frozen=True)
class Layout:
    """The folders of one attempt (strings: Hadoop URIs, or local paths over Connect)."""

    target: str
    parent: str
    name: str
    staging: str
    previous: str

    @classmethod
    def of(cls, target: str, parent: str, name: str, token: str,
           child: Callable[[str, str], str]) -> Layout:
        """The layout of ``target`` (``<parent>/<name>``) for the attempt ``token``;
        ``child(folder, name)`` joins paths the file system's way."""
        return cls(target, parent, name, child(parent, f".{name}{STAGING_MARK}{token}"),
                   child(parent, f".{name}{PREVIOUS_MARK}{token}"))


# -- the protocol's steps: (files, notes, layout, path, ...) -> JSON-ready value ------------


def inspect(files: Files, notes: Notes, layout: Layout, path: str) -> str | None:
    """Step 1 before the empty write: refuse a file at ``path``, put back an output an
    interrupted swap set aside, and return the topmost parent folder that does not exist yet
    (the write creates it; :func:`abort` removes it again while empty)."""
    if files.exists(layout.target) and not files.is_dir(layout.target):
        raise ConfigurationError(
            f"the file sink's path {path!r} is a file; pass a folder (the sink replaces "
            "the folder as a whole), or remove the file."
        )
    _recover(files, notes, layout, path)
    created = None
    folder: str | None = layout.parent
    while folder is not None and not files.exists(folder):
        created, folder = folder, files.parent(folder)
    return created


def check_staged(files: Files, notes: Notes, layout: Layout, path: str) -> None:
    """Over Spark Connect, after the empty write: the executor must see what Spark wrote."""
    if not files.is_dir(layout.staging):
        raise ConfigurationError(
            f"Spark wrote the file sink's staging folder file:{layout.staging}, but the "
            f"executor that swaps it in does not see it on its file system. Over Spark "
            f"Connect, {path!r} must be on a file system every Spark node (and the Connect "
            "server) mounts at the same place: one machine, or a network mount. Use such a "
            "path, or a classic session for other file systems. Nothing was read; the empty "
            "staging folder may remain on the node that wrote it."
        )


def keep_only(files: Files, notes: Notes, layout: Layout, path: str,
              names: list[str]) -> None:
    """Step 2 of a write by the readers themselves: the staging folder keeps the files
    ``names`` (what the successful tasks reported) and a ``_SUCCESS`` mark; every other entry
    (the empty write's file, files of failed or repeated tasks) is deleted. With no names,
    the empty write's output stays: a folder with the output's schema and no rows."""
    if not names:
        return
    missing = _missing(files, layout.staging, set(names))
    if missing:
        raise SinkError(
            f"the file sink's staging folder for {path!r} lacks {sorted(missing)[:3]}, "
            "which the readers reported writing: the executors write to a file system this "
            "driver does not see (a local path on a cluster of several machines). Write to a "
            "file system every machine shares (hdfs:, s3a:, or a shared mount). Nothing was "
            "published.")
    _keep_only_in(files, layout.staging, set(names))
    files.write_text(files.child(layout.staging, "_SUCCESS"), "")


def _by_first(names: set[str]) -> dict[str, set[str]]:
    """``names`` (relative, maybe in partition folders: ``hour=07/part-0.parquet``) by their
    first part, each with the rest of the names under it."""
    tops: dict[str, set[str]] = {}
    for name in names:
        head, _, rest = name.partition("/")
        tops.setdefault(head, set())
        if rest:
            tops[head].add(rest)
    return tops


def _missing(files: Files, folder: str, names: set[str]) -> set[str]:
    present = set(files.names(folder))
    missing: set[str] = set()
    for head, rest in _by_first(names).items():
        if head not in present:
            missing |= {f"{head}/{r}" for r in rest} if rest else {head}
        elif rest:
            missing |= {f"{head}/{m}" for m in _missing(files, files.child(folder, head), rest)}
    return missing


def _keep_only_in(files: Files, folder: str, names: set[str]) -> None:
    """Delete every entry of ``folder`` but ``names`` (and the folders on their way)."""
    tops = _by_first(names)
    for name in files.names(folder):
        if name not in tops:
            files.delete(files.child(folder, name), True)
        elif tops[name]:
            _keep_only_in(files, files.child(folder, name), tops[name])


def commit(files: Files, notes: Notes, layout: Layout, path: str, manifest: str) -> None:
    """Step 3: the manifest into the staging folder, then the swap, then the cleanup."""
    _write_manifest(files, layout, path, manifest)
    previous = None
    if files.exists(layout.target):
        _rename(files, layout.target, layout.previous, "set the previous output aside", path)
        previous = layout.previous
    try:
        _rename(files, layout.staging, layout.target, "move the new output into place", path)
    except BaseException:
        _put_previous_back(files, layout, path)
        raise
    if previous is not None:
        _delete(files, notes, previous, "the previous output", path)
    for leftover in _siblings(files, layout, STAGING_MARK) + _siblings(files, layout,
                                                                      PREVIOUS_MARK):
        _delete(files, notes, leftover, "a leftover of an interrupted attempt", path)


def abort(files: Files, notes: Notes, layout: Layout, path: str, created: str | None) -> None:
    """Step 4: put the previous output back if this attempt set it aside, delete the staging
    folder and the empty parent folders :func:`inspect` found missing."""
    try:
        _put_previous_back(files, layout, path)
        if files.exists(layout.staging):
            files.delete(layout.staging, True)
        _remove_created_parents(files, layout, created)
    except Exception as exc:  # runs while another exception propagates: log, never mask it
        notes.append((logging.WARNING, (
            f"The file sink could not clean up after the failure: {error_line(exc)}. A staging "
            f"folder ({STAGING_MARK}*) may remain next to {path}; the next successful run of the "
            "same path deletes it.")))


# -- what the steps share ----------------------------------------------------------------------


def _siblings(files: Files, layout: Layout, mark: str) -> list[str]:
    """The paths next to ``path`` named ``.<name><mark>*``, oldest token first."""
    if not files.exists(layout.parent):
        return []
    prefix = f".{layout.name}{mark}"
    return [files.child(layout.parent, n)
            for n in sorted(n for n in files.names(layout.parent) if n.startswith(prefix))]


def _recover(files: Files, notes: Notes, layout: Layout, path: str) -> None:
    """``path`` missing while a previous output waits aside: an attempt died between the
    two renames of its swap. Rename the newest such folder back to ``path``."""
    if files.exists(layout.target):
        return
    waiting = _siblings(files, layout, PREVIOUS_MARK)
    if waiting:
        _rename(files, waiting[-1], layout.target,
                "restore the output an interrupted swap set aside", path)
        notes.append((logging.WARNING, (
            f"{path} was missing and its previous output waited at {waiting[-1]} (an attempt "
            "was stopped in the middle of its swap): renamed it back.")))


def _put_previous_back(files: Files, layout: Layout, path: str) -> None:
    if files.exists(layout.previous) and not files.exists(layout.target):
        _rename(files, layout.previous, layout.target, "put the previous output back", path)


def _rename(files: Files, source: str, destination: str, purpose: str, path: str) -> None:
    where = f"{source} -> {destination}"
    if files.exists(destination):
        raise SinkError(
            f"cannot {purpose} ({where}): the destination exists. Is another run writing "
            f"{path!r} at the same time? Run one writer per folder; remove the "
            "destination if it is a leftover."
        )
    try:
        renamed = files.rename(source, destination)
    except Exception as exc:
        raise SinkError(f"could not {purpose} ({where}): {error_line(exc)}. Check the "
                        "permissions on the output's parent folder.") from exc
    if not renamed:
        raise SinkError(f"the file system refused to {purpose} ({where}). Check that the "
                        "source exists and the parent folder can be written.")


def _delete(files: Files, notes: Notes, target: str, what: str, path: str) -> None:
    """Delete ``target`` recursively; a failure is logged, not raised (the output is already
    in place, and the next successful run deletes it)."""
    try:
        files.delete(target, True)
        notes.append((logging.INFO, f"Deleted {what}: {target}"))
    except Exception as exc:  # the commit is done; a leftover is only clutter
        notes.append((logging.WARNING, f"Could not delete {what} at {target}: "
                                       f"{error_line(exc)}. The next successful run of {path} "
                                       "deletes it."))


def _write_manifest(files: Files, layout: Layout, path: str, text: str) -> None:
    manifest = files.child(layout.staging, MANIFEST_NAME)
    try:
        files.write_text(manifest, text)
    except Exception as exc:
        raise SinkError(f"could not write the manifest {manifest}: {error_line(exc)}. "
                        f"The output at {path!r} is unchanged; check the space and "
                        "permissions of its parent folder, then run again.") from exc


def _remove_created_parents(files: Files, layout: Layout, created: str | None) -> None:
    """Remove, bottom-up, the folders above the staging folder that prepare() created,
    while they are empty (never a folder holding anything)."""
    if created is None:
        return
    chain: list[str] = []
    folder: str | None = layout.parent
    while folder is not None and folder != created:
        chain.append(folder)
        folder = files.parent(folder)
    if folder is None:  # not below the created folder: nothing of ours to remove
        return
    for folder in [*chain, created]:
        if not files.exists(folder) or files.names(folder):
            return
        files.delete(folder, False)
