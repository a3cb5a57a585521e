"""Every view's change feed in one table: a batch commits the feed rows of all the views it changed
once, each view's `__changes` reads as before (Spark and DuckDB), a reshaped view's old rows leave
its feed, and a sink's history counts only the commits that hold its view's rows."""

from __future__ import annotations

import json

from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.sinks import feed_history, feed_uuid
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.sql.feedsql import VIEWS_PROPERTY, views_of
from lakemv.core.state.store import Store
from lakemv.duck.query import run_query
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.workload.github import GitHubWorkload, WorkloadConfig
from lakemv.workload.shapes import shape_view
from tests.cdc import dbz

SHAPES = ("repo_fans", "latest_prs")


def _processor(lake, tmp_path, plans) -> BatchProcessor:
    return BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=Store(tmp_path / "state.sqlite"), direct=DirectWriter(lake.spark, lake.settings))


def _feed_snapshots(lake) -> list[dict]:
    return [r.asDict() for r in lake.spark.sql(f"SELECT snapshot_id, operation, summary FROM {lake.names.feeds}.snapshots ORDER BY committed_at").collect()]


def test_one_commit_holds_every_views_feed_rows_and_each_feed_reads_as_before(lake, tmp_path):
    plans = [plan_view(shape_view(n), lake.sources) for n in SHAPES]
    plans.append(plan_view(parse_view("-- @key: username\nSELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username", "fans"), lake.sources))
    processor = _processor(lake, tmp_path, plans)
    workload = GitHubWorkload(WorkloadConfig(users=60, seed=5, rounds=3), lake.sources)
    for batch_id, round_events in enumerate(workload.rounds()):
        before = len(_feed_snapshots(lake))
        lines = [(json.dumps(e), f"file:///l/{t}/r{batch_id}.json") for t, es in round_events.items() for e in es]
        result = processor.process_lines(batch_id, lines)
        changed = {name for name, view in result.views.items() if view.upserts or view.deletes}
        added = _feed_snapshots(lake)[before:]
        assert len(added) == (1 if changed else 0), (batch_id, changed, added)  # one commit, whatever the views
        if added:
            assert views_of(added[0]["summary"]) == changed
    for plan in plans:
        feed = lake.names.view_changes(plan.name)
        spark_rows = lake.spark.table(feed)
        assert spark_rows.columns == [*plan.key_names, "op", "row", "batch_id", "source_position", "changed_at"]
        duck_rows = run_query(lake.settings, lake.sources, f'SELECT * EXCLUDE (changed_at) FROM "{plan.name}__changes"')
        assert duck_rows.num_rows == spark_rows.count() > 0, plan.name
        # the feed's latest entry per key is the view's row, and its keys are the view's (a delete: gone)
        latest: dict[tuple, dict | None] = {}
        for row in sorted(spark_rows.collect(), key=lambda r: (r["batch_id"], r["changed_at"])):
            latest[tuple(row[k] for k in plan.key_names)] = row["row"].asDict(recursive=True) if row["op"] == "upsert" else None
        view_rows = {tuple(r[k] for k in plan.key_names): r.asDict(recursive=True) for r in lake.spark.table(lake.names.view(plan.name)).collect()}
        assert {k: v for k, v in latest.items() if v is not None} == view_rows, plan.name


def test_a_reshaped_views_old_rows_leave_its_feed_and_its_sinks_history_counts_its_own_commits(lake, tmp_path):
    first = plan_view(parse_view("-- @key: username\nSELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username", "fans"), lake.sources)
    other = plan_view(shape_view("repo_fans"), lake.sources)
    processor = _processor(lake, tmp_path, [first, other])
    workload = GitHubWorkload(WorkloadConfig(users=40, seed=9, rounds=2), lake.sources)
    for batch_id, round_events in enumerate(workload.rounds()):
        processor.process_lines(batch_id, [(json.dumps(e), f"file:///l/{t}/r{batch_id}.json") for t, es in round_events.items() for e in es])
    fan = next(u for u in workload.live_rows("users") if u["username"] == workload.live_rows("stars")[0]["username"])
    edit = dbz("u", 10**12, {**fan, "email": "renamed@x.io"}, before=fan)  # reaches repo_fans only (fans reads no email)
    assert processor.process_lines(9, [(edit, "file:///l/users/edit.json")]).views["repo_fans"].upserts
    feed = lake.names.view_changes("fans")
    old_rows, old_uuid = lake.spark.table(feed).count(), feed_uuid(lake.settings, "fans")
    assert old_rows > 0
    history = feed_history(lake.settings, "fans")
    summaries = {s["snapshot_id"]: s["summary"] for s in _feed_snapshots(lake)}
    assert [s.snapshot_id for s in history if s.append] == [i for i, summary in summaries.items() if "fans" in views_of(summary)]
    assert any(not s.append for s in history)  # repo_fans' own commits: not the fans sinks' business

    reshaped = plan_view(
        parse_view("-- @key: username\nSELECT s.username, count(*) AS stars, max(s.repo_name) AS last FROM stars s GROUP BY s.username", "fans"),
        lake.sources,
    )
    again = _processor(lake, tmp_path / "again", [reshaped, other])
    assert [b.view for b in again.built] == ["fans"]
    rows = lake.spark.table(feed).collect()
    assert rows and {r["op"] for r in rows} == {"upsert"}  # the rebuild's rows only: the old shape's are gone
    assert len(rows) == lake.spark.table(lake.names.view("fans")).count() and "last" in rows[0]["row"].asDict()
    duck = run_query(lake.settings, lake.sources, 'SELECT op, "row".last AS last FROM "fans__changes"')  # DuckDB reads by field id too
    assert duck.num_rows == len(rows) and set(duck.column("op").to_pylist()) == {"upsert"}
    assert feed_uuid(lake.settings, "fans") != old_uuid  # a new feed for the sinks: they publish the view whole once
    assert lake.spark.table(lake.names.view_changes("repo_fans")).count() > 0  # the other view's feed is untouched
    assert VIEWS_PROPERTY in _feed_snapshots(lake)[-1]["summary"]


def _schemas(lake) -> int:
    """How many schemas the feeds table's metadata keeps."""
    return len(pyiceberg_catalog(lake.settings).load_table(lake.names.feeds.split(".", 1)[1]).metadata.schemas)


def test_views_prepared_together_get_their_feed_columns_in_one_schema_change(lake, tmp_path):
    """The feeds table keeps every schema it had: a hundred views' columns one at a time made its
    metadata 2.8 MB, read at every commit and by every sink and DuckDB connection."""
    _processor(lake, tmp_path, [plan_view(shape_view("latest_prs"), lake.sources)])  # the table exists
    before = _schemas(lake)
    plans = [plan_view(shape_view(f"together_{n}", copy_of=shape), lake.sources) for n, shape in enumerate(("repo_fans", "latest_prs", "repo_fans"))]
    processor = _processor(lake, tmp_path / "together", plans)
    assert sorted(b.view for b in processor.built) == [p.name for p in plans]
    assert _schemas(lake) == before + 1
    for plan in plans:
        assert lake.spark.table(lake.names.view_changes(plan.name)).count() == 0  # read paths in place


def test_a_lake_from_before_the_shared_feeds_loses_its_per_view_feed_tables_to_read_paths(lake, tmp_path):
    """A lakemv before the shared table kept a table `<view>__changes` per view: the first ingest
    drops it (Iceberg refuses a view of the same name) and the view's feed reads from the shared table."""
    plan = plan_view(parse_view("-- @key: username\nSELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username", "old_fans"), lake.sources)
    feed = lake.names.view_changes(plan.name)
    lake.spark.sql(f"CREATE TABLE {feed} (username STRING, op STRING, batch_id BIGINT) USING iceberg")
    lake.spark.sql(f"INSERT INTO {feed} VALUES ('ann', 'upsert', 1)")
    processor = _processor(lake, tmp_path, [plan])
    workload = GitHubWorkload(WorkloadConfig(users=20, seed=3, rounds=1), lake.sources)
    for batch_id, round_events in enumerate(workload.rounds()):
        processor.process_lines(batch_id, [(json.dumps(e), f"file:///l/{t}/r{batch_id}.json") for t, es in round_events.items() for e in es])
    rows = lake.spark.table(feed)
    assert "row" in rows.columns and rows.count() == lake.spark.table(lake.names.view(plan.name)).count() > 0
