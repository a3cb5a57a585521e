"""One unit of ingest: raw lines -> parsed, deduplicated changes -> mirror MERGEs -> views, exactly once.

The steps, each safe to repeat when a crash makes Spark replay the batch:

1. parse the lines (pure, deterministic);
2. plan: per table, the change rows that apply and the old/new images views need, saved in the
   journal *before* any table changes (a replay reads the plan back: the old images may be gone);
3. append dead letters, MERGE each mirror, maintain each view, append the ledger row. Every snapshot
   is tagged with the unit's write id; a replay skips appends its first attempt committed, the mirror
   MERGE's position guard and the view's content diff make the MERGEs no-ops once applied.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from catalog.declarations import SourceTable
from catalog.evolution import infer_column, with_columns
from catalog.tables import POSITION, SOURCE_TS, TableNames, mirror_arrow_schema
from spark.changeset import ChangeSet, build_changeset, changes_to_arrow
from spark.commits import Retries, WriteUnit, append_once, committed, tagged
from spark.deadletters import dead_letters_to_arrow, ensure_dead_letters
from spark.delta import effective_delta
from spark.faults import crash_point
from spark.journal import BatchRef, Journal, TablePlan
from spark.ledger import LedgerEntry, TableEntry, append_entry, ensure_ledger
from spark.maintain import ViewMaintainer, ViewResult
from spark.mirror import (
    add_mirror_columns,
    ensure_mirror,
    ensure_namespaces,
    ensure_view_namespace,
    evolved_source,
    merge_changes,
    stored_rows,
)
from spark.parallel import concurrently
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
    skip_reasons: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    views: Mapping[str, ViewResult] = field(default_factory=dict)
    chunk: int = 0
    replayed: bool = False  # a crash interrupted an earlier attempt of this unit
    already_committed: bool = False  # ... which had finished: nothing was left to do
    conflicts_retried: int = 0
    notes: tuple[str, ...] = ()  # schema drift: columns added, columns missing, views affected
    steps: Mapping[str, float] = field(default_factory=dict)  # seconds per step (parse, plan, mirrors, views, ledger)

    def describe(self) -> str:
        name = f"batch {self.batch_id}" + (f".{self.chunk}" if self.chunk else "")
        if self.already_committed:
            return f"{name}: replayed, already committed ({self.lines} lines), {self.seconds:.2f}s"
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.merged.items())) or "no changes"
        views = "".join(
            f"; {v.view} {v.note}" if v.paused
            else f"; {v.view} {v.keys} keys -> {v.upserts} upserts, {v.deletes} deletes" + (f" ({v.note})" if v.note else "")
            for v in self.views.values()
        )  # fmt: skip
        extra = (" (replayed)" if self.replayed else "") + (
            f", {self.conflicts_retried} commit conflicts retried" if self.conflicts_retried else ""
        )
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.skip_reasons.items()))
        skipped = f"{self.skipped} skipped" + (f" ({reasons})" if reasons else "")
        return (
            f"{name}{extra}: {self.lines} lines, {self.events} events -> {tables}; "
            f"{self.dead_letters} dead letters, {skipped}{views}, {self.seconds:.2f}s"
        )


def _now_micros() -> int:
    return time.time_ns() // 1000


class BatchProcessor:
    """Applies units of landing lines to the mirrors of one catalog and keeps its views fresh.

    Creating a processor creates missing tables and builds views that are new or whose SQL changed
    (`built` holds what that did). With a `journal`, a replayed unit is recognised and finished
    exactly once; without one (tests of a single attempt), every unit is a first attempt.
    """

    def __init__(
        self,
        spark: SparkSession,
        names: TableNames,
        sources: Mapping[str, SourceTable],
        views: Sequence[ViewPlan] = (),
        journal: Journal | None = None,
        max_line_chars: int | None = None,
    ):
        self.spark = spark
        self.max_line_chars = max_line_chars
        self.names = names
        self.sources = dict(sources)
        self.journal = journal
        ensure_namespaces(spark, names)
        ensure_dead_letters(spark, names)
        ensure_ledger(spark, names)
        for name, source in list(self.sources.items()):
            ensure_mirror(spark, names, source)
            self.sources[name] = evolved_source(spark, names, source)
        if views:
            ensure_view_namespace(spark, names)
        self.maintainers = [ViewMaintainer(spark, names, self.sources, plan) for plan in views]
        self.watched = {table for plan in views for table in plan.tables}
        self.built = [r for r in (m.ensure() for m in self.maintainers) if r is not None]

    def process_lines(self, batch_id: int, lines: list[tuple[str, str]], stream: str = "local") -> BatchResult:
        """Apply `(line, file)` pairs as batch `batch_id` of `stream`."""
        return self.process(BatchRef(stream, batch_id), lines)

    def process(
        self, ref: BatchRef, lines: list[tuple[str, str]], file_skips: Mapping[str, int] | None = None
    ) -> BatchResult:
        """Apply one unit of lines, exactly once however often it is replayed.

        `file_skips` counts files that gave no lines (empty, or gone before Spark read them), by reason.
        """
        started = time.perf_counter()
        started_at = _now_micros()
        plans = None
        if self.journal is not None:
            self.journal.forget_before(ref)
            plans = self.journal.load(ref)
        unit = WriteUnit(ref.write_id, replay=plans is not None, retries=Retries(), batch_id=ref.batch)
        if unit.replay and committed(self.spark, self.names.ledger, ref.write_id):
            crash_point("batch_end", ref.batch)
            return BatchResult(
                ref.batch, len(lines), 0, chunk=ref.chunk, replayed=True, already_committed=True,
                seconds=time.perf_counter() - started,
            )
        clock = _Clock()
        changeset = build_changeset(lines, self.sources, self.max_line_chars)
        notes: list[str] = []
        if changeset.new_fields and self._evolve(changeset.new_fields, notes):
            changeset = build_changeset(lines, self.sources, self.max_line_chars)  # again, with the new columns
        notes += self._absent_notes(changeset.absent)
        changeset.skipped.update(file_skips or {})
        clock.lap("parse")
        crash_point("parsed", ref.batch)
        if plans is None:
            plans = self._plan(changeset, ref.batch, started_at)
            clock.lap("plan")
            if self.journal is not None:
                self.journal.save(ref, plans)
                clock.lap("journal")
        crash_point("journaled", ref.batch)
        with tagged(self.spark, ref.write_id):
            views = self._apply(changeset, plans, unit, started_at, clock)
            result = BatchResult(
                batch_id=ref.batch,
                lines=len(lines),
                events=changeset.events,
                merged={t: p.rows.num_rows for t, p in plans.items()},
                dead_letters=len(changeset.dead_letters),
                skipped=sum(changeset.skipped.values()),
                skip_reasons=dict(changeset.skipped),
                views=views,
                chunk=ref.chunk,
                replayed=unit.replay,
                notes=tuple(notes),
            )
            entry = self._ledger_entry(ref, result, plans, unit, started_at)
            append_once(self.spark, self.names.ledger, unit, lambda: append_entry(self.spark, self.names, entry))
            clock.lap("ledger")
            crash_point("ledger", ref.batch)
        crash_point("batch_end", ref.batch)
        seconds = time.perf_counter() - started
        return replace(result, seconds=seconds, conflicts_retried=unit.retries.count, steps=clock.rounded())

    # ---- schema drift ------------------------------------------------------------------------------
    def _evolve(self, new_fields: Mapping[str, Mapping[str, object]], notes: list[str]) -> bool:
        """Add a nullable mirror column for each new after-image field; True if any was added."""
        added = False
        for table, fields in sorted(new_fields.items()):
            columns = []
            for name, sample in sorted(fields.items()):
                column = infer_column(name, sample)
                if isinstance(column, str):
                    notes.append(f"{table}: {column}")
                    continue
                columns.append(column)
                notes.append(f"{table}: new column `{name}` ({column.type}) added to the mirror")
            if columns:
                add_mirror_columns(self.spark, self.names, self.sources[table], columns)
                self.sources[table] = with_columns(self.sources[table], columns)
                added = True
        return added

    def _absent_notes(self, absent: Mapping[str, Counter[str]]) -> list[str]:
        notes = []
        for table, counts in sorted(absent.items()):
            for column, count in sorted(counts.items()):
                readers = sorted(m.plan.name for m in self.maintainers if column in m.plan.reads(table))
                note = f"{table}: column `{column}` missing from {count} after-images (stored as NULL)"
                if readers:
                    subject = f"view {readers[0]} reads" if len(readers) == 1 else f"views {', '.join(readers)} read"
                    note += (
                        f"; error: {subject} {table}.{column}, which the source no longer sends: "
                        "NULL shows there until the view stops reading it"
                    )
                notes.append(note)
        return notes

    # ---- steps -------------------------------------------------------------------------------------
    def _plan(self, changeset: ChangeSet, batch_id: int, now: int) -> dict[str, TablePlan]:
        """Per table: the change rows that will apply and, for tables views read, their images."""
        rows = {t: changes_to_arrow(self.sources[t], c, batch_id, now) for t, c in sorted(changeset.changes.items())}
        watched = [t for t in rows if t in self.watched]
        stored = dict(zip(watched, concurrently(self.spark, lambda t: stored_rows(self.spark, self.names, self.sources[t], rows[t]), watched)))
        plans = {}
        for table, changes in rows.items():
            if table not in stored:
                plans[table] = TablePlan(changes, None)
                continue
            source = self.sources[table]
            delta = effective_delta(source.primary_key, source.column_names, changes.to_pylist(), stored[table].to_pylist())
            schema = pa.schema([f for f in mirror_arrow_schema(source) if f.name in source.column_names])
            images = pa.Table.from_pylist(delta.images, schema=schema)
            plans[table] = TablePlan(changes.take(pa.array(delta.applied, type=pa.int64())), images)
        return plans

    def _apply(
        self, changeset: ChangeSet, plans: Mapping[str, TablePlan], unit: WriteUnit, now: int, clock: _Clock
    ) -> dict[str, ViewResult]:
        if changeset.dead_letters:
            letters = dead_letters_to_arrow(changeset.dead_letters, unit.batch_id or 0, now)
            append_once(
                self.spark,
                self.names.dead_letters,
                unit,
                lambda: self.spark.createDataFrame(letters).writeTo(self.names.dead_letters).append(),
            )
            clock.lap("dead letters")
        crash_point("dead_letters", unit.batch_id)

        def merge(table: str) -> None:
            source, rows = self.sources[table], plans[table].rows
            unit.retries.run(f"MERGE into mirror {table}", lambda: merge_changes(self.spark, self.names, source, rows))
            crash_point(f"mirror:{table}", unit.batch_id)

        concurrently(self.spark, merge, [t for t, p in sorted(plans.items()) if p.rows.num_rows])
        clock.lap("mirrors")
        deltas: dict[str, str] = {}
        try:
            for table, plan in sorted(plans.items()):
                if plan.images is not None and plan.images.num_rows:
                    relation = f"_lmv_delta_{table}"
                    self.spark.createDataFrame(plan.images).createOrReplaceTempView(relation)
                    deltas[table] = relation
            position = _max(plans, POSITION)
            views = {m.plan.name: m.apply(deltas, unit, position) for m in self.maintainers if deltas}
            clock.lap("views")
            return views
        finally:
            for relation in deltas.values():
                self.spark.catalog.dropTempView(relation)

    def _ledger_entry(
        self, ref: BatchRef, result: BatchResult, plans: Mapping[str, TablePlan], unit: WriteUnit, started_at: int
    ) -> LedgerEntry:
        tables = {
            t: TableEntry(p.rows.num_rows, _column_max(p.rows, POSITION), _column_max(p.rows, SOURCE_TS))
            for t, p in plans.items()
        }
        views = {v.view: (v.keys or 0, v.upserts, v.deletes) for v in result.views.values()}
        return LedgerEntry(
            stream_id=ref.stream,
            batch_id=ref.batch,
            chunk=ref.chunk,
            lines=result.lines,
            events=result.events,
            dead_letters=result.dead_letters,
            skipped=result.skipped,
            tables=tables,
            views=views,
            conflicts_retried=unit.retries.count,
            replayed=unit.replay,
            started_at_micros=started_at,
            finished_at_micros=_now_micros(),
        )


class _Clock:
    """Adds the seconds since the previous lap to `steps[name]`."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name] = self.steps.get(name, 0.0) + now - self.last
        self.last = now

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.steps.items()}


def _column_max(rows: pa.Table, column: str) -> int | None:
    if rows.num_rows == 0:
        return None
    value = pc.max(rows.column(column).cast(pa.int64()))
    return value.as_py()


def _max(plans: Mapping[str, TablePlan], column: str) -> int | None:
    values = [v for v in (_column_max(p.rows, column) for p in plans.values()) if v is not None]
    return max(values) if values else None
