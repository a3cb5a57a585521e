"""The batch's one recompute of the views the local state serves: every view a batch reaches
incrementally is recomputed in one Spark job per core, not one per view.

The rows the views gathered (`lakemv.spark.views.indexed.IndexedView.prepare`) go to Spark as one
relation per table, each row tagged with the view occurrence that gathered it: one Arrow transfer per
table, not per view and occurrence. Each view's SQL reads its own tags (`IndexedView.branch`), so it
sees exactly the rows it would alone. The views' outputs differ in shape: each is one struct column of
a UNION ALL (NULL in the other views' rows), taken apart again in the driver.

A view that gathered fewer than `SMALL_ROWS` rows (most views, most batches) runs its own plan
instead, planned once and run again over each batch's rows (`lakemv.spark.views.kept`): Spark's fixed
cost per query was half of it. The kept plans a thread runs go to Spark together, as one job
(`lakemv.spark.views.kept.run_kept`). The one-job recompute above is for the views that gathered
more, or a Spark without lakemv's jar (a cluster). The bound is per view: a hundred views' rows
together pass it in every batch (100 views, 20k users: 220k rows, all of them in one UNION ALL job
of 22-27 s, most of it Spark's analysis of that plan).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakemv.core.batch.choice import Choice
from lakemv.core.state.codec import Values, to_arrow
from lakemv.core.state.layout import MirrorPart
from lakemv.core.types import arrow_type
from lakemv.spark.parallel import concurrently, sql_conf
from lakemv.spark.views.kept import run_kept
from lakemv.spark.views.write import Writing

if TYPE_CHECKING:
    from lakemv.spark.views.delta import Sides
    from lakemv.spark.views.indexed import IndexedView


def part_schema(part: MirrorPart) -> pa.Schema:
    """Arrow schema of a mirror's declared columns (what the view's SQL reads)."""
    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in part.columns])


class Gathered(NamedTuple):
    """A view prepared for the batch's recompute: its keys, the rows each occurrence reads for them,
    the plan chosen and the write to come (its clock and steps so far)."""

    view: IndexedView
    keys: list[Values]
    rows: Mapping[int, list[Values]]
    choice: Choice
    writing: Writing
    signed: list[tuple[Values, int]] | Sides | None = None  # aggregates by delta: the unit's rows with their signs, or a join's sides (lakemv.spark.views.delta)

    @property
    def rows_read(self) -> int:
        return sum(len(found) for found in self.rows.values()) + len(self.signed or ())


TAG = "_lmv_occurrence"  # which (view, occurrence) of the batch a row of a batch relation was gathered for
VIEW = "_lmv_view"  # which view of a recompute a row is of
_RELATIONS = itertools.count()
# A view that gathered fewer rows than this runs its kept plan; a one-job recompute over fewer runs
# as one plan fixed in advance: no adaptive re-planning (each of its shuffle stages would be a job
# of its own) and one shuffle partition. Tiny inputs gain nothing from either (a 16-view batch's
# recompute: 2.8 -> 2.0 s here).
SMALL_ROWS = 200_000
_SMALL_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}
# The gathered rows one round of the recompute holds in the driver at once: the views of a batch that
# gathered more go in rounds, one after the other. A hundred views at 1M users gathered more than a
# 4 GB driver holds as local relations and results together, and a round of 2M rows still did (the
# optimizer copies a local relation under a projection: `ConvertToLocalRelation`, ~2 KB a row in
# all). A view is never split.
ROUND_ROWS = 500_000


def recompute_together(spark: SparkSession, views: Sequence[Gathered], workers: int = 1) -> list[tuple[pa.Table, float]]:
    """Every prepared view's SQL over the rows it gathered, in rounds of at most `ROUND_ROWS` rows
    (`_round`), each view with its share of the seconds (by the rows it read)."""
    clock = time.perf_counter()
    weights = [g.rows_read + 1 for g in views]
    rounds: list[list[int]] = [[]]
    held = 0
    for index in range(len(views)):
        if rounds[-1] and held + weights[index] > ROUND_ROWS:
            rounds.append([])
            held = 0
        rounds[-1].append(index)
        held += weights[index]
    found: dict[int, pa.Table] = {}
    for chosen in rounds:
        found.update(zip(chosen, _round(spark, [views[i] for i in chosen], [weights[i] for i in chosen], workers), strict=True))
    seconds = time.perf_counter() - clock
    return [(found[i], seconds * weights[i] / sum(weights)) for i in range(len(views))]


def _round(spark: SparkSession, views: Sequence[Gathered], weights: Sequence[int], workers: int) -> list[pa.Table]:
    """The views' SQL over the rows they gathered, in `workers` threads side by side (the views dealt
    among them by the rows they read, `weights`): the views of a thread that gathered few rows by
    their kept plans, all in one Spark job, the others in one planned job (see the module docstring);
    per view its new rows with their digests."""
    if not views:
        return []
    groups: list[list[int]] = [[] for _ in range(max(1, min(workers, len(views))))]
    loads = [0] * len(groups)
    for index in sorted(range(len(views)), key=lambda i: -weights[i]):  # the heaviest first, to the lightest group
        lightest = loads.index(min(loads))
        groups[lightest].append(index)
        loads[lightest] += weights[index]
    # Each view on its own: a hundred views' rows together pass any bound, each view's seldom does.
    kept = {i for i, g in enumerate(views) if (weights[i] < SMALL_ROWS and g.view.kept.available) or g.signed is not None}  # (a delta's run is its own)
    rest = sum(w for i, w in enumerate(weights) if i not in kept)

    def run(group: list[int]) -> list[pa.Table]:
        mine = [i for i in group if i in kept]  # their kept plans in one Spark job
        ran = run_kept(spark, [views[i].view.kept_run(views[i]) for i in mine])
        found = {i: views[i].view.recomputed(table) for i, table in zip(mine, ran, strict=True)}
        others = [i for i in group if i not in kept]
        if others:
            found.update(zip(others, _recompute_group(spark, [views[i] for i in others]), strict=True))
        return [found[i] for i in group]

    with sql_conf(spark, _SMALL_CONF if 0 < rest < SMALL_ROWS else {}):
        found = concurrently(spark, run, groups)
    out: list[pa.Table] = [pa.table({})] * len(views)
    for group, tables in zip(groups, found, strict=True):
        for index, table in zip(group, tables, strict=True):
            out[index] = table
    return out


def _recompute_group(spark: SparkSession, views: Sequence[Gathered]) -> list[pa.Table]:
    """The views' SQL over the rows they gathered, in one Spark job (see the module docstring)."""
    store = views[0].view.store
    batch = next(_RELATIONS)
    tables: dict[str, tuple[str, list[Values], list[int]]] = {}
    sources: list[dict[int, tuple[str, int]]] = []
    tags = itertools.count()
    for g in views:
        mine = {}
        for occ in g.view.plan.occurrences:
            if occ.table not in tables:
                tables[occ.table] = (f"_lmv_rows_{batch}_{len(tables)}", [], [])
            relation, rows, tagged = tables[occ.table]
            tag = next(tags)
            mine[occ.id] = (relation, tag)
            found = g.rows.get(occ.id, [])
            rows.extend(found)
            tagged.extend([tag] * len(found))
        sources.append(mine)
    made: list[str] = []
    try:
        for table, (relation, rows, tagged) in tables.items():
            frame = to_arrow(rows, part_schema(store.mirrors[table])).append_column(TAG, pa.array(tagged, type=pa.int32()))
            spark.createDataFrame(frame).createOrReplaceTempView(relation)
            made.append(relation)
        branches = []
        for index, (g, mine) in enumerate(zip(views, sources, strict=True)):
            keys, keyed = g.view.keys_read(g), None
            if keys is not None:
                keyed = f"_lmv_keys_{batch}_{index}"
                spark.createDataFrame(keys).createOrReplaceTempView(keyed)
                made.append(keyed)
            branches.append(g.view.branch(mine, keyed, index, len(views)))
        result = spark.sql(" UNION ALL ".join(branches)).toArrow()
    finally:
        for relation in made:
            spark.catalog.dropTempView(relation)
    return [pa.Table.from_struct_array(result.filter(pc.equal(result.column(VIEW), i)).column(i + 1)) for i in range(len(views))]
