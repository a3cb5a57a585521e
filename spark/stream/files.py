"""Streaming ingest: Spark Structured Streaming over `<landing>/<table>/*` with foreachBatch.

Each micro-batch is bounded (bytes or files per batch) and applied in chunks of at most
`max_events_per_batch` lines, each chunk a unit of `BatchProcessor` with its own journal entry and
write id, so memory stays bounded however large the backlog and a crash replays exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import Location, as_location
from lakemv.catalog.tables import TableNames
from lakemv.catalog.writer import CommitTurns
from lakemv.core.batch.journal import BatchRef, Journal
from lakemv.core.batch.result import IngestResult, ViewResult
from lakemv.core.cdc.changeset import check_landing, decode_lines, local_path
from lakemv.core.planner import ViewPlan
from lakemv.core.runtime import lifecycle
from lakemv.core.state.store import Store
from lakemv.spark.batch.runner import BatchProcessor, BatchResult
from lakemv.spark.bulk import Lines
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.sinks.products import Delivery, Products


def checkpoint_dir(settings: LakeSettings, landing: Path) -> Location:
    """One checkpoint per (catalog, landing folder), kept under the warehouse."""
    digest = hashlib.sha1(f"{settings.catalog_name}:{landing.resolve()}".encode()).hexdigest()[:12]
    return settings.checkpoint_root / f"ingest-{digest}"


def state_path(settings: LakeSettings, checkpoint: Location | Path) -> Path:
    """The stream's local indexed state (lakemv.core.state), on the driver's disk, rebuilt from Iceberg if lost:
    beside its checkpoint when that is local, else in the local folder under the checkpoint's name (a
    checkpoint in an object store: the store is a SQLite file, read and written in place)."""
    checkpoint = as_location(checkpoint)
    if checkpoint.local is not None and settings.local_dir is None:
        return checkpoint.local / "lakemv-state" / "state.sqlite"
    return settings.local_root / "state" / checkpoint.name / "state.sqlite"


def stream_id(checkpoint: Location) -> str:
    """Spark's id of the streaming query, kept in the checkpoint (a new checkpoint, a new id)."""
    first = (checkpoint / "metadata").read_text().splitlines()[0]
    return str(json.loads(first)["id"])


def planned_files(checkpoint: Location, batch_id: int) -> list[str]:
    """The files Spark's file source assigned to `batch_id` (from its source log in the checkpoint)."""
    log = checkpoint / "sources" / "0"
    for path in (log / str(batch_id), log / f"{batch_id}.compact"):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        entries = [json.loads(line) for line in text.splitlines()[1:] if line.strip()]
        return [e["path"] for e in entries if e.get("batchId") == batch_id]
    return []


def landing_bytes(planned: Sequence[str]) -> int:
    """Bytes of a batch's landing files (those already gone count nothing)."""
    total = 0
    for uri in planned:
        try:
            total += os.path.getsize(local_path(uri))
        except OSError:
            continue
    return total


def file_skips(planned: Sequence[str], read: set[str]) -> Counter[str]:
    """Files of a batch that gave no line: empty, or removed between listing and reading."""
    skips: Counter[str] = Counter()
    seen = {local_path(uri) for uri in read}
    for uri in planned:
        path = local_path(uri)
        if path in seen:
            continue
        skips["empty file" if os.path.exists(path) else "file gone before it was read"] += 1
    return skips


def new_processor(
    spark: SparkSession, settings: LakeSettings, sources: Mapping[str, SourceTable], views: Sequence[ViewPlan], checkpoint: Location | Path
) -> BatchProcessor:
    """The processor of one stream: its journal lives in its checkpoint, its local state on the driver's disk."""
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
    )


def run_ingest(
    spark: SparkSession,
    settings: LakeSettings,
    sources: Mapping[str, SourceTable],
    landing: Path,
    *,
    once: bool,
    trigger_seconds: float = 2.0,
    max_files_per_trigger: int | None = None,
    on_batch: Callable[[BatchResult], None] | None = None,
    views: Sequence[ViewPlan] = (),
    on_build: Callable[[ViewResult], None] | None = None,
    on_ready: Callable[[], None] | None = None,
    on_delivery: Callable[[Delivery], None] | None = None,
) -> IngestResult:
    """Ingest landing files and maintain `views`; with `once`, everything present now, then return.
    `on_ready` is called once the tables, views and local state are ready, before the stream starts.
    The views' data products (`lakemv.spark.sinks.products`) are delivered after every unit; `on_delivery` hears of each."""
    check_landing(landing)
    checkpoint = checkpoint_dir(settings, landing)
    processor = new_processor(spark, settings, sources, views, checkpoint)
    for built in processor.built:
        if on_build is not None:
            on_build(built)
    products = Products.of(spark, settings, views, on_delivery)
    result = IngestResult()
    chunk_size = settings.max_events_per_batch
    identity: list[str] = []

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        lifecycle.check()
        if not identity:
            identity.append(stream_id(checkpoint))
        planned = planned_files(checkpoint, batch_id)
        set_wise = settings.set_wise_bytes
        if set_wise is not None and landing_bytes(planned) >= set_wise:  # a snapshot or a backlog: Spark parses it
            read = {row[0] for row in frame.select("file").distinct().collect()}
            outcome = processor.process(BatchRef(identity[0], batch_id, 0), Lines(frame), file_skips(planned, read))
            result.batches.append(outcome)
            if on_batch is not None:
                on_batch(outcome)
            products.deliver()
            return
        table = frame.select(F.col("value").cast("binary").alias("value"), "file").toArrow()  # bytes: any line decodes
        skips = file_skips(planned, set(table.column("file").to_pylist()))
        starts = range(0, max(table.num_rows, 1), chunk_size)
        for chunk, start in enumerate(starts):
            part = table.slice(start, chunk_size)
            lines = list(zip(decode_lines(part.column("value").to_pylist()), part.column("file").to_pylist(), strict=True))
            outcome = processor.process(BatchRef(identity[0], batch_id, chunk), lines, skips if chunk == 0 else None, last=chunk == len(starts) - 1)
            result.batches.append(outcome)
            if on_batch is not None:
                on_batch(outcome)
            products.deliver()

    # Paths are literal: Spark globs a listed file's path again when it reads it (`a[x].json` read
    # `ax.json` in its place, twice), so the landing folder is listed recursively, globbing off.
    reader = spark.readStream.format("text").options(ignoreMissingFiles="true", recursiveFileLookup="true", __globPaths__="false")
    max_files = max_files_per_trigger or settings.max_files_per_batch
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    else:
        reader = reader.option("maxBytesPerTrigger", str(settings.max_bytes_per_batch))
    stream = reader.load(str(landing.resolve())).selectExpr("value", "_metadata.file_path AS file")
    name = f"lakemv_ingest_{settings.catalog_name}"
    run_stream(stream, each_batch, checkpoint, name, processor, products, once=once, trigger_seconds=trigger_seconds, on_ready=on_ready)
    return result


def run_stream(
    stream: DataFrame,
    each_batch: Callable[[DataFrame, int], None],
    checkpoint: Location,
    name: str,
    processor: BatchProcessor,
    products: Products,
    *,
    once: bool,
    trigger_seconds: float,
    on_ready: Callable[[], None] | None,
) -> None:
    """Run `each_batch` over the micro-batches of `stream` until it ends (`once`: what is there
    now) or is interrupted; the processor's local state is closed either way. The data products
    catch up first (what a crash left undelivered; a whole view only once the stream runs) and last."""
    products.deliver(resync=False)
    writer = stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint.hadoop).queryName(name)
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    if on_ready is not None:
        on_ready()
    try:
        for attempt in range(3):
            try:
                _await(writer.start())
                break
            except Exception as exc:
                if attempt == 2 or not _kafka_metrics_bug(exc):
                    raise
        products.deliver()
    finally:
        products.close()
        if processor.store is not None:
            processor.store.close()


def _kafka_metrics_bug(exc: BaseException) -> bool:
    """Spark 4.1.1's Kafka source fails a restarted query right after it re-ran the batch a crash
    interrupted (SPARK-55271: `KafkaMicroBatchStream.metrics` reads offsets it never fetched). The
    batch itself and its commit are done by then; starting the query again goes on normally."""
    text = str(exc)
    return "KafkaMicroBatchStream" in text or ('scala.Option.get()" is null' in text and "IterableOps.map" in text)


def _await(query: StreamingQuery) -> None:
    """Wait for the query to end. A SIGINT/SIGTERM raises `lifecycle.Interrupted` here and cancels
    the running jobs (see `lakemv.core.runtime.lifecycle`): the batch cut short is replayed on the next run."""
    while query.isActive:
        lifecycle.check()
        query.awaitTermination(1.0)
    query.awaitTermination()  # raises if the query failed
