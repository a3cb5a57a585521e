"""Column resolution: the occurrence whose row a column or expression comes from, through subqueries."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.core.planner.context import _PlannerState
from lakemv.core.planner.model import SELF, Occurrence
from lakemv.core.planner.sqltools import _is_aggregated, _NotLocal, _SeveralTables, _short


class _Resolution(_PlannerState):
    """Collects the table occurrences of each scope and traces expressions back to one of them."""

    def _context(self, scope: Scope) -> str:
        if scope.parent is None:
            return "main query"
        if scope.is_derived_table:
            subquery = scope.expression.parent
            cte = scope.expression.meta.get("lmv_cte")
            alias = subquery.alias if isinstance(subquery, exp.Subquery) else ""
            if cte:
                return f"CTE {cte}" + (f" (as {alias})" if alias and alias != cte else "")
            return f"FROM subquery {alias}".strip()
        outer = scope.parent.expression
        node = scope.expression
        while node.parent is not None and node.parent is not outer:
            node = node.parent
        if isinstance(node, exp.Alias) and node.parent is outer:
            return f"subquery for column {node.alias}"
        return f"subquery in {node.arg_key.upper() if node.arg_key else 'the query'} `{_short(scope.expression, 60)}`"

    def _collect_occurrences(self, scope: Scope) -> None:
        for alias, (_node, source) in scope.selected_sources.items():
            if isinstance(source, exp.Table):
                occ = len(self.occurrences)
                self.occurrences.append(Occurrence(id=occ, table=source.name, alias=alias, context=self._context(scope)))
                self.occ_of[id(source)] = occ
                self.occ_scope[occ] = scope

    def _resolve_column(self, column: exp.Column, scope: Scope) -> tuple[int, exp.Expression]:
        table = column.table
        current: Scope | None = scope
        while current is not None and table not in current.selected_sources:
            current = current.parent
        if current is None:
            raise _NotLocal(f"column {column.sql(dialect='spark')} does not belong to any table")
        _node, source = current.selected_sources[table]
        if isinstance(source, exp.Table):
            return self.occ_of[id(source)], exp.column(column.name, table=SELF)
        return self._resolve_output(source, column.name, table)

    def _resolve_output(self, scope: Scope, name: str, alias: str) -> tuple[int, exp.Expression]:
        select = scope.expression
        projection = next((p for p in select.selects if p.alias_or_name == name), None)
        if projection is None:
            raise _NotLocal(f"{alias}.{name} is not an output of {alias}")
        inner = projection.unalias()
        if _is_aggregated(select):
            groups = list((select.args.get("group") or exp.Group()).expressions)
            if not any(inner == g for g in groups):
                raise _NotLocal(
                    f"{alias}.{name} is computed by an aggregate of {alias}, not one of its GROUP BY columns"
                )
        return self._resolve_expression(inner, scope)

    def _resolve_expression(self, expression: exp.Expression, scope: Scope) -> tuple[int, exp.Expression]:
        if expression.find(exp.Subquery, exp.Select, exp.AggFunc, exp.Window):
            raise _NotLocal(f"`{_short(expression, 60)}` is not a plain expression over one row")
        columns = list(expression.find_all(exp.Column))
        if not columns:
            raise _NotLocal(f"`{_short(expression, 60)}` is a constant")
        resolved = [self._resolve_column(c, scope) for c in columns]
        occs = {occ for occ, _ in resolved}
        if len(occs) != 1:
            raise _SeveralTables(f"`{_short(expression, 60)}` combines columns of several tables")
        copy = expression.copy()
        for column, (_occ, replacement) in zip(list(copy.find_all(exp.Column)), resolved, strict=True):
            if column is copy:
                copy = replacement.copy()
            else:
                column.replace(replacement.copy())
        return occs.pop(), copy

    def _try_resolve(self, expression: exp.Expression, scope: Scope) -> tuple[int, exp.Expression] | str:
        try:
            return self._resolve_expression(expression, scope)
        except _NotLocal as exc:
            return str(exc)

    def _occurrences_in(self, expression: exp.Expression, scope: Scope) -> set[int]:
        """Occurrences an expression's columns come from; a column of a FROM subquery that does not
        resolve (an aggregate, say) stands for every occurrence inside that subquery."""
        found = set()
        for column in expression.find_all(exp.Column):
            try:
                found.add(self._resolve_column(column, scope)[0])
            except _NotLocal:
                current: Scope | None = scope
                while current is not None and column.table not in current.selected_sources:
                    current = current.parent
                if current is None:
                    continue
                source = current.selected_sources[column.table][1]
                if isinstance(source, Scope):
                    inner = {id(s) for s in source.traverse()}
                    found |= {occ for occ, s in self.occ_scope.items() if id(s) in inner}
        return found
