"""Spark writes; pyiceberg and DuckDB read the very same live rows (merge-on-read deletes honoured)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import DELETED, live_rows_sql
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.store import Store
from lakemv.duck.query import run_query
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.workload.github import GitHubWorkload, WorkloadConfig


@pytest.mark.parametrize("writes", ["merge", "direct"])
def test_spark_pyiceberg_and_duckdb_agree(lake, tmp_path, writes):
    """Mirrors and views written by Spark MERGEs, or by direct commits with position deletes from the
    local state, read the same through Spark, pyiceberg and DuckDB."""
    workload = GitHubWorkload(WorkloadConfig(users=150, seed=11, rounds=4), lake.sources)
    plans = [plan_view(v, lake.sources) for v in load_views(LakeSettings().view_dirs).values()]
    if writes == "direct":
        processor = BatchProcessor(
            lake.spark, lake.names, lake.sources, plans, store=Store(tmp_path / "state.sqlite"), direct=DirectWriter(lake.spark, lake.settings)
        )
        assert lake.names.mirror("users") in processor.direct_tables
    else:
        processor = BatchProcessor(lake.spark, lake.names, lake.sources, plans)
    for batch_id, round_events in enumerate(workload.rounds()):
        lines = [(json.dumps(e), f"file:///l/{t}/r{batch_id}.json") for t, es in round_events.items() for e in es]
        processor.process_lines(batch_id, lines)  # several commits: data files + position-delete files

    catalog = pyiceberg_catalog(lake.settings)
    deletes = sum(
        lake.spark.sql(f"SELECT count(*) FROM {lake.names.mirror(t)}.delete_files WHERE content = 1").first()[0] for t in lake.sources
    )
    assert deletes > 0  # replaced rows are position deletes, in both ways of writing
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
    for plan in plans:
        view = plan.name
        spark_rows = lake.spark.table(lake.names.view(view)).toArrow()
        iceberg_rows = catalog.load_table(("views", view)).scan().to_arrow()
        duck_rows = run_query(lake.settings, lake.sources, f'SELECT * FROM "{view}"')
        assert spark_rows.num_rows > 0
        assert _canonical(spark_rows) == _canonical(iceberg_rows) == _canonical(duck_rows), view


def _canonical(table: pa.Table) -> list[str]:
    """Each row as JSON with timestamps in micros, sorted: nested lists and structs compared whole."""
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return _micros(value)

    return sorted(json.dumps(plain(row), sort_keys=True, default=str) for row in table.to_pylist())


def _micros(value):
    """Timestamps as epoch micros, the generator's representation (Arrow timestamps are UTC here)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return value
