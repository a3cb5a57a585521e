"""The engine state's batch path as built (lakemv.spark.engine), on the spike's micro-benchmark: N users'
snapshot bulk-loaded into the state, every view's digests seeded by Spark's full recompute, then
1k-change batches through the built steps - the rows written by key and index, the keys they reach,
the rows those read, every view recomputed by its kept plan and diffed - timed step by step (wall,
driver-Python CPU, JVM CPU). Run once with `--views 1` and once with `--views 100`: one more view costs
(median 100-view batch - median 1-view batch) / 99. The Iceberg writes of the changed rows are not
built yet, so they are not in these figures (the spike measured them: docs/architecture.md).

    .venv/bin/python -m bench.engine_batch --users 100000 --views 1
    .venv/bin/python -m bench.engine_batch --users 100000 --views 100

writes bench/results/engine-batch-<time>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
from datetime import datetime
from pathlib import Path

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.core.planner.definitions import load_views
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import WorkloadConfig, generate_files
from lakemv.workload.shapes import copies

from bench.spike_state import Timer

TABLES = ("users", "repos", "pull_requests", "stars", "payment_info")


def _typed(source, image):
    """A parsed image's columns in the mirror's types (Debezium sends times as micros, millis or ISO text)."""
    from pyspark.sql import functions as F

    typed = {"micros": F.timestamp_micros, "millis": F.timestamp_millis, "iso": F.to_timestamp}
    return [
        (typed[c.wire_encoding](image[c.name]) if c.type == "timestamp" and c.wire_encoding in typed else image[c.name].cast(c.spark_type)).alias(
            c.name
        )
        for c in source.columns
    ]


def _image_schema(source) -> str:
    kinds = {"timestamp": "BIGINT"}
    return "STRUCT<" + ", ".join(f"`{c.name}`: {'STRING' if c.encoding == 'iso' else kinds.get(c.type, c.spark_type)}" for c in source.columns) + ">"


def latest(spark, source, folder: Path):
    """A table's landing lines (Debezium's schema wrapper or not) as its latest change per primary key:
    the row's columns in the mirror's types and `_lmv_deleted`."""
    from pyspark.sql import functions as F

    image = _image_schema(source)
    envelope = f"op STRING, before {image}, after {image}, source STRUCT<lsn: BIGINT, ts_ms: BIGINT>, ts_ms BIGINT"
    raw = spark.read.text(str(folder)).select(F.from_json("value", f"payload STRUCT<{envelope}>, {envelope}").alias("e"))
    e = F.coalesce(F.col("e.payload"), F.struct(*[F.col(f"e.{f}").alias(f) for f in ("op", "before", "after", "source", "ts_ms")]))
    rows = raw.select(e.alias("e")).select(
        F.coalesce(F.col("e.source.lsn"), F.col("e.source.ts_ms"), F.col("e.ts_ms")).alias("position"),
        (F.col("e.op") == "d").alias("deleted"),
        F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after")).alias("image"),
    )
    keyed = rows.select(*[F.col("image")[k].alias(f"_k_{k}") for k in source.primary_key], F.struct("position", "deleted", "image").alias("m"))
    newest = keyed.groupBy(*[f"_k_{k}" for k in source.primary_key]).agg(F.max("m").alias("m"))
    return newest.select(*_typed(source, F.col("m.image")), F.col("m.deleted").alias("_lmv_deleted"))


def per_view(walker, frame, detail: bool) -> dict[str, int] | int:
    """`frame`'s rows; with `detail`, per view (`view` column), the total under "*", largest first
    (a grouping job more a step)."""
    if not detail:
        return frame.count()
    names = {i: name for name, i in walker.ids.items()}
    counts = {names[r["view"]]: r["count"] for r in frame.groupBy("view").count().collect()}
    return {"*": sum(counts.values()), **dict(sorted(counts.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--views", type=int, default=1, help="1: user_profile alone; more: the bench suite's mixed set")
    parser.add_argument("--changes", type=int, default=1_000)
    parser.add_argument("--batches", type=int, default=4, help="the first is a warm-up")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-view", action="store_true", help="count each step's rows per view (a job more a step)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/engine-batch"))
    args = parser.parse_args()

    shutil.rmtree(args.root, ignore_errors=True)
    args.root.mkdir(parents=True)
    os.environ.setdefault("LAKEMV_DRIVER_MEMORY", "6g")
    settings = LakeSettings(warehouse=args.root / "wh", spark_master="local[2]", shuffle_partitions=args.partitions)
    sources = load_sources(settings.sources_dirs)
    shipped = load_views(settings.view_dirs)
    from lakemv.core.planner import plan_view

    plans = [plan_view(shipped["user_profile"], sources)] if args.views == 1 else copies(shipped, sources, args.views)
    results: dict = {"users": args.users, "views": len(plans), "changes": args.changes, "started": datetime.now().isoformat(timespec="seconds")}
    snapshot = args.root / "snapshot"
    workload, events, _ = generate_files(WorkloadConfig(users=args.users, seed=3, rounds=1), sources, snapshot)
    results["snapshot_events"] = events

    from lakemv.core.sql.viewsql import recompute_sql
    from lakemv.spark.engine.keyed import KeyedStore
    from lakemv.spark.engine.views import Recompute
    from lakemv.spark.engine.walk import Walker
    from lakemv.spark.session import get_spark
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    spark = get_spark(settings)
    with Timer(results, "engine_made"):
        walker = Walker.of(KeyedStore(spark, str(args.root / "state"), args.partitions), plans, sources)
        recompute = Recompute(walker)
    with Timer(results, "snapshot_parse", events):
        tables = {
            t: latest(spark, sources[t], snapshot / t).where(~F.col("_lmv_deleted")).drop("_lmv_deleted").persist(StorageLevel.MEMORY_AND_DISK)
            for t in TABLES
        }
        results["snapshot_rows"] = sum(frame.count() for frame in tables.values())
    with Timer(results, "bulk_load", events):
        results["state_entries"] = walker.load(tables, 0)
    for table, frame in tables.items():
        frame.createOrReplaceTempView(f"snap_{table}")
    with Timer(results, "seed_by_full_recompute", len(plans)):
        live = {t: f"snap_{t}" for t in sources}
        results["view_rows"] = recompute.seed({name: spark.sql(recompute_sql(plan, live)) for name, plan in recompute.plans.items()}, 1)
    version = 2
    schemas = {name: connect_schema(source) for name, source in sources.items()}
    rng = random.Random(5)
    batches = []
    for n in range(args.batches):
        landing = args.root / f"changes-{n}"
        count = 0
        for table, table_events in workload.change_round(args.changes).items():
            write_landing_files(landing, table, table_events, schemas[table], rng, "c", files=1)
            count += len(table_events)
        label = f"batch_{n}"
        with Timer(results, label, count):
            with Timer(results, f"{label}.apply"):
                changes = {t: latest(spark, sources[t], landing / t) for t in TABLES if (landing / t).exists()}
                images, version = walker.apply(changes, version)
            with Timer(results, f"{label}.reach"):
                keys = walker.reach_packed(images, version)
                results[f"{label}.keys"] = per_view(walker, keys, args.per_view)
            with Timer(results, f"{label}.gather"):
                gathered = walker.keep(walker.gather(keys, version))
                results[f"{label}.gathered"] = per_view(walker, gathered, args.per_view)
            with Timer(results, f"{label}.recompute", len(plans)):
                rows = walker.keep(recompute.run(gathered, keys))
                results[f"{label}.recomputed"] = per_view(walker, rows, args.per_view)
            with Timer(results, f"{label}.diff", len(plans)):
                results[f"{label}.changed"] = recompute.diff(rows, keys, version).count()
            version += 1
            walker.release()
        if n:
            batches.append(results[label]["seconds"])
    results["median_batch_seconds"] = statistics.median(batches) if batches else None
    results["finished"] = datetime.now().isoformat(timespec="seconds")
    out = Path("bench/results") / f"engine-batch-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}; median batch {results['median_batch_seconds']} s with {len(plans)} views")


if __name__ == "__main__":
    main()
