"""What the store keeps of a view whose aggregates follow deltas (lakemv.core.planner.aggregates): each
key's aggregate state (lakemv.core.sql.deltasql), exactly once per unit however often it is replayed.

A state row remembers the unit that last wrote it (`wid`) and the state before that unit (`prev`): a
replay of that unit reads `prev`, so it adds its deltas to what its first attempt added them to, whether
the crash came before or after the state was written. A key whose group has no row left keeps a NULL
state (and its `prev`). The states are *known* once built from the table (`tallied`); a build made by
a unit is made again when that unit is replayed (its mirrors already hold its changes). A rebuilt or
reloaded view forgets them (`forget_tallies`), and the next unit builds them.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager

from lakemv.core.state.codec import Values, decode, encode
from lakemv.core.state.places import key_blob


class Tallies:
    """Each delta view's aggregate states. `Store` holds these methods; they use its connection and lock."""

    _db: sqlite3.Connection
    _lock: threading.RLock

    def transaction(self) -> AbstractContextManager[None]: ...

    def tallies_known(self, view: str, fingerprint: str, write_id: str) -> bool:
        """Whether the view's states are known for this definition and were not built by unit `write_id`."""
        with self._lock:
            row = self._db.execute("SELECT fingerprint, built_by FROM tallied WHERE view = ?", (view,)).fetchone()
        return row is not None and row[0] == fingerprint and row[1] != write_id

    def tallies(self, view: str, keys: Sequence[Values], write_id: str) -> dict[Values, Values]:
        """The state of each of `keys` before unit `write_id` (none: the key had no rows)."""
        found: dict[Values, Values] = {}
        with self._lock:
            for key in keys:
                row = self._db.execute("SELECT state, prev, wid FROM tallies WHERE view = ? AND k = ?", (view, key_blob(key))).fetchone()
                if row is None:
                    continue
                state = row[1] if row[2] == write_id else row[0]
                if state is not None:
                    found[key] = decode(state)
        return found

    def put_tallies(self, view: str, states: Iterable[tuple[Values, Values | None]], write_id: str) -> None:
        """The keys' states after unit `write_id` (None: no rows left); the state before it is kept as `prev`."""
        with self.transaction():
            for key, state in states:
                blob = key_blob(key)
                new = None if state is None else encode(state)
                self._db.execute(
                    "INSERT INTO tallies (view, k, state, prev, wid) VALUES (?, ?, ?, NULL, ?) ON CONFLICT (view, k) DO UPDATE SET "
                    "prev = CASE WHEN tallies.wid = excluded.wid THEN tallies.prev ELSE tallies.state END, state = excluded.state, wid = excluded.wid",
                    (view, blob, new, write_id),
                )

    def set_tallies(self, view: str, fingerprint: str, states: Iterable[tuple[Values, Values]], built_by: str) -> None:
        """Every key's state, built from the table by unit `built_by`: the states are known from now on."""
        with self.transaction():
            self._db.execute("DELETE FROM tallies WHERE view = ?", (view,))
            self._db.executemany(
                "INSERT INTO tallies (view, k, state, prev, wid) VALUES (?, ?, ?, NULL, NULL)", ((view, key_blob(k), encode(s)) for k, s in states)
            )
            self._db.execute("INSERT OR REPLACE INTO tallied (view, fingerprint, built_by) VALUES (?, ?, ?)", (view, fingerprint, built_by))

    def forget_tallies(self, view: str) -> None:
        """The states are no longer known (the view was rebuilt or reloaded): the next unit builds them."""
        with self.transaction():
            self._db.execute("DELETE FROM tallies WHERE view = ?", (view,))
            self._db.execute("DELETE FROM tallied WHERE view = ?", (view,))
