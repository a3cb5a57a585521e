"""The `verify` flow: DuckDB re-derives a view from the mirrors and diffs it with the table (`lakemv verify`)."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow

from catalog.verify import ViewMismatch, verify_view
from flows.lake import Lake
from flows.progress import report


@flow(name="verify", validate_parameters=True)
def verify(view: str, sample: int = 5, warehouse: str | None = None) -> dict:
    """Recompute `view` with DuckDB (its SQL transpiled by sqlglot, no Spark) and compare by key.

    Returns the counts; any difference fails the run (ViewMismatch), after logging sample keys and
    the columns that differ.
    """
    lake = Lake.at(warehouse)
    plan = lake.plan(view)
    with report.status(f"recomputing {view} with DuckDB..."):
        result = verify_view(lake.settings, lake.sources, view, plan.definition.sql, plan.key_names, sample=sample)
    report.info(result.summary(), style=None if result.ok else "red")
    for difference in result.samples:
        report.info(f"  {difference.describe()}", style="red")
    if not result.ok:
        raise ViewMismatch(result)
    return {k: v for k, v in asdict(result).items() if k != "samples"}
