"""The view maintenance state (lakemv.catalog.viewstate) read and written with Spark, and the mirror
snapshot diffs a catch-up is computed from: comparing two snapshots of each mirror, no change
between them is missed however many batches skipped the view.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable, ViewSource
from lakemv.catalog.tables import TableNames, live_rows_sql, table_of
from lakemv.catalog.viewstate import STATE, ViewState


def read_state(spark: SparkSession, table: str) -> ViewState:
    """The view table's maintenance state (fresh from the catalog: the catalog cache is off), read
    through Iceberg's Java API: every batch reads it for every view it serves, and a `SHOW
    TBLPROPERTIES` query cost 8x as much (46 ms against 5.8 ms here). A table Iceberg cannot load is
    asked again by the query, which says why in Spark's words."""
    try:
        value = _iceberg(spark).loadIcebergTable(spark._jsparkSession, table).properties().get(STATE)
    except Py4JJavaError:
        rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
        value = next((r["value"] for r in rows if r["key"] == STATE), None)
    return ViewState.parse(None if value is None else str(value))


_UTIL: weakref.WeakKeyDictionary[SparkSession, object] = weakref.WeakKeyDictionary()


def _iceberg(spark: SparkSession):  # noqa: ANN202 - a py4j proxy of org.apache.iceberg.spark.Spark3Util
    """Iceberg's Spark3Util, looked up once per session (py4j resolves a dotted name one package at a time)."""
    if spark not in _UTIL:
        _UTIL[spark] = spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util  # type: ignore[union-attr]
    return _UTIL[spark]


def write_state(spark: SparkSession, table: str, state: ViewState) -> None:
    """Set (or, for `active`, remove) the state; a metadata-only commit that Iceberg retries itself."""
    if state.state == "active":
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES IF EXISTS ('{STATE}')")
    else:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{STATE}' = '{state.to_json()}')")


def ref_snapshot(spark: SparkSession, table: str, ref: str = "main") -> int | None:
    """The snapshot a branch of an Iceberg table points at (None: no such branch, or no snapshot yet)."""
    rows = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = '{ref}'").collect()
    return int(rows[0][0]) if rows else None


def mirror_snapshots(
    spark: SparkSession, names: TableNames, tables: Iterable[str], sources: Mapping[str, SourceTable | ViewSource] | None = None
) -> dict[str, int | None]:
    """The current snapshot id of each mirror (None: the mirror has none yet); of a view's table, for
    a table `sources` says is a view another view reads."""
    sources = sources or {}
    return {table: ref_snapshot(spark, table_of(names, sources[table]) if table in sources else names.mirror(table)) for table in tables}


def live_at_sql(names: TableNames, source: SourceTable | ViewSource, snapshot: int | None, columns: Sequence[str] | None = None) -> str:
    """The live rows of a mirror as of `snapshot` (no rows when None: the mirror was empty then)."""
    if snapshot is None:
        return f"{live_rows_sql(names, source, columns=columns)} AND FALSE"
    return live_rows_sql(names, source, snapshot, columns)


def changed_rows_sql(
    names: TableNames, source: SourceTable | ViewSource, old: int | None, new: int | None, columns: Sequence[str]
) -> str:
    """Old and new images of the live rows that differ between two snapshots of a mirror."""
    before = live_at_sql(names, source, old, columns)
    after = live_at_sql(names, source, new, columns)
    return f"(({before}) EXCEPT ALL ({after})) UNION ALL (({after}) EXCEPT ALL ({before}))"
