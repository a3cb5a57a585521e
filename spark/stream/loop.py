"""The one streaming loop every source runs: a source adapter reads micro-batches and cuts them into
units (`lakemv.core.batch.units`), the `UnitLoop` applies them through the stream's processor, and the
data products follow each unit.

* `Source`: what an adapter provides - its streaming DataFrame, its checkpoint, and its units per
  micro-batch (`lakemv.spark.stream.files.FileSource`, `lakemv.spark.stream.kafka.KafkaSource`);
* `run_source`: builds the processor (tables, views, local state) and the data products, and runs
  the stream until it ends (`once`: what is there now) or is stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import Location, as_location
from lakemv.catalog.streams import state_path, stream_id
from lakemv.catalog.tables import TableNames
from lakemv.catalog.writer import CommitTurns
from lakemv.core.batch.journal import Journal
from lakemv.core.batch.result import BatchResult, IngestResult, ViewResult
from lakemv.core.batch.units import Unit, UnitLoop
from lakemv.core.failures import classify
from lakemv.core.planner import ViewPlan
from lakemv.core.runtime import lifecycle
from lakemv.core.runtime.collector import paused
from lakemv.core.state.store import Store
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.engine.processor import EngineProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.sinks.products import Delivery, Products

log = logging.getLogger(__name__)


class Source(Protocol):
    """A streaming source of Debezium lines (landing files, Kafka topics)."""

    name: str  # the streaming query is lakemv_<name>_<catalog>
    checkpoint: Location

    def frame(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame of its records."""
        ...

    def start(self, once: bool) -> None:
        """The run starts (`once`: it drains what is there now)."""
        ...

    def more(self, batch_id: int) -> bool:
        """Whether more of the backlog the run drains follows micro-batch `batch_id` (its views can wait)."""
        ...

    def units(self, frame: DataFrame, batch_id: int) -> list[Unit]:
        """Micro-batch `batch_id` as units, in order ([]: nothing to apply)."""
        ...

    def behind(self, progress: StreamingQueryProgress) -> dict[str, int]:
        """Per source table, the records its stream holds beyond what the query has read, as of `progress`
        ({}: the source cannot tell)."""
        ...


@dataclass
class Hooks:
    """What the caller hears of a run: each unit's result, each view built at start, readiness, deliveries."""

    on_batch: Callable[[BatchResult], None] | None = None
    on_build: Callable[[ViewResult], None] | None = None
    on_ready: Callable[[], None] | None = None
    on_delivery: Callable[[Delivery], None] | None = None
    on_behind: Callable[[Mapping[str, int]], None] | None = None  # after each micro-batch: Source.behind


def new_processor(
    spark: SparkSession, settings: LakeSettings, sources: Mapping[str, SourceTable], views: Sequence[ViewPlan], checkpoint: Location | Path
) -> BatchProcessor | EngineProcessor:
    """The processor of one stream: its journal lives in its checkpoint, its local state on the driver's
    disk; with `engine_state`, the engine state's processor (lakemv.spark.engine.processor)."""
    if settings.engine_state:
        return EngineProcessor(spark, settings, sources, views, checkpoint)
    checkpoint = as_location(checkpoint)
    return BatchProcessor(
        spark,
        TableNames(settings.catalog_name),
        sources,
        views,
        journal=Journal(checkpoint / "lakemv-journal"),
        max_line_chars=settings.max_line_chars,
        store=Store(state_path(settings, checkpoint)) if settings.local_state else None,
        view_workers=settings.view_workers,
        direct=DirectWriter(spark, settings) if settings.direct_writes else None,
        turns=CommitTurns(settings.local_root, settings.catalog_name),  # compaction's rewrites take turns with the stream
        hold_backlog=settings.hold_backlog,
    )


def run_source(
    spark: SparkSession, settings: LakeSettings, sources: Mapping[str, SourceTable], views: Sequence[ViewPlan], source: Source,
    *, once: bool, trigger_seconds: float = 2.0, hooks: Hooks = Hooks(),
) -> IngestResult:  # fmt: skip
    """Ingest `source` and maintain `views`; with `once`, everything present now, then return. The
    views' data products (`lakemv.spark.sinks.products`) are delivered after every unit."""
    processor = new_processor(spark, settings, sources, views, source.checkpoint)
    for built in processor.built:
        if hooks.on_build is not None:
            hooks.on_build(built)
    products = Products.of(spark, settings, views, hooks.on_delivery)
    result = IngestResult()

    def after(outcome: BatchResult) -> None:
        result.batches.append(outcome)
        if hooks.on_batch is not None:
            hooks.on_batch(outcome)
        products.deliver()

    loop = UnitLoop(processor.process, lambda: stream_id(source.checkpoint), after)

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        lifecycle.check()
        with paused():  # (its lines read from Spark too: lakemv.core.runtime.collector)
            units = source.units(frame, batch_id)
            loop.run(batch_id, units, more=source.more(batch_id))

    def idle(final: bool = False) -> None:  # views whose freshness budget falls due while no batch runs (lakemv.core.batch.deferral)
        outcome = processor.flush(stream_id(source.checkpoint), release=final)
        if outcome is not None:
            after(outcome)

    def progressed(progress: StreamingQueryProgress) -> None:
        try:
            result.behind = source.behind(progress)
        except Exception:  # a report of how far behind the source is: never a reason to stop the stream
            log.warning("could not read how far behind its source the stream is", exc_info=True)
            return
        if hooks.on_behind is not None:
            hooks.on_behind(result.behind)

    source.start(once)

    name = f"lakemv_{source.name}_{settings.catalog_name}"
    run_stream(
        source.frame(spark), each_batch, source.checkpoint, name, processor, products,
        once=once, trigger_seconds=trigger_seconds, on_ready=hooks.on_ready, on_idle=idle, on_progress=progressed,
    )  # fmt: skip
    return result


def run_stream(
    stream: DataFrame,
    each_batch: Callable[[DataFrame, int], None],
    checkpoint: Location,
    name: str,
    processor: BatchProcessor | EngineProcessor,
    products: Products,
    *,
    once: bool,
    trigger_seconds: float,
    on_ready: Callable[[], None] | None,
    on_idle: Callable[..., None] = lambda final=False: None,
    on_progress: Callable[[StreamingQueryProgress], None] = lambda progress: None,
) -> None:
    """Run `each_batch` over the micro-batches of `stream` until it ends (`once`: what is there
    now) or is interrupted; the processor's local state is closed either way. The data products
    catch up first (what a crash left undelivered; a whole view only once the stream runs) and last.
    `on_idle` runs every `trigger_seconds` while the stream runs, and once after a `once` stream ends
    (`final=True`: views still holding a backlog's keys are due then) - only then for a `once` stream:
    its batches come back to back and judge due views themselves, and an idle turn taken before its
    first batch would maintain a view whose pending keys a rebuilt state lost whole, ahead of a backlog
    that then reaches it again. `on_progress` hears each micro-batch's progress (Spark's), the last one
    after the query ends too."""
    products.deliver(resync=False)
    writer = stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint.hadoop).queryName(name)
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    if on_ready is not None:
        on_ready()
    try:
        for attempt in range(3):
            try:
                _await(writer.start(), (lambda: None) if once else on_idle, trigger_seconds, on_progress)
                break
            except Exception as exc:
                if attempt == 2 or classify(exc).reason != "SPARK-55271":  # the Kafka source's restart bug (lakemv.core.failures)
                    raise
        if once:
            on_idle(final=True)
        products.deliver()
    finally:
        products.close()
        processor.close()


def _await(
    query: StreamingQuery, on_idle: Callable[[], None], every: float, on_progress: Callable[[StreamingQueryProgress], None]
) -> None:
    """Wait for the query to end, calling `on_idle` every `every` seconds and `on_progress` with each
    new progress of the query. A SIGINT/SIGTERM raises `lifecycle.Interrupted` here and cancels the
    running jobs (see `lakemv.core.runtime.lifecycle`): the batch cut short is replayed on the next run."""
    last, seen = time.monotonic(), None

    def progressed() -> None:
        nonlocal seen
        progress = query.lastProgress
        if progress is not None and progress.timestamp != seen:
            seen = progress.timestamp
            on_progress(progress)

    while query.isActive:
        lifecycle.check()
        query.awaitTermination(1.0)
        progressed()
        if query.isActive and time.monotonic() - last >= every:
            try:
                on_idle()
            except BaseException:  # as a failed batch does: the stream stops
                query.stop()
                raise
            last = time.monotonic()
    query.awaitTermination()  # raises if the query failed
    progressed()
