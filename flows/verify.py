"""The `verify` flow: DuckDB re-derives views from the mirrors and diffs them with their tables (`lakemv verify`)."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow

from lakemv.core.planner.finality import checked_sql
from lakemv.duck.verify import ViewMismatch, consistent_cut, verify_view
from lakemv.flows.context import Lake
from lakemv.flows.progress import report


@flow(name="verify", validate_parameters=True)
def verify(view: str | None = None, sample: int = 5, warehouse: str | None = None) -> dict:
    """Recompute `view` (default: every view) with DuckDB, its SQL transpiled by sqlglot, no Spark;
    compare with the view table by key.

    Returns the counts per view; any difference fails the run (ViewMismatch), after logging sample
    keys and the columns that differ.
    """
    lake = Lake.at(warehouse)
    names = [view] if view else sorted(lake.plans)
    results, failed = {}, None
    for name in names:
        plan = lake.plan(name)
        cut = consistent_cut(lake.settings, name, plan.tables)
        if isinstance(cut, str):
            report.info(f"{name}: not verified: {cut}", style="yellow")
            results[name] = {"skipped": cut}
            continue
        table_snapshot, mirror_snapshots = cut
        with report.status(f"recomputing {name} with DuckDB..."):
            result = verify_view(
                lake.settings, lake.sources, name, checked_sql(plan.definition.sql, plan.finality, lake.sources), plan.key_names,
                table_snapshot=table_snapshot, mirror_snapshots=mirror_snapshots, sample=sample,
                compare=plan.compared,
            )  # fmt: skip
        report.info(result.summary(), style=None if result.ok else "red")
        for difference in result.samples:
            report.info(f"  {difference.describe()}", style="red")
        results[name] = {k: v for k, v in asdict(result).items() if k != "samples"}
        failed = failed or (None if result.ok else result)
    if failed is not None:
        raise ViewMismatch(failed)
    return {"views": results}
