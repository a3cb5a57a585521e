"""The engine state as a stream's processor (`engine_state`): each unit of landing lines through
`EngineBatch`, its state opened again when the stream restarts and built from the Iceberg tables when
it is new, lost, or its views changed.

The state's folder (beside the stream's checkpoint) holds `engine.json`, which names the current
state's own folder, the views it was built for (their names, keys and SQL, hashed), its partitions and
the numbers its spaces were given; the state folder holds the store (`store/`) and the units' versions
(`units.json`). A state is built into a new folder and `engine.json` replaced only once it is built, so
a crash during a build leaves the old state (or none) in charge. When the views differ from those the
state was built for, the state is built again, whole (adding a view's indexes alone is not built yet).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import Location, as_location
from lakemv.catalog.tables import DELETED, TableNames
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.errors import ConfigError
from lakemv.core.planner import ViewPlan
from lakemv.core.state.rounds import Space
from lakemv.spark.bulk import Lines
from lakemv.spark.engine.batch import EngineBatch, UnitVersions
from lakemv.spark.engine.keyed import KeyedStore
from lakemv.spark.engine.publish import ViewTables
from lakemv.spark.engine.views import Recompute
from lakemv.spark.engine.walk import Walker

POINTER = "engine.json"


def engine_path(settings: LakeSettings, checkpoint: Location | Path) -> Path:
    """The stream's engine state: beside its checkpoint when that is local, else in the local folder
    under the checkpoint's name."""
    checkpoint = as_location(checkpoint)
    if checkpoint.local is not None and settings.local_dir is None:
        return checkpoint.local / "lakemv-engine"
    return settings.local_root / "engine" / checkpoint.name


def views_hash(plans: Sequence[ViewPlan]) -> str:
    """What a state was built for: every view's name, key and SQL."""
    text = json.dumps(sorted((p.name, list(p.definition.key), p.definition.sql) for p in plans))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_engine(
    spark: SparkSession,
    names: TableNames,
    sources: Mapping[str, SourceTable],
    plans: Sequence[ViewPlan],
    folder: Path,
    partitions: int,
    max_line_chars: int | None = None,
) -> tuple[EngineBatch, bool]:
    """The engine of `plans`: its state at `folder` opened again, or built from the mirrors (then
    `True`: every view's table was made anew)."""
    pointer = folder / POINTER
    record = json.loads(pointer.read_text()) if pointer.exists() else None
    if record is not None and record["views"] == views_hash(plans) and (folder / record["state"] / "store").exists():
        known = {Space.model_validate(space): number for space, number in record["spaces"]}
        state = folder / record["state"]
        walker = Walker.of(KeyedStore(spark, str(state / "store"), record["partitions"]), plans, sources, known)
        recompute = Recompute(walker)
        tables = ViewTables(recompute, {name: names.view(name) for name in recompute.plans})
        table_rows = {t: spark.table(names.mirror(t)).where(~F.col(DELETED)).count() for t in walker.tables()}
        view_rows = {name: spark.table(table).count() for name, table in tables.tables.items()}
        ways = recompute.ways(table_rows, view_rows)
        versions = UnitVersions(state / "units.json", 2)
        return EngineBatch(names, sources, recompute, tables, ways, sum(table_rows.values()), versions, max_line_chars, view_rows=view_rows), False
    state = f"state-{uuid.uuid4().hex[:12]}"
    engine = EngineBatch.build(spark, names, sources, plans, folder / state, partitions, max_line_chars=max_line_chars)
    spaces = [[space.model_dump(mode="json"), number] for space, number in engine.walker.numbers.items()]
    made = {"state": state, "views": views_hash(plans), "partitions": partitions, "spaces": spaces}
    partial = folder / f"{POINTER}.partial"
    partial.write_text(json.dumps(made))
    os.replace(partial, pointer)
    for old in folder.iterdir():  # states no pointer names any more
        if old.is_dir() and old.name.startswith("state-") and old.name != state:
            shutil.rmtree(old, ignore_errors=True)
    return engine, True


class EngineProcessor:
    """A stream's processor over the engine state (what `lakemv.spark.stream.loop` drives): each unit
    through `EngineBatch.process`. Sources carrying event streams or views over views are refused when
    it is made, with the reason (`ConfigError`)."""

    def __init__(
        self, spark: SparkSession, settings: LakeSettings, sources: Mapping[str, SourceTable], views: Sequence[ViewPlan], checkpoint: Location | Path
    ):
        refused = [p.name for p in views if any(t not in sources or sources[t].is_events for t in p.tables)]
        if refused:
            raise ConfigError(
                f"the engine state (LAKEMV_ENGINE_STATE) does not carry views over event sources or other views yet: {', '.join(sorted(refused))}",
                "LAKEMV_ENGINE_STATE",
            )
        if not views:
            raise ConfigError("the engine state (LAKEMV_ENGINE_STATE) keeps views: there are none", "LAKEMV_ENGINE_STATE")
        self.spark = spark
        names = TableNames(settings.catalog_name)
        folder = engine_path(settings, checkpoint)
        folder.mkdir(parents=True, exist_ok=True)
        self.engine, made = open_engine(spark, names, sources, views, folder, settings.shuffle_partitions, settings.max_line_chars)
        rows = self.engine.view_rows if made else {}
        self.built = [ViewResult(name, None, rows[name], plan="whole", reason="the engine state was built") for name in sorted(rows)]

    def process(
        self,
        ref: BatchRef,
        lines: list[tuple[str, str]] | Lines,
        file_skips: Mapping[str, int] | None = None,
        *,
        last: bool = True,
        more: bool = False,
    ) -> BatchResult:
        """One unit (`last` and `more` are the driver-local path's: the engine holds no view back)."""
        if not isinstance(lines, Lines):
            raise TypeError("the engine state takes a unit's lines in Spark (Lines): its source must not collect them")
        result = self.engine.process(ref, lines)
        if file_skips:
            reasons = dict(result.skip_reasons)
            for reason, count in file_skips.items():
                reasons[reason] = reasons.get(reason, 0) + count
            result = replace(result, skipped=result.skipped + sum(file_skips.values()), skip_reasons=reasons)
        return result

    def flush(self, stream: str, release: bool = False) -> BatchResult | None:
        """Between batches: nothing waits in the engine state."""
        return None

    def close(self) -> None:
        """Nothing is held open between units."""
