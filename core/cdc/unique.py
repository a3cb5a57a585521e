"""Declared unique keys (`unique = [["username"]]` in a source file), checked on what a batch ingests.

The source database enforces them; lakemv relies on them (a join on one matches at most one row) and
checks them: after a batch, does any live row share a unique value with another? A change that does
is still applied - the mirror follows the source, and a violation seen mid-stream is often transient
(two rows swapping a value, whose changes arrive in different batches) - but it is reported:

* a dead letter per change that leaves a value held by several live rows, with the rows that hold it;
* the batch line's count of unique violations, and `lakemv status`'s count of values held twice now;
* the views: a key whose recompute gives several rows (through such a join) keeps its previous row,
  and the batch line says how many keys are held so (lakemv.core.sql.diff), until a change resolves it.

`unique_violations` is pure: the caller passes the batch's rows and a lookup of the stored live rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED
from lakemv.core.cdc.changeset import DeadLetter

Row = dict[str, Any]
# (unique columns, their values) -> the live rows holding one of those values (declared columns)
StoredLookup = Callable[[Sequence[str], list[tuple[Any, ...]]], Iterable[Row]]

SOURCE_FILE = "(unique key check)"


@dataclass(frozen=True)
class Violation:
    """A unique value held by several live rows once the batch is applied."""

    table: str
    columns: tuple[str, ...]
    value: tuple[Any, ...]
    holders: tuple[tuple[Any, ...], ...]  # the primary keys of the rows holding it, sorted
    changes: tuple[Row, ...]  # the batch's rows among them (what the dead letters record)

    def reason(self, primary_key: Sequence[str]) -> str:
        value = ", ".join(f"{c}={v!r}" for c, v in zip(self.columns, self.value, strict=True))
        holders = "; ".join(", ".join(f"{c}={v!r}" for c, v in zip(primary_key, h, strict=True)) for h in self.holders)
        return (
            f"unique violation: {self.table}.({', '.join(self.columns)}) is declared unique, but {value} is held by "
            f"{len(self.holders)} live rows ({holders}). The change is applied (the mirror follows the source); "
            "a view key that joins through this value keeps its previous row until one of them changes"
        )


def unique_violations(source: SourceTable, changes: Sequence[Row], stored: StoredLookup) -> list[Violation]:
    """The values of `source`'s unique keys that several live rows hold once `changes` (mirror rows,
    with the tombstone flag) replace the stored rows of their primary keys. NULLs never collide."""
    pk = source.primary_key
    changed_keys = {tuple(r[c] for c in pk) for r in changes}
    live = [r for r in changes if not r.get(DELETED)]
    found: list[Violation] = []
    for columns in source.unique:
        values = sorted({v for r in live if None not in (v := tuple(r[c] for c in columns))}, key=repr)
        if not values:
            continue
        after: dict[tuple[Any, ...], dict[tuple[Any, ...], Row | None]] = {}  # value -> primary key -> batch row
        for row in stored(columns, values):
            key = tuple(row[c] for c in pk)
            if key not in changed_keys:
                after.setdefault(tuple(row[c] for c in columns), {})[key] = None
        wanted = set(values)
        for row in live:
            value = tuple(row[c] for c in columns)
            if value in wanted:
                after.setdefault(value, {})[tuple(row[c] for c in pk)] = row
        for value, holders in sorted(after.items(), key=lambda item: repr(item[0])):
            if len(holders) > 1:
                batch_rows = tuple(r for r in holders.values() if r is not None)
                found.append(Violation(source.name, tuple(columns), value, tuple(sorted(holders, key=repr)), batch_rows))
    return found


def violation_letters(source: SourceTable, violations: Iterable[Violation]) -> list[DeadLetter]:
    """One dead letter per batch row behind a violation: the row's declared columns as JSON, and why."""
    letters = []
    for violation in violations:
        reason = violation.reason(source.primary_key)
        for row in violation.changes:
            raw = json.dumps({c: row.get(c) for c in source.column_names}, default=str, sort_keys=True)
            letters.append(DeadLetter(raw, SOURCE_FILE, source.name, reason))
    return letters
