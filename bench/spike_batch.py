"""The engine-state spike, end to end (issue 68, item 6): one batch of `user_profile` (and copies of it)
maintained set-wise on the candidate, every round composed by hand over `KeyedState`.

What `bench.spike_state` measured in parts, this runs as a batch would: 100k users' snapshot parsed by
Spark's JSON reader and bulk-loaded into the state (every table by primary key, and by each column a view
joins it on, the row itself as the value: a covering index, so each hop is one round), then batches of
change events, each through:

1. parse: each table's lines by Spark's JSON reader with its schema, the latest change per key;
2. `U1`, one update round: the rows by primary key, giving their old images;
3. `U2`, one update round: the index entries (the old one deleted where its key moved);
4. walk up: one lookup round per hop to the view's key (`L1`: users by username or id, stars by repo;
   `L2`: users by the usernames `L1` found);
5. gather down: `G1` the reached users, `G2` their stars, pull requests and payments, `G3` the
   starred repos;
6. recompute: each view's SQL over the gathered rows (planned per batch here: kept plans would save it);
7. `D`, one update round: each view's rows by key with their digest, giving the changed ones;
8. write: each view's changed rows appended to its Iceberg table, the views' commits from 4 threads.

    python -m bench.spike_batch --users 100000 --views 10 --changes 1000 100000

writes bench/results/spike-batch-<time>/results.json; the figures and the choice are in
docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import WorkloadConfig, generate_files

from bench.spike_state import Timer

TABLES = {"users": 1, "repos": 2, "pull_requests": 3, "stars": 4, "payment_info": 5}
INDEXES = {  # space: (table, the columns it is looked up by)
    11: ("users", ["username"]),
    12: ("stars", ["username"]),
    13: ("stars", ["repo_owner", "repo_name"]),
    14: ("pull_requests", ["author"]),
    16: ("payment_info", ["user_id"]),
    18: ("users", ["id"]),
}
VIEW_SPACE = 100  # + the view's number
TYPES = {
    "bigint": "BIGINT",
    "string": "STRING",
    "boolean": "BOOLEAN",
    "timestamp": "BIGINT",
    "int": "INT",
    "double": "DOUBLE",
}


def _image(source) -> str:
    """A table's row as a Spark DDL struct (timestamps as Debezium sends them: numbers, or ISO strings)."""
    return (
        "STRUCT<"
        + ", ".join(
            f"`{c.name}`: {'STRING' if c.encoding == 'iso' else TYPES.get(c.type, 'STRING')}"
            for c in source.columns
        )
        + ">"
    )


def _parsed(spark, source, path: Path):
    """A table's lines (Debezium's schema wrapper or not) as its latest change per primary key:
    (image: the row after, or before for a delete, deleted, position)."""
    from pyspark.sql import functions as F

    image = _image(source)
    envelope = f"op STRING, before {image}, after {image}, source STRUCT<lsn: BIGINT, ts_ms: BIGINT>, ts_ms BIGINT"
    raw = spark.read.text(str(path)).select(
        F.from_json("value", f"payload STRUCT<{envelope}>, {envelope}").alias("e")
    )
    e = F.coalesce(
        F.col("e.payload"),
        F.struct(
            *[
                F.col(f"e.{f}").alias(f)
                for f in ("op", "before", "after", "source", "ts_ms")
            ]
        ),
    )
    rows = raw.select(e.alias("e")).select(
        F.coalesce(
            F.col("e.source.lsn"), F.col("e.source.ts_ms"), F.col("e.ts_ms")
        ).alias("position"),
        (F.col("e.op") == "d").alias("deleted"),
        F.when(F.col("e.op") == "d", F.col("e.before"))
        .otherwise(F.col("e.after"))
        .alias("image"),
    )
    # the latest per key: one hash aggregate (max of (position, ...) ), no sort
    latest = rows.groupBy(
        *[F.col("image")[k].alias(f"_k{i}") for i, k in enumerate(source.primary_key)]
    ).agg(F.max(F.struct("position", "deleted", "image")).alias("m"))
    return latest.select("m.position", "m.deleted", "m.image")


def _json_of(columns: list[str], struct: str = "image", names: list[str] | None = None):
    """The JSON of `columns` of `struct` (as `names`): how an index or a primary key is spelled in the state."""
    from pyspark.sql import functions as F

    return F.to_json(
        F.struct(
            *[
                F.col(struct)[c].alias(n)
                for c, n in zip(columns, names or columns, strict=True)
            ]
        )
    ).cast("binary")


def _entries(name: str, source, frame, with_indexes: bool = True):
    """Bulk load: a table's rows by primary key and by each index (the row's JSON as the value)."""
    from pyspark.sql import functions as F

    row = F.to_json("image").cast("binary")
    pk = _json_of(source.primary_key)
    parts = [
        frame.select(
            F.lit(TABLES[name]).alias("space"),
            pk.alias("a"),
            F.lit(b"").cast("binary").alias("b"),
            row.alias("v"),
        )
    ]
    for space, (table, columns) in INDEXES.items():
        if table == name and with_indexes:
            parts.append(
                frame.select(
                    F.lit(space).alias("space"),
                    _json_of(columns).alias("a"),
                    pk.alias("b"),
                    row.alias("v"),
                )
            )
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


class Batch:
    """One batch of changes through the candidate's rounds."""

    def __init__(self, spark, state, sources, views: int, results: dict, label: str):
        self.spark, self.state, self.sources, self.views, self.results, self.label = (
            spark,
            state,
            sources,
            views,
            results,
            label,
        )

    def step(self, name: str, count: int | None = None) -> Timer:
        return Timer(self.results, f"{self.label}.{name}", count)

    def run(self, landing: Path, version: int, events: int) -> int:
        from pyspark.sql import functions as F
        from pyspark.storagelevel import StorageLevel

        spark, state, S = self.spark, self.state, self.sources
        mem = StorageLevel.MEMORY_AND_DISK
        with Timer(self.results, self.label, events):
            with self.step("parse", events):
                parsed = {
                    n: _parsed(spark, S[n], landing / n).persist(mem)
                    for n in TABLES
                    if (landing / n).exists()
                }
                rows = sum(f.count() for f in parsed.values())
            self.results[f"{self.label}.rows"] = rows

            with self.step(
                "U1_rows", rows
            ):  # rows by primary key, their old images back
                pk_changes = None
                for n, f in parsed.items():
                    part = f.select(F.lit(TABLES[n]).alias("space"), _json_of(S[n].primary_key).alias("a"), F.lit(b"").cast("binary").alias("b"),
                                    F.when(F.col("deleted"), F.lit(None).cast("binary")).otherwise(F.to_json("image").cast("binary")).alias("v"))  # fmt: skip
                    pk_changes = (
                        part if pk_changes is None else pk_changes.unionByName(part)
                    )
                u1 = state.update(pk_changes, version).persist(mem)
                u1.count()
            version += 1

            with self.step(
                "U2_indexes"
            ):  # index entries: put the new row, delete the old key where it moved
                changes = []
                for space, (table, columns) in INDEXES.items():
                    if table not in parsed:
                        continue
                    image = _image(S[table])
                    t = u1.where(F.col("space") == TABLES[table]).select(
                        "a",
                        "v",
                        F.from_json(F.col("v").cast("string"), image).alias("new"),
                        F.from_json(F.col("old").cast("string"), image).alias(
                            "old_row"
                        ),
                    )
                    new_key, old_key = (
                        _json_of(columns, "new"),
                        _json_of(columns, "old_row"),
                    )
                    changes.append(
                        t.where("new IS NOT NULL").select(
                            F.lit(space).alias("space"),
                            new_key.alias("a"),
                            F.col("a").alias("b"),
                            F.col("v"),
                        )
                    )
                    changes.append(t.where(F.col("old_row").isNotNull() & (F.col("new").isNull() | (old_key != new_key))).select(
                        F.lit(space).alias("space"), old_key.alias("a"), F.col("a").alias("b"), F.lit(None).cast("binary").alias("v")))  # fmt: skip
                u2 = changes[0]
                for c in changes[1:]:
                    u2 = u2.unionByName(c)
                self.results[f"{self.label}.U2_entries"] = state.update(
                    u2, version
                ).count()
            version += 1

            def images(table: str):
                image = _image(S[table])
                t = u1.where(F.col("space") == TABLES[table])
                return t.select(F.from_json(F.col("v").cast("string"), image).alias("r")).union(
                    t.select(F.from_json(F.col("old").cast("string"), image).alias("r"))).where("r IS NOT NULL")  # fmt: skip

            def ask(
                frame, space: int, columns: list[str], names: list[str] | None = None
            ):
                return frame.select(
                    F.lit(space).alias("space"),
                    _json_of(columns, "r", names).alias("a"),
                    F.lit(None).cast("binary").alias("tag"),
                )

            def found(frame, table: str, column: str = "v"):
                return frame.where(F.col(column).isNotNull()).select(
                    F.from_json(F.col(column).cast("string"), _image(S[table])).alias(
                        "r"
                    )
                )

            with self.step("walk_up"):
                reached = []
                l1 = []
                if "users" in parsed:
                    reached.append(
                        images("users").select(F.col("r.email").alias("email"))
                    )
                if "stars" in parsed:
                    l1.append(ask(images("stars"), 11, ["username"]))
                if "pull_requests" in parsed:
                    l1.append(
                        ask(images("pull_requests"), 11, ["author"], ["username"])
                    )
                if "payment_info" in parsed:
                    l1.append(ask(images("payment_info"), 18, ["user_id"], ["id"]))
                if "repos" in parsed:
                    l1.append(
                        ask(
                            images("repos"),
                            13,
                            ["owner", "name"],
                            ["repo_owner", "repo_name"],
                        )
                    )
                asked = l1[0]
                for a in l1[1:]:
                    asked = asked.unionByName(a)
                with self.step("L1"):
                    r1 = (
                        state.lookup(asked.distinct(), version)
                        .where("v IS NOT NULL")
                        .persist(mem)
                    )
                    self.results[f"{self.label}.L1_found"] = r1.count()
                reached.append(
                    found(r1.where("space IN (11, 18)"), "users").select(
                        F.col("r.email").alias("email")
                    )
                )
                with self.step("L2"):
                    r2 = state.lookup(
                        ask(
                            found(r1.where("space = 13"), "stars"), 11, ["username"]
                        ).distinct(),
                        version,
                    )
                    reached.append(
                        found(r2, "users").select(F.col("r.email").alias("email"))
                    )
                    keys = reached[0]
                    for r in reached[1:]:
                        keys = keys.unionByName(r)
                    keys = keys.distinct().persist(mem)
                    self.results[f"{self.label}.keys_reached"] = keys.count()

            with self.step("gather"):
                with self.step("G1"):
                    g1 = state.lookup(keys.select(F.lit(1).alias("space"), F.to_json(F.struct("email")).cast("binary").alias("a"),
                                                  F.lit(None).cast("binary").alias("tag")), version).persist(mem)  # fmt: skip
                    g1.count()
                users = found(g1, "users").select("r.*").persist(mem)
                with self.step("G2"):
                    u = users.select(F.struct("username", "id").alias("r"))
                    g2 = state.lookup(ask(u, 12, ["username"]).unionByName(ask(u, 14, ["username"], ["author"])).unionByName(ask(u, 16, ["id"], ["user_id"])), version).persist(mem)  # fmt: skip
                    g2.count()
                stars = (
                    found(g2.where("space = 12"), "stars").select("r.*").persist(mem)
                )
                with self.step("G3"):
                    g3 = state.lookup(ask(stars.select(F.struct("repo_owner", "repo_name").alias("r")), 2, ["repo_owner", "repo_name"], ["owner", "name"]).distinct(), version)  # fmt: skip
                    repos = found(g3, "repos").select("r.*").persist(mem)
                    self.results[f"{self.label}.gathered_rows"] = (
                        users.count() + stars.count() + repos.count()
                    )
                users.createOrReplaceTempView("users")
                stars.createOrReplaceTempView("stars")
                repos.createOrReplaceTempView("repos")
                found(g2.where("space = 14"), "pull_requests").select(
                    "r.*"
                ).createOrReplaceTempView("pull_requests")
                found(g2.where("space = 16"), "payment_info").select(
                    "r.*"
                ).createOrReplaceTempView("payment_info")

            sql = Path("views/user_profile.sql").read_text()
            with self.step("recompute_and_diff"):
                docs = []
                for i in range(self.views):
                    view = spark.sql(sql)
                    docs.append(view.select(F.lit(VIEW_SPACE + i).alias("space"), F.to_json(F.struct("email")).cast("binary").alias("a"),
                                            F.lit(b"").cast("binary").alias("b"), F.sha2(F.to_json(F.struct("*")), 256).cast("binary").alias("v"),
                                            F.to_json(F.struct("*")).alias("doc")))  # fmt: skip
                gone = keys.select(
                    F.to_json(F.struct("email")).cast("binary").alias("a")
                )  # reached keys no row stands for any more
                all_docs = docs[0]
                for d in docs[1:]:
                    all_docs = all_docs.unionByName(d)
                all_docs = all_docs.persist(mem)
                deletes = [gone.select(F.lit(VIEW_SPACE + i).alias("space"), "a", F.lit(b"").cast("binary").alias("b"), F.lit(None).cast("binary").alias("v"))
                           .join(all_docs.where(F.col("space") == VIEW_SPACE + i).select("a"), "a", "left_anti") for i in range(self.views)]  # fmt: skip
                d = all_docs.select("space", "a", "b", "v")
                for x in deletes:
                    d = d.unionByName(x.select("space", "a", "b", "v"))
                diff = (
                    state.update(d, version)
                    .where("old IS NULL OR v IS NULL OR old != v")
                    .persist(mem)
                )
                self.results[f"{self.label}.view_rows_changed"] = diff.count()
            version += 1

            with self.step("write", self.views):
                changed = all_docs.join(
                    diff.select("space", "a"), ["space", "a"], "left_semi"
                ).persist(mem)
                changed.count()

                def write(i: int) -> None:
                    changed.where(F.col("space") == VIEW_SPACE + i).select(
                        F.col("a").cast("string").alias("k"), "doc"
                    ).writeTo(f"lake.spike.v{i}").append()

                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(write, range(self.views)))
            for f in (
                *parsed.values(),
                u1,
                r1,
                keys,
                g1,
                users,
                g2,
                stars,
                repos,
                all_docs,
                diff,
                changed,
            ):
                f.unpersist()
        return version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--root", type=Path, default=Path("/tmp/spike-batch"))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--views",
        type=int,
        default=10,
        help="copies of user_profile maintained by every batch",
    )
    parser.add_argument(
        "--changes",
        type=int,
        nargs="+",
        default=[1_000, 100_000],
        help="change events of each batch",
    )
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    shutil.rmtree(args.root, ignore_errors=True)
    args.root.mkdir(parents=True)
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
        "views": args.views,
        "started": datetime.now().isoformat(timespec="seconds"),
    }
    snapshot = args.root / "snapshot"
    with Timer(results, "generate"):
        workload, events, _ = generate_files(
            WorkloadConfig(users=args.users, seed=3, rounds=1), sources, snapshot
        )
    results["snapshot_events"] = events

    from lakemv.spark.engine.keyed import KeyedStore
    from lakemv.spark.session import get_spark

    with Timer(results, "spark_start"):
        spark = get_spark(settings)
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    state = KeyedStore(spark, str(args.root / "state"), args.partitions)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.spike")
    for i in range(args.views):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS lake.spike.v{i} (k STRING, doc STRING) USING iceberg TBLPROPERTIES ('format-version'='2')"
        )

    from pyspark.storagelevel import StorageLevel

    with Timer(results, "snapshot_parse", events):
        parsed = {
            n: _parsed(spark, sources[n], snapshot / n).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            for n in TABLES
        }
        results["snapshot_rows"] = sum(f.count() for f in parsed.values())
    entries = None
    for n, f in parsed.items():
        part = _entries(n, sources[n], f)
        entries = part if entries is None else entries.unionByName(part)
    with Timer(
        results, "bulk_load", events
    ):  # sorted within each partition by key, then written in that order
        sorted_entries = entries.repartition(
            args.partitions, "space", "a"
        ).sortWithinPartitions("space", "a", "b")
        results["state_entries"] = state.update(sorted_entries, 0).count()
    version = 1

    schemas = {name: connect_schema(source) for name, source in sources.items()}
    rng = random.Random(5)
    for n in args.changes:
        for repeat in range(args.repeats):
            landing = args.root / f"changes-{n}-{repeat}"
            batch_events = 0
            for table, table_events in workload.change_round(n).items():
                write_landing_files(
                    landing,
                    table,
                    table_events,
                    schemas[table],
                    rng,
                    "c",
                    files=1 + len(table_events) // 20000,
                )
                batch_events += len(table_events)
            version = Batch(
                spark, state, sources, args.views, results, f"batch_{n}_{repeat}"
            ).run(landing, version, batch_events)

    results["finished"] = datetime.now().isoformat(timespec="seconds")
    out = (
        Path("bench/results")
        / f"spike-batch-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
