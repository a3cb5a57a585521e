"""A batch's changed view rows written into the views' Iceberg tables: one job writes every view's
files, each view's `RowDelta` commits them, then the state takes each written row's digest and place.

No table is read. The state keeps, beside each view row's digest, where the row lives in its table
(its data file and position, `views.PLACED`), so the diff already knows the rows a change replaces:
one Spark job (`ViewFiles.write`, in the JVM) writes each view's new rows into one data file and the
replaced rows' positions into one position-delete file; their commits - one `RowDelta` a view, the
files of all views committed from a few threads, each snapshot stamped with the batch - follow; then
one update round writes the new rows' digests and places (and drops the removed rows' entries). A
commit validates that the files its deletes point into were not removed since the table was loaded for
it: a compaction committed in that window fails it rather than leaving a replaced row behind. A
compaction between two batches is not caught yet (the places would need validating from the snapshot
they were read at): until then such a compaction would leave the replaced rows behind.

Position deletes are what Spark's own merge-on-read writes, so every engine reads the tables (Spark,
DuckDB, pyiceberg) and compaction folds them away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakemv.catalog.tables import TABLE_PROPERTIES
from lakemv.spark.engine.views import PLACED, Recompute

COMMIT_THREADS = 8  # views committed at once (each commit: a manifest, a manifest list, a metadata file, the catalog)
BATCH_PROPERTY = "lakemv.batch"  # the snapshot summary's batch id: every view's commit of one batch carries it


@dataclass
class Publication:
    """What a batch wrote: per view, its rows written and removed, and its new snapshot."""

    written: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)
    version: int = 0  # the state's version after the digests and places were written


class ViewTables:
    """The Iceberg tables of the views a `Recompute` computes (`tables`: view -> table name)."""

    def __init__(self, recompute: Recompute, tables: Mapping[str, str]):
        self.recompute, self.tables = recompute, dict(tables)
        self.spark = recompute.spark
        self.ids = {name: recompute.walker.ids[name] for name in self.tables}
        self.names = {i: name for name, i in self.ids.items()}
        jvm = self.spark.sparkContext._jvm  # type: ignore[union-attr]
        self._files = jvm.dev.lakemv.iceberg.ViewFiles
        self._jtables = jvm.java.util.HashMap()
        for name, table in self.tables.items():
            self._jtables.put(self.ids[name], table)

    def create(self, full: Mapping[str, DataFrame]) -> None:
        """Each view's table made (or replaced) from all of its rows (`full`: view -> its rows)."""
        for name, rows in full.items():
            writer = rows.writeTo(self.tables[name]).using("iceberg")
            for key, value in TABLE_PROPERTIES.items():
                writer = writer.tableProperty(key, value)
            writer.createOrReplace()

    def seed(self, version: int) -> dict[str, int]:
        """The views' digests and places, read from their tables, written over `version`; each view's rows."""
        full = {name: self.spark.table(table).select("*", "_file", "_pos") for name, table in self.tables.items()}
        return self.recompute.seed(full, version)

    def publish(self, changed: DataFrame, version: int, batch: int) -> Publication:
        """`changed` (`Recompute.diff`'s or `diff_whole`'s rows) written into the views' tables and
        committed, stamped with `batch`; then their digests and places written over `version` (after
        the diff's own write, if it made one)."""
        spark = self.spark
        partitions = max(1, min(len(self.tables), 2 * spark.sparkContext.defaultParallelism))
        known = self.recompute.walker.keep(changed.where(F.col("view").isin(list(self.names))))
        jwritten = self._files.write(spark._jsparkSession, known._jdf, self._jtables, f"lmv-{batch:08d}", partitions)
        written = DataFrame(jwritten, spark).localCheckpoint()  # the files are written once, here
        summary = spark.sparkContext._jvm.java.util.HashMap()  # type: ignore[union-attr]
        summary.put(BATCH_PROPERTY, str(batch))
        made = self._files.commit(spark._jsparkSession, written._jdf, self._jtables, summary, COMMIT_THREADS)
        digests = self.recompute._digests()
        rows = written.where(F.col("meta").isNull())
        entries = rows.select(
            digests.alias("space"), F.col("k").alias("a"), F.expr(PLACED.format(d="d", file="file", pos="pos")).alias("v")
        ).unionByName(known.where(F.col("row").isNull()).select(digests.alias("space"), F.col("k").alias("a"), F.lit(None).cast("binary").alias("v")))
        counts = (
            self.recompute.walker.store.update(entries.select("space", "a", F.lit(b"").cast("binary").alias("b"), "v"), version)
            .groupBy(F.col("v").isNull().alias("removed"), "space")
            .count()
            .collect()
        )
        spaces = {self.recompute.walker.numbers[w.digests]: w.view for w in self.recompute.walker.walks.views}
        published = Publication(snapshots={self.names[int(v)]: int(s) for v, s in dict(made).items()}, version=version + 1)
        for r in counts:
            into = published.removed if r["removed"] else published.written
            into[spaces[int(r["space"])]] = int(r["count"])
        return published
