"""Replacing a small file whole, so a reader sees the old content or the new, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes | str, *, durable: bool = False) -> None:
    """Write `data` to a temporary file of its own beside `path`, then rename it over `path`.

    Each call gets a fresh temporary name (not one per process): two threads of one process
    replacing the same file (a lease renewal and a takeover, say) would otherwise write into
    one temporary file and rename a mix of both. `durable` syncs the data before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
