"""A recompute's rows against the stored digests of its keys: what changed, for the change feed and
the view (`IndexedView.diff`), and what the store records after the commit."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from lakemv.core.sql.diff import repeated
from lakemv.core.sql.viewsql import DIFF_OP
from lakemv.core.state.codec import Values, rows_of, to_arrow
from lakemv.spark.batch.sync import DIGEST

if TYPE_CHECKING:
    from lakemv.spark.views.indexed import IndexedView


def diff_rows(view: IndexedView, new: pa.Table, keys: list[Values], also: Set[Values] = frozenset(), stored: Mapping[Values, str] | None = None) -> Diff:
    """The rows that changed against the stored digests of `keys` (read unless given; see `Diff`). A
    key with several new rows (lakemv.core.sql.diff.repeated; `also`: more, left out of `new`) is left alone."""
    stored = view.store.digests(view.plan.name, keys) if stored is None else stored
    new_keys = rows_of(new, view.plan.key_names)
    duplicated = repeated(new_keys) | also
    digests = new.column(DIGEST).to_pylist()
    changed = [i for i, (k, d) in enumerate(zip(new_keys, digests, strict=True)) if k not in duplicated and stored.get(k) != d]
    present = set(new_keys) | duplicated  # a duplicated key is present: its stored row stays
    gone = [k for k in keys if k not in present and k in stored]
    schema = view.view_schema()
    fields = [f.with_nullable(True) for f in schema] + [pa.field(DIFF_OP, pa.string())]
    upserted = new.select(list(view.plan.columns)).take(pa.array(changed, type=pa.int64())).cast(pa.schema(fields[:-1]))
    upserted = upserted.append_column(DIFF_OP, pa.array(["upsert"] * len(changed), type=pa.string()))
    removed = to_arrow(gone, view.key_schema())
    for field in fields:
        if field.name not in removed.column_names:
            value = "delete" if field.name == DIFF_OP else None
            removed = removed.append_column(field, pa.array([value] * len(gone), type=field.type))
    diff = pa.concat_tables([upserted, removed.select([f.name for f in fields]).cast(pa.schema(fields))])
    held = [new_keys[i] for i in changed if new_keys[i] in stored] + gone
    times = None
    if view.settle is not None:  # each row's time, epoch micros, by which its digest is dropped
        stamps = new.column(view.settle).cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()
        times = [stamps[i] for i in changed]
    return Diff(diff, held, [(new_keys[i], digests[i]) for i in changed], times, gone, duplicated)


class Diffed(NamedTuple):
    """A view's diff of a batch (`IndexedView.diff`), its feed rows (None: written with the view), and its
    seconds (its share of the recompute, then its diff)."""

    diff: Diff
    feed: pa.Table | None
    seconds: float
    diff_seconds: float


class Diff(NamedTuple):
    """What a recompute changed: `rows` for the change feed and the view; `held`, the keys among
    them the view holds a row for; the digests to store (and each row's settling time, for a view
    whose rows settle), the keys to drop, and the keys left alone (several rows each)."""

    rows: pa.Table
    held: list[Values]
    upserts: list[tuple[Values, str]]
    times: list[int | None] | None
    deletes: list[Values]
    duplicated: set[Values]
