"""The deployments `lakemv serve` starts, declared in code: what runs when.

* `lakemv-ingest` - every `ingest_every` seconds, ingest what has landed (availableNow) and
  maintain the views; with `continuous`, one long-running stream instead, which the schedule
  restarts should it stop (one run at a time: a new run is cancelled while one is active);
* `lakemv-compact` - Iceberg maintenance in the lookup-aware layout, every `compact_every` seconds;
* `lakemv-verify` - DuckDB re-derives every view and diffs it, every `verify_every` seconds;
* `lakemv-backfill` - on demand: `prefect deployment run backfill/lakemv-backfill -p view=user_profile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import EntrypointType, RunnerDeployment

from lakemv.flows.backfill import backfill
from lakemv.flows.compact import compact
from lakemv.flows.ingest import ingest
from lakemv.flows.verify import verify

ONE_AT_A_TIME = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)
# Deployments an earlier lakemv served under names it no longer uses: on a long-lived server their
# schedules would keep creating runs that no one serves.
RETIRED = ("maintain/lakemv-maintain",)  # now ingest/lakemv-ingest


@dataclass(frozen=True)
class Schedules:
    """When each deployment runs (seconds)."""

    ingest_every: float = 60.0
    continuous: bool = False
    trigger_seconds: float = 2.0
    compact_every: float = 3600.0
    verify_every: float = 3600.0
    retention_hours: float | None = None  # snapshot expiry of the compact runs (None: the flow's default)


def deployments(landing: Path | None, warehouse: str, schedules: Schedules, kafka: str | None = None) -> list[RunnerDeployment]:
    """The four deployments, parameterised for one warehouse and one source: a landing folder or Kafka brokers."""
    lake = {"warehouse": str(warehouse)}
    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["lakemv"]}
    return [
        ingest.to_deployment(
            "lakemv-ingest",
            interval=timedelta(seconds=schedules.ingest_every),
            parameters={
                **({"landing": str(landing)} if landing is not None else {"kafka": kafka}),
                "once": not schedules.continuous,
                "trigger_seconds": schedules.trigger_seconds,
                **lake,
            },
            concurrency_limit=ONE_AT_A_TIME,  # one stream per checkpoint
            description="Ingest Debezium changes (landed files or Kafka topics) into the mirrors and keep every view fresh.",
            **common,
        ),
        compact.to_deployment(
            "lakemv-compact",
            interval=timedelta(seconds=schedules.compact_every),
            parameters={**lake, **({"retention_hours": schedules.retention_hours} if schedules.retention_hours is not None else {})},
            concurrency_limit=ONE_AT_A_TIME,
            description="Compact, sort by lookup columns, expire snapshots, remove orphans, purge old tombstones.",
            **common,
        ),
        verify.to_deployment(
            "lakemv-verify",
            interval=timedelta(seconds=schedules.verify_every),
            parameters=lake,
            concurrency_limit=ONE_AT_A_TIME,
            description="DuckDB recomputes every view from the mirrors and diffs it with the view table.",
            **common,
        ),
        backfill.to_deployment(
            "lakemv-backfill",
            parameters=lake,
            description="Rebuild a view by write-audit-publish on an Iceberg branch (parameter: view).",
            **common,
        ),
    ]


def retire(names: tuple[str, ...] = RETIRED) -> list[str]:
    """Delete the retired deployments the current Prefect API holds; returns the names deleted."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deleted = []
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                client.delete_deployment(client.read_deployment_by_name(name).id)
            except ObjectNotFound:
                continue
            deleted.append(name)
    return deleted


ABANDONED = ("RUNNING", "PENDING", "CANCELLING")  # states a run leaves only while a process serves it


def abandoned_runs_crashed() -> list[str]:
    """Mark crashed the runs of lakemv's deployments that a process was serving when it stopped (a
    serve killed or interrupted mid-run); returns their names.

    Only for a server lakemv started itself, before it serves anything: every such run's process is
    gone. Left as they were, a run stuck `Running` would hold its deployment's one concurrency slot,
    and every later scheduled run would be cancelled ("Deployment concurrency limit reached").
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType, FlowRunFilterTags
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.states import Crashed

    found = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(s) for s in ABANDONED])),
        tags=FlowRunFilterTags(all_=["lakemv"]),
    )
    crashed = []
    with get_client(sync_client=True) as client:
        # (limit and sort given: Prefect 3.8's sync client sends nulls the API refuses otherwise)
        for run in client.read_flow_runs(flow_run_filter=found, limit=200, sort=FlowRunSort.START_TIME_DESC):
            client.set_flow_run_state(run.id, Crashed(message="the lakemv serve that ran it stopped before the run ended"), force=True)
            crashed.append(run.name)
    return crashed
