"""Window functions: accepted when each window's partition is whole in the rows a key gathers.

A key gathers, per occurrence, every row whose link columns (to its parent in the link tree) match -
or, for the anchor, every row whose key columns match. A window over one table partitioned by columns
that include those is computed over whole partitions, and a change to any row of a partition reaches
the one key every row of that partition belongs to. So: `row_number() OVER (PARTITION BY author ...)`
in a CTE over pull_requests, keyed (through the CTE) by `author`, is key-local; the same window keyed
by each pull request is not (one change renumbers other keys' rows), nor is a window without PARTITION
BY (every row depends on the whole table).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.core.planner.model import KeyColumn, Link
from lakemv.core.planner.resolve import _Resolution
from lakemv.core.planner.sqltools import _is_aggregated, _NotLocal

REWRITE = (
    "partition the window by the view key's columns (or, in a subquery, by the columns it is "
    "correlated on), in a CTE over one table"
)


class _Windows(_Resolution):
    """Checks each window function against the link tree and the key."""

    def _check_windows(self, scopes: list[Scope], anchor: int, keys: tuple[KeyColumn, ...], links: tuple[Link, ...]) -> None:
        for scope in scopes:
            select = scope.expression
            windows = [w for w in select.find_all(exp.Window) if w.find_ancestor(exp.Select) is select]
            for window in windows:
                self._check_window(window, scope, anchor, keys, links)

    def _check_window(
        self, window: exp.Window, scope: Scope, anchor: int, keys: tuple[KeyColumn, ...], links: tuple[Link, ...]
    ) -> None:
        select = scope.expression
        partition = window.args.get("partition_by") or []
        if not partition:
            raise self.fail(f"a window function without PARTITION BY makes every row depend on the whole table; {REWRITE}", window)
        tables = [s for s in scope.selected_sources.values() if isinstance(s[1], exp.Table)]
        if select.args.get("joins") or len(scope.selected_sources) != 1 or len(tables) != 1:
            raise self.fail(f"a window function is supported over one table's rows, not a join or a subquery; {REWRITE}", window)
        if _is_aggregated(select):
            raise self.fail(
                "a window function over grouped rows is not supported; compute the window in a CTE over the table, then aggregate",
                window,
            )
        occ = self.occ_of[id(tables[0][1])]
        covered = set()
        for expression in partition:
            try:
                found, resolved = self._resolve_expression(expression, scope)
            except _NotLocal as exc:
                raise self.fail(f"a window function must be partitioned by columns of its table: {exc}", window) from None
            if found == occ:
                covered.add(resolved.sql(dialect="spark"))
        if occ == anchor:
            needed = [k.expr for k in keys]
            whose = f"the view key ({', '.join(self.definition.key)})"
        else:
            link = next(l for l in links if l.child == occ)
            needed = [child for child, _parent, _op in link.pairs]
            whose = f"its link to the key ({', '.join(link.fragments)})"
        missing = [n for n in needed if n not in covered]
        if missing:
            raise self.fail(
                f"this window function's partitions are not whole in the rows one key reads: PARTITION BY must include the "
                f"columns of {whose}, missing {', '.join(m.split('.', 1)[-1] for m in missing)}; {REWRITE}",
                window,
            )
