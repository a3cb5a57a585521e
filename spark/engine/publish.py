"""A batch's changed view rows written into the views' Iceberg tables: one job writes every view's
files, each view's `RowDelta` commits them, then the state takes each written row's digest and place.

No table is read. The state keeps, beside each view row's digest, where the row lives in its table
(its data file and position, `views.PLACED`), so the diff already knows the rows a change replaces:
one Spark job (`ViewFiles.write`, in the JVM) writes each view's new rows into one data file and the
replaced rows' positions into one position-delete file; their commits - one `RowDelta` a view, the
files of all views committed from a few threads, each snapshot stamped with the batch - follow; then
one update round writes the new rows' digests and places (and drops the removed rows' entries).

A commit validates that the files its deletes point into were not removed since the places were read
(the table's last snapshot a batch published, or the one they were seeded from): a compaction since
then fails the commit rather than leaving a replaced row behind. The tables are loaded once
(`ViewFiles.open`) and kept across batches: lakemv is their only writer, and a commit refreshes its
table first.

Position deletes are what Spark's own merge-on-read writes, so every engine reads the tables (Spark,
DuckDB, pyiceberg) and compaction folds them away.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakemv.catalog.tables import TABLE_PROPERTIES
from lakemv.core.errors import TablesRewritten
from lakemv.spark.engine.views import PLACED, Recompute

COMMIT_THREADS = 8  # views committed at once (each commit: a manifest, a manifest list, a metadata file, the catalog)


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
        self._handle = None  # the JVM's ViewFiles: the tables loaded once, for every batch after they exist

    def _files(self):
        if self._handle is None:
            jvm = self.spark.sparkContext._jvm  # type: ignore[union-attr]
            names = jvm.java.util.HashMap()
            for name, table in self.tables.items():
                names.put(self.ids[name], table)
            self._handle = jvm.dev.lakemv.iceberg.ViewFiles.open(self.spark._jsparkSession, names)
        return self._handle

    def reload(self) -> None:
        """The tables are loaded again at their next batch (at the snapshots then current)."""
        self._handle = None

    def create(self, full: Mapping[str, DataFrame]) -> None:
        """Each view's table made (or replaced) from all of its rows (`full`: view -> its rows)."""
        for name, rows in full.items():
            writer = rows.writeTo(self.tables[name]).using("iceberg")
            for key, value in TABLE_PROPERTIES.items():
                writer = writer.tableProperty(key, value)
            writer.createOrReplace()
        self.reload()  # made anew

    def seed(self, version: int, names: Collection[str] | None = None) -> dict[str, int]:
        """The digests and places of the views `names` (default: all), read from their tables, written
        over `version`; each view's rows. After `TablesRewritten`, seeding the views it names mends them."""
        self.reload()  # the places are read now: a commit validates from the snapshots they were read at
        self._files()
        chosen = self.tables if names is None else {name: self.tables[name] for name in names}
        full = {name: self.spark.table(table).select("*", "_file", "_pos") for name, table in chosen.items()}
        return self.recompute.seed(full, version)

    def publish(
        self, changed: DataFrame, version: int, batch: int | str, prefix: str | None = None, committed: Callable[[], None] | None = None
    ) -> Publication:
        """`changed` (`Recompute.diff`'s or `diff_whole`'s rows) written into the views' tables (their
        files named from `prefix`, by default the batch's number) and committed, stamped with `batch`;
        then their digests and places written over `version` (after the diff's own write, if it made one);
        `committed` is called between the commits and that write (a crash point)."""
        spark = self.spark
        partitions = max(1, min(len(self.tables), 2 * spark.sparkContext.defaultParallelism))
        known = self.recompute.walker.keep(changed.where(F.col("view").isin(list(self.names))))
        files = self._files()
        jwritten = files.write(known._jdf, prefix or f"lmv-{batch:08d}", partitions)
        written = DataFrame(jwritten, spark).localCheckpoint()  # the files are written once, here
        try:  # each view's snapshot stamped with the batch (`lakemv.batch` in its summary: ViewFiles.BATCH)
            made = files.commit(written._jdf, str(batch), COMMIT_THREADS)
        except Py4JJavaError as error:
            thrown = error.java_exception
            if thrown.getClass().getName() != "dev.lakemv.iceberg.ViewFiles$Rewritten":
                raise
            raise TablesRewritten(sorted(self.names[int(v)] for v in thrown.views()), bool(thrown.othersCommitted())) from None
        if committed is not None:
            committed()
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
