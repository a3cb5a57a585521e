"""One writer per lake: a second writer is refused at once and told who holds the lake; a killed
holder's lock is taken over. Real processes, no JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from catalog.writer import LakeBusy, lock_path, writer_lock

HOLD = """
import sys, time
from pathlib import Path
from catalog.writer import writer_lock
with writer_lock(Path(sys.argv[1]), "lake", "the-lake"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(root) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_holders_lock_is_taken_over(tmp_path):
    holder = _holder(tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(LakeBusy) as refused, writer_lock(tmp_path, "lake", "the-lake"):
            pass
        assert time.monotonic() - started < 1.0  # at once, not after a timeout
        message = str(refused.value)
        assert f"the lake the-lake is being written by pid {holder.pid} on " in message and " since 20" in message
        assert "one writer per lake" in message
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert lock_path(tmp_path, "lake").exists()  # the killed holder's file stays; its lock went with it
    with writer_lock(tmp_path, "lake", "the-lake") as path:
        assert f'"pid": {os.getpid()}' in path.read_text()
    with writer_lock(tmp_path, "other", "another lake"):  # another catalog is another lake
        with pytest.raises(LakeBusy), writer_lock(tmp_path, "other", "another lake"):
            pass



def test_a_probe_leaves_the_holders_record_alone(tmp_path):
    with writer_lock(tmp_path, "lake", "the-lake") as path:
        held = path.read_text()
    with writer_lock(tmp_path, "lake", "the-lake", probe=True):
        pass
    assert path.read_text() == held  # a probe says nothing about who holds the lake
    holder = _holder(tmp_path)
    try:
        with pytest.raises(LakeBusy), writer_lock(tmp_path, "lake", "the-lake", probe=True):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
