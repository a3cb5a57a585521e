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
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from pyspark.sql import SparkSession

from lakemv.core.errors import CommitConflict
from lakemv.core.sql.quote import spark_string

WRITE_ID = "lakemv.write-id"
_SESSION_PROPERTY = f"spark.sql.iceberg.snapshot-property.{WRITE_ID}"

# What Iceberg / the JDBC catalog say when another commit won the race. Matched against the Java
# exception chain (class names and messages).
_CONFLICT_MARKERS = (
    "CommitFailedException",
    "Found conflicting",
    "Found new conflicting",
    "Cannot commit, missing data files",
    "Cannot commit, found new",
    "Missing required files to delete",
    "Cannot commit rewrite",
    "Cannot remove dangling deletes",  # rewrite_data_files' second commit, when a batch committed in between
    "SQLITE_BUSY",
    "database is locked",
)

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


def _java_chain(exc: BaseException) -> str:
    """Class names and messages of an exception and, for a JVM error, of its Java causes."""
    parts = [type(exc).__name__, str(exc)]
    java = getattr(exc, "java_exception", None)
    depth = 0
    while java is not None and depth < 8:
        try:
            parts += [java.getClass().getName(), str(java.getMessage())]
            java = java.getCause()
        except Exception:  # noqa: BLE001 - the gateway may be gone; the text we have is enough
            break
        depth += 1
    return "\n".join(parts)


def is_conflict(exc: BaseException) -> bool:
    """True when `exc` is a lost optimistic-concurrency race (retrying may succeed)."""
    if isinstance(exc, CommitConflict):
        return True
    text = _java_chain(exc)
    return any(marker in text for marker in _CONFLICT_MARKERS)


def first_line(exc: BaseException) -> str:
    """The most telling line of a (possibly JVM) error: the Iceberg or catalog message."""
    text = _java_chain(exc)
    for marker in _CONFLICT_MARKERS:
        for line in text.splitlines():
            if marker in line:
                return line.strip()[:300]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


@dataclass
class RetryPolicy:
    """Backoff for lost commit races: `attempts` tries, waits growing from `base` to `cap` seconds."""

    attempts: int = 8
    base: float = 0.25
    cap: float = 8.0

    def wait(self, attempt: int) -> float:
        return min(self.cap, self.base * 2**attempt) * random.uniform(0.5, 1.0)


@dataclass
class Retries:
    """Counts the conflicts retried by one unit of work (reported in batch results and the ledger)."""

    count: int = 0

    def run(self, what: str, action: Callable[[], T], policy: RetryPolicy | None = None) -> T:
        """Run `action`; on a lost commit race wait and run it again. The action must be idempotent."""
        policy = policy or RetryPolicy()
        for attempt in range(policy.attempts):
            try:
                return action()
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                if attempt == policy.attempts - 1:
                    raise CommitConflict(f"{what}: still conflicting after {policy.attempts} attempts: {first_line(exc)}") from None
                self.count += 1
                pause = policy.wait(attempt)
                log.info("%s lost a commit race (%s); retrying in %.2fs", what, first_line(exc), pause)
                time.sleep(pause)
        raise AssertionError("unreachable")


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
