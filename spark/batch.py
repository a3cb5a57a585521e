"""One ingest batch: raw lines -> parsed, deduplicated changes -> mirror MERGEs + dead letters."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from catalog.declarations import SourceTable
from catalog.tables import POSITION, TableNames, mirror_arrow_schema
from spark.changeset import build_changeset, changes_to_arrow
from spark.deadletters import append_dead_letters, ensure_dead_letters
from spark.delta import effective_delta
from spark.maintain import ViewMaintainer, ViewResult
from spark.mirror import ensure_mirror, ensure_namespaces, ensure_view_namespace, merge_changes, stored_rows
from spark.planner import ViewPlan


@dataclass(frozen=True)
class BatchResult:
    """What one batch did: lines read, events parsed, changes merged per table, rejects, time."""

    batch_id: int
    lines: int
    events: int
    merged: Mapping[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    skipped: int = 0
    seconds: float = 0.0
    views: Mapping[str, ViewResult] = field(default_factory=dict)

    def describe(self) -> str:
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.merged.items())) or "no changes"
        views = "".join(
            f"; {v.view} {v.keys} keys -> {v.upserts} upserts, {v.deletes} deletes" for v in self.views.values()
        )
        return (
            f"batch {self.batch_id}: {self.lines} lines, {self.events} events -> {tables}; "
            f"{self.dead_letters} dead letters, {self.skipped} skipped{views}, {self.seconds:.2f}s"
        )


def _now_micros() -> int:
    return time.time_ns() // 1000


class BatchProcessor:
    """Applies batches of landing lines to the mirrors of one catalog and keeps its views fresh.

    Creating a processor creates missing tables and builds views that are new or whose SQL changed
    (`built` holds what that did).
    """

    def __init__(
        self,
        spark: SparkSession,
        names: TableNames,
        sources: Mapping[str, SourceTable],
        views: Sequence[ViewPlan] = (),
    ):
        self.spark = spark
        self.names = names
        self.sources = sources
        ensure_namespaces(spark, names)
        ensure_dead_letters(spark, names)
        for source in sources.values():
            ensure_mirror(spark, names, source)
        if views:
            ensure_view_namespace(spark, names)
        self.maintainers = [ViewMaintainer(spark, names, sources, plan) for plan in views]
        self.watched = {table for plan in views for table in plan.tables}
        self.built = [r for r in (m.ensure() for m in self.maintainers) if r is not None]

    def process_lines(self, batch_id: int, lines: list[tuple[str, str]]) -> BatchResult:
        """Apply `(line, file)` pairs as batch `batch_id`."""
        started = time.perf_counter()
        changeset = build_changeset(lines, self.sources)
        now = _now_micros()
        append_dead_letters(self.spark, self.names, changeset.dead_letters, batch_id, now)
        merged: dict[str, int] = {}
        deltas: dict[str, str] = {}
        positions: list[int] = []
        try:
            for table, changes in sorted(changeset.changes.items()):
                source = self.sources[table]
                rows = changes_to_arrow(source, changes, batch_id, now)
                if table in self.watched:
                    rows = self._with_delta(source, rows, deltas)
                if rows.num_rows:
                    merge_changes(self.spark, self.names, source, rows)
                    positions.append(pc.max(rows.column(POSITION)).as_py())
                merged[table] = rows.num_rows
            position = max(positions) if positions else None
            views = {m.plan.name: m.apply(deltas, batch_id, position) for m in self.maintainers if deltas}
        finally:
            for relation in deltas.values():
                self.spark.catalog.dropTempView(relation)
        return BatchResult(
            batch_id=batch_id,
            lines=len(lines),
            events=changeset.events,
            merged=merged,
            dead_letters=len(changeset.dead_letters),
            skipped=sum(changeset.skipped.values()),
            seconds=time.perf_counter() - started,
            views=views,
        )

    def _with_delta(self, source: SourceTable, rows: pa.Table, deltas: dict[str, str]) -> pa.Table:
        """Keep the rows that will apply; register their old and new images as `_lmv_delta_<table>`."""
        stored = stored_rows(self.spark, self.names, source, rows)
        delta = effective_delta(source.primary_key, source.column_names, rows.to_pylist(), stored.to_pylist())
        if delta.images:
            schema = pa.schema([f for f in mirror_arrow_schema(source) if f.name in source.column_names])
            relation = f"_lmv_delta_{source.name}"
            self.spark.createDataFrame(pa.Table.from_pylist(delta.images, schema=schema)).createOrReplaceTempView(relation)
            deltas[source.name] = relation
        return rows.take(pa.array(delta.applied, type=pa.int64()))

    def process_dataframe(self, frame: DataFrame, batch_id: int) -> BatchResult:
        """Apply a micro-batch of lines: columns `value` (the line) and `file` (where it came from)."""
        table = frame.toArrow()
        lines = list(zip(table.column("value").to_pylist(), table.column("file").to_pylist(), strict=True))
        return self.process_lines(batch_id, lines)
