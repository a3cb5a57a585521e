"""The `backfill` flow: rebuild a view by write-audit-publish on an Iceberg branch (`lakemv backfill VIEW`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace

from prefect import flow

from lakemv.core.planner.dag import downstream
from lakemv.core.runtime import lifecycle
from lakemv.flows.artifacts import Sink, backfill_artifacts, run_key
from lakemv.flows.context import Lake
from lakemv.flows.progress import report


@flow(name="backfill", validate_parameters=True)
def backfill(view: str, dry_run: bool = False, warehouse: str | None = None) -> dict:
    """Recompute every row of `view` on a branch, audit it with DuckDB, publish by fast-forward.

    Ingest keeps running: the view's maintenance is paused meanwhile and catches up afterwards, so
    no change is lost. The views that read it (through others too) are backfilled after it, in
    dependency order. With `dry_run`, logs the plan and the estimated row count and writes nothing.
    """
    from lakemv.spark.session import use_catalog
    from lakemv.spark.views.backfill import STEPS, Backfill

    lifecycle.install()  # in a deployment's flow-run process too: SIGINT/SIGTERM stop it and its JVM
    lake = Lake.at(warehouse)
    plan = lake.plan(view)
    with report.status("starting Spark..."):
        spark = lake.spark().newSession()  # own SQL conf: its commits carry the backfill's tag only
        use_catalog(spark, lake.settings)
    plans = lake.checked_plans(spark)
    readers = downstream(plans, view)  # rebuilt after it: their rows come from its rows
    job = Backfill(spark, lake.settings, lake.sources, plan)
    if dry_run:
        with report.status(f"planning the backfill of {view}..."):
            planned = replace(job.dry_run(), downstream=tuple(readers))
        for line in planned.lines():
            report.info(line)
        return {"view": view, "dry_run": True, "table_rows": planned.table_rows, "estimated_rows": planned.estimated_rows, "downstream": readers}
    done = {}
    for name in [view, *readers]:
        trail = StepTrail()
        with report.steps(len(STEPS), f"backfilling {name}") as steps:
            try:
                result = (job if name == view else Backfill(spark, lake.settings, lake.sources, plans[name])).run(trail.hearing(steps.advance))
            except BaseException as exc:
                trail.failed(exc)
                raise
            finally:
                trail.write(name)
        report.info(f"backfilled {result.describe()}")
        done[name] = result
    return {**asdict(done[view]), "downstream": {name: asdict(r) for name, r in done.items() if name != view}}


class StepTrail:
    """A backfill's steps as they finish, and how it ended, for its artifacts (lakemv.flows.artifacts)."""

    def __init__(self):
        self.started = time.perf_counter()
        self.steps: list[dict[str, object]] = []
        self.outcome = "published"

    def hearing(self, advance: Callable[[str], None]) -> Callable[[str, str], None]:
        """The step callback Backfill.run takes: the progress bar's `advance`, and a row here."""

        def step(name: str, outcome: str) -> None:
            advance(outcome)
            self.steps.append({"step": name, "outcome": outcome, "seconds": round(time.perf_counter() - self.started, 1)})

        return step

    def failed(self, exc: BaseException) -> None:
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        self.outcome = "failed" if not lifecycle.stopping() else "interrupted"
        self.steps.append({"step": "(stopped)", "outcome": f"{self.outcome}: {reason}", "seconds": round(time.perf_counter() - self.started, 1)})

    def write(self, view: str) -> None:
        Sink.this_run().write(backfill_artifacts(run_key("backfill"), view, self.steps, self.outcome), "backfill")
