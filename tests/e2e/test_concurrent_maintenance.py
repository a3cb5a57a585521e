"""Iceberg maintenance while ingest commits: both succeed, lost commit races are retried, nothing is lost.

Two processes: `lakemv ingest` runs continuously (its own JVM) while this test's Spark session
compacts every table over and over (rewrite_data_files, rewrite_position_delete_files,
expire_snapshots) as new landing files arrive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from datetime import timedelta

import pytest

from catalog.settings import LakeSettings
from catalog.tables import MIRROR_NAMESPACE, VIEW_NAMESPACE
from spark.commits import Retries
from spark.maintenance import lake_tables, maintain_table
from spark.session import use_catalog
from tests.conftest import LAKEMV
from tests.e2e.cli import ledger_sum, move_round
from tests.e2e.crash_harness import MODELS, assert_views_match_model, read_lake
from workload.github import WorkloadConfig, generate_files

ROUNDS = 20


@pytest.mark.slow(290)
def test_compaction_and_ingest_commit_concurrently_without_losing_a_change(tmp_path, spark, sources):
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    workload, events, _ = generate_files(WorkloadConfig(users=200, seed=5, rounds=ROUNDS), sources, staging)
    settings = LakeSettings(warehouse=warehouse)
    env = {**os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g", "LAKEMV_SHUFFLE_PARTITIONS": "2", "LAKEMV_MAX_FILES_PER_BATCH": "5"}
    log = tmp_path / "ingest.log"
    move_round(staging, landing, 0)
    with open(log, "w", encoding="utf-8") as out:
        ingest = subprocess.Popen(
            [LAKEMV, "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--trigger-seconds", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    maintenance = spark.newSession()
    use_catalog(maintenance, settings)
    stop = threading.Event()
    retries = Retries()
    passes: list[int] = [0]
    failures: list[BaseException] = []

    def compact_forever() -> None:
        try:
            while not stop.is_set():
                # The tables every batch MERGEs into, where a compaction commit can race one.
                tables = [t for t in lake_tables(maintenance, "lake", (MIRROR_NAMESPACE, VIEW_NAMESPACE)) if "__" not in t]
                for table in tables:
                    if stop.is_set():
                        break
                    maintain_table(maintenance, "lake", table, retention=timedelta(seconds=30), retain_last=3, retries=retries)
                passes[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    try:
        deadline = time.monotonic() + 240
        while ledger_sum(settings, 'lines') == 0:
            assert ingest.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first batch never committed"
            time.sleep(1)
        worker = threading.Thread(target=compact_forever, daemon=True)
        worker.start()
        for number in range(1, ROUNDS):
            move_round(staging, landing, number)
            time.sleep(1)
        deadline = time.monotonic() + 600
        while ledger_sum(settings, 'lines') < events:
            assert ingest.poll() is None, f"ingest died:\n{log.read_text()[-3000:]}"
            assert not failures, f"maintenance failed: {failures[0]!r}"
            assert time.monotonic() < deadline, f"ingest did not catch up: {ledger_sum(settings, 'lines')} of {events} lines"
            time.sleep(1)
        while passes[0] < 1 and not failures:  # at least one full pass over every table while ingest ran
            time.sleep(1)
        stop.set()
        worker.join(timeout=300)
    finally:
        stop.set()
        os.killpg(ingest.pid, signal.SIGINT)
        try:
            ingest.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(ingest.pid, signal.SIGKILL)

    assert not failures, f"maintenance failed: {failures[0]!r}"
    output = log.read_text()
    assert "Traceback" not in output and "error:" not in output, output[-3000:]
    lake = read_lake(warehouse, sources)
    for name in sources:
        live = sorted(
            tuple(r[c] for c in sources[name].column_names) for r in lake[f"mirror.{name}"] if not r["_lmv_deleted"]
        )
        truth = sorted(tuple(r[c] for c in sources[name].column_names) for r in workload.live_rows(name))
        assert live == truth, f"mirror {name}: {len(live)} live rows, {len(truth)} in the source"
    assert_views_match_model(lake, workload.state, " (after concurrent maintenance)")
    ingest_retries = ledger_sum(settings, "conflicts_retried")
    print(f"maintenance passes {passes[0]}, conflicts retried: maintenance {retries.count}, ingest {ingest_retries}")
    assert retries.count + ingest_retries > 0, "no commit race happened: the test did not exercise the retries"
    assert set(MODELS) <= {k.split(".", 1)[1] for k in lake if k.startswith("views.")}
