"""The rows a batch appends to lakemv's own tables, and those tables' schemas (Arrow: their DDL is
derived from these, `lakemv.spark.tables`).

* The ledger `lake.lakemv.batches`: one row per committed unit of ingest work. Appended as the last
  write of a unit, so a row there means every table the unit touches is done: a replay that finds its
  write id in the ledger has nothing left to do. `lakemv status` reads it for each view's last batch,
  refresh time and lag, and for each event source's late events.
* Every view's change feed: one table, `lakemv.core.sql.feedsql`.
* The dead letters `lake.lakemv.dead_letters`: every line that could not be applied, with its reason.
  Nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from lakemv.core.cdc.changeset import DeadLetter

_TS = pa.timestamp("us", tz="UTC")
TABLE_STRUCT = pa.struct([("name", pa.string()), ("changes", pa.int64()), ("max_position", pa.int64()), ("max_source_ts", _TS)])
# per maintained view: how (`plan`: 'incremental' or 'whole', lakemv.core.batch.choice), why, and in how long
VIEW_STRUCT = pa.struct(
    [("name", pa.string()), ("keys", pa.int64()), ("upserts", pa.int64()), ("deletes", pa.int64()),
     ("plan", pa.string()), ("reason", pa.string()), ("seconds", pa.float64())]
)  # fmt: skip
# per event source: the unit's events older than its watermark (`late = "count"`, or dead letters)
LATE_STRUCT = pa.struct([("name", pa.string()), ("events", pa.int64())])
LEDGER = pa.schema(
    [
        ("stream_id", pa.string()),
        ("batch_id", pa.int64()),
        ("chunk", pa.int32()),
        ("lines", pa.int64()),
        ("events", pa.int64()),
        ("dead_letters", pa.int64()),
        ("skipped", pa.int64()),
        ("tables", pa.list_(TABLE_STRUCT)),
        ("views", pa.list_(VIEW_STRUCT)),
        ("conflicts_retried", pa.int32()),
        ("replayed", pa.bool_()),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("seconds", pa.float64()),
        ("late", pa.list_(LATE_STRUCT)),  # last: a lake made by an older lakemv gains it at the end (lakemv.spark.tables)
    ]
)
DEAD_LETTERS = pa.schema(
    [
        ("raw", pa.string()),
        ("raw_chars", pa.int64()),
        ("source_file", pa.string()),
        ("source_table", pa.string()),
        ("reason", pa.string()),
        ("batch_id", pa.int64()),
        ("failed_at", _TS),
    ]
)
MAX_RAW_CHARS = 1 << 20  # a 10 MB line keeps its first MiB; raw_chars records the full length


@dataclass(frozen=True)
class TableEntry:
    """What a unit applied to one mirror."""

    changes: int
    max_position: int | None
    max_source_ts_micros: int | None


@dataclass(frozen=True)
class ViewEntry:
    """What a unit did to one view, and how."""

    keys: int
    upserts: int
    deletes: int
    plan: str
    reason: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class LedgerEntry:
    """One row of the ledger."""

    stream_id: str
    batch_id: int
    chunk: int
    lines: int
    events: int
    dead_letters: int
    skipped: int
    tables: Mapping[str, TableEntry]
    views: Mapping[str, ViewEntry]
    conflicts_retried: int
    replayed: bool
    started_at_micros: int
    finished_at_micros: int
    late: Mapping[str, int] = field(default_factory=dict)  # per event source: events older than its watermark

    def to_arrow(self) -> pa.Table:
        tables = [
            {"name": n, "changes": t.changes, "max_position": t.max_position, "max_source_ts": t.max_source_ts_micros}
            for n, t in sorted(self.tables.items())
        ]
        views = [
            {"name": n, "keys": v.keys, "upserts": v.upserts, "deletes": v.deletes, "plan": v.plan, "reason": v.reason, "seconds": v.seconds}
            for n, v in sorted(self.views.items())
        ]
        row = {
            "stream_id": self.stream_id,
            "batch_id": self.batch_id,
            "chunk": self.chunk,
            "lines": self.lines,
            "events": self.events,
            "dead_letters": self.dead_letters,
            "skipped": self.skipped,
            "tables": tables,
            "views": views,
            "conflicts_retried": self.conflicts_retried,
            "replayed": self.replayed,
            "started_at": self.started_at_micros,
            "finished_at": self.finished_at_micros,
            "seconds": (self.finished_at_micros - self.started_at_micros) / 1e6,
            "late": [{"name": n, "events": c} for n, c in sorted(self.late.items())],
        }
        return pa.Table.from_pylist([row], schema=LEDGER)


def dead_letters_to_arrow(letters: Sequence[DeadLetter], batch_id: int, failed_at_micros: int) -> pa.Table:
    return pa.table(
        [
            [d.raw[:MAX_RAW_CHARS] for d in letters],
            [len(d.raw) for d in letters],
            [d.source_file for d in letters],
            [d.table for d in letters],
            [d.reason for d in letters],
            [batch_id] * len(letters),
            [failed_at_micros] * len(letters),
        ],
        schema=DEAD_LETTERS,
    )
