"""The `compact` flow: Iceberg maintenance of every lakemv table, in the lookup-aware layout (`lakemv compact`)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from lakemv.catalog.tables import MIRROR_NAMESPACE, OPS_NAMESPACE, VIEW_NAMESPACE, check_tables
from lakemv.catalog.upkeep import DEFAULT_ORPHAN_AGE, DEFAULT_RETENTION, DEFAULT_TOMBSTONE_RETENTION, hours
from lakemv.catalog.writer import CommitTurns
from lakemv.flows.artifacts import Sink, compact_artifacts, run_key
from lakemv.flows.context import Lake
from lakemv.flows.progress import report
from lakemv.flows.retries import RETRIES, RETRY_DELAY_SECONDS, transient


def table_layouts(lake: Lake) -> dict[str, object]:
    """Per 'namespace.table', the sort order compaction writes it in (None: bin-packing only)."""
    from lakemv.core.planner.sortorder import sort_orders, view_sort_orders

    layouts: dict[str, object] = {f"{MIRROR_NAMESPACE}.{t}": o for t, o in sort_orders(lake.plans.values()).items()}
    layouts.update({f"{VIEW_NAMESPACE}.{v}": o for v, o in view_sort_orders(lake.plans).items()})
    return layouts


# A SparkSession argument: nothing to cache on. A table whose commits keep losing their races past
# compaction's own retries is compacted again, after a pause (lakemv.flows.retries).
@task(name="compact-table", cache_policy=NO_CACHE, retries=RETRIES, retry_delay_seconds=RETRY_DELAY_SECONDS, retry_condition_fn=transient)
def compact_one(spark, catalog: str, table: str, sort, retention: timedelta, pinned, orphan_age: timedelta, tombstones, turns):  # noqa: ANN001, ANN201
    from lakemv.spark.compaction import compact_table

    return compact_table(
        spark, catalog, table, sort=sort, retention=retention, pinned=pinned, orphan_age=orphan_age, tombstone_retention=tombstones,
        turn=turns.turn,
    )


@flow(name="compact", validate_parameters=True)
def compact(
    tables: list[str] | None = None,
    retention_hours: float = hours(DEFAULT_RETENTION),
    orphan_age_hours: float = hours(DEFAULT_ORPHAN_AGE),
    tombstone_retention_hours: float = hours(DEFAULT_TOMBSTONE_RETENTION),
    warehouse: str | None = None,
) -> dict:
    """Compact data and delete files, expire snapshots, remove orphan files, purge old tombstones.

    Mirrors are sorted by the columns views look them up by and views by their key. Safe while
    `ingest` commits: each table's rewrites take a turn between the stream's units
    (`lakemv.catalog.writer.CommitTurns`), lost commit races are retried, and a rewrite never changes rows.
    """
    from lakemv.spark.compaction import lake_tables, pinned_since
    from lakemv.spark.session import use_catalog

    lake = Lake.at(warehouse)
    with report.status("starting Spark..."):
        spark = lake.spark().newSession()  # own SQL conf: no batch's write-id tag on these commits
        use_catalog(spark, lake.settings)
    catalog = lake.settings.catalog_name
    known = lake_tables(spark, catalog, (MIRROR_NAMESPACE, VIEW_NAMESPACE, OPS_NAMESPACE))
    chosen = list(tables or known)
    check_tables(chosen, known)
    layouts = table_layouts(lake)
    retention, orphan_age = timedelta(hours=retention_hours), timedelta(hours=orphan_age_hours)
    tombstones = timedelta(hours=tombstone_retention_hours)
    pinned = pinned_since(lake.settings.checkpoint_root)  # snapshots a stream's replay may need
    results = []
    turns = CommitTurns(lake.settings.local_root, catalog)
    try:
        for table in chosen:
            with report.status(f"compacting {table}..."):
                result = compact_one(
                    spark,
                    catalog,
                    table,
                    layouts.get(table),
                    retention,
                    pinned,
                    orphan_age,
                    tombstones if table.startswith(f"{MIRROR_NAMESPACE}.") else None,
                    turns,
                )
            report.info(result.describe())
            results.append(result)
    finally:
        turns.close()
    totals = {
        key: sum(getattr(r, key) for r in results)
        for key in ("data_files_before", "data_files_after", "delete_files_before", "delete_files_after",
                    "bytes_before", "bytes_after", "orphan_files_removed", "tombstones_purged", "conflicts_retried")
    }  # fmt: skip
    report.info(
        f"compacted {len(results)} tables: files {totals['data_files_before'] + totals['delete_files_before']} -> "
        f"{totals['data_files_after'] + totals['delete_files_after']}, "
        f"{totals['bytes_before']:,} -> {totals['bytes_after']:,} bytes"
    )
    tables_done = [asdict(r) for r in results]
    Sink.this_run().write(compact_artifacts(run_key("compact"), tables_done), "compact")
    return {**totals, "tables": tables_done, "seconds": round(sum(r.seconds for r in results), 3)}
