"""Planning a view: parse and refuse, inline CTEs, qualify, then resolve, link and prove the key."""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from lakemv.catalog.declarations import SourceTable
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner.bounds import TimeBound, time_bound
from lakemv.core.planner.ctes import inline_ctes
from lakemv.core.planner.definitions import ViewDefinition
from lakemv.core.planner.edges import _Edges
from lakemv.core.planner.finality import FINAL, disjoint_windows, finality, over_joins
from lakemv.core.planner.keys import _Keys
from lakemv.core.planner.model import OCCURRENCE, SELF, Branch, KeyColumn, ViewPlan
from lakemv.core.planner.refusals import _Refusals
from lakemv.core.planner.sqltools import factor_ors, source_schema
from lakemv.core.planner.windows import _Windows


class _Planner(_Refusals, _Edges, _Keys, _Windows):
    """One planning of one view: the stages in order over its parsed SQL."""

    def plan(self) -> ViewPlan:
        if self.definition.name in self.sources:
            raise self.fail("a view cannot have the name of a source table (both are queried by plain name)")
        tree = sqlglot.parse_one(self.definition.sql, dialect="spark")
        if isinstance(tree, exp.Union) and not tree.args.get("distinct"):
            return _plan_union(self, tree)
        self._refuse_constructs(tree)
        tree = inline_ctes(tree)
        self._check_tables(tree)
        try:
            tree = qualify(tree, schema=source_schema(self.sources), dialect="spark", quote_identifiers=False)
        except OptimizeError as exc:
            raise self.fail(f"cannot resolve the SQL against the declared sources: {exc}") from None
        except SqlglotError as exc:
            raise self.fail(f"cannot analyse the SQL: {exc}") from None
        tree = factor_ors(_distinct_as_group(tree))
        root = build_scope(tree)
        if root is None or not isinstance(root.expression, exp.Select):
            raise self.fail("the view must be a single SELECT (set operations are not supported)")
        scopes = list(root.traverse())
        for scope in scopes:
            self._check_scope(scope, root)
            self.scope_of_select[id(scope.expression)] = scope
        for scope in scopes:
            self._collect_occurrences(scope)
        for scope in scopes:
            self._collect_edges(scope)
        anchor, keys = self._anchor(root)
        self._check_unique(root, anchor, keys)
        links = self._spanning_tree(anchor)
        self._check_windows(scopes, anchor, keys, links)
        columns = self._output_columns(root)
        for table in tree.find_all(exp.Table):
            occ = self.occ_of.get(id(table))
            if occ is not None:
                table.set("this", exp.to_identifier(OCCURRENCE.format(occ)))
                table.set("db", None)
                table.set("catalog", None)
        final = finality({k.name: k.expr for k in keys}, self.occurrences[anchor].table, self.sources)
        if final is not None:  # final only once no other stream it joins can reach the window either
            reads = [(o.alias, o.table) for o in self.occurrences]
            final = over_joins(final, self.occurrences[anchor].alias, reads, tree.sql(dialect="spark"), self.sources)
        event_columns: tuple[str, ...] = ()
        if self.definition.enrich == "as_of_processing":
            self._check_as_of(anchor, keys, final)
            alias = self.occurrences[anchor].alias
            event_columns = tuple(
                p.alias_or_name for p in root.expression.selects
                if not p.find(exp.Subquery, exp.Select) and all(c.table == alias for c in p.find_all(exp.Column))
            )  # fmt: skip
        if final is not None:
            if FINAL in columns:
                raise self.fail(f"a view keyed by an event-time window gets a column {FINAL!r} of its own: rename yours")
            columns = (*columns, FINAL)
        return ViewPlan(
            definition=self.definition,
            anchor=anchor,
            keys=keys,
            occurrences=tuple(self.occurrences),
            links=links,
            columns=columns,
            body=tree.sql(dialect="spark"),
            finality=final,
            event_columns=event_columns,
            bound=self._pair_bound(tree, anchor, keys, links),
            anchor_time=self._anchor_time(root.expression, anchor),
            grain=self._grain(links),
        )

    def _anchor_time(self, select: exp.Select, anchor: int) -> str | None:
        """The output column that is the anchor event's own event time, unchanged (an event source's)."""
        occurrence = self.occurrences[anchor]
        source = self.sources.get(occurrence.table)
        if source is None or not source.is_events:
            return None
        for projection in select.selects:
            inner = projection.unalias()
            if isinstance(inner, exp.Column) and inner.table == occurrence.alias and inner.name == source.event_time:
                return projection.alias_or_name
        return None

    def _pair_bound(self, tree: exp.Expression, anchor: int, keys: tuple[KeyColumn, ...], links: tuple) -> TimeBound | None:
        """The time bound of a view whose rows are event pairs: keyed by its anchor's event id and
        joined to one other stream's event by that event's id (so a row is one event of each, and
        an event no longer met by the other stream is never read again). Any other view over two
        streams (one that aggregates the other stream's events, say) may read old events again."""
        occurrences = self.occurrences
        if len(occurrences) != 2 or len(links) != 1:
            return None
        first, other = occurrences[anchor], occurrences[links[0].child]
        sources = {o.table: self.sources.get(o.table) for o in (first, other)}
        if not all(s is not None and s.is_events for s in sources.values()):
            return None
        own_id = f"{SELF}.{sources[first.table].event_id}"  # type: ignore[union-attr]
        other_id = f"{SELF}.{sources[other.table].event_id}"  # type: ignore[union-attr]
        if [k.expr for k in keys] != [own_id] or not any(c == other_id and op == "=" for c, _p, op in links[0].pairs):
            return None
        return time_bound(tree.sql(dialect="spark"), {o.alias: o.table for o in occurrences}, self.sources)

    def _check_as_of(self, anchor: int, keys: tuple[KeyColumn, ...], final: object) -> None:
        """An as-of-processing view enriches each event once: one row per event of its anchor, which
        must be an event source, keyed by the event id; a window (recomputed when it closes) is not."""
        table = self.occurrences[anchor].table
        source = self.sources.get(table)
        if source is None or not source.is_events:
            raise self.fail(f"@enrich: as_of_processing enriches events: its key must come from an event source, not {table}")
        if [k.expr for k in keys] != [f"{SELF}.{source.event_id}"]:
            raise self.fail(f"@enrich: as_of_processing keeps one row per event: key it by {table}'s event id {source.event_id!r} alone")
        if final is not None:
            raise self.fail("@enrich: as_of_processing does not apply to a windowed view (its rows are recomputed when a window closes)")


def _distinct_as_group(tree: exp.Expression) -> exp.Expression:
    """(In place) `SELECT DISTINCT a, b ... ` as `SELECT a, b ... GROUP BY a, b` (the same rows, NULLs grouped as
    DISTINCT compares them), so the key proof of a GROUP BY applies: each output beyond the key must
    be determined by it. A DISTINCT over groups or aggregates is left to the other checks."""
    distinct = tree.args.get("distinct") if isinstance(tree, exp.Select) else None
    if distinct is None or distinct.args.get("on") or tree.args.get("group") or any(p.find(exp.AggFunc) for p in tree.selects):
        return tree
    tree.set("distinct", None)
    tree.set("group", exp.Group(expressions=[p.unalias().copy() for p in tree.selects]))
    return tree


def plan_view(definition: ViewDefinition, sources: Mapping[str, SourceTable]) -> ViewPlan:
    """Plan a view; raises ViewDefinitionError when it is outside the incrementally maintainable class."""
    return _Planner(definition, sources).plan()


def _branches(union: exp.Expression) -> list[exp.Expression]:
    """The SELECTs of a chain of UNION ALLs, in order."""
    if isinstance(union, exp.Union) and not union.args.get("distinct"):
        return [*_branches(union.this), *_branches(union.expression)]
    return [union]


def _is_constant(node: exp.Expression) -> bool:
    return not node.find(exp.Column, exp.Subquery, exp.Select, exp.AggFunc, exp.Window)


def _plan_union(planner: _Planner, union: exp.Union) -> ViewPlan:
    """A UNION ALL of key-local branches: each branch planned as a view of its own, keyed by the key
    columns that are not constant in it; a key column that is a different constant in every branch
    keeps the branches' keys apart, so each key is one branch's row."""
    definition = planner.definition
    if definition.enrich == "as_of_processing":
        raise planner.fail("@enrich: as_of_processing applies to a single SELECT over an event source, not a UNION ALL")
    for clause in ("order", "limit", "offset"):
        if union.args.get(clause):
            raise planner.fail(f"{clause.upper()} over a whole UNION ALL view is not supported: order or limit when you read it", union.args[clause])
    branches = _branches(union)
    for branch in branches:
        if not isinstance(branch, exp.Select):
            raise planner.fail("set operations other than UNION ALL (UNION, INTERSECT, EXCEPT) are not supported in views", branch)
    names = [p.alias_or_name for p in branches[0].selects]
    for number, branch in enumerate(branches[1:], start=2):
        if len(branch.selects) != len(names):
            raise planner.fail(f"UNION ALL branch {number} has {len(branch.selects)} columns, branch 1 has {len(names)}", branch)
    missing = [k for k in definition.key if k not in names]
    if missing:
        raise planner.fail(f"key column {missing[0]!r} is not an output column (outputs: {', '.join(names)})")
    positions = [names.index(k) for k in definition.key]
    constants = [
        i for i in positions
        if all(_is_constant(b.selects[i].unalias()) for b in branches)
        and len({b.selects[i].unalias().sql(dialect="spark") for b in branches}) == len(branches)
    ]  # fmt: skip
    windows = [i for i in positions if disjoint_windows([b.selects[i].unalias() for b in branches])]
    if not constants and not windows:
        raise planner.fail(
            "the branches of a UNION ALL could produce the same key: give every branch a constant of its own in a key "
            f"column, e.g. `'pr' AS kind` in one and `'star' AS kind` in the other, with `-- @key: kind, {', '.join(definition.key)}`",
            union,
        )
    with_ = union.args.get("with_") or union.args.get("with")
    occurrences, links, bodies, planned, finals = [], [], [], [], []
    for number, branch in enumerate(branches, start=1):
        select = branch.copy()
        for projection, name in zip(select.selects, names, strict=True):  # the first branch names the columns
            if projection.alias_or_name != name:
                projection.replace(exp.alias_(projection.unalias().copy(), name))
        if with_ is not None:
            select.set("with_" if "with_" in union.args else "with", with_.copy())
        variable = tuple(k for k, i in zip(definition.key, positions, strict=True) if not _is_constant(select.selects[i].unalias()))
        if not variable:
            raise planner.fail(f"UNION ALL branch {number} has only constants in its key: key it by a column of its rows too", branch)
        sub = ViewDefinition(name=definition.name, key=variable, sql=select.sql(dialect="spark"), location=definition.location)
        try:
            plan = _Planner(sub, planner.sources).plan()
        except ViewDefinitionError as exc:
            raise ViewDefinitionError(definition.name, f"UNION ALL branch {number}: {exc.reason}", exc.fragment) from None
        finals.append(plan.finality)
        offset = len(occurrences)
        occurrences += [o.model_copy(update={"id": o.id + offset, "context": f"branch {number}, {o.context}"}) for o in plan.occurrences]
        links += [l.model_copy(update={"child": l.child + offset, "parent": l.parent + offset}) for l in plan.links]
        bodies.append(re.sub(r"_lmv_occ_(\d+)", lambda m: OCCURRENCE.format(int(m.group(1)) + offset), plan.body))
        keys = {k.name: k for k in plan.keys}
        constant = {k: select.selects[i].unalias().sql(dialect="spark") for k, i in zip(definition.key, positions, strict=True)}
        planned.append(Branch(anchor=plan.anchor + offset, keys=tuple(keys.get(k) or KeyColumn(name=k, expr=constant[k]) for k in definition.key)))
    return ViewPlan(
        definition=definition,
        anchor=planned[0].anchor,
        keys=planned[0].keys,
        occurrences=tuple(occurrences),
        links=tuple(links),
        columns=(*names, FINAL) if finals[0] is not None and len(set(finals)) == 1 else tuple(names),
        body=" UNION ALL ".join(f"({b})" if " UNION ALL " in b else b for b in bodies),
        branches=tuple(planned),
        finality=finals[0] if len(set(finals)) == 1 else None,  # a hopping window's branches: one window
    )
