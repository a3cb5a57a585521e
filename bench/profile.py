"""Where a batch's time goes: the same change batches against the same lake, step by step, with an
optional JVM profile. For before/after figures of one optimization, run it before and after.

    .venv/bin/python -m bench.profile --users 100000              # 1 warm-up + 3 measured batches
    .venv/bin/python -m bench.profile --users 100000 --jfr        # ... plus where the JVM's CPU went
    .venv/bin/python -m bench.profile --users 100000 --conf spark.sql.adaptive.enabled=false
    .venv/bin/python -m bench.profile --users 100000 --views 32   # the many-views measure, view by view
    .venv/bin/python -m bench.profile --users 100000 --whole      # each view recomputed whole and diffed,
                                                                  # then Spark's and DuckDB's full recomputes
    .venv/bin/python -m bench.profile --users 100000 --views 32 --freshness '1 hour'   # 31 of them waiting

The first run loads the snapshot and keeps a pristine copy of the lake under `--root`; later runs
restore it, so every run measures identical batches on identical tables. Prints per-batch step
seconds (parse, plan, mirrors, views: keys / rows / recompute / diff / feed / merge, ledger) and the
medians; with `--jfr`, Java Flight Recorder samples grouped by what the JVM was doing.
"""

from __future__ import annotations

import argparse
import collections
import json
import pickle
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.suite import RESULTS, Scale
from lakemv.core.batch import choice
from lakemv.core.durations import parse_duration
from lakemv.spark.batch.runner import VIEW_WORKERS

CATEGORIES = (  # first match wins, over the whole sampled stack
    ("code generation (Janino)", ("org.codehaus.janino", "CodeGenerator")),
    ("query analysis and optimization", ("catalyst.analysis", "catalyst.optimizer", "catalyst.parser")),
    ("Iceberg metadata (manifests, Avro)", ("org.apache.iceberg.avro", "ManifestReader", "ManifestGroup")),
    ("Parquet and Arrow reads", ("org.apache.iceberg.parquet", "org.apache.iceberg.arrow", "org.apache.parquet")),
    ("shuffle and sort", ("shuffle", "UnsafeExternalSorter", "UnsafeExternalRowSorter")),
    ("hash joins and aggregates", ("HashedRelation", "HashAggregate", "BytesToBytesMap")),
    ("Parquet writes", ("ParquetWriter", "parquet.hadoop", "ColumnWriter")),
    ("Python exchange (Arrow batches)", ("api.python", "ArrowConverters", "collectAsArrowToPython")),
)


def jfr_summary(recording: Path) -> list[tuple[str, float]]:
    """Share of execution samples per category."""
    text = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "96", str(recording)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    counts: collections.Counter[str] = collections.Counter()
    samples = text.split("jdk.ExecutionSample")[1:]
    for sample in samples:
        stack = " ".join(re.findall(r"^\s+([\w.$<>]+)\(", sample, re.M))
        counts[next((name for name, marks in CATEGORIES if any(m in stack for m in marks)), "other")] += 1
    return [(name, n / max(1, len(samples))) for name, n in counts.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lakemv-profile"))
    parser.add_argument("--jfr", action="store_true", help="record the measured batches with Java Flight Recorder")
    parser.add_argument("--conf", action="append", default=[], help="a Spark SQL conf key=value for the measured batches")
    parser.add_argument("--scan", action="store_true", help="without the local state (every lookup scans Iceberg)")
    parser.add_argument("--no-direct", action="store_true", help="with the local state, but Spark MERGEs instead of direct commits")
    parser.add_argument("--views", type=int, default=1, help="maintain this many views (bench.suite's copies of every shape)")
    parser.add_argument("--whole", action="store_true", help="every batch recomputes its views whole (as the end of a large backlog does)")
    parser.add_argument("--freshness", help="with --views: every view but user_profile waits for this budget, e.g. '1 hour'")
    args = parser.parse_args()
    console = Console()
    work, pristine = args.root / f"users-{args.users}", args.root / f"pristine-{args.users}"
    if pristine.exists():  # same absolute paths: the catalog's metadata locations stay valid
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["cp", "-a", str(pristine), str(work)], check=True)
    settings = argparse.Namespace(seed=42, load_chunk=500_000, scan=args.scan, no_direct=args.no_direct, view_workers=VIEW_WORKERS,
                                  repeat=args.batches)  # fmt: skip
    if args.whole:  # before any view is built: a view reads its priors once
        choice.PRIORS = choice.ALWAYS_WHOLE
    scale = Scale(args.users, args.root, settings, console)
    if not pristine.exists():
        scale.load()
        (work / "workload.pickle").write_bytes(pickle.dumps(scale.workload))
        scale.spark.catalog.clearCache()
        subprocess.run(["cp", "-a", str(work), str(pristine)], check=True)
    else:
        scale.workload = pickle.loads((work / "workload.pickle").read_bytes())  # noqa: S301 - our own file
        scale.build()
    if args.views > 1:
        scale.many(args.views, parse_duration(args.freshness) if args.freshness else None)
    for item in args.conf:
        key, _, value = item.partition("=")
        scale.spark.conf.set(key, value)
    pid = scale.meter.jvm_pid
    recording = args.root / "batches.jfr"
    measured = []
    for number in range(args.batches + 1):
        if number == 1 and args.jfr:
            subprocess.run(["jcmd", str(pid), "JFR.start", "name=lakemv", "settings=profile", f"filename={recording}"],
                           check=True, capture_output=True)  # fmt: skip
        figures = scale.batch("warm-up" if number == 0 else f"batch {number}", scale.workload.change_round(args.changes))
        if number:
            measured.append(figures)
    if args.jfr:
        subprocess.run(["jcmd", str(pid), "JFR.stop", "name=lakemv"], check=True, capture_output=True)

    full = scale.full_recomputes() if args.whole else None  # side by side: what a user would run instead

    steps = sorted({k for b in measured for k in b["steps"]} | {f"view {k}" for b in measured for k in b["view_steps"]},
                   key=lambda k: (k.startswith("view "), k))  # fmt: skip
    table = Table("step", *[f"batch {i + 1}" for i in range(len(measured))], "median", title=f"{args.users:,} users")
    for step in ["seconds", "cpu_seconds", "keys_affected", *steps]:
        values = [b[step] if step in b else b["view_steps" if step.startswith("view ") else "steps"].get(step.removeprefix("view "), 0.0)
                  for b in measured]  # fmt: skip
        table.add_row(step, *[f"{v:,.3f}" if isinstance(v, float) else f"{v:,}" for v in values], f"{statistics.median(values):,.3f}")
    console.print(table)
    if args.views > 1:
        by_view = Table("view", "keys", "median s", "steps (median s)", title="view by view")
        for name in measured[0]["per_view"]:
            runs = [b["per_view"][name] for b in measured if name in b["per_view"]]
            kinds = sorted({k for r in runs for k in r["steps"]})
            steps = ", ".join(f"{k} {statistics.median(r['steps'].get(k, 0.0) for r in runs):.2f}" for k in kinds)
            by_view.add_row(name, f"{statistics.median(r['keys'] for r in runs):,.0f}", f"{statistics.median(r['seconds'] for r in runs):.3f}", steps)
        console.print(by_view)
    summary = {"users": args.users, "conf": args.conf, "views": args.views, "whole": args.whole, "freshness": args.freshness, "batches": measured,
               "median_seconds": statistics.median(b["seconds"] for b in measured),
               "median_cpu_seconds": statistics.median(b["cpu_seconds"] for b in measured)}  # fmt: skip
    if full is not None:
        summary["full_recomputes"] = full
    if args.jfr:
        summary["jvm_profile"] = jfr_summary(recording)
        for name, share in summary["jvm_profile"]:
            console.print(f"{share:6.1%}  {name}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"profile-{args.users}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(summary, indent=2))
    console.print(f"median {summary['median_seconds']:.2f}s wall, {summary['median_cpu_seconds']:.2f} CPU s; results: {out}")


if __name__ == "__main__":
    main()
