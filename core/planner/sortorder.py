"""Lookup-aware layout: the columns each table is looked up by, as an Iceberg rewrite sort order.

An incremental step reads a table by the columns that link it to the view key: the anchor by the
key, a child by its link columns (recompute: `stars` semi-joined by `username`), a parent by the
columns a changed child row joins it on (affected keys: `repos` by `owner, name`). Compaction sorts
each table by those columns, so the min/max statistics of its data files let a lookup skip most
files. A table looked up in one way is sorted by that column tuple; a table looked up in several ways
is z-ordered by the leading columns of its two most used lookups.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lakemv.core.planner import SELF, ViewPlan

_PLAIN = re.compile(rf"^{SELF}\.`?([A-Za-z_][A-Za-z0-9_]*)`?$")


def _column(expression: str) -> str | None:
    """The column an expression over one occurrence is, when it is a bare column."""
    match = _PLAIN.match(expression)
    return match.group(1) if match else None


def _lookup(expressions: Iterable[str]) -> tuple[str, ...] | None:
    columns = tuple(_column(e) for e in expressions)
    return None if not columns or None in columns else columns  # type: ignore[return-value]


def lookups(plans: Iterable[ViewPlan]) -> dict[str, Counter[tuple[str, ...]]]:
    """Per source table, how often each column tuple is used to look its rows up."""
    found: dict[str, Counter[tuple[str, ...]]] = {}

    def add(table: str, columns: tuple[str, ...] | None) -> None:
        if columns:
            found.setdefault(table, Counter())[columns] += 1

    for plan in plans:
        for branch in plan.anchors:
            add(plan.occurrence(branch.anchor).table, _lookup(k.expr for k in branch.keys))
        for link in plan.links:
            add(plan.occurrence(link.child).table, _lookup(c for c, _, _ in link.pairs))
            add(plan.occurrence(link.parent).table, _lookup(p for _, p, _ in link.pairs))
    return found


@dataclass(frozen=True)
class SortOrder:
    """The order `rewrite_data_files` writes a table in: a column tuple, or a z-order of columns."""

    columns: tuple[str, ...]
    zorder: bool = False

    def sql(self) -> str:
        """The `sort_order` argument of Iceberg's rewrite_data_files procedure."""
        quoted = ", ".join(self.columns)
        return f"zorder({quoted})" if self.zorder else quoted

    def describe(self) -> str:
        return f"z-order({', '.join(self.columns)})" if self.zorder else f"sorted by {', '.join(self.columns)}"


def sort_orders(plans: Iterable[ViewPlan]) -> dict[str, SortOrder]:
    """Per source table the views read, the layout that serves their lookups best."""
    orders = {}
    for table, counts in lookups(plans).items():
        ranked = [columns for columns, _ in counts.most_common()]
        leading = list(dict.fromkeys(columns[0] for columns in ranked))
        if len(leading) == 1:
            # one leading column: the longest tuple that starts with it sorts for every lookup
            orders[table] = SortOrder(max(ranked, key=len))
        else:
            orders[table] = SortOrder(tuple(leading[:2]), zorder=True)
    return orders


def view_sort_orders(plans: Mapping[str, ViewPlan]) -> dict[str, SortOrder]:
    """Per view table: sorted by its key (the diff and the MERGE look view rows up by key)."""
    return {name: SortOrder(plan.key_names) for name, plan in plans.items()}
