"""The local indexed state stays equal to the Iceberg tables it indexes: after batches, after a
compaction that purges tombstones, after a backfill publishes a view, and when it is deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.streams import checkpoint_dir, state_path
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.codec import rows_of
from lakemv.core.state.layout import ViewPart, mirror_parts, route
from lakemv.core.state.store import Store
from lakemv.flows.backfill import backfill
from lakemv.flows.compact import compact
from lakemv.flows.ingest import ingest
from lakemv.flows.verify import verify
from lakemv.spark.batch import sync as sync_module
from lakemv.spark.batch.sync import DIGEST, StoreSync, digest_sql
from lakemv.spark.views import together
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.e2e.cli import move_round

pytestmark = pytest.mark.usefixtures("prefect_server")


def assert_store_equals_tables(lake, path: Path) -> None:
    """Every mirror part holds the mirror's rows (tombstones included), each at the data file and
    position Iceberg reads it from; every view part the digests of the view table's rows, and their places."""
    plans = {n: plan_view(v, lake.sources) for n, v in load_views(LakeSettings().view_dirs).items()}
    parts = mirror_parts(lake.sources, [route(p) for p in plans.values()], located=True)  # ingest writes directly
    store = Store(path)
    try:
        for table, part in parts.items():
            assert store.attach_mirror(part), f"mirror part {table} is not in step"
            columns = ", ".join(f"`{c}`" for c in part.column_names)
            frame = lake.spark.sql(
                f"SELECT {columns}, _lmv_position, _lmv_deleted, _file, _pos FROM {lake.names.mirror(table)}"
            ).toArrow()
            positions, deleted = frame.column("_lmv_position").to_pylist(), frame.column("_lmv_deleted").to_pylist()
            places = list(zip(frame.column("_file").to_pylist(), frame.column("_pos").to_pylist(), strict=True))
            expected = sorted(zip(rows_of(frame, part.column_names), positions, deleted, places, strict=True), key=repr)
            keys = [tuple(row[part.column_names.index(k)] for k in part.primary_key) for row, *_ in expected]
            stored = store.stored(table, keys)
            got = sorted(((s.row, s.position, s.deleted, s.location) for s in stored.values()), key=repr)
            assert got == expected, f"mirror {table}: the store differs from Iceberg"
            assert store.count(table) == len(expected), f"mirror {table}: the store has rows Iceberg does not"
        for name, plan in plans.items():
            assert store.attach_view(ViewPart(view=name, key=plan.key_names, definition=plan.definition.fingerprint, located=True))
            frame = lake.spark.sql(
                f"SELECT v.*, {digest_sql(list(plan.columns), 'v')} AS {DIGEST}, _file, _pos FROM {lake.names.view(name)} AS v"
            ).toArrow()
            keys = rows_of(frame, plan.key_names)
            assert store.digests(name, keys) == dict(zip(keys, frame.column(DIGEST).to_pylist(), strict=True)), name
            places = zip(frame.column("_file").to_pylist(), frame.column("_pos").to_pylist(), strict=True)
            assert store.view_locations(name, keys) == dict(zip(keys, places, strict=True)), f"view {name}: rows misplaced"
            assert store.view_count(name) == frame.num_rows, f"view {name}: the store has keys the table does not"
    finally:
        store.close()


@pytest.mark.slow(150)
def test_the_store_follows_compaction_backfill_and_its_own_loss(lake, tmp_path, monkeypatch):
    staging, landing = tmp_path / "staging", tmp_path / "landing"
    warehouse = str(lake.settings.warehouse)
    generate_files(WorkloadConfig(users=60, seed=11, rounds=6), lake.sources, staging)
    path = state_path(lake.settings, checkpoint_dir(lake.settings, landing))
    monkeypatch.setattr(together, "ROUND_ROWS", 40)  # each batch recomputes its views in rounds (a view alone when it gathered more)
    reloads: list[str] = []  # the parts read whole from their tables (the real reload runs too)
    reload = StoreSync.reload
    monkeypatch.setattr(StoreSync, "reload", lambda sync, name: reloads.append(name) or reload(sync, name))

    def ingest_round(number: int) -> None:
        move_round(staging, landing, number)
        ingest(landing=str(landing), once=True, warehouse=warehouse)
        assert_store_equals_tables(lake, path)
        for view, counts in verify(warehouse=warehouse)["views"].items():
            assert counts["matching"] == counts["expected_rows"] == counts["table_rows"], (number, view, counts)

    ingest_round(0)
    ingest_round(1)
    assert path.exists()
    # compaction rewrites the files (no tombstone old enough to purge): the store follows the rows
    # into the new files without reloading, and the next batch deletes them at their new places
    compacted = compact(warehouse=warehouse)
    assert compacted["tombstones_purged"] == 0 and compacted["data_files_after"] < compacted["data_files_before"], compacted
    reloads.clear()
    ingest_round(2)
    assert reloads == []
    # compaction purges the tombstones the store also holds: the next batch sees a foreign snapshot
    purged = compact(tombstone_retention_hours=0.0, warehouse=warehouse)["tombstones_purged"]
    assert purged > 0
    ingest_round(3)
    # a view repaired by a backfill: published on the view's main branch from outside the stream
    table = lake.names.view("user_profile")
    victim = lake.spark.sql(f"SELECT email FROM {table} ORDER BY email LIMIT 1").first()[0]
    lake.spark.sql(f"DELETE FROM {table} WHERE email = '{victim}'")
    assert backfill(view="user_profile", warehouse=warehouse)["upserts"] == 1
    ingest_round(4)
    # the store is lost: rebuilt from the tables (each table in slices, as a large one is: by the
    # values a slice holds, and by its bytes), same results
    monkeypatch.setattr(sync_module, "RELOAD_SAMPLE", 20)
    monkeypatch.setattr(sync_module, "RELOAD_CELLS", 150)
    monkeypatch.setattr(sync_module, "RELOAD_BYTES", 4096)
    sliced: list[tuple[int, int, int]] = []  # (slices, slices by values alone, slices by bytes alone)
    sizes = sync_module.reload_slices

    def slices(rows: int, width: int, row_bytes: float) -> int:
        sliced.append((sizes(rows, width, row_bytes), sizes(rows, width, 0.0), sizes(rows, 0, row_bytes)))
        return sliced[-1][0]

    monkeypatch.setattr(sync_module, "reload_slices", slices)
    shutil.rmtree(path.parent)
    ingest_round(5)
    assert path.exists()
    # both measures split a real reload (which one rules a table depends on the rows its sample read;
    # the rulings themselves: tests/unit/test_state.py)
    assert any(by_values > 1 for _, by_values, _ in sliced) and any(by_bytes > 1 for _, _, by_bytes in sliced), sliced
    assert all(total == max(by_values, by_bytes) for total, by_values, by_bytes in sliced), sliced
