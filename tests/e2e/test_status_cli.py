"""`lakemv status` end to end: after a real ingest, its numbers agree with queries and an independent read.

Expectations come from `lakemv query` (live rows, view rows), from pyiceberg scanning the mirrors
(tombstones, last position: a different reader than status's DuckDB), and from what ingest printed
(batch ids, dead letters).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import DELETED, MIRROR_NAMESPACE, POSITION, VIEW_NAMESPACE
from lakemv.catalog.viewstate import STATE, ViewState
from tests.e2e.cli import lakemv

VIEWS = ("user_profile", "repo_summary")


def status_json(warehouse: Path) -> dict[str, list[dict]]:
    done = lakemv("--warehouse", str(warehouse), "status", "--format", "json")
    assert "Spark" not in done.stdout + done.stderr, "status must not start Spark"
    by_kind: dict[str, list[dict]] = {"source": [], "view": [], "totals": []}
    for line in done.stdout.splitlines():
        if line.strip():
            row = json.loads(line)
            by_kind[row["kind"]].append(row)
    return by_kind


def counts(warehouse: Path, tables: list[str]) -> dict[str, int]:
    """Row counts through `lakemv query` (one process for all tables)."""
    sql = "select " + ", ".join(f'(select count(*) from "{t}") as "{t}"' for t in tables)
    return json.loads(lakemv("--warehouse", str(warehouse), "query", sql, "--format", "json").stdout)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_status_on_an_empty_warehouse(tmp_path: Path):
    warehouse = tmp_path / "empty"
    status = status_json(warehouse)
    sources = load_sources(LakeSettings().sources_dirs)
    assert [s["table"] for s in status["source"]] == list(sources)
    for s in status["source"]:
        assert (s["last_position"], s["live_rows"], s["tombstones"], s["dead_letters"], s["newest_source_ts"]) == (None, 0, 0, 0, None)
    assert {v["view"] for v in status["view"]} >= set(VIEWS)
    for v in status["view"]:
        assert (v["rows"], v["last_batch_id"], v["last_refresh"], v["lag_seconds"]) == (0, None, None, None)
    [totals] = status["totals"]
    assert (totals["live_rows"], totals["dead_letters"], totals["dead_letters_unattributed"]) == (0, 0, 0)
    human = lakemv("--warehouse", str(warehouse), "status")
    assert "0 live rows" in human.stdout and "NULL" in human.stdout


@pytest.mark.slow(100)
def test_status_after_an_ingest(tmp_path: Path):
    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    lakemv("generate", "--out", str(landing), "--users", "60", "--rounds", "2")
    (landing / "users" / "zz-bad.json").write_text('{"payload": not json\n')
    (landing / "nope").mkdir()
    (landing / "nope" / "a.json").write_text('{"payload": {"op": "c"}}\n')
    files = len(list(landing.glob("*/*.json")))
    ingest = lakemv(
        "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once",
        "--max-files-per-trigger", str(files // 2 + 1),  # two batches
    ).stdout
    batches = [int(b) for b in re.findall(r"^batch (\d+)", ingest, flags=re.MULTILINE)]
    assert len(batches) >= 2, ingest
    assert "2 dead letters" in ingest

    before = datetime.now(UTC)
    status = status_json(warehouse)
    sources = {s["table"]: s for s in status["source"]}
    views = {v["view"]: v for v in status["view"]}
    assert set(views) >= set(VIEWS)

    queried = counts(warehouse, [*sources, *VIEWS])
    catalog = pyiceberg_catalog(LakeSettings(warehouse=warehouse))
    tombstones_seen = 0
    for name, s in sources.items():
        assert s["live_rows"] == queried[name], name
        mirror = catalog.load_table((MIRROR_NAMESPACE, name)).scan(selected_fields=(POSITION, DELETED)).to_arrow()
        tombstones = mirror.filter(pc.field(DELETED)).num_rows
        assert s["tombstones"] == tombstones, name
        assert s["live_rows"] + tombstones == mirror.num_rows
        assert s["last_position"] == pc.max(mirror.column(POSITION)).as_py(), name
        assert s["newest_source_ts"] is not None
        assert s["dead_letters"] == (1 if name == "users" else 0), name
        tombstones_seen += tombstones
    assert tombstones_seen > 0, "the workload deletes rows: tombstones must be exercised"

    [totals] = status["totals"]
    assert totals["dead_letters_unattributed"] == 1
    assert totals["dead_letters"] == 2
    assert totals["live_rows"] == sum(s["live_rows"] for s in sources.values())

    listed = lakemv("--warehouse", str(warehouse), "views", "--format", "json").stdout.splitlines()
    reads = {r["view"]: r["reads"].split(", ") for r in map(json.loads, listed)}
    for name in VIEWS:
        v = views[name]
        assert v["rows"] == queried[name] > 0, name
        assert v["last_batch_id"] == batches[-1], name
        assert v["last_refresh"] is not None
        assert instant(v["last_refresh"]) <= before
        assert isinstance(v["lag_seconds"], (int, float)) and v["lag_seconds"] >= 0, v
        # positions and source times rise together in the workload: the ledger's newest change of the
        # tables a view reads is the newest row in those mirrors
        newest = max(instant(sources[t]["newest_source_ts"]) for t in reads[name])
        assert instant(v["newest_change_ts"]) == newest, name

    human = lakemv("--warehouse", str(warehouse), "status", env={"COLUMNS": "200"}).stdout
    assert "user_profile" in human and "1 from folders that are not a declared source" in human
    csv = lakemv("--warehouse", str(warehouse), "status", "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("kind,") and len(csv) == 1 + len(sources) + len(views) + 1

    # A backfill killed after pausing user_profile: status says so, in JSON and to people.
    profile = catalog.load_table((VIEW_NAMESPACE, "user_profile"))
    with profile.transaction() as tx:
        tx.set_properties({STATE: ViewState("paused", {}, by="bf-killed", at="2024-05-01T11:00:00+00:00").to_json()})
    paused = {v["view"]: v for v in status_json(warehouse)["view"]}
    assert (paused["user_profile"]["maintenance"], paused["user_profile"]["backfill"]) == ("paused", "bf-killed")
    assert instant(paused["user_profile"]["maintenance_since"]) == datetime(2024, 5, 1, 11, tzinfo=UTC)
    assert {paused[v]["maintenance"] for v in VIEWS if v != "user_profile"} == {"active"}
    human = lakemv("--warehouse", str(warehouse), "status", env={"COLUMNS": "400"}).stdout
    assert "user_profile is paused by backfill bf-killed since 2024-05-01 11:00:00Z" in " ".join(human.split())
    assert "lakemv backfill user_profile" in human
