"""The `verify` flow: DuckDB re-derives views from the mirrors and diffs them with their tables (`lakemv verify`)."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow

from lakemv.duck.verify import ViewMismatch, verify_plan
from lakemv.flows.artifacts import Sink, run_key, verify_artifacts
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
        with report.status(f"recomputing {name} with DuckDB..."):
            result = verify_plan(lake.settings, lake.sources, lake.plan(name), sample)
        if isinstance(result, str):
            report.info(f"{name}: not verified: {result}", style="yellow")
            results[name] = {"skipped": result}
            continue
        report.info(result.summary(), style=None if result.ok else "red")
        for difference in result.samples:
            report.info(f"  {difference.describe()}", style="red")
        results[name] = {k: v for k, v in asdict(result).items() if k != "samples"}
        failed = failed or (None if result.ok else result)
    Sink.this_run().write(verify_artifacts(run_key("verify"), results), "verify")
    if failed is not None:
        raise ViewMismatch(failed)
    return {"views": results}
