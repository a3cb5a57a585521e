"""`ingest` with the engine state (`engine_state`): the real streaming query over landing files, each
unit through the engine, the state opened again when the stream restarts and built again when its views
change. After every run each view's table equals Spark's full recompute over the mirrors, and the ledger
holds one row per unit."""

from __future__ import annotations

import random

import pytest
from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import live_rows_sql
from lakemv.core.errors import ConfigError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import ViewDefinition, load_views
from lakemv.core.sql.viewsql import recompute_sql
from lakemv.spark.stream.files import run_ingest
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import WorkloadConfig, generate_files
from lakemv.workload.shapes import copies

TABLES = ("users", "repos", "pull_requests", "stars", "payment_info")


def _differing(lake, sources, plans) -> dict[str, int]:
    """Per view, rows in its table and not in Spark's full recompute over the mirrors, or the reverse
    (only views where any differ)."""
    spark = lake.spark
    live = {}
    for table in TABLES:
        spark.sql(live_rows_sql(lake.names, sources[table])).createOrReplaceTempView(f"ingest_check_{table}")
        live[table] = f"ingest_check_{table}"
    found = {}
    for plan in plans:
        full, held = spark.sql(recompute_sql(plan, live)), spark.table(lake.names.view(plan.name))
        differing = held.exceptAll(full).count() + full.exceptAll(held).count()
        if differing:
            found[plan.name] = differing
    return found


@pytest.mark.slow(60)
def test_ingest_keeps_views_by_the_engine_state_across_restarts(lake, tmp_path):
    settings = lake.settings.model_copy(update={"engine_state": True})
    sources = load_sources(LakeSettings().sources_dirs)
    github = {t: sources[t] for t in TABLES}
    plans = copies(load_views(LakeSettings().view_dirs), github, 4)
    landing = tmp_path / "landing"
    workload, events, _ = generate_files(WorkloadConfig(users=30, seed=11, rounds=1), github, landing)

    # the first run builds the state (every view made from the empty mirrors) and drains the snapshot
    first = run_ingest(lake.spark, settings, sources, landing, once=True, views=plans)
    assert sum(b.events for b in first.batches) == events and all(b.set_wise for b in first.batches)
    assert _differing(lake, sources, plans) == {}

    # a restart opens the state again: the change rounds' units reach the views through it
    rng = random.Random(3)
    for number in (1, 2):
        for table, table_events in workload.change_round(50).items():
            write_landing_files(landing, table, table_events, connect_schema(github[table]), rng, f"c{number}", files=1)
    (landing / "users" / "bad.json").write_text('{"op": "u", "after": {"id": 1\n')
    built = []
    second = run_ingest(lake.spark, settings, sources, landing, once=True, views=plans, on_build=built.append)
    assert built == [] and second.batches and sum(b.dead_letters for b in second.batches) == 1
    assert any(v.upserts or v.deletes for b in second.batches for v in b.views.values())
    assert _differing(lake, sources, plans) == {}
    units = len(first.batches) + len(second.batches)
    assert lake.spark.table(lake.names.ledger).count() == units

    # another view: the state is built again for the new set of views, from the mirrors as they are
    more = [
        *plans,
        plan_view(ViewDefinition(name="names_by_email", key=("email",), sql="SELECT u.email, upper(u.username) AS name FROM users u"), github),
    ]
    for table, table_events in workload.change_round(30).items():
        write_landing_files(landing, table, table_events, connect_schema(github[table]), rng, "c3", files=1)
    third = run_ingest(lake.spark, settings, sources, landing, once=True, views=more, on_build=built.append)
    assert sorted(b.view for b in built) == sorted(p.name for p in more)
    assert third.batches and _differing(lake, sources, more) == {}


@pytest.mark.slow(30)
def test_the_engine_state_refuses_what_it_does_not_carry_yet(lake, tmp_path):
    settings = lake.settings.model_copy(update={"engine_state": True})
    sources = load_sources(LakeSettings().sources_dirs)
    (tmp_path / "landing").mkdir()
    with pytest.raises(ConfigError, match="keeps views: there are none"):
        run_ingest(lake.spark, settings, sources, tmp_path / "landing", once=True, views=[])
