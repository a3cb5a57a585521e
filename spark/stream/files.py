"""Landing files as a streaming source: Spark Structured Streaming over `<landing>/<table>/*`.

Each micro-batch is bounded (bytes or files per batch) and applied in units of at most
`max_events_per_batch` lines (`lakemv.core.batch.units.file_units`), each with its own journal entry
and write id, so memory stays bounded however large the backlog and a crash replays exactly. A
micro-batch of at least `LAKEMV_BULK_MIN_BYTES` is parsed set-wise by Spark, as one unit.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.streams import checkpoint_dir, planned_files, unseen_files
from lakemv.core.batch.result import BatchResult, IngestResult, ViewResult
from lakemv.core.batch.units import Unit, file_units
from lakemv.core.cdc.changeset import check_landing, local_path
from lakemv.core.planner import ViewPlan
from lakemv.spark.bulk import Lines
from lakemv.spark.sinks.products import Delivery
from lakemv.spark.stream.loop import Hooks, run_source


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


class FileSource:
    """The landing folder `landing`, listed recursively (file names as they are: no globbing)."""

    name = "ingest"

    def __init__(self, settings: LakeSettings, landing: Path, max_files_per_trigger: int | None = None):
        check_landing(landing)
        self.settings = settings
        self.landing = landing
        self.checkpoint = checkpoint_dir(settings, landing)
        self.max_files = max_files_per_trigger or settings.max_files_per_batch
        self._unseen: set[str] | None = None  # a once run's landing files no batch has taken yet

    def frame(self, spark: SparkSession) -> DataFrame:
        # Paths are literal: Spark globs a listed file's path again when it reads it (`a[x].json` read
        # `ax.json` in its place, twice), so the landing folder is listed recursively, globbing off.
        reader = spark.readStream.format("text").options(ignoreMissingFiles="true", recursiveFileLookup="true", __globPaths__="false")
        if self.max_files:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files))
        else:
            reader = reader.option("maxBytesPerTrigger", str(self.settings.max_bytes_per_batch))
        return reader.load(str(self.landing.resolve())).selectExpr("value", "_metadata.file_path AS file")

    def start(self, once: bool) -> None:
        """A run starts; `once`: it drains what the landing zone holds now (a backlog: `more` knows its end)."""
        self._unseen = unseen_files(self.landing, self.checkpoint) if once and self.settings.hold_backlog else None

    def more(self, batch_id: int) -> bool:
        """Whether files the run drains follow batch `batch_id`: landing files that were there at the
        start of a `once` run and no batch up to this one took (always False for a running stream)."""
        if self._unseen is None:
            return False
        self._unseen -= {local_path(uri) for uri in planned_files(self.checkpoint, batch_id)}
        return bool(self._unseen)

    def behind(self, progress: StreamingQueryProgress) -> dict[str, int]:
        """Landing files carry no count of what is still to come: nothing to say."""
        return {}

    def units(self, frame: DataFrame, batch_id: int) -> list[Unit]:
        planned = planned_files(self.checkpoint, batch_id)
        set_wise = self.settings.set_wise_bytes
        if self.settings.engine_state or (set_wise is not None and landing_bytes(planned) >= set_wise):  # a snapshot, a backlog, the engine's
            read = {row[0] for row in frame.select("file").distinct().collect()}
            return [Unit(Lines(frame, tuple(planned)), file_skips(planned, read))]
        table = frame.select(F.col("value").cast("binary").alias("value"), "file").toArrow()  # bytes: any line decodes
        files = table.column("file").to_pylist()
        return file_units(table.column("value").to_pylist(), files, self.settings.max_events_per_batch, file_skips(planned, set(files)))


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
    on_behind: Callable[[Mapping[str, int]], None] | None = None,
) -> IngestResult:
    """Ingest landing files and maintain `views`; with `once`, everything present now, then return.
    `on_ready` is called once the tables, views and local state are ready, before the stream starts."""
    source = FileSource(settings, landing, max_files_per_trigger)
    hooks = Hooks(on_batch, on_build, on_ready, on_delivery, on_behind)
    return run_source(spark, settings, sources, views, source, once=once, trigger_seconds=trigger_seconds, hooks=hooks)
