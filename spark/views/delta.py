"""Aggregates by delta over the local state (lakemv.core.planner.aggregates): a batch's signed rows
update each reached key's aggregate state, and Spark computes the view's rows from the new states, so
a changed row costs the same in a group of ten rows or ten million.

`DeltaAggregates` is what every view by delta shares (the analysis, the states' build and storage);
`IndexedDelta` serves a view the local state maintains, fed the unit's images of its mirror (a view
over a view is `lakemv.spark.views.viewdelta`'s). `IndexedView` hands a view here when its plan
qualifies and the unit's images carry their signs:

1. the keys' states before the unit come from the store (`lakemv.core.state.tallies`: a replay reads
   what its first attempt read); unknown states are built first from the mirror (its rows after the
   unit: the unit's own deltas are in them, so none is added);
2. Spark adds the signed rows' deltas to the states and computes each key's row from its new state
   (`lakemv.core.sql.deltasql`), with its digest, as the view's own recompute would give them;
3. a key whose group lost the row holding its extreme (`min`/`max`) is recomputed from its group's
   rows instead (the retraction fallback), state included;
4. the rows are diffed and written as any recompute's; the states go to the store after the commit.

A view it serves may still be recomputed by groups (its keys waited for a freshness budget, or a
backlog held them): their states are then computed from the same rows (`refresh`); a whole recompute
forgets the states (the next unit builds them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DecimalType, DoubleType, FloatType

from lakemv.core.cdc.effects import SIGN
from lakemv.core.planner.aggregates import DeltaPlan, delta_plan
from lakemv.core.planner.model import ViewPlan
from lakemv.core.sql.deltasql import REDO, ROWS, rows_sql, state_columns, state_sql, step_sql
from lakemv.core.sql.quote import q, spark_string
from lakemv.core.state.codec import Values, rows_of, to_arrow
from lakemv.core.state.layout import Route
from lakemv.core.state.store import Store
from lakemv.core.state.walk import changed_rows, estimated_reach, reached_anchors, sides
from lakemv.spark.batch.sync import DIGEST, digest_sql
from lakemv.spark.views.kept import MARK, Run, run_kept
from lakemv.spark.views.together import VIEW, part_schema

if TYPE_CHECKING:
    from lakemv.spark.views.indexed import IndexedView

_OCCURRENCE = re.compile(r"\b_lmv_occ_(\d+)\b")


@dataclass(frozen=True)
class Analysis:
    """What Spark makes of a view's aggregates."""

    decimals: list[int]  # the aggregates whose argument is a decimal
    floats: list[int]  # the sums and averages of floating-point values (compensated: `deltasql`)
    types: dict[str, str]  # each state column's Spark type
    schema: pa.Schema  # key columns, then state columns


class DeltaAggregates:
    """One view's aggregates by delta, wherever its signed rows come from: the analysis of its
    aggregates, the states' build, the split of a step's result, the states stored after the commit.
    `IndexedDelta` feeds it the unit's images of a mirror, `lakemv.spark.views.viewdelta.ViewDelta`
    the changed rows of a view it reads."""

    def __init__(self, spark: SparkSession, store: Store, view: ViewPlan, plan: DeltaPlan, view_table: str, live: Callable[[], str]):
        self.spark = spark
        self.store = store
        self.view_plan = view
        self.plan = plan
        self.name = view.name
        self.table = view.occurrence(view.anchor).table  # the one table (or view) it reads
        self.view_table = view_table
        self.live = live  # SQL of the live rows of `table`
        self.pending: tuple[str, list[tuple[Values, Values | None]]] | None = None  # a unit's new states, stored after its commit
        self._types: dict[str, str] | None = None  # the view table's column types, read at first use

    # ---- what Spark makes of the view's aggregates -------------------------------------------------
    @cached_property
    def analysis(self) -> Analysis:
        """The types of the aggregates' arguments and what the state keeps of each, analysed by Spark at
        first use (analysis only: nothing runs)."""
        live = f"({self.live()})"
        decimals, floats = [], []
        for i, aggregate in enumerate(self.plan.aggregates):
            if aggregate.arg is None:
                continue
            kind = self.spark.sql(f"SELECT {aggregate.arg.replace('_lmv_self.', 'a.')} AS x FROM {live} AS a").schema["x"].dataType
            if aggregate.kind in ("sum", "avg") and isinstance(kind, DoubleType | FloatType):
                floats.append(i)
            if isinstance(kind, DecimalType):
                decimals.append(i)
        schema = self.spark.sql(state_sql(self.plan, live, decimals, floats)).schema
        kept = state_columns(self.plan, floats)
        types = {f.name: f.dataType.simpleString() for f in schema.fields if f.name in kept}
        return Analysis(decimals, floats, types, to_arrow_schema(schema))

    @property
    def decimals(self) -> list[int]:
        return self.analysis.decimals

    @property
    def floats(self) -> list[int]:
        return self.analysis.floats

    @property
    def types(self) -> dict[str, str]:
        return self.analysis.types

    @property
    def state_schema(self) -> pa.Schema:
        return self.analysis.schema

    def state_columns(self) -> list[str]:
        return state_columns(self.plan, self.floats)

    @property
    def keys(self) -> list[str]:
        return [name for name, _ in self.plan.keys]

    # ---- a unit ------------------------------------------------------------------------------------
    def known(self, write_id: str) -> bool:
        return self.store.tallies_known(self.name, self.view_plan.fingerprint, write_id)

    def build(self, write_id: str) -> None:
        """Every key's state from the table as the unit left it (Spark), kept in the store."""
        found = self.spark.sql(state_sql(self.plan, f"({self.live()})", self.decimals, self.floats)).toArrow()
        states = rows_of(found, [*self.keys, *self.state_columns()])
        width = len(self.keys)
        self.store.set_tallies(self.name, self.view_plan.fingerprint, ((s[:width], s[width:]) for s in states), write_id)

    def states_of(self, found: pa.Table, keys: Sequence[Values]) -> list[tuple[Values, Values | None]]:
        """Each of `keys` with its state in `found` (`state_sql`'s rows; None: the key has no rows)."""
        computed = dict(zip(rows_of(found, self.keys), rows_of(found, self.state_columns()), strict=True))
        return [(k, computed.get(k)) for k in keys]

    def view_types(self) -> dict[str, str]:
        """The view table's column types (what each row computed from a state is cast to)."""
        if self._types is None:
            self._types = {f.name: f.dataType.simpleString() for f in self.spark.table(self.view_table).schema.fields}
        return self._types

    def split(self, result: pa.Table, write_id: str) -> tuple[pa.Table, list[Values], list[Values]]:
        """Of a step's result: the view's rows (those of keys with rows left), the keys it stepped, the
        keys whose extreme was retracted (their groups recomputed instead); the new states wait in `pending`."""
        stepped = rows_of(result, self.keys)
        redo_flags = result.column(REDO).to_pylist()
        redo = [k for k, r in zip(stepped, redo_flags, strict=True) if r]
        states = rows_of(result, self.state_columns())
        counts = result.column(ROWS).to_pylist()
        self.pending = (write_id, [(k, s if n else None) for k, s, n, r in zip(stepped, states, counts, redo_flags, strict=True) if not r])
        alive = pc.and_(pc.greater(result.column(ROWS), 0), pc.invert(result.column(REDO))) if self.plan.grouped else pc.invert(result.column(REDO))
        return result.filter(alive), [k for k, r in zip(stepped, redo_flags, strict=True) if not r], redo

    def commit(self, write_id: str) -> None:
        """Store the unit's new states (after its commit of the view; a replay reads the states before it)."""
        if self.pending is not None and self.pending[0] == write_id:
            self.store.put_tallies(self.name, self.pending[1], write_id)
        self.pending = None

    def forget(self) -> None:
        """The view was recomputed whole: its states are built again by the next unit."""
        self.pending = None
        self.store.forget_tallies(self.name)


@dataclass(frozen=True)
class Sides:
    """A join's signed rows, as the rows each occurrence reads for the anchor rows the unit reached,
    before it (each joined row -1) and after it (+1) (`lakemv.core.state.walk.sides`)."""

    before: Mapping[int, list[Values]]
    after: Mapping[int, list[Values]]

    def __len__(self) -> int:
        return sum(len(rows) for side in (self.before, self.after) for rows in side.values())


def over_occurrences(sql: str, relations: Mapping[int, str]) -> str:
    """`sql` with each occurrence (OCCURRENCE) read from its relation in `relations`."""
    return _OCCURRENCE.sub(lambda m: relations[int(m.group(1))], sql)


class IndexedDelta(DeltaAggregates):
    """Aggregates by delta of a view the local state serves: its signed rows are the unit's images of
    its mirror, or for a join each reached anchor row's joined row before and after the unit."""

    def __init__(self, view: IndexedView, plan: DeltaPlan, grain: Route | None):
        live = view.maintainer.live
        if plan.rows is None:
            table = view.plan.occurrence(view.plan.anchor).table
            super().__init__(view.spark, view.store, view.plan, plan, view.maintainer.table, lambda: live[table])
        else:
            tables = {o.id: o.table for o in view.plan.occurrences}
            rows = plan.rows
            super().__init__(view.spark, view.store, view.plan, plan, view.maintainer.table,
                             lambda: over_occurrences(rows, {o: f"({live[t]})" for o, t in tables.items()}))  # fmt: skip
        self.view = view
        # the plan and route its changed rows walk to the rows whose joined rows they move: the view's, or
        # rooted at its grain when its key's joins fan out (`ViewPlan.at_grain`)
        self.walk_plan = view.plan if plan.grain is None else view.plan.at_grain()
        self.walk_route = view.route if grain is None else grain

    @classmethod
    def of(cls, view: IndexedView, grain: Route | None) -> IndexedDelta | None:
        """Its aggregates by delta, when they qualify; `grain`: its route from its grain
        (`lakemv.core.state.layout.grain_route`), which a plan over a grain walks."""
        found = delta_plan(view.plan)
        if isinstance(found, str) or (found.grain is not None and grain is None):
            return None
        delta = cls(view, found, grain if found.grain is not None else None)
        return delta if delta.walk_route.indexed else None

    def estimate(self, images: Mapping[str, Sequence[Values]]) -> float:
        """About how many signed rows the unit's images make, before any is read: the images of its table,
        or for a join its rows (each occurrence's) before and after for each row its images reach
        (`lakemv.core.state.walk.estimated_reach`)."""
        if self.plan.rows is None:
            return float(len(images.get(self.table, ())))
        counts = {table: len(rows) for table, rows in images.items()}
        return 2.0 * len(self.view_plan.occurrences) * estimated_reach(self.walk_plan, self.walk_route, counts, self.store.fanout)

    def ready(self, signs: Mapping[str, object] | None, reached: Collection[str]) -> bool:
        """Whether the unit's images carry the signs the deltas add up (of every table reached)."""
        wanted = [self.table] if self.plan.rows is None else list(reached)
        return signs is not None and all(t in signs for t in wanted)

    def signed(
        self, raw: Mapping[str, Sequence[Values]], signs: Mapping[str, Sequence[int]], reached: Mapping[str, list[Values]],
        changed: Sequence[list[str] | None] | None, write_id: str,
    ) -> list[tuple[Values, int]] | Sides:
        """The unit's images of the table the view can see, with their signs (`raw`: every changed
        table's images; `changed`: the columns each image of the view's table changed); for a join, the
        rows the joined rows of the anchor rows reached (from `reached`, the images the view can see)
        read before and after the unit. No rows when the states are not known: they are built from the
        tables as the unit left them, which hold its changes."""
        if not self.known(write_id):
            self.build(write_id)
            return [] if self.plan.rows is None else Sides({}, {})
        if self.plan.rows is not None:
            parts = self.store.mirrors
            anchors = reached_anchors(self.walk_plan, self.walk_route, parts, self.store, reached)
            tables = [t for t in self.view_plan.tables if t in signs]
            before, after = sides(self.walk_plan, self.walk_route, parts, self.store, anchors, changed_rows(parts, {t: raw[t] for t in tables}, signs))
            return Sides(before, after)
        images = raw[self.table]
        seen = [self.view_plan.reached_by_change(self.table, columns) for columns in (changed or repeat(None, len(images)))]
        return [(row, sign) for row, sign, visible in zip(images, signs[self.table], seen, strict=True) if visible]

    def run(self, keys: Sequence[Values], signed: Sequence[tuple[Values, int]] | Sides, write_id: str) -> Run:
        """The unit's step as a kept run: old states of `keys` plus the deltas of `signed` (a row's
        values in the part's order, its sign; or a join's `Sides`), each key's new state and row with its digest."""
        old = self.store.tallies(self.name, keys, write_id)
        states = to_arrow([(*k, *s) for k, s in old.items()], self.state_schema)
        signed_relation, old_relation, keys_relation = f"{MARK}{self.name}_signed", f"{MARK}{self.name}_states", f"{MARK}{self.name}_keys"
        inputs = {old_relation: states, keys_relation: to_arrow(keys, self.view.key_schema())}
        if isinstance(signed, Sides):
            sides_sql = []
            for side, found, sign in (("new", signed.after, 1), ("old", signed.before, -1)):
                relations = self._relations(f"{MARK}{self.name}_{side}", found, inputs)
                sides_sql.append(f"SELECT *, {sign} AS {SIGN} FROM ({over_occurrences(self.plan.rows or '', relations)})")
            signed_relation = f"({' UNION ALL '.join(sides_sql)})"
        else:
            part = self.store.mirrors[self.table]
            inputs[signed_relation] = to_arrow([r for r, _ in signed], part_schema(part)).append_column(SIGN, pa.array([s for _, s in signed], type=pa.int32()))
        step = step_sql(self.plan, signed_relation, old_relation, self.decimals, self.types, keys_relation, self.floats)
        extra = [ROWS, *self.state_columns()[1:], REDO]
        rows_part = rows_sql(self.plan, "n", list(self.view_plan.columns), self.view_types(), self.decimals, extra=extra, floats=self.floats)
        digest = digest_sql(list(self.view_plan.columns), "b")
        outputs = [*self.view_plan.columns, DIGEST, *extra]
        fields = ", ".join(f"{spark_string(c)}, IF(b.{q(c)} IS NULL, NULL, b.{q(c)})" for c in outputs)
        sql = f"WITH n AS ({step}) SELECT 0 AS {VIEW}, named_struct({fields}) FROM (SELECT b.*, {digest} AS {DIGEST} FROM ({rows_part}) AS b) AS b"
        return (self.view.kept, "delta", sql, inputs)

    def _relations(self, prefix: str, found: Mapping[int, Sequence[Values]], inputs: dict[str, pa.Table]) -> dict[int, str]:
        """Each occurrence's rows in `found` as a relation `<prefix>_<id>` (added to `inputs`)."""
        relations = {}
        for occ in self.view_plan.occurrences:
            relations[occ.id] = f"{prefix}_{occ.id}"
            inputs[relations[occ.id]] = to_arrow(list(found.get(occ.id, [])), part_schema(self.store.mirrors[occ.table]))
        return relations

    def refresh(self, keys: Sequence[Values], rows: Mapping[int, Sequence[Values]], write_id: str) -> None:
        """The states of `keys`, recomputed from the rows their groups read (`rows`: per occurrence), to
        be stored with the unit's."""
        inputs: dict[str, pa.Table] = {}
        if self.plan.rows is None:
            relation = f"{MARK}{self.name}_rows"
            inputs[relation] = to_arrow(list(rows.get(self.view_plan.anchor, [])), part_schema(self.store.mirrors[self.table]))
        else:
            relation = f"({over_occurrences(self.plan.rows, self._relations(f'{MARK}{self.name}_group', rows, inputs))})"
        found = run_kept(self.spark, [(self.view.kept, "delta-state", state_sql(self.plan, relation, self.decimals, self.floats), inputs)])[0]
        states = self.states_of(found, keys)
        if self.pending is not None and self.pending[0] == write_id:
            states = [*self.pending[1], *states]
        self.pending = (write_id, states)
