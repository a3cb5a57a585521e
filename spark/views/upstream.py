"""A view's change stream for the views that read it (`lakemv.core.planner.dag`): the rows of its
table one unit changed, old and new, read back from the tables, so a replay finds them as the first
attempt made them.

A unit tags every snapshot it commits with its write id (`lakemv.spark.commits.tagged`). The view's
feed rows of the unit (in the feeds table's snapshots with that id) name the keys whose rows changed;
their old rows are the view table's as of the snapshot before the unit's first commit to it, their
new rows its snapshot after the unit's last. A unit that crashed after the view's commit and before
its readers' finds the same rows when replayed, though its own step of the view then writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakemv.catalog.declarations import ViewSource
from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.batch.result import ViewResult
from lakemv.core.cdc.effects import SIGN
from lakemv.core.sql.feedsql import feed_column
from lakemv.core.sql.quote import q, spark_string
from lakemv.spark.commits import WRITE_ID, WriteUnit
from lakemv.spark.materialise import materialise, materialised, release


def unit_span(spark: SparkSession, table: str, write_id: str) -> tuple[int | None, int] | None:
    """(the snapshot before the unit's first commit to `table` (None: it was the table's first), its
    last commit), or None when the unit committed nothing to it. Its commits follow each other: no
    other writer commits to the table inside a unit (compaction waits for its turn)."""
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id FROM {table}.snapshots WHERE summary[{spark_string(WRITE_ID)}] = {spark_string(write_id)}"
    ).collect()
    if not rows:
        return None
    ids = {int(r["snapshot_id"]) for r in rows}
    parents = {None if r["parent_id"] is None else int(r["parent_id"]) for r in rows}
    first = next(r for r in rows if r["parent_id"] is None or int(r["parent_id"]) not in ids)
    last = next(i for i in ids if i not in parents)
    return (None if first["parent_id"] is None else int(first["parent_id"])), last


def changed_keys(spark: SparkSession, names: TableNames, view: ViewSource, span: tuple[int | None, int]) -> DataFrame:
    """The keys of `view` whose rows its feed rows committed in `span` (of the feeds table) name."""
    before, last = span
    reader = spark.read.format("iceberg")
    if before is None:  # the feeds table's first commits: every row up to the last is theirs
        rows = reader.option("snapshot-id", str(last)).load(names.feeds)
    else:  # an incremental read: the rows the appends after `before` up to `last` added
        rows = reader.option("start-snapshot-id", str(before)).option("end-snapshot-id", str(last)).load(names.feeds)
    struct = F.col(feed_column(view.name))
    mine = rows.where((F.col("view") == view.name) & struct.isNotNull())
    return mine.select(*(struct.getField(k).alias(k) for k in view.primary_key)).distinct()


def images_sql(names: TableNames, view: ViewSource, span: tuple[int | None, int], keys: str) -> str:
    """Old and new rows of `view` for the keys in relation `keys`: its table before the unit (each row
    signed -1) and after it (+1), the sign in column SIGN."""
    before, after = span
    on = " AND ".join(f"v.{q(k)} <=> k.{q(k)}" for k in view.primary_key)
    sides = [(after, 1)] + ([(before, -1)] if before is not None else [])
    return " UNION ALL ".join(
        f"SELECT v.*, {sign} AS {SIGN} FROM ({live_rows_sql(names, view, snapshot)}) v LEFT SEMI JOIN {keys} k ON {on}" for snapshot, sign in sides
    )


def _signed(view: str) -> str:
    """The temp view of `view`'s changed rows with their signs (`UpstreamImages.signed`)."""
    return f"_lmv_upsigned_{view}"


class UpstreamImages:
    """The changed rows of the views a unit maintained, each made a temp view once for its readers."""

    def __init__(self, spark: SparkSession, names: TableNames, unit: WriteUnit, done: Mapping[str, ViewResult]):
        self.spark = spark
        self.names = names
        self.unit = unit
        self.done = done  # what the unit did to each view so far (a replay's step writes nothing: look anyway)
        self.made: dict[str, str | None] = {}
        self.held: list[DataFrame] = []  # the signed rows materialised, released at `close`

    def relation(self, view: ViewSource) -> str | None:
        """A temp view of `view`'s rows the unit changed (old and new), or None when it changed none."""
        if view.name not in self.made:
            self.made[view.name] = self._make(view)
        return self.made[view.name]

    def signed(self, view: ViewSource) -> str | None:
        """The same rows with their signs (-1 old, +1 new, in column SIGN), or None when it changed none."""
        return None if self.relation(view) is None else _signed(view.name)

    def _make(self, view: ViewSource) -> str | None:
        result = self.done.get(view.name)
        if not self.unit.replay and (result is None or result.paused or not (result.upserts or result.deletes)):
            return None
        span = unit_span(self.spark, self.names.view(view.name), self.unit.write_id)
        feeds = unit_span(self.spark, self.names.feeds, self.unit.write_id) if span is not None else None
        if span is None or feeds is None:
            return None
        keys = f"_lmv_upkeys_{view.name}"
        with materialised(changed_keys(self.spark, self.names, view, feeds), keys):
            relation = f"_lmv_upstream_{view.name}"
            signed = materialise(self.spark.sql(images_sql(self.names, view, span, keys)))
            self.held.append(signed)
            signed.createOrReplaceTempView(_signed(view.name))
            signed.drop(SIGN).createOrReplaceTempView(relation)
        return relation

    def close(self) -> None:
        for name, relation in self.made.items():
            if relation is not None:
                self.spark.catalog.dropTempView(relation)
                self.spark.catalog.dropTempView(_signed(name))
        for signed in self.held:
            release(signed)
        self.held.clear()
