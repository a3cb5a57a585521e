"""The Prefect flows, run for real (prefect_test_harness) on a temporary warehouse: ingest, verify,
compact and backfill, each recorded as a flow run and returning its counts."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowFilter, FlowFilterName
from prefect.client.schemas.sorting import FlowRunSort

from lakemv.catalog.viewstate import ViewState
from lakemv.core.errors import CommitConflict
from lakemv.duck.query import run_query
from lakemv.duck.verify import ViewMismatch
from lakemv.flows.backfill import backfill
from lakemv.flows.compact import compact
from lakemv.flows.ingest import ingest
from lakemv.flows.retries import RETRIES, transient
from lakemv.flows.verify import verify
from lakemv.spark.views.backfill import Backfill
from lakemv.spark.views.state import read_state, write_state
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.e2e.cli import move_round
from tests.prefectapi import latest

pytestmark = pytest.mark.usefixtures("prefect_server")  # flows record their runs in the session's API


def _final_states(flow_name: str) -> list[str]:
    """Final state types of the recorded runs of a flow."""

    async def read() -> list[str]:
        async with get_client() as client:
            runs = await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])), sort=FlowRunSort.START_TIME_DESC, limit=50
            )
            return [r.state.type.value for r in runs if r.state is not None]

    return asyncio.run(read())


def _ingested(lake, tmp_path: Path, rounds: int = 3, users: int = 80, seed: int = 7, runs: int = 1) -> Path:
    """Generate `rounds` rounds and ingest them in `runs` ingest runs (each table gets a commit per run)."""
    staging, landing = tmp_path / "staging", tmp_path / "landing"
    generate_files(WorkloadConfig(users=users, seed=seed, rounds=rounds), lake.sources, staging)
    for run in range(runs):
        for number in range(run * rounds // runs, (run + 1) * rounds // runs):
            move_round(staging, landing, number)
        result = ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))
        assert result["events"] > 0 and result["batches"] >= 1, result
    return landing


def _rows(lake, table: str, key: str) -> list[dict]:
    return run_query(lake.settings, lake.sources, f'SELECT * FROM "{table}" ORDER BY {key}').to_pylist()


def test_ingest_then_verify_pass_and_are_recorded_as_flow_runs(lake, tmp_path):
    _ingested(lake, tmp_path)
    result = verify(warehouse=str(lake.settings.warehouse))
    assert set(result["views"]) == {"user_profile", "repo_summary"}
    for name, counts in result["views"].items():
        assert counts["matching"] == counts["expected_rows"] == counts["table_rows"] > 0, (name, counts)
        assert counts["mismatching"] == counts["missing"] == counts["extra"] == counts["duplicate_keys"] == 0
    assert "COMPLETED" in _final_states("ingest") and "COMPLETED" in _final_states("verify")
    # each run says what it did as artifacts, keyed by the flow (no deployment: cli-<flow>) and by view
    summary, made_by = latest("cli-ingest")
    assert made_by == "ingest" and "# Ingest: " in summary and "[user_profile](/artifacts/key/ingest-user-profile)" in summary
    views = {row["view"]: row for row in latest("cli-ingest-views")[0]}
    assert views["user_profile"]["keys reached"] > 0 and views["user_profile"]["rows changed"] > 0, views
    assert views["user_profile"]["how (batches)"].endswith("incremental") and views["user_profile"]["lag seconds"] is not None
    sources = {row["source"]: row for row in latest("cli-ingest-sources")[0]}
    assert sources["users"]["changes applied"] > 0 and sources["users"]["dead letters"] == 0, sources
    assert "## Batches of this run" in latest("ingest-user-profile")[0]
    checked = {row["view"]: row for row in latest("cli-verify-views")[0]}
    assert checked["user_profile"]["outcome"] == "✅ equal" and checked["user_profile"]["matched"] == result["views"]["user_profile"]["matching"]


def test_verify_catches_a_corrupted_row_and_a_missing_one(lake, tmp_path):
    _ingested(lake, tmp_path)
    table = lake.names.view("user_profile")
    emails = [r["email"] for r in lake.spark.sql(f"SELECT email FROM {table} ORDER BY email LIMIT 2").collect()]
    lake.spark.sql(f"UPDATE {table} SET payment_verified = NOT payment_verified WHERE email = '{emails[0]}'")
    lake.spark.sql(f"DELETE FROM {table} WHERE email = '{emails[1]}'")

    with pytest.raises(ViewMismatch) as caught:
        verify(view="user_profile", warehouse=str(lake.settings.warehouse))
    found = caught.value.result
    assert (found.mismatching, found.missing, found.extra, found.duplicate_keys) == (1, 1, 0, 0), found.summary()
    assert found.matching == found.expected_rows - 2
    samples = {(d.kind, d.key["email"]): d.columns for d in found.samples}
    assert samples == {("mismatch", emails[0]): ("payment_verified",), ("missing", emails[1]): ()}, samples
    assert "FAILED" in _final_states("verify")
    row, made_by = latest("verify-user-profile")  # the failed run still says what it found
    assert made_by == "verify" and {k: row[0][k] for k in ("outcome", "mismatched", "missing", "extra")} == {
        "outcome": "❌ differs", "mismatched": 1, "missing": 1, "extra": 0
    }  # fmt: skip
    assert "**1 differ**: user_profile" in latest("cli-verify")[0]
    # The other view is untouched and still passes.
    assert verify(view="repo_summary", warehouse=str(lake.settings.warehouse))["views"]["repo_summary"]["mismatching"] == 0


def test_compact_keeps_every_query_result_and_reduces_the_file_count(lake, tmp_path):
    _ingested(lake, tmp_path, rounds=5, runs=5)  # small files, and replaced rows in delete files
    checked = {**{t: ", ".join(lake.sources[t].primary_key) for t in lake.sources}, "user_profile": "email", "repo_summary": "owner, name"}
    before = {t: _rows(lake, t, key) for t, key in checked.items()}
    tombstones = lake.spark.sql(f"SELECT count(*) FROM {lake.names.mirror('users')} WHERE _lmv_deleted").first()[0]
    assert tombstones > 0
    # A stray file in a table's data folder, older than the safe age: an orphan to remove.
    data_dir = Path(lake.settings.warehouse) / "mirror" / "users" / "data"
    stray = next(data_dir.rglob("*.parquet")).with_name("stray-orphan.parquet")
    stray.write_bytes(b"not referenced by any snapshot")
    old = time.time() - 4 * 24 * 3600
    os.utime(stray, (old, old))

    result = compact(tombstone_retention_hours=0.0, warehouse=str(lake.settings.warehouse))

    assert result["delete_files_before"] > 0, result
    files_before = result["data_files_before"] + result["delete_files_before"]
    files_after = result["data_files_after"] + result["delete_files_after"]
    assert files_after < files_before and result["delete_files_after"] == 0, result
    assert result["tombstones_purged"] >= tombstones and result["orphan_files_removed"] >= 1, result
    assert not stray.exists()
    layouts = {t["table"]: t["sort_order"] for t in result["tables"]}
    assert layouts["mirror.stars"].startswith("z-order(") and "username" in layouts["mirror.stars"], layouts
    assert layouts["mirror.payment_info"] == "sorted by user_id" and layouts["views.user_profile"] == "sorted by email"
    assert lake.spark.sql(f"SELECT count(*) FROM {lake.names.mirror('users')} WHERE _lmv_deleted").first()[0] == 0
    for table, key in checked.items():
        assert _rows(lake, table, key) == before[table], table
    assert verify(warehouse=str(lake.settings.warehouse))["views"]["user_profile"]["mismatching"] == 0
    compacted = {row["table"]: row for row in latest("cli-compact-tables")[0]}
    users = next(t for t in result["tables"] if t["table"] == "mirror.users")
    assert users["snapshots_before"] >= 5 and users["snapshots_after"] >= 1, users  # (five ingest runs; expiry keeps days)
    assert compacted["mirror.users"]["snapshots"] == f"{users['snapshots_before']} → {users['snapshots_after']}"
    assert compacted["mirror.users"]["data files"] == f"{users['data_files_before']} → {users['data_files_after']}"


def test_backfill_repairs_a_view_through_a_branch_and_maintenance_resumes(lake, tmp_path, monkeypatch):
    """Every view's batch commits to the one feeds table, so while a view is backfilled its branch of the
    feeds may fall behind main: here a batch commits right after the branch is made. The view's main is
    fast-forwarded; the branch's own feeds snapshots are cherry-picked onto main, none of main's."""
    landing = _ingested(lake, tmp_path)
    table, feed, feeds = lake.names.view("user_profile"), lake.names.view_changes("user_profile"), lake.names.feeds
    victim = lake.spark.sql(f"SELECT email FROM {table} ORDER BY email LIMIT 1").first()[0]
    lake.spark.sql(f"DELETE FROM {table} WHERE email = '{victim}'")
    snapshot = lake.spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0]

    planned = backfill(view="user_profile", dry_run=True, warehouse=str(lake.settings.warehouse))
    assert planned["estimated_rows"] == planned["table_rows"] + 1, planned
    assert lake.spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0] == snapshot

    feed_rows, all_feed_rows = lake.spark.table(feed).count(), lake.spark.table(feeds).count()
    ddl = Backfill._ddl

    def ddl_then_a_racing_batch(self, sql: str) -> None:  # noqa: ANN001
        ddl(self, sql)
        if sql.startswith(f"ALTER TABLE {feeds} CREATE OR REPLACE BRANCH"):
            lake.spark.sql(f"INSERT INTO {feeds} SELECT * FROM {feeds} WHERE view <> 'user_profile' LIMIT 1")

    monkeypatch.setattr(Backfill, "_ddl", ddl_then_a_racing_batch)
    done = backfill(view="user_profile", warehouse=str(lake.settings.warehouse))
    assert (done["upserts"], done["deletes"], done["attempts"]) == (1, 0, 1), done
    assert "matches its recompute" in done["audit"]
    assert verify(view="user_profile", warehouse=str(lake.settings.warehouse))["views"]["user_profile"]["missing"] == 0
    assert lake.spark.table(feed).count() == feed_rows + 1  # the repair is in the change feed
    assert lake.spark.table(feeds).count() == all_feed_rows + 2  # and the racing batch's row
    operations = [r[0] for r in lake.spark.sql(f"SELECT operation FROM {feeds}.snapshots ORDER BY committed_at").collect()]
    assert operations[-2:] == ["append", "append"], operations
    for name in (table, feeds):
        refs = {r["name"] for r in lake.spark.sql(f"SELECT name FROM {name}.refs").collect()}
        assert refs == {"main"}, refs  # the branch is gone once published
    assert read_state(lake.spark, table).state == "resume"

    ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))  # no new files
    assert read_state(lake.spark, table).state == "active"
    assert "COMPLETED" in _final_states("backfill")
    trail, made_by = latest("backfill-user-profile")
    assert made_by == "backfill" and trail.startswith("# Backfill of user_profile: published"), trail
    steps = [line.split("|")[1].strip() for line in trail.splitlines() if line.startswith("| ") and not line.startswith("| step")]
    assert steps == ["pause", "write", "catch up", "audit", "publish", "resume"], trail


def test_resuming_from_expired_snapshots_recomputes_every_key(lake, tmp_path):
    """A view paused longer than snapshot retention cannot be caught up snapshot to snapshot: it is rebuilt."""
    landing = _ingested(lake, tmp_path)
    table = lake.names.view("user_profile")
    victim = lake.spark.sql(f"SELECT email FROM {table} ORDER BY email LIMIT 1").first()[0]
    lake.spark.sql(f"DELETE FROM {table} WHERE email = '{victim}'")
    gone = {t: 1 for t in ("users", "stars", "repos", "pull_requests", "payment_info")}  # no such snapshots
    write_state(lake.spark, table, ViewState("resume", gone, by="backfill long-ago"))

    ingest(landing=str(landing), once=True, warehouse=str(lake.settings.warehouse))

    assert read_state(lake.spark, table).state == "active"
    counts = verify(view="user_profile", warehouse=str(lake.settings.warehouse))["views"]["user_profile"]
    assert counts["missing"] == counts["mismatching"] == 0 and counts["matching"] == counts["expected_rows"], counts


@flow(name="maintain")
def _renamed() -> None:
    """Stands for the flow an earlier lakemv served as maintain/lakemv-maintain."""


def test_serve_deletes_the_deployment_an_earlier_version_served_under_its_old_name():
    from lakemv.flows.deployments import Schedules, deployments, retire

    assert [d.name for d in deployments(Path("/landing"), "/wh", Schedules())] == [
        "lakemv-ingest", "lakemv-compact", "lakemv-verify", "lakemv-backfill"]  # fmt: skip
    _renamed.to_deployment("lakemv-maintain", interval=60).apply()
    assert retire() == ["maintain/lakemv-maintain"]
    assert retire() == []  # gone; nothing else touched


_TRIES: list[str] = []  # each run of the task (a flow's parameters are copies: counted here)


@task(retries=RETRIES, retry_delay_seconds=0, retry_condition_fn=transient)
def _flaky(error: Exception) -> int:
    _TRIES.append(type(error).__name__)
    if len(_TRIES) == 1:
        raise error
    return len(_TRIES)


@flow(name="flaky")
def _runs_flaky(error: Exception) -> int:
    return _flaky(error)


def test_a_task_that_failed_transiently_runs_again_and_one_that_failed_otherwise_does_not():
    _TRIES.clear()
    assert _runs_flaky(CommitConflict("lost the race again")) == 2
    _TRIES.clear()
    with pytest.raises(ValueError, match="a bug"):
        _runs_flaky(ValueError("a bug"))
    assert _TRIES == ["ValueError"]
