"""Start-up cost of each `lakemv` command, as a user pays it (no PREFECT_API_URL set).

Builds a small lake once (200 users), then runs every command `--repeat` times and records the
median wall seconds from exec to exit. Commands do little work here, so the figure is their fixed
cost: interpreter and imports, the JVM, the Prefect API, the flow run. `--lakemv` times another
installation (e.g. an older checkout) against the same lake.

    .venv/bin/python -m bench.startup [--repeat 3] [--lakemv PATH] [--only ingest status ...]

Writes `bench/results/startup-<time>.json` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lakemv.catalog.settings import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"


def commands(landing: Path) -> dict[str, list[str]]:
    """What each measured command runs (the lake is built before, so ingest finds nothing new)."""
    return {
        "--help": ["--help"],
        "views": ["views"],
        "explain user_profile": ["explain", "user_profile"],
        "status": ["status"],
        "query": ["query", "select count(*) from users"],
        "verify user_profile": ["verify", "user_profile"],
        "ingest --once (nothing new)": ["ingest", "--landing", str(landing), "--once"],
        "backfill --dry-run": ["backfill", "user_profile", "--dry-run"],
    }


def timed(lakemv: str, warehouse: Path, args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([lakemv, "--warehouse", str(warehouse), *args], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lakemv {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lakemv", default=str(PROJECT_ROOT / ".venv" / "bin" / "lakemv"))
    parser.add_argument("--label", default="current")
    parser.add_argument("--only", nargs="*", default=None, help="measure only the commands whose name starts with one of these")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL" and not k.startswith("LAKEMV_")}
    env.update({"LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g", "LAKEMV_SHUFFLE_PARTITIONS": "2"})
    root = Path(tempfile.mkdtemp(prefix="lakemv-startup-"))
    try:
        landing, warehouse = root / "landing", root / "wh"
        subprocess.run([args.lakemv, "generate", "--out", str(landing), "--users", "200", "--rounds", "2"], env=env, check=True, capture_output=True)
        timed(args.lakemv, warehouse, ["ingest", "--landing", str(landing), "--once"], env)
        results = {}
        for name, command in commands(landing).items():
            if args.only and not any(name.startswith(prefix) for prefix in args.only):
                continue
            runs = [timed(args.lakemv, warehouse, command, env) for _ in range(args.repeat)]
            results[name] = {"median_s": round(statistics.median(runs), 2), "runs_s": [round(r, 2) for r in runs]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    record = {"label": args.label, "lakemv": args.lakemv, "at": datetime.now(UTC).isoformat(), "cpus": os.cpu_count(), "commands": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"startup-{args.label}-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(record, indent=2))
    table = Table("command", "median s", "runs s", title=f"lakemv start-up ({args.label})")
    for name, result in results.items():
        table.add_row(name, f"{result['median_s']:.2f}", ", ".join(f"{r:.2f}" for r in result["runs_s"]))
    Console().print(table)
    Console().print(f"wrote {out}")


if __name__ == "__main__":
    main()
