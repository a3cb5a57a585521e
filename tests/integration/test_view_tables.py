"""A view's table is created by one commit of Iceberg's catalog (`lakemv.spark.tables.create_empty`),
without a Spark job, and is the table a CREATE TABLE ... AS SELECT of no rows gives: the same columns,
every field nullable at any depth, its properties, one empty snapshot to branch from and read."""

from __future__ import annotations

from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType, TimestampType

from lakemv.catalog.tables import VIEW_NAMESPACE
from lakemv.duck.query import connect_duckdb, metadata_location
from lakemv.spark.tables import create_empty

ENTRY = StructType([StructField("repo", StringType(), False), StructField("at", TimestampType(), False)])
SCHEMA = StructType(
    [
        StructField("username", StringType(), False),
        StructField("prs", ArrayType(ENTRY, False), False),
        StructField("counts", MapType(StringType(), LongType(), False), True),
    ]
)


def _snapshots(lake, table: str) -> list:
    return lake.spark.sql(f"SELECT snapshot_id, operation FROM {table}.snapshots").collect()


def test_a_view_table_is_what_spark_creates_from_no_rows_with_one_empty_snapshot(lake):
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake.settings.catalog_name}.{VIEW_NAMESPACE}")
    ours, spark_made = lake.names.view("made"), lake.names.view("by_spark")
    create_empty(lake.spark, ours, SCHEMA, {"format-version": "2", "lakemv.test": "yes"})
    lake.spark.createDataFrame([], SCHEMA).writeTo(spark_made).using("iceberg").create()

    assert lake.spark.table(ours).schema == lake.spark.table(spark_made).schema  # nullable at every depth, as Spark's
    assert lake.spark.table(ours).schema.fields[1].dataType.elementType.fields[0].nullable
    properties = {r["key"]: r["value"] for r in lake.spark.sql(f"SHOW TBLPROPERTIES {ours}").collect()}
    assert properties["lakemv.test"] == "yes" and properties["format-version"] == "2"
    assert [r.operation for r in _snapshots(lake, ours)] == ["append"] and lake.spark.table(ours).count() == 0
    lake.spark.sql(f"ALTER TABLE {ours} CREATE BRANCH audit")  # a backfill's branch needs a snapshot on main
    con = connect_duckdb()  # DuckDB reads it: no rows, the columns
    location = metadata_location(lake.settings, VIEW_NAMESPACE, "made")
    described = con.execute(f"SELECT * FROM iceberg_scan('{location}')")
    assert [d[0] for d in described.description] == ["username", "prs", "counts"] and described.fetchall() == []


def test_a_replaced_view_table_has_the_new_columns_no_rows_and_a_snapshot(lake):
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake.settings.catalog_name}.{VIEW_NAMESPACE}")
    table = lake.names.view("reshaped")
    create_empty(lake.spark, table, SCHEMA, {})
    lake.spark.sql(f"INSERT INTO {table} VALUES ('ann', array(), map())")
    smaller = StructType([StructField("username", StringType(), False), StructField("stars", LongType(), True)])
    create_empty(lake.spark, table, smaller, {"lakemv.test": "replaced"}, replace=True)

    assert [(f.name, f.dataType, f.nullable) for f in lake.spark.table(table).schema] == [
        ("username", StringType(), True), ("stars", LongType(), True),
    ]  # fmt: skip
    assert lake.spark.table(table).count() == 0
    current = lake.spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    assert len(current) == 1 and len(_snapshots(lake, table)) == 3  # created, the insert, the replacement's empty one
