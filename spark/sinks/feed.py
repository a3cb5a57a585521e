"""A view's change feed as the data products read it (`lakemv.spark.sinks.products`): its snapshots in commit order,
what a sink has still to deliver after its progress, and the rows one append snapshot added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import TableNames
from lakemv.core.sql.quote import q


@dataclass(frozen=True)
class Sink:
    """One data product of one view."""

    view: str
    kind: str  # kafka | delta
    target: str  # the topic, or the Delta table's path
    key: tuple[str, ...]
    columns: tuple[str, ...]
    catalog: str

    @property
    def id(self) -> str:
        return f"lakemv.{self.catalog}.{self.view}.{self.kind}"


@dataclass(frozen=True)
class FeedSnapshot:
    snapshot_id: int
    parent_id: int | None
    sequence: int
    committed_ms: int
    append: bool = True  # False: a compaction or the like, which adds no change


@dataclass(frozen=True)
class Progress:
    snapshot_id: int | None
    sequence: int


def feed_history(settings: LakeSettings, view: str) -> list[FeedSnapshot]:
    """The feed table's current snapshot and its ancestors, oldest first (pyiceberg: no Spark job)."""
    from lakemv.catalog.lake import pyiceberg_catalog

    names = TableNames(settings.catalog_name)
    identifier = names.view_changes(view).split(".", 1)[1]
    table = pyiceberg_catalog(settings).load_table(identifier)
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    current = table.metadata.current_snapshot_id
    chain = []
    while current is not None and current in snapshots:
        s = snapshots[current]
        append = s.summary is None or s.summary.operation.value == "append"
        chain.append(FeedSnapshot(s.snapshot_id, s.parent_snapshot_id, s.sequence_number or 0, s.timestamp_ms, append))
        current = s.parent_snapshot_id
    return chain[::-1]


def pending(history: Sequence[FeedSnapshot], progress: Progress | None) -> tuple[list[FeedSnapshot], bool]:
    """(appends to deliver after `progress`, in order; whether the whole view must be published instead).
    `progress` with no snapshot means "published while the feed had none"."""
    if progress is None:
        return [], True
    if progress.snapshot_id is None:
        return [], bool(history)
    ids = [s.snapshot_id for s in history]
    if progress.snapshot_id not in ids:
        return [], True
    after = history[ids.index(progress.snapshot_id) + 1 :]
    return [s for s in after if s.append], False


def feed_uuid(settings: LakeSettings, view: str) -> str:
    """The feed table's UUID: a feed dropped and created again is another feed."""
    from lakemv.catalog.lake import pyiceberg_catalog

    identifier = TableNames(settings.catalog_name).view_changes(view).split(".", 1)[1]
    return str(pyiceberg_catalog(settings).load_table(identifier).metadata.table_uuid)


def feed_changes(spark: SparkSession, names: TableNames, sink: Sink, snapshot: FeedSnapshot) -> pa.Table:
    """The feed rows (key columns, `op`, `row`) one append snapshot added."""
    reader = spark.read.format("iceberg")
    if snapshot.parent_id is None:
        reader = reader.option("snapshot-id", str(snapshot.snapshot_id))
    else:
        reader = reader.option("start-snapshot-id", str(snapshot.parent_id)).option("end-snapshot-id", str(snapshot.snapshot_id))
    return reader.load(names.view_changes(sink.view)).select(*[q(k) for k in sink.key], "op", "row").toArrow()


def snapshot_options(snapshot: FeedSnapshot) -> str:
    """The Iceberg read options (SQL `WITH (...)`) of the rows one append snapshot added."""
    if snapshot.parent_id is None:
        return f"'snapshot-id' = '{snapshot.snapshot_id}'"
    return f"'start-snapshot-id' = '{snapshot.parent_id}', 'end-snapshot-id' = '{snapshot.snapshot_id}'"
