"""Ports for the servers lakemv starts are drawn outside the kernel's ephemeral range: a port the kernel
hands out meanwhile (another process's bind(0), an outgoing connection) can never be the one a server
is told to take (CI: a Prefect API whose port a neighbour took between the pick and the bind)."""

from __future__ import annotations

import socket

from lakemv.core.runtime import ports


def test_a_free_port_is_bindable_and_outside_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port()
        assert 10_000 <= port < 65_536 and not low <= port <= high, (port, low, high)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_not_picked(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        busy = taken.getsockname()[1]
        monkeypatch.setattr(ports, "candidate_ports", lambda: [range(busy, busy + 1), range(busy, busy + 1)])
        picked = ports.free_port(attempts=5)
        assert picked != busy  # every draw was taken: the kernel's own pick
    finally:
        taken.close()


def test_the_ranges_leave_out_the_ephemeral_range(monkeypatch, tmp_path):
    path = tmp_path / "range"
    path.write_text("20000\t50000\n")
    monkeypatch.setattr(ports, "_RANGE_FILE", path)
    assert ports.candidate_ports() == [range(10_000, 20_000), range(50_001, 65_536)]
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "missing")
    assert ports.ephemeral_range() == (32_768, 60_999)
