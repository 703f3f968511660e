"""What the benchmarks measure besides wall-clock time: CPU seconds of every process of a run
and the peak RSS of Spark's Python workers."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil

KINDS = ("jvm", "python", "driver")


class ProcessTree:
    """Samples this process and every process under it while a run is timed (every 50 ms).

    CPU seconds per kind: ``jvm`` (Spark's JVM and its threads, Java producers/consumers),
    ``python`` (Spark's Python workers or other Python children, native librdkafka threads
    included) and ``driver`` (this process). Peak RSS of the Python children and of the JVM.
    Processes that start during the run count from zero; a child's CPU after its last sample is
    missed (a Python worker lives across runs, so little is). The children ``exclude`` names
    (pids), and everything under them, are not counted: helpers of another measurement that
    idle meanwhile. The children ``kinds`` names (pid -> kind), and everything under them, are
    counted under that kind of their own (e.g. ``{server_pid: "s3_server"}``: a service both
    sides of a comparison use), not as ``python``/``jvm``.
    """

    def __init__(self, exclude: tuple[int, ...] = (),
                 kinds: Mapping[int, str] | None = None) -> None:
        self._kinds = dict(kinds or {})
        self.cpu_s = dict.fromkeys((*KINDS, *self._kinds.values()), 0.0)
        self.peak_python_rss = 0
        self.peak_python_rss_total = 0
        self.peak_jvm_rss = 0
        self._exclude = set(exclude)
        self._stop = threading.Event()
        self._thread = threading.Thread()
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._driver_first = 0.0
        self._named: dict[int, str] = {}

    def __enter__(self) -> ProcessTree:
        self._named = self._name_kinds()
        self._first = {p.pid: _cpu(p) for p in self._children(psutil.Process())}
        self._last = {}
        self._driver_first = _cpu(psutil.Process())
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample_once(psutil.Process())
        self.cpu_s = dict.fromkeys((*KINDS, *self._kinds.values()), 0.0)
        for pid, (kind, cpu) in self._last.items():
            self.cpu_s[kind] += cpu - self._first.get(pid, 0.0)
        self.cpu_s["driver"] = _cpu(psutil.Process()) - self._driver_first

    @property
    def total_cpu_s(self) -> float:
        return sum(self.cpu_s.values())

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self._sample_once(me)
            time.sleep(0.05)

    def _sample_once(self, me: psutil.Process) -> None:
        rss = []
        for child in self._children(me):
            try:
                kind = self._named.get(child.pid) or (
                    "jvm" if "java" in child.name().lower() else "python")
                self._last[child.pid] = (kind, _cpu(child))
                if kind == "python":
                    rss.append(child.memory_info().rss)
                elif kind == "jvm":
                    self.peak_jvm_rss = max(self.peak_jvm_rss, child.memory_info().rss)
            except psutil.Error:
                continue
        if rss:
            self.peak_python_rss = max(self.peak_python_rss, max(rss))
            self.peak_python_rss_total = max(self.peak_python_rss_total, sum(rss))

    def _name_kinds(self) -> dict[int, str]:
        """pid -> kind for the ``kinds`` processes and everything under them now."""
        named = {}
        for pid, kind in self._kinds.items():
            named[pid] = kind
            try:
                named.update((p.pid, kind) for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        return named

    def _children(self, me: psutil.Process) -> list[psutil.Process]:
        if not self._exclude:
            return me.children(recursive=True)
        left_out = set(self._exclude)
        for pid in self._exclude:
            try:
                left_out.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        return [p for p in me.children(recursive=True) if p.pid not in left_out]


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def timed(fn: Callable[[], float | None]) -> float:
    """Seconds ``fn`` took, or the seconds it reports itself."""
    started = time.perf_counter()
    reported = fn()
    return reported if reported is not None else time.perf_counter() - started


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Median, min and max of ``values``."""
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}


def cpu_panel(ax: Any, labels: list[str], colors: list[str],
              spreads: list[dict[str, float]], title: str) -> None:
    """Bars of the median CPU seconds per million records, whiskers from min to max."""
    medians = [c["median"] for c in spreads]
    errors = [[m - c["min"] for m, c in zip(medians, spreads, strict=True)],
              [c["max"] - m for m, c in zip(medians, spreads, strict=True)]]
    bars = ax.bar(labels, medians, color=colors, yerr=errors, capsize=4)
    ax.bar_label(bars, fmt="%.2f", label_type="center", color="white")
    ax.set_ylabel("CPU seconds per million records (all processes)")
    ax.set_title(f"{title} (bars: median, whiskers: min-max)", fontsize=10)
