"""Aggregates by delta: which views a changed row can update without reading its whole group. Pure.

A view qualifies when it reads one table, or joins its anchor to tables each matched by a unique key
(its primary key, a declared unique key: at most one row per anchor row, so each anchor row is one
joined row) - or, when its key's joins fan out, has another table whose rows are its joined rows that
way (its grain, `ViewPlan.grain`: TPC-H Q5's line items, keyed by nation) - has no subquery, groups by its key (or is one row, keyed by constants), has no HAVING,
DISTINCT or window, and every output beyond the key is an expression of decomposable aggregates of
the row: `count(*)`, `count(x)`, `sum(x)`, `avg(x)`, `count_if(p)`, `min(x)`, `max(x)` (not
`DISTINCT`). Each aggregate keeps a state per key that a signed row (+1 new image, -1 old image; for a
join, an anchor row's joined row after the batch and before it) updates by addition
(`lakemv.core.sql.deltasql`):

* `count(*)`: the group's rows (also whether the group still exists);
* `sum(x)`, `avg(x)`: the sum of the non-NULL values and their count (a sum over none is NULL);
* `count(x)`, `count_if(p)`: a count;
* `min(x)`, `max(x)`: the extreme, which new values can only improve; when an old image held the
  extreme itself, the group is recomputed from its rows instead (the retraction fallback).

`delta_plan` says which, or why not (`explain` shows it). A view outside the class keeps
recomputing its keys' groups.
"""

from __future__ import annotations

from typing import Literal

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakemv.core.planner.model import OCCURRENCE, SELF, ViewPlan
from lakemv.core.planner.sqltools import select_from

Kind = Literal["rows", "count", "count_if", "sum", "avg", "min", "max"]
_KINDS: dict[type, Kind] = {exp.Sum: "sum", exp.Avg: "avg", exp.CountIf: "count_if", exp.Min: "min", exp.Max: "max"}


class Aggregate(BaseModel):
    """One aggregate call of the view: its kind and argument (SQL over SELF; None for count(*))."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    arg: str | None = None
    text: str | None = None  # the argument as the view writes it, when `arg` is a column of its joined rows

    @property
    def retracts(self) -> bool:
        """Whether removing a row can need the group's other rows (an extreme)."""
        return self.kind in ("min", "max")

    def describe(self) -> str:
        call = {"rows": "count", "count_if": "count_if"}.get(self.kind, self.kind)
        shown = self.text if self.text is not None else None if self.arg is None else self.arg.replace(f"{SELF}.", "")
        return f"{call}({'*' if shown is None else shown})"


class Output(BaseModel):
    """A non-key output column: an expression over aggregates, each written `{i}` for aggregate i."""

    model_config = ConfigDict(frozen=True)

    name: str
    template: str  # Spark SQL with `_lmv_agg_<i>` where aggregate i's value goes


class DeltaPlan(BaseModel):
    """How a view's aggregates follow signed rows: its key expressions, the row filter, the distinct
    aggregates its outputs use, and each output over them."""

    model_config = ConfigDict(frozen=True)

    keys: tuple[tuple[str, str], ...]  # (key column, expression over SELF)
    where: str | None  # over SELF
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[Output, ...]
    grouped: bool  # False: one row keyed by constants, present even over no rows
    # A join: its joined rows (Spark SQL over the occurrences, named OCCURRENCE), one per anchor row,
    # with the key columns and each aggregate's argument as `_lmv_a<i>`; `keys`, `where` and the
    # aggregates' arguments are then over those rows. None: the rows are the one table's.
    rows: str | None = None
    grain: str | None = None  # a join that fans out from its key: the table whose rows are its joined rows (`ViewPlan.grain`)

    @property
    def retracting(self) -> tuple[int, ...]:
        """The aggregates whose retraction may need the group's rows."""
        return tuple(i for i, a in enumerate(self.aggregates) if a.retracts)

    def describe(self) -> str:
        by_delta = [a.describe() for a in self.aggregates if not a.retracts]
        extremes = [a.describe() for a in self.aggregates if a.retracts]
        text = f"by delta: {', '.join(by_delta) or 'none'}"
        if self.grain is not None:
            text += f" (over the joined rows of each {self.grain} row)"
        if extremes:
            text += f"; {', '.join(extremes)} by delta until a change removes the extreme, which recomputes its group"
        return text


AGG = "_lmv_agg_{}"


def delta_plan(plan: ViewPlan) -> DeltaPlan | str:
    """The view's aggregates as deltas, or why they are recomputed by group."""
    if plan.branches:
        return "a UNION ALL"
    if plan.as_of_processing or plan.finality is not None:
        return "rows judged by event time (windows, enrichment as of processing)"
    joined = len(plan.occurrences) > 1
    loose = sorted({plan.occurrence(link.child).table for link in plan.links if not link.unique})
    if loose and plan.grain is None:
        return (f"it joins {', '.join(loose)} by columns that are not a unique key there, and no table of it has each "
                "of its rows joined to at most one row of every other")  # fmt: skip
    grain = plan.anchor if plan.grain is None else plan.grain.anchor  # the table whose rows are the joined rows
    select = sqlglot.parse_one(plan.body, read="spark")
    if not isinstance(select, exp.Select):
        return "not a single SELECT"
    source = select_from(select)
    tables = {t.name: t for t in select.find_all(exp.Table)}
    if joined:
        if OCCURRENCE.format(plan.anchor) not in tables or OCCURRENCE.format(grain) not in tables:
            return "it does not select from its table directly"
        alias = tables[OCCURRENCE.format(plan.anchor)].alias_or_name
    elif not isinstance(source, exp.Table) or source.name != OCCURRENCE.format(plan.anchor):
        return "it does not select from its table directly"
    else:
        alias = source.alias_or_name
    if grain != plan.anchor and any(j.side or j.kind not in ("", "INNER", "CROSS") for j in select.args.get("joins") or []):
        return f"an outer or semi join, whose rows need not hold a row of {plan.occurrence(grain).table} (the table its key's joins fan out to)"
    for clause in ("having", "distinct", "order", "limit", "offset", "qualify"):
        if select.args.get(clause):
            return f"{clause.upper()} (whole groups decide)"
    if select.find(exp.Window, exp.Subquery, exp.Exists):
        return "a window or a subquery"
    groups = [g for g in (select.args.get("group").expressions if select.args.get("group") else [])]
    keys = {k.expr for k in plan.keys}
    grouped = bool(groups)
    if {_over_self(g, alias) for g in groups} != ({k for k in keys if SELF in k} if grouped else set()):
        return "its GROUP BY is not its key"
    where = select.args.get("where")
    aggregates: list[Aggregate] = []
    outputs: list[Output] = []
    key_names = set(plan.key_names)
    for projection in select.selects:
        name = projection.alias_or_name
        if name in key_names:
            continue
        found = list(projection.find_all(exp.AggFunc))
        if not found:
            return f"output {name} is neither a key column nor an aggregate"
        template = projection.unalias().copy()
        for call in list(template.find_all(exp.AggFunc)):
            aggregate = _aggregate(call, None if joined else alias)
            if isinstance(aggregate, str):
                return f"output {name}: {aggregate}"
            if aggregate not in aggregates:
                aggregates.append(aggregate)
            placeholder = exp.column(AGG.format(aggregates.index(aggregate)))
            if call is template:
                template = placeholder
            else:
                call.replace(placeholder)
        if any(c.name not in {AGG.format(i) for i in range(len(aggregates))} for c in template.find_all(exp.Column)):
            return f"output {name} reads a column outside its aggregates"
        outputs.append(Output(name=name, template=template.sql(dialect="spark")))
    if not aggregates:
        return "no aggregate"
    if "rows" not in [a.kind for a in aggregates]:
        aggregates.append(Aggregate(kind="rows"))  # whether the group still has rows
    if joined:
        return _over_joined_rows(select, plan, aggregates, outputs, grouped, None if plan.grain is None else plan.occurrence(grain).table)
    return DeltaPlan(
        keys=tuple((k.name, k.expr) for k in plan.keys),
        where=_over_self(where.this, alias) if where is not None else None,
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
        grouped=grouped,
    )


def _aggregate(call: exp.AggFunc, alias: str | None) -> Aggregate | str:
    """One aggregate call as a decomposable aggregate, or why it is not one."""
    if call.find(exp.Distinct) is not None:
        return "a DISTINCT aggregate"
    if isinstance(call, exp.Count):
        inner = call.this
        if inner is None or isinstance(inner, exp.Star):
            return Aggregate(kind="rows")
        return Aggregate(kind="count", arg=_over_self(inner, alias))
    kind = _KINDS.get(type(call))
    if kind is None:
        return f"{call.sql(dialect='spark')} is not count, sum, avg, count_if, min or max"
    if len(call.expressions) > 0 or call.this is None:
        return f"{call.sql(dialect='spark')} takes more than one argument"
    if call.this.find(exp.AggFunc) is not None:
        return "an aggregate of an aggregate"
    return Aggregate(kind=kind, arg=_over_self(call.this, alias))


def _over_joined_rows(
    select: exp.Select, plan: ViewPlan, aggregates: list[Aggregate], outputs: list[Output], grouped: bool, grain: str | None
) -> DeltaPlan:
    """A join's plan: its joined rows as a SELECT of the key columns and each aggregate's argument
    (the view's FROM and WHERE as written), the keys and arguments as columns of those rows; `grain`:
    the table whose rows they are, when not the key's (`ViewPlan.grain`)."""
    rows = select.copy()
    for clause in ("group", "having"):
        rows.set(clause, None)
    named = {p.alias_or_name: p.unalias() for p in select.selects}
    columns = [exp.alias_(named[k].copy(), k, quoted=True) for k in plan.key_names] if grouped else []  # (one row: its key is constants)
    columns += [exp.alias_(sqlglot.parse_one(a.arg, read="spark"), f"_lmv_a{i}") for i, a in enumerate(aggregates) if a.arg is not None]
    rows.set("expressions", columns)
    over = [a if a.arg is None else Aggregate(kind=a.kind, arg=f"{SELF}._lmv_a{i}", text=a.arg) for i, a in enumerate(aggregates)]
    return DeltaPlan(
        keys=tuple((k, f"{SELF}.`{k}`") for k in plan.key_names) if grouped else tuple((k.name, k.expr) for k in plan.keys),
        where=None,
        aggregates=tuple(over),
        outputs=tuple(outputs),
        grouped=grouped,
        rows=rows.sql(dialect="spark"),
        grain=grain,
    )


def _over_self(node: exp.Expression, alias: str | None) -> str:
    """An expression over the view's one table, with its columns qualified by SELF (`alias` None: as written)."""
    if alias is None:
        return node.sql(dialect="spark")
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        if column.table == alias or not column.table:
            column.set("table", exp.to_identifier(SELF))
    return copy.sql(dialect="spark")
