"""SIGINT / SIGTERM to the whole process group, as a terminal's Ctrl-C and a supervisor's stop send them.

Each test runs `lakemv` in a session of its own and signals that session's process group, then
checks: it exits within 10 s with 128 + the signal's number, says `stopped` and prints no trace, and
no process it started (the JVM, Spark's Python workers, the Prefect API or server, flow-run
processes) is left. Every process lakemv starts inherits a marker variable from the test, which is
how the test finds them. For ingest, the next run must then end with the lake a crash-free run
gives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.writer import lock_path
from tests.conftest import LAKEMV
from tests.e2e.cli import ledger_sum
from tests.e2e.crash_harness import (
    assert_same_lake,
    assert_views_match_model,
    copy_landing,
    ingest,
    ingest_env,
    prepare_landing,
    read_lake,
)

MARK = "LAKEMV_TEST_RUN"


def marked(mark: str) -> list[str]:
    """Command lines of the live processes that carry `mark` in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if f"{MARK}={mark}".encode() in environ.split(b"\0"):
                state = next((line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")), "")
                if "zombie" not in state:
                    found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:160])
        except OSError:
            continue
    return found


def start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    mark = uuid.uuid4().hex
    with log.open("w") as out:
        process = subprocess.Popen(
            [LAKEMV, *args], env={**env, MARK: mark}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return process, mark


def wait_for(condition, timeout: float, what: str, process: subprocess.Popen, log: Path) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"lakemv exited early ({process.returncode}) while waiting for {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def signal_group_and_check(process: subprocess.Popen, mark: str, number: signal.Signals, log: Path) -> float:
    """Signal the process group; assert a clean stop within 10 s and nothing left. Returns the seconds taken."""
    started = time.monotonic()
    os.killpg(process.pid, number)
    try:
        code = process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"still running 10 s after {number.name}:\n{log.read_text()[-3000:]}") from None
    took = time.monotonic() - started
    output = log.read_text()
    assert code == 128 + number, f"exit code {code} after {number.name}:\n{output[-3000:]}"
    assert f"stopped ({number.name})" in output and "Traceback" not in output and "\tat " not in output, output[-3000:]
    deadline = time.monotonic() + 3  # the kernel reaps killed children asynchronously
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked(mark), f"left running after {number.name}: {marked(mark)}"
    return took


@pytest.mark.slow(90)
def test_ingest_stops_mid_batch_on_a_group_signal_and_the_next_run_equals_a_crash_free_one(tmp_path, sources):
    """SIGTERM, as a supervisor sends it (Ctrl-C's SIGINT takes the same way out: the idle test below)."""
    number = signal.SIGTERM
    generated = tmp_path / "generated"
    state, per_round = prepare_landing(generated, seed=7, users=60, rounds=3, sources=sources)
    lakes = {}
    for name in ("reference", "signalled"):
        copy_landing(generated, tmp_path / f"{name}-landing")
    assert ingest(tmp_path / "reference-wh", tmp_path / "reference-landing", ingest_env(per_round)) is None
    lakes["reference"] = read_lake(tmp_path / "reference-wh", sources)

    warehouse, landing, log = tmp_path / "signalled-wh", tmp_path / "signalled-landing", tmp_path / "ingest.log"
    held = tmp_path / "held"
    env = ingest_env(per_round, {"LAKEMV_HOLD_AT": "keys:user_profile@1", "LAKEMV_HOLD_SIGNAL": str(held)})
    env.pop("PREFECT_API_URL", None)  # as a user runs it: lakemv starts its own temporary Prefect API
    process, mark = start(["--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--trigger-seconds", "0.5"], env, log)
    # Batch 0 commits; batch 1 is held after its mirror MERGEs, before its views: a unit half done.
    wait_for(held.exists, 300, "unit held mid-batch", process, log)
    assert ledger_sum(LakeSettings(warehouse=warehouse), "lines") > 0, "batch 0 should have committed"
    took = signal_group_and_check(process, mark, number, log)

    assert ingest(warehouse, landing, ingest_env(per_round)) is None  # replays the cut batch, then the rest
    lakes["signalled"] = read_lake(warehouse, sources)
    assert_same_lake(lakes["reference"], lakes["signalled"], f"after {number.name} mid-batch")
    assert_views_match_model(lakes["signalled"], state, f" (after {number.name})")
    print(f"{number.name}: stopped in {took:.1f}s")


def test_a_stop_while_idle_between_batches_is_just_as_clean(tmp_path):
    landing = tmp_path / "landing"
    (landing / "users").mkdir(parents=True)
    log = tmp_path / "ingest.log"
    env = {**os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "1g"}
    env.pop("PREFECT_API_URL", None)
    process, mark = start(["--warehouse", str(tmp_path / "wh"), "ingest", "--landing", str(landing)], env, log)
    wait_for(lambda: any("java" in p for p in marked(mark)), 120, "JVM", process, log)
    time.sleep(5)  # the stream is up and idle
    # One writer per lake: a second ingest is refused at once, told who holds the lake.
    settings = LakeSettings(warehouse=tmp_path / "wh")
    held_by = lock_path(settings.local_root, settings.catalog_name)
    try:
        wait_for(lambda: held_by.exists() and f'"pid": {process.pid},' in held_by.read_text(), 60, "the writer lock", process, log)
        second = subprocess.run([LAKEMV, "--warehouse", str(tmp_path / "wh"), "ingest", "--landing", str(landing), "--once"],
                                env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert second.returncode == 1 and second.stdout == "", second
        assert second.stderr.startswith(f"error: the lake {tmp_path / 'wh'} is being written by pid {process.pid} on "), second.stderr
        assert second.stderr.count("\n") == 1 and "one writer per lake" in second.stderr, second.stderr
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)  # a failed check leaves no stream behind
        raise
    signal_group_and_check(process, mark, signal.SIGINT, log)


@pytest.mark.slow(65)
def test_serve_stops_with_its_server_and_flow_runs_on_a_supervisors_sigterm(tmp_path, sources):
    from lakemv.workload.github import WorkloadConfig, generate_files

    landing, warehouse, log = tmp_path / "landing", tmp_path / "wh", tmp_path / "serve.log"
    generate_files(WorkloadConfig(users=40, seed=3, rounds=1), sources, landing)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # serve starts its own server
    env.update(LAKEMV_SPARK_MASTER="local[2]", LAKEMV_DRIVER_MEMORY="1g", LAKEMV_SHUFFLE_PARTITIONS="2",
               PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2", PREFECT_RUNNER_POLL_FREQUENCY="2")  # fmt: skip
    args = ["--warehouse", str(warehouse), "serve", "--landing", str(landing), "--continuous", "--ingest-every", "5"]
    process, mark = start(args, env, log)
    settings = LakeSettings(warehouse=warehouse)
    # An ingest flow run (its own process and JVM) has committed a batch and keeps its stream open.
    wait_for(lambda: ledger_sum(settings, "lines") > 0, 300, "a committed batch from the served ingest run", process, log)
    assert sum("prefect.engine" in p for p in marked(mark)) >= 1, marked(mark)
    signal_group_and_check(process, mark, signal.SIGTERM, log)
