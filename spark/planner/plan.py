"""Planning a view: parse and refuse, inline CTEs, qualify, then resolve, link and prove the key."""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from catalog.declarations import SourceTable
from spark.planner.ctes import inline_ctes
from spark.planner.edges import _Edges
from spark.planner.keys import _Keys
from spark.planner.model import OCCURRENCE, ViewPlan
from spark.planner.refusals import _Refusals
from spark.planner.windows import _Windows
from spark.views import ViewDefinition


class _Planner(_Refusals, _Edges, _Keys, _Windows):
    """One planning of one view: the stages in order over its parsed SQL."""

    def plan(self) -> ViewPlan:
        if self.definition.name in self.sources:
            raise self.fail("a view cannot have the name of a source table (both are queried by plain name)")
        tree = sqlglot.parse_one(self.definition.sql, dialect="spark")
        self._refuse_constructs(tree)
        tree = inline_ctes(tree)
        self._check_tables(tree)
        schema = {name: {c.name: c.spark_type for c in src.columns} for name, src in self.sources.items()}
        try:
            tree = qualify(tree, schema=schema, dialect="spark", quote_identifiers=False)
        except OptimizeError as exc:
            raise self.fail(f"cannot resolve the SQL against the declared sources: {exc}") from None
        except SqlglotError as exc:
            raise self.fail(f"cannot analyse the SQL: {exc}") from None
        tree = _distinct_as_group(tree)
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
        return ViewPlan(
            definition=self.definition,
            anchor=anchor,
            keys=keys,
            occurrences=tuple(self.occurrences),
            links=links,
            columns=columns,
            body=tree.sql(dialect="spark"),
        )


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
