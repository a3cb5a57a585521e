"""Aggregates by delta over the local state (lakemv.core.planner.aggregates): a batch's signed rows
update each reached key's aggregate state, and Spark computes the view's rows from the new states, so
a changed row costs the same in a group of ten rows or ten million.

`IndexedView` hands a view here when its plan qualifies and the unit's images carry their signs:

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

from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import DecimalType, DoubleType, FloatType

from lakemv.core.cdc.effects import SIGN
from lakemv.core.planner.aggregates import DeltaPlan, delta_plan
from lakemv.core.sql.deltasql import REDO, ROWS, rows_sql, state_columns, state_sql, step_sql
from lakemv.core.sql.quote import q, spark_string
from lakemv.core.state.codec import Values, rows_of, to_arrow
from lakemv.spark.batch.sync import DIGEST, digest_sql
from lakemv.spark.views.kept import MARK, Run, run_kept
from lakemv.spark.views.together import VIEW, part_schema

if TYPE_CHECKING:
    from lakemv.spark.views.indexed import IndexedView


class DeltaAggregates:
    """One view's aggregates by delta (see the module docstring)."""

    def __init__(self, view: IndexedView, plan: DeltaPlan):
        self.view = view
        self.plan = plan
        self.name = view.plan.name
        self.table = view.plan.occurrence(view.plan.anchor).table
        self.reason: str | None = None  # why not, once analysed (None: usable, or not analysed yet)
        self._analysed = False
        self.decimals: list[int] = []  # the aggregates whose argument is a decimal
        self.types: dict[str, str] = {}  # each state column's Spark type
        self.state_schema: pa.Schema | None = None  # key columns, then state columns
        self.pending: tuple[str, list[tuple[Values, Values | None]]] | None = None  # a unit's new states, stored after its commit
        self._types: dict[str, str] | None = None  # the view table's column types, read at first use

    @classmethod
    def of(cls, view: IndexedView) -> DeltaAggregates | None:
        found = delta_plan(view.plan)
        return None if isinstance(found, str) else cls(view, found)

    # ---- what Spark makes of the view's aggregates -------------------------------------------------
    def usable(self) -> bool:
        """Whether the deltas are exact here: no sum or average of floating-point values (whose sum
        depends on the order it is added in). Analysed by Spark once, over no rows."""
        if not self._analysed:
            self._analysed = True
            self.reason = self._analyse()
        return self.reason is None

    def _analyse(self) -> str | None:
        spark, part = self.view.spark, self.view.store.mirrors[self.table]
        relation = f"_lmv_delta_{self.name}"
        spark.createDataFrame(part_schema(part).empty_table()).createOrReplaceTempView(relation)
        try:
            for i, aggregate in enumerate(self.plan.aggregates):
                if aggregate.arg is None:
                    continue
                kind = spark.sql(f"SELECT {aggregate.arg.replace('_lmv_self.', 'a.')} AS x FROM {relation} AS a").schema["x"].dataType
                if aggregate.kind in ("sum", "avg") and isinstance(kind, DoubleType | FloatType):
                    return f"{aggregate.describe()} adds floating-point values, whose sum depends on the order they are added in"
                if isinstance(kind, DecimalType):
                    self.decimals.append(i)
            schema = spark.sql(state_sql(self.plan, relation, self.decimals)).schema
        finally:
            spark.catalog.dropTempView(relation)
        self.types = {f.name: f.dataType.simpleString() for f in schema.fields if f.name in state_columns(self.plan)}
        from pyspark.sql.pandas.types import to_arrow_schema

        self.state_schema = to_arrow_schema(schema)
        return None

    @property
    def keys(self) -> list[str]:
        return [name for name, _ in self.plan.keys]

    # ---- a unit ------------------------------------------------------------------------------------
    def known(self, write_id: str) -> bool:
        return self.view.store.tallies_known(self.name, self.view.plan.fingerprint, write_id)

    def build(self, write_id: str) -> None:
        """Every key's state from the mirror as the unit left it (Spark), kept in the store."""
        maintainer = self.view.maintainer
        live = maintainer.live[self.table]
        found = self.view.spark.sql(state_sql(self.plan, f"({live})", self.decimals)).toArrow()
        states = rows_of(found, [*self.keys, *state_columns(self.plan)])
        width = len(self.keys)
        self.view.store.set_tallies(self.name, self.view.plan.fingerprint, ((s[:width], s[width:]) for s in states), write_id)

    def signed(self, images: Sequence[Values], signs: Sequence[int], changed: Sequence[list[str] | None] | None, write_id: str) -> list[tuple[Values, int]]:
        """The unit's images of the table the view can see, with their signs; none when the states are
        not known: they are built from the mirror as the unit left it, which holds its changes."""
        if not self.known(write_id):
            self.build(write_id)
            return []
        seen = [self.view.plan.reached_by_change(self.table, columns) for columns in (changed or repeat(None, len(images)))]
        return [(row, sign) for row, sign, visible in zip(images, signs, seen, strict=True) if visible]

    def run(self, keys: Sequence[Values], signed: Sequence[tuple[Values, int]], write_id: str) -> Run:
        """The unit's step as a kept run: old states of `keys` plus the deltas of `signed` (a row's
        values in the part's order, its sign), each key's new state and row with its digest."""
        assert self.state_schema is not None
        store, part = self.view.store, self.view.store.mirrors[self.table]
        old = store.tallies(self.name, keys, write_id)
        states = to_arrow([(*k, *s) for k, s in old.items()], self.state_schema)
        rows = to_arrow([r for r, _ in signed], part_schema(part)).append_column(SIGN, pa.array([s for _, s in signed], type=pa.int32()))
        signed_relation, old_relation, keys_relation = f"{MARK}{self.name}_signed", f"{MARK}{self.name}_states", f"{MARK}{self.name}_keys"
        step = step_sql(self.plan, signed_relation, old_relation, self.decimals, self.types, keys_relation)
        extra = [ROWS, *state_columns(self.plan)[1:], REDO]
        rows_part = rows_sql(self.plan, "n", list(self.view.plan.columns), self._view_types(), self.decimals, extra=extra)
        digest = digest_sql(list(self.view.plan.columns), "b")
        outputs = [*self.view.plan.columns, DIGEST, *extra]
        fields = ", ".join(f"{spark_string(c)}, IF(b.{q(c)} IS NULL, NULL, b.{q(c)})" for c in outputs)
        sql = f"WITH n AS ({step}) SELECT 0 AS {VIEW}, named_struct({fields}) FROM (SELECT b.*, {digest} AS {DIGEST} FROM ({rows_part}) AS b) AS b"
        inputs = {signed_relation: rows, old_relation: states, keys_relation: to_arrow(keys, self.view.key_schema())}
        return (self.view.kept, "delta", sql, inputs)

    def _view_types(self) -> dict[str, str]:
        """The view table's column types (what each row computed from a state is cast to)."""
        if self._types is None:
            schema = self.view.spark.table(self.view.maintainer.table).schema
            self._types = {f.name: f.dataType.simpleString() for f in schema.fields}
        return self._types

    def split(self, result: pa.Table, write_id: str) -> tuple[pa.Table, list[Values], list[Values]]:
        """Of a run's result: the view's rows (those of keys with rows left), the keys it stepped, the
        keys whose extreme was retracted (recomputed by `refresh`); the new states wait in `pending`."""
        stepped = rows_of(result, self.keys)
        redo_flags = result.column(REDO).to_pylist()
        redo = [k for k, r in zip(stepped, redo_flags, strict=True) if r]
        states = rows_of(result, state_columns(self.plan))
        counts = result.column(ROWS).to_pylist()
        self.pending = (write_id, [(k, s if n else None) for k, s, n, r in zip(stepped, states, counts, redo_flags, strict=True) if not r])
        alive = pc.and_(pc.greater(result.column(ROWS), 0), pc.invert(result.column(REDO))) if self.plan.grouped else pc.invert(result.column(REDO))
        return result.filter(alive), [k for k, r in zip(stepped, redo_flags, strict=True) if not r], redo

    def refresh(self, keys: Sequence[Values], anchor_rows: Sequence[Values], write_id: str) -> None:
        """The states of `keys`, recomputed from their groups' rows (`anchor_rows`), to be stored with the unit's."""
        assert self.state_schema is not None
        relation = f"{MARK}{self.name}_rows"
        part = self.view.store.mirrors[self.table]
        found = run_kept(self.view.spark, [(self.view.kept, "delta-state", state_sql(self.plan, relation, self.decimals),
                                            {relation: to_arrow(anchor_rows, part_schema(part))})])[0]  # fmt: skip
        computed = dict(zip(rows_of(found, self.keys), rows_of(found, state_columns(self.plan)), strict=True))
        states = [(k, computed.get(k)) for k in keys]
        if self.pending is not None and self.pending[0] == write_id:
            states = [*self.pending[1], *states]
        self.pending = (write_id, states)

    def commit(self, write_id: str) -> None:
        """Store the unit's new states (after its commit of the view; a replay reads the states before it)."""
        if self.pending is not None and self.pending[0] == write_id:
            self.view.store.put_tallies(self.name, self.pending[1], write_id)
        self.pending = None

    def forget(self) -> None:
        """The view was recomputed whole: its states are built again by the next unit."""
        self.pending = None
        self.view.store.forget_tallies(self.name)
