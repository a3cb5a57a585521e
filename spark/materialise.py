"""Relations a step computes once and reads several times: Spark's local checkpoint
(`DataFrame.localCheckpoint`), whose rows stay in the block manager (in memory, spilling to disk)
and are never recomputed - the tables they were read from may change before they are read again
(a whole diff, read after the MERGE into the view it was diffed against).

Spark frees a checkpoint's blocks only after the JVM has collected every object that refers to it
(its `ContextCleaner` follows weak references), which a long-lived driver may not do for a long time:
building 100 views at 1M users left ~13M rows of finished diffs (2.5 GB; a heap histogram, 2026-12-03)
in the 4 GB driver, and the next batch's driver-side relations ran it out of heap. So what a step
materialises, it releases when it ends (`materialised`, or `materialise` and `release`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame


def materialise(frame: DataFrame) -> DataFrame:
    """`frame` computed now and held for reading (release it with `release`)."""
    return frame.localCheckpoint(eager=True)


def release(frame: DataFrame) -> None:
    """Free the blocks of `frame`, a relation `materialise` returned: reading it afterwards fails
    (Spark: checkpoint block not found) rather than recomputing it."""
    plan = frame._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":  # what a local checkpoint's DataFrame is
        plan.rdd().unpersist(True)


@contextmanager
def materialised(frame: DataFrame, relation: str | None = None) -> Iterator[DataFrame]:
    """`frame` materialised (and registered as temp view `relation`) while the block runs; dropped
    and released after."""
    kept = materialise(frame)
    try:
        if relation is not None:
            kept.createOrReplaceTempView(relation)
        yield kept
    finally:
        if relation is not None:
            kept.sparkSession.catalog.dropTempView(relation)
        release(kept)
