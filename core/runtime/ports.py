"""Free TCP ports on loopback for the servers lakemv starts (a temporary Prefect API, the local CDC stack,
the scale-out stack).

A port is picked, then handed to a server that binds it a moment later. A port the kernel picks itself
(`bind(0)`) comes from its ephemeral range, the range it also gives every outgoing connection and every
other `bind(0)` on the machine, so a server starting beside lakemv (Spark's RPC endpoints, a test's
other stack) could take it in that moment: seen in CI as a Prefect API that "did not start" because
its port was in use. Ports are therefore drawn at random from outside that range, where nothing is
handed out unasked.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below: well-known and registered services' ports


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the ports it hands out itself (Linux's default when unreadable)."""
    try:
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32_768, 60_999
    return low, high


def candidate_ports() -> list[range]:
    """The port ranges `free_port` draws from: above `_LOWEST`, outside the ephemeral range."""
    low, high = ephemeral_range()
    ranges = [range(_LOWEST, min(low, 65_536)), range(max(high + 1, _LOWEST), 65_536)]
    return [r for r in ranges if len(r)]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(attempts: int = 200) -> int:
    """A TCP port free on loopback now, outside the kernel's ephemeral range (the kernel's own pick when
    every draw is taken)."""
    ranges = candidate_ports()
    weights = [len(r) for r in ranges]
    for _ in range(attempts if ranges else 0):
        port = random.choice(random.choices(ranges, weights)[0])  # noqa: S311 - spreading picks, not secrecy
        if _bindable(port):
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
