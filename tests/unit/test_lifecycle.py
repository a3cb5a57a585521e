"""The stop logic of `lakemv.core.runtime.lifecycle`, in a plain Python child process (no JVM, no server).

The child adopts a `sleep` child of its own (standing in for the JVM) and is then signalled the way
a terminal does; the tests check how fast it leaves and that the stand-in is gone.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lakemv.catalog.settings import PROJECT_ROOT

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    from lakemv.core.runtime import lifecycle

    lifecycle.install(grace=float(sys.argv[1]))
    helper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    lifecycle.adopt("helper", helper)
    mode = sys.argv[2]
    try:
        print(helper.pid, flush=True)
        while True:
            time.sleep(0.05)
            lifecycle.check()
    except lifecycle.Interrupted:
        print("interrupted", flush=True)
        if mode == "slow-cleanup":  # a cleanup that hangs: only a second signal or the grace period end it
            time.sleep(120)
    lifecycle.finish(0)
    """
)


def run(tmp_path: Path, grace: float, mode: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "child.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(script), str(grace), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )
    helper = int(process.stdout.readline())
    return process, helper


def alive(pid: int) -> bool:
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "zombie" not in state


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_group_interrupts_the_main_thread_and_stops_the_children(tmp_path, number):
    process, helper = run(tmp_path, grace=30, mode="cooperative")
    os.killpg(process.pid, number)
    out, err = process.communicate(timeout=10)
    assert "interrupted" in out
    assert process.returncode == 128 + number
    assert f"stopping ({number.name})" in err and "Traceback" not in err
    assert not alive(helper), "the adopted child outlived its parent"


def test_a_second_signal_exits_at_once_and_kills_the_children(tmp_path):
    process, helper = run(tmp_path, grace=60, mode="slow-cleanup")
    os.killpg(process.pid, signal.SIGINT)
    assert process.stdout.readline().strip() == "interrupted"
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=5)
    assert time.monotonic() - started < 2
    assert process.returncode == 130
    assert "SIGINT again: exiting now" in process.stderr.read()
    assert not alive(helper)


def test_the_grace_period_ends_a_stop_that_hangs(tmp_path):
    process, helper = run(tmp_path, grace=1, mode="slow-cleanup")
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=10)
    assert 0.9 < time.monotonic() - started < 5
    assert process.returncode == 143
    assert "did not stop within 1s" in process.stderr.read()
    assert not alive(helper)


def test_py4j_network_errors_are_not_logged_once_lakemv_quiets_them(caplog):
    """py4j logs a network error on the root logger, traceback included, before raising it; at exit
    a finalizer's call into a JVM that just exited printed one under lakemv's `error:` line."""
    from py4j import protocol
    from py4j.java_gateway import GatewayClient

    from lakemv.spark.session import _not_py4j, quiet_py4j

    class Reset:
        def send_command(self, command):  # noqa: ANN001, ANN202
            raise protocol.Py4JNetworkError("Error while sending or receiving", ConnectionResetError(104, "reset"))

        def close(self, reset=False):  # noqa: ANN001, ANN202, FBT002
            pass

    client = GatewayClient.__new__(GatewayClient)
    client._get_connection = Reset

    def call() -> None:
        assert client.send_command("m\nd\no1\ne\n") == protocol.ERROR  # the caller raises from it

    root = logging.getLogger()
    quieted = _not_py4j in root.filters  # a SparkSession started earlier in this process quiets py4j
    root.removeFilter(_not_py4j)
    try:
        call()
        assert any("Exception while sending command" in r.getMessage() for r in caplog.records)  # py4j's own
        caplog.clear()
        quiet_py4j()
        call()
        assert caplog.records == []
    finally:
        root.removeFilter(_not_py4j)
        if quieted:
            root.addFilter(_not_py4j)


def test_after_a_stop_signal_an_ignored_keyboard_interrupt_prints_no_traceback(monkeypatch):
    """The stop's KeyboardInterrupt can land inside a C callback (pydantic building a validator), where
    Python prints "Exception ignored in ..." and a traceback: once stopping, that is swallowed."""
    from types import SimpleNamespace

    from lakemv.core.runtime import lifecycle

    shown = []
    monkeypatch.setattr(lifecycle, "_default_unraisable", shown.append)
    interrupt = SimpleNamespace(exc_value=lifecycle.Interrupted("SIGINT"))
    other = SimpleNamespace(exc_value=ValueError("a real error"))
    lifecycle._unraisable(interrupt)
    assert shown == [interrupt]  # not stopping: shown as Python would
    monkeypatch.setattr(lifecycle, "STOP", SimpleNamespace(is_set=lambda: True))
    lifecycle._unraisable(interrupt)
    lifecycle._unraisable(other)
    assert shown == [interrupt, other]


# A child driven by its stdin, as Spark's JVM gateway is: it leaves in order on EOF (writing `left`), as
# a JVM runs its shutdown hooks while its other threads may still be committing.
STDIN_CHILD = textwrap.dedent(
    """
    import subprocess, sys
    from lakemv.core.runtime import lifecycle

    lifecycle.install(grace=30)
    child = "import sys, pathlib; sys.stdin.read(); pathlib.Path(sys.argv[1]).write_text('in order')"
    jvm = subprocess.Popen([sys.executable, "-c", child, sys.argv[1]], stdin=subprocess.PIPE, start_new_session=True)
    lifecycle.adopt("spark", jvm)
    print(jvm.pid, flush=True)
    if sys.argv[2] == "signalled":
        try:
            sys.stdin.readline()  # until the signal
        except lifecycle.Interrupted:
            pass
    lifecycle.finish(0)
    """
)


@pytest.mark.parametrize("how", ["finished", "signalled"])
def test_a_stdin_driven_child_leaves_in_order_at_a_finish_and_is_killed_after_a_stop_signal(tmp_path, how):
    """A JVM asked to leave in order after a stop signal would run its shutdown hooks beside a commit in
    flight (Iceberg then deleted a committed snapshot's files): after a signal it is killed; a run that
    ends by itself closes its stdin as before."""
    script, left = tmp_path / "child.py", tmp_path / "left"
    script.write_text(STDIN_CHILD)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(script), str(left), how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    jvm = int(process.stdout.readline())
    if how == "signalled":
        os.killpg(process.pid, signal.SIGINT)
    process.communicate(timeout=15)
    assert not alive(jvm)
    assert left.exists() == (how == "finished"), left
