"""What a batch really changes in a mirror, and the old and new images views must look at. Pure.

Old images come from the mirror before the MERGE (Debezium before-images are often missing); new
images are the incoming rows that will win the MERGE's position guard. Stale changes (replays,
reordered files) change nothing and produce no images. An update's two images carry the columns it
changed (`CHANGED`), so a view that reads none of them is not reached by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakemv.catalog.tables import DELETED, POSITION

Row = dict[str, Any]
Values = tuple[Any, ...]
CHANGED = "_lmv_changed"  # the images' column: the columns an update changed (NULL: the row appeared or went)
SIGN = "_lmv_sign"  # the images' column: -1 an old image (the row as it was), +1 a new one (lakemv.core.planner.aggregates)


@dataclass
class Effect:
    """Indexes of the incoming rows that apply, and the old + new images of the rows they change."""

    applied: list[int] = field(default_factory=list)
    images: list[Values] = field(default_factory=list)  # values in the order of the columns compared
    changed: list[list[str] | None] = field(default_factory=list)  # per image: what its update changed (None: all)
    signs: list[int] = field(default_factory=list)  # per image: -1 old, +1 new


def effect_of_values(
    columns: Sequence[str],
    keys: Sequence[Values],
    incoming: Sequence[Values],
    positions: Sequence[int],
    deleted: Sequence[bool],
    stored: Mapping[Values, tuple[Values, int, bool]],
) -> Effect:
    """Compare one row per key (`incoming[i]`: the values of `columns`, with `keys[i]`, `positions[i]`,
    `deleted[i]`; deduplicated) with the mirror's stored rows for those keys (`stored`: key ->
    values of `columns`, position, deleted). Positional: no row is made a dict."""
    effect = Effect()
    applied, images, changes, signs = effect.applied, effect.images, effect.changed, effect.signs
    for index, (key, new, position, gone) in enumerate(zip(keys, incoming, positions, deleted, strict=True)):
        current = stored.get(key)
        if current is not None and position <= current[1]:
            continue  # the mirror already holds this change or a newer one
        applied.append(index)
        old = None if current is None or current[2] else current[0]
        if gone:
            new = None
        if old == new:
            continue  # a re-delivered row or a touch: no view can see a difference
        changed = None if old is None or new is None else [c for c, a, b in zip(columns, old, new, strict=True) if a != b]
        for image, sign in ((old, -1), (new, 1)):
            if image is not None:
                images.append(image)
                changes.append(changed)
                signs.append(sign)
    return effect


def effect_of(primary_key: Sequence[str], columns: Sequence[str], incoming: Sequence[Row], stored: Sequence[Row]) -> Effect:
    """`effect_of_values` for rows as dicts (declared columns, position, deleted flag)."""
    key = lambda row: tuple(row[k] for k in primary_key)  # noqa: E731
    values = lambda row: tuple(row[c] for c in columns)  # noqa: E731
    return effect_of_values(
        columns, [key(r) for r in incoming], [values(r) for r in incoming], [r[POSITION] for r in incoming], [r[DELETED] for r in incoming],
        {key(r): (values(r), r[POSITION], r[DELETED]) for r in stored},
    )  # fmt: skip
