"""Aggregates by delta of a view over a view (`lakemv.core.planner.dag`): a dashboard over documents
costs the documents that changed, not its groups.

A view that reads one view and qualifies (`lakemv.core.planner.aggregates`) is maintained by scans
(the local state keeps source rows, not view rows), yet its aggregate states live in the local
state's `tallies` as an indexed view's do. Its signed rows are its upstream's rows the unit changed:
the old ones -1, the new ones +1, read back from the tables by the unit's write id
(`lakemv.spark.views.upstream`), so a replay adds the same deltas to the same states.

1. the keys the unit reached (the scan path's key queries) and their states before the unit come
   from the store (a replay reads what its first attempt read); unknown states are built first from
   the upstream view as the unit left it (its deltas are in it, so none is added);
2. Spark adds the deltas to the states and computes each key's row from its new state
   (`lakemv.core.sql.deltasql`), diffed against the view table's rows of those keys in the driver;
3. the diff is written as any; the states go to the store after the view's commit;
4. a retracted extreme (`min`/`max`) makes the unit recompute its keys' groups by scans instead, and
   their states from the upstream's rows of those keys.

Any other write of the view (a whole recompute, a build or backfill, the catch-up after one) forgets
the states, as does a store found out of step with the tables; the next unit builds them again.
"""

from __future__ import annotations

import pyarrow as pa

from lakemv.core.cdc.effects import SIGN
from lakemv.core.planner.aggregates import delta_plan
from lakemv.core.planner.model import SELF
from lakemv.core.sql.deltasql import REDO, ROWS, rows_sql, state_sql, step_sql
from lakemv.core.sql.diff import content_diff
from lakemv.core.sql.quote import q
from lakemv.core.sql.viewsql import old_rows_sql
from lakemv.core.state.codec import rows_of, to_arrow
from lakemv.core.state.store import Store
from lakemv.spark.views.delta import DeltaAggregates


class ViewDelta(DeltaAggregates):
    """Aggregates by delta of a view maintained by scans over one view (see the module docstring)."""

    @classmethod
    def of(cls, maintainer, store: Store) -> ViewDelta | None:  # noqa: ANN001 (a ViewMaintainer: it imports this module)
        plan = maintainer.plan
        if not plan.inputs or set(plan.tables) != {v.name for v in plan.inputs}:
            return None  # (a view over tables is the local state's, `lakemv.spark.views.delta.IndexedDelta`)
        found = delta_plan(plan)
        if isinstance(found, str) or found.rows is not None:
            return None  # (a join of views: its upstreams' changed rows are not one side of it)
        return cls(maintainer.spark, store, plan, found, maintainer.table, lambda: maintainer.live[plan.tables[0]])

    def diff(self, keys: pa.Table, signed: str, write_id: str) -> pa.Table | None:
        """The diff (`content_diff`'s shape) of the view's rows for `keys` (the keys the unit reached),
        by delta over relation `signed` (the upstream's changed rows, each with its sign); None when a
        group lost its extreme (the caller recomputes the groups, then `refresh`es their states)."""
        if not self.known(write_id):
            self.build(write_id)
            signed = f"(SELECT *, 1 AS {SIGN} FROM ({self.live()}) WHERE FALSE)"  # its changes are in the states built
        spark, key_names = self.spark, list(self.view_plan.key_names)
        wanted = rows_of(keys, key_names)
        old = self.store.tallies(self.name, wanted, write_id)
        states, keyed = f"_lmv_{self.name}_states", f"_lmv_{self.name}_keys"
        relations = {states: to_arrow([(*k, *s) for k, s in old.items()], self.state_schema), keyed: keys.select(key_names)}
        try:
            for relation, rows in relations.items():
                spark.createDataFrame(rows).createOrReplaceTempView(relation)
            step = step_sql(self.plan, signed, states, self.decimals, self.types, keyed, self.floats)
            extra = [ROWS, *self.state_columns()[1:], REDO]
            result = spark.sql(rows_sql(self.plan, f"({step})", list(self.view_plan.columns), self.view_types(), self.decimals, extra=extra,
                                        floats=self.floats)).toArrow()  # fmt: skip
            rows, _, redo = self.split(result, write_id)
            if redo:
                self.pending = None
                return None
            new = rows.select(list(self.view_plan.columns))
            old_rows = spark.sql(old_rows_sql(self.view_plan, self.view_table, keyed)).toArrow()
        finally:
            for relation in relations:
                spark.catalog.dropTempView(relation)
        return content_diff(new, old_rows, key_names, new.schema)  # (each column cast to the view's type by `rows_sql`)

    def refresh(self, keys: pa.Table, relation: str, write_id: str) -> None:
        """The states of `keys` (also in relation `relation`), from the upstream's rows as the unit left
        them (their groups were recomputed: an extreme was retracted), stored by `commit` after the view's."""
        on = " AND ".join(f"k.{q(name)} <=> {expr.replace(f'{SELF}.', 'v.')}" for name, expr in self.plan.keys)
        rows = f"(SELECT v.* FROM ({self.live()}) AS v LEFT SEMI JOIN {relation} AS k ON {on})"
        found = self.spark.sql(state_sql(self.plan, rows, self.decimals, self.floats)).toArrow()
        self.pending = (write_id, self.states_of(found, rows_of(keys, self.keys)))
