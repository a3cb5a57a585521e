"""What the store keeps per view besides its digests: the keys a view waiting for its freshness budget
has pending (lakemv.core.batch.deferral), and what maintaining it cost (lakemv.core.batch.choice).
`Store` holds these methods; they use its connection, lock and transactions.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from lakemv.core.state.codec import Values, decode, encode
from lakemv.core.state.places import key_blob


@dataclass(frozen=True)
class Pending:
    """A deferred view's keys waiting in the state, and since when the oldest waits (epoch micros).
    Not `known`: the state does not know what is pending (rebuilt, or the view new to it)."""

    known: bool
    since: int | None
    keys: list[Values]


class ViewBook:
    """Each view's pending keys and cost observations."""

    _db: sqlite3.Connection
    _lock: threading.RLock

    def transaction(self) -> AbstractContextManager[None]: ...

    def pending(self, view: str) -> Pending:
        """The view's pending keys (in key order) and since when the oldest of them waits."""
        with self._lock:
            row = self._db.execute("SELECT since FROM deferred WHERE view = ?", (view,)).fetchone()
            if row is None:
                return Pending(False, None, [])
            keys = [decode(k) for (k,) in self._db.execute("SELECT key FROM pending WHERE view = ? ORDER BY k", (view,))]
            return Pending(True, row[0] if keys else None, keys)

    def knows_pending(self, view: str) -> bool:
        """Whether the state knows what of the view is pending (`Pending.known`, without reading the keys)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM deferred WHERE view = ?", (view,)).fetchone() is not None

    def defer(self, view: str, keys: Iterable[Values], now: int) -> None:
        """Add `keys` to the view's pending keys; the wait starts at `now` unless older ones wait."""
        with self.transaction():
            self._db.executemany(
                "INSERT OR IGNORE INTO pending (view, k, key) VALUES (?, ?, ?)", ((view, key_blob(k), encode(k)) for k in keys)
            )
            self._db.execute(
                "INSERT INTO deferred (view, since) VALUES (?, ?) ON CONFLICT (view) DO UPDATE SET since = coalesce(since, excluded.since)",
                (view, now),
            )

    def pending_count(self, view: str) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM pending WHERE view = ?", (view,)).fetchone()[0]

    def forget_pending(self, view: str) -> None:
        """Know no more what of the view is pending: it is diffed whole when next maintained."""
        with self.transaction():
            self._db.execute("DELETE FROM pending WHERE view = ?", (view,))
            self._db.execute("DELETE FROM deferred WHERE view = ?", (view,))

    def caught_up(self, view: str) -> None:
        """Nothing of the view is pending any more (joins the caller's transaction, if any)."""
        with self.transaction():
            self._db.execute("DELETE FROM pending WHERE view = ?", (view,))
            self._db.execute("INSERT OR REPLACE INTO deferred (view, since) VALUES (?, NULL)", (view,))

    # ---- what maintaining a view cost (lakemv.core.batch.choice) ----------------------------------------
    def costs(self, view: str) -> dict[str, list[tuple[float, float]]]:
        """Per way of maintaining the view, its last observations (size, seconds), oldest first."""
        with self._lock:
            found = self._db.execute("SELECT way, observed FROM costs WHERE view = ?", (view,)).fetchall()
        return {way: [(float(x), float(y)) for x, y in json.loads(observed)] for way, observed in found}

    def measured(self, view: str, way: str, observed: Sequence[tuple[float, float]]) -> None:
        with self.transaction():
            self._db.execute("INSERT OR REPLACE INTO costs (view, way, observed) VALUES (?, ?, ?)", (view, way, json.dumps(list(observed))))
