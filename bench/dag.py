"""A DAG of views over the GitHub workload, maintained batch by batch, beside full rebuilds of the DAG.

    .venv/bin/python -m bench.dag --users 100000 --rounds 4 --changes 2000

The DAG (`DAG`, with views/user_profile.sql): per-user documents (`user_profile`) and pull requests
per author (`user_prs`) read the sources; a summary of the documents (`profile_summary`), a
histogram of the authors (`pr_histogram`) and a card per user (`user_card`, a source and a view)
read them; a total over the histogram (`pr_total`) reads that. `ingest --once` loads the snapshot
and builds the views, then each refresh round (`--changes` changes of the workload) is one ingest
run: the seconds the batch's view step took (every level; a level's views side by side) and each
view's maintenance, against the seconds a user without lakemv
spends rebuilding the whole DAG after each round: every view's SQL run in full, level by level,
each written to a table its readers read (Spark: Iceberg tables; DuckDB: tables in its own
database, reading the mirrors). After the last round, `verify` checks every view.

Writes bench/results/dag-<time>/results.json and report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.planner.dag import levels, plan_views
from lakemv.core.planner.definitions import load_views, parse_view
from lakemv.duck.query import lake_connection
from lakemv.duck.verify import duckdb_sql, verify_plan
from lakemv.spark.session import get_spark
from lakemv.spark.stream.files import run_ingest
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import GitHubWorkload, WorkloadConfig

RESULTS = PROJECT_ROOT / "bench" / "results"
DAG = {
    "user_prs": """-- @key: author
SELECT author, count(*) AS prs, count_if(status = 'merged') AS merged FROM pull_requests GROUP BY author""",
    "profile_summary": """-- @key: payment_verified
SELECT payment_verified, count(*) AS users, sum(size(pull_requests)) AS prs, sum(size(starred_repos)) AS stars
FROM user_profile GROUP BY payment_verified""",
    "pr_histogram": """-- @key: prs
SELECT prs, count(*) AS authors, sum(merged) AS merged FROM user_prs GROUP BY prs""",
    "user_card": """-- @key: email
SELECT u.email, u.username, coalesce(p.prs, 0) AS prs FROM users u LEFT JOIN user_prs p ON p.author = u.username""",
    "pr_total": """-- @key: scope
SELECT 'all' AS scope, count(*) AS buckets, sum(authors) AS authors FROM pr_histogram""",
}


def dag_plans(sources: Any) -> dict[str, Any]:
    definitions = {"user_profile": load_views([PROJECT_ROOT / "views"])["user_profile"]}
    definitions.update({name: parse_view(text, name) for name, text in DAG.items()})
    return plan_views(definitions, sources)


def rebuild_spark(spark: Any, names: TableNames, sources: Any, plans: dict[str, Any]) -> float:
    """Seconds Spark takes to rebuild every view of the DAG from the mirrors, level by level."""
    started = time.perf_counter()
    for table, source in sources.items():
        spark.sql(live_rows_sql(names, source)).createOrReplaceTempView(table)
    for level in levels(plans):
        for name in level:
            scratch = f"{names.catalog}.views.bench_full_{name}"
            spark.sql(plans[name].definition.sql).writeTo(scratch).using("iceberg").createOrReplace()
            spark.table(scratch).createOrReplaceTempView(name)  # its readers read the rebuilt table
    seconds = time.perf_counter() - started
    for name in plans:
        spark.catalog.dropTempView(name)
        spark.sql(f"DROP TABLE IF EXISTS {names.catalog}.views.bench_full_{name} PURGE")
    for table in sources:
        spark.catalog.dropTempView(table)
    return round(seconds, 3)


def rebuild_duckdb(settings: LakeSettings, sources: Any, plans: dict[str, Any]) -> float:
    """Seconds DuckDB takes to rebuild every view of the DAG from the mirrors, level by level."""
    con = lake_connection(settings, sources, views=False)
    try:
        started = time.perf_counter()
        for level in levels(plans):
            for name in level:
                con.execute(f'CREATE TABLE "{name}" AS {duckdb_sql(plans[name].definition.sql)}')
        return round(time.perf_counter() - started, 3)
    finally:
        con.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4, help="refresh rounds after the snapshot")
    parser.add_argument("--changes", type=int, default=2_000, help="changes per refresh round")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--root", type=Path, default=None, help="work folder (default: a temporary one, removed after)")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    root = args.root or Path(tempfile.mkdtemp(prefix="lakemv-dag-"))
    started = datetime.now(UTC)
    settings = LakeSettings(warehouse=str(root / "warehouse"), catalog_name="dag", local_dir=root / "local")
    sources = load_sources(settings.sources_dirs)
    plans = dag_plans(sources)
    names = TableNames(settings.catalog_name)
    spark = get_spark(settings)
    workload = GitHubWorkload(WorkloadConfig(users=args.users, seed=args.seed, rounds=args.rounds + 1, changes_per_round=args.changes), sources)
    schemas = {name: connect_schema(source) for name, source in workload.sources.items()}
    landing, rounds, layout = root / "landing", [], random.Random(args.seed + 1)
    try:
        for number, events in enumerate(workload.rounds()):
            for table, table_events in events.items():
                write_landing_files(landing, table, table_events, schemas[table], layout, f"r{number:04d}", files=1 + len(table_events) // 20000)
            clock = time.perf_counter()
            result = run_ingest(spark, settings, sources, landing, once=True, views=list(plans.values()))
            ingest = round(time.perf_counter() - clock, 3)
            steps = {v: round(r.seconds, 3) for b in result.batches for v, r in b.views.items()}
            wall = sum(b.steps.get("views", 0.0) for b in result.batches)  # (views of a level run side by side: not the sum of theirs)
            figures = {"round": number, "changes": sum(len(e) for e in events.values()), "ingest_seconds": ingest, "views": steps,
                       "dag_seconds": round(wall, 3)}  # fmt: skip
            if number > 0:
                figures["spark_rebuild"] = rebuild_spark(spark, names, sources, plans)
                figures["duckdb_rebuild"] = rebuild_duckdb(settings, sources, plans)
            console.print(f"round {number}: {figures['changes']:,} changes, ingest --once {ingest}s, the DAG's maintenance {figures['dag_seconds']}s"
                          + (f", rebuilds: Spark {figures['spark_rebuild']}s, DuckDB {figures['duckdb_rebuild']}s" if number else ""))  # fmt: skip
            rounds.append(figures)
        verified = {}
        for name, plan in plans.items():
            found = verify_plan(settings, sources, plan)
            verified[name] = found if isinstance(found, str) else found.summary()
            console.print(f"  {verified[name]}")
    finally:
        spark.stop()
    out = write_results(args, started, plans, rounds, verified)
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    console.print(f"results: {out}")


def write_results(args: argparse.Namespace, started: datetime, plans: dict[str, Any], rounds: list[dict[str, Any]], verified: dict[str, str]) -> Path:
    folder = RESULTS / f"dag-{started.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    data = {"benchmark": "dag", "started": started.isoformat(), "machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
            "levels": levels(plans), "rounds": rounds, "verified": verified}  # fmt: skip
    (folder / "results.json").write_text(json.dumps(data, indent=2))
    refresh = rounds[1:]
    median = lambda values: round(statistics.median(values), 3) if values else None  # noqa: E731
    lines = [
        "# A DAG of views", "",
        f"`bench.dag --users {args.users} --rounds {args.rounds} --changes {args.changes}`, {started:%Y-%m-%d %H:%M} UTC, {machine['cpus']} CPUs.",
        f"Levels: {' | '.join(', '.join(level) for level in levels(plans))}. Snapshot: {rounds[0]['changes']:,} events, "
        f"ingested and built in {rounds[0]['ingest_seconds']} s.", "",
        "| refresh round | changes | ingest --once s | the DAG's maintenance s | Spark rebuild of the DAG s | DuckDB rebuild of the DAG s |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in refresh:
        lines.append(f"| {r['round']} | {r['changes']:,} | {r['ingest_seconds']} | {r['dag_seconds']} | {r['spark_rebuild']} | {r['duckdb_rebuild']} |")
    lines += ["", "| view | level | median maintenance s per round |", "|---|---|---|"]
    for number, level in enumerate(levels(plans)):
        for name in level:
            lines.append(f"| {name} | {number} | {median([r['views'][name] for r in refresh if name in r['views']])} |")
    lines += ["", "verify after the last round:", "", *(f"- {v}" for v in verified.values())]
    (folder / "report.md").write_text("\n".join(lines) + "\n")
    return folder


if __name__ == "__main__":
    main()
