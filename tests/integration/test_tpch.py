"""TPC-H's queries as views (views/tpch), maintained through the benchmark's refresh functions and
updates of the columns they join on: after the snapshot and after every refresh round, each view
equals Spark's full run of its SQL over the mirrors and DuckDB's independent recompute (`verify`).

Q7 and Q9 are written as TPC-H writes them: their group keys' columns come from several tables, and
lakemv keeps each through a view of its rows at their grain (`q07__rows`: one a line item). Q2, Q11,
Q13, Q15 and Q22 are answered by views over views (the lowest cost per part, a per-part value and its
total, orders per customer, revenue per supplier and its maximum, an average balance), Q2 and Q20 with
their rows' key among the outputs: each such view must also equal the query as TPC-H writes it, on its
columns. The scale is tiny (dbgen at 0.001: 6k line items, 1.5k orders). The queries that stay refused,
with their rewrites, are listed in docs/views.md.
"""

from __future__ import annotations

import re

import pytest
from chispa import assert_df_equality

from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch import choice
from lakemv.core.planner.dag import plan_views
from lakemv.core.planner.definitions import load_views
from lakemv.duck.verify import verify_plan
from lakemv.spark.stream.files import run_ingest
from lakemv.workload.tpch import ORIGINALS, TABLES, VIEWS_DIR, TpchConfig, TpchWorkload, write_round

# TPC-H's queries accepted as written (ORDER BY / LIMIT aside)
ACCEPTED = ("q01", "q03", "q04", "q05", "q06", "q07", "q08", "q09", "q10", "q12", "q14", "q16", "q17", "q18", "q19", "q21")
# and those answered by views over views (the query's view, and the views it reads) or with their key added (Q20)
DAGS = {
    "q02": ("q02_min",), "q11": ("q11_parts", "q11_total"), "q13": ("q13_orders",),
    "q15": ("q15_revenue", "q15_top"), "q20": (), "q22": ("q22_average",),
}  # fmt: skip


@pytest.mark.slow(200)
def test_tpch_views_equal_spark_and_duckdb_full_runs_after_every_refresh(lake, tmp_path, monkeypatch):
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)  # the incremental path, however cold batches measure
    workload = TpchWorkload(TpchConfig(scale=0.001, rounds=1, orders_per_round=6, updates_per_round=12))
    sources = workload.sources
    definitions = load_views([VIEWS_DIR])
    assert sorted(definitions) == sorted([*ACCEPTED, *DAGS, *(v for reads in DAGS.values() for v in reads)])
    planned = plan_views(definitions, sources)  # (each view after the views it reads)
    for view in ("q07", "q09"):  # kept through their rows at the grain, one a line item
        assert planned[f"{view}__rows"].key_names == ("l_orderkey", "l_linenumber") and planned[view].upstream == (f"{view}__rows",)
    plans = list(planned.values())
    landing = tmp_path / "landing"
    for number, events in enumerate(workload.rounds()):
        write_round(landing, number, events, sources)
        result = run_ingest(lake.spark, lake.settings, sources, landing, once=True, views=plans)
        assert sum(b.dead_letters for b in result.batches) == 0, result.batches
        for table in TABLES:  # the mirrors hold what the source database holds
            live = lake.spark.sql(live_rows_sql(lake.names, sources[table])).count()
            assert live == len(workload.rows[table]), table
        if number == 0:  # the build; compared after the refresh, whose batch reached only some of each view's rows
            continue
        for table in TABLES:
            lake.spark.sql(live_rows_sql(lake.names, sources[table])).createOrReplaceTempView(table)
        try:
            for plan in plans:  # a view's input views are their own SQL's runs: the DAG equals a run from the tables
                expected = lake.spark.sql(plan.definition.sql)
                actual = lake.spark.table(lake.names.view(plan.name)).select(*expected.columns)
                assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
                expected.createOrReplaceTempView(plan.name)
            for name, sql in ORIGINALS.items():  # and each such view equals the query as TPC-H writes it (its columns)
                original = lake.spark.sql(sql)
                actual = lake.spark.table(lake.names.view(name)).select(*original.columns)
                assert_df_equality(actual, original, ignore_row_order=True, ignore_nullable=True)
        finally:
            for table in (*TABLES, *planned):
                lake.spark.catalog.dropTempView(table)
        for plan in plans:
            verified = verify_plan(lake.settings, sources, plan)
            assert not isinstance(verified, str) and verified.ok, (number, verified)
        # a refresh reached the views incrementally: each was maintained, none rebuilt
        maintained = {v for b in result.batches for v, r in b.views.items() if r.keys}
        assert {"q01", "q03", "q10", "q12", "q18", "q13_orders", "q13", "q22"} <= maintained, maintained
        for view in ("q01", "q06"):  # a few huge groups (one, for Q6): their decimal sums follow the changed rows (exact: compared above)
            reasons = [r.reason or "" for b in result.batches for v, r in b.views.items() if v == view and r.keys]
            assert any(r.startswith("aggregates by delta") for r in reasons), (view, reasons)
        q05 = next(r for b in result.batches for v, r in b.views.items() if v == "q05" and r.keys)  # 25 nations' customers, orders, line items:
        assert re.search(r"rows its \d+ keys read \(estimated\)|their groups read ~", q05.reason or ""), q05.reason  # sized by the rows they read
