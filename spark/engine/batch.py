"""One unit of landing lines through the engine state, exactly once: parsed set-wise, MERGEd into the
mirrors, written into the state, the views it reaches recomputed, diffed and published, and the
ledger's row committed last - the unit's one visibility point.

The steps (`EngineBatch.process`):

1. parse: Spark parses the lines by each source's envelope SQL (`lakemv.core.cdc.envelopesql`, the
   rules of `parse_envelope`) and keeps the latest change per primary key; the few lines the SQL cannot
   vouch for are parsed by `parse_line` in the driver, so their dead letters carry the same reasons;
2. the dead letters appended, the mirrors MERGEd (guarded by source position: a replay's MERGE is a
   no-op), every snapshot tagged with the unit's write id;
3. the state: the changed rows written by key and index, the keys they reach, the rows those read,
   every reached view recomputed by its kept plan and diffed against its digests - or, for a backlog,
   every view recomputed whole over the mirrors (`Ways.batch`);
4. the changed view rows published (a `RowDelta` a view, stamped with the unit's write id), then the
   ledger's row.

The state's versions are lakemv's sequence of units (`UnitVersions`, a small file beside the state): a
unit starts from the version the unit before it ended at, and a replayed unit starts from the same one,
so it rewrites the same versions. A replay first takes back what its first attempt published to the
views' tables and the ledger does not hold (each such table rolled back to the snapshot before it):
readers pinned to the ledger's batch never saw it, and the state it is redone from is the one before it.

Not yet carried here (each a clear `EngineUnsupported`, never a dropped change): event sources, Debezium's
placeholders for unavailable values, incremental snapshots' reads, TRUNCATE, and new fields of a source.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import BATCH_ID, DELETED, INGESTED_AT, POSITION, TableNames, live_rows_sql, mirror_arrow_schema
from lakemv.core.batch.choice import Ways
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.plan import ledger_entry, now_micros
from lakemv.core.batch.records import dead_letters_to_arrow
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.planner import ViewPlan
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.quote import spark_string
from lakemv.spark.bulk import Lines
from lakemv.spark.engine.parse import EngineUnsupported, Parsed, parse
from lakemv.spark.commits import WriteUnit, append_once, committed, tagged
from lakemv.spark.engine.publish import ViewTables
from lakemv.spark.engine.views import Recompute
from lakemv.spark.mirror import merge_sql
from lakemv.spark.parallel import concurrently

STAMP = "lakemv.batch"  # the snapshot summary's key a view's commit is stamped with (ViewFiles.BATCH)


@dataclass
class Begun:
    """Where a unit's state versions start, and whether it is a replay."""

    base: int
    replay: bool
    undo: str | None = None  # a unit whose published views the ledger may not hold: taken back first


class UnitVersions:
    """The state's versions each unit writes, kept in a small JSON file beside the state: the last unit
    begun (its write id, the version it started from, and the version it ended at once its state writes
    are done). Written by replacing the file, so a crash leaves the old or the new record."""

    def __init__(self, path: Path, initial: int):
        self.path, self.initial = path, initial

    def _read(self) -> dict | None:
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def _write(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(record))
        os.replace(partial, self.path)

    def current(self) -> int:
        """The version the state is at after the last unit that ended."""
        record = self._read()
        if record is None:
            return self.initial
        return record["end"] if record["end"] is not None else record["base"]

    def begin(self, write_id: str) -> Begun:
        """The unit `write_id` starts: from where its earlier attempt started, else from where the last
        unit ended (a unit that never ended is redone from its own start: its writes are taken back)."""
        record = self._read()
        if record is not None and record["write_id"] == write_id:
            return Begun(record["base"], True, write_id)
        if record is None:
            begun = Begun(self.initial, False)
        elif record["end"] is None:
            begun = Begun(record["base"], False, record["write_id"])
        else:
            begun = Begun(record["end"], False)
        self._write({"write_id": write_id, "base": begun.base, "end": None})
        return begun

    def end(self, write_id: str, version: int) -> None:
        """The unit's state writes are done, at `version` (before its ledger row: a replay redoes them)."""
        record = self._read()
        assert record is not None and record["write_id"] == write_id, "a unit ends only after it began"
        self._write({**record, "end": version})


@dataclass
class Details:
    """What the last unit did beyond its `BatchResult`: the way it took and its counts (the bench reads them)."""

    details: dict = field(default_factory=dict)


class EngineBatch:
    """Units of landing lines applied through the engine state (see the module docstring).

    Made over a built engine: the state `walker` writes (its rows and indexes), the views' kept plans
    (`recompute`), their tables with their digests and places seeded (`tables`), the ways chosen per
    batch and view (`ways`), `entries` the state holds (about), and `versions` (the state's version
    after the seeding, kept beside the state from then on); `view_rows`: each view's rows then."""

    def __init__(
        self,
        names: TableNames,
        sources: Mapping[str, SourceTable],
        recompute: Recompute,
        tables: ViewTables,
        ways: Ways,
        entries: int,
        versions: UnitVersions,
        max_line_chars: int | None = None,
        way: str = "auto",
        view_rows: Mapping[str, int] | None = None,
    ):
        self.names, self.sources = names, dict(sources)
        self.recompute, self.tables, self.ways, self.entries, self.versions = recompute, tables, ways, entries, versions
        self.walker = recompute.walker
        self.spark: SparkSession = recompute.spark
        self.max_line_chars = max_line_chars
        self.way = way  # "auto": each batch's way chosen by its changed rows; "whole" or "incremental": pinned
        self.walked = {s.name for s in self.walker.walks.spaces if s.kind == "rows"}  # the tables the state keeps
        self.view_rows = dict(view_rows or {})  # each view's rows when the engine was made (built or opened)
        self.fresh = True  # no unit processed yet: the first may be a replay the state kept no record of
        self.last = Details()

    @classmethod
    def build(
        cls,
        spark: SparkSession,
        names: TableNames,
        sources: Mapping[str, SourceTable],
        plans: Sequence[ViewPlan],
        location: Path,
        partitions: int,
        tables: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> EngineBatch:
        """An engine built from the mirrors as they are (made when missing): the state written at `location`
        (a folder not used before) by one sorted load of their live rows, every view's table (`tables`:
        view -> table, by default its name in the views' namespace) made by Spark's full recompute over
        them, its digests and places seeded from it."""
        from lakemv.core.sql.viewsql import recompute_sql
        from lakemv.spark.engine.keyed import KeyedStore
        from lakemv.spark.engine.walk import Walker
        from lakemv.spark.mirror import ensure_mirror, ensure_namespaces, ensure_view_namespace
        from lakemv.spark.tables import ensure_dead_letters, ensure_ledger

        if location.exists() and any(location.iterdir()):
            raise EngineUnsupported(f"the engine state is built into a new folder; {location} holds files already")
        ensure_namespaces(spark, names)
        ensure_view_namespace(spark, names)
        ensure_ledger(spark, names)
        ensure_dead_letters(spark, names)
        for source in sources.values():
            if not source.is_events:
                ensure_mirror(spark, names, source)
        walker = Walker.of(KeyedStore(spark, str(location / "store"), partitions), plans, sources)
        recompute = Recompute(walker)
        live = {
            t: spark.table(names.mirror(t)).where(~F.col(DELETED)).select(*source.column_names, POSITION).persist()
            for t, source in sources.items()
            if t in walker.tables() and not source.is_events
        }
        try:
            table_rows = {t: frame.count() for t, frame in live.items()}
            entries = walker.load(live, 0)
        finally:
            for frame in live.values():
                frame.unpersist()
        view_tables = ViewTables(recompute, tables or {name: names.view(name) for name in recompute.plans})
        mirrors = live_views(spark, names, sources)
        view_tables.create({name: spark.sql(recompute_sql(plan, mirrors)) for name, plan in recompute.plans.items()})
        view_rows = view_tables.seed(1)
        view_rows = {name: view_rows.get(name, 0) for name in recompute.plans}
        ways = recompute.ways(table_rows, view_rows)
        return cls(names, sources, recompute, view_tables, ways, entries, UnitVersions(location / "units.json", 2), view_rows=view_rows, **kwargs)  # type: ignore[arg-type]

    # ---- replays --------------------------------------------------------------------------------
    def _take_back(self, write_id: str) -> list[str]:
        """Every view table whose current snapshot `write_id` published, rolled back to the one before it
        (the ledger does not hold the unit); the views taken back."""
        catalog = self.names.catalog
        undone = []
        for name, table in sorted(self.tables.tables.items()):
            row = self.spark.sql(
                f"SELECT snapshot_id, parent_id, summary[{spark_string(STAMP)}] AS stamp FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
            ).first()
            if row is not None and row["stamp"] == write_id and row["parent_id"] is not None:
                self.spark.sql(f"CALL {catalog}.system.rollback_to_snapshot({spark_string(table.split('.', 1)[1])}, {int(row['parent_id'])})")
                undone.append(name)
        if undone:
            self.tables.reload()
        return undone

    # ---- a unit ---------------------------------------------------------------------------------
    def process(self, ref: BatchRef, lines: Lines, step: Callable[[str], AbstractContextManager] | None = None) -> BatchResult:
        """Apply one unit of lines, exactly once however often it is replayed. `step(name)` wraps each
        step (a timer, a job description); by default each step's seconds go into the result's `steps`."""
        started, started_at = time.perf_counter(), now_micros()
        seconds: dict[str, float] = {}
        timed = step or (lambda name: _lap(seconds, name))
        details: dict = {}
        self.last = Details(details)
        begun = self.versions.begin(ref.write_id)
        # the first unit of an engine just made may replay one whose record went with a lost state
        replay, self.fresh = begun.replay or self.fresh, False
        unit = WriteUnit(ref.write_id, replay=replay, batch_id=ref.batch)
        if replay and committed(self.spark, self.names.ledger, ref.write_id):  # it ended: the next unit starts where it did
            self.versions.end(ref.write_id, self.versions.current())
            crash_point("batch_end", ref.batch)
            return BatchResult(ref.batch, 0, 0, chunk=ref.chunk, replayed=True, already_committed=True, seconds=time.perf_counter() - started)
        if begun.undo is not None and not committed(self.spark, self.names.ledger, begun.undo):
            details["taken_back"] = self._take_back(begun.undo)
        walker = self.walker
        relation = f"_lmv_engine_{ref.batch}_{ref.chunk}"
        try:
            with tagged(self.spark, ref.write_id):
                with timed("parse"):
                    parsed = parse(lines, self.sources, ref.batch, started_at, self.max_line_chars, walker.keep, relation, self.spark)
                    changed = {t: e.changes for t, e in parsed.tables.items()}
                    details["changed_rows"] = changed
                crash_point("parsed", ref.batch)
                letters = parsed.result.dead_letters
                if letters:
                    rows = dead_letters_to_arrow(letters, ref.batch, started_at)
                    append_once(
                        self.spark, self.names.dead_letters, unit, lambda: self.spark.createDataFrame(rows).writeTo(self.names.dead_letters).append()
                    )
                    crash_point("dead_letters", ref.batch)
                with timed("mirrors"):
                    self._merge(parsed.changes, ref.batch, started_at)
                crash_point("mirrors", ref.batch)
                views, version = self._views(ref, parsed, begun.base, timed, details)
                self.versions.end(ref.write_id, version)
                crash_point("state:end", ref.batch)
                result = BatchResult(
                    batch_id=ref.batch,
                    lines=parsed.clean + parsed.fallback,
                    events=parsed.clean + parsed.result.events,
                    merged=changed,
                    dead_letters=len(letters),
                    letters=Counter(letter.table or "" for letter in letters),
                    skipped=sum(parsed.result.skipped.values()),
                    skip_reasons=dict(parsed.result.skipped),
                    views=views,
                    chunk=ref.chunk,
                    replayed=begun.replay,
                    set_wise=True,
                )
                with timed("ledger"):
                    row = ledger_entry(ref, result, {}, unit.retries.count, started_at, now_micros(), parsed.tables).to_arrow()
                    append_once(self.spark, self.names.ledger, unit, lambda: self.spark.createDataFrame(row).writeTo(self.names.ledger).append())
                    crash_point("ledger", ref.batch)
        finally:
            walker.release()
            for table in self.sources:  # after the release: nothing cached reads them any more
                lines.frame.sparkSession.catalog.dropTempView(f"{relation}_{table}")
        self.entries += sum(changed.values())
        crash_point("batch_end", ref.batch)
        return BatchResult(**{**result.__dict__, "seconds": time.perf_counter() - started, "steps": {k: round(v, 3) for k, v in seconds.items()}})

    def _merge(self, changes: Mapping[str, DataFrame], batch_id: int, ingested_at: int) -> None:
        """Each table's changes MERGEd into its mirror (the tables side by side, a thread each)."""
        spark = self.spark

        def one(table: str) -> None:
            source = self.sources[table]
            stamped = {INGESTED_AT: F.timestamp_micros(F.lit(ingested_at)), BATCH_ID: F.lit(batch_id).cast("bigint")}
            columns = [stamped.get(f.name, F.col(f.name)).alias(f.name) for f in mirror_arrow_schema(source)]
            relation = f"_lmv_engine_changes_{table}"
            changes[table].select(*columns).createOrReplaceTempView(relation)
            try:
                spark.sql(merge_sql(self.names.mirror(table), relation, source))
            finally:
                spark.catalog.dropTempView(relation)

        concurrently(spark, one, sorted(changes))

    def _views(self, ref: BatchRef, parsed: Parsed, version: int, timed: Callable, details: dict) -> tuple[dict[str, ViewResult], int]:
        """The state and the views after the unit's changes; each view's result and the state's version."""
        walker, recompute = self.walker, self.recompute
        changes = {t: frame for t, frame in parsed.changes.items() if t in self.walked}
        changed = {t: parsed.tables[t].changes for t in changes}
        if not changes:
            return {}, version
        way = self.ways.batch(changed, self.entries)
        whole_batch = way.plan == "whole" if self.way == "auto" else self.way == "whole"
        details["way"] = way.reason
        with timed("apply"):
            images, version = walker.apply(changes, version)
        crash_point("state:rows", ref.batch)
        reached: dict[str, int] = {}
        if whole_batch:
            names = sorted(self.ways.ahead(changed))
            details["whole"] = names
            with timed("recompute"):
                rows = recompute.whole(live_views(self.spark, self.names, self.sources), names)
            with timed("diff"):
                diffed = walker.keep(recompute.diff_whole(rows, names, version))
                details["changed"] = diffed.count()
            crash_point("state:diff", ref.batch)
            publish_version = version
        else:
            with timed("reach"):
                keys = walker.reach_packed(images, version)
                reached = recompute.counts(keys) if keys is not None else {}
                details["keys"] = reached
            if keys is None:
                return {}, version
            whole = sorted(name for name, choice in self.ways.choose(reached).items() if choice.plan == "whole")
            details["whole"] = whole
            with timed("gather"):
                gathered = walker.keep(walker.gather_grouped(recompute.gathering(keys, whole), version))
                found = recompute.counts(gathered)
                self.ways.observe(reached, found)
                details["gathered"] = found
            with timed("recompute"):
                rows = recompute.run(gathered, keys, whole, live_views(self.spark, self.names, self.sources) if whole else None)
            with timed("diff"):
                diffed = walker.keep(recompute.diff(rows, keys, version))
                details["changed"] = diffed.count()
            crash_point("state:diff", ref.batch)
            publish_version = version + 1  # the incremental diff wrote the digests
        with timed("publish"):
            prefix = f"lmv-{ref.batch:012d}-{ref.chunk}-{uuid.uuid4().hex[:8]}"
            published = self.tables.publish(diffed, publish_version, ref.write_id, prefix, lambda: crash_point("views", ref.batch))
            details["published"] = {
                "written": sum(published.written.values()),
                "removed": sum(published.removed.values()),
                "commits": len(published.snapshots),
            }
        plan = "whole" if whole_batch else "incremental"
        views = {
            name: ViewResult(name, reached.get(name), published.written.get(name, 0), published.removed.get(name, 0), plan=plan, reason=way.reason)
            for name in sorted(set(published.written) | set(published.removed) | set(reached))
        }
        return views, published.version


def live_views(spark: SparkSession, names: TableNames, sources: Mapping[str, SourceTable], prefix: str = "_lmv_live_") -> dict[str, str]:
    """Temp views of every mirror's live rows, named `prefix` and the table (table -> name): what a view
    recomputed whole reads."""
    for table, source in sources.items():
        if not source.is_events:
            spark.sql(live_rows_sql(names, source)).createOrReplaceTempView(f"{prefix}{table}")
    return {t: f"{prefix}{t}" for t, s in sources.items() if not s.is_events}


@contextmanager
def _lap(seconds: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
