"""Table naming and layout: which Iceberg identifier holds what, and the mirror tables' bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakemv.catalog.declarations import SourceTable, ViewSource
from lakemv.core.errors import ConfigError
from lakemv.core.sql.feedsql import FEEDS
from lakemv.core.sql.quote import q
from lakemv.core.types import arrow_type, spark_ddl

MIRROR_NAMESPACE = "mirror"
OPS_NAMESPACE = "lakemv"
VIEW_NAMESPACE = "views"
DEAD_LETTERS = "dead_letters"
LEDGER = "batches"
CHANGES_SUFFIX = "__changes"

# Bookkeeping columns every mirror row carries next to the declared ones (Iceberg reserves `_deleted`,
# `_pos`, `_file`..., hence the prefix).
POSITION = "_lmv_position"  # source position of the change applied last (LSN, else ts_ms)
OP = "_lmv_op"  # Debezium op of that change: c, r, u, d
DELETED = "_lmv_deleted"  # tombstone flag: the row is gone but its position is remembered
SOURCE_TS = "_lmv_source_ts"  # source.ts_ms of that change, as a timestamp
INGESTED_AT = "_lmv_ingested_at"
BATCH_ID = "_lmv_batch_id"

_UTC_MICROS = pa.timestamp("us", tz="UTC")
BOOKKEEPING_ARROW = (
    pa.field(POSITION, pa.int64()),
    pa.field(OP, pa.string()),
    pa.field(DELETED, pa.bool_()),
    pa.field(SOURCE_TS, _UTC_MICROS),
    pa.field(INGESTED_AT, _UTC_MICROS),
    pa.field(BATCH_ID, pa.int64()),
)
BOOKKEEPING_NAMES = tuple(f.name for f in BOOKKEEPING_ARROW)

# A stream commits every few seconds: each commit's previous metadata file is deleted once newer
# ones replace it (Iceberg keeps the last few), rather than left for orphan removal.
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}
# Merge-on-read everywhere: a MERGE writes small delete files instead of rewriting data files.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    **METADATA_PROPERTIES,
}


@dataclass(frozen=True)
class TableNames:
    """Identifiers of lakemv's tables inside one catalog."""

    catalog: str

    def mirror(self, source: str) -> str:
        return f"{self.catalog}.{MIRROR_NAMESPACE}.{source}"

    def view(self, name: str) -> str:
        return f"{self.catalog}.{VIEW_NAMESPACE}.{name}"

    def view_changes(self, name: str) -> str:
        """The change feed of a view: one row per upserted or deleted view row, per batch (an Iceberg
        view over `feeds`, lakemv.core.sql.feedsql)."""
        return f"{self.catalog}.{VIEW_NAMESPACE}.{name}{CHANGES_SUFFIX}"

    @property
    def feeds(self) -> str:
        """Every view's change feed, in one table (lakemv.core.sql.feedsql)."""
        return f"{self.catalog}.{OPS_NAMESPACE}.{FEEDS}"

    @property
    def dead_letters(self) -> str:
        return f"{self.catalog}.{OPS_NAMESPACE}.{DEAD_LETTERS}"

    @property
    def ledger(self) -> str:
        """One row per committed unit of ingest work (see lakemv.core.batch.records)."""
        return f"{self.catalog}.{OPS_NAMESPACE}.{LEDGER}"


def mirror_arrow_schema(source: SourceTable) -> pa.Schema:
    """Arrow schema of a mirror row: declared columns, then bookkeeping."""
    fields = [pa.field(c.name, arrow_type(c.kind)) for c in source.columns]
    return pa.schema([*fields, *BOOKKEEPING_ARROW])


def mirror_ddl_columns(source: SourceTable) -> str:
    """Spark DDL column list of a mirror table (primary-key columns NOT NULL)."""
    cols = [
        f"{q(c.name)} {c.spark_type}{' NOT NULL' if c.name in source.primary_key else ''}" for c in source.columns
    ]
    cols += [f"{q(f.name)} {spark_ddl(f.type)}" for f in BOOKKEEPING_ARROW]
    return ", ".join(cols)


def tblproperties_sql(extra: dict[str, str] | None = None) -> str:
    props = {**TABLE_PROPERTIES, **(extra or {})}
    return ", ".join(f"'{k}'='{v}'" for k, v in props.items())


def check_tables(chosen: list[str], known: list[str]) -> None:
    """A ConfigError naming the tables of `chosen` the lake does not have, and the ones it has."""
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise ConfigError(f"no table {', '.join(unknown)} (tables: {', '.join(sorted(known)) or 'none yet'})", "TABLES")


def live_rows_sql(
    names: TableNames, source: SourceTable | ViewSource, snapshot: int | None = None, columns: Sequence[str] | None = None
) -> str:
    """SELECT of the live rows of a mirror, declared columns only (what every reader sees).

    With `snapshot`, as of that snapshot (time travel); `columns` narrows the columns.
    """
    selected = ", ".join(f"{q(c)}" for c in (source.column_names if columns is None else columns))
    travel = f" VERSION AS OF {int(snapshot)}" if snapshot is not None else ""
    if source.is_view:  # a view another view reads: every row of its table is live
        return f"SELECT {selected} FROM {names.view(source.name)}{travel} WHERE TRUE"
    return f"SELECT {selected} FROM {names.mirror(source.name)}{travel} WHERE NOT {q(DELETED)}"


def table_of(names: TableNames, source: SourceTable | ViewSource) -> str:
    """The Iceberg table a view reads for `source`: its mirror, or the view table of a view it reads."""
    return names.view(source.name) if source.is_view else names.mirror(source.name)
