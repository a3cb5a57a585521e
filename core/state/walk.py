"""Walks over the store along a view's route. Pure logic over any store with `lookup`.

* `reach`: changed rows (old and new images) -> the view keys they can affect, hop by hop up to the
  anchor through the live rows as they are after the batch (as the scan-based path joins them);
* `gather`: a set of keys -> the rows each occurrence of the view reads for them, anchor first,
  then each child from its parent's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from lakemv.core.planner import ViewPlan
from lakemv.core.state.codec import Values
from lakemv.core.state.layout import Lookup, MirrorPart, Route


class Lookups(Protocol):
    def lookup(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> list[Values]: ...


def _project(rows: Iterable[Values], part: MirrorPart, columns: Sequence[str]) -> list[Values]:
    positions = [part.column_names.index(c) for c in columns]
    return [tuple(row[i] for i in positions) for row in rows]


def _hop(store: Lookups, parts: Mapping[str, MirrorPart], hop: Lookup, rows: list[Values], table: str) -> list[Values]:
    if not rows:
        return []
    return store.lookup(hop.table, hop.columns, _project(rows, parts[table], hop.using), hop.null_safe)


def reach(
    plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, images: Mapping[str, list[Values]]
) -> tuple[set[Values], dict[int, list[Values]]]:
    """(keys, anchor rows): the keys the images reach, and per anchor (a UNION ALL has one per branch)
    the rows whose keys are expressions or constants (the caller evaluates those with that anchor's
    key expressions)."""
    keys: set[Values] = set()
    anchor_rows: dict[int, list[Values]] = {}
    for occ in plan.occurrences:
        rows = images.get(occ.table)
        if not rows:
            continue
        table = occ.table
        for hop in route.up[occ.id]:
            rows = _hop(store, parts, hop, rows, table)
            table = hop.table
        columns = route.key_columns[occ.id]
        if all(c is not None for c in columns):
            keys.update(_project(rows, parts[table], columns))  # type: ignore[arg-type]
        elif rows:
            anchor_rows.setdefault(plan.anchor_of(occ.id), []).extend(rows)
    return keys, anchor_rows


def gather(
    plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, keys: Iterable[Values]
) -> dict[int, list[Values]]:
    """The live rows each occurrence reads for `keys` (a superset where a lookup is inexact: each
    branch of a UNION ALL looks up every key, whichever branch it is of)."""
    keys = list(keys)
    rows: dict[int, list[Values]] = {}
    for occ_id, anchor in route.anchors.items():
        positions = [plan.key_names.index(n) for n in anchor.using]
        wanted = [tuple(key[i] for i in positions) for key in keys]
        rows[occ_id] = store.lookup(anchor.table, anchor.columns, wanted, anchor.null_safe)
    for link in plan.links:
        parent_table = plan.occurrence(link.parent).table
        rows[link.child] = _hop(store, parts, route.down[link.child], rows[link.parent], parent_table)
    return rows
