"""CREATE TABLE of lakemv's own Iceberg tables: the ledger and the dead letters, from their Arrow
schemas (`lakemv.core.batch.records`). Mirrors and views are created where they are written
(`lakemv.spark.mirror`, `lakemv.spark.views.maintain`)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakemv.catalog.tables import TableNames, tblproperties_sql
from lakemv.core.batch.records import DEAD_LETTERS, LEDGER
from lakemv.core.types import schema_ddl


def ensure_ledger(spark: SparkSession, names: TableNames) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {names.ledger} ({schema_ddl(LEDGER)}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})")


def ensure_dead_letters(spark: SparkSession, names: TableNames) -> None:
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {names.dead_letters} ({schema_ddl(DEAD_LETTERS)}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})"
    )
