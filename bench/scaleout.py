"""Scale-out benchmark: the same ingest on `local[*]` and on the loopback scale-out stack, side by side.

    .venv/bin/python -m bench.scaleout --users 20000 --rounds 4 --workers 1 2 3

One generated GitHub workload (a snapshot round, then rounds of changes) is ingested by the real CLI,
one `lakemv ingest --once` per round, in each configuration:

- `local[*]`, the warehouse on the local disk, the SQLite catalog (the embedded default);
- `local[*]`, the warehouse in the object store (s3proxy) and the REST catalog: what the object
  store and the catalog cost, Spark unchanged;
- a Spark standalone cluster of N workers (one core and 2 GiB each), object store and REST catalog:
  what executors cost (task serialisation, shuffles and results over the network, jars shipped).

Per run: the wall time of the command (JVM, session, catalog, executors) and of its batches (from
its own report). Per configuration, side by side on the same lake: the full recompute of
`user_profile` in Spark (on that configuration's Spark) and in DuckDB (through that catalog and
store). And the unit costs underneath: a catalog round trip (pyiceberg `load_table`), an object-store
PUT and GET of a small file. Writes bench/results/scaleout-<time>/results.json and report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings

LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")
RESULTS = PROJECT_ROOT / "bench" / "results"
BATCH = re.compile(r"batch [\d.]+(?: \([^)]*\))*: .*?, ([\d.]+)s")  # `batch 0.1 (set-wise): ..., 3.21s`
VIEW = "user_profile"


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([LAKEMV, *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lakemv {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return took, " ".join(done.stdout.split("\n"))


def _batch_seconds(output: str) -> list[float]:
    """The seconds of each batch, from ingest's report lines (`batch N: ..., 3.21s`)."""
    return [float(m.group(1)) for m in BATCH.finditer(" ".join(output.split()))]


def _spark_recompute(env: dict[str, str]) -> float:
    """The view's full recompute (its SQL over the mirrors, every row) on the configuration's Spark."""
    done = subprocess.run([sys.executable, "-m", "bench.scaleout", "--recompute"], env=env, capture_output=True, text=True, cwd=PROJECT_ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the Spark recompute failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _recompute_here() -> None:
    """(--recompute, in a child process with the configuration's settings) print the seconds."""
    from lakemv.catalog.tables import TableNames
    from lakemv.flows.context import Lake
    from lakemv.spark.views.maintain import ViewMaintainer

    lake = Lake.at()
    view = ViewMaintainer(lake.spark(), TableNames(lake.settings.catalog_name), lake.sources, lake.plans[VIEW])
    view.recompute().count()  # a first run: plans, reads the catalog, warms the executors
    started = time.perf_counter()
    view.recompute().count()
    print(round(time.perf_counter() - started, 3))


def _duckdb_recompute(settings: LakeSettings) -> tuple[float, int]:
    from lakemv.catalog.declarations import load_sources
    from lakemv.duck.query import lake_connection
    from lakemv.duck.verify import duckdb_sql
    from lakemv.flows.context import Lake

    lake = Lake(settings)
    sources = load_sources(settings.sources_dirs)
    started = time.perf_counter()
    con = lake_connection(settings, sources)
    rows = con.execute(f"SELECT count(*) FROM ({duckdb_sql(lake.plans[VIEW].definition.sql)})").fetchone()[0]
    con.close()
    return time.perf_counter() - started, rows


def _unit_costs(settings: LakeSettings) -> dict[str, float]:
    """Median milliseconds of one catalog round trip and, in an object store, of a small PUT and GET."""
    from lakemv.catalog.lake import pyiceberg_catalog

    catalog = pyiceberg_catalog(settings)
    loads = []
    for _ in range(20):
        started = time.perf_counter()
        catalog.load_table(("views", VIEW))
        loads.append(time.perf_counter() - started)
    costs = {"catalog_load_table_ms": round(statistics.median(loads) * 1000, 2)}
    if settings.remote:
        place = settings.lake / "_bench" / "probe.bin"
        puts, gets = [], []
        for _ in range(20):
            started = time.perf_counter()
            place.write_bytes(b"x" * 4096)
            puts.append(time.perf_counter() - started)
            started = time.perf_counter()
            place.read_bytes()
            gets.append(time.perf_counter() - started)
        place.remove()
        costs |= {"s3_put_4k_ms": round(statistics.median(puts) * 1000, 2), "s3_get_4k_ms": round(statistics.median(gets) * 1000, 2)}
    return costs


def run_config(name: str, env: dict[str, str], staging: Path, root: Path, rounds: int) -> dict[str, Any]:
    landing = root / "landing"
    shutil.rmtree(landing, ignore_errors=True)
    runs = []
    for number in range(rounds):
        for path in sorted(staging.glob(f"*/r{number:04d}-*.json")):
            target = landing / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        took, output = _run(["ingest", "--landing", str(landing), "--once"], env)
        batches = _batch_seconds(output)
        runs.append({"round": number, "seconds": round(took, 2), "batch_seconds": batches})
        print(f"  {name}: round {number}: {took:.1f}s (batches {', '.join(f'{b:.1f}s' for b in batches)})", flush=True)
    settings = LakeSettings.of_environment(env)
    spark_full = _spark_recompute(env)
    duck_seconds, duck_rows = _duckdb_recompute(settings)
    print(f"  {name}: full recompute Spark {spark_full:.1f}s, DuckDB {duck_seconds:.1f}s ({duck_rows} rows)", flush=True)
    return {
        "config": name,
        "runs": runs,
        "full_recompute": {"spark_seconds": spark_full, "duckdb_seconds": round(duck_seconds, 2), "rows": duck_rows},
        "unit_costs": _unit_costs(settings),
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        f"# Scale-out bench, {results['started']}",
        "",
        f"{results['users']:,} users, {results['rounds']} rounds ({results['events']:,} events); one `lakemv ingest --once` per round; "
        f"machine: {os.cpu_count()} cores.",
        "",
        "| configuration | snapshot run (its batch) | change rounds, mean run (mean batch) | Spark full recompute | DuckDB full recompute | catalog load_table | S3 PUT / GET 4 KiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in results["configs"]:
        first, rest = c["runs"][0], c["runs"][1:]
        run_mean = statistics.mean(r["seconds"] for r in rest) if rest else 0.0
        batch_mean = statistics.mean(b for r in rest for b in r["batch_seconds"]) if rest and any(r["batch_seconds"] for r in rest) else 0.0
        costs = c["unit_costs"]
        s3 = f"{costs['s3_put_4k_ms']} / {costs['s3_get_4k_ms']} ms" if "s3_put_4k_ms" in costs else "-"
        lines.append(
            f"| {c['config']} | {first['seconds']:.1f} s ({sum(first['batch_seconds']):.1f} s) | {run_mean:.1f} s ({batch_mean:.1f} s) | "
            f"{c['full_recompute']['spark_seconds']:.1f} s | {c['full_recompute']['duckdb_seconds']:.1f} s | {costs['catalog_load_table_ms']} ms | {s3} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    if "--recompute" in sys.argv:
        _recompute_here()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--root", type=Path, default=Path("/tmp/lakemv-scaleout-bench"))
    args = parser.parse_args()

    from lakemv.ops.cluster import Cluster, ClusterConfig

    shutil.rmtree(args.root, ignore_errors=True)
    staging = args.root / "staging"
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAKEMV_")}
    _run(["generate", "--out", str(staging), "--users", str(args.users), "--rounds", str(args.rounds)], base)
    events = sum(1 for path in staging.glob("*/*.json") for _ in path.open(encoding="utf-8"))
    results: dict[str, Any] = {
        "started": datetime.now().isoformat(timespec="seconds"), "users": args.users, "rounds": args.rounds, "events": events, "configs": [],
    }  # fmt: skip
    print(f"{events:,} events in {args.rounds} rounds", flush=True)

    folder = args.root / "local"
    env = {**base, "LAKEMV_WAREHOUSE": str(folder / "wh"), "LAKEMV_SPARK_MASTER": "local[*]"}
    results["configs"].append(run_config("local[*], local disk, SQLite catalog", env, staging, folder, args.rounds))
    for workers in (0, *args.workers):
        folder = args.root / f"cluster-{workers}"
        cluster = Cluster(ClusterConfig(folder / "cluster", workers=max(workers, 1), worker_cores=1, worker_memory="2g"))
        try:
            cluster.up(spark=workers > 0)
            env = {**base, **cluster.config.settings_env(spark=workers > 0), "LAKEMV_LOCAL_DIR": str(folder / "driver")}
            name = f"{workers} worker{'s' if workers > 1 else ''} x 1 core, S3 + REST" if workers else "local[*], S3 + REST catalog"
            results["configs"].append(run_config(name, env, staging, folder, args.rounds))
        finally:
            cluster.down(purge=True)

    out = RESULTS / f"scaleout-{datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "report.md").write_text(report(results))
    print(report(results))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
