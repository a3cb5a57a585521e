"""The write half of view maintenance: diff a view's recomputed keys, append the change feed, MERGE.

`ViewMaintainer` (lakemv.spark.views.maintain) decides what to recompute and when (build, batch, pause and resume);
this writes it, exactly once per unit: only rows whose content changed reach the feed and the view.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from lakemv.catalog.viewstate import ViewState
from lakemv.core.batch.result import ViewResult
from lakemv.core.planner import OCCURRENCE, ViewPlan
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.diff import content_diff, duplicated_keys
from lakemv.core.sql.feedsql import feed_part
from lakemv.core.sql.quote import key_columns, key_filter
from lakemv.core.sql.viewsql import (
    DIFF_OP,
    Watermarks,
    diff_sql,
    filtered_ctes,
    merge_sql,
    old_rows_sql,
    rows_sql,
)
from lakemv.core.state.places import Location
from lakemv.spark.commits import WriteUnit, commit_once
from lakemv.spark.directwrite import Committed, DirectWriter
from lakemv.spark.materialise import materialised
from lakemv.spark.parallel import concurrently
from lakemv.spark.views.feeds import Feeds
from lakemv.spark.views.state import read_state


@dataclass
class Writing:
    """One write of a view: keys recomputed (None: all), the batch's position, its unit and clock."""

    count: int | None
    position: int | None
    unit: WriteUnit
    started: float = field(default_factory=time.perf_counter)
    steps: dict[str, float] = field(default_factory=dict)
    state: ViewState | None = None
    held: int = 0  # keys left alone: their recompute gave several rows
    committed: Committed | None = None  # the view's direct commit, when this write made it
    fed: bool = False  # its feed rows are committed already (with every view's of the batch, lakemv.spark.views.feeds)


# Where the view rows a diff replaces live: (the view snapshot that was read at, their places); the
# argument asks to follow the table first (a lost race: a compaction may have moved them).
Placement = Callable[[bool], tuple[int | None, list[Location]]]


class _Superseded(Exception):
    """The view changed hands (a backfill paused or published it) while this batch was writing it."""


class ViewWriter:
    """What `ViewMaintainer` writes with: a view's diff into its change feed, then MERGEd into its table."""

    spark: SparkSession
    plan: ViewPlan
    live: Mapping[str, str]
    table: str
    feed: str  # the table its feed rows go to: the feeds, or a backfill's branch of them
    feeds: Feeds
    on_main: bool
    _temp: str
    direct: DirectWriter | None
    watermarks: Watermarks  # the event sources' watermarks the batch judges windows final by

    def write(self, keys: str | None, w: Writing) -> ViewResult:
        """Recompute the keys in relation `keys` (every key when None) and write what differs."""
        if keys is not None:
            return self.write_diff(self._diff_of_keys(keys, w), w)
        # Materialised once, because the MERGE below changes the view table the diff is computed against:
        # in executor memory for a backfill of every key (a batch's few keys are diffed in the driver).
        clock = time.perf_counter()
        with materialised(self.spark.sql(diff_sql(self.plan, self.live, self.table, None, self.watermarks))) as diff:
            counts = {row[DIFF_OP]: row["n"] for row in diff.groupBy(DIFF_OP).count().withColumnRenamed("count", "n").collect()}
            if counts.pop("held", 0):  # keys with several recomputed rows: left as they are
                w.held = diff.filter(f"{DIFF_OP} = 'held'").select(*self.plan.key_names).distinct().count()
                diff = diff.filter(f"{DIFF_OP} <> 'held'")
            w.steps["diff"] = time.perf_counter() - clock
            return self._write_frame(diff, counts, None, w)

    def write_diff(self, rows: pa.Table, w: Writing, places: Placement | None = None) -> ViewResult:
        """Append a diff computed in the driver (`content_diff`'s shape) to the feed and MERGE it.

        With a direct writer and `places` (where the view's rows the diff replaces live, and the
        snapshot that was read at), both are direct commits instead: the feed rows appended, the
        replaced rows deleted by position and the upserts added, in one commit.
        """
        ops = rows.column(DIFF_OP).to_pylist()
        counts = {op: ops.count(op) for op in set(ops)}
        if self.direct is not None and places is not None and rows.num_rows:
            return self._write_direct(rows, counts, places, w)
        diff = self.spark.createDataFrame(rows) if rows.num_rows else None
        prefilter = key_filter("t", key_columns(rows, self.plan.key_names))
        return self._write_frame(diff, counts, prefilter, w)

    def _write_frame(self, diff: DataFrame | None, counts: Mapping[str, int], prefilter: str | None, w: Writing) -> ViewResult:
        unit, position, state, steps = w.unit, w.position, w.state, w.steps
        if counts and diff is not None:
            relation = f"{self._temp}_diff"
            diff.createOrReplaceTempView(relation)
            try:
                clock = time.perf_counter()
                plan = self.plan
                self.feeds.insert(plan.name, tuple(plan.columns), tuple(plan.key_names), relation, DIFF_OP, unit, position, self.feed)
                steps["feed"] = time.perf_counter() - clock
                crash_point(f"feed:{self.plan.name}", unit.batch_id)
                clock = time.perf_counter()
                self._merge(merge_sql(self.plan, self.table, relation, prefilter), unit, state)
                steps["merge"] = time.perf_counter() - clock
                crash_point(f"view:{self.plan.name}", unit.batch_id)
            except _Superseded:
                return self._superseded(w)
            finally:
                self.spark.catalog.dropTempView(relation)
        return self._result(counts, w)

    def _result(self, counts: Mapping[str, int], w: Writing) -> ViewResult:
        return ViewResult(
            self.plan.name,
            w.count,
            upserts=counts.get("upsert", 0),
            deletes=counts.get("delete", 0),
            seconds=time.perf_counter() - w.started,
            steps={k: round(v, 3) for k, v in w.steps.items()},
            held=w.held,
        )

    def _superseded(self, w: Writing) -> ViewResult:
        return ViewResult(self.plan.name, w.count, paused=True, note="superseded by a backfill: left to it")

    def _changed_hands(self, state: ViewState | None) -> bool:
        """Whether a backfill paused or published the view since the batch read its state."""
        return state is not None and self.on_main and read_state(self.spark, self.table).raw != state.raw

    def feed_part(self, rows: pa.Table, w: Writing) -> pa.Table:
        """The view's feed rows of a diff (`content_diff`'s shape), as its data file of the feeds holds them."""
        return feed_part(self.plan.name, self.plan.columns, self.plan.key_names, rows, w.unit.batch_id, w.position, time.time_ns() // 1000, DIFF_OP)

    def _write_direct(self, rows: pa.Table, counts: Mapping[str, int], places: Placement, w: Writing) -> ViewResult:
        unit, steps = w.unit, w.steps
        if not w.fed:  # written alone: its feed rows in a commit of their own (a batch commits every view's in one)
            clock = time.perf_counter()
            self.feeds.append(self.direct, {self.plan.name: self.feed_part(rows, w)}, unit)  # type: ignore[arg-type]
            steps["feed"] = time.perf_counter() - clock
            crash_point(f"feed:{self.plan.name}", unit.batch_id)
        clock = time.perf_counter()
        upserts = rows.filter(pc.equal(rows.column(DIFF_OP), "upsert")).select(list(self.plan.columns))

        def attempt(retry: bool) -> None:
            if retry and self._changed_hands(w.state):  # lost a race, not to this unit's own commit
                raise _Superseded
            base, replaced = places(retry)  # after a compaction: the rows' new places
            w.committed = self.direct.commit(self.table, upserts, replaced, unit.write_id, validate_from=base, exclusive=True)  # type: ignore[union-attr]

        try:
            commit_once(self.spark, self.table, unit, attempt, f"commit into view {self.plan.name}")
        except _Superseded:
            return self._superseded(w)
        steps["merge"] = time.perf_counter() - clock
        crash_point(f"view:{self.plan.name}", unit.batch_id)
        return self._result(counts, w)

    def _diff_of_keys(self, keys: str, w: Writing) -> pa.Table:
        """The diff for a batch's keys, in the driver: the view's new rows (its body over the rows the
        keys read) and its stored rows for them, side by side; upserts where they differ, deletes
        where no new row is left."""
        steps = w.steps
        clock = time.perf_counter()
        prefiltered = self._prefilter(keys)
        steps["rows"] = time.perf_counter() - clock
        clock = time.perf_counter()
        try:
            body = rows_sql(self.plan, self.watermarks)
            schema = to_arrow_schema(self.spark.sql(body).schema)
            new, old = concurrently(
                self.spark, lambda sql: self.spark.sql(sql).toArrow(), [body, old_rows_sql(self.plan, self.table, keys)]
            )
        finally:
            for relation in prefiltered:
                self.spark.catalog.dropTempView(relation)
        steps["recompute"] = time.perf_counter() - clock
        clock = time.perf_counter()
        held = duplicated_keys(new, self.plan.key_names)
        w.held = len(held)
        rows = content_diff(new, old, self.plan.key_names, schema, held)
        steps["diff"] = time.perf_counter() - clock
        return rows

    def _prefilter(self, keys: str) -> list[str]:
        """The rows each occurrence of the view reads for `keys`, as small temp views named after it.

        The anchor's rows for the keys first, then each child's rows that join its parent's: every
        lookup is a scan of one table with a broadcast of the few rows above it (siblings run
        concurrently), and the view's body then runs over driver-sized relations only.
        """
        ctes = dict(filtered_ctes(self.plan, self.live, keys))
        done: list[str] = []

        def materialize(name: str) -> None:
            rows = self.spark.sql(ctes[name]).toArrow()
            self.spark.createDataFrame(rows).createOrReplaceTempView(name)
            done.append(name)

        try:
            level = [OCCURRENCE.format(b.anchor) for b in self.plan.anchors]  # a UNION ALL: each branch's
            concurrently(self.spark, materialize, level)
            while level:
                level = [OCCURRENCE.format(l.child) for l in self.plan.links if OCCURRENCE.format(l.parent) in level]
                concurrently(self.spark, materialize, level)
        except BaseException:
            for relation in done:
                self.spark.catalog.dropTempView(relation)
            raise
        return done

    def _merge(self, merge: str, unit: WriteUnit, state: ViewState | None) -> None:
        """MERGE the diff; a retry after a lost race first checks that the view did not change hands.

        Compaction never changes rows, so after losing to it the same diff is still right. A
        backfill's publish does: if it paused or published the view meanwhile, this diff is stale and
        the backfill's result (which covers this batch's mirror changes) stands.
        """
        first = True

        def attempt() -> None:
            nonlocal first
            if not first and self._changed_hands(state):
                raise _Superseded
            first = False
            self.spark.sql(merge)

        unit.retries.run(f"MERGE into view {self.plan.name}", attempt)
