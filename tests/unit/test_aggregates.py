"""Aggregates by delta: which views qualify (and why not), and the SQL of their states."""

from __future__ import annotations

import pytest

from lakemv.core.planner import plan_view
from lakemv.core.planner.aggregates import Aggregate, delta_plan
from lakemv.core.planner.definitions import parse_view
from lakemv.core.sql.deltasql import REDO, ROWS, rows_sql, state_columns, state_sql, step_sql


def planned(sources, key: str, sql: str):
    return plan_view(parse_view(f"-- @key: {key}\n{sql}", "v"), sources)


def test_a_grouped_view_of_decomposable_aggregates_follows_deltas(sources):
    plan = planned(sources, "status", "SELECT p.status, count(*) AS n, count(p.author) AS authors, min(p.created_at) AS first "
                                      "FROM pull_requests p WHERE p.title IS NOT NULL GROUP BY p.status")  # fmt: skip
    found = delta_plan(plan)
    assert not isinstance(found, str), found
    assert found.grouped and found.keys == (("status", "_lmv_self.status"),) and found.where == "NOT _lmv_self.title IS NULL"
    assert found.aggregates == (Aggregate(kind="rows"), Aggregate(kind="count", arg="_lmv_self.author"), Aggregate(kind="min", arg="_lmv_self.created_at"))
    assert found.retracting == (2,)
    assert found.describe() == (
        "by delta: count(*), count(author); min(created_at) by delta until a change removes the extreme, which recomputes its group"
    )
    assert state_columns(found) == [ROWS, "c1", "m2"]


def test_a_total_keeps_its_one_row_and_expressions_over_aggregates(sources):
    plan = planned(sources, "scope", "SELECT 'all' AS scope, sum(`index`) AS s, avg(`index`) AS a, sum(`index`) / count(*) AS ratio "
                                     "FROM pull_requests")  # fmt: skip
    found = delta_plan(plan)
    assert not isinstance(found, str) and not found.grouped
    assert [a.kind for a in found.aggregates] == ["sum", "avg", "rows"]  # count(*) added: whether the group has rows
    assert [o.template for o in found.outputs] == ["_lmv_agg_0", "_lmv_agg_1", "_lmv_agg_0 / _lmv_agg_2"]
    rows = rows_sql(found, "new", plan.columns, {"s": "BIGINT"})
    assert "WHERE" not in rows  # a total is a row over no rows too
    assert "CAST((s.s0) AS BIGINT) AS `s`" in rows and "(s.s0) / (s._lmv_n) AS `ratio`" in rows
    assert "IF(s.c1 = 0, NULL, s.s1 / CAST(s.c1 AS DOUBLE))" in rows  # a non-decimal average: Spark's, in double
    assert "s.s1 / CAST(s.c1 AS DECIMAL(20,0))" in rows_sql(found, "new", plan.columns, {}, decimals=[1])


def test_a_join_by_unique_keys_follows_deltas_over_its_joined_rows(sources):
    """Each pull request joined to its author's user row (by the unique username) is one joined row: the
    deltas add up those rows, old and new, whatever the table that changed."""
    plan = planned(sources, "status", "SELECT p.status, count(*) AS n, sum(u.id) AS ids, max(length(u.email)) AS widest "
                                      "FROM pull_requests p JOIN users u ON u.username = p.author WHERE u.email LIKE '%.io' GROUP BY p.status")  # fmt: skip
    found = delta_plan(plan)
    assert not isinstance(found, str), found
    assert found.keys == (("status", "_lmv_self.`status`"),) and found.where is None and found.grouped
    assert [(a.kind, a.arg) for a in found.aggregates] == [("rows", None), ("sum", "_lmv_self._lmv_a1"), ("max", "_lmv_self._lmv_a2")]
    assert found.describe() == "by delta: count(*), sum(u.id); max(LENGTH(u.email)) by delta until a change removes the extreme, which recomputes its group"
    assert found.rows is not None and found.rows.startswith("SELECT p.status AS `status`, u.id AS _lmv_a1, LENGTH(u.email) AS _lmv_a2 FROM _lmv_occ_")
    assert "GROUP BY" not in found.rows and "LIKE '%.io'" in found.rows  # the view's joins and filter, one row per pull request
    assert "JOIN _lmv_occ_" in found.rows
    total = delta_plan(planned(sources, "scope", "SELECT 'all' AS scope, sum(u.id) AS ids FROM pull_requests p JOIN users u ON u.username = p.author"))
    assert not isinstance(total, str) and not total.grouped and total.keys == (("scope", "'all'"),)  # one row: its key stays a constant
    assert total.rows is not None and total.rows.startswith("SELECT u.id AS _lmv_a0 FROM")


@pytest.mark.parametrize(
    ("key", "sql", "reason"),
    [
        ("author", "SELECT p.author, count(DISTINCT p.repo) AS repos FROM pull_requests p GROUP BY p.author", "a DISTINCT aggregate"),
        ("email", "SELECT u.email, count(*) AS n FROM users u LEFT JOIN pull_requests p ON p.author = u.username GROUP BY u.email", "an outer or semi join"),
        ("email", "SELECT u.email, count(*) AS n FROM users u JOIN pull_requests p ON p.author = u.username "
                  "JOIN stars s ON s.username = u.username GROUP BY u.email", "not a unique key there, and no table"),  # (two ways to fan out)
        ("author", "SELECT author, count(*) AS n FROM pull_requests GROUP BY author HAVING count(*) > 1", "HAVING"),
        ("author", "SELECT author, collect_list(title) AS titles FROM pull_requests GROUP BY author", "is not count, sum, avg"),
        ("email", "SELECT email, username FROM users", "neither a key column nor an aggregate"),
    ],
)
def test_views_outside_the_class_say_why(sources, key, sql, reason):
    found = delta_plan(planned(sources, key, sql))
    assert isinstance(found, str) and reason in found, found


def test_the_step_adds_signed_deltas_and_flags_a_retracted_extreme(sources):
    plan = planned(sources, "status", "SELECT status, count(*) AS n, sum(`index`) AS total, max(created_at) AS last FROM pull_requests GROUP BY status")
    found = delta_plan(plan)
    assert not isinstance(found, str)
    step = step_sql(found, "signed", "old", types={"s1": "DECIMAL(30,2)"})
    assert "sum(IF(_lmv_r._lmv_sign > 0, _lmv_r.`index`, -(_lmv_r.`index`))) AS s1" in step  # a sum's delta keeps its type
    assert "CAST(IF(coalesce(o.c1, 0) + coalesce(d.c1, 0) = 0, NULL, coalesce(o.s1, 0) + coalesce(d.s1, 0)) AS DECIMAL(30,2)) AS s1" in step
    assert "max(IF(_lmv_r._lmv_sign < 0, _lmv_r.created_at, NULL)) AS r2" in step
    assert f"(d.r2 IS NOT NULL AND o.m2 IS NOT NULL AND d.r2 >= o.m2) AS {REDO}" in step
    assert "LEFT JOIN old AS o ON o.`status` <=> d.`status`" in step
    assert state_sql(found, "rows").endswith("FROM rows AS _lmv_r GROUP BY 1")


def test_explain_says_which_aggregates_follow_deltas(sources):
    from lakemv.core.planner.explain import explain

    grouped = explain(planned(sources, "status", "SELECT status, count(*) AS n, max(created_at) AS last FROM pull_requests GROUP BY status"))
    assert "aggregates - with the local state, each batch adds its changed rows" in grouped
    assert "by delta: count(*); max(created_at) by delta until a change removes the extreme, which recomputes its group" in grouped
    joined = explain(planned(sources, "email", "SELECT u.email, count(*) AS n FROM users u JOIN payment_info p ON p.user_id = u.id GROUP BY u.email"))
    assert "aggregates - each reached key's group is recomputed from its rows: it joins payment_info by columns that are not a unique key" in joined
    assert "aggregates -" not in explain(planned(sources, "email", "SELECT email, username FROM users"))
