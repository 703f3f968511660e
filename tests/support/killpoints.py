"""The kill-point harness of exactly-once writes: ``tools/killpoint_harness.py`` (which
``tools/killpoints.py`` runs too)."""

from __future__ import annotations

from tools.killpoint_harness import (
    KillMoment,
    KillPoint,
    Workload,
    child_command,
    kill_moments,
    run_kill_point,
    start_child,
    write_plain,
    write_spark,
)

__all__ = ["KillMoment", "KillPoint", "Workload", "child_command", "kill_moments",
           "run_kill_point", "start_child", "write_plain", "write_spark"]
