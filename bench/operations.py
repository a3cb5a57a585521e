"""Operations benchmark: the Prefect flows at scale - compaction figures and backfill time.

    .venv/bin/python -m bench.operations --users 100000

Generates the GitHub workload (a snapshot round, then change rounds, each ingested as its own
`maintain` run so the mirrors and views gather many small files and delete files), then runs
`compact`, `backfill user_profile`, `backfill repo_summary` and `verify` as flows in this process.
Writes bench/results/operations-<users>-<timestamp>.json: files and bytes before -> after per
table, backfill seconds per step, verify counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.flows.context import Lake

RESULTS = PROJECT_ROOT / "bench" / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lakemv-operations"))
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    os.environ.setdefault("LAKEMV_DRIVER_MEMORY", args.driver_memory)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    shutil.rmtree(args.root, ignore_errors=True)
    staging, landing, warehouse = args.root / "staging", args.root / "landing", args.root / "wh"

    from lakemv.flows.backfill import backfill
    from lakemv.flows.compact import compact
    from lakemv.flows.ingest import ingest
    from lakemv.flows.verify import verify
    from lakemv.workload.github import WorkloadConfig, generate_files

    lake = Lake.at(warehouse)
    _, events, _ = generate_files(WorkloadConfig(users=args.users, seed=42, rounds=args.rounds), lake.sources, staging)
    record: dict = {"users": args.users, "rounds": args.rounds, "events": events, "maintain": []}
    for number in range(args.rounds):
        for path in sorted(staging.glob(f"*/r{number:04d}-*.json")):
            target = landing / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
        record["maintain"].append(ingest(landing=str(landing), once=True, warehouse=str(warehouse)))
    for view in ("user_profile", "repo_summary"):
        started = time.perf_counter()
        record[f"backfill_{view}"] = backfill(view=view, warehouse=str(warehouse))
        record[f"backfill_{view}"]["wall_seconds"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    record["compact"] = compact(warehouse=str(warehouse))
    record["compact"]["wall_seconds"] = round(time.perf_counter() - started, 2)
    record["verify"] = verify(warehouse=str(warehouse))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"operations-{args.users}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
