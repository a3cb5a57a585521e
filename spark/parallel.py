"""Spark jobs of independent tables, run concurrently from one driver."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pyspark import inheritable_thread_target
from pyspark.sql import SparkSession

T = TypeVar("T")


def concurrently(spark: SparkSession, action: Callable[[str], T], names: Sequence[str]) -> list[T]:
    """`action` for each name (a table, a view occurrence) in its own thread: while one Spark job runs,
    the others plan, collect or commit; with one name, in this thread.

    Callers pass independent work: different Iceberg tables (no commit races among them) or
    different relations. The threads share the session, so a unit's write-id tag is on every
    commit, and inherit the caller's Spark job group and tags.
    """
    if len(names) <= 1:
        return [action(n) for n in names]

    def run(name: str) -> T:
        # Each Python thread drives its own JVM thread, where no session is active: Spark plans built
        # there lack one and fail in tasks (NullPointerException in SparkPlan.session, seen in a
        # 500k-row MERGE). Make this session the thread's active one first.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]
        return action(name)

    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="lakemv") as pool:
        return list(pool.map(inheritable_thread_target(spark)(run), names))
