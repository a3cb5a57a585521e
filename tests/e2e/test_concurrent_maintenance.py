"""Iceberg maintenance while ingest commits: both succeed, the rewrites take turns with the stream's
units (so they are never deferred), and nothing is lost.

Two processes: `lakemv ingest` runs continuously (its own JVM) while this test's Spark session
compacts every table over and over (rewrite_data_files, rewrite_position_delete_files,
expire_snapshots) as new landing files arrive. Without turns, the rewrites of a table the stream
MERGEs into every second lost nearly every race (lakemv.catalog.writer.CommitTurns).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from datetime import timedelta

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import MIRROR_NAMESPACE, VIEW_NAMESPACE
from lakemv.catalog.writer import CommitTurns
from lakemv.core.retry import Retries
from lakemv.spark.compaction import Compaction, compact_table, lake_tables
from lakemv.spark.session import use_catalog
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.conftest import LAKEMV
from tests.e2e.cli import ledger_sum, move_round
from tests.e2e.crash_harness import MODELS, assert_views_match_model, read_lake

ROUNDS = 12


@pytest.mark.slow(120)
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
    results: list[Compaction] = []
    turns = CommitTurns(settings.local_root, settings.catalog_name)

    def compact_forever() -> None:
        try:
            while not stop.is_set():
                # The tables every batch MERGEs into, where a compaction commit can race one.
                tables = [t for t in lake_tables(maintenance, "lake", (MIRROR_NAMESPACE, VIEW_NAMESPACE)) if "__" not in t]
                for table in tables:
                    if stop.is_set():
                        break
                    results.append(compact_table(
                        maintenance, "lake", table, retention=timedelta(seconds=30), retain_last=3, retries=retries, turn=turns.turn
                    ))
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
        turns.close()
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
    deferred = [f"{r.table}: {r.deferred}" for r in results if r.deferred]
    rewrote = [r for r in results if r.data_files_after + r.delete_files_after < r.data_files_before + r.delete_files_before]
    waits = [float(w) for w in re.findall(r"waited ([0-9.]+)s for compaction", output)]
    print(f"maintenance passes {passes[0]}, {len(results)} tables maintained, {len(rewrote)} shrank, "
          f"stream waited {len(waits)} times (longest {max(waits, default=0):.1f}s), conflicts retried {retries.count}")
    assert not deferred, f"a rewrite lost its race although it had a turn: {deferred}"
    assert rewrote, "no compaction shrank a table: the test did not exercise the rewrites"
    assert waits, "the stream never waited for a compaction turn: the turns were not exercised"
    assert set(MODELS) <= {k.split(".", 1)[1] for k in lake if k.startswith("views.")}
