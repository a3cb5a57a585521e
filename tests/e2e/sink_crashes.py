"""Crash harness of the data products: lakemv is killed at every step of a delivery, then restarted.

    .venv/bin/python -m tests.e2e.sink_crashes                 # every point, 3 rounds each (~6 min)
    .venv/bin/python -m tests.e2e.sink_crashes --points sink_committed --rounds 2

For each crash point of `lakemv.spark.sinks.products` (`sink_produced`: the Kafka transaction holds the messages but
is not committed; `sink_committed`: committed, progress not yet noted; `delta_merging` / `delta_merged`:
before and after the Delta MERGE) it ingests a GitHub workload round by round from landing files
(`lakemv ingest --once`, the real command), arms the point for each round's delivery so the process
kills its own group there, runs ingest again to recover, and then checks, with a real Kafka broker
(`lakemv stack`), that each topic read `read_committed` carries every feed change exactly once per
key and in order, and that the Delta table equals the view and its Change Data Feed the feed.
`tests/e2e/test_real_cdc.py` runs `sink_produced` in `make test`; this covers the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.ops.stack import Stack, StackConfig
from tests.conftest import LAKEMV
from tests.e2e.cli import move_round
from tests.e2e.realcdc import delta_cdf_events, delta_rows, feed_events, topic_events, view_rows

POINTS = ("sink_produced", "sink_committed", "delta_merging", "delta_merged")
TABLES = ("payment_info", "pull_requests", "repos", "stars", "users")


def _ingest(warehouse: Path, landing: Path, env: dict[str, str]) -> int:
    done = subprocess.run(
        [LAKEMV, "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once"],
        env=env, capture_output=True, text=True, start_new_session=True, timeout=600,
    )  # fmt: skip
    if done.returncode not in (0, -9):
        raise AssertionError(f"ingest exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.returncode


def run_point(point: str, rounds: int, staging: Path, root: Path, bootstrap: str) -> str:
    warehouse, landing = root / f"wh-{point}", root / f"landing-{point}"
    prefix = f"crash-{point.replace('_', '-')}"
    env = {
        **os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g", "LAKEMV_SHUFFLE_PARTITIONS": "2",
        "LAKEMV_SINKS": json.dumps({"user_profile": ["kafka", "delta"]}), "LAKEMV_PRODUCT_BOOTSTRAP": bootstrap,
        "LAKEMV_PRODUCT_TOPIC_PREFIX": prefix, "LAKEMV_JVM_OPTIONS": "-XX:TieredStopAtLevel=1",
    }  # fmt: skip
    crashes = 0
    for number in range(rounds):
        move_round(staging, landing, number)
        crashed = _ingest(warehouse, landing, {**env, "LAKEMV_CRASH_AT": point}) == -9
        crashes += crashed
        _ingest(warehouse, landing, env)  # recovers: replays the unit, delivers what the crash cut short
    settings = LakeSettings(warehouse=warehouse)
    feed = feed_events(settings, "user_profile")
    assert topic_events(bootstrap, f"{prefix}.user_profile") == feed, f"{point}: the topic is not the feed exactly once"
    delta = str(settings.delta_root / "user_profile")
    assert delta_rows(delta, ("email",)) == view_rows(settings, "user_profile"), f"{point}: Delta differs from the view"
    assert delta_cdf_events(delta, ("email",)) == feed, f"{point}: Delta's CDF differs from the feed"
    assert crashes, f"{point} was never reached"
    return f"{point}: {crashes}/{rounds} rounds crashed there; topic = feed exactly once, Delta = view, CDF = feed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", nargs="*", default=list(POINTS), choices=POINTS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lakemv-sink-crashes-"))
    sources = load_sources(LakeSettings().sources_dirs)
    stack = Stack(StackConfig(folder=root / "stack", tables=TABLES))
    try:
        stack.up({n: sources[n] for n in TABLES})
        staging = root / "staging"
        subprocess.run([LAKEMV, "generate", "--out", str(staging), "--users", str(args.users), "--rounds", str(args.rounds),
                        "--seed", "31"], check=True, capture_output=True)  # fmt: skip
        for point in args.points:
            shutil.copytree(staging, root / f"staging-{point}")
            print(run_point(point, args.rounds, root / f"staging-{point}", root, stack.config.bootstrap), flush=True)
    finally:
        stack.down(purge=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
