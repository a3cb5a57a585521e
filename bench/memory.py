"""The resident memory of a `lakemv` process while it runs: its Python driver and its JVM, sampled
from /proc every 0.2 s (a process's own high-water mark, VmHWM, is gone with it)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path


def _status(pid: int, field: str) -> int:
    """A field of /proc/<pid>/status in KiB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="utf-8").split()]
    except OSError:
        return []
    return children + [d for child in children for d in _descendants(child)]


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip() == "java"
    except OSError:
        return False


class PeakMemory:
    """Peak resident KiB of a process (`python_kib`) and of its JVM descendants (`jvm_kib`), sampled
    until the process ends; other descendants (a temporary Prefect API) are left out of both."""

    def __init__(self, process: subprocess.Popen, every: float = 0.2) -> None:
        self.python_kib = 0
        self.jvm_kib = 0
        self._process, self._every = process, every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self._process.poll() is None and not self._done.is_set():
            self.python_kib = max(self.python_kib, _status(self._process.pid, "VmRSS"))
            jvm = sum(_status(p, "VmRSS") for p in _descendants(self._process.pid) if _is_java(p))
            self.jvm_kib = max(self.jvm_kib, jvm)
            self._done.wait(self._every)

    def stop(self) -> dict[str, int]:
        """Stop sampling; the peaks in MiB."""
        self._done.set()
        self._thread.join()
        return {"python_mib": round(self.python_kib / 1024), "jvm_mib": round(self.jvm_kib / 1024)}
