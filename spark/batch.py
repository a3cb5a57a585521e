"""One ingest batch: raw lines -> parsed, deduplicated changes -> mirror MERGEs + dead letters."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from catalog.declarations import SourceTable
from catalog.tables import TableNames
from spark.changeset import build_changeset, changes_to_arrow
from spark.deadletters import append_dead_letters, ensure_dead_letters
from spark.mirror import ensure_mirror, ensure_namespaces, merge_changes


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

    def describe(self) -> str:
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.merged.items())) or "no changes"
        return (
            f"batch {self.batch_id}: {self.lines} lines, {self.events} events -> {tables}; "
            f"{self.dead_letters} dead letters, {self.skipped} skipped, {self.seconds:.2f}s"
        )


def _now_micros() -> int:
    return time.time_ns() // 1000


class BatchProcessor:
    """Applies batches of landing lines to the mirrors of one catalog."""

    def __init__(self, spark: SparkSession, names: TableNames, sources: Mapping[str, SourceTable]):
        self.spark = spark
        self.names = names
        self.sources = sources
        ensure_namespaces(spark, names)
        ensure_dead_letters(spark, names)
        for source in sources.values():
            ensure_mirror(spark, names, source)

    def process_lines(self, batch_id: int, lines: list[tuple[str, str]]) -> BatchResult:
        """Apply `(line, file)` pairs as batch `batch_id`."""
        started = time.perf_counter()
        changeset = build_changeset(lines, self.sources)
        now = _now_micros()
        append_dead_letters(self.spark, self.names, changeset.dead_letters, batch_id, now)
        merged = {}
        for table, changes in sorted(changeset.changes.items()):
            source = self.sources[table]
            merge_changes(self.spark, self.names, source, changes_to_arrow(source, changes, batch_id, now))
            merged[table] = len(changes)
        return BatchResult(
            batch_id=batch_id,
            lines=len(lines),
            events=changeset.events,
            merged=merged,
            dead_letters=len(changeset.dead_letters),
            skipped=sum(changeset.skipped.values()),
            seconds=time.perf_counter() - started,
        )

    def process_dataframe(self, frame: DataFrame, batch_id: int) -> BatchResult:
        """Apply a micro-batch of lines: columns `value` (the line) and `file` (where it came from)."""
        table = frame.toArrow()
        lines = list(zip(table.column("value").to_pylist(), table.column("file").to_pylist(), strict=True))
        return self.process_lines(batch_id, lines)
