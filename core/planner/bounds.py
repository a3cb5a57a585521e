"""Time bounds between two event streams joined in a view: how long each must wait for the other. Pure.

    FROM clicks c JOIN searches s ON s.search_id = c.search_id
     AND c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR

says that a click and its search are at most an hour apart: `clicked_at - searched_at` lies in
[0, 1 hour]. With each stream's watermark (lakemv.core.cdc.events: no event older than it arrives), a search
can meet no click once the clicks' watermark is past its time plus the hour, and a click no search
once the searches' watermark is past its time: both are dropped from the local state then
(`lakemv.core.planner.retention`). The bounds are read from the comparisons of the two event-time
columns in the view's JOIN conditions and WHERE clause: `a.t >= b.t + x`, `a.t <= b.t - y`,
`BETWEEN`, with interval literals.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakemv.catalog.declarations import SourceTable
from lakemv.core.durations import parse_duration


class TimeBound(BaseModel):
    """`first`'s event time minus `second`'s lies in [low, high] (micros) for every row of the view."""

    model_config = ConfigDict(frozen=True)

    first: str
    second: str
    low: int
    high: int


def _term(node: exp.Expression, times: Mapping[str, str]) -> tuple[str, int] | None:
    """(alias, offset) of `alias.event_time [+|- INTERVAL ...]`, else None."""
    offset = 0
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
        interval = node.expression
        unit = interval.args.get("unit")
        try:
            size = parse_duration(f"{interval.this.name} {unit.name if unit is not None else ''}".strip())
        except ValueError:
            return None
        offset = size if isinstance(node, exp.Add) else -size
        node = node.this
    if isinstance(node, exp.Column) and times.get(node.table) == node.name:
        return node.table, offset
    return None


def _comparisons(condition: exp.Expression) -> list[tuple[exp.Expression, str, exp.Expression]]:
    """(left, op, right) of each `>=`, `>`, `<=`, `<` and BETWEEN among the AND-ed conjuncts."""
    found = []
    for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        if isinstance(part, exp.GTE | exp.GT):
            found.append((part.this, ">=", part.expression))
        elif isinstance(part, exp.LTE | exp.LT):
            found.append((part.this, "<=", part.expression))
        elif isinstance(part, exp.Between):
            found += [(part.this, ">=", part.args["low"]), (part.this, "<=", part.args["high"])]
    return found


def event_limits(body: str, aliases: Mapping[str, str], sources: Mapping[str, SourceTable]) -> dict[tuple[str, str], int]:
    """For the event-source reads of a planned `body` (`aliases`: alias -> table, unique), the upper
    limits its conditions put on the difference of two of their event times: `(x, y) -> limit` when
    `x.t - y.t <= limit` for every row the view reads. Every AND-ed comparison of a JOIN's ON or a
    WHERE counts, in the main query and in any subquery: each bounds the rows that can meet there."""
    times = {alias: sources[table].event_time or "" for alias, table in aliases.items() if sources[table].is_events}
    limits: dict[tuple[str, str], int] = {}
    tree = sqlglot.parse_one(body, read="spark")
    conditions = [j.args["on"] for j in tree.find_all(exp.Join) if j.args.get("on") is not None]
    conditions += [w.this for w in tree.find_all(exp.Where)]
    for condition in conditions:
        for left, op, right in _comparisons(condition):
            a, b = _term(left, times), _term(right, times)
            if a is None or b is None or a[0] == b[0]:
                continue
            if op == ">=":  # a.t + a_off >= b.t + b_off  =>  b.t - a.t <= a_off - b_off
                a, b = b, a
            # a.t + a_off <= b.t + b_off  =>  a.t - b.t <= b_off - a_off
            pair, limit = (a[0], b[0]), b[1] - a[1]
            limits[pair] = min(limits.get(pair, limit), limit)
    return limits


def time_bound(body: str, aliases: Mapping[str, str], sources: Mapping[str, SourceTable]) -> TimeBound | None:
    """The bound between the two event sources a planned `body` reads (`aliases`: alias -> table),
    when it reads exactly two event sources and nothing else, and bounds their difference both ways."""
    tables = set(aliases.values())
    if len(aliases) != 2 or len(tables) != 2 or not all(sources[t].is_events for t in tables):
        return None
    first, second = sorted(aliases)
    limits = event_limits(body, aliases, sources)
    if (first, second) not in limits or (second, first) not in limits:
        return None
    return TimeBound(first=aliases[first], second=aliases[second], low=-limits[(second, first)], high=limits[(first, second)])
