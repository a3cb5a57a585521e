"""Spark jobs of independent tables, run concurrently from one driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from pyspark.sql import SparkSession

T = TypeVar("T")


def concurrently(spark: SparkSession, action: Callable[[str], T], names: Sequence[str], workers: int | None = None) -> list[T]:
    """`action` for each name (a table, a view) in a thread of its own (at most `workers` at once):
    while one Spark job runs, the others plan, collect or commit; with one name, in this thread.

    Callers pass independent work: different Iceberg tables (no commit races among them) or
    different relations. The threads share the session, so a unit's write-id tag is on every
    commit, and inherit the caller's Spark local properties (job group, scheduler pool).
    """
    if len(names) <= 1 or workers == 1:
        return [action(n) for n in names]

    jvm_context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    inherited = jvm_context.getLocalProperties()
    jvm_session = spark._jsparkSession  # type: ignore[attr-defined]
    session_class = spark._jvm.org.apache.spark.sql.SparkSession  # type: ignore[union-attr]

    def run(name: str) -> T:
        # Each Python thread drives its own JVM thread, which starts with neither an active session
        # nor the caller's local properties. Each thread gets its *own copy* of the properties:
        # pyspark's inheritable_thread_target hands every thread the same Properties object, so
        # concurrent queries overwrite each other's spark.sql.execution.id; adaptive execution
        # then finds none, never posts its re-planned stages, and MergeRowsExec's metrics are
        # first touched inside a task, where the plan has no session (NullPointerException in
        # SparkPlan.session, seen in CI on two concurrent mirror MERGEs).
        jvm_context.setLocalProperties(inherited.clone())
        session_class.setActiveSession(jvm_session)
        try:
            return action(name)
        finally:
            session_class.clearActiveSession()

    with ThreadPoolExecutor(max_workers=min(len(names), workers or len(names)), thread_name_prefix="lakemv") as pool:
        return list(pool.map(run, names))


@contextmanager
def sql_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL `conf` for the queries planned and run inside (the session's values again after).
    Session-wide: only for a step no other thread of the batch runs queries beside."""
    saved = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
