"""Iceberg table maintenance through Iceberg's own procedures, safe while ingest commits.

Per table: purge old tombstones (mirrors), `rewrite_data_files` (small files and merge-on-read
deletes into fewer, bigger files, sorted by the columns views look the table up by),
`rewrite_position_delete_files`, `expire_snapshots`, `remove_orphan_files`.

A stream MERGEs into the same files every few seconds, and a rewrite whose files gained deletes while
it ran cannot commit: beside a busy stream it lost every race (an hour's soak: files grew without
bound). So the steps that rewrite or delete rows run in a turn (`lakemv.catalog.writer.CommitTurns`): the
stream finishes its unit and waits while the table is rewritten. What still loses a race (no turn:
a stream on another host, or a unit that outlasted the wait) is retried with backoff (lakemv.spark.commits),
then deferred to the next run; expiry and orphan removal go on. A rewrite never changes a table's rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from lakemv.catalog.storage import Location
from lakemv.catalog.tables import DELETED, INGESTED_AT, METADATA_PROPERTIES
from lakemv.catalog.upkeep import DEFAULT_ORPHAN_AGE, DEFAULT_RETENTION, MIN_ORPHAN_AGE, PIN_MARGIN
from lakemv.core.errors import CommitConflict, ConfigError
from lakemv.core.planner.sortorder import SortOrder
from lakemv.core.retry import Retries
from lakemv.core.sql.quote import q


@dataclass(frozen=True)
class Compaction:
    """What maintaining one table did."""

    table: str
    data_files_before: int
    data_files_after: int
    delete_files_before: int
    delete_files_after: int
    bytes_before: int
    bytes_after: int
    expired_snapshots: int
    conflicts_retried: int
    seconds: float
    sort_order: str | None = None
    orphan_files_removed: int = 0
    tombstones_purged: int = 0
    deferred: tuple[str, ...] = ()  # rewrites a writer kept winning the race against: the next run tries again
    waited: float = 0.0  # seconds until the stream gave compaction its turn (it finished a unit)
    snapshots_before: int = 0  # snapshots the table's metadata held before, and after expiry
    snapshots_after: int = 0

    def describe(self) -> str:
        return (
            f"{self.table}: data files {self.data_files_before} -> {self.data_files_after}, "
            f"delete files {self.delete_files_before} -> {self.delete_files_after}, "
            f"{self.bytes_before:,} -> {self.bytes_after:,} bytes"
            + (f" ({self.sort_order})" if self.sort_order else "")
            + f", {self.expired_snapshots} snapshots expired"
            + (f", {self.orphan_files_removed} orphan files removed" if self.orphan_files_removed else "")
            + (f", {self.tombstones_purged} tombstones purged" if self.tombstones_purged else "")
            + (f", {self.conflicts_retried} commit conflicts retried" if self.conflicts_retried else "")
            + (f", waited {self.waited:.1f}s for the stream's unit" if self.waited >= 0.1 else "")
            + (f", {' and '.join(self.deferred)} deferred to the next run (the stream kept committing to the same files)" if self.deferred else "")
            + f" ({self.seconds:.1f}s)"
        )


def _files(spark: SparkSession, table: str) -> tuple[int, int, int]:
    """(data files, delete files, bytes) of the table's current snapshot."""
    row = spark.sql(
        f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes, "
        f"coalesce(sum(file_size_in_bytes), 0) AS bytes FROM {table}.files"
    ).collect()[0]
    return int(row["data"]), int(row["deletes"]), int(row["bytes"])


def _snapshots(spark: SparkSession, table: str) -> int:
    """How many snapshots the table's metadata holds."""
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").collect()[0]["n"])


def _timestamp(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S')}'"


def _purge_tombstones(spark: SparkSession, full: str, older_than: datetime, retries: Retries) -> int:
    """Delete mirror tombstones ingested before `older_than`; returns how many there were."""
    condition = f"{q(DELETED)} AND {q(INGESTED_AT)} < {_timestamp(older_than)}"
    count = spark.sql(f"SELECT count(*) AS n FROM {full} WHERE {condition}").collect()[0]["n"]
    if count:
        retries.run(f"purge tombstones of {full}", lambda: spark.sql(f"DELETE FROM {full} WHERE {condition}"))
    return int(count)


def _ensure_properties(spark: SparkSession, table: str) -> None:
    """lakemv's table properties on a table an earlier version created without some of them."""
    have = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if have.get(k) != v}
    if missing:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({pairs})")


def pinned_since(checkpoints: Location) -> datetime | None:
    """When the oldest unit any stream's journal may still replay was saved (lakemv.core.batch.journal): expiry
    keeps the snapshots since. None when no journal holds a unit."""
    from lakemv.core.batch.journal import Journal

    oldest = [t for name in checkpoints.children() if (t := Journal(checkpoints / name / "lakemv-journal").oldest_saved_at()) is not None]
    return datetime.fromtimestamp(min(oldest), UTC) if oldest else None


def _rewrite(
    spark: SparkSession, catalog: str, table: str, sort: SortOrder | None, now: datetime, tombstone_retention: timedelta | None, retries: Retries
) -> tuple[int, list[str]]:
    """Purge old tombstones, rewrite data and position delete files: (tombstones purged, steps deferred)."""
    full = f"{catalog}.{table}"
    purged = 0 if tombstone_retention is None else _purge_tombstones(spark, full, now - tombstone_retention, retries)
    strategy = f", strategy => 'sort', sort_order => '{sort.sql()}'" if sort else ""
    # Without a turn, a stream's MERGEs add deletes to the files a rewrite replaces: the rewrite then
    # commits its file groups one by one (a group that lost the race is left for the next run), and a
    # rewrite that keeps losing is deferred, not a failed compaction.
    steps = {
        "rewrite_data_files": f"CALL {catalog}.system.rewrite_data_files(table => '{table}'{strategy}, "
        "options => map('min-input-files', '2', 'delete-file-threshold', '1', 'partial-progress.enabled', 'true', "
        "'partial-progress.max-commits', '10', 'partial-progress.max-failed-commits', '10'))",
        "rewrite_position_delete_files": f"CALL {catalog}.system.rewrite_position_delete_files(table => '{table}', "
        "options => map('rewrite-all', 'true'))",
    }
    deferred = []
    for step, sql in steps.items():
        try:
            retries.run(f"{step} {table}", lambda sql=sql: spark.sql(sql).collect())
        except CommitConflict:
            deferred.append(step)
    return purged, deferred


def compact_table(
    spark: SparkSession,
    catalog: str,
    table: str,
    *,
    sort: SortOrder | None = None,
    retention: timedelta = DEFAULT_RETENTION,
    pinned: datetime | None = None,
    retain_last: int = 5,
    orphan_age: timedelta = DEFAULT_ORPHAN_AGE,
    tombstone_retention: timedelta | None = None,
    retries: Retries | None = None,
    turn: Callable[[], AbstractContextManager[object]] | None = None,
) -> Compaction:
    """Maintain `<catalog>.<table>` (table = 'namespace.name'), every step through Iceberg's procedures.

    In order: purge tombstones older than `tombstone_retention` (mirrors only), rewrite data files
    (in `sort` order when given), rewrite position delete files, expire snapshots older than
    `retention` (keeping `retain_last`, and every snapshot since `pinned`: see `pinned_since`), remove
    files no snapshot references that are older than `orphan_age`. Sets lakemv's table properties a
    table created by an earlier version lacks (old metadata files are deleted after each commit).
    `turn` holds the lake's stream off while the purge and the rewrites commit (`CommitTurns.turn`).
    """
    if orphan_age < MIN_ORPHAN_AGE:
        raise ConfigError(
            f"orphan file age {orphan_age} is too short: files of a commit in flight would be deleted "
            f"(at least {MIN_ORPHAN_AGE})",
            "orphan age",
        )
    retries = retries or Retries()
    started = time.perf_counter()
    now = datetime.now(UTC)
    full = f"{catalog}.{table}"
    _ensure_properties(spark, full)
    data_before, deletes_before, bytes_before = _files(spark, full)
    snapshots_before = _snapshots(spark, full)
    asked = time.perf_counter()
    with (turn or nullcontext)():
        waited = time.perf_counter() - asked
        purged, deferred = _rewrite(spark, catalog, table, sort, now, tombstone_retention, retries)
    expired = retries.run(
        f"expire_snapshots {table}",
        lambda: spark.sql(
            f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
            f"older_than => {_timestamp(min(now - retention, pinned - PIN_MARGIN) if pinned else now - retention)}, retain_last => {retain_last})"
        ).collect(),
    )
    orphans = retries.run(
        f"remove_orphan_files {table}",
        lambda: spark.sql(
            f"CALL {catalog}.system.remove_orphan_files(table => '{table}', older_than => {_timestamp(now - orphan_age)})"
        ).collect(),
    )
    data_after, deletes_after, bytes_after = _files(spark, full)
    snapshots_after = _snapshots(spark, full)
    return Compaction(
        table=table,
        data_files_before=data_before,
        data_files_after=data_after,
        delete_files_before=deletes_before,
        delete_files_after=deletes_after,
        bytes_before=bytes_before,
        bytes_after=bytes_after,
        expired_snapshots=int(expired[0]["deleted_manifest_lists_count"]) if expired else 0,  # one list per snapshot
        conflicts_retried=retries.count,
        seconds=time.perf_counter() - started,
        sort_order=sort.describe() if sort else None,
        orphan_files_removed=len(orphans),
        tombstones_purged=purged,
        deferred=tuple(deferred),
        waited=round(waited, 3),
        snapshots_before=snapshots_before,
        snapshots_after=snapshots_after,
    )


def lake_tables(spark: SparkSession, catalog: str, namespaces: Sequence[str]) -> list[str]:
    """Every table in `namespaces` of `catalog`, as 'namespace.name'."""
    found = []
    for namespace in namespaces:
        if not spark.sql(f"SHOW NAMESPACES IN {catalog}").where(f"namespace = '{namespace}'").count():
            continue
        found += [f"{namespace}.{r['tableName']}" for r in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect()]
    return sorted(found)
