"""Where a planted secret must never show: process command lines (any local user sees them with `ps`)
and the files lakemv writes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from tests.prefectapi import every


class CommandLines:
    """Samples every process's command line while it runs (`ps` shows them to any local user)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for entry in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    self.seen.add(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def holding(folder: Path, secret: str, skip: tuple[Path, ...] = ()) -> list[str]:
    """Files under `folder` (not under `skip`) whose bytes hold `secret`."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not any(path.is_relative_to(s) for s in skip) and secret.encode() in path.read_bytes():
            found.append(str(path))
    return found


def prefect_holding(secret: str) -> list[str]:
    """What the Prefect API this process uses (PREFECT_API_URL) holds `secret` in: artifacts (by key) and
    flow run parameters (by run name), of every run it recorded."""
    found = [f"artifact {a['key'] or a['id']}" for a in every("artifacts", "CREATED_DESC") if secret in json.dumps([a["data"], a["description"]])]
    return found + [f"flow run {r['name']} parameters" for r in every("flow_runs", "START_TIME_DESC") if secret in json.dumps(r["parameters"])]
