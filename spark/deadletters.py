"""The dead-letter table: every line that could not be applied, with its reason. Nothing is dropped."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.tables import TableNames, tblproperties_sql
from lakemv.core.cdc.changeset import DeadLetter

MAX_RAW_CHARS = 1 << 20  # a 10 MB line keeps its first MiB; raw_chars records the full length

DDL = (
    "raw STRING, raw_chars BIGINT, source_file STRING, source_table STRING, reason STRING, "
    "batch_id BIGINT, failed_at TIMESTAMP"
)
SCHEMA = pa.schema(
    [
        ("raw", pa.string()),
        ("raw_chars", pa.int64()),
        ("source_file", pa.string()),
        ("source_table", pa.string()),
        ("reason", pa.string()),
        ("batch_id", pa.int64()),
        ("failed_at", pa.timestamp("us", tz="UTC")),
    ]
)


def ensure_dead_letters(spark: SparkSession, names: TableNames) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {names.dead_letters} ({DDL}) USING iceberg TBLPROPERTIES ({tblproperties_sql()})")


def dead_letters_to_arrow(letters: list[DeadLetter], batch_id: int, failed_at_micros: int) -> pa.Table:
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
        schema=SCHEMA,
    )
