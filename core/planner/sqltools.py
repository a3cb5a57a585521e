"""Small sqlglot helpers the planner's stages share: conjuncts, aggregation, one-line renderings."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import exp


@lru_cache(maxsize=4096)
def _parsed(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


def spark_tree(sql: str) -> exp.Expression:
    """Spark SQL text parsed once per text, as a copy the caller may build into its own tree (the SQL
    lakemv generates each batch embeds the same bodies and expressions again and again)."""
    return _parsed(sql).copy()


class _NotLocal(Exception):
    """A column or expression that does not trace back to one occurrence's row."""


class _SeveralTables(_NotLocal):
    """An expression over columns of several occurrences' rows."""


def source_schema(sources: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The tables (sources, and views read as tables) as sqlglot's optimizer takes a schema: column -> type."""
    return {name: {c.name: c.spark_type for c in source.columns} for name, source in sources.items()}


def _conjuncts(condition: exp.Expression | None) -> Iterator[exp.Expression]:
    if condition is None:
        return
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        yield from _conjuncts(condition.left)
        yield from _conjuncts(condition.right)
    else:
        yield condition


def select_conjuncts(select: exp.Expression) -> Iterator[exp.Expression]:
    """The AND-ed conjuncts of a SELECT's own WHERE and of its joins' ON conditions (not its subqueries')."""
    where = select.args.get("where")
    yield from _conjuncts(where.this if where is not None else None)
    for join in select.args.get("joins") or []:
        yield from _conjuncts(join.args.get("on"))


def factor_ors(tree: exp.Expression) -> exp.Expression:
    """(In place) every OR whose branches share conjuncts with those pulled out in front of it:
    `(a AND b) OR (a AND c)` as `a AND (b OR c)` (equal in SQL's three-valued logic too), so an
    equality every branch repeats links tables like any other (TPC-H Q19 repeats `p_partkey =
    l_partkey` in each of its three OR-ed conditions)."""

    def factor(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Or):
            return node
        parts = [list(_conjuncts(branch)) for branch in node.flatten()]
        common = [c for c in parts[0] if all(any(c == other for other in part) for part in parts[1:])]
        if not common:
            return node
        rests = [[c for c in part if not any(c == k for k in common)] for part in parts]
        if any(not rest for rest in rests):  # a branch is the common part alone: (a) OR (a AND b) is a
            factored = exp.and_(*common)
        else:
            factored = exp.and_(*common, exp.or_(*(exp.and_(*rest) for rest in rests)))
        return factored if isinstance(node.parent, exp.Paren) else exp.paren(factored, copy=False)

    return tree.transform(factor, copy=False)


def _short(node: exp.Expression, limit: int = 120) -> str:
    """A one-line rendering for messages; inlined CTEs are shown by their name again."""
    shown = node.copy()
    for subquery in list(shown.find_all(exp.Subquery)):
        cte = subquery.this.meta.get("lmv_cte") if subquery.this is not None else None
        if cte:
            alias = subquery.alias
            subquery.replace(exp.Table(this=exp.to_identifier(cte), alias=exp.TableAlias(this=exp.to_identifier(alias))) if alias and alias != cte else exp.Table(this=exp.to_identifier(cte)))
    text = " ".join(shown.sql(dialect="spark").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def select_from(select: exp.Select) -> exp.Expression | None:
    """The relation of a SELECT's FROM clause (not its joins)."""
    from_ = select.args.get("from") or select.args.get("from_")
    return from_.this if from_ is not None else None


def _is_aggregated(select: exp.Select) -> bool:
    """GROUP BY, or an aggregate function belonging to this SELECT (not to a nested subquery)."""
    if select.args.get("group"):
        return True
    return any(
        agg.find_ancestor(exp.Select, exp.Window) is select  # `sum(x) OVER (...)` does not aggregate the SELECT
        for projection in select.selects
        for agg in projection.find_all(exp.AggFunc)
    )
