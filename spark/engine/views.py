"""Every reached view recomputed by Spark over the rows its walk gathered, and diffed against its
row digests in the engine state: one job for the recomputes of all views, one round for their diffs.

Each view's query is planned once, when the engine is made (`lakemv.spark.views.kept`'s session, over
marked empty scans of RDDs: no size for the optimizer to fold or prove anything by), and per batch only copied with the
batch's rows swapped in (`Replan.swapAll`: one call for all views; a view's plan reads one partition and
runs no shuffle). Its inputs are one relation per
table, the rows the view gathered of it, each labelled with the occurrence that asked for it: a view's
occurrence reads only its own rows. So a view's SQL is never analysed or planned again, and the rows
reach the plans on the executors, never through the driver: each table's gathered rows are shuffled by
view once a batch (`Replan.byLabel`), and each view's plan reads its own partition (`Replan.partition`).

A view recomputed whole is planned per batch, in a session without adaptive execution (`whole_session`):
its shuffles become stages of the batch's one job, side by side with the others', and its broadcasts
run beside the other whole views'.

A recomputed row's key is packed as `reach` packs it (`lakemv.spark.engine.walk`: the key's texts read
off the row's columns), so the keys a batch reached and found no row for are the view's deleted rows; a
row's digest is two 64-bit xxhashes of its columns. The rows are computed when `run` returns, as a local
checkpoint: what reads them (the counts, the diff's three reads) runs stages without the views' plans in
their lineage (each task deserialized every view's plan).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from lakemv.core.batch.choice import Ways
from lakemv.core.planner import OCCURRENCE, ViewPlan
from lakemv.core.planner.sqltools import spark_tree
from lakemv.core.sql.viewsql import recompute_sql, rows_sql
from lakemv.spark.frames import local_frame
from lakemv.spark.engine.encoding import JSON, RAW, column_text, literal_array, packed_texts, row_of, texts_of, untag, untag_each
from lakemv.spark.engine.walk import Walker
from lakemv.spark.views.kept import MARK, planning_session, replan_class

VIEW, OCC = "_lmv_view", "_lmv_occ"  # an input row's labels: which view's occurrence gathered it
ROWS = "view INT, k BINARY, d BINARY, row STRING"  # a view's rows keyed (`Recompute._keyed`)
CHANGED = ROWS + ", file STRING, pos BIGINT"  # a changed row and the place of the row it replaces
# a view row's entry: its digest (16 bytes), then its place in the view's table (position: 8 bytes, file: UTF-8)
PLACED = "concat({d}, unhex(lpad(hex({pos}), 16, '0')), encode({file}, 'UTF-8'))"


# a view row's digest: two 64-bit xxhashes of its columns (16 bytes)
DIGEST = "concat(unhex(lpad(hex(xxhash64({row}, 0)), 16, '0')), unhex(lpad(hex(xxhash64({row}, 1)), 16, '0')))"


def whole_session(spark: SparkSession) -> SparkSession:
    """The session the views recomputed whole are planned in: `spark`'s context, shuffle partitions and
    broadcast threshold, no adaptive execution, so a plan's shuffles run as stages of the job that reads
    it (an adaptive plan runs them when its RDD is made: view after view). Its broadcasts are started for
    all views at once (`Replan.unionRows`)."""
    if spark not in _WHOLE:
        session = spark.newSession()
        for key in ("spark.sql.shuffle.partitions", "spark.sql.autoBroadcastJoinThreshold"):
            session.conf.set(key, spark.conf.get(key))
        session.conf.set("spark.sql.adaptive.enabled", "false")
        _WHOLE[spark] = session
    return _WHOLE[spark]


_WHOLE: weakref.WeakKeyDictionary[SparkSession, SparkSession] = weakref.WeakKeyDictionary()


class Recompute:
    """The kept plans of `walker`'s views (those it walks), made now."""

    def __init__(self, walker: Walker):
        self.walker = walker
        self.spark = walker.spark
        self.session = planning_session(self.spark)
        self.whole_session = whole_session(self.spark)
        self.replan = replan_class(self.spark)
        if self.replan is None:
            raise RuntimeError("the engine state needs lakemv's jar in the driver (jvm/lib/lakemv-jvm.jar; `make setup` builds it)")
        self.plans = {w.view: walker.plans[w.view] for w in walker.walks.views if not w.whole}
        self.kept = self._planned()
        self.exact = {w.view: w.exact for w in walker.walks.views if not w.whole}

    # ---- plans ---------------------------------------------------------------------------------
    def _inputs(self) -> dict[str, str]:
        """Each input relation's name and its columns (DDL): a table's, the labels, the marker."""
        return {
            MARK + table: ", ".join([f"`{c.name}` {c.spark_type}" for c in source.columns] + [f"{VIEW} INT", f"{OCC} INT", f"{MARK}{table} BOOLEAN"])
            for table, source in self.walker.sources.items()
        }

    def sql(self, plan: ViewPlan) -> str:
        """The view's query over the inputs: each occurrence the rows gathered for it."""
        view = self.walker.ids[plan.name]
        body = spark_tree(rows_sql(plan))
        assert isinstance(body, exp.Query)
        for occ in plan.occurrences:
            columns = ", ".join(f"`{c.name}`" for c in self.walker.sources[occ.table].columns)
            body = body.with_(
                OCCURRENCE.format(occ.id),
                as_=f"SELECT {columns} FROM {MARK}{occ.table} WHERE {VIEW} = {view} AND {OCC} = {occ.id}",
                dialect="spark",
                copy=False,
            )
        return body.sql(dialect="spark")

    def _planned(self) -> dict[str, object]:
        """Each view's physical plan over empty inputs (registered once for all of them) giving its rows as
        `_keyed` does, kept without the inputs (py4j proxies of SparkPlans)."""
        names, kept = [], {}
        try:
            for name, ddl in self._inputs().items():
                # a scan of an empty RDD: an empty local relation would let the optimizer drop what it
                # proves needless for no rows (a DISTINCT's aggregate, a sort, a limit)
                self.session.createDataFrame(self.spark.sparkContext.emptyRDD(), ddl).createOrReplaceTempView(name)
                names.append(name)
            for view, plan in self.plans.items():
                # planned with its key, digest and JSON: a batch analyses nothing of a view's
                made = self._keyed(plan, self.session.sql(self.sql(plan)))._jdf.queryExecution().executedPlan()
                if not self.replan.marked(made, MARK):
                    raise RuntimeError(f"view {view}: its plan reads something other than its inputs, so it cannot be kept")
                kept[view] = self.replan.strip(made, MARK)
        finally:
            for name in names:
                self.session.catalog.dropTempView(name)
        return kept

    # ---- a batch -------------------------------------------------------------------------------
    def gathering(self, keys: DataFrame, whole: Collection[str]) -> DataFrame:
        """`keys` (reach's frame) without the views recomputed `whole`: what the walks gather for."""
        ids = [self.walker.ids[name] for name in whole]
        return keys.where(~F.col("view").isin(ids)) if ids else keys

    def run(self, gathered: DataFrame, keys: DataFrame, whole: Collection[str] = (), live: Mapping[str, str] | None = None) -> DataFrame:
        """`(view, k, d, row)`: each reached view's rows for the keys the batch reached (`keys`, reach's
        frame), from the rows its walk gathered (`gathered`: `(tags, v)`, a row once with its readers,
        `Walker.gather_grouped`'s), or for the views in
        `whole` from their SQL over `live` (table -> a relation of its live rows: the mirrors); `row` is
        the row's JSON. Computed now (one job, and the whole views' broadcasts), as a local checkpoint."""
        walker, jvm = self.walker, self.spark.sparkContext._jvm
        tables = walker.tables()
        # each gathered row's table, by its (view, occurrence): an expression, not a join (a broadcast
        # join's plan ran a job per table when its RDD was made)
        width = 1 + max((occ.id for plan in self.plans.values() for occ in plan.occurrences), default=0)
        pairs = [
            F.lit(x)
            for name, plan in self.plans.items()
            for occ in plan.occurrences
            for x in (walker.ids[name] * width + occ.id, tables.index(occ.table))
        ]
        reader = untag(F.col("tags")[0], ["view", "occ"])  # a row's readers share its table
        table_of = F.element_at(F.create_map(*pairs), reader[0] * width + reader[1]) if pairs else F.lit(None).cast("int")
        labelled = gathered.withColumn("table", table_of)
        shuffled = jvm.java.util.HashMap()  # type: ignore[union-attr]  # each table's rows, by view: view i's in partition i
        for ti, table in enumerate(tables):
            source = walker.sources[table]
            # parsed once, then one row per occurrence that reads it
            mine = untag_each(labelled.where(F.col("table") == ti).select(row_of(source, F.col("v")).alias("r"), "tags"), ["view", "occ"], "r")
            frame = mine.select(
                *[F.col("r")[c.name].alias(c.name) for c in source.columns],
                F.col("view").alias(VIEW),
                F.col("occ").alias(OCC),
                F.lit(None).cast("boolean").alias(MARK + table),
            )
            shuffled.put(MARK + table, self.replan.byLabel(frame._jdf, len(source.columns), len(walker.ids)))
        parts = []
        exact = [name for name in self.plans if name not in whole and self.exact[name]]
        if exact:  # a view whose anchors are found by exactly its keys has rows for those keys only
            parts.append(self._swapped(exact, shuffled))
        # one found by a part of its key (a superset), and a view recomputed whole, has its rows filtered
        # by the keys (a semi-join for each costs stages)
        inexact = [name for name in self.plans if name not in whole and not self.exact[name]]
        frames = [self._swapped(inexact, shuffled)] if inexact else []
        for name in whole:  # all of the view's rows, planned without adaptive execution: their shuffles run
            # as stages of the batch's job, side by side (planned adaptively, each view's ran when its RDD was made)
            frame = self._keyed(self.plans[name], self.spark.sql(recompute_sql(self.plans[name], live or {})))
            frames.append(DataFrame(self.replan.inSession(self.whole_session._jsparkSession, frame._jdf), self.spark))
        if frames:
            parts.append(self._union(frames).join(keys.select("view", "k"), ["view", "k"], "left_semi"))
        if not parts:
            return local_frame(self.spark, [], ROWS)
        # A stage over the views' plans side by side sends each of its tasks the lineage of them all, and
        # each task deserializes it (at 100 views, a stage of a task a view took 3.5-4 s): they run in as
        # many tasks as there are cores, once, and what reads the rows reads the checkpoint
        return reduce(DataFrame.unionByName, parts).coalesce(self.spark.sparkContext.defaultParallelism).localCheckpoint()

    def whole(self, live: Mapping[str, str], names: Collection[str] | None = None) -> DataFrame:
        """`(view, k, d, row)`: every row of the views `names` (default: every view walked), each by its
        SQL over `live` (table -> a relation of its live rows: the mirrors), planned without adaptive
        execution so that all views run as one job. Computed now, as a local checkpoint. A batch that
        changes much of the tables takes this way for every view (`diff_whole`): no keys are reached."""
        names = list(self.plans) if names is None else list(names)
        return self.whole_rows({name: self.spark.sql(recompute_sql(self.plans[name], live)) for name in names}).localCheckpoint()

    def whole_rows(self, frames: Mapping[str, DataFrame]) -> DataFrame:
        """`(view, k, d, row)` of every view's rows (`frames`: view -> its rows), one plan for all views."""
        if not frames:
            return local_frame(self.spark, [], ROWS)
        keyed = []
        for name, frame in frames.items():
            made = self._keyed(self.plans[name], frame)
            keyed.append(DataFrame(self.replan.inSession(self.whole_session._jsparkSession, made._jdf), self.spark))
        return self._union(keyed)

    def diff_rows(self, recomputed: DataFrame, names: Collection[str], version: int) -> DataFrame:
        """`(space, view, k, d, row, file, pos)` of every key of the views `names` whose row in `recomputed`
        (all of their rows) differs from its digest at `version` (a scan of the state): a new or changed
        row, or a key with no row now (`d` and `row` NULL); `file`/`pos`: where the row it replaces lives
        in the view's table. Not written (`lakemv.spark.engine.publish` writes it)."""
        walker = self.walker
        spaces = {walker.numbers[w.digests]: walker.ids[w.view] for w in walker.walks.views if w.view in set(names)}
        if not spaces:
            return local_frame(self.spark, [], "space INT, " + CHANGED)
        stored = walker.store.scan(version).where(F.col("space").isin(list(spaces))).select("space", F.col("a").alias("k"), F.col("v").alias("old"))
        view_of = F.element_at(F.create_map(*[F.lit(x) for pair in spaces.items() for x in pair]), F.col("space"))
        joined = recomputed.withColumn("space", self._digests()).join(stored, ["space", "k"], "full_outer")
        return joined.where(~F.col("d").eqNullSafe(digest_of("old"))).select(
            "space", F.coalesce(F.col("view"), view_of).alias("view"), "k", "d", "row", *place_of("old")
        )

    def diff_whole(self, recomputed: DataFrame, names: Collection[str], version: int) -> DataFrame:
        """`(view, k, d, row, file, pos)` of every row of the views `names` that changed (`diff_rows` of all
        of their rows, `whole`'s). Not written."""
        return self.diff_rows(recomputed, names, version).drop("space")

    def _swapped(self, names: list[str], shuffled: object) -> DataFrame:
        """The keyed rows of the views `names` (kept plans), each over its partition of `shuffled`: one call."""
        jvm = self.spark.sparkContext._jvm
        plans, ids = jvm.java.util.ArrayList(), jvm.java.util.ArrayList()  # type: ignore[union-attr]
        for name in names:
            plans.add(self.kept[name])
            ids.add(self.walker.ids[name])
        return DataFrame(self.replan.swapAll(self.session._jsparkSession, plans, ids, MARK, shuffled, ROWS), self.spark)

    def _union(self, frames: list[DataFrame]) -> DataFrame:
        """`frames`' rows (one schema, at least one frame) as one frame, built at once (`Replan.unionRows`)."""
        listed = self.spark.sparkContext._jvm.java.util.ArrayList()  # type: ignore[union-attr]
        for frame in frames:
            listed.add(frame._jdf)
        return DataFrame(self.replan.unionRows(self.spark._jsparkSession, listed), self.spark)

    def _keyed(self, plan: ViewPlan, frame: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        """A view's rows as `(view, k, d, row)`: its key packed as `reach` packs it, its digest, its JSON
        (and the columns `carry`, not part of the row). In SQL text: a few calls into the JVM a view, not
        one per function."""
        options = ", ".join(f"'{k}', \"{v}\"" for k, v in JSON.items())
        key_types = self.walker.key_types(plan)
        types = literal_array(key_types, "STRING")
        columns = ", ".join(f"`{c}`" for c in frame.columns if c not in carry)
        framed = frame.selectExpr(f"struct({columns}) AS r", *carry).selectExpr("r", f"to_json(r, map({options})) AS row", *carry)
        kinds = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        read = [column_text(f"r.`{name}`", kinds[name], t == RAW) for name, t in zip(plan.key_names, key_types, strict=True)]
        if all(t is not None for t in read):  # the key's texts read off the row's columns, not parsed back from its JSON
            key = f"CAST(to_json({texts_of('array(' + ', '.join(read) + ')', types)}) AS BINARY)"
        else:
            key = packed_texts("row", literal_array(list(plan.key_names), "STRING"), types)
        return framed.selectExpr(f"{self.walker.ids[plan.name]} AS view", f"{key} AS k", f"{DIGEST.format(row='r')} AS d", "row", *carry)

    def seed(self, full: Mapping[str, DataFrame], version: int) -> dict[str, int]:
        """Writes each view's digests and places over `version` from all of its rows as its table holds
        them (`full`: view -> its rows with `_file` and `_pos`, Iceberg's metadata columns); each view's rows."""
        digests = self._digests()
        placed = F.expr(PLACED.format(d="d", file="_file", pos="_pos"))
        parts = [
            self._keyed(self.plans[name], rows, ("_file", "_pos")).select(digests.alias("space"), F.col("k").alias("a"), placed.alias("v"))
            for name, rows in full.items()
        ]
        entries = reduce(DataFrame.unionByName, parts).select("space", "a", F.lit(b"").cast("binary").alias("b"), "v")
        counts = {int(r["space"]): int(r["count"]) for r in self.walker.store.update(entries, version).groupBy("space").count().collect()}
        return {name: counts.get(self.walker.numbers[w.digests], 0) for w in self.walker.walks.views if (name := w.view) in full}

    def differing(self, full: Mapping[str, DataFrame], version: int) -> dict[str, int]:
        """Per view of `full` (view -> all of its rows, recomputed), how many of its keys the digests at
        `version` hold otherwise (a missing key, an extra one, another digest): 0 when the view is exact."""
        return self.differing_rows(self.whole_rows(full), list(full), version)

    def differing_rows(self, rows: DataFrame, names: Collection[str], version: int) -> dict[str, int]:
        """`differing` of the views `names` from all of their rows already keyed (`whole_rows`' frame)."""
        found = self.diff_rows(rows, names, version)
        ids = {self.walker.ids[name]: name for name in names}
        counts = {ids[int(r["view"])]: int(r["count"]) for r in found.groupBy("view").count().collect()}
        return {name: counts.get(name, 0) for name in names}

    def ways(self, table_rows: Mapping[str, int], view_rows: Mapping[str, int]) -> Ways:
        """The choice of each batch between gathering a view's rows and recomputing it whole, sized by
        its tables' rows and its own (`seed`'s)."""
        read = {name: [occ.table for occ in plan.occurrences] for name, plan in self.plans.items()}
        return Ways.seeded(read, view_rows, table_rows)

    def counts(self, frame: DataFrame) -> dict[str, int]:
        """`frame`'s rows per view (a frame with `view`: reach's keys, the gathered rows; or with `tags`:
        `gather_grouped`'s, a row counted for each view it was read for): one small job."""
        names = {i: name for name, i in self.walker.ids.items()}
        if "tags" in frame.columns:
            frame = untag_each(frame, ["view", "occ"])
        return {names[int(r["view"])]: int(r["count"]) for r in frame.groupBy("view").count().collect()}

    def _digests(self) -> Column:
        """A view id's digest space (a column over `view`)."""
        spaces = [x for w in self.walker.walks.views for x in (F.lit(self.walker.ids[w.view]), F.lit(self.walker.numbers[w.digests]))]
        return F.element_at(F.create_map(*spaces), F.col("view")).cast("int")

    def diff(self, recomputed: DataFrame, keys: DataFrame, version: int) -> DataFrame:
        """`(view, k, d, row, file, pos)` of every row that changed (a deleted row: `d` and `row` NULL;
        `file`/`pos`: where the row it replaces lives in the view's table): the batch's recomputed rows
        (`run`'s, from its checkpoint) and its reached keys with no row, written over the digests at
        `version` (one update round, committing `version + 1` when evaluated). An unchanged row's entry
        keeps its place; a changed row's holds its new digest until `publish` places it."""
        removed = keys.select("view", "k").join(recomputed.select("view", "k"), ["view", "k"], "left_anti")
        changes = recomputed.select("view", "k", "d", "row").unionByName(
            removed.select("view", "k", F.lit(None).cast("binary").alias("d"), F.lit(None).cast("string").alias("row"))
        )
        spaced = self.walker.keep(changes.withColumn("space", self._digests()))  # written, then joined
        entries = spaced.select("space", F.col("k").alias("a"), F.lit(b"").cast("binary").alias("b"), F.col("d").alias("v"), F.lit(True).alias("p"))
        written = self.walker.store.update(entries, version)  # p: an entry that begins with the same digest is kept
        changed = written.where(~F.col("v").eqNullSafe(F.col("old"))).select("space", F.col("a").alias("k"), *place_of("old"))
        return spaced.join(changed, ["space", "k"]).select("view", "k", "d", "row", "file", "pos")


def digest_of(value: str) -> Column:
    """The digest part of a view row's entry (`PLACED`: its digest, then its place)."""
    return F.expr(f"substring({value}, 1, 16)")


def place_of(value: str) -> list[Column]:
    """`file`, `pos`: a view row's place in its table, read off its entry (null when it has none)."""
    return [
        F.expr(f"nullif(decode(substring({value}, 25, 2147483647), 'UTF-8'), '')").alias("file"),
        F.expr(f"CASE WHEN length({value}) > 16 THEN CAST(conv(hex(substring({value}, 17, 8)), 16, 10) AS BIGINT) END").alias("pos"),
    ]
