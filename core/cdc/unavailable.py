"""Debezium's placeholder for values PostgreSQL did not send, and how lakemv keeps the stored value. Pure.

PostgreSQL stores long values out of line (TOAST). An UPDATE that leaves such a column unchanged logs
no value for it, and Debezium sends `__debezium_unavailable_value` in its place (base64 of those bytes
for a `bytea` column, a one-element list for an array) — in the after-image of the update, and in the
create half of a primary-key change, whose old row was deleted by the same WAL record (same LSN).
The placeholder is never data: the column's value is the row's previous one, found in order

1. earlier in the same batch (`carry`: the previous image of the key, or for a moved row, the last
   image of the key its transaction deleted at the same source position);
2. in the stored row (`fill`, given the live rows `lookup` finds: the key's own, else the moved row's
   old key's);

and a change whose value cannot be recovered is a dead letter with its reason, never applied.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakemv.catalog.declarations import SourceTable
    from lakemv.core.cdc.envelope import Change

PLACEHOLDER = "__debezium_unavailable_value"
# How the placeholder reads in a bytea column (binary.handling.mode base64 / base64-url-safe / hex).
SPELLINGS = frozenset(
    {
        PLACEHOLDER,
        base64.b64encode(PLACEHOLDER.encode()).decode(),
        base64.urlsafe_b64encode(PLACEHOLDER.encode()).decode(),
        PLACEHOLDER.encode().hex(),
    }
)

Lookup = Callable[[str, Sequence[tuple[Any, ...]]], Mapping[tuple[Any, ...], tuple[Any, ...]]]


def is_placeholder(value: Any) -> bool:
    """True for Debezium's placeholder of an unavailable value, in any column type's spelling."""
    if isinstance(value, str):
        return value in SPELLINGS
    if isinstance(value, list) and value:
        return all(isinstance(v, str) and v in SPELLINGS for v in value)
    return False


def _filled(change: Change, names: Sequence[str], prior: Change) -> Change:
    """`change` with its unavailable columns taken from `prior` where `prior` has them."""
    row = list(change.row or ())
    left = []
    for name in change.unavailable:
        if name in prior.unavailable:
            left.append(name)
        else:
            row[names.index(name)] = (prior.row or ())[names.index(name)]
    fill_from = (prior.fill_from or prior.key) if left else None
    return replace(change, row=tuple(row), unavailable=tuple(left), fill_from=fill_from)


def carry(source: SourceTable, changes: Iterable[Change]) -> list[Change]:
    """A table's changes (in line order) with unavailable values filled from earlier images of the
    same batch, in source order; what is left names the key whose stored row fills it (`fill_from`)."""
    names = source.column_names
    latest: dict[tuple[Any, ...], Change] = {}  # the newest image of each key so far (a delete: the image it removed)
    vacated: dict[int, tuple[Any, ...]] = {}  # source position -> key a delete removed there
    out: list[Change] = []
    for change in sorted(changes, key=lambda c: c.position):  # stable: a tie keeps line order
        if change.is_delete:
            vacated[change.position] = change.key
            out.append(change)
            continue
        if change.unavailable:
            prior = latest.get(change.key)
            old_key = vacated.get(change.position)
            if (prior is None or prior.is_delete) and old_key is not None and old_key != change.key:  # a moved row
                moved = latest.get(old_key)
                change = _filled(change, names, moved) if moved is not None and not moved.is_delete else replace(change, fill_from=old_key)
            elif prior is not None and not prior.is_delete:
                change = _filled(change, names, prior)
        latest[change.key] = change
        out.append(change)
    return out


def unfilled_keys(changes: Iterable[Change]) -> list[tuple[Any, ...]]:
    """The keys whose stored rows `fill` needs: each unfilled change's own, and its moved row's old key."""
    keys: dict[tuple[Any, ...], None] = {}
    for change in changes:
        if change.unavailable:
            keys[change.key] = None
            if change.fill_from is not None:
                keys[change.fill_from] = None
    return list(keys)


def fill(source: SourceTable, changes: list[Change], stored: Mapping[tuple[Any, ...], tuple[Any, ...]]) -> tuple[list[Change], list[Change]]:
    """(changes with every value filled, changes whose values no stored live row holds). `stored`
    maps keys to live rows (declared columns in order). The key's own row comes first: a replay finds
    the moved row at its new key, holding the values its first attempt kept."""
    names = source.column_names
    kept, lost = [], []
    for change in changes:
        if not change.unavailable:
            kept.append(change)
            continue
        row = stored.get(change.key) or (stored.get(change.fill_from) if change.fill_from is not None else None)
        if row is None:
            lost.append(change)
            continue
        values = list(change.row or ())
        for name in change.unavailable:
            values[names.index(name)] = row[names.index(name)]
        kept.append(replace(change, row=tuple(values), unavailable=(), fill_from=None))
    return kept, lost


def lost_reason(change: Change) -> str:
    """Why a change with an unrecoverable value is a dead letter, and what to do."""
    columns = ", ".join(change.unavailable)
    whose = f"the row it moved from {change.fill_from!r}" if change.fill_from is not None else f"row {change.key!r}"
    return (
        f"unavailable value in {columns}: Debezium sent its placeholder {PLACEHOLDER!r} (an unchanged TOASTed "
        f"column) and the lake holds no earlier value of {whose} to keep; snapshot the table first, or set "
        "REPLICA IDENTITY FULL on it so Debezium sends the value"
    )
