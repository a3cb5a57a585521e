"""Backlog benchmark: drain a large landing backlog with `lakemv ingest --once`, watching memory.

    .venv/bin/python -m bench.backlog --users 190000      # about 1M snapshot events

Runs the real CLI as a child process and samples the resident memory of the driver's Python process
and of its JVM every 0.2 s. Writes bench/results/backlog-<timestamp>.json with events/s, units, and
peak memory next to the configured limits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.memory import PeakMemory
from lakemv.catalog.settings import PROJECT_ROOT

LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")
RESULTS = PROJECT_ROOT / "bench" / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=190_000)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lakemv-backlog"))
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    landing, warehouse = args.root / "landing", args.root / "wh"
    env = {**os.environ, "LAKEMV_DRIVER_MEMORY": args.driver_memory}
    subprocess.run([LAKEMV, "generate", "--out", str(landing), "--users", str(args.users), "--rounds", "1"], check=True, env=env)
    events = sum(1 for path in landing.glob("*/*.json") for _ in path.open(encoding="utf-8"))
    started = time.perf_counter()
    process = subprocess.Popen(
        [LAKEMV, "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    memory = PeakMemory(process)
    output = process.communicate()[0]
    seconds = time.perf_counter() - started
    peaks = memory.stop()
    units = [line for line in output.splitlines() if line.startswith("batch ")]
    result = {
        "events": events,
        "seconds": round(seconds, 1),
        "events_per_second": round(events / seconds),
        "units": len(units),
        "peak_python_rss_mib": peaks["python_mib"],
        "peak_jvm_rss_mib": peaks["jvm_mib"],
        "driver_memory": args.driver_memory,
        "exit_code": process.returncode,
        "last_lines": output.splitlines()[-3:],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"backlog-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
