"""`lakemv serve` starts a Prefect server and the deployments, which run on their schedules; the CLI
commands `verify` and `backfill --dry-run` work on what they produced."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
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
from lakemv.core.runtime.ports import free_port
from lakemv.workload.github import WorkloadConfig, generate_files
from tests.conftest import LAKEMV
from tests.e2e.browser import browser_page
from tests.prefectapi import artifacts
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


def _compacted_mirrors(api: str) -> bool:
    """Whether a compact run's report covers the mirrors and the views (the run after the first ingest)."""
    reports = [json.loads(a["data"]) for a in artifacts(api=api, key="lakemv-compact-tables")]
    return any({"mirror.users", "views.user_profile"} <= {row["table"] for row in rows} for rows in reports)


def _completed_run(api: str, flow: str) -> dict:
    """The newest completed run of `flow`."""
    runs = httpx.post(f"{api}/flow_runs/filter", json={
        "flows": {"name": {"any_": [flow]}}, "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}, "sort": "START_TIME_DESC", "limit": 1,
    }).json()  # fmt: skip
    assert runs, flow
    return runs[0]


def _the_ui_shows_the_run_and_its_report(port: int, run: dict, shots: Path | None) -> None:
    """The UI `serve` started, in a real browser as a new user opens it: it reaches its own API and lists
    the ingest run on the runs page; the run's report is one click away under its deployment's key."""
    ui = f"http://127.0.0.1:{port}"
    with browser_page() as page:
        page.goto(f"{ui}/runs")
        page.get_by_text(run["name"], exact=True).first.wait_for(timeout=60_000)
        assert "Can't connect to Server API" not in page.inner_text("body")
        if shots is not None:
            page.screenshot(path=str(shots / "prefect-ui-runs.png"))
        page.goto(f"{ui}/artifacts/key/lakemv-ingest")
        page.get_by_text("lakemv-ingest").first.wait_for(timeout=60_000)
        page.goto(f"{ui}/artifacts/artifact/{artifacts('lakemv-ingest', f'{ui}/api')[0]['id']}")
        page.get_by_text("Over their freshness budget").first.wait_for(timeout=60_000)  # the budgeted view below
        charts = page.locator("img[src^='data:image/svg+xml']")
        charts.first.wait_for(timeout=60_000)
        assert charts.count() == 3, charts.count()  # a chart per view
        if shots is not None:
            page.screenshot(path=str(shots / "prefect-ui-ingest-artifact.png"), full_page=True)


# A view with a freshness budget it cannot keep: a change waits for a batch that comes later than its
# budget allows (the next scheduled run), so the report shows a view over budget.
SLOW_VIEW = """-- @key: owner
-- @freshness: 1 second
SELECT r.owner, count(*) AS repos FROM repos r GROUP BY r.owner
"""


# Short intervals: every ingest run is a process that starts Spark, so the runs scheduled while the test
# waits for the first compaction are what it costs (with a first compaction after 40 s: 190 s alone).
# UI_SCREENSHOTS=<folder> keeps the browser's screenshots there (docs/operations.md shows them).
@pytest.mark.slow(280)
def test_serve_runs_the_deployments_on_schedule(tmp_path, sources):
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    # (a source clock that ends about now, as a live database's does: the views' lags are minutes, not years)
    generate_files(WorkloadConfig(users=60, seed=4, rounds=2, start_micros=int((time.time() - 900) * 1e6)), sources, staging)
    move_round(staging, landing, 0)
    extra = tmp_path / "views"
    extra.mkdir()
    (extra / "repos_per_owner.sql").write_text(SLOW_VIEW)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # serve starts its own server
    env.update(
        LAKEMV_SPARK_MASTER="local[2]", LAKEMV_DRIVER_MEMORY="2g", LAKEMV_SHUFFLE_PARTITIONS="2", LAKEMV_EXTRA_VIEWS_DIR=str(extra),
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2", PREFECT_RUNNER_POLL_FREQUENCY="2",
    )  # fmt: skip
    shots = Path(os.environ["UI_SCREENSHOTS"]).resolve() if os.environ.get("UI_SCREENSHOTS") else None
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
            if completed == {"ingest", "compact", "verify"} and states["ingest"].count("COMPLETED") > maintained and _compacted_mirrors(api):
                break  # (a compact run may start before the first ingest made any table: wait for one after it)
            time.sleep(3)
        assert "FAILED" not in states["verify"] and "FAILED" not in states["ingest"], states
        _the_ui_shows_the_run_and_its_report(port, _completed_run(api, "ingest"), shots)

        # every run says what it did, under its deployment's key and each view's (read through the API)
        ingest_run, verify_run = _completed_run(api, "ingest"), _completed_run(api, "verify")
        summaries = [a for a in artifacts(api=api, key="lakemv-ingest") if a["flow_run_id"] == ingest_run["id"]]
        assert len(summaries) == 1 and "[user_profile](/artifacts/key/ingest-user-profile)" in summaries[0]["data"], summaries
        views = {row["view"]: row for row in json.loads(artifacts(api=api, key="lakemv-ingest-views")[0]["data"])}
        assert set(views) == {"user_profile", "repo_summary", "repos_per_owner"}, views
        assert views["repos_per_owner"]["budget seconds"] == 1.0 and views["repos_per_owner"]["over budget"] is True, views
        assert any(a["data"].startswith("# user_profile: ingest") for a in artifacts(api=api, key="ingest-user-profile"))
        checked = {row["view"]: row for row in json.loads(artifacts(api=api, key="lakemv-verify-views")[0]["data"])}
        assert checked["user_profile"]["outcome"] == "✅ equal" and checked["user_profile"]["mismatched"] == 0, checked
        assert any(a["flow_run_id"] == verify_run["id"] for a in artifacts(api=api, key="lakemv-verify"))
        compacted = [json.loads(a["data"]) for a in artifacts(api=api, key="lakemv-compact-tables")]
        assert _compacted_mirrors(api), compacted
        assert all(" → " in row["snapshots"] and " → " in row["data files"] for rows in compacted for row in rows), compacted
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


def test_serve_marks_crashed_the_runs_an_earlier_serve_left_running():
    """A serve stopped mid-run (Ctrl-C, a kill) leaves its run `Running`; that run would hold its deployment's
    one concurrency slot for ever. The next serve, on its own server, marks it crashed before serving."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from lakemv.flows.deployments import abandoned_runs_crashed

    @flow(name="ingest-left-running")
    def left() -> None:
        """Stands for the ingest flow whose serve stopped."""

    async def make() -> tuple[str, str]:
        async with get_client() as client:
            mine = await client.create_flow_run(left, name="left-by-a-stopped-serve", tags=["lakemv"], state=Running())
            other = await client.create_flow_run(left, name="someone-elses", state=Running())  # not lakemv's: left alone
            return str(mine.id), str(other.id)

    mine, other = asyncio.run(make())
    assert "left-by-a-stopped-serve" in abandoned_runs_crashed()
    api = os.environ["PREFECT_API_URL"]
    assert httpx.get(f"{api}/flow_runs/{mine}").json()["state"]["type"] == "CRASHED"
    assert httpx.get(f"{api}/flow_runs/{other}").json()["state"]["type"] == "RUNNING"
    assert "left-by-a-stopped-serve" not in abandoned_runs_crashed()
