"""A benchmark lake kept as it was, and put back between repeats of a measure, in the running process.

Iceberg never changes a file it wrote (data, manifests and metadata files are new files), so the copy
hard-links them and a restore only removes what later commits added and links back what they did
not keep. The SQLite files (the catalog, the local states) change in place: the catalog is copied with
SQLite's online backup, so the JVM's open connections read the restored catalog through SQLite's own
locking; a local state is copied as a file while no processor has it open.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

_SQLITE = (".db", ".sqlite")
_SIDECARS = ("-wal", "-shm", "-journal")


def _iceberg_file(path: Path) -> bool:
    return any(part in ("data", "metadata") for part in path.parts)


def _backup(source: Path, target: Path) -> None:
    """`target` (a SQLite file other connections may have open) made equal to `source`."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _put(source: Path, target: Path, relative: Path) -> None:
    """`target` := the file `source` (at `relative` in its warehouse): a SQLite file by online backup,
    an Iceberg file hard-linked (unless it is there: it never changes), anything else copied."""
    if source.suffix in _SQLITE:
        _backup(source, target)
    elif _iceberg_file(relative):
        if not target.exists():
            os.link(source, target)
    else:
        shutil.copy2(source, target)


def keep(live: Path, copy: Path, states: list[Path]) -> None:
    """`copy` := the warehouse `live` and the local-state folders `states` (closed) as they are now."""
    shutil.rmtree(copy, ignore_errors=True)
    for path in sorted(live.rglob("*")):
        target = copy / "warehouse" / path.relative_to(live)
        if path.is_dir() or path.name.endswith(_SIDECARS):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _put(path, target, path.relative_to(live))
    for state in states:
        if state.exists():
            shutil.copytree(state, copy / "states" / state.name)


def restore(copy: Path, live: Path, states: list[Path]) -> None:
    """The warehouse `live` and the local-state folders `states` (closed) as `keep` found them."""
    kept = copy / "warehouse"
    for path in sorted(live.rglob("*"), reverse=True):  # files before their folders
        relative = path.relative_to(live)
        if path.is_file() and _iceberg_file(relative) and not (kept / relative).exists():
            path.unlink()
        elif path.is_dir() and not (kept / relative).exists() and not any(path.iterdir()):
            path.rmdir()
    for path in sorted(kept.rglob("*")):
        target = live / path.relative_to(kept)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            _put(path, target, path.relative_to(kept))
    for state in states:
        shutil.rmtree(state, ignore_errors=True)
        if (copy / "states" / state.name).exists():
            shutil.copytree(copy / "states" / state.name, state)
