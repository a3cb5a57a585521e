"""One unit of ingest: raw lines -> parsed, deduplicated changes -> mirror MERGEs -> views, exactly once.

The steps, each safe to repeat when a crash makes Spark replay the batch:

1. parse the lines (pure, deterministic; a large unit set-wise in Spark, `lakemv.spark.bulk`, same rules);
2. plan: per table, the change rows that apply and the old/new images views need, saved in the
   journal *before* any table changes (a replay reads the plan back: the old images may be gone);
3. append dead letters, MERGE each mirror, maintain each view, append the ledger row. Every snapshot
   is tagged with the unit's write id; a replay skips appends its first attempt committed, the mirror
   MERGE's position guard and the view's content diff make the MERGEs no-ops once applied.

The steps between reads and writes are pure (`lakemv.core.batch.plan`). Where stored rows are read
and how mirrors and views are written is the processor's backend, chosen once when it is built
(`lakemv.spark.batch.backend`: Spark scans, or the local indexed state). What a batch returns is
`lakemv.core.batch.result.BatchResult`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace

from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, POSITION, TableNames
from lakemv.catalog.writer import CommitTurns
from lakemv.core.batch.journal import BatchRef, Journal, TablePlan
from lakemv.core.batch.plan import Clock, absent_notes, advance_clocks, highest, ledger_entry, now_micros
from lakemv.core.batch.records import dead_letters_to_arrow
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.cdc.changeset import ChangeSet, build_changeset, changes_to_arrow
from lakemv.core.cdc.events import watermarks
from lakemv.core.cdc.evolution import infer_column, with_columns
from lakemv.core.cdc.unique import Violation, unique_violations, violation_letters
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.dag import levels
from lakemv.core.planner.retention import source_needs
from lakemv.core.runtime.collector import paused
from lakemv.core.runtime.faults import crash_point
from lakemv.core.state.store import Store
from lakemv.spark.batch.backend import BatchContext, ScanBackend
from lakemv.spark.batch.local import LocalStateBackend
from lakemv.spark.batch.sync import SyncReport
from lakemv.spark.bulk import Lines, bulk_changeset
from lakemv.spark.commits import Retries, WriteUnit, committed, tagged
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.mirror import (
    add_mirror_columns,
    ensure_mirror,
    ensure_namespaces,
    ensure_view_namespace,
    event_clocks,
    evolved_source,
)
from lakemv.spark.parallel import concurrently
from lakemv.spark.tables import ensure_dead_letters, ensure_ledger
from lakemv.spark.views.feeds import Feeds
from lakemv.spark.views.maintain import ViewMaintainer

# Views the store serves are maintained side by side, this many at once by default (LAKEMV_VIEW_WORKERS).
VIEW_WORKERS = 4


def choose_backend(ctx: BatchContext, store: Store | None) -> ScanBackend:
    """The batch's backend: the local indexed state when there is a store, else Spark scans."""
    return LocalStateBackend(ctx, store) if store is not None else ScanBackend(ctx)


class BatchProcessor:
    """Applies units of landing lines to the mirrors of one catalog and keeps its views fresh.

    Creating a processor creates missing tables and builds views that are new or whose SQL changed
    (`built` holds what that did). With a `journal`, a replayed unit is recognised and finished
    exactly once; without one (tests of a single attempt), every unit is a first attempt. With a
    `store` its backend is the local indexed state, else Spark scans; with `direct`, appends (and the
    mirrors the store locates) are direct commits.
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
        hold_backlog: bool = True,
    ):
        self.spark = spark
        self.turns = turns
        self.hold_backlog = hold_backlog  # views that can wait hold a backlog's keys for its end (`process`)
        self._busy = threading.Lock()  # held by a unit
        self.max_line_chars = max_line_chars
        self.names = names
        self.sources = dict(sources)
        self.journal = journal
        ensure_namespaces(spark, names)
        if views:
            ensure_view_namespace(spark, names)

        def ensure(table: str) -> None:  # the tables side by side: each start-up step is a metadata round trip
            if table == names.dead_letters:
                ensure_dead_letters(spark, names)
            elif table == names.ledger:
                ensure_ledger(spark, names)
            else:
                ensure_mirror(spark, names, self.sources[table])
                self.sources[table] = evolved_source(spark, names, self.sources[table])

        concurrently(spark, ensure, [names.dead_letters, names.ledger, *self.sources], view_workers)
        feeds = Feeds(spark, names)
        self.maintainers = [ViewMaintainer(spark, names, self.sources, plan, feeds) for plan in views]
        # Per event source, the newest event time admitted: its watermark trails it by the lateness.
        self.clocks: dict[str, int | None] = event_clocks(spark, names, self.sources)
        self._pinned: tuple[tuple[str, int], dict[str, int | None]] | None = None  # a batch's watermarks
        for maintainer in self.maintainers:
            maintainer.watermarks = self.watermarks()
        appends = {names.ledger, names.dead_letters} if direct is not None and direct.supports(names.ledger) else set()
        self.context = BatchContext(
            spark, names, self.sources, self.maintainers, journal, direct, appends, {table for plan in views for table in plan.tables},
            {t: source_needs(t, views) for t in self.clocks}, view_workers, self.watermarks, feeds,
        )  # fmt: skip
        by_name = {m.plan.name: m for m in self.maintainers}
        order = levels({name: m.plan for name, m in by_name.items()})  # a view that reads views after them
        for m in self.maintainers:
            m.read_by_views = any(m.plan.name in other.plan.upstream for other in self.maintainers)
        tables = {}
        with feeds.together():  # the views' feed columns in one schema change
            for level in order:
                tables.update(zip(level, concurrently(spark, lambda name: by_name[name].ensure_tables(), level, view_workers), strict=True))
        ensured = [r for level in order for r in concurrently(spark, lambda name: by_name[name].fill(tables[name]), level, view_workers)]
        self.built = [r for r in ensured if r is not None]
        self.backend = choose_backend(self.context, store)
        self.backend.in_step([r.view for r in self.built if not r.paused])

    # What the tests and benchmarks look at.
    @property
    def store(self) -> Store | None:
        return self.backend.store

    @property
    def indexed(self) -> Mapping[str, object]:
        return self.backend.indexed

    @property
    def direct_tables(self) -> set[str]:
        return self.context.direct_tables

    @property
    def synced(self) -> SyncReport | None:
        return self.backend.synced

    def close(self) -> None:
        self.backend.close()

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
        more: bool = False,
    ) -> BatchResult:
        """Apply one unit of lines, exactly once however often it is replayed.

        `lines` are `(line, file)` pairs, or `Lines` still in Spark for a unit parsed set-wise.
        `file_skips` counts files that gave no lines (empty, or gone before Spark read them), by reason.
        `last`: no later unit of `ref`'s batch follows (those are judged by the watermarks this one was).
        `more`: more of a backlog follows the batch. Unless this is its last unit and none follows, the
        views that can wait hold their keys (lakemv.core.batch.deferral), with `hold_backlog`.
        With `turns`, the unit starts after any compaction turn and holds off the next one until it ends.
        """
        with self._busy, paused():  # (`flush` runs between batches, from another thread; the collector after the unit)
            hold = self.hold_backlog and (more or not last)
            if self.turns is None:
                return self._process(ref, lines, file_skips, last=last, hold=hold)
            with self.turns.unit() as waited:
                result = self._process(ref, lines, file_skips, last=last, hold=hold)
            return replace(result, waited=round(waited(), 3))

    def flush(self, stream: str, release: bool = False) -> BatchResult | None:
        """Between batches: maintain the views that wait for their freshness budget and are due now
        (lakemv.core.batch.deferral); None when none is. A unit of its own (`<stream>~idle`, numbered
        by the time), with a ledger row; a crash in it leaves the keys pending, recomputed later.
        `release`: the run ends, so views that held a backlog's keys are due now too."""
        if not self.backend.waits or not self._busy.acquire(blocking=False):  # a batch runs: it judges them itself
            return None
        try:
            if release:
                self.backend.release()
            return self._flush(stream)
        finally:
            self._busy.release()

    def _flush(self, stream: str) -> BatchResult | None:
        due = self.backend.due()
        if not due:
            return None
        started, started_at = time.perf_counter(), now_micros()
        ref = BatchRef(f"{stream}~idle", started_at // 1000)
        unit = WriteUnit(ref.write_id, retries=Retries(), batch_id=ref.batch)
        with self.turns.unit() if self.turns is not None else nullcontext(), tagged(self.spark, ref.write_id):
            views = {n: v for n, v in self.backend.views({}, [], unit, None, due).items() if not v.deferred and not v.paused}
            if not views:  # all left to a backfill that holds them: nothing to record (checked again next time)
                return None
            result = BatchResult(ref.batch, 0, 0, views=views, idle=True)
            entry = ledger_entry(ref, result, {}, unit.retries.count, started_at, now_micros())
            self.backend.append(self.names.ledger, entry.to_arrow(), unit)
        return replace(result, seconds=time.perf_counter() - started, conflicts_retried=unit.retries.count)

    def _process(
        self, ref: BatchRef, lines: list[tuple[str, str]] | Lines, file_skips: Mapping[str, int] | None, *, last: bool, hold: bool = False
    ) -> BatchResult:
        started = time.perf_counter()
        started_at = now_micros()
        plans = None
        marks = None
        if self.journal is not None:
            self.journal.forget_before(ref)
            plans = self.journal.load(ref)
            marks = self.journal.watermarks(ref) if plans is not None else None
            if plans is not None:  # a replay holds its views' keys as its first attempt did (more files may have come since)
                hold = bool(self.journal.holds(ref))
        if marks is None:  # a replay judges lateness by the watermarks its first attempt used
            marks = self._batch_watermarks(ref)
        unit = WriteUnit(ref.write_id, replay=plans is not None, retries=Retries(), batch_id=ref.batch)
        if unit.replay and committed(self.spark, self.names.ledger, ref.write_id):
            crash_point("batch_end", ref.batch)
            return BatchResult(
                ref.batch, len(lines) if isinstance(lines, list) else 0, 0, chunk=ref.chunk, replayed=True, already_committed=True,
                seconds=time.perf_counter() - started,
            )
        clock = Clock()
        # another writer (compaction's purge, a backfill's publish, a crash) may have moved a table
        if self.backend.check({ref.write_id} if unit.replay else ()):
            clock.lap("state check")
        changeset = self._parse(lines, ref.batch, started_at, marks)
        notes: list[str] = []
        if changeset.new_fields and self._evolve(changeset.new_fields, notes):
            changeset = self._parse(lines, ref.batch, started_at, marks)  # again, with the new columns
            self.backend.attach()  # a mirror's columns changed: what the backend keeps of it reloads
        notes += absent_notes(changeset.absent, lambda t, c: [m.plan.name for m in self.maintainers if c in m.plan.reads(t)])
        changeset.skipped.update(file_skips or {})
        clock.lap("parse")
        crash_point("parsed", ref.batch)
        if plans is None:
            plans = self._plan(changeset, ref.batch, started_at)
            clock.lap("plan")
            if self.journal is not None:
                self.journal.save(ref, plans, marks, hold)
                clock.lap("journal")
        crash_point("journaled", ref.batch)
        clocks = advance_clocks(changeset, plans, self.clocks, self.sources)
        for maintainer in self.maintainers:  # the watermarks its windows are judged final by
            maintainer.watermarks = watermarks(clocks, self.sources)
        violations = self._unique_check(plans)
        if violations:
            changeset.dead_letters.extend(l for t in sorted(violations) for l in violation_letters(self.sources[t], violations[t]))
            clock.lap("unique check")
        with tagged(self.spark, ref.write_id):
            views = self._apply(changeset, plans, unit, started_at, clock, hold=hold)
            result = BatchResult(
                batch_id=ref.batch,
                lines=len(lines) if isinstance(lines, list) else changeset.set_wise + changeset.line_by_line,
                events=changeset.events,
                merged={t: p.rows.num_rows for t, p in plans.items()},
                dead_letters=len(changeset.dead_letters),
                letters=Counter(letter.table or "" for letter in changeset.dead_letters),
                unique_violations=sum(len(v) for v in violations.values()),
                skipped=sum(changeset.skipped.values()),
                skip_reasons=dict(changeset.skipped),
                late=dict(changeset.late),
                views=views,
                chunk=ref.chunk,
                replayed=unit.replay,
                notes=tuple(notes),
                set_wise=isinstance(lines, Lines),
            )
            entry = ledger_entry(ref, result, plans, unit.retries.count, started_at, now_micros())
            self.backend.append(self.names.ledger, entry.to_arrow(), unit)
            clock.lap("ledger")
            crash_point("ledger", ref.batch)
        self.clocks.update(clocks)
        if self.backend.retain(None if last else marks):
            clock.lap("retention")
        crash_point("batch_end", ref.batch)
        seconds = time.perf_counter() - started
        return replace(result, seconds=seconds, conflicts_retried=unit.retries.count, steps=clock.rounded())

    def _parse(self, lines: list[tuple[str, str]] | Lines, batch_id: int, now: int, marks: Mapping[str, int | None]) -> ChangeSet:
        b = self.backend
        if isinstance(lines, Lines):
            return bulk_changeset(lines, self.sources, batch_id, now, self.max_line_chars, marks, b.live_rows, b.applied_position, b.live_keys)
        return build_changeset(lines, self.sources, self.max_line_chars, marks, b.live_rows, b.applied_position, b.live_keys)

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

    # ---- declared unique keys ----------------------------------------------------------------------
    def _unique_check(self, plans: Mapping[str, TablePlan]) -> dict[str, list[Violation]]:
        """Per table with declared unique keys, the values several live rows hold once the batch is
        applied (lakemv.core.cdc.unique). A replay finds the same: the batch's rows replace their stored ones."""
        found = {}
        for table, plan in sorted(plans.items()):
            source = self.sources[table]
            if source.unique and plan.rows.num_rows:
                holders = lambda c, v, s=source: self.backend.holders(s, c, v)  # noqa: E731
                read = list(dict.fromkeys([*source.primary_key, *(c for u in source.unique for c in u), DELETED]))
                violations = unique_violations(source, plan.rows.select(read).to_pylist(), holders)
                if violations:  # (rare) again over whole rows: their dead letters carry every column
                    found[table] = unique_violations(source, plan.rows.to_pylist(), holders)
        return found

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

    # ---- steps -------------------------------------------------------------------------------------
    def _plan(self, changeset: ChangeSet, batch_id: int, now: int) -> dict[str, TablePlan]:
        """Per table: the change rows that will apply and, for tables views read, their images."""
        rows = dict(changeset.rows)  # a unit Spark parsed has its rows in Arrow; an event source's are changes
        rows.update({t: changes_to_arrow(self.sources[t], c, batch_id, now) for t, c in changeset.changes.items() if t not in rows})
        return dict(sorted(self.backend.plans(dict(sorted(rows.items()))).items()))

    def _apply(
        self, changeset: ChangeSet, plans: Mapping[str, TablePlan], unit: WriteUnit, now: int, clock: Clock, hold: bool = False
    ) -> dict[str, ViewResult]:
        """Dead letters, mirrors, the local state, then the views (`hold`: more units of the batch follow,
        so views that can wait hold their keys for its last unit)."""
        if changeset.dead_letters:
            self.backend.append(self.names.dead_letters, dead_letters_to_arrow(changeset.dead_letters, unit.batch_id or 0, now), unit)
            clock.lap("dead letters")
        crash_point("dead_letters", unit.batch_id)

        def write(table: str) -> None:
            self.backend.write_mirror(table, plans[table].rows, unit)
            crash_point(f"mirror:{table}", unit.batch_id)

        concurrently(self.spark, write, [t for t, p in sorted(plans.items()) if p.rows.num_rows])
        clock.lap("mirrors")
        if self.backend.record(plans, unit):
            clock.lap("state")
        crash_point("state:mirrors", unit.batch_id)
        changed = [t for t, p in plans.items() if p.images is not None and p.images.num_rows]
        if not changed and not self.backend.waits:  # (a view that waits may be due in any batch)
            return {}
        views = self.backend.views(plans, changed, unit, highest(plans, POSITION), hold=hold)
        clock.lap("views")
        for maintainer in self.maintainers:
            result = views.get(maintainer.plan.name)
            if result is not None and not result.paused:
                maintainer.judged()
        return views
