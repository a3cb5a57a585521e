"""Concurrent Spark work from one driver: each worker thread has its own local properties and the
caller's active session, and concurrent MERGEs on separate Iceberg tables both land."""

from __future__ import annotations

import threading

from lakemv.spark.parallel import concurrently


def test_each_thread_has_its_own_local_properties(spark):
    context = spark.sparkContext
    context.setLocalProperty("lakemv.test.inherited", "caller")
    both_set = threading.Barrier(2, timeout=60)

    def action(name: str) -> tuple[str | None, str | None]:
        # What Spark does with spark.sql.execution.id in every query: set it on this thread, read it back later.
        context.setLocalProperty("lakemv.test.own", name)
        both_set.wait()
        return context.getLocalProperty("lakemv.test.own"), context.getLocalProperty("lakemv.test.inherited")

    try:
        assert concurrently(spark, action, ["a", "b"]) == [("a", "caller"), ("b", "caller")]
    finally:
        context.setLocalProperty("lakemv.test.inherited", None)
    assert context.getLocalProperty("lakemv.test.own") is None


def test_concurrent_merges_on_separate_tables(spark, tmp_path):
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.parallel_test")
    names = [f"lake.parallel_test.t{i}" for i in range(3)]
    for name in names:
        spark.sql(f"CREATE OR REPLACE TABLE {name} (id BIGINT, v STRING) USING iceberg")
        spark.sql(f"INSERT INTO {name} SELECT id, 'old' FROM range(2000)")

    def merge(name: str) -> int:
        for round_ in range(3):
            spark.sql(
                f"MERGE INTO {name} t USING (SELECT id * 2 AS id, 'r{round_}' AS v FROM range(1500)) s "
                "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
            )
        return spark.table(name).count()

    try:
        assert concurrently(spark, merge, names) == [2000 + 500] * 3
        for name in names:
            rows = dict(spark.sql(f"SELECT v, count(*) FROM {name} GROUP BY v").collect())
            assert rows == {"r2": 1500, "old": 1000}
    finally:
        for name in names:
            spark.sql(f"DROP TABLE IF EXISTS {name}")
