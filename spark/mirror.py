"""Mirror tables: one Iceberg table per source, latest state per primary key, deletes as tombstones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.declarations import Column, SourceTable
from lakemv.catalog.tables import (
    BOOKKEEPING_NAMES,
    DELETED,
    MIRROR_NAMESPACE,
    OPS_NAMESPACE,
    POSITION,
    VIEW_NAMESPACE,
    TableNames,
    mirror_arrow_schema,
    mirror_ddl_columns,
    tblproperties_sql,
)
from lakemv.core.cdc.evolution import mirror_columns
from lakemv.core.sql.quote import key_columns, key_filter, q
from lakemv.core.types import TIME_COMMENT


def ensure_namespaces(spark: SparkSession, names: TableNames) -> None:
    for namespace in (MIRROR_NAMESPACE, OPS_NAMESPACE):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {names.catalog}.{namespace}")


def ensure_view_namespace(spark: SparkSession, names: TableNames) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {names.catalog}.{VIEW_NAMESPACE}")


def ensure_mirror(spark: SparkSession, names: TableNames, source: SourceTable) -> None:
    """Create the mirror table of `source` if it does not exist (format v2, merge-on-read); an event
    source's table is partitioned by hours or days of its event time."""
    partitioned = f" PARTITIONED BY ({source.partition}s({q(source.event_time)}))" if source.is_events else ""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {names.mirror(source.name)} ({mirror_ddl_columns(source)}) "
        f"USING iceberg{partitioned} TBLPROPERTIES ({tblproperties_sql()})"
    )


def event_clocks(spark: SparkSession, names: TableNames, sources: Mapping[str, SourceTable]) -> dict[str, int | None]:
    """Per event source, the newest event time its table holds (epoch micros; None when empty): the
    clock its watermark follows (lakemv.core.cdc.events). Iceberg answers max() from its file statistics."""
    clocks = {}
    for name, source in sorted(sources.items()):
        if source.is_events:
            row = spark.sql(f"SELECT unix_micros(max({q(source.event_time)})) FROM {names.mirror(name)}").collect()[0]
            clocks[name] = row[0]
    return clocks


def event_watermarks(spark: SparkSession, names: TableNames, sources: Mapping[str, SourceTable]) -> dict[str, int | None]:
    """Per event source, the watermark its table's events give (what a backfill judges windows by)."""
    from lakemv.core.cdc.events import watermarks

    return watermarks(event_clocks(spark, names, sources), sources)




def evolved_source(spark: SparkSession, names: TableNames, source: SourceTable) -> SourceTable:
    """`source` with the columns its mirror gained from schema drift in earlier runs."""
    schema = spark.table(names.mirror(source.name)).schema
    kinds = [(f.name, TIME_COMMENT if f.metadata.get("comment") == TIME_COMMENT else f.dataType.simpleString()) for f in schema.fields]
    return mirror_columns(source, kinds, BOOKKEEPING_NAMES)


def add_mirror_columns(spark: SparkSession, names: TableNames, source: SourceTable, columns: Sequence[Column]) -> None:
    """Add nullable columns to the mirror of `source` (those it already has are skipped)."""
    existing = set(spark.table(names.mirror(source.name)).columns)
    missing = [c for c in columns if c.name not in existing]
    if missing:
        # a time of day is text in the table: its comment says it is a time, for the next run
        ddl = ", ".join(f"{q(c.name)} {c.spark_type}" + (f" COMMENT '{TIME_COMMENT}'" if c.type == "time" else "") for c in missing)
        spark.sql(f"ALTER TABLE {names.mirror(source.name)} ADD COLUMNS ({ddl})")


def merge_sql(target: str, source_view: str, source: SourceTable, prefilter: str | None = None) -> str:
    """MERGE that applies a change only when it is newer than the stored row (tombstones included).

    `prefilter`, a predicate on the target's key columns true for every source key (see
    lakemv.core.sql.quote), keeps the join from reading the rest of the table.
    """
    on = " AND ".join([f"t.{q(k)} = s.{q(k)}" for k in source.primary_key] + ([prefilter] if prefilter else []))
    return (
        f"MERGE INTO {target} t USING {source_view} s ON {on} "
        f"WHEN MATCHED AND s.{q(POSITION)} > t.{q(POSITION)} THEN UPDATE SET * "
        f"WHEN NOT MATCHED THEN INSERT *"
    )


def merge_changes(spark: SparkSession, names: TableNames, source: SourceTable, rows: pa.Table) -> None:
    """MERGE deduplicated change rows (one per key) into the mirror of `source`."""
    view = f"_lmv_changes_{source.name}"
    spark.createDataFrame(rows).createOrReplaceTempView(view)
    try:
        prefilter = key_filter("t", key_columns(rows, source.primary_key))
        spark.sql(merge_sql(names.mirror(source.name), view, source, prefilter))
    finally:
        spark.catalog.dropTempView(view)


def stored_rows(spark: SparkSession, names: TableNames, source: SourceTable, rows: pa.Table) -> pa.Table:
    """The mirror's current rows (tombstones included) for the primary keys in `rows`."""
    return matching_rows(spark, names, source, rows.select(list(source.primary_key)))


def matching_rows(spark: SparkSession, names: TableNames, source: SourceTable, match: pa.Table, live: bool = False) -> pa.Table:
    """The mirror's rows (only the live ones with `live`, else tombstones included) whose columns named
    like `match`'s equal one of its rows: a semi join with `match`, the values also given as literals
    so the Iceberg scan skips the files that cannot hold them (lakemv.core.sql.quote)."""
    view = f"_lmv_match_{source.name}"
    spark.createDataFrame(match).createOrReplaceTempView(view)
    on = " AND ".join(f"m.{q(k)} = k.{q(k)}" for k in match.column_names)
    conditions = [key_filter("m", key_columns(match, match.column_names))] + ([f"NOT m.{q(DELETED)}"] if live else [])
    where = " AND ".join(c for c in conditions if c)
    try:
        columns = ", ".join(f"m.{q(f.name)}" for f in mirror_arrow_schema(source))
        sql = f"SELECT {columns} FROM {names.mirror(source.name)} m LEFT SEMI JOIN {view} k ON {on}" + (f" WHERE {where}" if where else "")
        stored = spark.sql(sql).toArrow()
    finally:
        spark.catalog.dropTempView(view)
    return stored.cast(mirror_arrow_schema(source)) if stored.num_rows else mirror_arrow_schema(source).empty_table()