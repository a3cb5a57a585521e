"""The batch ledger `lake.lakemv.batches`: one row per committed unit of ingest work.

Appended as the last write of a unit, so a row there means every table the unit touches is done: a
replay that finds its write id in the ledger has nothing left to do. `lakemv status` reads it for
each view's last batch, refresh time and lag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.tables import TableNames, tblproperties_sql

DDL = (
    "stream_id STRING, batch_id BIGINT, chunk INT, lines BIGINT, events BIGINT, dead_letters BIGINT, "
    "skipped BIGINT, tables ARRAY<STRUCT<name: STRING, changes: BIGINT, max_position: BIGINT, "
    "max_source_ts: TIMESTAMP>>, views ARRAY<STRUCT<name: STRING, keys: BIGINT, upserts: BIGINT, "
    "deletes: BIGINT>>, conflicts_retried INT, replayed BOOLEAN, started_at TIMESTAMP, "
    "finished_at TIMESTAMP, seconds DOUBLE"
)
_TS = pa.timestamp("us", tz="UTC")
TABLE_STRUCT = pa.struct(
    [("name", pa.string()), ("changes", pa.int64()), ("max_position", pa.int64()), ("max_source_ts", _TS)]
)
VIEW_STRUCT = pa.struct([("name", pa.string()), ("keys", pa.int64()), ("upserts", pa.int64()), ("deletes", pa.int64())])
SCHEMA = pa.schema(
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
    ]
)


@dataclass(frozen=True)
class TableEntry:
    """What a unit applied to one mirror."""

    changes: int
    max_position: int | None
    max_source_ts_micros: int | None


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
    views: Mapping[str, tuple[int, int, int]]  # view -> (keys, upserts, deletes)
    conflicts_retried: int
    replayed: bool
    started_at_micros: int
    finished_at_micros: int

    def to_arrow(self) -> pa.Table:
        tables = [
            {"name": n, "changes": t.changes, "max_position": t.max_position, "max_source_ts": t.max_source_ts_micros}
            for n, t in sorted(self.tables.items())
        ]
        views = [{"name": n, "keys": k, "upserts": u, "deletes": d} for n, (k, u, d) in sorted(self.views.items())]
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
        }
        return pa.Table.from_pylist([row], schema=SCHEMA)


def ensure_ledger(spark: SparkSession, names: TableNames) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {names.ledger} ({DDL}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})")
