"""The store: one SQLite database (WAL) holding the mirror and view parts and what each reflects.

SQLite was chosen by measurement (PLATFORM-NOTES, and `bench.store` on this workload): it keeps the
secondary indexes itself, commits several tables in one transaction, needs nothing outside the
standard library, and a process that dies mid-transaction leaves the previous state. Each part
records the Iceberg snapshot (and the write id of the unit) it reflects, in the same transaction
as the rows, so `lakemv.spark.batch.sync` can tell whether it is in step with its table.

Mirror part `m_<table>`: the primary-key columns and every looked-up column as SQLite columns, the
whole row as a blob, the source position and the tombstone flag; one partial index (live rows) per
lookup column set. View part `v_<view>`: the key (canonically encoded) and the digest of the row.
A view that waits for its freshness budget keeps its pending keys in `pending` (`lakemv.core.state.book`);
one whose aggregates follow deltas, each key's aggregate state in `tallies` (`lakemv.core.state.tallies`).
A *located* part also keeps where each row lives in its Iceberg table - the data file (an id into
`files`) and the row's position in it - so that replacing the row is a position delete.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakemv.core.sql.quote import ansi_ident
from lakemv.core.state.book import ViewBook
from lakemv.core.state.codec import Values, decode, encode, index_value
from lakemv.core.state.dbfile import Checkpointer, close_sealed, open_checked
from lakemv.core.state.fanout import Fanouts
from lakemv.core.state.layout import MirrorPart, ViewPart
from lakemv.core.state.places import CHUNK, FilePlaces, Location, key_blob
from lakemv.core.state.tallies import Tallies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """What a part reflects: its layout, and the Iceberg snapshot and write id it is in step with."""

    fingerprint: str
    snapshot: int | None
    write_id: str | None


@dataclass(frozen=True)
class Stored:
    """A mirror row as the store holds it (tombstones carry only their key)."""

    row: Values
    position: int
    deleted: bool
    location: Location | None = None  # where the row lives, for a located part (None: not known)


class Store(FilePlaces, ViewBook, Tallies, Fanouts):
    """The local indexed state of one ingest stream (see the module docstring)."""

    def __init__(self, path: Path | str):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.discarded: str | None = None  # why an unreadable store was set aside (it is rebuilt from Iceberg)
        self.checked = False  # whether the open read every page (a store not sealed by a clean close)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if self.path == ":memory:":
                raise
            self.discarded = f"{exc}"
            log.warning("local state at %s is unreadable (%s): rebuilding it from the Iceberg tables", self.path, exc)
            for file in Path(self.path).parent.glob(Path(self.path).name + "*"):
                file.unlink()
            self._db = self._open()
        self._mirrors: dict[str, MirrorPart] = {}
        self._views: dict[str, ViewPart] = {}
        self._file_ids: dict[str, int] = {}
        self._paths: dict[int, str] = {}
        self._fanouts: dict[str, dict[tuple[object, ...], tuple[float, bool]]] = {}  # per source and hop: `Fanouts`

    def _open(self) -> sqlite3.Connection:
        """Connect, checking the file is one SQLite can read whole unless a clean close sealed it
        (`lakemv.core.state.dbfile`), and start its checkpoint thread; raises sqlite3.DatabaseError."""
        db, self.checked = open_checked(self.path)
        self.checkpointer = Checkpointer(self.path) if self.path != ":memory:" else None
        return db

    def close(self) -> None:
        with self._lock:
            if self.checkpointer is not None:
                self.checkpointer.stop()
            close_sealed(self._db, self.path)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic, durable update (nested calls join the outer one)."""
        with self._lock:
            if self._db.in_transaction:
                yield
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            if self.checkpointer is not None:
                self.checkpointer.committed(self._db)

    # ---- parts ---------------------------------------------------------------------------------------
    def record(self, name: str) -> Record | None:
        with self._lock:
            row = self._db.execute("SELECT fingerprint, snapshot, write_id FROM parts WHERE name = ?", (name,)).fetchone()
            return None if row is None else Record(*row)

    def records(self) -> dict[str, Record]:
        with self._lock:
            return {r[0]: Record(*r[1:]) for r in self._db.execute("SELECT name, fingerprint, snapshot, write_id FROM parts")}

    def set_record(self, name: str, fingerprint: str, snapshot: int | None, write_id: str | None) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO parts (name, fingerprint, snapshot, write_id) VALUES (?, ?, ?, ?)",
            (name, fingerprint, snapshot, write_id),
        )

    def forget(self, name: str) -> None:
        """Mark a part as out of step (it is reloaded before use)."""
        with self.transaction():
            self._db.execute("DELETE FROM parts WHERE name = ?", (name,))

    def attach_mirror(self, part: MirrorPart) -> bool:
        """Use `part`'s layout; True when its rows are still valid (same fingerprint), else it is emptied."""
        with self.transaction():
            self._mirrors[part.table] = part
            record = self.record(f"mirror:{part.table}")
            valid = record is not None and record.fingerprint == part.fingerprint
            if not valid:
                self._create_mirror(part)
            self._sync_indexes(part)
            return valid

    def _create_mirror(self, part: MirrorPart) -> None:
        table = ansi_ident(f"m_{part.table}")
        self._db.execute(f"DROP TABLE IF EXISTS {table}")
        columns = ", ".join(ansi_ident(c) for c in part.materialized)
        pk = ", ".join(ansi_ident(c) for c in part.primary_key)
        self._db.execute(
            f"CREATE TABLE {table} ({columns}, _row BLOB, _pos INTEGER, _del INTEGER, _file INTEGER, _at INTEGER, "
            f"PRIMARY KEY ({pk})) WITHOUT ROWID"
        )
        self._db.execute("DELETE FROM parts WHERE name = ?", (f"mirror:{part.table}",))
        self._forget_files(f"mirror:{part.table}")

    def _sync_indexes(self, part: MirrorPart) -> None:
        prefix = f"ix_{part.table}__"
        wanted = {prefix + "__".join(index): index for index in part.indexes}
        existing = {
            r[0]
            for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (f"m_{part.table}",))
            if r[0].startswith(prefix)
        }
        for name in existing - set(wanted):
            self._db.execute(f"DROP INDEX {ansi_ident(name)}")
        for name in sorted(set(wanted) - existing):
            columns = ", ".join(ansi_ident(c) for c in wanted[name])
            self._db.execute(f"CREATE INDEX {ansi_ident(name)} ON {ansi_ident(f'm_{part.table}')} ({columns}) WHERE _del = 0")

    def attach_view(self, part: ViewPart) -> bool:
        """Use `part`; True when its digests are still valid, else it is emptied."""
        with self.transaction():
            self._views[part.view] = part
            record = self.record(f"view:{part.view}")
            if record is not None and record.fingerprint == part.fingerprint:
                return True
            self._db.execute(f"DROP TABLE IF EXISTS {ansi_ident(f'v_{part.view}')}")
            settle = ", _t INTEGER" if part.settle else ""
            self._db.execute(
                f"CREATE TABLE {ansi_ident(f'v_{part.view}')} (k BLOB PRIMARY KEY, digest TEXT, _file INTEGER, _at INTEGER{settle}) WITHOUT ROWID"
            )
            if part.settle:
                self._db.execute(f"CREATE INDEX {ansi_ident(f'vt_{part.view}')} ON {ansi_ident(f'v_{part.view}')} (_t)")
            self._db.execute("DELETE FROM parts WHERE name = ?", (f"view:{part.view}",))
            self._db.execute("DELETE FROM pending WHERE view = ?", (part.view,))
            self._db.execute("DELETE FROM deferred WHERE view = ?", (part.view,))
            self._db.execute("DELETE FROM costs WHERE view = ?", (part.view,))  # a new definition costs anew
            self.forget_tallies(part.view)
            self._forget_files(f"view:{part.view}")
            return False

    # ---- mirror rows ---------------------------------------------------------------------------------
    def put_rows(
        self, table: str, rows: Iterable[tuple[Values, int, bool]], locations: Iterable[Location | None] | None = None
    ) -> int:
        """Insert or replace mirror rows `(values, position, deleted)`, values in the part's column order
        followed by its derived columns' values (`MirrorPart.derived`), with where each lives when known
        (else `locate` tells it later)."""
        part = self._mirrors[table]
        width = len(part.columns)
        positions = [(part.column_names + part.derived_names).index(c) for c in part.materialized]
        marks = ", ".join("?" for _ in range(len(positions) + 5))
        sql = f"INSERT OR REPLACE INTO {ansi_ident(f'm_{table}')} VALUES ({marks})"

        def params() -> Iterator[list[Any]]:
            for (values, position, deleted), file_id, at in self._placed(f"mirror:{table}", rows, locations):
                if part.derived and len(values) != width + len(part.derived):
                    raise ValueError(f"a row of {table} comes without the values of its derived columns {part.derived_names}")
                blob = encode(values[:width] if part.derived else values)
                yield [index_value(values[i]) for i in positions] + [blob, position, int(bool(deleted)), file_id, at]

        self._fanouts_stale(table)
        with self.transaction():
            cursor = self._db.executemany(sql, params())
            return cursor.rowcount

    def clear_rows(self, table: str) -> None:
        with self.transaction():
            self._db.execute(f"DELETE FROM {ansi_ident(f'm_{table}')}")
            self._forget_files(f"mirror:{table}")

    def purge(self, table: str, column: str, before: int) -> int:
        """Drop the rows of `table` whose `column` (an indexed event time, epoch micros) is before
        `before`: events no view needs any more. Returns how many went."""
        with self.transaction():
            return self._db.execute(f"DELETE FROM {ansi_ident(f'm_{table}')} WHERE {ansi_ident(column)} < ?", (before,)).rowcount

    def rebuild_indexes(self, table: str) -> None:
        """Drop and recreate a part's indexes (a bulk load inserts first, then indexes once)."""
        part = self._mirrors[table]
        with self.transaction():
            for index in part.indexes:
                self._db.execute(f"DROP INDEX IF EXISTS {ansi_ident(f'ix_{table}__' + '__'.join(index))}")
            self._sync_indexes(part)

    def drop_indexes(self, table: str) -> None:
        part = self._mirrors[table]
        with self.transaction():
            for index in part.indexes:
                self._db.execute(f"DROP INDEX IF EXISTS {ansi_ident(f'ix_{table}__' + '__'.join(index))}")

    def stored(self, table: str, keys: Sequence[Values]) -> dict[Values, Stored]:
        """The stored rows (tombstones included) for primary keys `keys`, by key."""
        part = self._mirrors[table]
        found: dict[Values, Stored] = {}
        pk_positions = [part.column_names.index(k) for k in part.primary_key]
        for row in self._select(table, part.primary_key, list(dict.fromkeys(keys)), (False,) * len(part.primary_key), live=False):
            values, position, deleted, file_id, at = decode(row[0]), row[1], bool(row[2]), row[3], row[4]
            with self._lock:
                path = self._path(file_id)
            found[tuple(values[i] for i in pk_positions)] = Stored(values, position, deleted, None if path is None else (path, at))
        return found

    def lookup(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> list[Values]:
        """Live rows of `table` whose `columns` equal one of the `values` tuples (SQL `=`, or `<=>`
        where `null_safe`): each row once."""
        return [decode(r[0]) for r in self._select(table, tuple(columns), _wanted(values, null_safe), tuple(null_safe), live=True)]

    def count_lookup(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> int:
        """How many rows `lookup` with the same arguments finds (counted by the index, no row read)."""
        return sum(r[0] for r in self._select(table, tuple(columns), _wanted(values, null_safe), tuple(null_safe), live=True, count=True))

    def count(self, table: str) -> int:
        with self._lock:
            return self._db.execute(f"SELECT count(*) FROM {ansi_ident(f'm_{table}')}").fetchone()[0]

    def count_per_value(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> dict[Values, int]:
        """How many rows `lookup` finds for each of `values` that finds any (counted by the index, no row
        read; each value as SQLite compares it: `index_value`)."""
        found = self._select(table, tuple(columns), _wanted(values, null_safe), tuple(null_safe), live=True, grouped=True)
        return {tuple(r[:-1]): r[-1] for r in found}

    def _select(
        self, table: str, columns: tuple[str, ...], wanted: list[Values], null_safe: tuple[bool, ...], live: bool, count: bool = False,
        grouped: bool = False,
    ) -> Iterator[tuple[Any, ...]]:
        """The stored rows (`_row, _pos, _del, _file, _at`) whose `columns` equal one of `wanted`; with
        `count`, one `(count,)` per statement instead; with `grouped`, one `(*value, count)` per value
        of `wanted` that finds a row."""
        name = ansi_ident(f"m_{table}")
        alive = " AND _del = 0" if live else ""
        stored = "_row, _pos, _del, _file, _at"
        with self._lock:
            if len(columns) == 1:
                column = ansi_ident(columns[0])
                what, group = (f"{column}, count(*)", f" GROUP BY {column}") if grouped else ("count(*)" if count else stored, "")
                plain = [index_value(v[0]) for v in wanted if v[0] is not None]
                for start in range(0, len(plain), CHUNK):
                    chunk = plain[start : start + CHUNK]
                    marks = ", ".join("?" for _ in chunk)
                    yield from self._db.execute(f"SELECT {what} FROM {name} WHERE {column} IN ({marks}){alive}{group}", chunk)
                if any(v[0] is None for v in wanted):
                    yield from self._db.execute(f"SELECT {what} FROM {name} WHERE {column} IS NULL{alive}{group}")
                return
            # several columns: the wanted tuples as a VALUES list joined to the part, each seeking its
            # index (CROSS JOIN keeps the list outside: SQLite never scans the part), CHUNK parameters a statement
            on = " AND ".join(
                f"m.{ansi_ident(c)} IS w.c{i}" if ns else f"m.{ansi_ident(c)} = w.c{i}" for i, (c, ns) in enumerate(zip(columns, null_safe, strict=True))
            )
            listed, row = ", ".join(f"c{i}" for i in range(len(columns))), "(" + ", ".join("?" for _ in columns) + ")"
            values = ", ".join(f"w.c{i}" for i in range(len(columns)))
            each = "count(*)" if count else ", ".join(f"m.{c}" for c in stored.split(", "))
            what, group = (f"{values}, count(*)", f" GROUP BY {values}") if grouped else (each, "")
            alive_m = " AND m._del = 0" if live else ""
            per = max(1, CHUNK // len(columns))
            for start in range(0, len(wanted), per):
                chunk = wanted[start : start + per]
                sql = (
                    f"WITH w({listed}) AS (VALUES {', '.join(row for _ in chunk)}) "
                    f"SELECT {what} FROM w CROSS JOIN {name} AS m ON {on}{alive_m}{group}"
                )
                yield from self._db.execute(sql, [index_value(v) for value in chunk for v in value])

    # ---- view digests --------------------------------------------------------------------------------
    def digests(self, view: str, keys: Sequence[Values]) -> dict[Values, str]:
        """The stored digest of each of `keys` that the view holds."""
        return {key: digest for key, digest in self._view_rows(view, keys, "digest")}

    def stored_keys(self, view: str) -> tuple[list[bytes], list[str]]:
        """Every row the view part holds: the encoded keys (`lakemv.core.state.places.key_of` decodes one)
        and, in the same order, the digests (a digest covers the row's key)."""
        with self._lock:
            rows = self._db.execute(f"SELECT k, digest FROM {ansi_ident(f'v_{view}')}").fetchall()
        return [k for k, _ in rows], [d for _, d in rows]

    def put_digests(
        self,
        view: str,
        upserts: Iterable[tuple[Values, str]],
        deletes: Iterable[Values] = (),
        locations: Iterable[Location | None] | None = None,
        times: Iterable[int | None] | None = None,
    ) -> None:
        """Store the digests of `upserts` (with where each row lives when known, and for a view whose
        rows settle each row's time, epoch micros) and drop `deletes`."""
        table = ansi_ident(f"v_{view}")
        settles = self._views[view].settle is not None
        columns = "k, digest, _file, _at" + (", _t" if settles else "")
        marks = ", ".join("?" for _ in columns.split(", "))

        stamps = iter(times if times is not None else ())

        def params() -> Iterator[tuple[Any, ...]]:
            for (key, digest), file_id, at in self._placed(f"view:{view}", upserts, locations):
                row = (key_blob(key), digest, file_id, at)
                yield (*row, next(stamps, None)) if settles else row

        with self.transaction():
            self._db.executemany(f"INSERT OR REPLACE INTO {table} ({columns}) VALUES ({marks})", params())
            self._db.executemany(f"DELETE FROM {table} WHERE k = ?", ((key_blob(k),) for k in deletes))

    def settle(self, view: str, before: int) -> int:
        """Drop the digests of the view's rows settled before `before` (epoch micros): no event can
        reach them again (lakemv.core.planner.retention.settles). Returns how many went."""
        if self._views[view].settle is None:
            return 0
        with self.transaction():
            return self._db.execute(f"DELETE FROM {ansi_ident(f'v_{view}')} WHERE _t < ?", (int(before),)).rowcount

    def clear_digests(self, view: str) -> None:
        with self.transaction():
            self._db.execute(f"DELETE FROM {ansi_ident(f'v_{view}')}")
            self._forget_files(f"view:{view}")
            self.forget_tallies(view)  # (the view's rows are reloaded: its aggregate states are built again)

    def view_count(self, view: str) -> int:
        with self._lock:
            return self._db.execute(f"SELECT count(*) FROM {ansi_ident(f'v_{view}')}").fetchone()[0]

    def size_bytes(self) -> int:
        """The database's size on disk (main file and write-ahead log)."""
        if self.path == ":memory:":
            return 0
        return sum(p.stat().st_size for p in Path(self.path).parent.glob(Path(self.path).name + "*"))

    @property
    def mirrors(self) -> Mapping[str, MirrorPart]:
        return self._mirrors

    @property
    def views(self) -> Mapping[str, ViewPart]:
        return self._views


def _wanted(values: Iterable[Values], null_safe: Sequence[bool]) -> list[Values]:
    """The distinct looked-up tuples that can match: a NULL matches nothing where `=` compares it."""
    return [v for v in dict.fromkeys(values) if all(x is not None or ns for x, ns in zip(v, null_safe, strict=True))]
