"""The engine-state spike (issue 68, item 6): what the candidate costs on this machine, before it is built.

The candidate: the indexed state in Spark's RocksDB state stores, partitioned by key over the executors
(`jvm/java/dev/lakemv/state/KeyedState.java`), read and written in set-wise rounds that every view of a
batch shares, and each changed view's rows committed to its own Iceberg table. This measures its parts
at 100k users, each beside what it replaces:

* parse: Spark's JSON reader with each source's schema over Debezium lines, deduplicated by key (highest
  position wins), events per second (a snapshot; the same for a backlog);
* bulk load: the mirrors' rows by primary key and by each join column the views use, into the state;
* a lookup round (one shuffle + prefix scans) and an update round (one shuffle + gets and puts, a commit
  of every partition), for 1k, 10k and 100k requests;
* a view's commit: 100 Iceberg tables appended one small file each, one by one and from 4 threads;
* CPU of the driver's Python and of the JVM over the whole run.

`python -m bench.spike_state --users 100000` writes bench/results/spike-state-<time>/results.json; the
figures and the choice are in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Self

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.workload.github import WorkloadConfig, generate_files

# Index spaces: 1-5 a table's rows by primary key, 11+ by a join column the views look it up by.
TABLES = {"users": 1, "repos": 2, "pull_requests": 3, "stars": 4, "payment_info": 5}
INDEXES = {
    11: ("users", ["username"]),
    12: ("stars", ["username"]),
    13: ("stars", ["repo_owner", "repo_name"]),
    14: ("pull_requests", ["author"]),
    15: ("pull_requests", ["repo_owner", "repo"]),
    16: ("payment_info", ["user_id"]),
    17: ("repos", ["owner"]),
}


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its children's: the JVM is a child of the driver's Python)."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def _jvm_cpu() -> float:
    """CPU seconds so far of the JVM this process started (Spark's driver, and in local mode its executors)."""
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and b"java" in cmdline:
            return (int(stat[11]) + int(stat[12])) / ticks
    return 0.0


class Timer:
    """Wall, driver-Python CPU and JVM CPU of a step."""

    def __init__(self, results: dict, name: str, count: int | None = None):
        self.results, self.name, self.count = results, name, count

    def __enter__(self) -> Self:
        self.wall, self.py, self.jvm = time.perf_counter(), _cpu()[0], _jvm_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        entry = {
            "seconds": round(time.perf_counter() - self.wall, 3),
            "python_cpu_s": round(_cpu()[0] - self.py, 3),
            "jvm_cpu_s": round(_jvm_cpu() - self.jvm, 3),
        }
        if self.count:
            entry["count"] = self.count
            entry["per_item_us"] = round(entry["seconds"] / self.count * 1e6, 1)
        self.results[self.name] = entry
        print(f"{self.name}: {entry}", flush=True)


def _session(settings: LakeSettings):
    from lakemv.spark.session import get_spark

    return get_spark(settings)


def _changes_frame(spark, sources, landing: Path):
    """Every landing line parsed by lakemv's set-wise parse (`lakemv.core.cdc.envelopesql`: Spark SQL over
    variants, each table's declared types), deduplicated per key (highest position wins): per table,
    (space, pk json, deleted, row json, the row's columns)."""
    from lakemv.catalog.tables import DELETED, POSITION
    from lakemv.core.cdc.envelopesql import CLEAN, SEQ, parse_sql
    from lakemv.spark.bulk import _latest
    from pyspark.sql import functions as F

    lines = spark.read.text(str(landing), recursiveFileLookup=True).select("value", F.col("_metadata.file_path").alias("file"))
    numbered = lines.withColumn(SEQ, F.monotonically_increasing_id()).withColumn("_t", F.regexp_extract("file", r"([^/]+)/[^/]+$", 1))
    frames = []
    for name, source in sources.items():
        if name not in TABLES:
            continue
        numbered.where(F.col("_t") == name).createOrReplaceTempView(f"spike_{name}")
        parsed = spark.sql(parse_sql(source, f"spike_{name}", None)).where(F.col(CLEAN))
        latest = _latest(parsed.select(*source.column_names, POSITION, DELETED, SEQ), source)
        columns = [F.col(c) for c in source.column_names]
        frames.append(
            (
                name,
                latest.select(
                    F.lit(TABLES[name]).alias("space"),
                    F.to_json(F.struct(*[F.col(k) for k in source.primary_key])).alias("pk"),
                    F.col(DELETED).alias("deleted"),
                    F.to_json(F.struct(*columns, F.col(POSITION))).alias("row"),
                    F.struct(*columns).alias("after"),
                ),
            )
        )
    return frames


def _json_frames(spark, sources, landing: Path):
    """The same rows by Spark's JSON reader with each table's schema (Debezium's wrapper read too), deduplicated."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    types = {
        "bigint": "BIGINT",
        "string": "STRING",
        "boolean": "BOOLEAN",
        "timestamp": "BIGINT",
        "int": "INT",
        "double": "DOUBLE",
    }
    frames = []
    for name, source in sources.items():
        if name not in TABLES:
            continue
        image = "STRUCT<" + ", ".join(f"`{c.name}`: {types.get(c.type, 'STRING')}" for c in source.columns) + ">"
        envelope = f"op STRING, before {image}, after {image}, source STRUCT<lsn: BIGINT, ts_ms: BIGINT>, ts_ms BIGINT"
        raw = spark.read.text(str(landing / name)).select(F.from_json("value", f"payload STRUCT<{envelope}>, {envelope}").alias("e"))
        bare = F.struct(*[F.col(f"e.{f}").alias(f) for f in ("op", "before", "after", "source", "ts_ms")])
        e = F.when(F.col("e.payload").isNotNull(), F.col("e.payload")).otherwise(bare)  # with or without the schema wrapper
        rows = raw.select(e.alias("e")).select(
            F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after")).alias("image"),
            F.coalesce(F.col("e.source.lsn"), F.col("e.source.ts_ms")).alias("position"),
        )
        order = Window.partitionBy(*[F.col("image")[k] for k in source.primary_key]).orderBy(F.col("position").desc())
        frames.append((name, rows.withColumn("_n", F.row_number().over(order)).where("_n = 1")))
    return frames


def _entries(name: str, frame):
    """The state entries of a table's latest changes: its row by primary key, and by each of its indexes
    (a deleted row: its entries with a null value)."""
    from pyspark.sql import functions as F

    value = F.when(F.col("deleted"), F.lit(None).cast("binary")).otherwise(F.col("row").cast("binary"))
    parts = [
        frame.select(
            F.col("space"),
            F.col("pk").cast("binary").alias("a"),
            F.lit(b"").cast("binary").alias("b"),
            value.alias("v"),
        )
    ]
    for space, (table, columns) in INDEXES.items():
        if table == name:
            by = F.to_json(F.struct(*[F.col("after")[c].alias(c) for c in columns])).cast("binary")
            parts.append(
                frame.where("after IS NOT NULL").select(
                    F.lit(space).alias("space"),
                    by.alias("a"),
                    F.col("pk").cast("binary").alias("b"),
                    value.alias("v"),
                )
            )
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--root", type=Path, default=Path("/tmp/spike-state"))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the landing files of an earlier run at --root",
    )
    args = parser.parse_args()

    landing = args.root / "landing"
    if not args.reuse:
        shutil.rmtree(args.root, ignore_errors=True)
    for leftover in ("wh", "state"):
        shutil.rmtree(args.root / leftover, ignore_errors=True)
    args.root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LAKEMV_DRIVER_MEMORY", "6g")
    settings = LakeSettings(
        warehouse=args.root / "wh",
        spark_master="local[2]",
        shuffle_partitions=args.partitions,
    )
    sources = load_sources(settings.sources_dirs)
    results: dict = {
        "users": args.users,
        "partitions": args.partitions,
        "started": datetime.now().isoformat(timespec="seconds"),
    }
    if not landing.exists():
        with Timer(results, "generate"):
            generate_files(WorkloadConfig(users=args.users, seed=3, rounds=1), sources, landing)
    events = sum(len(f.read_bytes().splitlines()) for f in landing.rglob("*.json"))
    results["snapshot_events"] = events

    with Timer(results, "spark_start"):
        spark = _session(settings)
    from lakemv.spark.engine.keyed import KeyedStore

    state = KeyedStore(spark, str(args.root / "state"), args.partitions)

    from pyspark.sql import functions as F

    with Timer(results, "parse_from_json_snapshot", events):  # Spark's JSON reader with each table's schema, deduplicated
        total = sum(frame.count() for _, frame in _json_frames(spark, sources, landing))
    results["snapshot_rows_from_json"] = total
    frames = [(name, frame.persist()) for name, frame in _changes_frame(spark, sources, landing)]
    with Timer(results, "parse_variant_sql_snapshot", events):  # today's set-wise parse (lakemv.core.cdc.envelopesql), deduplicated
        total = sum(frame.count() for _, frame in frames)
    results["snapshot_rows"] = total

    entries = None
    for name, frame in frames:
        part = _entries(name, frame)
        entries = part if entries is None else entries.unionByName(part)
    entries = entries.repartition(args.partitions, "space", "a").sortWithinPartitions("space", "a", "b").persist()
    with Timer(results, "entries_build", events):
        entries.count()
    with Timer(results, "bulk_load", events):
        written = state.update(entries, 0)
        loaded = written.count()
    results["state_entries"] = loaded
    results["state_spaces"] = state.counts(1)

    # lookup and update rounds of n requests: user names (index 12: stars by username) and users' rows
    users = spark.read.json(str(landing / "users")).select(F.col("after.username").alias("username"), F.col("after.email").alias("email"))
    users = users.cache()
    users.count()
    version = 1
    for n in (1_000, 10_000, 100_000):
        asked = (
            users.limit(n)
            .select(
                F.lit(12).alias("space"),
                F.to_json(F.struct(F.col("username"))).cast("binary").alias("a"),
                F.col("email").cast("binary").alias("tag"),
            )
            .cache()
        )
        asked.count()
        for repeat in range(3):
            with Timer(results, f"lookup_round_{n}_{repeat}", n):
                found = state.lookup(asked, version).count()
        results[f"lookup_round_{n}_found"] = found
        changed = (
            users.limit(n)
            .select(
                F.lit(1).alias("space"),
                F.to_json(F.struct(F.col("email"))).cast("binary").alias("a"),
                F.lit(b"").cast("binary").alias("b"),
                F.to_json(F.struct(F.col("email"), F.col("username"), F.lit(version).alias("v"))).cast("binary").alias("v"),
            )
            .cache()
        )
        changed.count()
        for repeat in range(3):
            with Timer(results, f"update_round_{n}_{repeat}", n):
                state.update(changed, version).count()
            version += 1
        asked.unpersist()
        changed.unpersist()
    results["versions"] = version

    # a view's commit: `--tables` small Iceberg tables, each appended one small file, one by one and from 4 threads
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.spike")
    names = [f"lake.spike.v{i}" for i in range(args.tables)]
    for name in names:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} (k STRING, doc STRING) USING iceberg TBLPROPERTIES ('format-version'='2')")
    import pyarrow as pa
    from lakemv.spark.directwrite import DirectWriter

    writer = DirectWriter(spark, settings)
    rows = pa.table({"k": [f"k{i}" for i in range(10)], "doc": ["x" * 200] * 10})

    def commit(name: str) -> None:
        writer.append_files(name, [rows], f"spike:{uuid.uuid4().hex}")

    for repeat in range(2):
        with Timer(results, f"commits_sequential_{repeat}", args.tables):
            for name in names:
                commit(name)
        with (
            Timer(results, f"commits_4_threads_{repeat}", args.tables),
            ThreadPoolExecutor(4) as pool,
        ):
            list(pool.map(commit, names))

    results["finished"] = datetime.now().isoformat(timespec="seconds")
    out = Path("bench/results") / f"spike-state-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
