"""What maintaining a view costs per key, predicted from the mirrors' statistics (`lakemv explain`).

The unit of incremental work is the view key. For each key a batch reaches, lakemv reads the anchor's
rows for the key, then each child's rows through its link from its parent's rows, recomputes the
key over them and diffs the result. So the cost of a batch is about

    keys reached x rows read per key

and both factors follow from the plan's link tree and a few counts over the live mirror rows:

* `rows`: live rows per table;
* per link (child -> parent): the rows of the equi-join of the two tables on the link's columns.
  `joined / rows(parent)` is how many child rows one parent row brings along (down), and
  `joined / rows(child)` how many parent rows one child row reaches (up);
* the anchor's rows per key: `rows / distinct key values` (1 when the key is the anchor's primary
  key; a group's size for a GROUP BY or window view, which a key recomputes whole).

Rows read per key: the anchor's rows per key, times the down factors along the path to each
occurrence, summed over occurrences. Keys a changed row reaches: the up factors along its chain.

The keys a batch reaches are not average keys: a changed star reaches a repository with a chance
proportional to its stars, so popular repositories come up more often (size-biased sampling). For a
key reached through a changed row of occurrence o, the anchor's group and each link on the path to o
count with their size-biased means, sum(n^2) / sum(n) over the groups (a repository's stars, an
author's pull requests), and the other links with their plain means. `bench.suite --measures cost`
sets both against measured batches.

A batch of N changes hits a heavy key several times but recomputes it once: `batch_estimate` takes
each key's row counts (`key_profile`) and the batch's changes per table, and sums the chance each key
is reached (Poisson) and the rows it then reads.

`statistics` counts in DuckDB over the mirrors (no Spark); `predict` is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import duckdb
import sqlglot

from lakemv.catalog.declarations import SourceTable
from lakemv.core.batch.choice import INCREMENTAL, PRIORS, WHOLE
from lakemv.core.planner import ViewPlan, over


@dataclass(frozen=True)
class Statistics:
    """Counts over the live mirror rows: rows per table, join rows per link, the anchor's distinct keys."""

    rows: Mapping[str, int]
    joined: Mapping[int, int]  # per child occurrence: rows of child JOIN parent on the link
    keys: int  # distinct values of the view key over the anchor's rows
    joined_squares: Mapping[int, int]  # per child occurrence: sum over parent rows of (its child rows)^2
    key_squares: int  # sum over keys of (the key's anchor rows)^2
    thousand: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # per table: batch_estimate of 1,000 changes


@dataclass(frozen=True)
class OccurrenceCost:
    occurrence: int
    rows_per_key: float  # rows of this occurrence one key reads
    keys_per_change: float  # view keys one changed row of this occurrence reaches
    rows_per_reached_key: float  # rows in all a key reached through a changed row of this occurrence reads


@dataclass(frozen=True)
class Cost:
    occurrences: tuple[OccurrenceCost, ...]  # anchor first, then in link order
    keys: int
    anchor_rows_per_key: float

    @property
    def rows_per_key(self) -> float:
        return sum(o.rows_per_key for o in self.occurrences)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def trees(plan: ViewPlan) -> list[ViewPlan]:
    """The plan's link trees as plans of their own: a UNION ALL's branches (occurrence ids kept), or the plan."""
    if not plan.branches:
        return [plan]
    out = []
    for branch in plan.branches:
        links = tuple(link for link in plan.links if plan.anchor_of(link.child) == branch.anchor)
        ids = {branch.anchor, *(link.child for link in links)}
        occurrences = tuple(o for o in plan.occurrences if o.id in ids)
        out.append(plan.model_copy(update={"anchor": branch.anchor, "keys": branch.keys, "links": links,
                                           "occurrences": occurrences, "branches": ()}))  # fmt: skip
    return out


def predict(plan: ViewPlan, stats: Statistics) -> Cost:
    """Rows read per key and keys reached per change, per occurrence, from `stats`."""
    anchor = plan.occurrence(plan.anchor)
    anchor_rows = _ratio(stats.rows.get(anchor.table, 0), stats.keys)
    biased_anchor = _ratio(stats.key_squares, stats.rows.get(anchor.table, 0))
    mean = {link.child: _ratio(stats.joined.get(link.child, 0), stats.rows.get(plan.occurrence(link.parent).table, 0)) for link in plan.links}
    biased = {link.child: _ratio(stats.joined_squares.get(link.child, 0), stats.joined.get(link.child, 0)) for link in plan.links}
    down: dict[int, float] = {plan.anchor: anchor_rows}
    up: dict[int, float] = {plan.anchor: 1.0}  # an anchor row has one key
    for link in plan.links:  # parents before children
        down[link.child] = down[link.parent] * mean[link.child]

    def reached_through(occ_id: int) -> float:
        """Rows in all of a key reached through a changed row of `occ_id`: size-biased on its path."""
        path = {link.child for link in plan.chain(occ_id)}
        rows = {plan.anchor: biased_anchor}
        for link in plan.links:
            rows[link.child] = rows[link.parent] * (biased if link.child in path else mean)[link.child]
        return sum(rows.values())
    for occ in plan.occurrences:
        if occ.id != plan.anchor:
            up[occ.id] = math.prod(
                _ratio(stats.joined.get(link.child, 0), stats.rows.get(plan.occurrence(link.child).table, 0))
                for link in plan.chain(occ.id)
            )
    order = [plan.anchor, *(link.child for link in plan.links)]
    return Cost(tuple(OccurrenceCost(o, down[o], up[o], reached_through(o)) for o in order), stats.keys, anchor_rows)


def _duck(expression: str, alias: str) -> str:
    return sqlglot.transpile(over(expression, alias), read="spark", write="duckdb")[0]


def statistics(con: duckdb.DuckDBPyConnection, plan: ViewPlan, sources: Mapping[str, SourceTable]) -> Statistics:
    """The counts `predict` needs, over `con`'s views of the mirrors (lakemv.duck.query.lake_connection)."""
    rows = {t: int(con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in plan.tables}
    joined, squares = {}, {}
    for link in plan.links:
        child, parent = plan.occurrence(link.child).table, plan.occurrence(link.parent).table
        on = _on(link.pairs, "c", "p")
        parent_row = ", ".join(f'p."{c}"' for c in sources[parent].primary_key)
        found = con.execute(
            f'SELECT coalesce(sum(m), 0), coalesce(sum(m * m), 0) FROM (SELECT count(*) AS m FROM "{child}" c '
            f'JOIN "{parent}" p ON {on} GROUP BY {parent_row})'
        ).fetchone()
        joined[link.child], squares[link.child] = int(found[0]), int(found[1])
    anchor = plan.occurrence(plan.anchor).table
    keys = ", ".join(f"{_duck(k.expr, 'a')} AS _k{i}" for i, k in enumerate(plan.keys))
    groups = ", ".join(f"_k{i}" for i in range(len(plan.keys)))  # by name: a constant key is no position
    distinct, key_squares = con.execute(
        f'SELECT count(*), coalesce(sum(n * n), 0) FROM (SELECT count(*) AS n FROM (SELECT {keys} FROM "{anchor}" a) GROUP BY {groups})'
    ).fetchone()
    key_profile(con, plan)
    thousand = {t: batch_estimate(con, plan, rows, {t: 1000}) for t in plan.tables}
    return Statistics(rows, joined, int(distinct), squares, int(key_squares), thousand)


def _on(link_pairs: tuple[tuple[str, str, str], ...], child: str, parent: str) -> str:
    return " AND ".join(
        f"{_duck(c, child)} {'=' if op == '=' else 'IS NOT DISTINCT FROM'} {_duck(p, parent)}" for c, p, op in link_pairs
    )


PROFILE = "_lmv_key_profile"


def key_profile(con: duckdb.DuckDBPyConnection, plan: ViewPlan) -> None:
    """(Re)creates temp table PROFILE: per view key, the rows of each occurrence it reads (`n<occ>`).

    Each occurrence is counted along its path from the anchor (the joins the recompute makes), so a
    key's counts are what recomputing it reads, skew and all."""
    keys = ", ".join(f"{_duck(k.expr, 'o' + str(plan.anchor))} AS _k{i}" for i, k in enumerate(plan.keys))
    groups = ", ".join(f"_k{i}" for i in range(len(plan.keys)))
    parts = []
    for occ in plan.occurrences:
        path = list(reversed(plan.chain(occ.id)))  # anchor's child first
        joins = "".join(
            f' JOIN "{plan.occurrence(link.child).table}" o{link.child} ON {_on(link.pairs, f"o{link.child}", f"o{link.parent}")}'
            for link in path
        )
        anchor = plan.occurrence(plan.anchor).table
        parts.append(f'SELECT {keys}, {occ.id} AS occ, count(*) AS n FROM "{anchor}" o{plan.anchor}{joins} GROUP BY {groups}')
    columns = ", ".join(f"coalesce(sum(n) FILTER (WHERE occ = {o.id}), 0) AS n{o.id}" for o in plan.occurrences)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {PROFILE} AS SELECT {groups}, {columns} FROM ({' UNION ALL '.join(parts)}) GROUP BY {groups}")


def batch_estimate(
    con: duckdb.DuckDBPyConnection, plan: ViewPlan, rows: Mapping[str, int], changes: Mapping[str, int]
) -> tuple[float, float]:
    """(keys, rows per key) a batch changing `changes[table]` rows of each table reaches and reads,
    over PROFILE (`key_profile`) and the tables' live `rows`.

    A changed row is a random row of its table: key k is hit by a Poisson number of them with mean
    lambda_k = sum over occurrences of changes(table) * n_occ(k) / rows(table), so it is reached with
    probability 1 - exp(-lambda_k); a heavy key is reached often but recomputed once per batch."""
    terms = [
        f"{changes[o.table]} * n{o.id} / {rows[o.table]}"
        for o in plan.occurrences
        if changes.get(o.table) and rows.get(o.table)
    ]
    if not terms:
        return 0.0, 0.0
    read = " + ".join(f"n{o.id}" for o in plan.occurrences)
    keys, total = con.execute(
        f"SELECT sum(1 - exp(-({' + '.join(terms)}))), sum((1 - exp(-({' + '.join(terms)}))) * ({read})) FROM {PROFILE}"
    ).fetchone()
    return float(keys or 0.0), float(total or 0.0) / float(keys) if keys else 0.0


def break_even(rows: int) -> str:
    """When a batch recomputes a view of `rows` rows whole, by the priors of lakemv.core.batch.choice."""
    lines = PRIORS["indexed"]
    keys = max(0.0, (lines[WHOLE].at(rows) - lines[INCREMENTAL].fixed) / lines[INCREMENTAL].per_unit)
    return (
        f"a batch reaching more than ~{_number(keys)} keys recomputes the view whole instead (predicted cheaper by"
        " this machine's priors; each view's batches calibrate them, and say which they chose)"
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.2g}" if value < 1 else f"{value:,.1f}"


def cost_lines(plan: ViewPlan, cost: Cost, stats: Statistics, width: int) -> list[str]:
    """The cost section of `lakemv explain`."""
    tables = ", ".join(f"{t} {stats.rows[t]:,}" for t in plan.tables)
    lines = [f"cost per key - averages over the live rows now ({tables} rows; {cost.keys:,} keys):"]
    for item in cost.occurrences:
        occ = plan.occurrence(item.occurrence)
        name = f"{occ.table} {occ.alias}"
        lines.append(
            f"  {name:<{width}}  reads {_number(item.rows_per_key)} rows per key;"
            f" a changed row reaches {_number(item.keys_per_change)} keys of ~{_number(item.rows_per_reached_key)} rows"
        )
    lines.append(
        f"  a key reads ~{_number(cost.rows_per_key)} rows in all (an average key; keys a change reaches"
        " are bigger on average, as above: a key with more rows has more rows to change)"
    )
    for table, (keys, rows) in stats.thousand.items():
        lines.append(
            f"  a batch of 1,000 changed {table} rows reaches ~{_number(keys)} keys of ~{_number(rows)} rows"
            " (each key once, however many of its rows change)"
        )
    if cost.anchor_rows_per_key > 1.01:
        lines.append(
            f"  each key is a group of ~{_number(cost.anchor_rows_per_key)} {plan.occurrence(plan.anchor).table} rows,"
            " recomputed whole when any of them changes: the cost is bounded by the group"
        )
    lines.append(f"  {break_even(cost.keys)}")
    return lines
