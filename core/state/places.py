"""Where each row of a located part lives in its Iceberg table: a data file and a position in it.

Replacing a row whose place is known is a position delete, with no read of the table
(`lakemv.spark.directwrite`). The places are kept in the store's database, beside the rows: a file id per
data file path (table `files`) and `_file`, `_at` columns on each row. `Store` holds these methods; they
use its connection, lock and transactions.
"""

from __future__ import annotations

import ast
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from lakemv.core.sql.quote import ansi_ident
from lakemv.core.state.codec import Values, index_value
from lakemv.core.state.layout import MirrorPart

CHUNK = 500  # parameters per IN list (SQLite allows 32766; shorter statements cache better)
Location = tuple[str, int]  # (data file path as the table's metadata spells it, row position in it)


def key_blob(key: Values) -> bytes:
    """A canonical encoding of a view key (equal keys, equal bytes)."""
    return repr(tuple(index_value(v) for v in key)).encode()


_FLOATS = {"nan": math.nan, "inf": math.inf}


def key_of(blob: bytes) -> Values:
    """The key `key_blob` encoded (booleans come back as integers, as SQLite compares them). Its text is a
    tuple of Python literals, but for the floats whose repr is not one (nan, inf)."""

    def value(node: ast.expr) -> object:
        if isinstance(node, ast.Name) and node.id in _FLOATS:
            return _FLOATS[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Name):
            return -value(node.operand)  # type: ignore[operator]
        return ast.literal_eval(node)

    tree = ast.parse(blob.decode(), mode="eval").body
    if not isinstance(tree, ast.Tuple):
        raise ValueError(f"not a key: {blob!r}")
    return tuple(value(node) for node in tree.elts)


class FilePlaces:
    """The data file and position of each row, for the parts that keep them."""

    _db: sqlite3.Connection
    _lock: threading.RLock
    _mirrors: dict[str, MirrorPart]
    _file_ids: dict[str, int]
    _paths: dict[int, str]

    def transaction(self) -> AbstractContextManager[None]: ...

    def _file_id(self, part: str, path: str) -> int:
        known = self._file_ids.get(path)
        if known is None:
            self._db.execute("INSERT OR IGNORE INTO files (part, path) VALUES (?, ?)", (part, path))
            known = self._db.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()[0]
            self._file_ids[path], self._paths[known] = known, path
        return known

    def _path(self, file_id: int | None) -> str | None:
        if file_id is None:
            return None
        if file_id not in self._paths:
            path = self._db.execute("SELECT path FROM files WHERE id = ?", (file_id,)).fetchone()[0]
            self._paths[file_id], self._file_ids[path] = path, file_id
        return self._paths[file_id]

    def _forget_files(self, part: str, paths: Iterable[str] | None = None) -> None:
        """Drop the file ids of `part` (all of them, or those of `paths`): no row of it lives there now."""
        if paths is None:
            gone = [r[0] for r in self._db.execute("SELECT path FROM files WHERE part = ?", (part,))]
        else:
            gone = list(paths)
        self._db.executemany("DELETE FROM files WHERE path = ?", ((p,) for p in gone))
        for path in gone:
            self._paths.pop(self._file_ids.pop(path, -1), None)

    def locate(self, part: str, path: str, keys: Sequence[Values]) -> None:
        """The rows of `keys` (primary keys of a mirror part, keys of a view part) now live in data
        file `path`, the i-th key at row i."""
        kind, name = part.split(":", 1)
        with self.transaction():
            file_id = self._file_id(part, path)
            if kind == "view":
                self._db.executemany(
                    f"UPDATE {ansi_ident(f'v_{name}')} SET _file = ?, _at = ? WHERE k = ?",
                    ((file_id, at, key_blob(key)) for at, key in enumerate(keys)),
                )
                return
            pk = self._mirrors[name].primary_key
            where = " AND ".join(f"{ansi_ident(c)} = ?" for c in pk)
            self._db.executemany(
                f"UPDATE {ansi_ident(f'm_{name}')} SET _file = ?, _at = ? WHERE {where}",
                ([file_id, at, *(index_value(v) for v in key)] for at, key in enumerate(keys)),
            )

    def _placed(
        self, part: str, items: Iterable[Any], locations: Iterable[Location | None] | None
    ) -> Iterator[tuple[Any, int | None, int | None]]:
        """Each of `items` with its place as the store keeps it (file id, position): None, None where
        not known, and for every item when `locations` is None."""
        if locations is None:
            for item in items:
                yield item, None, None
            return
        for item, place in zip(items, locations, strict=True):
            yield (item, None, None) if place is None else (item, self._file_id(part, place[0]), place[1])

    def forget_files(self, part: str, paths: Iterable[str]) -> None:
        """Data files of `part`'s table that no snapshot reads any more (a compaction replaced them)."""
        with self.transaction():
            self._forget_files(part, paths)

    def view_locations(self, view: str, keys: Sequence[Values]) -> dict[Values, Location | None]:
        """Where the view's rows of `keys` live (for the keys it holds; None where not known)."""
        found: dict[Values, Location | None] = {}
        with self._lock:
            for key, file_id, at in self._view_rows(view, keys, "_file, _at"):
                path = self._path(file_id)
                found[key] = None if path is None else (path, at)
        return found

    def _view_rows(self, view: str, keys: Sequence[Values], columns: str) -> Iterator[tuple[Any, ...]]:
        """(key, *columns) of each of `keys` the view part holds, in chunks of one IN list."""
        blobs = {key_blob(k): k for k in keys}
        items = list(blobs)
        with self._lock:
            for start in range(0, len(items), CHUNK):
                chunk = items[start : start + CHUNK]
                marks = ", ".join("?" for _ in chunk)
                for blob, *values in self._db.execute(f"SELECT k, {columns} FROM {ansi_ident(f'v_{view}')} WHERE k IN ({marks})", chunk):
                    yield (blobs[blob], *values)
