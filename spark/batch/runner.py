"""One unit of ingest: raw lines -> parsed, deduplicated changes -> mirror MERGEs -> views, exactly once.

The steps, each safe to repeat when a crash makes Spark replay the batch:

1. parse the lines (pure, deterministic; a large unit set-wise in Spark, `lakemv.spark.bulk`, same rules);
2. plan: per table, the change rows that apply and the old/new images views need, saved in the
   journal *before* any table changes (a replay reads the plan back: the old images may be gone);
3. append dead letters, MERGE each mirror, maintain each view, append the ledger row. Every snapshot
   is tagged with the unit's write id; a replay skips appends its first attempt committed, the mirror
   MERGE's position guard and the view's content diff make the MERGEs no-ops once applied.

What a batch returns is `lakemv.core.batch.result.BatchResult`; its steps on the local state store (when it
has one) are `lakemv.spark.batch.local`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, POSITION, SOURCE_TS, TableNames, mirror_arrow_schema
from lakemv.catalog.writer import CommitTurns
from lakemv.core.batch.journal import BatchRef, Journal, TablePlan
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.cdc.changeset import ChangeSet, build_changeset, change_values, changes_to_arrow
from lakemv.core.cdc.effects import effect_of
from lakemv.core.cdc.events import STORED_DUPLICATE, watermarks
from lakemv.core.cdc.evolution import infer_column, with_columns
from lakemv.core.cdc.unique import Violation, unique_violations, violation_letters
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.retention import source_needs
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.quote import q
from lakemv.core.state.codec import rows_of, to_arrow
from lakemv.core.state.store import Store
from lakemv.spark.batch.local import StoreSteps
from lakemv.spark.batch.sync import StoreSync, SyncReport
from lakemv.spark.bulk import Lines, bulk_changeset
from lakemv.spark.commits import Retries, WriteUnit, append_once, committed, tagged
from lakemv.spark.deadletters import dead_letters_to_arrow, ensure_dead_letters
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.ledger import LedgerEntry, TableEntry, ensure_ledger
from lakemv.spark.mirror import (
    add_mirror_columns,
    ensure_mirror,
    ensure_namespaces,
    ensure_view_namespace,
    event_clocks,
    evolved_source,
    matching_rows,
    merge_changes,
    stored_rows,
)
from lakemv.spark.parallel import concurrently
from lakemv.spark.views.indexed import IndexedView
from lakemv.spark.views.maintain import ViewMaintainer

# Views the store serves are maintained side by side, this many at once by default (LAKEMV_VIEW_WORKERS).
VIEW_WORKERS = 4


def _now_micros() -> int:
    return time.time_ns() // 1000


class BatchProcessor(StoreSteps):
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
        store: Store | None = None,
        view_workers: int = VIEW_WORKERS,
        direct: DirectWriter | None = None,
        turns: CommitTurns | None = None,
    ):
        self.spark = spark
        self.turns = turns
        self.view_workers = view_workers
        self.direct = direct
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
        # Per event source, the newest event time admitted: its watermark trails it by the lateness.
        self.clocks: dict[str, int | None] = event_clocks(spark, names, self.sources)
        self._pinned: tuple[tuple[str, int], dict[str, int | None]] | None = None  # a batch's watermarks
        for maintainer in self.maintainers:
            maintainer.watermarks = self.watermarks()
        # Per event source, which events the views may read again (lakemv.core.planner.retention).
        self.needs = {t: source_needs(t, views) for t in self.clocks}
        # Tables written with direct commits (lakemv.spark.directwrite): appends everywhere, and the mirrors
        # and views whose replaced rows the store knows (set when the store attaches).
        self.direct_tables: set[str] = set()
        if direct is not None and direct.supports(names.ledger):
            self.direct_tables = {names.ledger, names.dead_letters}
        self.watched = {table for plan in views for table in plan.tables}
        self.built = [r for r in (m.ensure() for m in self.maintainers) if r is not None]
        self.store = store
        self.sync: StoreSync | None = None
        self.indexed: dict[str, IndexedView] = {}
        self.synced: SyncReport | None = None
        if store is not None:
            self._attach_store()

    def process_lines(self, batch_id: int, lines: list[tuple[str, str]] | Lines, stream: str = "local") -> BatchResult:
        """Apply `(line, file)` pairs as batch `batch_id` of `stream`."""
        return self.process(BatchRef(stream, batch_id), lines)

    def process(
        self,
        ref: BatchRef,
        lines: list[tuple[str, str]] | Lines,
        file_skips: Mapping[str, int] | None = None,
        *,
        last: bool = True,
    ) -> BatchResult:
        """Apply one unit of lines, exactly once however often it is replayed.

        `lines` are `(line, file)` pairs, or `Lines` still in Spark for a unit parsed set-wise.
        `file_skips` counts files that gave no lines (empty, or gone before Spark read them), by reason.
        `last`: no later unit of `ref`'s batch follows (those are judged by the watermarks this one was).
        With `turns`, the unit starts after any compaction turn and holds off the next one until it ends.
        """
        if self.turns is None:
            return self._process(ref, lines, file_skips, last=last)
        with self.turns.unit() as waited:
            result = self._process(ref, lines, file_skips, last=last)
        return replace(result, waited=round(waited(), 3))

    def _process(
        self, ref: BatchRef, lines: list[tuple[str, str]] | Lines, file_skips: Mapping[str, int] | None, *, last: bool
    ) -> BatchResult:
        started = time.perf_counter()
        started_at = _now_micros()
        plans = None
        marks = None
        if self.journal is not None:
            self.journal.forget_before(ref)
            plans = self.journal.load(ref)
            marks = self.journal.watermarks(ref) if plans is not None else None
        if marks is None:  # a replay judges lateness by the watermarks its first attempt used
            marks = self._batch_watermarks(ref)
        unit = WriteUnit(ref.write_id, replay=plans is not None, retries=Retries(), batch_id=ref.batch)
        if unit.replay and committed(self.spark, self.names.ledger, ref.write_id):
            crash_point("batch_end", ref.batch)
            return BatchResult(
                ref.batch, len(lines) if isinstance(lines, list) else 0, 0, chunk=ref.chunk, replayed=True, already_committed=True,
                seconds=time.perf_counter() - started,
            )
        clock = _Clock()
        if self.sync is not None:  # another writer (compaction's purge, a backfill's publish, a crash) moved a table
            self.sync.check({ref.write_id} if unit.replay else ())
            clock.lap("state check")
        changeset = self._parse(lines, ref.batch, started_at, marks)
        notes: list[str] = []
        if changeset.new_fields and self._evolve(changeset.new_fields, notes):
            changeset = self._parse(lines, ref.batch, started_at, marks)  # again, with the new columns
            if self.store is not None:
                self._attach_store()  # a mirror's columns changed: its part reloads
        notes += self._absent_notes(changeset.absent)
        changeset.skipped.update(file_skips or {})
        clock.lap("parse")
        crash_point("parsed", ref.batch)
        if plans is None:
            plans = self._plan(changeset, ref.batch, started_at)
            clock.lap("plan")
            if self.journal is not None:
                self.journal.save(ref, plans, marks)
                clock.lap("journal")
        crash_point("journaled", ref.batch)
        clocks = self._event_step(changeset, plans)
        violations = self._unique_check(plans)
        if violations:
            changeset.dead_letters.extend(l for t in sorted(violations) for l in violation_letters(self.sources[t], violations[t]))
            clock.lap("unique check")
        with tagged(self.spark, ref.write_id):
            views = self._apply(changeset, plans, unit, started_at, clock)
            result = BatchResult(
                batch_id=ref.batch,
                lines=len(lines) if isinstance(lines, list) else changeset.set_wise + changeset.line_by_line,
                events=changeset.events,
                merged={t: p.rows.num_rows for t, p in plans.items()},
                dead_letters=len(changeset.dead_letters),
                unique_violations=sum(len(v) for v in violations.values()),
                skipped=sum(changeset.skipped.values()),
                skip_reasons=dict(changeset.skipped),
                views=views,
                chunk=ref.chunk,
                replayed=unit.replay,
                notes=tuple(notes),
                set_wise=isinstance(lines, Lines),
            )
            entry = self._ledger_entry(ref, result, plans, unit, started_at)
            self._append(self.names.ledger, entry.to_arrow(), unit)
            clock.lap("ledger")
            crash_point("ledger", ref.batch)
        self.clocks.update(clocks)
        if self.store is not None and self._retain(None if last else marks):
            clock.lap("retention")
        crash_point("batch_end", ref.batch)
        seconds = time.perf_counter() - started
        return replace(result, seconds=seconds, conflicts_retried=unit.retries.count, steps=clock.rounded())

    def _parse(self, lines: list[tuple[str, str]] | Lines, batch_id: int, now: int, marks: Mapping[str, int | None]) -> ChangeSet:
        if isinstance(lines, Lines):
            return bulk_changeset(lines, self.sources, batch_id, now, self.max_line_chars, marks, self._live_rows, self._applied_position, self._live_keys)
        return build_changeset(lines, self.sources, self.max_line_chars, marks, self._live_rows, self._applied_position, self._live_keys)

    def _live_keys(self, table: str) -> list[tuple]:
        """The primary keys of a mirror's live rows (asked only for a TRUNCATE: it deletes them all)."""
        key = self.sources[table].primary_key
        rows = self.spark.sql(f"SELECT {', '.join(f'{q(k)}' for k in key)} FROM {self.names.mirror(table)} WHERE NOT {DELETED}").toArrow()
        return change_values(rows)

    def _applied_position(self) -> int:
        """The highest source position the mirrors hold (asked only when an incremental snapshot's
        reads arrive: they take their place after it, lakemv.core.cdc.changeset.ReadPlacer)."""
        tables = [self.names.mirror(t) for t, s in sorted(self.sources.items()) if not s.is_events]
        union = " UNION ALL ".join(f"SELECT max({POSITION}) AS p FROM {t}" for t in tables)
        return self.spark.sql(f"SELECT coalesce(max(p), 0) FROM ({union})").first()[0]

    def _live_rows(self, table: str, keys: Sequence[tuple]) -> dict[tuple, tuple]:
        """The stored live rows of `keys` (declared columns, as a parsed change holds them): from the
        local state when it keeps the table, else from the mirror. Only changes with values Debezium
        did not send (lakemv.core.cdc.unavailable) ask."""
        source = self.sources[table]
        schema = pa.schema([f for f in mirror_arrow_schema(source) if f.name in source.column_names])
        if self.store is not None and table in self.store.mirrors:
            names = self.store.mirrors[table].column_names
            stored = self.store.lookup(table, source.primary_key, keys, (False,) * len(source.primary_key))
            found = to_arrow([tuple(dict(zip(names, row)).get(c) for c in source.column_names) for row in stored], schema)
        else:
            wanted = pa.Table.from_pylist([dict(zip(source.primary_key, k, strict=True)) for k in keys], schema=pa.schema([schema.field(c) for c in source.primary_key]))
            found = matching_rows(self.spark, self.names, source, wanted, live=True).select(source.column_names)
        rows = change_values(found)
        return {tuple(row[source.column_names.index(k)] for k in source.primary_key): row for row in rows}

    # ---- event time --------------------------------------------------------------------------------
    def _batch_watermarks(self, ref: BatchRef) -> dict[str, int | None]:
        """The watermarks a unit judges lateness by: for every unit of one batch, those its first
        unit started with. The order of a batch's records (Kafka's partitions one after the other,
        files) says nothing of event time, so a later unit must not find events late that the
        batch's first unit advanced the watermark past."""
        if ref.chunk > 0:
            first = self.journal.watermarks(BatchRef(ref.stream, ref.batch, 0)) if self.journal is not None else None
            if first is not None:
                return first
            if self._pinned is not None and self._pinned[0] == (ref.stream, ref.batch):
                return dict(self._pinned[1])
        marks = self.watermarks()
        self._pinned = ((ref.stream, ref.batch), marks)
        return dict(marks)

    def watermarks(self) -> dict[str, int | None]:
        """Each event source's watermark now: its newest admitted event time minus its lateness."""
        return watermarks(self.clocks, self.sources)

    def _event_step(self, changeset: ChangeSet, plans: Mapping[str, TablePlan]) -> dict[str, int | None]:
        """The event sources' clocks once the unit is applied; counts the events already stored, and
        gives each view the watermarks its windows are judged final by."""
        clocks = dict(self.clocks)
        for table, plan in plans.items():
            source = self.sources[table]
            if not source.is_events:
                continue
            stored = len(changeset.changes.get(table, ())) - plan.rows.num_rows
            if stored > 0:
                changeset.skipped[STORED_DUPLICATE] += stored
            newest = _column_max(plan.rows, source.event_time)
            if newest is not None and (clocks[table] is None or newest > clocks[table]):
                clocks[table] = newest
        marks = watermarks(clocks, self.sources)
        for maintainer in self.maintainers:
            maintainer.watermarks = marks
        return clocks

    def _append(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """Append `rows` once per unit: a direct commit where it can, else a Spark write (tagged)."""
        if table in self.direct_tables:
            assert self.direct is not None
            append_once(self.spark, table, unit, lambda: self.direct.commit(table, rows, (), unit.write_id))
        else:
            append_once(self.spark, table, unit, lambda: self.spark.createDataFrame(rows).writeTo(table).append())

    # ---- declared unique keys ----------------------------------------------------------------------
    def _unique_check(self, plans: Mapping[str, TablePlan]) -> dict[str, list[Violation]]:
        """Per table with declared unique keys, the values several live rows hold once the batch is
        applied (lakemv.core.cdc.unique). A replay finds the same: the batch's rows replace their stored ones."""
        found = {}
        for table, plan in sorted(plans.items()):
            source = self.sources[table]
            if source.unique and plan.rows.num_rows:
                violations = unique_violations(source, plan.rows.to_pylist(), lambda c, v, s=source: self._holders(s, c, v))
                if violations:
                    found[table] = violations
        return found

    def _holders(self, source: SourceTable, columns: Sequence[str], values: list[tuple]) -> list[dict]:
        """The live rows of `source` whose `columns` hold one of `values`: from the local state when
        it keeps the table (indexed on each unique key), else from the mirror."""
        if self.store is not None and source.name in self.store.mirrors:
            names = self.store.mirrors[source.name].column_names
            rows = self.store.lookup(source.name, columns, values, (False,) * len(columns))
            return [dict(zip(names, row, strict=True)) for row in rows]
        schema = pa.schema([mirror_arrow_schema(source).field(c) for c in columns])
        wanted = pa.Table.from_pylist([dict(zip(columns, v, strict=True)) for v in values], schema=schema)
        return matching_rows(self.spark, self.names, source, wanted, live=True).to_pylist()

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
        rows = dict(changeset.rows)  # a unit Spark parsed has its rows in Arrow; an event source's are changes
        rows.update({t: changes_to_arrow(self.sources[t], c, batch_id, now) for t, c in changeset.changes.items() if t not in rows})
        rows = dict(sorted(rows.items()))
        kept = self.store.mirrors if self.store is not None else {}
        scanned = [t for t in rows if t in self.watched and t not in kept]
        stored = dict(zip(scanned, concurrently(self.spark, lambda t: stored_rows(self.spark, self.names, self.sources[t], rows[t]), scanned)))
        plans = {}
        for table, changes in rows.items():
            source = self.sources[table]
            schema = pa.schema([f for f in mirror_arrow_schema(source) if f.name in source.column_names])
            if table in kept:
                effect = self._stored_effect(table, changes)
                images = to_arrow([tuple(i[c] for c in source.column_names) for i in effect.images], schema)
            elif table in stored:
                effect = effect_of(source.primary_key, source.column_names, changes.to_pylist(), stored[table].to_pylist())
                images = pa.Table.from_pylist(effect.images, schema=schema)
            else:
                plans[table] = TablePlan(changes, None)
                continue
            plans[table] = TablePlan(changes.take(pa.array(effect.applied, type=pa.int64())), images)
        return plans

    def _apply(
        self, changeset: ChangeSet, plans: Mapping[str, TablePlan], unit: WriteUnit, now: int, clock: _Clock
    ) -> dict[str, ViewResult]:
        if changeset.dead_letters:
            letters = dead_letters_to_arrow(changeset.dead_letters, unit.batch_id or 0, now)
            self._append(self.names.dead_letters, letters, unit)
            clock.lap("dead letters")
        crash_point("dead_letters", unit.batch_id)

        def merge(table: str) -> None:
            source, rows = self.sources[table], plans[table].rows
            if self.names.mirror(table) in self.direct_tables:  # rows the store has judged newer, and knows the places of
                self._commit_mirror(table, rows, unit)
            elif source.is_events and self.store is not None and table in self.store.mirrors:
                self._append(self.names.mirror(table), rows, unit)  # events the store has judged new: nothing to replace
            else:
                unit.retries.run(f"MERGE into mirror {table}", lambda: merge_changes(self.spark, self.names, source, rows))
            crash_point(f"mirror:{table}", unit.batch_id)

        concurrently(self.spark, merge, [t for t, p in sorted(plans.items()) if p.rows.num_rows])
        clock.lap("mirrors")
        if self.sync is not None:
            self._record_mirrors(plans, unit)
            clock.lap("state")
        crash_point("state:mirrors", unit.batch_id)
        changed = [t for t, p in plans.items() if p.images is not None and p.images.num_rows]
        if not changed:
            return {}
        position = _max(plans, POSITION)
        views: dict[str, ViewResult] = {}
        scanned = [m for m in self.maintainers if m.plan.name not in self.indexed]
        if self.indexed:
            images = {t: rows_of(plans[t].images, self.store.mirrors[t].column_names) for t in changed if t in self.store.mirrors}  # type: ignore[union-attr]
            served = {m.plan.name: m for m in self.maintainers if m.plan.name in self.indexed}
            if images and served:
                done = concurrently(
                    self.spark, lambda name: self._indexed_view(served[name], images, unit, position), sorted(served), self.view_workers
                )
                views.update(zip(sorted(served), done, strict=True))
        deltas: dict[str, str] = {}
        try:
            if scanned:
                for table in sorted(changed):
                    relation = f"_lmv_delta_{table}"
                    self.spark.createDataFrame(plans[table].images).createOrReplaceTempView(relation)
                    deltas[table] = relation
                views.update({m.plan.name: m.apply(deltas, unit, position) for m in scanned})
            clock.lap("views")
            for maintainer in self.maintainers:
                result = views.get(maintainer.plan.name)
                if result is not None and not result.paused:
                    maintainer.judged()
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
