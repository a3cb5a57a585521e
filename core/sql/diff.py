"""A view's diff by content, in the driver: recomputed rows against stored rows of the same keys.

Pure (pyarrow only): the upserts and deletes a batch's few keys give, ready for the change feed and
the view MERGE.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from lakemv.core.sql.viewsql import DIFF_OP

Key = TypeVar("Key", bound=Hashable)


def repeated(keys: Iterable[Key]) -> set[Key]:
    """Keys that several rows of a recompute share. The planner proves a key unique given the sources'
    declared keys, so this happens only when a declared unique key is violated (lakemv.core.cdc.unique): such a
    key is *held* - its view row stays as it was, neither replaced by one of the rows nor deleted."""
    return {key for key, n in Counter(keys).items() if n > 1}


def duplicated_keys(new: pa.Table, key_names: Sequence[str]) -> set[tuple[Any, ...]]:
    """`repeated` over the key columns of a recompute."""
    return repeated(zip(*(new.column(k).to_pylist() for k in key_names), strict=True))


def content_diff(
    new: pa.Table, old: pa.Table, key_names: Sequence[str], schema: pa.Schema, held: Collection[tuple[Any, ...]] = ()
) -> pa.Table:
    """Rows of `new` whose content differs from `old`'s row of the same key ('upsert'), then the keys
    of `old` that `new` no longer has ('delete', other columns NULL), with the DIFF_OP column added. Keys
    in `held` (`duplicated_keys`) are left alone.

    Values compare as Python values (arrays, structs and maps included); NaN never equals itself
    here, which at worst rewrites an unchanged row."""
    stored = {tuple(r[k] for k in key_names): r for r in old.to_pylist()}
    upserts, present = [], set(held)
    for row in new.to_pylist():
        key = tuple(row[k] for k in key_names)
        present.add(key)
        if key not in held and stored.get(key) != row:
            upserts.append({**row, DIFF_OP: "upsert"})
    deletes = [{**{k: row[k] for k in key_names}, DIFF_OP: "delete"} for key, row in stored.items() if key not in present]
    fields = [f.with_nullable(True) for f in schema] + [pa.field(DIFF_OP, pa.string())]  # a delete's values are NULL
    return pa.Table.from_pylist(upserts + deletes, schema=pa.schema(fields))


