"""The `ingest` flow: land new changes into the mirrors and keep every view fresh (`lakemv ingest`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from prefect import flow

from lakemv.catalog.writer import writer_lock
from lakemv.core.cdc.changeset import check_landing
from lakemv.core.errors import ConfigError
from lakemv.core.runtime import lifecycle
from lakemv.flows.artifacts import Sink, ingest_artifacts, run_key
from lakemv.flows.context import Lake
from lakemv.flows.progress import report


def _batch_line(batch) -> None:  # noqa: ANN001 - lakemv.spark.batch.runner.BatchResult
    report.record("batch", batch.as_json(), batch.describe())
    for note in batch.notes:
        report.info(f"schema drift: {note}", style="red" if "error:" in note else "yellow")


def _delivery_line(delivery) -> None:  # noqa: ANN001 - lakemv.spark.sinks.products.Delivery
    if delivery.error:
        report.info(f"data product {delivery.sink}: not delivered ({delivery.error}); retried after the next batch", style="red")
    else:
        what = "the whole view (resync)" if delivery.resynced else f"{delivery.snapshots} feed snapshots"
        report.info(f"data product {delivery.sink}: {delivery.messages} changes from {what}, {delivery.seconds:.2f}s")


def _gate_line(gate) -> None:  # noqa: ANN001 - lakemv.core.cdc.transactions.GateReport
    if gate.held:
        report.info(f"holding {gate.held} changes of {gate.waiting} source transactions not yet complete")


@flow(name="ingest", log_prints=False, validate_parameters=True)
def ingest(
    landing: str | None = None,
    once: bool = True,
    trigger_seconds: float = 2.0,
    max_files_per_trigger: int | None = None,
    warehouse: str | None = None,
    kafka: str | None = None,
    log_format: Literal["text", "json"] | None = None,
) -> dict:
    """Ingest the landing folder's new Debezium files, or Debezium's Kafka topics (`kafka`: the
    brokers, default the setting LAKEMV_KAFKA_BOOTSTRAP), and maintain the views, exactly once.

    `once` processes what is there now and returns (the scheduled deployment); otherwise the stream
    runs until the flow run is cancelled or the process is interrupted. `log_format` "json" reports
    each batch as one JSON object per line (default: the setting LAKEMV_LOG_FORMAT).
    """
    lifecycle.install()  # in a deployment's flow-run process too: SIGINT/SIGTERM stop it and its JVM
    lake = Lake.at(warehouse)
    kafka = kafka or (None if landing else lake.settings.kafka_bootstrap)
    if (landing is None) == (kafka is None):
        raise ConfigError("ingest needs either a landing folder or Kafka brokers (LAKEMV_KAFKA_BOOTSTRAP), not both")
    if landing is not None:
        check_landing(Path(landing))
    else:
        from lakemv.catalog.brokers import reach_brokers

        reach_brokers(kafka, lake.settings.kafka_options)
    settings = lake.settings
    with report.lines(log_format or settings.log_format), writer_lock(settings.local_root, settings.catalog_name, settings.warehouse, lease=settings.lake, on_lost=_lease_lost):  # refused at once if held
        return _ingest(lake, landing, kafka, once, trigger_seconds, max_files_per_trigger)


def _lease_lost() -> None:
    """Another writer took the lake over (this one stalled past its lease): stop before the next unit."""
    report.info("error: another writer took this lake's writer lease over (this stream stalled for longer than its lease): stopping", style="red")
    lifecycle.STOP.set()


class RunReport:
    """An ingest run's artifacts (lakemv.flows.artifacts): written when the run ends, however it ends,
    and while a stream runs, after a batch once `every` seconds have passed since the last ones."""

    def __init__(self, lake: Lake, every: float = 60.0):
        self.lake = lake
        self.every = every
        self.sink = Sink.this_run()  # (in the flow's thread: batches end in Spark's callback thread)
        self.key = run_key("ingest")
        self.batches: list = []
        self.behind: Mapping[str, int] = {}
        self.written = time.monotonic()

    def batch(self, batch) -> None:  # noqa: ANN001 - lakemv.core.batch.result.BatchResult
        self.batches.append(batch)
        if time.monotonic() - self.written >= self.every:
            self.write()

    def progress(self, behind: Mapping[str, int]) -> None:
        self.behind = behind

    def write(self) -> None:
        from lakemv.core.batch.deferral import budget
        from lakemv.core.planner.dag import source_tables
        from lakemv.duck.freshness import freshness

        plans, window = self.lake.plans, 3600.0
        reads = {name: source_tables(plans, name) for name in plans}
        budgets = {name: (b / 1e6 if (b := budget(plan, self.lake.settings.local_state)) else None) for name, plan in plans.items()}
        end = time.time()
        try:
            fresh = freshness(self.lake.settings, reads, budgets, window)
        except Exception as exc:  # noqa: BLE001 - the report goes out without its lag columns
            report.info(f"could not read the views' freshness from the ledger: {type(exc).__name__}: {str(exc)[:200]}", style="yellow")
            fresh = {}
        found = ingest_artifacts(self.key, self.batches, self.behind, self.lake.sources, fresh, (end - window, end))
        self.sink.write(found, "ingest")
        self.written = time.monotonic()


def _ingest(lake: Lake, landing: str | None, kafka: str | None, once: bool, trigger_seconds: float, max_files_per_trigger: int | None) -> dict:
    from lakemv.spark.stream.files import run_ingest

    sources = lake.sources
    with report.status("starting Spark..."):
        spark = lake.spark()
    plans = list(lake.checked_plans(spark).values())
    artifacts = RunReport(lake)

    def each_batch(batch) -> None:  # noqa: ANN001 - lakemv.core.batch.result.BatchResult
        _batch_line(batch)
        artifacts.batch(batch)

    common = {
        "views": plans,
        "on_build": lambda built: report.info(f"built {built.describe()}"),
        "once": once,
        "trigger_seconds": trigger_seconds,
        "on_batch": each_batch,
        "on_delivery": _delivery_line,
        "on_behind": artifacts.progress,
    }
    with report.bound():  # batches are reported from Spark's callback thread
        try:
            if kafka is not None:
                from lakemv.spark.stream.kafka import run_kafka_ingest

                result = run_kafka_ingest(spark, lake.settings, sources, kafka, on_gate=_gate_line, **common)
            else:
                result = run_ingest(spark, lake.settings, sources, Path(landing), max_files_per_trigger=max_files_per_trigger, **common)
        finally:  # (a stream stopped by a signal too: that is how a running stream ends)
            artifacts.write()
    rate = result.events / result.seconds if result.seconds else 0.0
    conflicts = f"; {result.conflicts_retried} commit conflicts retried" if result.conflicts_retried else ""
    totals = {
        "events": result.events,
        "batches": len(result.batches),
        "dead_letters": result.dead_letters,
        "conflicts_retried": result.conflicts_retried,
        "seconds": round(result.seconds, 3),
    }
    report.record(
        "ingested", totals, f"ingested {result.events} events in {len(result.batches)} batches, {result.seconds:.1f}s "
        f"({rate:,.0f} events/s); {result.dead_letters} dead letters{conflicts}"
    )  # fmt: skip
    return totals
