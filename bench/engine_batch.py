"""The engine state's batch path as built (lakemv.spark.engine), on the spike's micro-benchmark: N users'
snapshot bulk-loaded into the state and into Iceberg mirrors, every view's Iceberg table made by Spark's
full recompute and its digests and row places seeded from it, then 1k-change batches, each a unit of
landing lines through the product's path (`lakemv.spark.engine.batch.EngineBatch`: the envelope SQL's
parse, the changes MERGEd into the mirrors (the tables concurrently), the rows written by key and index, the keys they reach, each view's way
(gathered, or recomputed whole over the mirrors when its keys stand for most of its tables), the rows
the gathered views read, every view recomputed and diffed, the changed rows published into the views'
tables (`publish`: one job writes every view's files, a RowDelta a view, the digests and places), the
ledger's row) - timed step by step (wall, driver-Python CPU, JVM CPU). Run once with `--views 1` and once with `--views 100`:
one more view costs (median 100-view batch - median 1-view batch) / 99. With `--batches 12` or more the
results also give the median of the later half of the batches (`settled_median_batch_seconds`): a
stream's batches once the JVM's just-in-time compilers have settled, which takes minutes.
`--event-log` adds what Spark's event log says each step ran (jobs, tasks, task CPU, GC, the longest task).
Each batch first chooses its way (`Ways.batch`, or `--way`): a batch that changes much of the tables (a
backlog) reaches no keys, and recomputes every view whole and diffs it against all of its digests.
After the batches, in the same run, every view is rebuilt by Spark (written as an Iceberg table) and by
DuckDB over the mirrors: what a user would pick instead (`batch_faster_than_*_full`: their time over
the median batch); the state's digests of every view are then checked against Spark's rebuild
(`views_differing`: keys whose digest differs) and each view's table against it (`tables_differing`:
rows in one and not the other); both 0 for every view when the batches kept them exact.

    .venv/bin/python -m bench.engine_batch --users 100000 --views 1 --event-log
    .venv/bin/python -m bench.engine_batch --users 100000 --views 100 --event-log
    .venv/bin/python -m bench.engine_batch --users 100000 --changes 900000 --batches 2   # a 1M-event backlog

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

from bench import eventlog
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
    the row's columns in the mirror's types, `_lmv_deleted` and `_lmv_position`."""
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
    return newest.select(*_typed(source, F.col("m.image")), F.col("m.deleted").alias("_lmv_deleted"), F.col("m.position").alias("_lmv_position"))


class Mirrors:
    """The tables' mirrors in Iceberg (the whole views read them), loaded from the snapshot (each batch's
    changes are MERGEd into them by the engine's unit)."""

    def __init__(self, spark, settings, sources):
        from lakemv.catalog.tables import TableNames
        from lakemv.spark.mirror import ensure_mirror, ensure_namespaces

        self.spark, self.sources, self.names = spark, sources, TableNames(settings.catalog_name)
        ensure_namespaces(spark, self.names)
        for source in sources.values():
            ensure_mirror(spark, self.names, source)

    def _rows(self, table: str, frame):
        from pyspark.sql import functions as F

        from lakemv.catalog.tables import BATCH_ID, DELETED, INGESTED_AT, OP, POSITION, SOURCE_TS

        deleted = F.col(DELETED)
        return frame.select(
            *[F.col(c.name) for c in self.sources[table].columns],
            F.col(POSITION),
            F.when(deleted, F.lit("d")).otherwise(F.lit("u")).alias(OP),
            deleted,
            F.lit(None).cast("timestamp").alias(SOURCE_TS),
            F.current_timestamp().alias(INGESTED_AT),
            F.lit(0).cast("bigint").alias(BATCH_ID),
        )

    def load(self, tables) -> None:
        for table, frame in tables.items():
            self._rows(table, frame).writeTo(self.names.mirror(table)).append()

    def live(self) -> dict[str, str]:
        """Temp views of every mirror's live rows (table -> name)."""
        from lakemv.spark.engine.batch import live_views

        return live_views(self.spark, self.names, self.sources, "live_")


def duckdb_full(settings, sources, plans) -> int:
    """Every view of `plans` rebuilt by DuckDB over the Iceberg mirrors (their live rows), each a table
    of its rows; the rows it made."""
    from lakemv.duck.query import lake_connection
    from lakemv.duck.verify import duckdb_sql

    con = lake_connection(settings, sources, views=False)
    try:
        rows = 0
        for plan in plans:
            con.execute(f'CREATE TEMP TABLE "full_{plan.name}" AS {duckdb_sql(plan.definition.sql)}')
            rows += con.execute(f'SELECT count(*) FROM "full_{plan.name}"').fetchone()[0]
        return rows
    finally:
        con.close()


def per_view(counts: dict[str, int], detail: bool) -> dict[str, int] | int:
    """Rows counted per view (`Recompute.counts`): their total, with `detail` also per view, largest first."""
    total = sum(counts.values())
    return {"*": total, **dict(sorted(counts.items(), key=lambda kv: -kv[1]))} if detail else total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--views", type=int, default=1, help="1: user_profile alone; more: the bench suite's mixed set")
    parser.add_argument("--changes", type=int, default=1_000)
    parser.add_argument("--batches", type=int, default=4, help="the first is a warm-up")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-view", action="store_true", help="report each step's rows per view (counted per view anyway: the choice reads them)")
    parser.add_argument("--event-log", action="store_true", help="Spark's event log on: each step's jobs, tasks, CPU and GC in the results")
    parser.add_argument(
        "--way", choices=("auto", "whole", "incremental"), default="auto", help="a batch's way: chosen by its changed rows, or pinned"
    )
    parser.add_argument(
        "--flight-recording",
        type=Path,
        help="a Java Flight Recording (profile settings) of batches 1 on, written here: a profile, its timings slowed",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/engine-batch"))
    args = parser.parse_args()

    shutil.rmtree(args.root, ignore_errors=True)
    args.root.mkdir(parents=True)
    os.environ.setdefault("LAKEMV_DRIVER_MEMORY", "6g")
    if args.event_log:
        os.environ["LAKEMV_SPARK_CONF"] = json.dumps(
            {**json.loads(os.environ.get("LAKEMV_SPARK_CONF") or "{}"), **eventlog.conf(args.root / "events")}
        )
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
    from lakemv.spark.engine.publish import ViewTables
    from lakemv.spark.mirror import ensure_view_namespace
    from lakemv.spark.engine.views import Recompute
    from lakemv.spark.engine.walk import Walker
    from lakemv.spark.session import get_spark
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    spark = get_spark(settings)

    def step(name: str, count: int | None = None) -> Timer:
        spark.sparkContext.setJobDescription(name)  # the event log's jobs by step
        return Timer(results, name, count)

    with step("engine_made"):
        walker = Walker.of(KeyedStore(spark, str(args.root / "state"), args.partitions), plans, sources)
        recompute = Recompute(walker)
    with step("snapshot_parse", events):
        tables = {t: latest(spark, sources[t], snapshot / t).where(~F.col("_lmv_deleted")).persist(StorageLevel.MEMORY_AND_DISK) for t in TABLES}
        table_rows = {t: frame.count() for t, frame in tables.items()}
        results["snapshot_rows"] = sum(table_rows.values())
    with step("mirrors_load", events):
        mirrors = Mirrors(spark, settings, sources)
        mirrors.load(tables)
    with step("bulk_load", events):
        results["state_entries"] = walker.load({t: frame.drop("_lmv_deleted") for t, frame in tables.items()}, 0)
        tables = {t: frame.drop("_lmv_deleted", "_lmv_position") for t, frame in tables.items()}
    for table, frame in tables.items():
        frame.createOrReplaceTempView(f"snap_{table}")
    with step("seed_by_full_recompute", len(plans)):
        live = {t: f"snap_{t}" for t in sources}
        ensure_view_namespace(spark, mirrors.names)
        view_tables = ViewTables(recompute, {name: mirrors.names.view(f"engine_{name}") for name in recompute.plans})
        view_tables.create({name: spark.sql(recompute_sql(plan, live)) for name, plan in recompute.plans.items()})
        view_rows = view_tables.seed(1)
        results["view_rows"] = sum(view_rows.values())
    from lakemv.core.batch.journal import BatchRef
    from lakemv.spark.bulk import Lines
    from lakemv.spark.engine.batch import EngineBatch, UnitVersions
    from lakemv.spark.tables import ensure_dead_letters, ensure_ledger

    ensure_ledger(spark, mirrors.names)
    ensure_dead_letters(spark, mirrors.names)
    ways = recompute.ways(table_rows, view_rows)
    engine = EngineBatch(
        mirrors.names, sources, recompute, view_tables, ways, results["state_entries"], UnitVersions(args.root / "units.json", 2), way=args.way
    )
    schemas = {name: connect_schema(source) for name, source in sources.items()}
    rng = random.Random(5)
    batches = []
    recording = None
    codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    for n in range(args.batches):
        if n == 1 and args.flight_recording:  # the JVM's own recorder, past the warm-up batch
            jfr = spark.sparkContext._jvm.jdk.jfr  # type: ignore[union-attr]
            recording = jfr.Recording(jfr.Configuration.getConfiguration("profile"))
            recording.start()
        landing = args.root / f"changes-{n}"
        count = 0
        for table, table_events in workload.change_round(args.changes).items():
            write_landing_files(landing, table, table_events, schemas[table], rng, "c", files=1)
            count += len(table_events)
        label = f"batch_{n}"
        compiled = codegen.METRIC_COMPILATION_TIME().getCount()
        lines = Lines(spark.read.text(str(landing / "*" / "*.json")).select("value", F.input_file_name().alias("file")))
        with Timer(results, label, count):  # the unit through the product's path: parse, mirrors, state, views, ledger
            done = engine.process(BatchRef("bench", n), lines, step=lambda name, label=label: step(f"{label}.{name}"))
        details = engine.last.details
        results[f"{label}.events"] = done.events
        results[f"{label}.changed_rows"] = details.get("changed_rows")
        results[f"{label}.way"] = details.get("way")
        results[f"{label}.whole"] = details.get("whole") if args.per_view else len(details.get("whole") or [])
        for key in ("keys", "gathered"):
            if key in details:
                results[f"{label}.{key}"] = per_view(details[key], args.per_view)
        results[f"{label}.changed"] = details.get("changed")
        results[f"{label}.published"] = details.get("published")
        # generated classes Janino compiled (a plan whose code is new: each new class is JIT-compiled again)
        results[f"{label}.codegen_compiled"] = codegen.METRIC_COMPILATION_TIME().getCount() - compiled
        if n:
            batches.append(results[label]["seconds"])
    version = engine.versions.current()
    if recording is not None:
        recording.stop()
        recording.dump(spark.sparkContext._jvm.java.io.File(str(args.flight_recording.resolve())).toPath())  # type: ignore[union-attr]
        results["flight_recording"] = str(args.flight_recording)
    results["median_batch_seconds"] = statistics.median(batches) if batches else None
    # a long-running stream's batches: the JVM's compilers keep working for minutes (a 100-view run spent
    # about a core on them through batches 1-3), so the later half of a long run is the settled figure
    if len(batches) >= 8:
        results["settled_median_batch_seconds"] = statistics.median(batches[len(batches) // 2 :])
    # what a user would pick instead, over the same tables after the same batches: every view rebuilt
    # by Spark (written as an Iceberg table, as lakemv's views are) and by DuckDB over the mirrors
    with step("full_recompute_spark", len(plans)):
        live = mirrors.live()
        for plan in plans:
            spark.sql(recompute_sql(plan, live)).writeTo(mirrors.names.view(f"bench_full_{plan.name}")).using("iceberg").createOrReplace()
    # the state's digests of every view against Spark's rebuild: rows that differ (0: every view exact)
    full = {plan.name: spark.table(mirrors.names.view(f"bench_full_{plan.name}")) for plan in plans if plan.name in recompute.plans}
    results["views_differing"] = recompute.differing(full, version)
    # the views' tables against Spark's rebuild: rows in one and not the other (0 for every view)
    results["tables_differing"] = {
        name: spark.table(view_tables.tables[name]).exceptAll(frame).count() + frame.exceptAll(spark.table(view_tables.tables[name])).count()
        for name, frame in full.items()
    }
    with step("full_recompute_duckdb", len(plans)):
        results["full_recompute_duckdb_rows"] = duckdb_full(settings, sources, plans)
    if results["median_batch_seconds"]:
        for engine in ("spark", "duckdb"):
            results[f"batch_faster_than_{engine}_full"] = round(results[f"full_recompute_{engine}"]["seconds"] / results["median_batch_seconds"], 2)
    if args.event_log:
        spark.stop()
        results["event_log"] = eventlog.summary(args.root / "events")
    results["finished"] = datetime.now().isoformat(timespec="seconds")
    out = Path("bench/results") / f"engine-batch-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}; median batch {results['median_batch_seconds']} s with {len(plans)} views")


if __name__ == "__main__":
    main()
