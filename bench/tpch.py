"""TPC-H's queries as views, maintained through refresh rounds, beside Spark's and DuckDB's full runs.

Loads dbgen's tables at `--scale` as a Debezium snapshot through `ingest --once` (which builds the
views of views/tpch), then runs `--rounds` refresh rounds (TPC-H's RF1 and RF2 plus updates of the
columns the queries join on: lakemv.workload.tpch). Per round and query: the seconds lakemv's batch
spent maintaining the view, against Spark's full run of the view (written to an Iceberg table) and
DuckDB's (written to Parquet) over the same mirrors; after every round `verify` checks every view. A
query answered by views over views (Q11, Q13, Q15, Q22) is timed as its DAG's maintenance (the view
and every view it reads) against the full runs of the query as TPC-H writes it.

    .venv/bin/python -m bench.tpch --scale 0.1 --rounds 3

Writes bench/results/tpch-<time>/results.json and report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.planner.dag import plan_views
from lakemv.core.planner.definitions import load_views
from lakemv.duck.query import lake_connection
from lakemv.duck.verify import duckdb_sql, verify_plan
from lakemv.spark.session import get_spark
from lakemv.spark.stream.files import run_ingest
from lakemv.spark.views.maintain import ViewMaintainer
from lakemv.workload.tpch import ORIGINALS, VIEWS_DIR, TpchConfig, TpchWorkload, write_round

RESULTS = PROJECT_ROOT / "bench" / "results"


def timed(work: Any) -> float:
    started = time.perf_counter()
    work()
    return round(time.perf_counter() - started, 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor (dbgen)")
    parser.add_argument("--rounds", type=int, default=3, help="refresh rounds after the snapshot")
    parser.add_argument("--orders", type=int, default=None, help="orders RF1 inserts and RF2 deletes per round (default: 0.1%% of them)")
    parser.add_argument("--updates", type=int, default=None, help="updates of each kind per round (default: as many as --orders)")
    parser.add_argument("--root", type=Path, default=None, help="work folder (default: a temporary one, removed after)")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    root = args.root or Path(tempfile.mkdtemp(prefix="lakemv-tpch-"))
    started = datetime.now(UTC)
    orders = args.orders or max(4, int(1_500_000 * args.scale * 0.001))
    workload = TpchWorkload(TpchConfig(scale=args.scale, rounds=args.rounds, orders_per_round=orders, updates_per_round=args.updates or orders))
    sources = workload.sources
    settings = LakeSettings(warehouse=str(root / "warehouse"), catalog_name="tpch", local_dir=root / "local")
    spark = get_spark(settings)
    names = TableNames(settings.catalog_name)
    planned = plan_views(load_views([VIEWS_DIR]), sources)  # each view after the views it reads
    plans = list(planned.values())
    landing = root / "landing"
    rounds: list[dict[str, Any]] = []
    try:
        for number, events in enumerate(workload.rounds()):
            write_round(landing, number, events, sources)
            changes = sum(len(e) for e in events.values())
            clock = time.perf_counter()
            result = run_ingest(spark, settings, sources, landing, once=True, views=plans)
            ingest_seconds = round(time.perf_counter() - clock, 3)
            maintained = {v: round(r.seconds, 3) for b in result.batches for v, r in b.views.items()}
            figures: dict[str, Any] = {"round": number, "changes": changes, "ingest_seconds": ingest_seconds, "queries": {}}
            figures["views"] = maintained
            figures["how"] = {v: r.as_json() for b in result.batches for v, r in b.views.items()}  # each view's choice, its reason and steps
            for plan in plans:  # a query answered by views over views: its DAG's maintenance against the query's full runs
                dag = [plan.name, *upstream_of(planned, plan.name)] if plan.name in ORIGINALS else [plan.name]
                spent = [maintained[v] for v in dag if v in maintained]
                incremental = round(sum(spent), 3) if spent else None
                figures["queries"][plan.name] = {"incremental": incremental, **full_runs(spark, settings, names, sources, plan, root)}
                if len(dag) > 1:
                    figures["queries"][plan.name]["dag"] = dag
                verified = verify_plan(settings, sources, plan)
                ok = not isinstance(verified, str) and verified.ok
                figures["queries"][plan.name]["verified"] = ok
                if not ok:
                    console.print(f"[red]{escape(plan.name)}: {escape(verified if isinstance(verified, str) else verified.summary())}[/]")
            what = "snapshot" if number == 0 else f"refresh round {number}"
            console.print(f"{what}: {changes:,} changes, ingest --once {ingest_seconds}s")
            rounds.append(figures)
    finally:
        spark.stop()
    out = write_results(args, started, rounds, console)
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    console.print(f"results: {out}")


def upstream_of(plans: Mapping[str, Any], name: str) -> list[str]:
    """The views `name` reads, through others too."""
    found: list[str] = []
    for view in plans[name].upstream:
        found += [v for v in (view, *upstream_of(plans, view)) if v not in found]
    return found


def full_runs(spark: Any, settings: LakeSettings, names: TableNames, sources: Any, plan: Any, root: Path) -> dict[str, float]:
    """Seconds of Spark's full run of the view written to an Iceberg table, and of DuckDB's written to Parquet;
    of a query answered by views over views, of the query as TPC-H writes it, from the mirrors."""
    scratch = f"{settings.catalog_name}.views.bench_full_{plan.name}"
    original = ORIGINALS.get(plan.name)
    if original is None:
        maintainer = ViewMaintainer(spark, names, sources, plan)
        spark_seconds = timed(lambda: maintainer.recompute().writeTo(scratch).using("iceberg").createOrReplace())
    else:
        for table, source in sources.items():
            spark.sql(live_rows_sql(names, source)).createOrReplaceTempView(table)
        spark_seconds = timed(lambda: spark.sql(original).writeTo(scratch).using("iceberg").createOrReplace())
        for table in sources:
            spark.catalog.dropTempView(table)
    spark.sql(f"DROP TABLE IF EXISTS {scratch} PURGE")
    out, sql = root / f"duckdb_{plan.name}.parquet", duckdb_sql(original or plan.definition.sql)
    read = {**sources, **{v.name: v for v in plan.inputs}}

    def duckdb_full() -> None:
        con = lake_connection(settings, read, views=False)
        try:
            con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
        finally:
            con.close()

    return {"spark_full": spark_seconds, "duckdb_full": timed(duckdb_full)}


def write_results(args: argparse.Namespace, started: datetime, rounds: list[dict[str, Any]], console: Console) -> Path:
    folder = RESULTS / f"tpch-{started.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    refreshes = rounds[1:]
    summary = {}
    for name in rounds[0]["queries"]:
        runs = [r["queries"][name] for r in refreshes]
        incremental = [q["incremental"] for q in runs if q["incremental"] is not None]
        summary[name] = {
            "incremental_median": round(statistics.median(incremental), 3) if incremental else None,
            "spark_full_median": round(statistics.median(q["spark_full"] for q in runs), 3) if runs else None,
            "duckdb_full_median": round(statistics.median(q["duckdb_full"] for q in runs), 3) if runs else None,
            "verified": all(r["queries"][name]["verified"] for r in rounds),
        }
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    data = {"benchmark": "tpch", "started": started.isoformat(), "machine": machine, "scale": args.scale, "rounds": rounds, "summary": summary}
    (folder / "results.json").write_text(json.dumps(data, indent=2))
    table = Table(title=f"TPC-H sf {args.scale}: a refresh round's view maintenance against full runs (medians of {len(refreshes)} rounds)")
    for column in ("query", "incremental s", "Spark full s", "DuckDB full s", "never slower than Spark's rebuild", "verify"):
        table.add_column(column)
    lines = [
        "# TPC-H as views", "", f"`bench.tpch --scale {args.scale} --rounds {args.rounds}`, {started:%Y-%m-%d %H:%M} UTC, "
        f"{machine['cpus']} CPUs. Changes per refresh round: {', '.join(str(r['changes']) for r in refreshes)}.", "",
        "| query | incremental s | Spark full s | DuckDB full s | never slower than Spark's rebuild | verify |", "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, s in summary.items():
        faster = "—" if s["incremental_median"] is None else ("yes" if s["incremental_median"] <= s["spark_full_median"] else "**no**")
        dag = rounds[0]["queries"][name].get("dag")
        shown = f"{name} (views {' + '.join(dag)}; full: the query as written)" if dag else f"{name} (full: the query as written)" if name in ORIGINALS else name
        cells = [shown, str(s["incremental_median"]), str(s["spark_full_median"]), str(s["duckdb_full_median"]), faster, "ok" if s["verified"] else "**differs**"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    (folder / "report.md").write_text("\n".join(lines) + "\n")
    return folder


if __name__ == "__main__":
    main()
