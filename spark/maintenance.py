"""Iceberg table maintenance through Iceberg's own procedures, safe while ingest commits.

Per table: `rewrite_data_files` (small files and merge-on-read deletes into fewer, bigger files),
`rewrite_position_delete_files`, `expire_snapshots`. Each procedure commits optimistically; when an
ingest MERGE wins the race, the procedure is retried with backoff (see spark.commits), and when a
maintenance commit wins, ingest retries its MERGE. Nothing is lost either way: a rewrite never changes
a table's rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from spark.commits import Retries

# Iceberg's own default for history.expire.max-snapshot-age-ms. A replayed batch finds its earlier
# appends by the write ids in snapshot summaries, so snapshots must outlive any ingest outage.
DEFAULT_RETENTION = timedelta(days=5)


@dataclass(frozen=True)
class TableMaintenance:
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

    def describe(self) -> str:
        return (
            f"{self.table}: data files {self.data_files_before} -> {self.data_files_after}, "
            f"delete files {self.delete_files_before} -> {self.delete_files_after}, "
            f"{self.bytes_before:,} -> {self.bytes_after:,} bytes, {self.expired_snapshots} snapshots expired"
            + (f", {self.conflicts_retried} commit conflicts retried" if self.conflicts_retried else "")
            + f" ({self.seconds:.1f}s)"
        )


def _files(spark: SparkSession, table: str) -> tuple[int, int, int]:
    """(data files, delete files, bytes) of the table's current snapshot."""
    row = spark.sql(
        f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes, "
        f"coalesce(sum(file_size_in_bytes), 0) AS bytes FROM {table}.files"
    ).collect()[0]
    return int(row["data"]), int(row["deletes"]), int(row["bytes"])


def maintain_table(
    spark: SparkSession,
    catalog: str,
    table: str,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    retain_last: int = 5,
    retries: Retries | None = None,
) -> TableMaintenance:
    """Compact `<catalog>.<table>` (table = 'namespace.name'), rewrite its delete files, expire old snapshots."""
    retries = retries or Retries()
    started = time.perf_counter()
    full = f"{catalog}.{table}"
    data_before, deletes_before, bytes_before = _files(spark, full)
    retries.run(
        f"rewrite_data_files {table}",
        lambda: spark.sql(
            f"CALL {catalog}.system.rewrite_data_files(table => '{table}', "
            "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
        ).collect(),
    )
    retries.run(
        f"rewrite_position_delete_files {table}",
        lambda: spark.sql(
            f"CALL {catalog}.system.rewrite_position_delete_files(table => '{table}', options => map('rewrite-all', 'true'))"
        ).collect(),
    )
    cutoff = (datetime.now(UTC) - retention).strftime("%Y-%m-%d %H:%M:%S")
    expired = retries.run(
        f"expire_snapshots {table}",
        lambda: spark.sql(
            f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
            f"older_than => TIMESTAMP '{cutoff}', retain_last => {retain_last})"
        ).collect(),
    )
    data_after, deletes_after, bytes_after = _files(spark, full)
    return TableMaintenance(
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
    )


def lake_tables(spark: SparkSession, catalog: str, namespaces: Sequence[str]) -> list[str]:
    """Every table in `namespaces` of `catalog`, as 'namespace.name'."""
    found = []
    for namespace in namespaces:
        if not spark.sql(f"SHOW NAMESPACES IN {catalog}").where(f"namespace = '{namespace}'").count():
            continue
        found += [f"{namespace}.{r['tableName']}" for r in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect()]
    return sorted(found)
