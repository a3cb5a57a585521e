"""Views over views: a DAG of views maintained batch by batch, each level after the views it reads.

The DAG (`DAG`): `user_prs` (pull requests per author, from the local state), `pr_histogram` (authors
per PR count, over `user_prs`), `pr_total` (one row over the histogram; both aggregates by delta over
the rows of the view they read, the histogram's max falling back to its group when retracted) and `user_card` (users joined
with `user_prs` by username: a source and a view); and `star_origins`, whose group key's columns come
from two tables, kept through its rows at their grain. After every batch, each view equals its SQL run by
Spark with every view it reads replaced by *its* SQL, down to the mirrors (so the whole DAG equals a
recompute from the sources), and DuckDB's verify of every level passes. A unit that dies after an
upstream view committed, before the views that read it, is replayed to the same rows; a backfill of
an upstream view rebuilds its readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality

from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch.journal import BatchRef, Journal
from lakemv.core.planner.dag import plan_views
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.explain import explain
from lakemv.core.state.store import Store
from lakemv.duck.query import run_query
from lakemv.duck.verify import verify_plan
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.stream.files import run_ingest
from lakemv.spark.views.state import read_state
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.cdc import at, dbz, user
from tests.crashes import crashing_at
from tests.e2e.cli import move_round
from tests.conftest import points

DAG = {
    "user_prs": """-- @key: author
SELECT author, count(*) AS prs, count_if(status = 'merged') AS merged FROM pull_requests GROUP BY author""",
    "pr_histogram": """-- @key: prs
SELECT prs, count(*) AS authors, sum(merged) AS merged, max(merged) AS most_merged FROM user_prs GROUP BY prs""",
    "pr_total": """-- @key: k
SELECT 'all' AS k, count(*) AS buckets, sum(authors) AS authors FROM pr_histogram""",
    "user_card": """-- @key: email
SELECT u.email, u.username, coalesce(p.prs, 0) AS prs FROM users u LEFT JOIN user_prs p ON p.author = u.username""",
}


# a group key over columns of two tables (the starring user's sign-up year, the starred repo's owner):
# kept through its rows at their grain, one a star (`star_origins__rows`, lakemv.core.planner.grain)
STAR_ORIGINS = """-- @key: signup_year, owner
SELECT year(u.registered_at) AS signup_year, r.owner, count(*) AS stars, max(s.created_at) AS last_star
FROM stars s JOIN users u ON u.username = s.username JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
GROUP BY year(u.registered_at), r.owner"""


def dag_plans(sources, **more: str) -> dict:
    return plan_views({name: parse_view(text, name) for name, text in {**DAG, **more}.items()}, sources)


def assert_dag_fresh(lake, plans: dict) -> None:
    """Every view equals its SQL over the mirrors with the views it reads recomputed the same way
    (Spark, chispa), and DuckDB verifies every level."""
    spark, made = lake.spark, []
    try:
        for table, source in lake.sources.items():
            spark.sql(live_rows_sql(lake.names, source)).createOrReplaceTempView(table)
            made.append(table)
        for name, plan in plans.items():  # in dependency order: a reader's input is its upstream's recompute
            expected = spark.sql(plan.definition.sql)
            actual = spark.table(lake.names.view(name)).select(*expected.columns)
            assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
            expected.createOrReplaceTempView(name)
            made.append(name)
    finally:
        for name in made:
            spark.catalog.dropTempView(name)
    for plan in plans.values():
        verified = verify_plan(lake.settings, lake.sources, plan)
        assert not isinstance(verified, str) and verified.ok, verified


@pytest.mark.slow(60)
def test_a_dag_of_views_equals_its_recompute_from_the_sources_after_every_batch(lake, tmp_path):
    plans = dag_plans(lake.sources, star_origins=STAR_ORIGINS)
    assert plans["star_origins__rows"].key_names == ("username", "repo_name", "repo_owner") and plans["star_origins"].upstream == ("star_origins__rows",)
    staging, landing = tmp_path / "staging", tmp_path / "landing"
    generate_files(WorkloadConfig(users=40, seed=11, rounds=3), lake.sources, staging)
    maintained: dict[str, int] = {}
    reasons: dict[str, set[str]] = {}
    for number in range(3):
        move_round(staging, landing, number)
        result = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True, views=list(plans.values()))
        for batch in result.batches:
            for name, step in batch.views.items():
                maintained[name] = maintained.get(name, 0) + (step.upserts + step.deletes)
                reasons.setdefault(name, set()).add(step.reason or "")
        assert_dag_fresh(lake, plans)
    assert all(maintained.get(name) for name in ("pr_histogram", "pr_total", "user_card", "star_origins")), maintained  # reached by batches, not only built
    for name in ("pr_histogram", "pr_total"):  # aggregates over a view follow its changed rows (lakemv.spark.views.viewdelta)
        assert any(r.startswith("aggregates by delta") for r in reasons[name]), reasons
    # a batch in flight has committed one view and not yet its readers: a consistent read shows every
    # table as the last committed batch left it
    rows = lake.spark.table(lake.names.view("pr_histogram")).count()
    lake.spark.sql(f"DELETE FROM {lake.names.view('pr_histogram')} WHERE prs = (SELECT min(prs) FROM {lake.names.view('pr_histogram')})")
    count = "SELECT (SELECT count(*) FROM pr_histogram) AS buckets, (SELECT buckets FROM pr_total) AS total"
    assert run_query(lake.settings, lake.sources, count).to_pylist() == [{"buckets": rows - 1, "total": rows}]
    assert run_query(lake.settings, lake.sources, count, consistent=True).to_pylist() == [{"buckets": rows, "total": rows}]
    text = explain(plans["pr_histogram"], plans=plans)
    assert "level 0: user_prs <- pull_requests" in text and "level 1: pr_histogram <- user_prs  (this view)" in text
    assert "level 2: pr_total <- pr_histogram" in text and "reads the view user_prs" in text



def processor(lake, folder: Path, plans: dict) -> BatchProcessor:
    store, journal = Store(folder / "state.sqlite"), Journal(folder / "journal")
    return BatchProcessor(lake.spark, lake.names, lake.sources, list(plans.values()), journal=journal, store=store, view_workers=1)


def pr(repo: str, index: int, author: str | None, status: str = "open") -> dict:
    return {"title": "t", "repo": repo, "repo_owner": "o", "index": index, "author": author, "status": status, "created_at": "2024-03-01T12:00:00Z"}


@pytest.mark.slow(60)
@pytest.mark.parametrize("point", points(("view:user_prs", "tallies:pr_histogram"), ("feed:pr_histogram", "view:pr_histogram")))
def test_a_unit_that_dies_between_levels_is_replayed_to_the_same_rows(lake, tmp_path, point):
    plans = dag_plans(lake.sources)
    p = processor(lake, tmp_path, plans)
    first = [(dbz("c", 1, user("a@x.io", "ann")), at("users")), (dbz("c", 2, user("b@x.io", "bob", 2)), at("users"))]
    first += [(dbz("c", 3 + i, pr(*args)), at("pull_requests")) for i, args in enumerate([("r", 1, "ann"), ("r", 2, "ann", "merged"), ("r", 3, "bob")])]
    p.process_lines(0, first)
    assert_dag_fresh(lake, plans)
    # bob's PR moves to ann: user_prs changes two rows, the histogram two buckets, the total one row
    moved = [(dbz("u", 10, pr("r", 3, "ann", "merged"), pr("r", 3, "bob")), at("pull_requests"))]

    crashing_at(p, point, 1, moved)
    p = processor(lake, tmp_path, plans)
    again = p.process(BatchRef("local", 1), moved)
    assert again.replayed, again
    assert_dag_fresh(lake, plans)
    assert lake.spark.table(lake.names.view("pr_total")).first()["authors"] == 1  # bob has no PR left
    p.close()


@pytest.mark.slow(60)
@pytest.mark.usefixtures("prefect_server")
def test_a_backfill_of_a_view_rebuilds_the_views_that_read_it(lake, tmp_path, monkeypatch):
    from lakemv.flows.backfill import backfill
    from lakemv.flows.ingest import ingest
    from lakemv.flows.verify import verify

    folder = tmp_path / "views"
    folder.mkdir()
    for name, text in DAG.items():
        (folder / f"{name}.sql").write_text(text + "\n")
    monkeypatch.setenv("LAKEMV_VIEWS_DIR", str(folder))
    staging, landing = tmp_path / "staging", tmp_path / "landing"
    generate_files(WorkloadConfig(users=30, seed=5, rounds=3), lake.sources, staging)
    for number in range(2):
        move_round(staging, landing, number)
    ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))
    # damage the histogram and its reader: a backfill of user_prs rebuilds both after it
    for view in ("pr_histogram", "pr_total"):
        lake.spark.sql(f"DELETE FROM {lake.names.view(view)}")
    planned = backfill(view="user_prs", dry_run=True, warehouse=str(lake.settings.warehouse))
    assert planned["downstream"] == ["pr_histogram", "user_card", "pr_total"], planned
    done = backfill(view="user_prs", warehouse=str(lake.settings.warehouse))
    assert (done["upserts"], done["deletes"]) == (0, 0), done
    assert set(done["downstream"]) == {"pr_histogram", "user_card", "pr_total"}
    assert done["downstream"]["pr_histogram"]["upserts"] > 0 and done["downstream"]["pr_total"]["upserts"] == 1
    ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))  # no new files: views no view reads resume
    assert read_state(lake.spark, lake.names.view("user_card")).state == "active"
    assert read_state(lake.spark, lake.names.view("user_prs")).state == "resume"  # its readers follow its catch-up in a batch
    assert_dag_fresh(lake, dag_plans(lake.sources))
    move_round(staging, landing, 2)
    ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))
    assert {read_state(lake.spark, lake.names.view(v)).state for v in DAG} == {"active"}
    checked = verify(warehouse=str(lake.settings.warehouse))["views"]
    assert set(checked) == set(DAG) and all(v["missing"] == v["extra"] == v["mismatching"] == 0 for v in checked.values()), checked
    assert_dag_fresh(lake, dag_plans(lake.sources))


@pytest.mark.slow(40)
def test_a_view_that_waits_for_its_budget_carries_its_readers_with_it(lake, tmp_path):
    """Freshness composes: the readers of a view that waits for its budget follow it when it is
    maintained, between batches too."""
    views = {**DAG, "user_prs": "-- @freshness: 1 hour\n" + DAG["user_prs"]}
    plans = plan_views({name: parse_view(text, name) for name, text in views.items()}, lake.sources)
    p = processor(lake, tmp_path, plans)
    p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann")), at("users")), (dbz("c", 2, pr("r", 1, "ann")), at("pull_requests"))])
    waited = p.process_lines(1, [(dbz("c", 3, pr("r", 2, "ann", "merged")), at("pull_requests"))])
    assert waited.views["user_prs"].deferred and not any(r.upserts or r.deletes for r in waited.views.values()), waited.views
    assert lake.spark.table(lake.names.view("user_card")).first()["prs"] == 0  # not yet: user_prs waits (since the first batch)
    p.indexed["user_prs"].budget = 1  # due now
    flushed = p.flush("local")
    assert flushed is not None and {"user_prs", "pr_histogram", "pr_total", "user_card"} <= set(flushed.views), flushed
    assert_dag_fresh(lake, plans)
    assert lake.spark.table(lake.names.view("user_card")).first()["prs"] == 2
    p.close()
