"""Iceberg commit discipline: every write is tagged with who made it, and conflicts are retried.

A *write id* names one unit of work (a batch of a stream, or a view build). Each snapshot a unit
commits carries it in the snapshot summary (`lakemv.write-id`), so a replayed unit can ask a table
"did I already commit here?" instead of appending twice. Optimistic-concurrency losses (a compaction
replaced the files a MERGE deletes from, another writer moved the table pointer, SQLite was busy)
are transient: the action is retried with exponential backoff and only a persistent loss surfaces,
as `CommitConflict`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from pyspark.sql import SparkSession

from lakemv.core.retry import Retries
from lakemv.core.sql.quote import spark_string

WRITE_ID = "lakemv.write-id"
_SESSION_PROPERTY = f"spark.sql.iceberg.snapshot-property.{WRITE_ID}"

T = TypeVar("T")
log = logging.getLogger(__name__)


@contextmanager
def tagged(spark: SparkSession, write_id: str) -> Iterator[None]:
    """Tag every Iceberg snapshot `spark` commits inside the block with `write_id`."""
    spark.conf.set(_SESSION_PROPERTY, write_id)
    try:
        yield
    finally:
        spark.conf.unset(_SESSION_PROPERTY)


def committed(spark: SparkSession, table: str, write_id: str) -> bool:
    """Whether `table` has a snapshot committed under `write_id`."""
    rows = spark.sql(f"SELECT 1 FROM {table}.snapshots WHERE summary[{spark_string(WRITE_ID)}] = {spark_string(write_id)} LIMIT 1").collect()
    return bool(rows)


@dataclass
class WriteUnit:
    """The context a unit of work writes in: its write id, whether it is a replay, its retry count.

    On a replay an earlier attempt may have committed some of the unit's appends already, so each
    append first asks the table (`append_once`). The first attempt skips that lookup.
    """

    write_id: str
    replay: bool = False
    retries: Retries = field(default_factory=Retries)
    batch_id: int | None = None  # for crash points


def commit_once(spark: SparkSession, table: str, unit: WriteUnit, commit: Callable[[bool], object], what: str) -> bool:
    """Run `commit` (tagged with the unit's write id by the caller) unless `table` already has it.

    Returns whether this call committed. A lost race is retried after checking again, so a commit
    whose outcome was unknown is not repeated; `commit` is told whether an earlier attempt failed
    (what it wrote against may have moved meanwhile).
    """
    if unit.replay and committed(spark, table, unit.write_id):
        return False
    first = True

    def attempt() -> bool:
        nonlocal first
        retry, first = not first, False
        if retry and committed(spark, table, unit.write_id):
            return False
        commit(retry)
        return True

    return unit.retries.run(what, attempt)


def append_once(spark: SparkSession, table: str, unit: WriteUnit, append: Callable[[], object]) -> bool:
    """Run `append` once per unit (`commit_once`)."""
    return commit_once(spark, table, unit, lambda _retry: append(), f"append to {table}")
