"""View maintenance on Spark: create a view's tables, build it, and apply each batch's changed rows.

A backfill is the incremental path with every key: the same diff + MERGE + change-feed append, with
the key filter left out. Only rows whose content changed are written, so rebuilding an up-to-date
view writes nothing. This module holds the tables and the pause/resume steps; the writing itself is
`lakemv.spark.views.write`, the driver-side diff `lakemv.core.sql.diff`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import ChainMap
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import TABLE_PROPERTIES, TableNames, live_rows_sql
from lakemv.catalog.viewstate import STATE, ViewState
from lakemv.core.batch import choice as cost_choice
from lakemv.core.batch.choice import INCREMENTAL, WHOLE, Choice, Costs
from lakemv.core.batch.result import ViewResult
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.finality import finalizing_sql
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.viewsql import affected_key_queries, recompute_sql
from lakemv.spark.commits import WriteUnit, tagged
from lakemv.spark.materialise import materialised
from lakemv.spark.parallel import concurrently
from lakemv.spark.tables import create_empty
from lakemv.spark.views.feeds import Feeds
from lakemv.spark.views.state import changed_rows_sql, live_at_sql, mirror_snapshots, read_state, write_state
from lakemv.spark.views.viewdelta import ViewDelta
from lakemv.spark.views.write import ViewWriter, Writing

FINGERPRINT = "lakemv.view.fingerprint"
# A digest of what the table's columns were analysed from (`ViewMaintainer._analysed`): a process
# that finds it equal skips Spark's analysis of the view at start-up.
ANALYSED = "lakemv.view.analysed"


def _signature(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


@dataclass(frozen=True)
class Ensured:
    """What `ViewMaintainer.ensure_tables` found: the view's state, and whether its table holds this
    definition's rows (`prepare`; a paused view is left as it is)."""

    state: ViewState
    current: bool


class ViewMaintainer(ViewWriter):
    """Keeps one view table (and its change feed) equal to its SQL over the live mirrors."""

    def __init__(self, spark: SparkSession, names: TableNames, sources: Mapping[str, SourceTable], plan: ViewPlan, feeds: Feeds | None = None):
        self.spark = spark
        self.names = names
        self.sources = ChainMap(sources, {v.name: v for v in plan.inputs})  # (the views it reads as tables; a live view of sources: drift updates it)
        self.plan = plan
        self.table = names.view(plan.name)
        self.feeds = feeds if feeds is not None else Feeds(spark, names)  # shared by a processor's views
        self.feed = names.feeds  # where this view's feed rows go (a backfill: its branch of it)
        self.live = {t: live_rows_sql(names, self.sources[t]) for t in plan.tables}
        self.on_main = True  # writes the view's main branch, which a backfill may pause
        self._temp = f"_lmv_{plan.name}"
        self.direct = None  # a DirectWriter, when the batch writes this view's diffs by direct commits
        self.watermarks: dict[str, int | None] = {}  # set by the batch (lakemv.core.cdc.events); a backfill reads the tables'
        self.final_since: int | None = None  # the watermark this view's windows were last judged final by
        self.read_by_views = False  # other views read it (lakemv.core.planner.dag): set by the batch
        self.costs = Costs(cost_choice.PRIORS["scan"])  # what its batches cost, for the next choice (in this process: scans keep no state)
        self.delta: ViewDelta | None = None  # its aggregates by delta over the view it reads (set by a batch with a local state)

    def at(self, snapshots: Mapping[str, int | None] | None = None, branch: str | None = None) -> ViewMaintainer:
        """The same view, reading the mirrors as of `snapshots` and/or writing `branch` (a backfill's)."""
        other = copy.copy(self)
        if snapshots is not None:
            other.live = {t: live_at_sql(self.names, self.sources[t], snapshots[t]) for t in self.plan.tables}
        if branch is not None:
            other.table, other.feed = f"{self.table}.branch_{branch}", f"{self.names.feeds}.branch_{branch}"
            other.on_main = False
            other.direct = None  # direct commits go to a table's main branch
            other.delta = None  # (its states follow the main branch)
        return other

    # ---- tables ------------------------------------------------------------------------------------
    def recompute(self) -> DataFrame:
        """The view's full recompute over the live mirrors (what the view table must equal)."""
        return self.spark.sql(recompute_sql(self.plan, self.live, watermarks=self.watermarks))

    def _exists(self, table: str) -> bool:
        return self.spark.catalog.tableExists(table)

    def _properties(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {self.table}").collect()}

    def _create(self, schema: StructType, replace: bool) -> None:
        """The view's table (replaced when `replace`), and its column of the change feeds (a new one)."""
        properties = {**TABLE_PROPERTIES, ANALYSED: self._analysed(schema)}
        create_empty(self.spark, self.table, schema, properties, replace=replace)
        self.feeds.prepare(self.plan.name, schema, tuple(self.plan.key_names), reshape=True)

    def _analysed(self, schema: StructType) -> str:
        """What the view's columns `schema` were analysed from: its recompute over the mirrors as they
        are declared now, in this Spark version (`ANALYSED`)."""
        declared = {t: self.sources[t].model_dump(mode="json") for t in sorted(self.plan.tables)}
        live = {t: live_rows_sql(self.names, self.sources[t]) for t in self.plan.tables}  # (not a backfill's snapshots)
        text = json.dumps([recompute_sql(self.plan, live), declared, pyspark.__version__, _signature(schema)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def prepare(self, properties: Mapping[str, str] | None = None) -> bool:
        """Create or reshape the view's tables; True when the table holds this definition's rows.
        `properties`: the view table's, when the caller has just read them (it exists).

        Spark's analysis of the view's recompute (the first one in a process: ~0.5 s) is skipped when
        the table says its columns were analysed from this recompute (`ANALYSED`)."""
        if properties is None and not self._exists(self.table):
            self._create(self.recompute().schema, replace=False)
            return False
        properties = properties if properties is not None else self._properties()
        stored = self.spark.table(self.table).schema
        analysed = self._analysed(stored)  # what the table's columns are, if this recompute gives them
        if properties.get(ANALYSED) != analysed:
            schema = self.recompute().schema  # analysis only, no job
            if _signature(stored) != _signature(schema):
                self._create(schema, replace=True)
                return False
            self.spark.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('{ANALYSED}'='{analysed}')")
        self.feeds.prepare(self.plan.name, stored, tuple(self.plan.key_names), reshape=False)  # (a lake whose feeds predate the shared table)
        return properties.get(FINGERPRINT) == self.plan.fingerprint

    def ensure_tables(self) -> Ensured:
        """The view's tables as its definition needs them, before `fill` (with the other views' inside
        `Feeds.together`, which makes their feed columns on leaving it). A view a backfill holds is left alone."""
        properties = self._properties() if self._exists(self.table) else None  # (one catalog read for state and fingerprint)
        state = ViewState.parse((properties or {}).get(STATE))
        if state.state == "paused":
            return Ensured(state, current=True)
        return Ensured(state, current=self.prepare(properties))

    def fill(self, ensured: Ensured) -> ViewResult | None:
        """The view built when it is new or its SQL changed; caught up when a backfill has just published it
        (by the next batch when views read it: its unit's write id tags the rows they follow)."""
        state = ensured.state
        if state.state == "paused":
            return ViewResult(self.plan.name, 0, paused=True, note=f"paused by {state.by}")
        if not ensured.current:  # new, or its SQL changed: a rebuild covers any pending catch-up
            result = self._nothing_to_build() or self.rebuild(prepared=True)
            if state.state == "resume":
                write_state(self.spark, self.table, ViewState())
            return result
        if state.state == "resume" and not self.read_by_views:  # (a view read by views resumes in a batch: they follow its catch-up)
            unit = WriteUnit(f"resume:{self.plan.name}:{_digest(state.raw)}", replay=True)
            with tagged(self.spark, unit.write_id):
                return self.resume(state, unit, None)
        return None

    def _nothing_to_build(self) -> ViewResult | None:
        """A view with no rows over empty tables (`ViewPlan.empty_over_empty`), on a lake whose tables it
        reads hold no live row and whose own table none either (a new lake's first start): marked as
        built from this SQL without the full recompute and diff (None: build it)."""
        if not self.plan.empty_over_empty:
            return None
        started = time.perf_counter()
        reads = [f"SELECT 1 FROM {self.table}", *self.live.values()]
        if not self.spark.sql(" UNION ALL ".join(f"SELECT 1 FROM ({r})" for r in reads)).isEmpty():
            return None
        self._mark_built()
        return ViewResult(self.plan.name, None, seconds=time.perf_counter() - started, note="no rows: the tables it reads are empty")

    def rebuild(self, prepared: bool = False) -> ViewResult:
        """Full recompute of every key (`lakemv backfill`), then mark the table as built from this SQL."""
        if not prepared:
            self.prepare()
        result = self.backfill()
        self._mark_built()
        return result

    def _mark_built(self) -> None:
        """The table holds this definition's rows (`prepare` compares the fingerprint)."""
        self.spark.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('{FINGERPRINT}'='{self.plan.fingerprint}')")

    def _current_snapshot(self) -> str:
        rows = self.spark.sql(
            f"SELECT snapshot_id FROM {self.table}.history WHERE is_current_ancestor ORDER BY made_current_at DESC LIMIT 1"
        ).collect()
        return str(rows[0][0]) if rows else "empty"

    # ---- maintenance -------------------------------------------------------------------------------
    def write_all(self, unit: WriteUnit) -> ViewResult:
        """Recompute every key and write what differs (inside the caller's tagged block)."""
        self._forget()
        return self.write(None, Writing(None, None, unit))

    def _forget(self) -> None:
        """The view is written other than by its deltas: its aggregate states are built again by the next unit."""
        if self.delta is not None and self.on_main and self.delta.known(""):  # (known to no unit: a store read, no write)
            self.delta.forget()

    def backfill(self) -> ViewResult:
        """Recompute every key; write only what differs from the view table.

        Its write id names the definition and the view snapshot the diff is computed against: after
        a crash between the change-feed append and the view MERGE, the rerun finds its feed rows and
        does not append them again.
        """
        fingerprint = self.plan.fingerprint[:24]
        unit = WriteUnit(f"build:{self.plan.name}:{fingerprint}@{self._current_snapshot()}", replay=True)
        with tagged(self.spark, unit.write_id):
            return self.write_all(unit)

    def apply(self, deltas: Mapping[str, str], unit: WriteUnit, position: int | None, signed: Mapping[str, str] | None = None) -> ViewResult:
        """Recompute the keys the changed rows in `deltas` (table -> relation of old and new images) reach.

        Runs inside the batch's tagged block; `unit.batch_id` goes to the change feed. A view paused
        by a backfill is skipped; one the backfill has published is first caught up. `signed`: per view
        it reads, a relation of its changed rows with their signs, which its aggregates by delta add up.
        """
        state = read_state(self.spark, self.table) if self.on_main else ViewState()
        if state.state == "paused":
            return ViewResult(self.plan.name, 0, paused=True, note=f"paused by {state.by}")
        if state.state == "resume":
            return self.resume(state, unit, position)
        return self._apply(deltas, unit, position, state, signed)

    def resume(self, state: ViewState, unit: WriteUnit, position: int | None) -> ViewResult:
        """Catch up with every mirror change since the snapshots a backfill last read, then resume.

        The batches that skipped the view while it was paused are covered, this one included (its
        aggregate states missed them: built again by the next unit).
        """
        self._forget()
        current = mirror_snapshots(self.spark, self.names, self.plan.tables, self.sources)
        self.final_since = None  # the backfill judged windows by its own watermark: look at every open one
        try:
            result = self.catch_up(state.since, current, unit, position, state)
        except Exception as exc:
            if "Cannot find snapshot" not in str(exc):
                raise
            result = self.write_all(unit)  # those snapshots were expired: recompute every key instead
        if read_state(self.spark, self.table).raw == state.raw:  # not paused again meanwhile
            write_state(self.spark, self.table, ViewState())
        return replace(result, note=f"caught up after {state.by}")

    def catch_up(
        self,
        since: Mapping[str, int | None],
        now: Mapping[str, int | None],
        unit: WriteUnit,
        position: int | None = None,
        state: ViewState | None = None,
    ) -> ViewResult:
        """Recompute the keys reached by the mirror rows that differ between snapshots `since` and `now`."""
        deltas: dict[str, str] = {}
        with ExitStack() as held:
            for table in self.plan.tables:
                if since.get(table) == now[table]:
                    continue
                columns = sorted(self.plan.reads(table))
                sql = changed_rows_sql(self.names, self.sources[table], since.get(table), now[table], columns)
                relation = f"{self._temp}_since_{table}"
                held.enter_context(materialised(self.spark.sql(sql), relation))
                deltas[table] = relation
            return self._apply(deltas, unit, position, state or ViewState()) if deltas else ViewResult(self.plan.name, 0)

    def _apply(
        self, deltas: Mapping[str, str], unit: WriteUnit, position: int | None, state: ViewState, signed: Mapping[str, str] | None = None
    ) -> ViewResult:
        started = time.perf_counter()
        reaching = {t: r for t, r in deltas.items() if t in self.live and self.plan.reached_by(t)}
        queries = affected_key_queries(self.plan, self.live, reaching)
        closing = self.closing_query()
        if not queries and closing is None:
            return ViewResult(self.plan.name, 0)
        reached = concurrently(self.spark, lambda sql: self.spark.sql(sql).toArrow(), [*queries, *([closing] if closing else [])])
        keys = pa.concat_tables(reached, promote_options="permissive").group_by(list(self.plan.key_names)).aggregate([])  # distinct
        steps = {"keys": time.perf_counter() - started}
        crash_point(f"keys:{self.plan.name}", unit.batch_id)
        if keys.num_rows == 0:
            return ViewResult(self.plan.name, 0, seconds=time.perf_counter() - started, steps=steps)
        choice = self._choose(keys.num_rows)
        delta = self.delta
        upstream = (signed or {}).get(delta.table) if delta is not None else None  # its upstream's signed rows
        if choice.plan == INCREMENTAL and self.on_main and delta is not None and upstream is not None:
            result = self._by_delta(keys, upstream, Writing(keys.num_rows, position, unit, started, steps, state))
            if result is not None:
                return replace(result, plan=INCREMENTAL, reason=f"aggregates by delta: {choice.reason}")
        else:
            delta = None
            self._forget()
        if choice.plan == WHOLE:
            result = self.write(None, Writing(keys.num_rows, position, unit, started, steps, state))
            if result.paused:
                return result
            self.costs.observe(WHOLE, self._rows, result.seconds - steps["keys"])
            return replace(result, plan=WHOLE, reason=choice.reason, note=f"recomputed in full: {choice.reason}")
        relation = f"{self._temp}_keys"
        self.spark.createDataFrame(keys).createOrReplaceTempView(relation)
        try:
            result = self.write(relation, Writing(keys.num_rows, position, unit, started, steps, state))
            if delta is not None and not result.paused:  # an extreme was retracted: its groups recomputed, their states with them
                delta.refresh(keys, relation, unit.write_id)
                delta.commit(unit.write_id)
                crash_point(f"tallies:{self.plan.name}", unit.batch_id)
        finally:
            self.spark.catalog.dropTempView(relation)
        if not result.paused:
            self.costs.observe(INCREMENTAL, lambda: keys.num_rows, result.seconds - steps["keys"])
        return replace(result, plan=INCREMENTAL, reason=choice.reason)

    def _by_delta(self, keys: pa.Table, signed: str, w: Writing) -> ViewResult | None:
        """The keys' rows by delta (`lakemv.spark.views.viewdelta`), written, then their states stored;
        None when a group lost its extreme (recomputed by scans instead)."""
        assert self.delta is not None
        clock = time.perf_counter()
        diff = self.delta.diff(keys, signed, w.unit.write_id)
        if diff is None:
            return None
        w.steps["recompute"] = time.perf_counter() - clock
        result = self.write_diff(diff, w)
        if not result.paused:  # after the view's commit: a replay reads the states before the unit
            self.delta.commit(w.unit.write_id)
            crash_point(f"tallies:{self.plan.name}", w.unit.batch_id)
        return result

    def closing_query(self) -> str | None:
        """SQL of the keys whose windows the watermarks closed since the last batch (their rows turn
        final), or None when the view has no window or its horizon has not moved."""
        final = self.plan.finality
        mark = None if final is None else final.horizon(self.watermarks)
        if final is None or mark is None or mark == self.final_since or not self.on_main:
            return None
        return finalizing_sql(final, self.table, self.plan.key_names, mark, self.final_since)

    def judged(self) -> None:
        """The batch's rows are written: its watermark is the one the view's windows were judged by."""
        if self.plan.finality is not None:
            self.final_since = self.plan.finality.horizon(self.watermarks)

    def _choose(self, keys: int) -> Choice:
        """Incremental or whole, by predicted cost (lakemv.core.batch.choice); on a branch, always incremental."""
        refused = (
            "a backfill's branch" if not self.on_main
            else "events are enriched as of processing time" if self.plan.as_of_processing
            else None
        )  # fmt: skip
        return self.costs.choose(keys, self._rows, refused)

    def _rows(self) -> int:
        """The view's live rows, from its last snapshot's summary."""
        live = "CAST(summary['total-records'] AS BIGINT) - coalesce(CAST(summary['total-position-deletes'] AS BIGINT), 0)"
        rows = self.spark.sql(f"SELECT {live} FROM {self.table}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _digest(text: str | None) -> str:
    return hashlib.sha1((text or "").encode()).hexdigest()[:12]
