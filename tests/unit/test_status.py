"""`lakemv.duck.status.lake_status` over tables written with pyiceberg (no Spark): counts, ledger, missing tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from lakemv.catalog.declarations import SourceRegistry
from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import DEAD_LETTERS, LEDGER, MIRROR_NAMESPACE, OPS_NAMESPACE, VIEW_NAMESPACE, mirror_arrow_schema
from lakemv.catalog.viewstate import STATE, ViewState
from lakemv.core.batch.records import DEAD_LETTERS as DEAD_LETTER_SCHEMA
from lakemv.core.batch.records import LedgerEntry, TableEntry, ViewEntry
from lakemv.duck.status import lake_status, status_tables, to_seconds, with_kind
from lakemv.flows.console import render

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
SOURCE_READS = {
    "by_user": ("users",),  # maintained by stream a
    "by_repo": ("repos", "users"),  # maintained by stream b, later
    "built_only": ("users",),  # built, never in the ledger
    "not_built": ("users",),  # no table yet
}


def _micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def _create(settings: LakeSettings, namespace: str, name: str, schema: pa.Schema, rows: list[dict] | None):
    catalog = pyiceberg_catalog(settings)
    catalog.create_namespace_if_not_exists(namespace)
    table = catalog.create_table((namespace, name), schema=schema)
    if rows is not None:
        table.append(pa.Table.from_pylist(rows, schema=schema))
    return table


def _ledger_row(stream: str, batch: int, finished: datetime, tables: dict[str, datetime], views: tuple[str, ...]) -> dict:
    entry = LedgerEntry(
        stream_id=stream, batch_id=batch, chunk=0, lines=1, events=1, dead_letters=0, skipped=0,
        tables={t: TableEntry(1, 100 + batch, _micros(ts)) for t, ts in tables.items()},
        views={v: ViewEntry(1, 1, 0, "incremental", "incremental ~0.25s < any whole recompute", 0.5) for v in views},
        conflicts_retried=0, replayed=False,
        started_at_micros=_micros(finished) - 1_000_000, finished_at_micros=_micros(finished),
    )
    return entry.to_arrow()


@pytest.fixture
def settings(tmp_path: Path) -> LakeSettings:
    return LakeSettings(warehouse=tmp_path / "warehouse")


def test_an_empty_lake_is_all_zeros_and_nulls(settings: LakeSettings, sources: SourceRegistry):
    status = lake_status(settings, sources, SOURCE_READS, now=NOW)
    assert [s.table for s in status.sources] == list(sources)
    for s in status.sources:
        assert (s.last_position, s.live_rows, s.tombstones, s.dead_letters, s.newest_source_ts) == (None, 0, 0, 0, None)
    for v in status.views:
        assert (v.rows, v.last_batch_id, v.last_refresh, v.newest_change_ts, v.lag_seconds) == (0, None, None, None, None)
        assert (v.maintenance, v.maintenance_since, v.backfill) == ("active", None, None)
    assert (status.live_rows, status.tombstones, status.dead_letters, status.dead_letters_unattributed) == (0, 0, 0, 0)
    assert status.as_of == NOW


def test_counts_ledger_and_missing_tables(settings: LakeSettings, sources: SourceRegistry):
    users = sources["users"]
    schema = mirror_arrow_schema(users)
    t0 = datetime(2024, 4, 30, tzinfo=UTC)

    def user(email: str, position: int, deleted: bool, ts: datetime) -> dict:
        row = {c: None for c in schema.names}
        row.update(email=email, _lmv_position=position, _lmv_deleted=deleted, _lmv_source_ts=ts)
        return row

    _create(settings, MIRROR_NAMESPACE, "users", schema, [
        user("a@x", 10, False, t0), user("b@x", 30, True, t0 + timedelta(hours=1)), user("c@x", 20, False, t0),
    ])
    _create(settings, MIRROR_NAMESPACE, "repos", mirror_arrow_schema(sources["repos"]), None)  # no snapshot
    letters = [("users", "users/a.json"), ("users", "users/b.json"), ("nope", "nope/x.json"), (None, "x.json")]
    _create(settings, OPS_NAMESPACE, DEAD_LETTERS, DEAD_LETTER_SCHEMA, [
        {"raw": "{", "raw_chars": 1, "source_file": f, "source_table": t, "reason": "bad", "batch_id": 0, "failed_at": t0}
        for t, f in letters
    ])
    ledger = pa.concat_tables([
        _ledger_row("a", 0, t0 + timedelta(hours=2), {"users": t0}, ("by_user",)),
        _ledger_row("a", 1, t0 + timedelta(hours=3), {"users": t0 + timedelta(hours=1)}, ("by_user",)),
        # a second stream: lower batch id, but finished later; its ledger row names only by_repo
        _ledger_row("b", 0, t0 + timedelta(hours=4), {"repos": t0 + timedelta(minutes=30)}, ("by_repo",)),
    ])
    table = _create(settings, OPS_NAMESPACE, LEDGER, ledger.schema, None)
    table.append(ledger)
    view_schema = pa.schema([("email", pa.string())])
    _create(settings, VIEW_NAMESPACE, "by_user", view_schema, [{"email": "a@x"}, {"email": "c@x"}])
    _create(settings, VIEW_NAMESPACE, "by_repo", view_schema, [{"email": "a@x"}])
    built = _create(settings, VIEW_NAMESPACE, "built_only", view_schema, [{"email": "a@x"}])
    paused = ViewState("paused", {"users": 7}, by="bf-1", branch="lakemv_backfill_bf-1", at="2024-05-01T11:00:00+00:00")
    with built.transaction() as tx:  # a backfill paused it (and was perhaps killed)
        tx.set_properties({STATE: paused.to_json()})

    status = lake_status(settings, sources, SOURCE_READS, now=NOW)
    by_source = {s.table: s for s in status.sources}
    assert by_source["users"].last_position == 30
    assert (by_source["users"].live_rows, by_source["users"].tombstones, by_source["users"].dead_letters) == (2, 1, 2)
    assert by_source["users"].newest_source_ts == t0 + timedelta(hours=1)
    for name in ("repos", "stars"):  # created without a snapshot / never created
        assert (by_source[name].last_position, by_source[name].live_rows, by_source[name].dead_letters) == (None, 0, 0)
    assert status.dead_letters_unattributed == 2 and status.dead_letters == 4
    assert (status.live_rows, status.tombstones) == (2, 1)

    views = {v.view: v for v in status.views}
    assert (views["by_user"].rows, views["by_user"].last_batch_id) == (2, 1)
    assert views["by_user"].last_refresh == t0 + timedelta(hours=3)
    assert views["by_user"].newest_change_ts == t0 + timedelta(hours=1)
    assert views["by_user"].lag_seconds == (NOW - (t0 + timedelta(hours=1))).total_seconds()
    assert (views["by_repo"].last_batch_id, views["by_repo"].last_refresh) == (0, t0 + timedelta(hours=4))
    assert views["by_repo"].newest_change_ts == t0 + timedelta(hours=1)  # the newest of repos and users
    snapshot_at = datetime.fromtimestamp(built.current_snapshot().timestamp_ms / 1000, UTC)
    assert (views["built_only"].rows, views["built_only"].last_batch_id) == (1, None)
    assert views["built_only"].last_refresh == snapshot_at
    assert views["built_only"].lag_seconds is not None
    assert (views["not_built"].rows, views["not_built"].last_refresh, views["not_built"].lag_seconds) == (0, None, None)
    assert (views["built_only"].maintenance, views["built_only"].backfill) == ("paused", "bf-1")
    assert views["built_only"].maintenance_since == datetime(2024, 5, 1, 11, tzinfo=UTC)
    assert [views[v].maintenance for v in ("by_user", "by_repo", "not_built")] == ["active"] * 3


def test_display_tables_round_lag_and_carry_kind(settings: LakeSettings, sources: SourceRegistry):
    status = lake_status(settings, sources, {"v": ("users",)}, now=NOW)
    tables = status_tables(status)
    assert set(tables) == {"source", "view", "totals"}
    lines = [json.loads(x) for x in render(with_kind("totals", tables["totals"]), "json").splitlines()]
    assert lines == [{
        "kind": "totals", "as_of": "2024-05-01T12:00:00Z", "sources": len(sources), "live_rows": 0,
        "tombstones": 0, "dead_letters": 0, "dead_letters_unattributed": 0, "views": 1,
    }]
    view = status.views[0].__class__("v", 1, 3, NOW, NOW, 12.345)
    shown = status_tables(status.__class__(NOW, (), (view,), 0))["view"].to_pylist()[0]
    assert shown["lag_seconds"] == 12.3
    fractional = pa.table({"at": pa.array([datetime(2024, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))})
    assert render(to_seconds(fractional), "json") == '{"at": "2024-01-01T00:00:01Z"}'


def test_the_status_command_reports_sinks_without_loading_spark(tmp_path: Path):
    """`lakemv status` with a data product declared reads its lag with delta-rs and pyiceberg, never pyspark."""
    import os
    import subprocess
    import sys

    script = (  # (lakemv leaves through its exit handlers, without the interpreter's teardown)
        "import atexit, sys\n"
        "from lakemv.flows.cli import main\n"
        f"sys.argv = ['lakemv', '--warehouse', {str(tmp_path / 'wh')!r}, 'status']\n"
        "atexit.register(lambda: print('pyspark' in sys.modules, flush=True))\n"
        "main()\n"
    )
    env = {**os.environ, "LAKEMV_SINKS": json.dumps({"user_profile": ["delta"]}), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert "lakemv.lake.user_profile.delta" in done.stdout, done.stdout + done.stderr  # the sink's row, with its error
    assert done.stdout.splitlines()[-1] == "False", done.stdout
