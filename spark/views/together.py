"""The batch's one recompute of the views the local state serves: every view a batch reaches
incrementally is recomputed in one Spark job per core, not one per view.

The rows the views gathered (`lakemv.spark.views.indexed.IndexedView.prepare`) go to Spark as one
relation per table, each row tagged with the view occurrence that gathered it: one Arrow transfer per
table, not per view and occurrence. Each view's SQL reads its own tags (`IndexedView.branch`), so it
sees exactly the rows it would alone. The views' outputs differ in shape: each is one struct column of
a UNION ALL (NULL in the other views' rows), taken apart again in the driver.

A small recompute (most batches) is dominated by Spark's fixed cost per query: parsing, analysis,
optimisation and planning take half of it. So there each view's recompute is planned once and run
again, batch after batch, over the new rows (`Planned`, lakemv's `dev.lakemv.spark.Replan`): its
inputs are local relations with a marker column each, planned with the rules that would fold a local
relation's rows into the plan switched off, and each later batch's rows replace the first's in a copy
of the physical plan. A plan that still holds rows of its own (a VALUES list, a folded branch) is not
kept; nor is one whose SQL changed (a time-bounded view's watermarks are literals in it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from py4j.java_gateway import JavaClass
from pyspark.sql import DataFrame, SparkSession

from lakemv.core.batch.choice import Choice
from lakemv.core.state.codec import Values, to_arrow
from lakemv.core.state.layout import MirrorPart
from lakemv.core.types import arrow_type
from lakemv.spark.parallel import concurrently, sql_conf
from lakemv.spark.views.write import Writing

if TYPE_CHECKING:
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

    @property
    def rows_read(self) -> int:
        return sum(len(found) for found in self.rows.values())


TAG = "_lmv_occurrence"  # which (view, occurrence) of the batch a row of a batch relation was gathered for
VIEW = "_lmv_view"  # which view of a recompute a row is of
_RELATIONS = itertools.count()
# A recompute over fewer gathered rows than this runs as one plan fixed in advance: no adaptive
# re-planning (each of its shuffle stages would be a job of its own) and one shuffle partition.
# Tiny inputs gain nothing from either (a 16-view batch's recompute: 2.8 -> 2.0 s here).
SMALL_ROWS = 200_000
_SMALL_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}
# A plan run again over new rows (`Planned`): no rule may fold its local rows into the plan, and no
# exchange or subquery may stand for another one (a reused one keeps the first run's output); joins
# sort-merge (a broadcast is a job of its own).
_PLANNED_CONF = {
    **_SMALL_CONF,
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.exchange.reuse": "false",
    "spark.sql.execution.reuseSubquery": "false",
    "spark.sql.optimizer.excludedRules": ",".join(
        f"org.apache.spark.sql.catalyst.optimizer.{rule}" for rule in ("ConvertToLocalRelation", "PropagateEmptyRelation")
    ),
}
MARK = "_lmv_in_"  # the prefix of an input's marker column in a planned recompute


class Planned(NamedTuple):
    """A view's recompute as Spark planned it: for the SQL and input schemas it was planned for."""

    key: tuple
    plan: object  # a py4j proxy of org.apache.spark.sql.execution.SparkPlan


def recompute_together(spark: SparkSession, views: Sequence[Gathered], workers: int = 1) -> list[tuple[pa.Table, float]]:
    """Every prepared view's SQL over the rows it gathered, in `workers` Spark jobs side by side (the
    views dealt among them by the rows they read): per view its new rows with their digests, and its
    share of the seconds (by the rows it read)."""
    clock = time.perf_counter()
    weights = [g.rows_read + 1 for g in views]
    groups: list[list[int]] = [[] for _ in range(max(1, min(workers, len(views))))]
    loads = [0] * len(groups)
    for index in sorted(range(len(views)), key=lambda i: -weights[i]):  # the heaviest first, to the lightest group
        lightest = loads.index(min(loads))
        groups[lightest].append(index)
        loads[lightest] += weights[index]
    replan = _replan(spark) if sum(weights) < SMALL_ROWS else None
    conf = (_PLANNED_CONF if replan is not None else _SMALL_CONF) if sum(weights) < SMALL_ROWS else {}
    with sql_conf(spark, conf):
        if replan is not None:
            found = concurrently(spark, lambda group: [_recompute_planned(spark, replan, views[i]) for i in group], groups)
        else:
            found = concurrently(spark, lambda group: _recompute_group(spark, [views[i] for i in group]), groups)
    seconds = time.perf_counter() - clock
    out: list[tuple[pa.Table, float]] = [(pa.table({}), 0.0)] * len(views)
    for group, tables in zip(groups, found, strict=True):
        for index, table in zip(group, tables, strict=True):
            out[index] = (table, seconds * weights[index] / sum(weights))
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


def _replan(spark: SparkSession):  # noqa: ANN202 - a py4j proxy of dev.lakemv.spark.Replan, or None
    """lakemv's Replan class, when the JVM has lakemv's jar (local Spark: see lakemv.spark.session)."""
    found = spark.sparkContext._jvm.dev.lakemv.spark.Replan  # type: ignore[union-attr]
    return found if isinstance(found, JavaClass) else None


def _recompute_planned(spark: SparkSession, replan, g: Gathered) -> pa.Table:  # noqa: ANN001 - Replan
    """One view's SQL over the rows it gathered: its kept plan run over them, or planned (and kept)."""
    view = g.view
    name = view.plan.name
    inputs: dict[str, pa.Table] = {}
    sources: dict[int, tuple[str, int | None]] = {}
    for occ in view.plan.occurrences:
        relation = f"{MARK}{name}_{occ.id}"
        sources[occ.id] = (relation, None)
        inputs[relation] = to_arrow(g.rows.get(occ.id, []), part_schema(view.store.mirrors[occ.table]))
    keys = view.keys_read(g)
    keyed = f"{MARK}{name}_keys" if keys is not None else None
    if keyed is not None:
        inputs[keyed] = keys
    inputs = {relation: rows.append_column(relation, pa.nulls(rows.num_rows, pa.bool_())) for relation, rows in inputs.items()}
    sql = view.branch(sources, keyed, 0, 1)
    key = (sql, tuple((relation, rows.schema) for relation, rows in inputs.items()))
    planned = view.planned
    if planned is not None and planned.key == key:
        rows = spark.sparkContext._jvm.java.util.HashMap()  # type: ignore[union-attr]
        for relation, table in inputs.items():
            local = replan.localRows(spark.createDataFrame(table)._jdf)
            if local is None:  # too large to be a local relation: planned anew
                break
            rows.put(relation, local)
        else:
            frame = DataFrame(replan.frame(spark._jsparkSession, replan.swap(planned.plan, MARK, rows)), spark)
            result = frame.toArrow()
            view.replanned += 1
            return pa.Table.from_struct_array(result.column(1))
    try:
        for relation, table in inputs.items():
            spark.createDataFrame(table).createOrReplaceTempView(relation)
        frame = spark.sql(sql)
        plan = frame._jdf.queryExecution().executedPlan()
        result = frame.toArrow()
    finally:
        for relation in inputs:
            spark.catalog.dropTempView(relation)
    view.planned = Planned(key, plan) if replan.marked(plan, MARK) else None
    return pa.Table.from_struct_array(result.column(1))
