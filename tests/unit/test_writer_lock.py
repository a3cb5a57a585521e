"""One writer per lake: a second writer is refused at once and told who holds the lake; a killed
holder's lock is taken over. Compaction takes turns with the stream's units. Real processes and
threads, no JVM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from lakemv.catalog import writer
from lakemv.catalog.storage import LocalLocation
from lakemv.catalog.writer import CommitTurns, LakeBusy, WriterLease, lock_path, writer_lock
from lakemv.core.runtime.files import replace_file

HOLD = """
import sys, time
from pathlib import Path
from lakemv.catalog.storage import LocalLocation
from lakemv.catalog.writer import writer_lock
lease = LocalLocation(Path(sys.argv[2])) if len(sys.argv) > 2 else None
with writer_lock(Path(sys.argv[1]), "lake", "the-lake", lease=lease):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(root, lake=None) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(root), *([str(lake)] if lake else [])], stdout=subprocess.PIPE, text=True)
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


class _Stream(threading.Thread):
    """A stream applying units of `seconds` each, recording when each ran."""

    def __init__(self, root, seconds: float):
        super().__init__(daemon=True)
        self.turns, self.seconds = CommitTurns(root, "lake"), seconds
        self.units: list[tuple[float, float]] = []
        self.waits: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with self.turns.unit() as waited:
                started = time.monotonic()
                time.sleep(self.seconds)
                self.units.append((started, time.monotonic()))
            self.waits.append(waited())
        self.turns.close()


def test_compaction_turns_never_overlap_a_unit_and_the_stream_runs_a_unit_between_turns(tmp_path):
    stream = _Stream(tmp_path, 0.05)
    stream.start()
    compaction = CommitTurns(tmp_path, "lake")
    turns: list[tuple[float, float, int]] = []
    try:
        while len(stream.units) < 3:
            time.sleep(0.01)
        for _ in range(4):  # four tables
            with compaction.turn(wait=5) as held:
                assert held
                started, before = time.monotonic(), len(stream.units)
                time.sleep(0.3)  # the rewrite
                assert len(stream.units) == before  # no unit ran during the turn
                turns.append((started, time.monotonic(), before))
    finally:
        stream.stop.set()
        stream.join(timeout=10)
        compaction.close()
    for started, ended, _ in turns:
        assert not [u for u in stream.units if u[0] < ended and u[1] > started], "a unit overlapped a turn"
    counts = [before for _, _, before in turns]
    assert all(b > a for a, b in zip(counts, counts[1:])), f"the stream got no unit between turns: {counts}"
    assert max(stream.waits) >= 0.2  # the stream waited for the turns, and says how long


def test_a_turn_waits_for_a_long_unit_then_gives_up_and_a_killed_compaction_frees_the_stream(tmp_path):
    stream = _Stream(tmp_path, 1.5)
    stream.start()
    compaction = CommitTurns(tmp_path, "lake")
    try:
        time.sleep(0.3)  # inside the first 1.5 s unit
        started = time.monotonic()
        with compaction.turn(wait=0.3) as held:
            assert not held and time.monotonic() - started < 1.0  # ran beside the unit: races are retried
    finally:
        stream.stop.set()
        stream.join(timeout=10)
        compaction.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", TURN, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "turn"
    waiting = _Stream(tmp_path, 0.01)
    waiting.start()
    time.sleep(0.5)
    assert not waiting.units  # held off by the turn
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    deadline = time.monotonic() + 5
    while not waiting.units and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting.stop.set()
    waiting.join(timeout=10)
    assert waiting.units, "a killed compaction left the stream waiting"


TURN = """
import sys, time
from pathlib import Path
from lakemv.catalog.writer import CommitTurns
with CommitTurns(Path(sys.argv[1]), "lake").turn() as held:
    print("turn", flush=True)
    time.sleep(60)
"""


def test_a_writer_started_elsewhere_is_refused_by_the_lease_in_the_lake(tmp_path):
    """Two driver folders (another working directory, or another host) on one lake: the lease in the
    lake refuses the second writer; a holder that ended, or a lease not renewed, is taken over."""
    lake = LocalLocation(tmp_path / "lake")
    holder = _holder(tmp_path / "here", tmp_path / "lake")
    try:
        with pytest.raises(LakeBusy) as refused, writer_lock(tmp_path / "there", "lake", "the-lake", lease=lake):
            pass
        assert f"being written by pid {holder.pid} on " in str(refused.value)
        with pytest.raises(LakeBusy), writer_lock(tmp_path / "there", "lake", "the-lake", probe=True, lease=lake):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    with writer_lock(tmp_path / "there", "lake", "the-lake", lease=lake):  # its holder ended: taken over at once
        info = json.loads((tmp_path / "lake" / "_lakemv" / "writer-lake.json").read_text())
        assert info["pid"] == os.getpid()
    assert not (tmp_path / "lake" / "_lakemv" / "writer-lake.json").exists()  # released: removed

    elsewhere = {"pid": 4242, "host": "another-host", "since": time.time(), "command": "lakemv ingest", "token": "x", "renewed": time.time()}
    (tmp_path / "lake" / "_lakemv" / "writer-lake.json").write_text(json.dumps(elsewhere))
    with pytest.raises(LakeBusy) as refused, writer_lock(tmp_path / "there", "lake", "the-lake", lease=lake):
        pass
    assert "pid 4242 on another-host" in str(refused.value)
    stale = {**elsewhere, "renewed": time.time() - writer.LEASE_SECONDS - 1}
    (tmp_path / "lake" / "_lakemv" / "writer-lake.json").write_text(json.dumps(stale))
    with writer_lock(tmp_path / "there", "lake", "the-lake", lease=lake):  # not renewed: its holder is gone
        pass


def test_a_held_lease_is_renewed_and_a_takeover_is_noticed(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "RENEW_SECONDS", 0.05)
    lost: list[bool] = []
    lease = WriterLease(LocalLocation(tmp_path), "lake", "the-lake", settle=0.01, on_lost=lambda: lost.append(True))
    lease.take()
    try:
        first = json.loads(lease.location.read_text())["renewed"]
        deadline = time.monotonic() + 5  # renewed every 0.05 s; a loaded machine may run the thread late
        while json.loads(lease.location.read_text())["renewed"] <= first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(lease.location.read_text())["renewed"] > first
        other = json.dumps({"pid": 1, "host": "h", "token": "other", "renewed": time.time()})
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            if json.loads(lease.location.read_text())["token"] != "other":
                # written first, or a renewal that had read before our write wrote over it (a real taker's
                # read-back after its settle would then refuse to start): take it over again
                lease.location.write_text(other)
            time.sleep(0.02)
        assert lost and lease.lost
    finally:
        lease.release()
    assert json.loads(lease.location.read_text())["token"] == "other"  # another's lease is left alone


def test_threads_replacing_one_file_never_leave_a_mix(tmp_path):
    """A renewal thread and a takeover in one process each replace the lease whole."""
    target = tmp_path / "lease.json"
    documents = [json.dumps({"token": str(n) * (n + 1)}) for n in range(4)]

    def replace(document: str) -> None:
        for _ in range(200):
            replace_file(target, document)

    threads = [threading.Thread(target=replace, args=(d,)) for d in documents]
    for thread in threads:
        thread.start()
    seen = set()
    while any(thread.is_alive() for thread in threads):
        seen.add(target.read_text() if target.exists() else documents[0])
    for thread in threads:
        thread.join()
    assert seen <= set(documents)
    assert [p.name for p in tmp_path.iterdir()] == ["lease.json"]  # no temporary file left behind
