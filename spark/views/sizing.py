"""How a view the local state serves sizes its maintenance and chooses its way (`IndexedView`'s part).

A batch's reached keys are sized by what recomputing them reads: the keys, or, when more, the rows they
read as keys of `ROWS_PER_KEY` - their anchor rows counted by the index (a key that is an expression or a
constant may stand for a month of rows) and each joined table's estimated from its parent's by the rows
per value of its lookup (`lakemv.core.state.walk.estimated_rows`, `Store.fanout`: a join that fans out,
TPC-H Q5's nation to its customers, orders and line items). A unit by delta is sized by the signed rows
it adds up. What each way then cost calibrates the next choices (`lakemv.core.batch.choice`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lakemv.core.batch import choice as cost_choice
from lakemv.core.batch.choice import ROWS_PER_KEY, Choice, Costs
from lakemv.core.planner import ViewPlan
from lakemv.core.state.codec import Values
from lakemv.core.state.layout import Route
from lakemv.core.state.store import Store
from lakemv.core.state.walk import estimated_rows
from lakemv.spark.views.together import Gathered


class Sizing:
    """The sizing and the choice of `IndexedView` (its plan, route, store and costs)."""

    plan: ViewPlan
    route: Route
    store: Store
    by_rows: bool  # a key may stand for many anchor rows: sized by rows, never by keys
    settle: str | None
    costs: Costs | None

    def _costs(self) -> Costs:
        if self.costs is None:
            self.costs = Costs(cost_choice.PRIORS["indexed"], self.store.costs(self.plan.name))
        return self.costs

    def _size(self, keys: set[Values]) -> tuple[int, float]:
        """What maintaining `keys` incrementally is sized by, and the rows they read (estimated: their anchor
        rows, counted by the index when a key may stand for several, and each joined table's by its rows per
        value, `lakemv.core.state.walk.estimated_rows`): the keys, or those rows as keys of `ROWS_PER_KEY`
        when more (a key may stand for a month of rows; a join may fan out: TPC-H Q5's nation)."""
        anchors: dict[int, float] = {}
        for anchor_id, anchor in self.route.anchors.items():
            positions = [self.plan.key_names.index(n) for n in anchor.using]
            anchors[anchor_id] = (self.store.count_lookup(anchor.table, anchor.columns, [tuple(k[i] for i in positions) for k in keys], anchor.null_safe)
                                  if self.by_rows else len(keys))  # fmt: skip
        rows = estimated_rows(self.plan, self.route, anchors, self.store.fanout)
        return max(0 if self.by_rows else len(keys), -(-int(rows) // ROWS_PER_KEY)), rows

    def _rows_sized(self, gathered: Gathered) -> int:
        """The rows `gathered` read (or the signed rows it adds up), as `_size` counts them."""
        read = sum(len(rows) for rows in gathered.rows.values()) + len(gathered.signed or ())
        return max(0 if self.by_rows else len(gathered.keys), -(-read // ROWS_PER_KEY))

    def _choose(self, keys: set[Values], signed: int | None = None, sized: tuple[int, float] | None = None) -> Choice:
        """Incremental or whole, by predicted cost (lakemv.core.batch.choice); by delta (`signed`: the
        changed rows it adds up), sized by those rows; `sized`: `_size(keys)`, when known."""
        refused = ("events are enriched as of processing time" if self.plan.as_of_processing
                   else "the state keeps the digests of unsettled rows only" if self.settle is not None else None)  # fmt: skip
        if signed is not None:
            size, rows = max(0 if self.by_rows else len(keys), -(-signed // ROWS_PER_KEY)), None
        else:
            size, rows = sized or self._size(keys)
        choice = self._costs().choose(size, lambda: self.store.view_count(self.plan.name), refused)
        if rows is not None and size > len(keys):  # sized by rows, not keys: say so
            read = f"~{int(rows):,} rows its {len(keys):,} keys read (estimated)"
            return replace(choice, reason=f"{choice.reason} (incremental sized by the {read}, {ROWS_PER_KEY} to a key)")
        return choice

    def _measured(self, way: str, size: Callable[[], int], seconds: float) -> None:
        """What this way cost this batch, kept for the next choices (a lost record costs nothing but calibration)."""
        observed = self._costs().observe(way, size, seconds)
        if observed is not None:
            self.store.measured(self.plan.name, way, observed)
