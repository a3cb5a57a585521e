"""A view's queries planned once and run again, batch after batch, over each batch's rows.

Over the few rows an incremental batch gathers, most of a query's cost in Spark is fixed: parsing,
analysis, optimisation and planning were half of a view's recompute. So a view keeps the physical plan
of each of its queries (its recompute, the evaluation of key expressions) and runs it again over the
next batch's rows with lakemv's JVM helper (`jvm/java/dev/lakemv/spark/Replan.java`):

- every input is a local relation with a marker column of its own (`MARK` + its name);
- the plan is made in a session of its own whose SQL conf is `PLANNED_CONF`: no rule that folds a
  local relation's rows into the plan or drops what their count proves needless (one row needs no
  DISTINCT, sort or limit), no exchange or subquery reused for another (a reused one keeps
  an earlier run's output), sort-merge joins, no adaptive execution, one shuffle partition;
- the plan is kept without its rows (100 views' first batches held 1 GB of the driver's heap at 100k
  users); each later run copies it with each marked scan reading the new rows, so every node above one is
  new: no shuffle output, subquery result or generated code of an earlier run stands for other rows;
- a plan with any other leaf (a VALUES list, a folded branch, a scan of an RDD) is not kept, nor is one
  whose SQL or input schemas changed (a time-bounded view's watermarks are literals in its SQL);
- the kept plans of a batch's views run in one Spark job (`run_kept`): their RDDs side by side in one
  union, each plan's rows back to Python as Arrow. One job per view cost a hundred views' batch a
  hundred jobs; one UNION ALL of their SQL was no better (its rows as wide as all the views' columns
  together, too wide for Spark's generated code, and its plan took seconds to make).

Without lakemv's jar in the driver (a Spark cluster: see lakemv.spark.session) every run is planned.
"""

from __future__ import annotations

import json
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa
from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

MARK = "_lmv_in_"  # the prefix of an input's marker column (and its relation's name)
PLANNED_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.exchange.reuse": "false",
    "spark.sql.execution.reuseSubquery": "false",
    # no rule that folds a local relation's rows, nor one that drops what the rows' count proves needless
    # (over one row: a DISTINCT's aggregate, a sort, a limit): the plan runs again over more rows
    "spark.sql.optimizer.excludedRules": ",".join(
        f"org.apache.spark.sql.catalyst.optimizer.{rule}"
        for rule in ("ConvertToLocalRelation", "PropagateEmptyRelation", "OptimizeOneRowPlan", "EliminateLimits", "EliminateOffsets")
    ),
}
_SESSIONS: weakref.WeakKeyDictionary[SparkSession, SparkSession] = weakref.WeakKeyDictionary()


class Planned(NamedTuple):
    """A query as Spark planned it, for the SQL and input schemas it was planned for."""

    key: tuple
    plan: object  # a py4j proxy of org.apache.spark.sql.execution.SparkPlan


def replan_class(spark: SparkSession):  # noqa: ANN201 - a py4j proxy of dev.lakemv.spark.Replan, or None
    """lakemv's Replan class, when the driver's JVM has lakemv's jar."""
    found = spark.sparkContext._jvm.dev.lakemv.spark.Replan  # type: ignore[union-attr]
    return found if isinstance(found, JavaClass) else None


def planning_session(spark: SparkSession) -> SparkSession:
    """The session kept plans are made and run in: `spark`'s context, `PLANNED_CONF` for good (a
    session's SQL conf is shared by all its threads, so it is not switched around each query)."""
    if spark not in _SESSIONS:
        session = spark.newSession()
        for key, value in PLANNED_CONF.items():
            session.conf.set(key, value)
        _SESSIONS[spark] = session
    return _SESSIONS[spark]


class KeptPlans:
    """The plans one view keeps, by purpose, and how many runs reused one."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.plans: dict[str, Planned] = {}
        self.reran = 0
        self._replan = replan_class(spark)  # looked up once: py4j resolves a dotted name per package level

    @property
    def available(self) -> bool:
        return self._replan is not None

    def run(self, purpose: str, sql: str, inputs: Mapping[str, pa.Table]) -> pa.Table:
        """`sql` over `inputs` (relation name, starting with `MARK` -> its rows): by the plan kept for
        `purpose` when it was made for this SQL and these schemas, else planned (and kept if it can be)."""
        return run_kept(self.spark, [(self, purpose, sql, inputs)])[0]

    def _start(self, purpose: str, sql: str, inputs: Mapping[str, pa.Table]) -> pa.Table | object:
        """The plan kept for `purpose`, reading `inputs`' rows, ready to run (a py4j proxy of a
        SparkPlan); or, when there is none for this SQL and these schemas or the rows are too many for
        a local relation, the result: planned now, and the plan kept if it can be."""
        if not self.available:
            return self._planned(self.spark, sql, inputs)[0]
        session = planning_session(self.spark)
        marked = {name: rows.append_column(name, pa.nulls(rows.num_rows, pa.bool_())) for name, rows in inputs.items()}
        key = (sql, tuple((name, rows.schema) for name, rows in marked.items()))
        kept = self.plans.get(purpose)
        if kept is not None and kept.key == key:
            rows = session.sparkContext._jvm.java.util.HashMap()  # type: ignore[union-attr]
            for name, table in marked.items():
                local = self._replan.localRows(session.createDataFrame(table)._jdf)
                if local is None:  # too large to be a local relation: planned anew
                    break
                rows.put(name, local)
            else:
                self.reran += 1
                return self._replan.swap(kept.plan, MARK, rows)
        result, plan = self._planned(session, sql, marked)
        if self._replan.marked(plan, MARK):  # kept without the rows it was planned with (a view's are many)
            self.plans[purpose] = Planned(key, self._replan.strip(plan, MARK))
        else:
            self.plans.pop(purpose, None)
        return result

    @staticmethod
    def _planned(session: SparkSession, sql: str, inputs: Mapping[str, pa.Table]) -> tuple[pa.Table, object]:
        """`sql` over `inputs` planned now: its rows and its physical plan."""
        try:
            for name, table in inputs.items():
                session.createDataFrame(table).createOrReplaceTempView(name)
            frame = session.sql(sql)
            plan = frame._jdf.queryExecution().executedPlan()
            return frame.toArrow(), plan
        finally:
            for name in inputs:
                session.catalog.dropTempView(name)


Run = tuple[KeptPlans, str, str, Mapping[str, pa.Table]]  # (whose plans, purpose, SQL, inputs) as KeptPlans.run takes them


def run_kept(spark: SparkSession, runs: Sequence[Run]) -> list[pa.Table]:
    """Each run's result as `KeptPlans.run` computes it; every run that has a kept plan for its SQL and
    inputs runs in one Spark job with the others (`Replan.collectArrow`: the plans side by side, their
    rows back as Arrow), each one planned now in a query of its own."""
    found: list[pa.Table | None] = [None] * len(runs)
    ready: list[tuple[int, object]] = []
    for index, (kept, purpose, sql, inputs) in enumerate(runs):
        started = kept._start(purpose, sql, inputs)
        if isinstance(started, pa.Table):
            found[index] = started
        else:
            ready.append((index, started))
    if ready:
        session = planning_session(spark)
        plans = session.sparkContext._jvm.java.util.ArrayList()  # type: ignore[union-attr]
        for _, plan in ready:
            plans.add(plan)
        collected = replan_class(spark).collectArrow(session._jsparkSession, plans)  # type: ignore[union-attr]
        for (index, _), table in zip(ready, _framed(collected, session), strict=True):
            found[index] = table
    return found  # type: ignore[return-value]


def _framed(data: bytes, session: SparkSession) -> list[pa.Table]:
    """The tables `Replan.collectArrow` framed (see there), each as `DataFrame.toArrow` makes it."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = session._jconf.arrowUseLargeVarTypes()  # type: ignore[attr-defined]
    tables, at = [], 0

    def take() -> bytes:
        nonlocal at
        (length,) = struct.unpack_from(">i", data, at)
        at += 4 + length
        return data[at - length : at]

    while at < len(data):
        schema = to_arrow_schema(StructType.fromJson(json.loads(take())), error_on_duplicated_field_names_in_struct=True, prefers_large_types=large)
        (streams,) = struct.unpack_from(">i", data, at)
        at += 4
        batches = [batch for _ in range(streams) for batch in pa.ipc.open_stream(take())]
        tables.append(pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table())
    return tables
