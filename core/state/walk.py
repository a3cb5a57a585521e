"""Walks over the store along a view's route. Pure logic over any store with `lookup`.

* `reach`: changed rows (old and new images) -> the view keys they can affect, hop by hop up to the
  anchor through the live rows as they are after the batch (as the scan-based path joins them);
* `gather`: a set of keys -> the rows each occurrence of the view reads for them, anchor first,
  then each child from its parent's rows;
* `reached_anchors`, `sides` (aggregates by delta over a join): the anchor rows changed rows reach,
  and the rows their joined rows read before the batch (`Before`: the store with the old images back)
  and after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import pyarrow as pa

from lakemv.core.planner import KeyColumn, ViewPlan
from lakemv.core.planner.model import Occurrence
from lakemv.core.state.codec import Values
from lakemv.core.state.layout import NOT_CONSTANT, Lookup, MirrorPart, Route, constant, plain_column


class Lookups(Protocol):
    def lookup(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> list[Values]: ...


def _project(rows: Iterable[Values], part: MirrorPart, columns: Sequence[str]) -> list[Values]:
    positions = [part.column_names.index(c) for c in columns]
    return [tuple(row[i] for i in positions) for row in rows]


DirectKeys = tuple[tuple[str | None, object], ...]  # per key: (its column, None) or (None, its constant)


def direct_keys(keys: Sequence[KeyColumn], part: MirrorPart, types: pa.Schema) -> DirectKeys | None:
    """How the driver finds an anchor's keys without an engine: each key a column of the anchor's part,
    or a constant (a UNION ALL's `'stars' AS kind`) of the view column's own type (`types`: Spark
    may widen a literal to another branch's type); None when one is neither."""
    found: list[tuple[str | None, object]] = []
    for key in keys:
        column = plain_column(key.expr)
        if column is not None and column in part.column_names:
            found.append((column, None))
            continue
        value = constant(key.expr)
        if value is NOT_CONSTANT or not _typed(value, types.field(key.name).type):
            return None
        found.append((None, value))
    return tuple(found)


def _typed(value: object, kind: pa.DataType) -> bool:
    """Whether a constant's Python value is the value Spark gives a view column of type `kind`."""
    if value is None:
        return True
    if isinstance(value, bool):
        return pa.types.is_boolean(kind)
    if isinstance(value, int):
        return pa.types.is_integer(kind)
    return isinstance(value, str) and (pa.types.is_string(kind) or pa.types.is_large_string(kind))


def project_keys(rows: Iterable[Values], part: MirrorPart, keys: DirectKeys) -> set[Values]:
    """The keys of anchor rows found as `direct_keys` says."""
    positions = [None if column is None else part.column_names.index(column) for column, _ in keys]
    return {tuple(value if i is None else row[i] for i, (_, value) in zip(positions, keys, strict=True)) for row in rows}


def _hop(store: Lookups, parts: Mapping[str, MirrorPart], hop: Lookup, rows: list[Values], table: str) -> list[Values]:
    if not rows:
        return []
    return store.lookup(hop.table, hop.columns, _project(rows, parts[table], hop.using), hop.null_safe)


def _climbed(
    plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, images: Mapping[str, list[Values]]
) -> Iterator[tuple[Occurrence, list[Values], str]]:
    """Per occurrence with images: the rows its hops up the view's route reach, and their table."""
    for occ in plan.occurrences:
        rows = images.get(occ.table)
        if not rows:
            continue
        table = occ.table
        for hop in route.up[occ.id]:
            rows = _hop(store, parts, hop, rows, table)
            table = hop.table
        yield occ, rows, table


def reach(
    plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, images: Mapping[str, list[Values]]
) -> tuple[set[Values], dict[int, list[Values]]]:
    """(keys, anchor rows): the keys the images reach, and per anchor (a UNION ALL has one per branch)
    the rows whose keys are expressions or constants (the caller evaluates those with that anchor's
    key expressions)."""
    keys: set[Values] = set()
    anchor_rows: dict[int, list[Values]] = {}
    for occ, rows, table in _climbed(plan, route, parts, store, images):
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


Fanout = Callable[[str, Lookup], float]  # rows a hop finds per row of the table it starts from (`Store.fanout`)


def estimated_rows(plan: ViewPlan, route: Route, anchors: Mapping[int, float], fanout: Fanout) -> float:
    """About how many rows `gather` reads for keys whose anchors read `anchors` rows (per anchor): each
    occurrence's rows are its parent's times the rows its hop finds per parent row (`fanout(parent
    table, hop)`), one for a link by a unique key. For choosing how to maintain the view, never for its rows."""
    rows = {anchor: float(count) for anchor, count in anchors.items()}
    for link in plan.links:  # parents before children
        parent = plan.occurrence(link.parent).table
        rows[link.child] = rows.get(link.parent, 0.0) * (1.0 if link.unique else fanout(parent, route.down[link.child]))
    return sum(rows.values())


def estimated_reach(plan: ViewPlan, route: Route, images: Mapping[str, int], fanout: Fanout) -> float:
    """About how many anchor rows `reached_anchors` finds for `images` (per table, how many): each
    occurrence's images times the rows each hop up finds per row (and the anchor's lookup by the key
    columns its last link carries). For choosing how to maintain the view, never for its rows."""
    total = 0.0
    for occ in plan.occurrences:
        rows, table = float(images.get(occ.table, 0)), occ.table
        hops = list(route.up[occ.id])
        if rows and len(hops) < len(plan.chain(occ.id)):  # the last link carries the key: the anchor's rows by those columns
            anchor = route.anchors[plan.anchor]
            using = tuple(route.key_columns[occ.id][plan.key_names.index(n)] for n in anchor.using)
            if all(c is not None for c in using):
                hops.append(anchor.model_copy(update={"using": using}))
        for hop in hops:
            if not rows:
                break
            rows *= fanout(table, hop)
            table = hop.table
        total += rows
    return total


# ---- aggregates by delta over a join (lakemv.core.planner.aggregates): each anchor row is one joined row ----
def reached_anchors(plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, images: Mapping[str, list[Values]]) -> list[Values]:
    """The anchor rows whose joined row the images may change, as they are after the batch (an image
    of the anchor itself, old or new, is its own row). An occurrence whose hops stop short of the
    anchor (their last link carries the key) reaches the anchor rows of its keys."""
    found: list[Values] = []
    keys: set[Values] = set()
    for occ, rows, table in _climbed(plan, route, parts, store, images):
        if len(route.up[occ.id]) == len(list(plan.chain(occ.id))):
            found.extend(rows)
        else:
            keys.update(_project(rows, parts[table], route.key_columns[occ.id]))  # type: ignore[arg-type]
    if keys:
        anchor = route.anchors[plan.anchor]
        positions = [plan.key_names.index(n) for n in anchor.using]
        found.extend(store.lookup(anchor.table, anchor.columns, [tuple(k[i] for i in positions) for k in keys], anchor.null_safe))
    return found


Changed = Mapping[str, Mapping[Values, Values | None]]  # per table: a changed row's primary key -> its row before the batch (None: new)


def changed_rows(parts: Mapping[str, MirrorPart], images: Mapping[str, Sequence[Values]], signs: Mapping[str, Sequence[int]]) -> dict[str, dict[Values, Values | None]]:
    """Per table, each row the batch changed: its primary key -> its old image (-1), or None when the
    batch inserted it (a new image, +1, without an old one)."""
    changed: dict[str, dict[Values, Values | None]] = {}
    for table, rows in images.items():
        part = parts[table]
        pk = [part.column_names.index(c) for c in part.primary_key]
        old: dict[Values, Values | None] = {}
        for row, sign in zip(rows, signs[table], strict=True):
            key = tuple(row[i] for i in pk)
            if sign < 0:
                old[key] = row
            else:
                old.setdefault(key, None)
        changed[table] = old
    return changed


class Before:
    """The store's live rows as they were before the batch: each changed row's old image in place of
    its row (none where the batch inserted it). Lookups only."""

    def __init__(self, store: Lookups, parts: Mapping[str, MirrorPart], changed: Changed):
        self.store = store
        self.parts = parts
        self.changed = changed

    def lookup(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> list[Values]:
        values = list(values)
        found = self.store.lookup(table, columns, values, null_safe)
        changed = self.changed.get(table)
        if not changed:
            return found
        part = self.parts[table]
        pk = [part.column_names.index(c) for c in part.primary_key]
        rows = [row for row in found if tuple(row[i] for i in pk) not in changed]
        positions = [part.column_names.index(c) for c in columns]
        wanted = set(values)
        for old in changed.values():
            if old is None:
                continue
            probe = tuple(old[i] for i in positions)
            if probe in wanted and not any(v is None and not safe for v, safe in zip(probe, null_safe, strict=True)):
                rows.append(old)
        return rows


def sides(
    plan: ViewPlan, route: Route, parts: Mapping[str, MirrorPart], store: Lookups, anchors: Iterable[Values], changed: Changed
) -> tuple[dict[int, list[Values]], dict[int, list[Values]]]:
    """(before, after): the rows each occurrence reads for the anchor rows `anchors` (found again by
    primary key) before the batch and after it: an anchor row's joined row is computed from each side."""
    table = plan.occurrence(plan.anchor).table
    part = parts[table]
    pk = [part.column_names.index(c) for c in part.primary_key]
    keys = sorted({tuple(row[i] for i in pk) for row in anchors}, key=repr)
    found = []
    for lookups in (Before(store, parts, changed), store):
        rows = {plan.anchor: lookups.lookup(table, part.primary_key, keys, [False] * len(pk))}
        for link in plan.links:  # parents before children
            rows[link.child] = _hop(lookups, parts, route.down[link.child], rows[link.parent], plan.occurrence(link.parent).table)
        found.append(rows)
    return found[0], found[1]
