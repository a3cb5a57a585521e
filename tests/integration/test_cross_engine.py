"""Spark writes; pyiceberg and DuckDB read the very same live rows (merge-on-read deletes honoured)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from catalog.duck import run_query
from catalog.lake import pyiceberg_catalog
from catalog.tables import DELETED
from spark.batch import BatchProcessor
from spark.mirror import live_rows_sql
from workload.github import GitHubWorkload, WorkloadConfig


def test_spark_pyiceberg_and_duckdb_agree(lake):
    workload = GitHubWorkload(WorkloadConfig(users=150, seed=11, rounds=3), lake.sources)
    processor = BatchProcessor(lake.spark, lake.names, lake.sources)
    for batch_id, round_events in enumerate(workload.rounds()):
        lines = [(json.dumps(e), f"file:///l/{t}/r{batch_id}.json") for t, es in round_events.items() for e in es]
        processor.process_lines(batch_id, lines)  # several MERGEs: data files + position-delete files

    catalog = pyiceberg_catalog(lake.settings)
    for name, source in lake.sources.items():
        columns = list(source.column_names)
        spark_rows = lake.spark.sql(live_rows_sql(lake.names, source)).toArrow().select(columns)
        table = catalog.load_table(("mirror", name)).scan().to_arrow()
        iceberg_rows = table.filter(pc.invert(table[DELETED])).select(columns)
        duck_rows = run_query(lake.settings, lake.sources, f'SELECT * FROM "{name}"')
        expected = sorted(tuple(r[c] for c in columns) for r in workload.live_rows(name))

        def rows(t: pa.Table) -> list[tuple]:
            return sorted(tuple(_micros(r[c]) for c in columns) for r in t.to_pylist())

        assert rows(spark_rows) == rows(iceberg_rows) == rows(duck_rows) == expected, name


def _micros(value):
    """Timestamps as epoch micros, the generator's representation (Arrow timestamps are UTC here)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return value
