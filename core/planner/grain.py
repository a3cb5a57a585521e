"""A grouped view whose group key's columns come from several tables, kept through a view of its rows.

TPC-H Q7 groups line items by supplier nation, customer nation and year: columns of three tables,
where the planner anchors a key at one table's row. Each line item still reaches exactly one group,
because it joins at most one row of every other table: the line item is the grain of the view's rows.
Such a view is kept as two: `<view>__rows`, its rows at their grain (keyed by the grain's primary key,
with every column the grouping reads), and the view itself grouping them, a view over a view
(`lakemv.core.planner.dag`). The user writes the query as it is; `explain` shows both.

Two shapes are split: a GROUP BY over one FROM subquery of joined rows (Q7, Q9 as TPC-H writes them),
whose subquery becomes the rows view; and a GROUP BY over joins, whose FROM, joins and WHERE become the
rows view, with the columns its SELECT, GROUP BY and HAVING read. The grain is the first table of the
rows for which the planner proves every join matches at most one row (`plan_view` keyed by its primary key).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify

from lakemv.catalog.declarations import SourceTable
from lakemv.core.errors import KeySpansTables, ViewDefinitionError
from lakemv.core.planner.ctes import inline_ctes
from lakemv.core.planner.definitions import ViewDefinition
from lakemv.core.planner.model import ViewPlan
from lakemv.core.planner.sqltools import _is_aggregated, select_from, source_schema

ROWS_SUFFIX = "__rows"  # `<view>__rows`: a view's rows at their grain

Build = Callable[[exp.Table], tuple[exp.Select, exp.Select, tuple[str, ...]]]  # a grain -> (rows view, reading view, rows key)


def at_grain(
    definition: ViewDefinition, sources: Mapping[str, SourceTable], refused: KeySpansTables, plan: Callable[[ViewDefinition, Mapping], ViewPlan],
    taken: Collection[str],
) -> tuple[ViewPlan, ViewDefinition]:
    """The view of `definition`'s rows at their grain, planned over `sources` (by `plan`), and
    `definition` reading it instead; raises a ViewDefinitionError saying why (after `refused`'s reason)
    when it cannot be split. `taken`: the names of every table and view."""
    name = definition.name + ROWS_SUFFIX

    def fail(why: str) -> ViewDefinitionError:
        return ViewDefinitionError(definition.name, f"{refused.reason}; nor can it be kept through its rows at their grain: {why}", refused.fragment)

    if name in taken:
        raise fail(f"a table or view is already named {name}")
    found = _shape(definition, sources, name)
    if isinstance(found, str):
        raise fail(found)
    relations, build = found
    tried = []
    for grain in relations:
        rows, reading, key = build(grain)
        rows_definition = ViewDefinition(
            name=name, key=key, sql=rows.sql(dialect="spark"), location=definition.location, enrich=definition.enrich, freshness=definition.freshness,
            description=f"The rows of {definition.name} at their grain, one a row of {grain.name}: {definition.name} groups them "
                        "by a key whose columns come from several tables (kept by lakemv).",
        )  # fmt: skip
        try:
            planned = plan(rows_definition, sources)
        except ViewDefinitionError as exc:
            tried.append(f"{grain.alias_or_name}: {exc.reason.split('. ')[0]}")
            continue
        return planned, definition.model_copy(update={"sql": reading.sql(dialect="spark")})
    raise fail("no table of its rows joins at most one row of every other (" + "; ".join(tried) + ")")


def _shape(definition: ViewDefinition, sources: Mapping[str, SourceTable], name: str) -> tuple[list[exp.Table], Build] | str:
    """The tables that may be the grain of the view's rows, and how the rows view (`name`) and the view
    reading it are built for one; or why the view has neither shape."""
    try:
        tree = inline_ctes(sqlglot.parse_one(definition.sql, dialect="spark"))
        tree = qualify(tree, schema=source_schema(sources), dialect="spark", quote_identifiers=False)
    except SqlglotError as exc:
        return f"cannot analyse the SQL: {exc}"
    if not isinstance(tree, exp.Select) or not tree.args.get("group"):
        return "it is not a GROUP BY"
    relation = select_from(tree)
    joins = tree.args.get("joins") or []
    if isinstance(relation, exp.Subquery) and not joins:
        inner = relation.this
        if not isinstance(inner, exp.Select) or _is_aggregated(inner) or inner.args.get("distinct") or inner.args.get("limit"):
            return "its FROM subquery is not a plain SELECT of joined rows"
        return _tables(inner), lambda grain: _subquery_rows(tree, relation, grain, sources, name)
    if isinstance(relation, exp.Table) and joins:
        reads = [tree.args[k] for k in ("group", "having") if tree.args.get(k)] + list(tree.selects)
        if any(part.find(exp.Subquery, exp.Select, exp.Exists) for part in reads):
            return "its SELECT, GROUP BY or HAVING holds a subquery"
        return _tables(tree), lambda grain: _joined_rows(tree, grain, sources, name)
    return "it neither groups one FROM subquery nor groups joined tables"


def _grain_first(select: exp.Select, alias: str) -> None:
    """(In place) the table `alias` names, the grain, as the FROM table of `select`, the planner's
    anchor: inner joins are reordered freely once their ON conditions join the WHERE (outer, semi and
    anti joins keep their order, and then only the FROM table can be the grain)."""
    grain = next(t for t in _tables(select) if t.alias_or_name == alias)
    relations = [select_from(select), *(j.this for j in select.args.get("joins") or [])]
    if relations[0] is grain:
        return
    ons = [j.args["on"] for j in select.args["joins"] if j.args.get("on")]
    where = select.args.get("where")
    condition = exp.and_(*(exp.paren(c.copy()) for c in ([where.this] if where is not None else []) + ons))
    select.from_(grain.copy(), copy=False)
    select.set("joins", [exp.Join(this=r.copy()) for r in relations if r is not grain])
    if ons or where is not None:
        select.set("where", exp.Where(this=condition))


def _inner_only(select: exp.Select) -> bool:
    return all(not j.args.get("side") and (j.args.get("kind") or "INNER").upper() in ("INNER", "CROSS") for j in select.args.get("joins") or [])


def _tables(select: exp.Select) -> list[exp.Table]:
    """The tables a SELECT reads directly (its FROM and joins, not its subqueries')."""
    relations = [select_from(select), *(j.this for j in select.args.get("joins") or [])] if _inner_only(select) else [select_from(select)]
    return [r for r in relations if isinstance(r, exp.Table)]


def _key_of(grain: exp.Table, sources: Mapping[str, SourceTable], taken: set[str]) -> Iterator[tuple[str, exp.Column]]:
    """The grain's primary-key columns, each with the name the rows view gives it (`taken`: names in use)."""
    alias = grain.alias_or_name
    for column in sources[grain.name].primary_key:
        yield (column if column not in taken else f"{alias}_{column}"), exp.column(column, table=alias)


def _subquery_rows(
    tree: exp.Select, relation: exp.Subquery, grain: exp.Table, sources: Mapping[str, SourceTable], name: str
) -> tuple[exp.Select, exp.Select, tuple[str, ...]]:
    """A GROUP BY over one FROM subquery: the subquery with the grain's key is the rows view."""
    rows = relation.this.copy()
    _grain_first(rows, grain.alias_or_name)
    outputs = {p.alias_or_name: p.unalias() for p in rows.selects}
    key = []
    for output, column in _key_of(grain, sources, set(outputs)):
        same = next((n for n, e in outputs.items() if e == column), None)  # (the subquery selects it already)
        if same is None:
            rows.select(column.as_(output), copy=False)
        key.append(same or output)
    reading = tree.copy()
    reading.from_(exp.to_table(name).as_(relation.alias_or_name), copy=False)
    return rows, reading, tuple(key)


def _joined_rows(tree: exp.Select, grain: exp.Table, sources: Mapping[str, SourceTable], name: str) -> tuple[exp.Select, exp.Select, tuple[str, ...]]:
    """A GROUP BY over joins: its FROM, joins and WHERE with the columns the rest reads are the rows view."""
    reading = tree.copy()
    parts = [*reading.selects, *(reading.args[k] for k in ("group", "having") if reading.args.get(k))]
    read = list(dict.fromkeys((c.table, c.name) for part in parts for c in part.find_all(exp.Column)))
    names = [c for _, c in read]
    named = {(t, c): c if names.count(c) == 1 else f"{t}_{c}" for t, c in read}
    key = []
    for output, column in _key_of(grain, sources, set(named.values())):
        output = named.setdefault((column.table, column.name), output)
        key.append(output)
    rows = exp.select(*(exp.column(c, table=t).as_(n) for (t, c), n in named.items()))
    rows.from_(select_from(tree).copy(), copy=False)  # type: ignore[union-attr]
    rows.set("joins", [j.copy() for j in tree.args["joins"]])
    if tree.args.get("where"):
        rows.set("where", tree.args["where"].copy())
    _grain_first(rows, grain.alias_or_name)
    for part in parts:
        for column in list(part.find_all(exp.Column)):
            column.replace(exp.column(named[(column.table, column.name)]))
    reading.set("joins", None)
    reading.set("where", None)
    reading.from_(exp.to_table(name), copy=False)
    return rows, reading, tuple(key)
