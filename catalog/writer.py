"""One writer per lake: an ingest holds the lake's writer lock for as long as it runs.

Two streams applying the same changes would race on every commit (Iceberg's retries keep the data
right, but an operator sees Java traces, not the reason). The lock is an advisory `flock` on a file in
the driver's own folder (`LakeSettings.local_root`), so the kernel drops it with the process that
held it however that process ended: a killed holder leaves no stale lock to clean up, and the next
writer takes it over. The file says who holds it (pid, host, since, command) for the refusal.
Compaction, backfill and verify are built to run beside an ingest and take no lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from catalog.errors import LakemvError


class LakeBusy(LakemvError):
    """Another process is writing this lake (terminal: stop it, or wait for it to end)."""


def lock_path(local_root: Path, catalog_name: str) -> Path:
    return local_root / "_lakemv" / f"writer-{catalog_name}.lock"


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process (it has not said who yet)"
    since = datetime.fromtimestamp(info.get("since", 0), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"pid {info.get('pid')} on {info.get('host')} since {since} ({info.get('command', '?')})"


@contextmanager
def writer_lock(local_root: Path, catalog_name: str, lake: str, *, probe: bool = False) -> Iterator[Path]:
    """Hold the lake's writer lock for the block; LakeBusy at once if another process holds it.
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
            raise LakeBusy(
                f"the lake {lake} is being written by {_holder(path)}: one writer per lake; "
                "stop that ingest first (or wait for it to finish)"
            ) from None
        if probe:
            yield path
            return
        handle.seek(0)
        handle.truncate()
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv[:4]))
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command}))
        handle.flush()
        yield path
    finally:
        handle.close()  # closing the file releases the lock
