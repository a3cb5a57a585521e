"""One writer per lake: an ingest holds the lake's writer lock for as long as it runs.

Two streams applying the same changes would race on every commit (Iceberg's retries keep the data
right, but an operator sees Java traces, not the reason). The lock is an advisory `flock` on a file in
the driver's own folder (`LakeSettings.local_root`), so the kernel drops it with the process that
held it however that process ended: a killed holder leaves no stale lock to clean up, and the next
writer takes it over. The file says who holds it (pid, host, since, command) for the refusal.

A `flock` is seen by one host only, and the driver's folder of a lake in an object store depends on
where the writer started. So the holder also keeps a lease in the lake itself (`WriterLease`,
`<warehouse>/_lakemv/writer-<catalog>.json`), renewed every few seconds: a writer elsewhere finds it
fresh and is refused the same way; a lease not renewed for `LEASE_SECONDS` (its holder is gone), or
held by a process of this host that no longer runs, is taken over.
Backfill and verify are built to run beside an ingest and take no lock.

Compaction takes turns with the stream (`CommitTurns`): a rewrite replaces the files a stream's
MERGEs add deletes to every few seconds, so beside a busy stream it lost every race. While compaction
rewrites a table, the stream waits between units (a unit is never cut), then goes on.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from lakemv.catalog.storage import Location
from lakemv.core.errors import LakemvError
from lakemv.core.runtime.files import replace_file


class LakeBusy(LakemvError):
    """Another process is writing this lake (terminal: stop it, or wait for it to end)."""


def lock_path(local_root: Path, catalog_name: str) -> Path:
    return local_root / "_lakemv" / f"writer-{catalog_name}.lock"


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    return _who(info)


def _who(info: dict) -> str:
    if not info:
        return "another process (it has not said who yet)"
    since = datetime.fromtimestamp(info.get("since", 0), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"pid {info.get('pid')} on {info.get('host')} since {since} ({info.get('command', '?')})"


def _record() -> dict:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:4]))
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command}


def _busy(lake: str, holder: str) -> LakeBusy:
    return LakeBusy(f"the lake {lake} is being written by {holder}: one writer per lake; stop that ingest first (or wait for it to finish)")


@contextmanager
def writer_lock(
    local_root: Path, catalog_name: str, lake: str, *, probe: bool = False, lease: Location | None = None,
    on_lost: Callable[[], None] | None = None,
) -> Iterator[Path]:
    """Hold the lake's writer lock for the block; LakeBusy at once if another process holds it.
    With `lease` (the lake's location), also hold its `WriterLease`, for writers on other hosts
    (`on_lost`: called if another writer takes it over while the block runs).
    With `probe`, only check that it is free (the holder's record is left as it is)."""
    path = lock_path(local_root, catalog_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held for the block
    except OSError as exc:
        raise LakeBusy(f"cannot open the lake's writer lock {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(lake, _holder(path)) from None
        held = WriterLease(lease, catalog_name, lake, on_lost=on_lost) if lease is not None else None
        if probe:
            if held is not None:
                held.check()
            yield path
            return
        if held is not None:
            held.take()
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(_record()))
            handle.flush()
            yield path
        finally:
            if held is not None:
                held.release()
    finally:
        handle.close()  # closing the file releases the lock


LEASE_SECONDS = 30.0  # a lease not renewed for this long is stale: its holder is gone
RENEW_SECONDS = 5.0


class WriterLease:
    """The writer lock across hosts: a small file in the lake, renewed by a thread while held.

    Object stores have no locks; the lease is checked, written, then read back after a short settle,
    so of two writers starting at the same moment the one whose write landed last keeps it and the
    other is refused. A holder that finds its lease taken over (it stalled for longer than
    `LEASE_SECONDS`) calls `on_lost`, which stops the stream before its next unit.
    """

    def __init__(self, lake: Location, catalog_name: str, name: str, *, settle: float = 0.5, on_lost: Callable[[], None] | None = None):
        self.location = lake / "_lakemv" / f"writer-{catalog_name}.json"
        self.name, self.settle = name, settle
        self.token = uuid.uuid4().hex
        self.on_lost = on_lost
        self.lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._record = {**_record(), "token": self.token}

    def _read(self) -> dict:
        try:
            info = json.loads(self.location.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def _write(self) -> None:
        self.location.write_text(json.dumps({**self._record, "renewed": time.time()}))

    def _live(self, info: dict) -> bool:
        if not info or info.get("token") == self.token:
            return False
        if time.time() - float(info.get("renewed", 0)) > LEASE_SECONDS:
            return False
        if info.get("host") == socket.gethostname():
            try:
                os.kill(int(info.get("pid", 0)), 0)
            except ProcessLookupError:
                return False  # its holder on this host has ended
            except (PermissionError, ValueError, OverflowError):
                pass
        return True

    def check(self) -> None:
        """LakeBusy if another writer holds a live lease."""
        info = self._read()
        if self._live(info):
            raise _busy(self.name, _who(info))

    def take(self) -> None:
        """Take the lease (LakeBusy if another writer holds it) and keep renewing it."""
        self.check()
        self._write()
        time.sleep(self.settle)
        info = self._read()
        if info.get("token") != self.token:  # another writer wrote after us
            raise _busy(self.name, _who(info))
        self._renewer = threading.Thread(target=self._renew, name="lakemv-writer-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                info = self._read()
                if info and info.get("token") != self.token:
                    self.lost = True
                    if self.on_lost is not None:
                        self.on_lost()
                    return
                self._write()
            except OSError:
                continue  # the store is unreachable for now: the next renewal tries again

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=RENEW_SECONDS)
        try:
            if self._read().get("token") == self.token:
                self.location.remove()
        except OSError:
            pass  # left behind: stale after LEASE_SECONDS


class CommitTurns:
    """Turns at committing between one lake's stream and its compaction, by `flock` on two files in
    the driver's folder (so, like the writer lock, per host, and freed by the kernel with a killed holder).

    - The stream holds `commit-<catalog>.lock` while it applies a unit (`unit`).
    - Compaction (`turn`) first holds `compaction-<catalog>.lock` (a request: compactors queue here),
      then waits for the commit lock, which the stream gives up at the end of its unit. The stream
      sees the request before its next unit and waits for the turn to end.
    - After a turn, compaction lets a waiting stream run a unit before it asks again, so a compaction
      of many tables pauses the stream once per table, not for all of them.
    """

    def __init__(self, local_root: Path, catalog_name: str):
        folder = local_root / "_lakemv"
        self.commit = folder / f"commit-{catalog_name}.lock"
        self.request = folder / f"compaction-{catalog_name}.lock"
        self.stream = folder / f"stream-{catalog_name}.json"  # the stream's units and whether it waits
        self._handles: dict[Path, object] = {}

    def _open(self, path: Path):  # noqa: ANN202 - a text file handle, kept open for the object's life
        if path not in self._handles:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handles[path] = open(path, "a+")  # noqa: SIM115 - closed in close()
        return self._handles[path]

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()

    def _state(self) -> dict:
        try:
            return json.loads(self.stream.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def _say(self, *, waiting: bool, ran: bool = False) -> None:
        """The stream's record: whether it waits for a turn, and (`ran`) one unit more."""
        state = self._state()
        state.update(waiting=waiting, units=int(state.get("units", 0)) + ran)
        replace_file(self.stream, json.dumps(state))

    @contextmanager
    def unit(self) -> Iterator[Callable[[], float]]:
        """The stream's side: hold the commit lock for one unit, after any compaction turn ends.
        Yields a function giving the seconds this unit waited for compaction."""
        started = time.monotonic()
        request = self._open(self.request)
        try:
            fcntl.flock(request, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # compaction asked for a turn: wait for it to end
            self._say(waiting=True)
            fcntl.flock(request, fcntl.LOCK_SH)
        fcntl.flock(request, fcntl.LOCK_UN)
        commit = self._open(self.commit)
        fcntl.flock(commit, fcntl.LOCK_EX)
        waited = time.monotonic() - started
        self._say(waiting=False, ran=True)
        try:
            yield lambda: waited
        finally:
            fcntl.flock(commit, fcntl.LOCK_UN)

    @contextmanager
    def turn(self, *, wait: float = 600.0, poll: float = 0.1) -> Iterator[bool]:
        """Compaction's side: hold the lake's commits for the block. Yields True once the stream
        (if one runs) is parked between units; False when its unit outlasted `wait` seconds (the
        block then runs beside it, and a lost race is retried or deferred as before)."""
        request = self._open(self.request)
        fcntl.flock(request, fcntl.LOCK_EX)
        commit = self._open(self.commit)
        deadline = time.monotonic() + wait
        held = False
        try:
            while True:
                try:
                    fcntl.flock(commit, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(poll)
            yield held
        finally:
            state = self._state()
            units, waiting = int(state.get("units", 0)), bool(state.get("waiting"))
            if held:
                fcntl.flock(commit, fcntl.LOCK_UN)
            fcntl.flock(request, fcntl.LOCK_UN)
        if waiting:  # the stream's turn: one unit before compaction asks again (bounded: it may be idle)
            deadline = time.monotonic() + 30.0
            while int(self._state().get("units", 0)) == units and time.monotonic() < deadline:
                time.sleep(poll)
