"""Ingest benchmark: generate a GitHub workload, stream it into the mirrors, record per-batch figures.

    .venv/bin/python -m bench.ingest --users 18000 --rounds 3 --max-files-per-trigger 5

Writes bench/results/ingest-<timestamp>.json and prints a summary table.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from catalog.declarations import load_sources
from catalog.settings import LakeSettings
from spark.ingest import run_ingest
from spark.session import get_spark
from workload.github import WorkloadConfig, generate_files

RESULTS = Path(__file__).with_name("results")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=18000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-files-per-trigger", type=int, default=5)
    args = parser.parse_args()
    console = Console()

    work = Path(tempfile.mkdtemp(prefix="lakemv-bench-"))
    try:
        settings = LakeSettings(warehouse=work / "warehouse")
        sources = load_sources(settings.sources_dirs)
        started = time.perf_counter()
        _, events, files = generate_files(WorkloadConfig(users=args.users, seed=args.seed, rounds=args.rounds), sources, work / "landing")
        generate_seconds = time.perf_counter() - started
        spark = get_spark(settings)
        wall = time.perf_counter()
        result = run_ingest(spark, settings, sources, work / "landing", once=True, max_files_per_trigger=args.max_files_per_trigger)
        wall = time.perf_counter() - wall
    finally:
        shutil.rmtree(work, ignore_errors=True)

    batches = [
        {"batch_id": b.batch_id, "events": b.events, "merged": dict(b.merged), "seconds": round(b.seconds, 3),
         "events_per_second": round(b.events / b.seconds) if b.seconds else None}
        for b in result.batches
    ]  # fmt: skip
    report = {
        "benchmark": "ingest",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "workload": {**vars(args), "events": events, "files": files, "generate_seconds": round(generate_seconds, 2)},
        "batches": batches,
        "total": {
            "events": result.events,
            "batch_seconds": round(result.seconds, 2),
            "wall_seconds": round(wall, 2),
            "events_per_second": round(result.events / result.seconds),
            "events_per_second_wall": round(result.events / wall),
        },
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ingest-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2))

    table = Table("batch", "events", "seconds", "events/s", title=f"ingest of {events} events ({files} files)")
    for b in batches:
        table.add_row(str(b["batch_id"]), str(b["events"]), f"{b['seconds']:.2f}", f"{b['events_per_second']:,}")
    console.print(table)
    console.print(report["total"])
    console.print(f"results: {out}")


if __name__ == "__main__":
    main()
