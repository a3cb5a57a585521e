"""`lakemv serve` starts a Prefect server and the deployments, which run on their schedules; the CLI
commands `verify` and `backfill --dry-run` work on what they produced."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time

import pytest
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort

from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.duck.query import run_query
from lakemv.flows.context import lake_settings
from lakemv.flows.server import free_port
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.conftest import LAKEMV
from tests.e2e.cli import lakemv, move_round

FINAL = [StateType.COMPLETED, StateType.FAILED, StateType.CRASHED]


def _states(api: str) -> dict[str, list[str]]:
    """Final state types of the runs of each flow (scheduled ones left out), read from the served Prefect API."""

    async def read() -> dict[str, list[str]]:
        async with PrefectClient(api) as client:
            found = {}
            for name in ("ingest", "compact", "verify"):
                runs = await client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=[name])),
                    flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=FINAL))),
                    sort=FlowRunSort.START_TIME_DESC,
                    limit=50,
                )
                found[name] = [r.state.type.value for r in runs if r.state is not None]
            return found

    return asyncio.run(read())


# Short intervals: every ingest run is a process that starts Spark, so the runs scheduled while the test
# waits for the first compaction are what it costs (with a first compaction after 40 s: 190 s alone).
@pytest.mark.slow(100)
def test_serve_runs_the_deployments_on_schedule(tmp_path, sources):
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    generate_files(WorkloadConfig(users=60, seed=4, rounds=2), sources, staging)
    move_round(staging, landing, 0)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # serve starts its own server
    env.update(
        LAKEMV_SPARK_MASTER="local[2]", LAKEMV_DRIVER_MEMORY="2g", LAKEMV_SHUFFLE_PARTITIONS="2",
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2", PREFECT_RUNNER_POLL_FREQUENCY="2",
    )  # fmt: skip
    log = tmp_path / "serve.log"
    with open(log, "w", encoding="utf-8") as out:
        serve = subprocess.Popen(
            [LAKEMV, "--warehouse", str(warehouse), "serve", "--landing", str(landing), "--port", str(port),
             "--ingest-every", "10", "--verify-every", "10", "--compact-every", "15"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"
    settings = lake_settings(warehouse)
    try:
        deadline, moved = time.monotonic() + 420, False
        while True:
            assert serve.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, (log.read_text()[-5000:], _states(api))
            states = _states(api) if "Prefect API" in log.read_text() else {}
            completed = {name for name, found in states.items() if "COMPLETED" in found}
            if "ingest" in completed and not moved:
                move_round(staging, landing, 1)  # a later scheduled run picks it up
                moved, maintained = True, states["ingest"].count("COMPLETED")
            if completed == {"ingest", "compact", "verify"} and states["ingest"].count("COMPLETED") > maintained:
                break
            time.sleep(3)
        assert "FAILED" not in states["verify"] and "FAILED" not in states["ingest"], states
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGINT)
        serve.wait(timeout=120)
    with socket.socket() as probe:  # the Prefect server it started is gone with it
        assert probe.connect_ex(("127.0.0.1", port)) != 0

    users = run_query(settings, sources, "SELECT count(*) AS n FROM users").column("n")[0].as_py()
    assert users > 0
    out = " ".join(lakemv("--warehouse", str(warehouse), "backfill", "user_profile", "--dry-run").stdout.split())
    assert "about" in out and "5. publish: fast-forward main to the branch" in out, out

    # verify exits non-zero on a difference: a view row removed behind lakemv's back (pyiceberg).
    table = pyiceberg_catalog(settings).load_table(("views", "user_profile"))
    victim = table.scan(selected_fields=("email",), limit=1).to_arrow().column("email")[0].as_py()
    table.delete(f"email == '{victim}'")
    done = lakemv("--warehouse", str(warehouse), "verify", "user_profile", check=False)
    text = " ".join(done.stdout.split())
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "1 missing" in text and f"missing: email='{victim}'" in text, text
    assert "Traceback" not in done.stderr and done.stderr.strip().startswith("error:"), done.stderr
    assert lakemv("--warehouse", str(warehouse), "verify", "repo_summary").returncode == 0
