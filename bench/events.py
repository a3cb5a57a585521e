"""Event-stream benchmark: events/s per core and the local state's size over a long stream, per kind of view.

    .venv/bin/python -m bench.events --events 10000000                 # the issue's 10M-event stream
    .venv/bin/python -m bench.events --events 200000 --unit 20000       # a quick run

For each kind of event view - a window (`page_views_hourly`), an enrichment as of processing
(`profile_viewers`, against a users table), a stream-stream join within the hour (`search_clicks`)
- a fresh lake takes the generated stream (`lakemv.workload.eventstreams`: out of order, some late, some twice)
in units of `--unit` events, the way ingest applies them (the same BatchProcessor, the local state
and direct commits). After each unit it records the wall and CPU seconds (this process and its
JVM) and the local state: the events it keeps and its file size, and the driver's resident memory.
At the end, side by side on the same lake: the view's full recompute in Spark and in DuckDB (what a
user without lakemv would run, each over every event). Writes bench/results/events-<time>/results.json
and report.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.suite import RESULTS, Meter, _resident_bytes
from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import TableNames
from lakemv.core.batch.journal import BatchRef
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.planner.finality import checked_sql
from lakemv.core.state.store import Store
from lakemv.duck.query import lake_connection
from lakemv.duck.verify import duckdb_sql
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.session import get_spark
from lakemv.workload.eventstreams import EventConfig, EventWorkload
from lakemv.workload.github import GitHubWorkload, WorkloadConfig

KINDS = {
    # view -> the event streams it reads
    "page_views_hourly": ("page_views",),
    "profile_viewers": ("profile_views",),
    "search_clicks": ("searches", "clicks"),
}
SAMPLES = 20  # state figures kept per run (evenly spread), besides every unit's timing


def _units(config: EventConfig, streams: tuple[str, ...]) -> Iterator[list[tuple[str, str]]]:
    """The stream's arrivals for `streams`, as (line, file) units of about `config.events / rounds`,
    generated as they are applied (a 10M-event stream is never held whole)."""
    for lines in EventWorkload(config).rounds(streams):
        unit = [(line, f"file:///landing/{s}/events.json") for s in streams for line in lines.get(s, [])]
        if unit:
            yield unit


def run_kind(view: str, args: argparse.Namespace, root: Path, console: Console) -> dict[str, Any]:
    settings = LakeSettings(warehouse=root / view / "warehouse", catalog_name=f"ev_{view}"[:30])
    sources = load_sources([PROJECT_ROOT / "catalog/sources", PROJECT_ROOT / "catalog/sources/events"])
    plan = plan_view(load_views([PROJECT_ROOT / "views/events"])[view], sources)
    spark = get_spark(settings)
    names = TableNames(settings.catalog_name)
    meter = Meter(spark, settings.catalog_name)
    store = Store(root / view / "state" / "state.sqlite")
    processor = BatchProcessor(spark, names, sources, [plan], store=store, direct=DirectWriter(spark, settings))
    batch = 0
    if view == "profile_viewers":  # the users the profile views are enriched with
        users = next(GitHubWorkload(WorkloadConfig(users=args.users, seed=1), {n: sources[n] for n in ("users", "payment_info", "repos", "pull_requests", "stars")}).rounds())
        snapshot = [(json.dumps(e), "file:///landing/users/s.json") for e in users.get("users", [])]
        snapshot += [(json.dumps(e), "file:///landing/payment_info/s.json") for e in users.get("payment_info", [])]
        batch += 1
        processor.process(BatchRef("bench", batch), snapshot)
    rounds = max(1, args.events // args.unit)
    config = EventConfig(events=args.events, rounds=rounds, seed=args.seed, users=args.users, repos=args.repos,
                         span_seconds=args.span_hours * 3600)  # fmt: skip
    console.print(f"[bold]{view}[/]: the stream in {rounds} units, generated as it goes")
    every = max(1, rounds // SAMPLES)
    series, totals = [], {"events": 0, "seconds": 0.0, "cpu_seconds": 0.0, "dead_letters": 0, "skipped": 0}
    def sample(number: int, size: int, figures: dict[str, Any]) -> dict[str, Any]:
        kept = {s: store.count(s) for s in KINDS[view]}
        point = {"unit": number, "events_so_far": totals["events"], "seconds": figures["seconds"], "cpu_seconds": figures["cpu_seconds"],
                 "state_events": kept, "state_view_rows": store.view_count(view), "state_bytes": store.size_bytes(),
                 "driver_resident_bytes": _resident_bytes()}  # fmt: skip
        console.print(f"  unit {number + 1}/{rounds}: {size:,} events in {figures['seconds']:.2f}s; state keeps "
                      f"{sum(kept.values()):,} events and {point['state_view_rows']:,} view rows, {point['state_bytes'] / 2**20:.1f} MiB")  # fmt: skip
        return point

    for number, unit in enumerate(_units(config, KINDS[view])):
        batch += 1
        result, figures = meter.measure("unit", lambda: processor.process(BatchRef("bench", batch), unit), commits=False)
        totals["events"] += len(unit)
        totals["seconds"] += figures["seconds"]
        totals["cpu_seconds"] += figures["cpu_seconds"]
        totals["dead_letters"] += result.dead_letters
        totals["skipped"] += result.skipped
        if number % every == 0:
            series.append(sample(number, len(unit), figures))
    if series and series[-1]["unit"] != number:
        series.append(sample(number, len(unit), figures))
    table_events = {s: spark.table(names.mirror(s)).count() for s in KINDS[view]}
    full_spark, spark_figures = meter.measure("spark full recompute", lambda: processor.maintainers[0].recompute().count(), commits=False)
    con = lake_connection(settings, sources)
    try:
        sql = duckdb_sql(checked_sql(plan.definition.sql, plan.finality, sources))
        clock = time.perf_counter()
        full_duckdb = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
        duckdb_seconds = time.perf_counter() - clock
    finally:
        con.close()
    store.close()
    cores = args.cores
    return {
        "view": view,
        "units": number + 1,
        "events": totals["events"],
        "dead_letters": totals["dead_letters"],
        "skipped": totals["skipped"],
        "seconds": round(totals["seconds"], 1),
        "cpu_seconds": round(totals["cpu_seconds"], 1),
        "events_per_second": round(totals["events"] / totals["seconds"]),
        "events_per_second_per_core": round(totals["events"] / totals["seconds"] / cores),
        "events_per_cpu_second": round(totals["events"] / totals["cpu_seconds"]),
        "table_events": table_events,
        "view_rows": full_spark,
        "full_recompute": {"spark_seconds": spark_figures["seconds"], "duckdb_seconds": round(duckdb_seconds, 2), "duckdb_rows": full_duckdb},
        "series": series,
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        f"# Event streams ({results['started']}, {results['machine']})",
        "",
        f"{results['args']['events']:,} page views generated (profile views and searches a quarter of that each, clicks ~1 per search), "
        f"in units of ~{results['args']['unit']:,}; the local state and direct commits, as ingest runs.",
        "",
        "| view | events | units | events/s | per core | per CPU-second | events kept (first → last sample) | view rows kept | state file | driver memory | Spark full recompute | DuckDB full recompute |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in results["kinds"]:
        first, last = k["series"][0], k["series"][-1]
        kept = f"{sum(first['state_events'].values()):,} → {sum(last['state_events'].values()):,}"
        rows = f"{first['state_view_rows']:,} → {last['state_view_rows']:,}"
        size = f"{first['state_bytes'] / 2**20:.1f} → {last['state_bytes'] / 2**20:.1f} MiB"
        memory = f"{first['driver_resident_bytes'] / 2**20:.0f} → {last['driver_resident_bytes'] / 2**20:.0f} MiB"
        full = k["full_recompute"]
        lines.append(
            f"| {k['view']} | {k['events']:,} | {k['units']} | {k['events_per_second']:,} | {k['events_per_second_per_core']:,} | "
            f"{k['events_per_cpu_second']:,} | {kept} | {rows} | {size} | {memory} | {full['spark_seconds']:.1f} s | {full['duckdb_seconds']:.1f} s |"
        )
    lines += ["", "State over the stream (events kept / view rows kept / MiB), per sample:", ""]
    for k in results["kinds"]:
        points = ", ".join(f"{sum(p['state_events'].values()):,}/{p['state_view_rows']:,}/{p['state_bytes'] / 2**20:.0f}" for p in k["series"])
        lines.append(f"- {k['view']}: {points}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="page views (the other streams scale with it)")
    parser.add_argument("--unit", type=int, default=50_000, help="events per unit (an ingest batch)")
    parser.add_argument("--span-hours", type=int, default=48, help="event time the stream covers")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--repos", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cores", type=int, default=2, help="cores of the machine (for events/s per core)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--root", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    console = Console()
    root = args.root or Path(tempfile.mkdtemp(prefix="lakemv-bench-events-"))
    out = RESULTS / f"events-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": f"{platform.machine()}, {args.cores} cores",
                               "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "kinds": []}  # fmt: skip
    try:
        for view in args.kinds:
            results["kinds"].append(run_kind(view, args, root, console))
            (out / "results.json").write_text(json.dumps(results, indent=2))
            (out / "report.md").write_text(report(results))
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    console.print(report(results))
    console.print(f"results: {out}/results.json, report: {out}/report.md")


if __name__ == "__main__":
    main()
