"""CREATE TABLE of lakemv's own Iceberg tables: the ledger and the dead letters, from their Arrow
schemas (`lakemv.core.batch.records`). Mirrors and views are created where they are written
(`lakemv.spark.mirror`, `lakemv.spark.views.maintain`)."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from lakemv.catalog.tables import TableNames, tblproperties_sql
from lakemv.core.batch.records import DEAD_LETTERS, LEDGER, VIEW_STRUCT
from lakemv.core.types import schema_ddl, spark_ddl


def ensure_ledger(spark: SparkSession, names: TableNames) -> None:
    """The ledger, created, or given the fields of its `views` entries that a lake made by an older
    lakemv lacks (how each view was maintained: lakemv.core.batch.records.VIEW_STRUCT)."""
    try:  # one load of Iceberg's own table (a CREATE ... IF NOT EXISTS and a DataFrame's schema cost two, on start-up's path)
        schema = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, names.ledger).schema()
    except AnalysisException as error:
        if error.getCondition() != "TABLE_OR_VIEW_NOT_FOUND":
            raise
        spark.sql(f"CREATE TABLE IF NOT EXISTS {names.ledger} ({schema_ddl(LEDGER)}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})")
        return
    for field in VIEW_STRUCT:
        if schema.findField(f"views.element.{field.name}") is None:
            spark.sql(f"ALTER TABLE {names.ledger} ADD COLUMN views.element.{field.name} {spark_ddl(field.type)}")


def ensure_dead_letters(spark: SparkSession, names: TableNames) -> None:
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {names.dead_letters} ({schema_ddl(DEAD_LETTERS)}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})"
    )
