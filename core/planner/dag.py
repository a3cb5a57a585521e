"""Views over views: the DAG of views, planned in dependency order.

A view may read other views by plain name, as it reads sources. The planner sees an upstream view as
a table (`lakemv.catalog.declarations.ViewSource`): its output columns, its key as primary key. Its
change stream is its rows that changed in a batch, old and new, which the batch reads from the view
table's snapshots (`lakemv.spark.views.upstream`); so a downstream view is planned, linked and
maintained exactly as a view over sources is. A batch maintains the views level by level: every view
it reads first (`levels`).

A cycle (a view reading itself through others) is refused with its path.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from lakemv.catalog.declarations import SourceTable, ViewColumn, ViewSource
from lakemv.core.errors import KeySpansTables, ViewDefinitionError
from lakemv.core.planner.definitions import ViewDefinition
from lakemv.core.planner.grain import at_grain
from lakemv.core.planner.model import SELF, ViewPlan
from lakemv.core.planner.plan import plan_view


def views_read(definition: ViewDefinition, views: Mapping[str, object], sources: Mapping[str, object]) -> tuple[str, ...]:
    """The views `definition`'s SQL reads by name (a CTE of that name, or a source, shadows a view)."""
    try:
        tree = sqlglot.parse_one(definition.sql, dialect="spark")
    except SqlglotError:
        return ()  # (the planner says why it does not parse)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    found = [
        t.name for t in tree.find_all(exp.Table)
        if not t.args.get("db") and t.name in views and t.name not in ctes and t.name not in sources
    ]  # fmt: skip
    return tuple(dict.fromkeys(found))


def dependency_order(definitions: Mapping[str, ViewDefinition], sources: Mapping[str, object]) -> list[str]:
    """The views with every view each reads before it; a cycle raises ViewDefinitionError with its path."""
    reads = {name: views_read(d, definitions, sources) for name, d in definitions.items()}
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in path:
            cycle = (*path[path.index(name) :], name)
            raise ViewDefinitionError(cycle[0], f"views read each other in a cycle: {' -> '.join(cycle)} (a view cannot depend on itself)")
        for upstream in reads[name]:
            visit(upstream, (*path, name))
        done.add(name)
        order.append(name)

    for name in sorted(definitions):
        visit(name, ())
    return order


def as_source(plan: ViewPlan) -> ViewSource:
    """A planned view as the table the views reading it see."""
    single = not plan.branches and all(SELF not in k.expr for k in plan.keys)  # every key a constant: one row at most
    return ViewSource(
        name=plan.name, columns=tuple(ViewColumn(name=c) for c in plan.columns), primary_key=plan.key_names, fingerprint=plan.fingerprint,
        single_row=single, unique=((),) if single else (),
    )  # fmt: skip


def plan_views(definitions: Mapping[str, ViewDefinition], sources: Mapping[str, SourceTable]) -> dict[str, ViewPlan]:
    """Every view planned, in dependency order (each after the views it reads, which it sees as tables).
    A grouped view whose key's columns come from several tables is kept through a view of its rows at
    their grain, planned just before it (`lakemv.core.planner.grain`)."""
    plans: dict[str, ViewPlan] = {}

    def inputs(definition: ViewDefinition) -> tuple[ViewSource, ...]:
        return tuple(as_source(plans[u]) for u in views_read(definition, plans, sources))

    def with_inputs(plan: ViewPlan) -> ViewPlan:
        read = inputs(plan.definition)
        return plan.model_copy(update={"inputs": read}) if read else plan

    def planned(definition: ViewDefinition) -> ViewPlan:
        return with_inputs(plan_view(definition, {**sources, **{v.name: v for v in inputs(definition)}}))  # type: ignore[dict-item]

    for name in dependency_order(definitions, sources):
        definition = definitions[name]
        try:
            plans[name] = planned(definition)
        except KeySpansTables as refused:
            visible = {**sources, **{v.name: v for v in inputs(definition)}}
            rows, reading = at_grain(definition, visible, refused, plan_view, {*sources, *definitions, *plans})  # type: ignore[arg-type]
            plans[rows.name] = with_inputs(rows)
            plans[name] = planned(reading)
    return plans


def levels(plans: Mapping[str, ViewPlan]) -> list[list[str]]:
    """The views by level: those reading sources only first, then each view one level above the
    highest view it reads (the views of one level can be maintained side by side)."""
    level: dict[str, int] = {}

    def of(name: str) -> int:
        if name not in level:
            level[name] = 1 + max((of(u) for u in plans[name].upstream if u in plans), default=-1)
        return level[name]

    found: list[list[str]] = []
    for name in sorted(plans):
        at = of(name)
        found.extend([] for _ in range(at + 1 - len(found)))
        found[at].append(name)
    return found


def downstream(plans: Mapping[str, ViewPlan], name: str) -> list[str]:
    """The views that read `name`, directly or through others, in dependency order."""
    found: list[str] = []
    for level in levels(plans):
        for view in level:
            if any(u == name or u in found for u in plans[view].upstream):
                found.append(view)
    return found


def dag_lines(plans: Mapping[str, ViewPlan], name: str) -> list[str]:
    """`lakemv explain`'s section on the views `name` reads and the views that read it: the part of the
    DAG it belongs to, level by level, each view with what it reads (none: an empty list)."""
    plan = plans[name]
    above: list[str] = []
    todo = list(plan.upstream)
    while todo:
        view = todo.pop()
        if view not in above:
            above.append(view)
            todo += list(plans[view].upstream)
    below = downstream(plans, name)
    if not above and not below:
        return []
    part = {*above, name, *below}
    lines = ["views over views - each batch maintains them level by level, a view after the views it reads,",
             "  over their rows the batch changed (old and new); a reader of views is maintained by scans:"]  # fmt: skip
    for number, level in enumerate(levels(plans)):
        for view in level:
            if view in part:
                marker = "  (this view)" if view == name else ""
                lines.append(f"  level {number}: {view} <- {', '.join(plans[view].tables)}{marker}")
    return lines


def source_tables(plans: Mapping[str, ViewPlan], name: str) -> tuple[str, ...]:
    """The source tables a view's rows come from, through the views it reads (its freshness is theirs)."""
    found: list[str] = []
    for table in plans[name].tables:
        found += source_tables(plans, table) if table in plans[name].upstream else [table]
    return tuple(dict.fromkeys(found))
