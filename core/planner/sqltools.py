"""Small sqlglot helpers the planner's stages share: conjuncts, aggregation, one-line renderings."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

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


def _conjuncts(condition: exp.Expression | None) -> Iterator[exp.Expression]:
    if condition is None:
        return
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        yield from _conjuncts(condition.left)
        yield from _conjuncts(condition.right)
    else:
        yield condition


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
