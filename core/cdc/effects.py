"""What a batch really changes in a mirror, and the old and new images views must look at. Pure.

Old images come from the mirror before the MERGE (Debezium before-images are often missing); new
images are the incoming rows that will win the MERGE's position guard. Stale changes (replays,
reordered files) change nothing and produce no images. An update's two images carry the columns it
changed (`CHANGED`), so a view that reads none of them is not reached by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lakemv.catalog.tables import DELETED, POSITION

Row = dict[str, Any]
CHANGED = "_lmv_changed"  # the images' column: the columns an update changed (NULL: the row appeared or went)


@dataclass
class Effect:
    """Indexes of the incoming rows that apply, and the old + new images of the rows they change."""

    applied: list[int] = field(default_factory=list)
    images: list[Row] = field(default_factory=list)
    changed: list[list[str] | None] = field(default_factory=list)  # per image: what its update changed (None: all)


def effect_of(
    primary_key: Sequence[str], columns: Sequence[str], incoming: Sequence[Row], stored: Sequence[Row]
) -> Effect:
    """Compare one row per key (`incoming`, deduplicated) with the mirror's stored rows for those keys."""
    by_key = {tuple(row[k] for k in primary_key): row for row in stored}
    effect = Effect()
    for index, row in enumerate(incoming):
        current = by_key.get(tuple(row[k] for k in primary_key))
        if current is not None and row[POSITION] <= current[POSITION]:
            continue  # the mirror already holds this change or a newer one
        effect.applied.append(index)
        old = None if current is None or current[DELETED] else {c: current[c] for c in columns}
        new = None if row[DELETED] else {c: row[c] for c in columns}
        if old == new:
            continue  # a re-delivered row or a touch: no view can see a difference
        changed = None if old is None or new is None else [c for c in columns if old[c] != new[c]]
        for image in (old, new):
            if image is not None:
                effect.images.append(image)
                effect.changed.append(changed)
    return effect
