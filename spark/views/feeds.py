"""Every view's change feed in one Iceberg table (`lakemv.core.sql.feedsql`): the table, each view's
column and read path, and a unit's feed rows of every view in one commit.

A view's struct column is added when the view is created and replaced when its columns change (the
column dropped and added again: a new field id, so its old rows leave the read path); its read path
`<catalog>.views.<view>__changes` is an Iceberg view replaced with it. Schema changes of the shared
table are serialised in this process (the views are prepared side by side) and retried when another
writer (a backfill preparing a view) committed in between.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from lakemv.catalog.tables import CHANGES_SUFFIX, TableNames, tblproperties_sql
from lakemv.core.sql.feedsql import (
    ROW,
    SHARED,
    VIEWS_PROPERTY,
    feed_column,
    feed_insert_sql,
    feed_view_sql,
    views_of,
    views_property,
)
from lakemv.core.sql.quote import q, spark_string
from lakemv.core.types import spark_ddl
from lakemv.spark.commits import WRITE_ID, WriteUnit
from lakemv.spark.directwrite import DirectWriter

_SCHEMA_TRIES = 5


class Feeds:
    """The shared change-feed table of one catalog."""

    def __init__(self, spark: SparkSession, names: TableNames):
        self.spark = spark
        self.names = names
        self.table = names.feeds
        self._lock = threading.Lock()  # schema changes
        self._inserting = threading.Lock()  # Spark inserts (their snapshot property is the session's)
        self._columns: dict[str, object] | None = None  # the table's columns as last read or changed here
        self._gathered: dict[str, tuple[StructType, tuple[str, ...], bool]] | None = None  # inside together()
        self._paths: set[str] | None = None  # views with a read path

    # ---- the table and each view's column ----------------------------------------------------------
    def ensure(self) -> None:
        columns = ", ".join(f"{q(f.name)} {spark_ddl(f.type)}" for f in SHARED)
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {self.table} ({columns}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})")

    def _struct(self, view_schema: StructType, key_names: tuple[str, ...]) -> StructType:
        row = StructType([StructField(f.name, f.dataType, True) for f in view_schema.fields])
        return StructType([*(StructField(k, view_schema[k].dataType, True) for k in key_names), StructField(ROW, row, True)])

    def prepare(self, view: str, view_schema: StructType, key_names: tuple[str, ...], reshape: bool) -> None:
        """Give `view` its struct column for `view_schema` (a new one when `reshape`, or when its type
        differs: a new field id) and its read path `<view>__changes`. Inside `together()`, noted and
        made with the other views' on leaving it."""
        wanted = self._struct(view_schema, key_names)
        with self._lock:
            if self._gathered is not None:
                self._gathered[view] = (wanted, key_names, reshape)
                return
            self._change({view: (wanted, key_names, reshape)})

    @contextmanager
    def together(self) -> Iterator[None]:
        """Views prepared inside get their columns in one schema change of the table (one dropping
        the columns of views whose type changed, one adding), not one each: the table's metadata
        keeps every schema it ever had, and a hundred views' one at a time made it 2.8 MB."""
        with self._lock:
            self._gathered = {}
        try:
            yield
            with self._lock:
                gathered, self._gathered = self._gathered, None
                self._change(gathered)
        finally:
            self._gathered = None

    def _change(self, wanted: Mapping[str, tuple[StructType, tuple[str, ...], bool]]) -> None:
        """Columns for `wanted` (view -> (struct, key names, reshape)) and their read paths; retried
        when another writer (a backfill preparing a view) changed the table in between."""
        if not wanted:
            return
        for attempt in range(_SCHEMA_TRIES):
            columns = self._read_columns() if self._columns is None or attempt else self._columns
            stale = {v for v, (struct, _, reshape) in wanted.items() if feed_column(v) in columns and (reshape or not _same(columns[feed_column(v)], struct))}
            missing = {v for v in wanted if feed_column(v) not in columns} | stale
            try:
                if stale:
                    self.spark.sql(f"ALTER TABLE {self.table} DROP COLUMNS ({', '.join(q(feed_column(v)) for v in sorted(stale))})")
                    for view in stale:
                        columns.pop(feed_column(view))
                    wanted = {v: (struct, keys, reshape and v not in stale) for v, (struct, keys, reshape) in wanted.items()}  # (dropped)
                if missing:
                    parse = self.spark._jsparkSession.parseDataType  # type: ignore[union-attr]
                    added = ", ".join(f"{q(feed_column(v))} {parse(wanted[v][0].json()).sql()}" for v in sorted(missing))  # field names quoted
                    self.spark.sql(f"ALTER TABLE {self.table} ADD COLUMNS ({added})")
                    for view in missing:
                        columns[feed_column(view)] = wanted[view][0]
                        self._read_paths().discard(view)
                break
            except AnalysisException:
                raise
            except Exception:  # another writer moved the table's metadata in between: read it again
                if attempt == _SCHEMA_TRIES - 1:
                    raise
        for view, (_, key_names, _) in sorted(wanted.items()):
            if view not in self._read_paths():
                self._replace_view(view, key_names)

    def _read_columns(self) -> dict[str, object]:
        self.ensure()
        self._columns = {f.name: f.dataType for f in self.spark.table(self.table).schema.fields}
        return self._columns

    def _read_paths(self) -> set[str]:
        """The views whose `__changes` read path exists (an Iceberg view), read once."""
        if self._paths is None:
            namespace = self.names.view_changes("x").rsplit(".", 1)[0]
            names = {r["viewName"] for r in self.spark.sql(f"SHOW VIEWS IN {namespace}").collect()}
            self._paths = {n[: -len(CHANGES_SUFFIX)] for n in names if n.endswith(CHANGES_SUFFIX)}
        return self._paths

    def _replace_view(self, view: str, key_names: tuple[str, ...]) -> None:
        changes = self.names.view_changes(view)
        create = f"CREATE OR REPLACE VIEW {changes} AS {feed_view_sql(view, key_names, self.table)}"
        try:
            self.spark.sql(create)
        except (AnalysisException, Py4JJavaError):  # Iceberg's AlreadyExistsException comes unconverted
            if not self.spark.catalog.tableExists(changes):
                raise
            # The feed table of a lakemv before the shared one: its rows are not carried over (a
            # sink of the view publishes the whole view once instead).
            self.spark.sql(f"DROP TABLE {changes}")
            self.spark.sql(create)
        self._read_paths().add(view)

    # ---- a unit's feed rows ------------------------------------------------------------------------
    def append(self, direct: DirectWriter, parts: Mapping[str, pa.Table], unit: WriteUnit) -> None:
        """Every view's feed rows of the unit (`parts`: view -> `feedsql.feed_part` rows), one data file
        per view, in one commit (once per unit and view: a replay finds them by its write id)."""
        parts = {view: rows for view, rows in parts.items() if rows.num_rows}

        def commit(views: set[str]) -> None:
            direct.append_files(self.table, [parts[v] for v in sorted(views)], unit.write_id, {VIEWS_PROPERTY: views_property(views)})

        self._once(self.table, unit, set(parts), commit, f"append the change feeds of {len(parts)} views")

    def insert(self, view: str, plan_columns: tuple[str, ...], key_names: tuple[str, ...], diff: str, op_column: str,
               unit: WriteUnit, position: int | None, table: str | None = None) -> None:  # fmt: skip
        """One view's feed rows from a Spark relation `diff`, by Spark SQL (a table in an object store, a
        backfill's branch `table`): a commit of its own, found again on a replay by the unit's write
        id and the view it names."""
        target = table or self.table
        sql = feed_insert_sql(view, plan_columns, key_names, target, diff, op_column, unit.batch_id, position)
        key = f"spark.sql.iceberg.snapshot-property.{VIEWS_PROPERTY}"

        def commit(views: set[str]) -> None:
            with self._inserting:  # the property is the session's: one view's insert at a time
                self.spark.conf.set(key, views_property(views))
                try:
                    self.spark.sql(sql)
                finally:
                    self.spark.conf.unset(key)

        self._once(target, unit, {view}, commit, f"append the change feed of {view}")

    def _once(self, table: str, unit: WriteUnit, views: set[str], commit: Callable[[set[str]], object], what: str) -> None:
        """`commit` the feed rows of `views` not committed by the unit yet: all of them on a first
        attempt; on a replay, or after an attempt whose outcome is not known, those the table lacks."""
        if not views:
            return
        first = True

        def attempt() -> None:
            nonlocal first
            left = views - self.committed(unit.write_id, table) if unit.replay or not first else views
            first = False
            if left:
                commit(left)

        unit.retries.run(what, attempt)

    def committed(self, write_id: str, table: str | None = None) -> frozenset[str]:
        """The views whose feed rows the unit `write_id` appended to `table` already."""
        rows = self.spark.sql(
            f"SELECT summary FROM {(table or self.table).split('.branch_')[0]}.snapshots WHERE summary[{spark_string(WRITE_ID)}] = {spark_string(write_id)}"
        ).collect()
        return frozenset(v for r in rows for v in views_of(r["summary"]))


def snapshot_rows(spark: SparkSession, names: TableNames, view: str, key_names: tuple[str, ...], parent: int | None, snapshot: int) -> DataFrame:
    """The feed rows of `view` (key columns, `op`, `row`) that feed snapshot `snapshot` added (its
    parent `parent`): an incremental read of the feeds, pruned to the view's data files."""
    reader = spark.read.format("iceberg")
    if parent is None:
        reader = reader.option("snapshot-id", str(snapshot))
    else:
        reader = reader.option("start-snapshot-id", str(parent)).option("end-snapshot-id", str(snapshot))
    struct = F.col(q(feed_column(view)))
    rows = reader.load(names.feeds).where((F.col("view") == view) & struct.isNotNull())
    return rows.select(*[struct.getField(k).alias(k) for k in key_names], F.col("op"), struct.getField(ROW).alias(ROW))


def _same(a, b) -> bool:  # noqa: ANN001 - Spark DataTypes
    """The same struct, nullability aside."""

    def plain(t):  # noqa: ANN001, ANN202
        if isinstance(t, StructType):
            return tuple((f.name, plain(f.dataType)) for f in t.fields)
        return t.simpleString()

    return plain(a) == plain(b)
