"""The incremental step's SQL is built as sqlglot trees from the planner's text: what it embeds is
not changed by the trip through sqlglot, and every statement it renders reads back as the same tree."""

from __future__ import annotations

import pytest
import sqlglot

from lakemv.catalog.settings import LakeSettings
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.sql.feedsql import feed_insert_sql
from lakemv.core.sql.viewsql import (
    affected_keys_sql,
    diff_sql,
    merge_sql,
    old_rows_sql,
    recompute_sql,
    rows_sql,
)
from lakemv.workload.shapes import SHAPES, shape_view


def _plans(sources):
    shipped = [plan_view(v, sources) for v in load_views(LakeSettings().view_dirs).values()]
    return shipped + [plan_view(shape_view(name), sources) for name in SHAPES]


def _round_trip(sql: str) -> str:
    return sqlglot.parse_one(sql, read="spark").sql(dialect="spark")


def test_every_view_body_is_a_fixed_point_of_sqlglots_spark_rendering(sources):
    """The body is embedded in each statement by parsing and rendering it again: that must be the identity."""
    plans = _plans(sources)
    assert len(plans) > len(SHAPES)
    for plan in plans:
        assert _round_trip(plan.body) == plan.body, plan.name


def test_every_statement_reads_back_as_itself(sources):
    for plan in _plans(sources):
        live = {t: f"SELECT * FROM lake.mirror.{t} WHERE NOT `_lmv_deleted`" for t in plan.tables}
        marks = {plan.finality.source: 1_700_000_000_000_000} if plan.finality else None
        deltas = {t: f"_lmv_delta_{t}" for t in plan.tables}
        statements = [
            recompute_sql(plan, live, "_keys", marks),
            recompute_sql(plan, live),
            diff_sql(plan, live, "lake.views.v", "_keys", marks),
            rows_sql(plan, marks),
            old_rows_sql(plan, "lake.views.v", "_keys"),
            affected_keys_sql(plan, live, deltas),
            merge_sql(plan, "lake.views.v", "_diff"),
            feed_insert_sql(plan.name, plan.columns, plan.key_names, "lake.lakemv.changes", "_diff", "_lmv_diff", 3, None),
        ]
        for sql in statements:
            assert sql and _round_trip(sql) == sql, f"{plan.name}: {sql}"


@pytest.mark.parametrize("name", ["user_profile", "repo_summary"])
def test_merge_keeps_a_rendered_key_filter_as_it_is(sources, name):
    plan = next(p for p in _plans(sources) if p.name == name)
    prefilter = "t.`k` IN ('a', 'b''c')"  # not parsed again: up to 20,000 literals
    sql = merge_sql(plan, "lake.views.v", "_diff", prefilter)
    assert f"AND ({prefilter}) WHEN MATCHED" in sql and sql.startswith("MERGE INTO lake.views.v AS t USING _diff AS s ON ")
