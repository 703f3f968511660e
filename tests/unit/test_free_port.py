"""``tools.processes.free_port``: the suite's servers get ports no other process is handed.

A port the kernel handed out for ``bind(("127.0.0.1", 0))`` comes from its ephemeral range,
the range every other process's ``bind(0)`` (a Spark UI on port 0, a test's own listener) and
every outgoing connection draws from too: between the moment a launcher picked such a port and
the moment its server bound it, another process could take it (a clean-clone CI run: a Spark
master's UI port went to another driver's UI, whose HTML page the launcher then read as the
master's JSON). So the suite picks its ports below that range.
"""

from __future__ import annotations

import socket
from pathlib import Path

from tools.processes import free_port


def test_a_free_port_is_outside_the_kernels_ephemeral_range_and_can_be_bound() -> None:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = {free_port() for _ in range(50)}
    assert all(not low <= port <= high for port in ports), sorted(ports)
    assert all(1024 < port < 65536 for port in ports), sorted(ports)
    assert len(ports) > 40  # random picks: not one port handed to everyone
    for port in sorted(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_with_a_listener_is_never_picked() -> None:
    taken = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen(1)
            taken.append(s)
        ports = {s.getsockname()[1] for s in taken}
        assert len(ports) == 20
        assert not ports & {free_port() for _ in range(200)}
    finally:
        for s in taken:
            s.close()
