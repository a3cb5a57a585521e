"""CTE inlining: each reference to a CTE becomes a copy of its body, marked with the CTE's name."""

from __future__ import annotations

from sqlglot import exp


def inline_ctes(tree: exp.Expression) -> exp.Expression:
    """Replace every CTE reference by a copy of its body, so each read has its own table occurrences."""
    while True:
        with_ = next(iter(tree.find_all(exp.With, bfs=True)), None)
        if with_ is None:
            return tree
        query = with_.parent
        ctes = list(with_.expressions)
        query.set(with_.arg_key, None)
        for index, cte in enumerate(ctes):
            name = cte.alias
            targets = [c.this for c in ctes[index + 1 :]] + [query]
            for target in targets:
                for table in list(target.find_all(exp.Table)):
                    if table.args.get("db") or table.name.lower() != name.lower():
                        continue
                    alias = cte.args["alias"].copy()
                    alias.set("this", exp.to_identifier(table.alias or name))
                    body = cte.this.copy()
                    body.meta["lmv_cte"] = name
                    table.replace(exp.Subquery(this=body, alias=alias))
