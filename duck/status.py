"""`lakemv status`: how far each mirror and each view has got, read with DuckDB and pyiceberg (no Spark).

Per source: the last source position applied, live rows, tombstones, dead letters, the source time
of its newest change, the values of its declared unique keys several live rows hold now, and (an
event source) its late events, counted or dead letters. Per view: rows, the last ledger batch that maintained it, when that was, and the
lag, now minus the source time of the newest change applied to a table the view reads (from the
ledger, `lake.lakemv.batches`), and its maintenance state: `active`, `paused` by a backfill (batches
skip it until the backfill publishes; one killed mid-way leaves it so until the next `lakemv backfill`
takes over), or `resume` (published; the next batch catches it up). A table that does not exist yet,
or has no snapshot, counts as empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import (
    DEAD_LETTERS,
    DELETED,
    LEDGER,
    MIRROR_NAMESPACE,
    OPS_NAMESPACE,
    POSITION,
    SOURCE_TS,
    VIEW_NAMESPACE,
)
from lakemv.catalog.viewstate import STATE, ViewState
from lakemv.core.sql.quote import ansi_string
from lakemv.duck.query import connect_duckdb


@dataclass(frozen=True)
class SourceStatus:
    """One mirror: where its source stream has been applied up to, and what it holds."""

    table: str
    last_position: int | None  # highest _lmv_position in the mirror (tombstones included); None if empty
    live_rows: int
    tombstones: int
    dead_letters: int  # dead-letter rows whose landing folder is this table
    newest_source_ts: datetime | None  # source time of the newest change the mirror holds
    unique_violations: int = 0  # values of a declared unique key that several live rows hold now
    late_events: int = 0  # an event source's events older than its watermark, counted or dead letters (the ledger's `late`)


@dataclass(frozen=True)
class ViewStatus:
    """One materialized view: size, last maintenance and freshness."""

    view: str
    rows: int
    last_batch_id: int | None  # batch of the latest ledger row that maintained the view; None if never
    last_refresh: datetime | None  # that ledger row's finished_at, else the view table's snapshot time
    newest_change_ts: datetime | None  # newest source time applied to a table the view reads
    lag_seconds: float | None  # now - newest_change_ts (negative if the source clock runs ahead)
    # newest_change_ts and lag_seconds are None while the view's table does not exist
    maintenance: str = "active"  # active | paused | resume (lakemv.catalog.viewstate)
    maintenance_since: datetime | None = None  # when a backfill set that state
    backfill: str | None = None  # the backfill that paused the view
    budget_seconds: float | None = None  # its declared freshness budget (None: maintained every batch)


@dataclass(frozen=True)
class LakeStatus:
    """The whole lake at `as_of`."""

    as_of: datetime
    sources: tuple[SourceStatus, ...]
    views: tuple[ViewStatus, ...]
    dead_letters_unattributed: int  # dead letters from folders that are not a declared source

    @property
    def live_rows(self) -> int:
        return sum(s.live_rows for s in self.sources)

    @property
    def tombstones(self) -> int:
        return sum(s.tombstones for s in self.sources)

    @property
    def dead_letters(self) -> int:
        """Every dead letter, attributed to a source or not."""
        return sum(s.dead_letters for s in self.sources) + self.dead_letters_unattributed


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class LakeTable:
    """One lakemv table as DuckDB scans it."""

    exists: bool
    scan: str | None  # `iceberg_scan('<metadata.json>')`, None when the table is missing or has no snapshot
    snapshot_at: datetime | None
    properties: Mapping[str, str]


def lake_table(settings: LakeSettings, namespace: str, name: str) -> LakeTable:
    """`namespace.name` in the lake: whether it exists, its scan and current snapshot's time, its properties."""
    try:
        table = pyiceberg_catalog(settings).load_table((namespace, name))
    except (NoSuchTableError, NoSuchNamespaceError):
        return LakeTable(False, None, None, {})
    snapshot = table.current_snapshot()
    if snapshot is None:
        return LakeTable(True, None, None, table.properties)
    at = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC)
    return LakeTable(True, f"iceberg_scan({ansi_string(table.metadata_location)})", at, table.properties)


def lake_status(
    settings: LakeSettings,
    sources: Iterable[str] | Mapping[str, SourceTable],
    views: Mapping[str, Sequence[str]],
    now: datetime | None = None,
    budgets: Mapping[str, int | None] | None = None,
) -> LakeStatus:
    """Status of the declared `sources` and `views` (name -> tables read). With declarations (a
    SourceRegistry), their unique keys are checked too; names alone skip that. `budgets`: the views'
    freshness budgets, micros (lakemv.core.batch.deferral); such a view's lag counts from its last
    maintenance, not from the newest change."""
    now = _utc(now) or datetime.now(UTC)
    unique = {name: s.unique for name, s in sources.items()} if isinstance(sources, Mapping) else {}
    sources = list(sources)
    con = connect_duckdb(settings=settings)
    try:
        return _status(con, settings, sources, views, now, unique, budgets or {})
    finally:
        con.close()


def _status(
    con: duckdb.DuckDBPyConnection,
    settings: LakeSettings,
    sources: list[str],
    views: Mapping[str, Sequence[str]],
    now: datetime,
    unique: Mapping[str, Sequence[Sequence[str]]],
    budgets: Mapping[str, int | None],
) -> LakeStatus:
    letters: dict[str | None, int] = {}
    dead = lake_table(settings, OPS_NAMESPACE, DEAD_LETTERS)
    if dead.scan:
        letters = dict(con.execute(f"SELECT source_table, count(*) FROM {dead.scan} GROUP BY source_table").fetchall())
    ledger = lake_table(settings, OPS_NAMESPACE, LEDGER)
    late = _late_events(con, ledger.scan) if ledger.scan else {}

    source_rows = []
    for name in sources:
        mirror = lake_table(settings, MIRROR_NAMESPACE, name)
        position, live, tombstones, newest, violations = None, 0, 0, None, 0
        if mirror.scan:
            position, live, tombstones, newest = con.execute(
                f'SELECT max("{POSITION}"), count(*) FILTER (WHERE NOT "{DELETED}"), '
                f'count(*) FILTER (WHERE "{DELETED}"), max("{SOURCE_TS}") FROM {mirror.scan}'
            ).fetchone()
            for columns in unique.get(name, ()):
                listed = ", ".join(f'"{c}"' for c in columns)
                present = " AND ".join(f'"{c}" IS NOT NULL' for c in columns)  # NULLs may repeat
                violations += con.execute(
                    f'SELECT count(*) FROM (SELECT {listed} FROM {mirror.scan} WHERE NOT "{DELETED}" AND {present} '
                    f"GROUP BY {listed} HAVING count(*) > 1)"
                ).fetchone()[0]
        source_rows.append(SourceStatus(name, position, live, tombstones, letters.get(name, 0), _utc(newest), violations, late.get(name, 0)))

    refreshed: dict[str, tuple[int, datetime]] = {}  # view -> (batch_id, finished_at) of its latest ledger row
    newest_change: dict[str, datetime] = {}  # table -> newest max_source_ts in the ledger
    if ledger.scan:
        for view, batch_id, finished in con.execute(
            "SELECT view, arg_max(batch_id, finished_at), max(finished_at) FROM ("
            f"  SELECT struct_extract(unnest(views), 'name') AS view, batch_id, finished_at FROM {ledger.scan}"
            ") GROUP BY view"
        ).fetchall():
            refreshed[view] = (batch_id, _utc(finished))
        for table, newest in con.execute(
            "SELECT struct_extract(t, 'name'), max(struct_extract(t, 'max_source_ts')) FROM ("
            f"  SELECT unnest(tables) AS t FROM {ledger.scan}"
            ") GROUP BY 1"
        ).fetchall():
            if newest is not None:
                newest_change[table] = _utc(newest)

    view_rows = []
    for name, tables in views.items():
        table = lake_table(settings, VIEW_NAMESPACE, name)
        rows = con.execute(f"SELECT count(*) FROM {table.scan}").fetchone()[0] if table.scan else 0
        batch_id, finished = refreshed.get(name, (None, None))
        changes = [newest_change[t] for t in tables if t in newest_change]
        budget = budgets.get(name)
        if budget is not None and ledger.scan and changes:  # it shows the changes up to its last maintenance
            changes = [c for c in [_newest_shown(con, ledger.scan, tables, finished)] if c is not None]
        newest = max(changes) if changes and table.exists else None  # a view not created yet has no lag
        lag = (now - newest).total_seconds() if newest is not None else None
        state = ViewState.parse(table.properties.get(STATE))
        since = _utc(datetime.fromisoformat(state.at)) if state.at else None
        view_rows.append(
            ViewStatus(name, rows, batch_id, finished or table.snapshot_at, newest, lag, state.state, since, state.by,
                       None if budget is None else budget / 1e6)  # fmt: skip
        )

    unattributed = sum(n for table, n in letters.items() if table not in sources)
    return LakeStatus(now, tuple(source_rows), tuple(view_rows), unattributed)


def _late_events(con: duckdb.DuckDBPyConnection, ledger: str) -> dict[str, int]:
    """Per event source, the late events of every unit in the ledger (a ledger written before
    lakemv counted them has no `late` column: none)."""
    if "late" not in [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {ledger}").fetchall()]:
        return {}
    found = con.execute(
        f"SELECT struct_extract(l, 'name'), sum(struct_extract(l, 'events')) FROM (SELECT unnest(late) AS l FROM {ledger}) GROUP BY 1"
    ).fetchall()
    return {name: int(events) for name, events in found}


def _newest_shown(con: duckdb.DuckDBPyConnection, ledger: str, tables: Sequence[str], refreshed: datetime | None) -> datetime | None:
    """The newest source time, among the `tables`, of the ledger's units finished by `refreshed`."""
    if refreshed is None:
        return None
    names = ", ".join(ansi_string(t) for t in tables)
    newest = con.execute(
        "SELECT max(struct_extract(t, 'max_source_ts')) FROM ("
        f"  SELECT unnest(tables) AS t, finished_at FROM {ledger}"
        f") WHERE struct_extract(t, 'name') IN ({names}) AND finished_at <= ?",
        [refreshed],
    ).fetchone()[0]
    return _utc(newest)


# ---- display -------------------------------------------------------------------------------------------
_TS = pa.timestamp("us", tz="UTC")
SOURCE_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("last_position", pa.int64()),
        ("live_rows", pa.int64()),
        ("tombstones", pa.int64()),
        ("dead_letters", pa.int64()),
        ("newest_source_ts", _TS),
        ("unique_violations", pa.int64()),
        ("late_events", pa.int64()),
    ]
)
VIEW_SCHEMA = pa.schema(
    [
        ("view", pa.string()),
        ("rows", pa.int64()),
        ("last_batch_id", pa.int64()),
        ("last_refresh", _TS),
        ("newest_change_ts", _TS),
        ("lag_seconds", pa.float64()),
        ("maintenance", pa.string()),
        ("maintenance_since", _TS),
        ("backfill", pa.string()),
        ("budget_seconds", pa.float64()),
    ]
)
TOTALS_SCHEMA = pa.schema(
    [
        ("as_of", _TS),
        ("sources", pa.int64()),
        ("live_rows", pa.int64()),
        ("tombstones", pa.int64()),
        ("dead_letters", pa.int64()),
        ("dead_letters_unattributed", pa.int64()),
        ("views", pa.int64()),
    ]
)


def status_tables(status: LakeStatus) -> dict[str, pa.Table]:
    """The status as Arrow tables for printing, by kind: `source`, `view`, `totals` (lag to 0.1 s)."""
    sources = [
        {f: getattr(s, f) for f in SOURCE_SCHEMA.names} for s in status.sources
    ]
    views = [
        {**{f: getattr(v, f) for f in VIEW_SCHEMA.names}, "lag_seconds": None if v.lag_seconds is None else round(v.lag_seconds, 1)}
        for v in status.views
    ]
    totals = {
        "as_of": status.as_of,
        "sources": len(status.sources),
        "live_rows": status.live_rows,
        "tombstones": status.tombstones,
        "dead_letters": status.dead_letters,
        "dead_letters_unattributed": status.dead_letters_unattributed,
        "views": len(status.views),
    }
    return {
        "source": pa.Table.from_pylist(sources, schema=SOURCE_SCHEMA),
        "view": pa.Table.from_pylist(views, schema=VIEW_SCHEMA),
        "totals": pa.Table.from_pylist([totals], schema=TOTALS_SCHEMA),
    }


def with_kind(kind: str, table: pa.Table) -> pa.Table:
    """`table` with a leading `kind` column (for machine output that mixes kinds)."""
    return table.add_column(0, "kind", pa.array([kind] * table.num_rows, pa.string()))


def to_seconds(table: pa.Table) -> pa.Table:
    """`table` with its timestamps cut to whole seconds (narrower columns for people)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            seconds = table.column(i).cast(pa.timestamp("s", tz=f.type.tz), safe=False)
            table = table.set_column(i, f.name, seconds)
    return table
