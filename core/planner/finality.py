"""Event-time windows in a view's key, and when a window's row is final.

A view grouped by a window of an event source's event time - `date_trunc('hour', viewed_at)`, or
Spark's `window(viewed_at, '1 hour')` (rewritten by `lakemv.core.planner.timewindows`) - has one row per group
and window. Once the source's watermark reaches the window's end no event can join it any more
(lakemv.core.cdc.events: an event older than the watermark is late), so the row is final. Such a view gets
one more output column, `window_final`, computed from the watermark with the rest of the row: the
incremental step, a backfill and `lakemv verify` all read it the same way. Pure.

A view that joins other event streams to the windowed one is final only once none of them can bring an
event into the window either (`over_joins`): each joined stream's events meet the window's only up to
a time bound its conditions give (`lakemv.core.planner.bounds.event_limits`: `p.paid_at <= o.ordered_at
+ INTERVAL 1 HOUR` lets a payment reach an hour's orders until an hour after it ends), so the window
turns final when every stream's watermark has passed its end plus that stream's bound: the `horizon`.
A joined stream with no such bound can always reach it: its rows never turn final. A change of a CDC
table the view joins still changes a final row (table-table enrichment re-enriches every row); final
says no event can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner.bounds import event_limits
from lakemv.core.planner.sqltools import spark_tree
from lakemv.core.sql.quote import q

FINAL = "window_final"
_DAY = 86_400_000_000
# date_trunc's units and the longest window each makes (a month of 31 days, a quarter of 92, a leap year)
_UNITS = {
    "SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000, "DAY": _DAY, "WEEK": 7 * _DAY,
    "MONTH": 31 * _DAY, "QUARTER": 92 * _DAY, "YEAR": 366 * _DAY,
}  # fmt: skip


class Finality(BaseModel):
    """Which key column holds a window's start over which event source, and how its end is computed."""

    model_config = ConfigDict(frozen=True)

    source: str  # the event source whose watermark closes the window
    column: str  # the view's key column holding the window's start
    end: str  # Spark SQL of the window's end over `{start}`, the start column's reference
    size: int  # the longest a window lasts, in micros: its events are needed until it is final
    lateness: int = 0  # the source's allowed lateness when planned: another one judges windows anew
    # other event streams joined: (source, offset, its lateness): the window is final once that source's
    # watermark is also at or past its end plus the offset (micros)
    joined: tuple[tuple[str, int, int], ...] = ()
    never: str | None = None  # why the window's rows never turn final (a joined stream with no time bound)

    def end_over(self, alias: str) -> str:
        return self.end.format(start=f"{alias}.{q(self.column)}")

    @property
    def marks(self) -> tuple[tuple[str, int], ...]:
        """(source, offset) of every watermark the window waits for: its own source's at its end,
        each joined stream's at its end plus the offset."""
        return ((self.source, 0), *((source, offset) for source, offset, _ in self.joined))

    @property
    def version(self) -> str:
        """What judges a window final beside the definition: the latenesses, the joined streams' bounds."""
        joined = "".join(f"-{source}{offset:+d}l{lateness}" for source, offset, lateness in self.joined)
        return f"l{self.lateness}{joined}" + ("-never" if self.never else "")

    def horizon(self, watermarks: Mapping[str, int | None]) -> int | None:
        """The latest window end that is final under `watermarks` (epoch micros), None while none is:
        a watermark it waits for is not known yet, or its windows never turn final."""
        if self.never is not None:
            return None
        marks = [(watermarks.get(source), offset) for source, offset in self.marks]
        if any(mark is None for mark, _ in marks):
            return None
        return min(mark - offset for mark, offset in marks)  # type: ignore[operator]


def window_of(expression: str, event_time: str) -> tuple[str, int] | None:
    """The end of the window `expression` starts, as a template over `{start}`, and the window's
    longest size, when `expression` is a window start over `event_time` (a column of the plan's
    `_lmv_self`); else None."""
    tree = sqlglot.parse_one(expression, read="spark")
    if isinstance(tree, exp.TimestampTrunc | exp.DateTrunc) and _is_column(tree.this, event_time):
        unit = tree.args["unit"].name.upper() if tree.args.get("unit") is not None else ""
        if unit in _UNITS:
            return f"{{start}} + INTERVAL '1' {unit}", _UNITS[unit]
        return None
    size = tumbling_size(tree, event_time)
    return None if size is None else (f"timestamp_micros(unix_micros({{start}}) + {size})", size)


def tumbling_size(tree: exp.Expression, event_time: str) -> int | None:
    """The size in micros of `timestamp_micros(unix_micros(t) - pmod(unix_micros(t) - offset, size))`."""
    found = tumbling_window(tree)
    return found[2] if found is not None and found[0] == event_time else None


def tumbling_window(tree: exp.Expression) -> tuple[str, int, int] | None:
    """(column, offset, size) of a tumbling window start as `lakemv.core.planner.timewindows` writes it, else None."""
    if not (isinstance(tree, exp.Anonymous) and tree.name.upper() == "TIMESTAMP_MICROS" and len(tree.expressions) == 1):
        return None
    sub = tree.expressions[0]
    if not (isinstance(sub, exp.Sub) and isinstance(sub.this, exp.UnixMicros) and isinstance(sub.this.this, exp.Column)):
        return None
    pmod = sub.expression
    if not (isinstance(pmod, exp.Anonymous) and pmod.name.upper() == "PMOD" and len(pmod.expressions) == 2):
        return None
    shifted, size = pmod.expressions
    if not (isinstance(shifted, exp.Sub) and shifted.this == sub.this and _is_number(shifted.expression) and _is_number(size)):
        return None
    return sub.this.this.name, int(shifted.expression.name), int(size.name)


def _is_number(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string


def _is_column(node: exp.Expression | None, name: str) -> bool:
    return isinstance(node, exp.Column) and node.name == name


def finality(keys: Mapping[str, str], anchor_table: str, sources: Mapping[str, SourceTable]) -> Finality | None:
    """The window of a view keyed by `keys` (name -> expression over its anchor, a read of
    `anchor_table`), when one key column is a window over an event source's event time."""
    source = sources.get(anchor_table)
    if source is None or not source.is_events or source.event_time is None:
        return None
    for name, expression in keys.items():
        window = window_of(expression, source.event_time)
        if window is not None:
            return Finality(source=source.name, column=name, end=window[0], size=window[1], lateness=source.lateness_micros)
    return None


def over_joins(final: Finality, anchor: str, aliases: Sequence[tuple[str, str]], body: str, sources: Mapping[str, SourceTable]) -> Finality:
    """`final` for a view whose planned `body` reads `aliases` ((alias, table) of every read; `anchor`:
    the windowed read's alias): each other read of an event source must be bounded in time against
    the anchor's events, directly or through other reads (`event_limits`), or the window never turns final."""
    events = [(alias, table) for alias, table in aliases if (s := sources.get(table)) is not None and s.is_events]
    others = [(alias, table) for alias, table in events if alias != anchor]
    if not others:
        return final
    names = [alias for alias, _ in events]
    if len(set(names)) != len(names):
        return final.model_copy(update={"never": "it reads event sources under one alias twice, so their time bounds cannot be told apart"})
    limits = event_limits(body, dict(events), sources)
    reach = {anchor: 0}  # alias -> the most its event time can exceed the anchor's (the least bound over chains of them)
    for _ in names:  # Bellman-Ford over the few reads
        for (later, earlier), limit in limits.items():
            if earlier in reach and reach[earlier] + limit < reach.get(later, reach[earlier] + limit + 1):
                reach[later] = reach[earlier] + limit
    joined: dict[str, int] = {}
    for alias, table in others:
        if alias not in reach:
            return final.model_copy(update={
                "never": f"it joins {table} ({alias}) with no bound on how much later than {final.source}'s event time its events may be, "
                "so one of them can reach any window"})  # fmt: skip
        joined[table] = max(joined.get(table, reach[alias]), reach[alias])
    return final.model_copy(update={"joined": tuple((t, offset, sources[t].lateness_micros) for t, offset in sorted(joined.items()))})


def final_rows(body: exp.Query, final: Finality | None, watermarks: Mapping[str, int | None]) -> exp.Query:
    """The view's rows from its planned `body`, with `window_final` when it has a window: whether
    the window's end is at or before its horizon under `watermarks` (epoch micros)."""
    if final is None:
        return body
    mark = final.horizon(watermarks)
    flag = "FALSE" if mark is None else f"coalesce({final.end_over('_lmv_w')} <= timestamp_micros({int(mark)}), FALSE)"
    return exp.select("_lmv_w.*", exp.alias_(spark_tree(flag), FINAL)).from_(body.subquery("_lmv_w"))


def final_rows_sql(body: str, final: Finality | None, watermarks: Mapping[str, int | None]) -> str:
    """`final_rows` over the SQL text of a body."""
    if final is None:
        return body
    return final_rows(spark_tree(body), final, watermarks).sql(dialect="spark")  # type: ignore[arg-type]


def finalizing_sql(final: Finality, view_table: str, key_names: tuple[str, ...], mark: int, since: int | None) -> str:
    """Keys of the view's rows not yet final whose window ends at or before the horizon `mark` (and
    after `since`, the horizon they were last judged by, which lets Iceberg skip older files)."""
    end = final.end_over("v")
    where = [f"NOT v.{FINAL}", f"{end} <= timestamp_micros({int(mark)})"]
    if since is not None:
        where.append(f"{end} > timestamp_micros({int(since)})")
    columns = ", ".join(f"v.{q(k)}" for k in key_names)
    return f"SELECT {columns} FROM {view_table} AS v WHERE {' AND '.join(where)}"


def checked_sql(sql: str, final: Finality | None, sources: Mapping[str, SourceTable]) -> str:
    """The view's SQL as an independent engine recomputes it (`lakemv verify`): with `window_final`
    judged by the watermarks its event sources' tables give (newest event time minus the lateness)."""
    if final is None:
        return sql
    if final.never is not None:
        return f"SELECT _lmv_w.*, FALSE AS {FINAL} FROM ({sql}) AS _lmv_w"
    tests = []
    for name, offset in final.marks:
        source = sources[name]
        mark = f"(SELECT unix_micros(max({q(source.event_time or '')})) - {source.lateness_micros} FROM {q(source.name)})"
        tests.append(f"unix_micros({final.end_over('_lmv_w')}) + {offset} <= {mark}")
    return f"SELECT _lmv_w.*, coalesce({' AND '.join(tests)}, FALSE) AS {FINAL} FROM ({sql}) AS _lmv_w"


def disjoint_windows(starts: list[exp.Expression]) -> bool:
    """Whether the window starts of UNION ALL branches are tumbling windows of one column and size
    at different offsets (a hopping window, `lakemv.core.planner.timewindows`): no start is in two branches."""
    found = [tumbling_window(s) for s in starts]
    if any(f is None for f in found):
        return False
    columns, offsets, sizes = zip(*found, strict=True)  # type: ignore[misc]
    return len(set(columns)) == 1 and len(set(sizes)) == 1 and len({o % sizes[0] for o in offsets}) == len(offsets)
