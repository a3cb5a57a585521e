"""The pure steps of a batch, between parsing and writing: which rows apply and what views see, how
event time advances, what the schema drift notes say, and the ledger row.

`lakemv.spark.batch.runner` runs them around the engine's reads and writes; nothing here touches a
table.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import POSITION, SOURCE_TS
from lakemv.core.batch.journal import BatchRef, TablePlan
from lakemv.core.batch.records import LedgerEntry, TableEntry, ViewEntry
from lakemv.core.batch.result import BatchResult
from lakemv.core.cdc.changeset import ChangeSet
from lakemv.core.cdc.effects import CHANGED, SIGN, Effect, Values
from lakemv.core.cdc.events import STORED_DUPLICATE


def now_micros() -> int:
    return time.time_ns() // 1000


class Clock:
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


def column_max(rows: pa.Table, column: str) -> int | None:
    """The highest value of an integer (or timestamp) column, None for no rows."""
    if rows.num_rows == 0:
        return None
    return pc.max(rows.column(column).cast(pa.int64())).as_py()


def highest(plans: Mapping[str, TablePlan], column: str) -> int | None:
    """The highest value of `column` over every table's applied rows."""
    values = [v for v in (column_max(p.rows, column) for p in plans.values()) if v is not None]
    return max(values) if values else None


def table_plan(changes: pa.Table, effect: Effect, images: Callable[[list[Values]], pa.Table]) -> TablePlan:
    """One table's plan from the `effect` of `changes` against the mirror (lakemv.core.cdc.effects):
    the rows that win, and the old and new images of the rows they change, made a table by `images`."""
    made = images(effect.images).append_column(CHANGED, pa.array(effect.changed, type=pa.list_(pa.string())))
    made = made.append_column(SIGN, pa.array(effect.signs, type=pa.int8()))
    return TablePlan(changes.take(pa.array(effect.applied, type=pa.int64())), made)


def advance_clocks(
    changeset: ChangeSet, plans: Mapping[str, TablePlan], clocks: Mapping[str, int | None], sources: Mapping[str, SourceTable]
) -> dict[str, int | None]:
    """The event sources' clocks once the unit is applied (each the newest event time it admitted), and
    the events already stored counted as skipped in `changeset`."""
    advanced = dict(clocks)
    for table, plan in plans.items():
        source = sources[table]
        if not source.is_events:
            continue
        stored = len(changeset.changes.get(table, ())) - plan.rows.num_rows
        if stored > 0:
            changeset.skipped[STORED_DUPLICATE] += stored
        newest = column_max(plan.rows, source.event_time)
        if newest is not None and (advanced[table] is None or newest > advanced[table]):
            advanced[table] = newest
    return advanced


def absent_notes(absent: Mapping[str, Counter[str]], readers: Callable[[str, str], list[str]]) -> list[str]:
    """Notes for declared columns the after-images no longer carry; an error when views (`readers` of
    table, column) read one."""
    notes = []
    for table, counts in sorted(absent.items()):
        for column, count in sorted(counts.items()):
            views = sorted(readers(table, column))
            note = f"{table}: column `{column}` missing from {count} after-images (stored as NULL)"
            if views:
                subject = f"view {views[0]} reads" if len(views) == 1 else f"views {', '.join(views)} read"
                note += f"; error: {subject} {table}.{column}, which the source no longer sends: NULL shows there until the view stops reading it"
            notes.append(note)
    return notes


def ledger_entry(
    ref: BatchRef,
    result: BatchResult,
    plans: Mapping[str, TablePlan],
    conflicts_retried: int,
    started_at: int,
    finished_at: int,
    tables: Mapping[str, TableEntry] | None = None,
) -> LedgerEntry:
    """The ledger row of a finished unit; what it applied to each mirror from its `plans`, or `tables`
    when the caller counted them (the engine state's unit, whose rows stay in Spark)."""
    if tables is None:
        tables = {t: TableEntry(p.rows.num_rows, column_max(p.rows, POSITION), column_max(p.rows, SOURCE_TS)) for t, p in plans.items()}
    views = {  # those it maintained
        v.view: ViewEntry(v.keys or 0, v.upserts, v.deletes, v.way, v.reason, round(v.seconds, 3)) for v in result.views.values() if not v.deferred
    }
    return LedgerEntry(
        stream_id=ref.stream,
        batch_id=ref.batch,
        chunk=ref.chunk,
        lines=result.lines,
        events=result.events,
        dead_letters=result.dead_letters,
        skipped=result.skipped,
        tables=tables,
        late=dict(result.late),
        views=views,
        conflicts_retried=conflicts_retried,
        replayed=result.replayed,
        started_at_micros=started_at,
        finished_at_micros=finished_at,
    )
