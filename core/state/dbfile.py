"""The store's SQLite file: opened checked, closed sealed.

A store that cannot be read whole must be set aside and rebuilt from Iceberg, never half trusted.
`PRAGMA quick_check` proves that, but it reads every page: 1.35 s for the 128 MiB store of 100k
users, 41 s for the 1 GB store of 1M users - more than all the rest of `ingest --once`'s start-up.
So a clean close *seals* the file: it checkpoints the WAL into the database and records the file's
size, modification time and inode beside it (`<file>.sealed`). An open that finds the seal matching
the file skips the check; one that does not (a crash, a kill, a file changed or copied since) runs
it. The seal is removed as soon as the file is opened, before anything is written, so it never
vouches for a file it did not see.

A commit does not fold the WAL into the database itself (`wal_autocheckpoint=0`): a `Checkpointer`
thread does, on a connection of its own, while the batch goes on. A backlog unit's commit writes
~400 MiB of pages at 1M users (75k rows, each on its own pages of the key and index B-trees); folding
them in, with its fsyncs, took 1.2 s of the commit's 1.8 s on the committing thread. Should the
thread fall behind, a commit folds the WAL in itself once it passes `WAL_LIMIT`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

from lakemv.core.errors import ConfigError
from lakemv.core.runtime.files import replace_file

_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-262144", "temp_store=MEMORY", "wal_autocheckpoint=0")
WAL_FOLD = 16 * 2**20  # the checkpointer folds the WAL in once it holds this much
WAL_LIMIT = 1024 * 2**20  # a commit folds it in itself past this (the checkpointer fell behind)

log = logging.getLogger(__name__)


def _stamp(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}


def _seal_path(path: Path) -> Path:
    return path.with_name(path.name + ".sealed")


def _sealed(path: Path) -> bool:
    """Whether the file is as a clean close left it (and the seal is used up either way)."""
    seal = _seal_path(path)
    try:
        recorded = json.loads(seal.read_text())
    except (OSError, ValueError):
        return False
    seal.unlink(missing_ok=True)
    wal = path.with_name(path.name + "-wal")
    try:
        return recorded == _stamp(path) and (not wal.exists() or wal.stat().st_size == 0)
    except OSError:
        return False


def open_checked(path: str) -> tuple[sqlite3.Connection, bool]:
    """Connect to the store's file; return the connection and whether its pages were checked (they
    are unless the file is sealed). Raises sqlite3.DatabaseError for a file SQLite cannot read whole."""
    if path != ":memory:" and Path(path).is_dir():
        raise ConfigError("a folder stands where lakemv keeps its local state file: move it away (the state is rebuilt from the lake)", path)
    checked = path == ":memory:" or not _sealed(Path(path))
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        for pragma in _PRAGMAS:
            db.execute(f"PRAGMA {pragma}")
        db.execute("CREATE TABLE IF NOT EXISTS parts (name TEXT PRIMARY KEY, fingerprint TEXT, snapshot INTEGER, write_id TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, part TEXT, path TEXT UNIQUE)")
        # views that wait for their freshness budget (lakemv.core.batch.deferral): their pending keys, and
        # since when the oldest waits (NULL: none); no row: the state does not know what is pending
        db.execute("CREATE TABLE IF NOT EXISTS pending (view TEXT, k BLOB, key BLOB, PRIMARY KEY (view, k)) WITHOUT ROWID")
        db.execute("CREATE TABLE IF NOT EXISTS deferred (view TEXT PRIMARY KEY, since INTEGER)")
        # what each way of maintaining a view measured lately (lakemv.core.batch.choice): JSON [[size, seconds], ...]
        db.execute("CREATE TABLE IF NOT EXISTS costs (view TEXT, way TEXT, observed TEXT, PRIMARY KEY (view, way)) WITHOUT ROWID")
        # aggregates by delta (lakemv.core.state.tallies): each key's state, the state before the unit that
        # last wrote it, that unit; and per view whether its states are known (built by which unit)
        db.execute("CREATE TABLE IF NOT EXISTS tallies (view TEXT, k BLOB, state BLOB, prev BLOB, wid TEXT, PRIMARY KEY (view, k)) WITHOUT ROWID")
        db.execute("CREATE TABLE IF NOT EXISTS tallied (view TEXT PRIMARY KEY, fingerprint TEXT, built_by TEXT)")
        if checked:
            problems = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems))
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db, checked


class Checkpointer:
    """Folds a store's WAL into its database in a thread of its own (see the module docstring).
    `committed()` after each commit; `stop()` before the store's connection closes."""

    def __init__(self, path: str):
        self._wal = path + "-wal"
        self._wake = threading.Event()
        self._stopping = False
        self._idle = threading.Event()
        self._idle.set()
        self.folds = 0  # checkpoints run (for tests and benchmarks)
        self._thread = threading.Thread(target=self._run, args=(path,), name="lakemv-state-checkpoint", daemon=True)
        self._thread.start()

    def _size(self) -> int:
        try:
            return os.stat(self._wal).st_size
        except OSError:
            return 0

    def committed(self, db: sqlite3.Connection) -> None:
        """A commit just ended on `db`: wake the thread, or fold in now if the WAL outgrew `WAL_LIMIT`."""
        if self._size() > WAL_LIMIT:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self._idle.clear()
        self._wake.set()

    def _run(self, path: str) -> None:
        db = None
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                if self._size() > WAL_FOLD:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # never waits for the writer
                    self.folds += 1
                if not self._wake.is_set():
                    self._idle.set()
        except sqlite3.Error as exc:  # the commits fold the WAL in themselves past WAL_LIMIT
            log.warning("the local state's checkpoint thread stopped: %s", exc)
        finally:
            self._idle.set()
            if db is not None:
                db.close()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        return self._idle.wait(timeout)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()


def close_sealed(db: sqlite3.Connection, path: str) -> None:
    """Close the connection; seal the file if its WAL was folded into it (nothing else writes it)."""
    try:
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] if not db.in_transaction else 1
    except sqlite3.Error:
        busy = 1
    db.close()
    if busy or path == ":memory:":
        return
    file = Path(path)
    replace_file(_seal_path(file), json.dumps(_stamp(file)))
