"""Helpers of the tests against the secured broker (``tests/secured``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def records_of(config: dict[str, Any], topic: str, partitions: int) -> list[tuple]:
    """(partition, offset, key, value) of every committed record, read with a plain consumer."""
    from tools.kafka_records import consume_all

    return [(p, o, k, v) for p, o, k, v, _ in consume_all(config, topic, partitions,
                                                             "read_committed")]


ROOT = Path(__file__).resolve().parents[2]


def first_event(trigger: Any, timeout: float = 30.0) -> Any:
    """The first event of ``trigger.run()`` (as the triggerer runs it), in a fresh event loop."""
    import asyncio

    async def first() -> Any:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))
