"""View benchmark: one CDC batch maintained incrementally vs a full recompute of the view, same run.

    .venv/bin/python -m bench.views --users 100000 --changes 1000

Loads a GitHub snapshot of `--users` users into the mirrors, builds the views, runs `--warmup`
change batches, then measures one batch of `--changes` changes: the whole batch (parse, mirror
MERGEs, view maintenance) and the view step alone, against a full recompute of the same view
written to a table (what a non-incremental pipeline pays per batch). Records Spark jobs and
Iceberg commits per step. Writes bench/results/views-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from catalog.declarations import load_sources
from catalog.settings import LakeSettings
from catalog.tables import TableNames
from spark.batch import BatchProcessor
from spark.maintain import ViewMaintainer
from spark.planner import plan_view
from spark.session import get_spark
from spark.views import load_views
from workload.github import GitHubWorkload, WorkloadConfig

RESULTS = Path(__file__).with_name("results")


def lines_of(round_events: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str]]:
    return [(json.dumps(e), f"file:///landing/{t}/bench.json") for t, events in round_events.items() for e in events]


class Meter:
    """Counts Spark jobs (by job group) and Iceberg commits (snapshots of every lakemv table) of a step."""

    def __init__(self, spark, catalog: str):
        self.spark = spark
        self.catalog = catalog
        self.steps = 0

    def commits(self) -> int:
        total = 0
        present = {row[0] for row in self.spark.sql(f"SHOW NAMESPACES IN {self.catalog}").collect()}
        for namespace in present & {"mirror", "views", "lakemv"}:
            for row in self.spark.sql(f"SHOW TABLES IN {self.catalog}.{namespace}").collect():
                total += self.spark.sql(f"SELECT count(*) FROM {self.catalog}.{namespace}.{row['tableName']}.snapshots").first()[0]
        return total

    def measure(self, label: str, step: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
        before = self.commits()
        self.steps += 1
        group = f"bench-{self.steps}-{label}"
        sc = self.spark.sparkContext
        sc.setJobGroup(group, label)
        started = time.perf_counter()
        try:
            result = step()
        finally:
            seconds = time.perf_counter() - started
            sc.setJobGroup("bench-idle", "idle")
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        return result, {"seconds": round(seconds, 3), "spark_jobs": jobs, "iceberg_commits": self.commits() - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=1, help="change batches before the measured one")
    parser.add_argument("--view", default="user_profile")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    console = Console()

    work = Path(tempfile.mkdtemp(prefix="lakemv-bench-views-"))
    try:
        settings = LakeSettings(warehouse=work / "warehouse")
        sources = load_sources(settings.sources_dirs)
        plan = plan_view(load_views(settings.view_dirs)[args.view], sources)
        names = TableNames(settings.catalog_name)
        config = WorkloadConfig(users=args.users, seed=args.seed, rounds=2 + args.warmup, changes_per_round=args.changes)
        rounds = GitHubWorkload(config, sources).rounds()
        with console.status("generating the snapshot..."):
            snapshot = lines_of(next(rounds))
        spark = get_spark(settings)
        meter = Meter(spark, settings.catalog_name)
        with console.status(f"loading {len(snapshot):,} snapshot events into the mirrors..."):
            loaded, load = meter.measure("snapshot", lambda: BatchProcessor(spark, names, sources).process_lines(0, snapshot))
        rows = {t: spark.table(names.mirror(t)).count() for t in sources}
        console.print(f"mirrors: {rows} ({load['seconds']}s)")
        with console.status("building the view (first run: full recompute)..."):
            processor, build = meter.measure("build", lambda: BatchProcessor(spark, names, sources, [plan]))
        view_rows = spark.table(names.view(plan.name)).count()
        console.print(f"{plan.name}: {view_rows:,} rows built in {build['seconds']}s")

        batches = []
        for number in range(1, 2 + args.warmup):
            batch_lines = lines_of(next(rounds))
            result, figures = meter.measure(f"batch-{number}", lambda: processor.process_lines(number, batch_lines))
            view = result.views.get(plan.name)
            batches.append(
                {
                    "batch_id": number,
                    "warmup": number <= args.warmup,
                    "events": result.events,
                    "merged": dict(result.merged),
                    "keys_affected": view.keys if view else 0,
                    "view_upserts": view.upserts if view else 0,
                    "view_deletes": view.deletes if view else 0,
                    "view_seconds": round(view.seconds, 3) if view else 0.0,
                    "view_steps": dict(view.steps) if view else {},
                    **figures,
                }
            )
            console.print(result.describe())
        measured = batches[-1]

        maintainer = ViewMaintainer(spark, names, sources, plan)
        scratch = f"{settings.catalog_name}.views.bench_full_{plan.name}"

        def full_recompute() -> None:
            maintainer.recompute().writeTo(scratch).using("iceberg").createOrReplace()

        _, full = meter.measure("full-recompute", full_recompute)
        _, full_again = meter.measure("full-recompute-2", full_recompute)
        _, backfill = meter.measure("backfill", maintainer.backfill)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    full_best = min(full["seconds"], full_again["seconds"])
    report = {
        "benchmark": "views",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "workload": {**vars(args), "snapshot_events": len(snapshot), "mirror_rows": rows, "view_rows": view_rows},
        "snapshot_load": load,
        "initial_build": build,
        "batches": batches,
        "full_recompute": [full, full_again],
        "backfill_no_changes": backfill,
        "ratio": {
            "full_recompute_vs_view_step": round(full_best / measured["view_seconds"], 2) if measured["view_seconds"] else None,
            "full_recompute_vs_whole_batch": round(full_best / measured["seconds"], 2),
        },
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"views-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2))

    table = Table("step", "seconds", "spark jobs", "iceberg commits", title=f"{plan.name} at {args.users:,} users")
    table.add_row("initial build (full)", str(build["seconds"]), str(build["spark_jobs"]), str(build["iceberg_commits"]))
    for b in batches:
        label = f"batch {b['batch_id']}{' (warm-up)' if b['warmup'] else ''}: {b['events']} events, {b['keys_affected']} keys"
        table.add_row(label, str(b["seconds"]), str(b["spark_jobs"]), str(b["iceberg_commits"]))
        steps = ", ".join(f"{k} {v:.2f}" for k, v in b["view_steps"].items())
        table.add_row(f"  of which view step ({steps})", str(b["view_seconds"]), "", "")
    table.add_row("full recompute + write", f"{full['seconds']} / {full_again['seconds']}", str(full["spark_jobs"]), str(full["iceberg_commits"]))
    table.add_row("backfill (diff, nothing changed)", str(backfill["seconds"]), str(backfill["spark_jobs"]), str(backfill["iceberg_commits"]))
    console.print(table)
    console.print(report["ratio"])
    console.print(f"results: {out}")


if __name__ == "__main__":
    main()
