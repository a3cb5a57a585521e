"""Streaming ingest: Spark Structured Streaming over `<landing>/<table>/*` with foreachBatch."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from catalog.declarations import SourceTable
from catalog.errors import ConfigError
from catalog.settings import LakeSettings
from catalog.tables import TableNames
from spark.batch import BatchProcessor, BatchResult
from spark.maintain import ViewResult
from spark.planner import ViewPlan


@dataclass
class IngestResult:
    """Totals over the batches one ingest run processed."""

    batches: list[BatchResult] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(b.events for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def seconds(self) -> float:
        return sum(b.seconds for b in self.batches)


def checkpoint_dir(settings: LakeSettings, landing: Path) -> Path:
    """One checkpoint per (catalog, landing folder), kept under the warehouse."""
    digest = hashlib.sha1(f"{settings.catalog_name}:{landing.resolve()}".encode()).hexdigest()[:12]
    return settings.checkpoint_root / f"ingest-{digest}"


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
) -> IngestResult:
    """Ingest landing files and maintain `views`; with `once`, everything present now, then return."""
    if not landing.is_dir():
        raise ConfigError("landing directory does not exist", str(landing))
    processor = BatchProcessor(spark, TableNames(settings.catalog_name), sources, views)
    for built in processor.built:
        if on_build is not None:
            on_build(built)
    result = IngestResult()

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        outcome = processor.process_dataframe(frame, batch_id)
        result.batches.append(outcome)
        if on_batch is not None:
            on_batch(outcome)

    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    stream = reader.load(str(landing.resolve() / "*" / "*")).selectExpr("value", "_metadata.file_path AS file")
    writer = (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint_dir(settings, landing)))
        .queryName(f"lakemv_ingest_{settings.catalog_name}")
    )
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return result
