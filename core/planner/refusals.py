"""Refusals of SQL outside the key-local class, each naming the fragment that breaks incrementality."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.core.planner.context import _PlannerState

NONDETERMINISTIC = {
    "rand", "random", "randn", "uuid", "now", "current_timestamp", "current_date", "current_time",
    "localtimestamp", "shuffle", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
    "unix_timestamp", "curdate", "current_timezone",
}  # fmt: skip


class _Refusals(_PlannerState):
    """Checks of constructs, tables, scopes and output columns that need no resolution."""

    def _refuse_constructs(self, tree: exp.Expression) -> None:
        for node in tree.walk():
            if isinstance(node, exp.Func):
                name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
                if name in NONDETERMINISTIC:
                    raise self.fail(
                        f"{name}() is not deterministic: recomputing a key would not reproduce its row", node
                    )
            if isinstance(node, exp.Union) and not node.args.get("distinct"):
                raise self.fail(
                    "UNION ALL is supported as the whole view (each branch key-local, a constant per branch in the key), "
                    "not inside a CTE or subquery: make it the view's main query, or two views",
                    node,
                )
            if isinstance(node, exp.Union):
                raise self.fail(
                    "UNION (without ALL) removes rows repeated across branches, which no key tells apart: write UNION ALL "
                    "with a constant per branch in the key (`'a' AS kind` ... UNION ALL `'b' AS kind` ..., `-- @key: kind, ...`)",
                    node,
                )
            if isinstance(node, (exp.Intersect, exp.Except)):
                raise self.fail(
                    "INTERSECT / EXCEPT compare whole rows across tables: over one key, write the condition as "
                    "EXISTS / NOT EXISTS (SELECT 1 FROM ... WHERE ... = ...)",
                    node,
                )
            if isinstance(node, exp.With) and node.args.get("recursive"):
                raise self.fail("recursive CTEs are not supported", node)

    def _check_tables(self, tree: exp.Expression) -> None:
        for table in tree.find_all(exp.Table):
            if table.args.get("db"):
                raise self.fail(
                    "read source tables by plain name (users, repos, ...); catalogs and namespaces are "
                    "lakemv's business",
                    table,
                )
            if table.name not in self.sources:
                raise self.fail(
                    f"reads {table.name!r}, which is not a declared source "
                    f"(declared: {', '.join(sorted(self.sources))})",
                    table,
                )

    def _check_scope(self, scope: Scope, root: Scope) -> None:
        select = scope.expression
        if not isinstance(select, exp.Select):
            raise self.fail("set operations (UNION / INTERSECT / EXCEPT) are not supported in views", select)
        for join in select.args.get("joins") or []:
            side = (join.args.get("side") or "").upper()
            kind = (join.args.get("kind") or "").upper()
            if side in ("RIGHT", "FULL"):
                raise self.fail(
                    f"{side} OUTER JOIN can produce rows that no key reaches; write it as a LEFT JOIN from "
                    "the table the key comes from",
                    join,
                )
            if kind in ("ANTI",):
                raise self.fail("ANTI JOIN is not supported; use NOT EXISTS with an equality", join)
        limited = select.args.get("limit") or select.args.get("offset")
        if limited is not None and (scope is root or scope.is_derived_table):
            raise self.fail(
                "LIMIT/OFFSET over a whole relation makes a row depend on every other row; limit inside a "
                "correlated subquery instead",
                limited,
            )
        distinct = select.args.get("distinct")
        if scope is root and distinct is not None and distinct.args.get("on"):
            raise self.fail("DISTINCT ON is not Spark SQL: GROUP BY the key columns and aggregate the others", distinct)

    def _output_columns(self, root: Scope) -> tuple[str, ...]:
        original = sqlglot.parse_one(self.definition.sql, dialect="spark")
        for projection in original.selects:
            if projection.find(exp.Star) is not None and not projection.find(exp.Count):
                raise self.fail("list the view's columns instead of *, so its schema does not change under you", projection)
        names = []
        for index, projection in enumerate(root.expression.selects):
            name = projection.alias_or_name
            source = original.selects[index]
            if not isinstance(source, (exp.Alias, exp.Column)):
                raise self.fail(f"output column {index + 1} needs a name: add `AS <name>`", source)
            if not re.match(r"^[a-z][a-z0-9_]*$", name):
                raise self.fail(f"output column {name!r} must be a lower-case identifier", projection)
            if name in names:
                raise self.fail(f"output column {name!r} appears twice", projection)
            names.append(name)
        return tuple(names)
