"""Backfill, compaction and queries while ingest commits: nothing lost, every query a consistent snapshot.

`lakemv ingest` runs continuously in its own process on arriving rounds. Meanwhile this process runs
the `backfill` flow on user_profile (write-audit-publish: the view's maintenance pauses, then catches
up) and the `compact` flow, while a thread keeps querying user_profile through DuckDB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.tables import VIEW_NAMESPACE
from lakemv.catalog.viewstate import STATE
from lakemv.duck.query import connect_duckdb, metadata_location, run_query
from lakemv.flows.backfill import backfill
from lakemv.flows.compact import compact
from lakemv.flows.context import lake_settings
from lakemv.flows.verify import verify
from lakemv.spark.views.backfill import Backfill
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.conftest import LAKEMV
from tests.e2e.cli import ledger_sum, move_round
from tests.e2e.crash_harness import assert_views_match_model, read_lake

ROUNDS = 8
PROBE = "SELECT count(*) AS n, count(DISTINCT email) AS d, coalesce(sum(len(pull_requests)), 0) AS prs FROM {}"


def _probe_every_snapshot(settings) -> set[tuple]:
    """The probe's result at every snapshot the view table ever had (none expired: 5-day retention)."""
    table = pyiceberg_catalog(settings).load_table((VIEW_NAMESPACE, "user_profile"))
    con = connect_duckdb(threads=1)
    try:
        return {
            tuple(con.execute(PROBE.format(f"iceberg_scan('{table.metadata_location}', snapshot_from_id => {s.snapshot_id})")).fetchone())
            for s in table.metadata.snapshots
        }
    finally:
        con.close()


@pytest.mark.slow(190)
def test_backfill_compaction_and_queries_while_ingest_commits(tmp_path, sources, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAKEMV_CATALOG_NAME", f"l_{uuid.uuid4().hex[:8]}")  # this process's flows and the ingest
    for key, value in (("LAKEMV_SPARK_MASTER", "local[2]"), ("LAKEMV_DRIVER_MEMORY", "2g"), ("LAKEMV_SHUFFLE_PARTITIONS", "2")):
        monkeypatch.setenv(key, value)
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    workload, events, _ = generate_files(WorkloadConfig(users=150, seed=9, rounds=ROUNDS), sources, staging)
    settings = lake_settings(warehouse)
    total_lines = sum(1 for f in staging.rglob("*.json") for line in f.read_text().splitlines() if line.strip())
    move_round(staging, landing, 0)
    log = tmp_path / "ingest.log"
    env = {**os.environ, "LAKEMV_MAX_FILES_PER_BATCH": "5"}
    with open(log, "w", encoding="utf-8") as out:
        ingest = subprocess.Popen(
            [LAKEMV, "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--trigger-seconds", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    stop, paused, backfilled = threading.Event(), threading.Event(), threading.Event()
    observed: list[tuple] = []
    errors: list[BaseException] = []

    # The interleaving under test, made certain rather than left to timing: once the recompute is on
    # its branch, one round arrives and the backfill waits until a batch has skipped the paused view.
    audit = Backfill._audit

    def audit_after_a_skipped_batch(self, snapshots):  # noqa: ANN001, ANN202
        paused.set()
        deadline = time.monotonic() + 300
        while "user_profile paused by backfill" not in " ".join(log.read_text().split()):
            assert ingest.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        return audit(self, snapshots)

    monkeypatch.setattr(Backfill, "_audit", audit_after_a_skipped_batch)

    def feed() -> None:  # rounds arrive before and during the backfill, the last one after it
        for number in range(1, ROUNDS):
            if number == ROUNDS - 2:
                paused.wait(timeout=600)
            if number == ROUNDS - 1:
                backfilled.wait(timeout=600)
            move_round(staging, landing, number)
            time.sleep(2.0)

    def query() -> None:
        while not stop.is_set():
            try:
                if metadata_location(settings, VIEW_NAMESPACE, "user_profile") is not None:
                    observed.append(tuple(run_query(settings, sources, PROBE.format("user_profile")).to_pylist()[0].values()))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            time.sleep(0.3)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=query, daemon=True)]
    try:
        deadline = time.monotonic() + 300
        while ledger_sum(settings, "lines") == 0:  # the view exists and a first batch committed
            assert ingest.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        for thread in threads:
            thread.start()
        time.sleep(4)
        done = backfill(view="user_profile", warehouse=str(warehouse))
        backfilled.set()
        assert done["attempts"] >= 1 and "matches its recompute" in done["audit"], done
        compacted = compact(warehouse=str(warehouse))
        assert compacted["data_files_after"] + compacted["delete_files_after"] < compacted["data_files_before"] + compacted["delete_files_before"]

        threads[0].join(timeout=600)
        deadline = time.monotonic() + 600
        while ledger_sum(settings, "lines") < total_lines:
            assert ingest.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(2)
    finally:
        stop.set()
        paused.set()
        backfilled.set()
        if ingest.poll() is None:
            os.killpg(ingest.pid, signal.SIGINT)
            ingest.wait(timeout=120)
    output = " ".join(log.read_text().split())
    assert "user_profile paused by backfill" in output, output[-3000:]  # batches skipped it while paused
    assert "caught up after backfill" in output, output[-3000:]  # ... and the next one caught it up
    properties = pyiceberg_catalog(settings).load_table((VIEW_NAMESPACE, "user_profile")).properties
    assert STATE not in properties, properties[STATE]

    # No change lost: both views equal the generator's truth and DuckDB's independent recompute.
    assert_views_match_model(read_lake(warehouse, sources), workload.state, "after backfill and compaction under load")
    assert all(v["mismatching"] == v["missing"] == v["extra"] == 0 for v in verify(warehouse=str(warehouse))["views"].values())

    # Every query during the writes read one committed snapshot of the view, never a mix or an error.
    assert not errors, errors[:3]
    assert len(observed) > 20, len(observed)
    snapshots = _probe_every_snapshot(settings)
    stray = [o for o in observed if o not in snapshots]
    assert not stray and all(n == d for n, d, _ in observed), stray[:5]
