"""The `backfill` flow: rebuild a view by write-audit-publish on an Iceberg branch (`lakemv backfill VIEW`)."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow

from lakemv.core.runtime import lifecycle
from lakemv.flows.context import Lake
from lakemv.flows.progress import report


@flow(name="backfill", validate_parameters=True)
def backfill(view: str, dry_run: bool = False, warehouse: str | None = None) -> dict:
    """Recompute every row of `view` on a branch, audit it with DuckDB, publish by fast-forward.

    Ingest keeps running: the view's maintenance is paused meanwhile and catches up afterwards, so
    no change is lost. With `dry_run`, logs the plan and the estimated row count and writes nothing.
    """
    from lakemv.spark.session import use_catalog
    from lakemv.spark.views.backfill import STEPS, Backfill

    lifecycle.install()  # in a deployment's flow-run process too: SIGINT/SIGTERM stop it and its JVM
    lake = Lake.at(warehouse)
    plan = lake.plan(view)
    with report.status("starting Spark..."):
        spark = lake.spark().newSession()  # own SQL conf: its commits carry the backfill's tag only
        use_catalog(spark, lake.settings)
    lake.checked_plans(spark)
    job = Backfill(spark, lake.settings, lake.sources, plan)
    if dry_run:
        with report.status(f"planning the backfill of {view}..."):
            planned = job.dry_run()
        for line in planned.lines():
            report.info(line)
        return {"view": view, "dry_run": True, "table_rows": planned.table_rows, "estimated_rows": planned.estimated_rows}
    with report.steps(len(STEPS), f"backfilling {view}") as steps:
        result = job.run(steps.advance)
    report.info(f"backfilled {result.describe()}")
    return {k: v for k, v in asdict(result).items()}
