"""Join edges: the equalities in WHERE and ON, and `x IN (SELECT ...)`, that tie occurrences together."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.core.planner.resolve import _Resolution
from lakemv.core.planner.sqltools import _short, select_conjuncts


class _Edges(_Resolution):
    """Records an edge per equality between two occurrences, and why other conditions cannot be followed."""

    def _add_edge(
        self, left: tuple[int, exp.Expression], right: tuple[int, exp.Expression], op: str, fragment: str
    ) -> None:
        (a, ea), (b, eb) = left, right
        if a > b:
            (a, ea), (b, eb) = (b, eb), (a, ea)
        self.edges.setdefault((a, b), []).append((ea.sql(dialect="spark"), eb.sql(dialect="spark"), op, fragment))

    def _collect_edges(self, scope: Scope) -> None:
        for conjunct in select_conjuncts(scope.expression):
            self._conjunct(conjunct, scope)

    def _never_null(self, resolved: tuple[int, exp.Expression]) -> bool:
        """Whether a resolved expression is a primary-key column of its table (never NULL)."""
        occ, expression = resolved
        source = self.sources[self.occurrences[occ].table]
        return isinstance(expression, exp.Column) and source.key_never_null and expression.name in source.primary_key

    def _conjunct(self, conjunct: exp.Expression, scope: Scope) -> None:
        fragment = _short(conjunct)
        if isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
            left = self._try_resolve(conjunct.left, scope)
            right = self._try_resolve(conjunct.right, scope)
            if isinstance(left, tuple) and isinstance(right, tuple):
                if left[0] != right[0]:
                    self._add_edge(left, right, "<=>" if isinstance(conjunct, exp.NullSafeEQ) else "=", fragment)
                return
            involved = self._occurrences_in(conjunct, scope)
            reason = left if isinstance(left, str) else right
            if len(involved) > 1:
                for occ in involved:
                    self.problems.setdefault(occ, []).append(f"`{fragment}` cannot be followed: {reason}")
            return
        if isinstance(conjunct, exp.In) and conjunct.args.get("query") is not None:
            subquery = conjunct.args["query"]
            inner_select = subquery.this if isinstance(subquery, exp.Subquery) else subquery
            inner_scope = self.scope_of_select.get(id(inner_select))
            left = self._try_resolve(conjunct.this, scope)
            if inner_scope is not None and isinstance(inner_select, exp.Select) and len(inner_select.selects) == 1:
                right = self._try_resolve(inner_select.selects[0].unalias(), inner_scope)
                if isinstance(left, tuple) and isinstance(right, tuple) and left[0] != right[0]:
                    self._add_edge(left, right, "=", fragment)
                    return
        negated = conjunct.this.unnest() if isinstance(conjunct, exp.Not) else None
        if isinstance(negated, exp.In) and negated.args.get("query") is not None:
            subquery = negated.args["query"]
            inner_select = subquery.this if isinstance(subquery, exp.Subquery) else subquery
            inner_scope = self.scope_of_select.get(id(inner_select))
            if inner_scope is not None and isinstance(inner_select, exp.Select) and len(inner_select.selects) == 1:
                left = self._try_resolve(negated.this, scope)
                right = self._try_resolve(inner_select.selects[0].unalias(), inner_scope)
                if isinstance(left, tuple) and isinstance(right, tuple) and left[0] != right[0] and self._never_null(left) and self._never_null(right):
                    # neither side can be NULL (primary-key columns): NOT IN is NOT EXISTS (... WHERE inner = outer)
                    self._add_edge(left, right, "=", fragment)
                    return
            if inner_scope is not None:
                column = _short(inner_select.selects[0].unalias()) if isinstance(inner_select, exp.Select) else "c"
                for occ in self._occurrences_in(inner_select, inner_scope):
                    self.problems.setdefault(occ, []).append(
                        f"`{fragment}` depends on every row of the subquery (one NULL {column} makes it NULL for "
                        f"every key); write `NOT EXISTS (SELECT 1 FROM ... WHERE {column} = {_short(negated.this)})`"
                    )
            return
        involved = self._occurrences_in(conjunct, scope)
        if len(involved) > 1:
            for occ in involved:
                self.problems.setdefault(occ, []).append(
                    f"`{fragment}` relates tables without an equality, which keys cannot be traced through"
                )
