"""How a view the local state serves sizes its maintenance and chooses its way (`IndexedView`'s part).

A batch's reached keys are sized by what recomputing them reads (`lakemv.core.batch.choice.sized`): the
keys, plus the rows they read beyond the ~8 a key of the priors reads, each a fraction of a key. The
rows are estimated: a key that holds its anchor's primary key reads what a sample of the reached keys
reads (gathered); a key that may stand for many anchor rows (an expression, a constant, a group: TPC-H
Q5's nation) counts them in the index and each joined table's rows from its parent's by the rows its
lookup finds per parent row (`lakemv.core.state.walk.estimated_rows`, `Store.fanout`). A unit by delta
is sized by the signed rows it adds up. What each way then cost calibrates the next choices (`lakemv.core.batch.choice`).
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from lakemv.core.batch import choice as cost_choice
from lakemv.core.batch.choice import ROW_SHARE, ROWS_PER_KEY, Choice, Costs
from lakemv.core.planner import ViewPlan
from lakemv.core.state.codec import Values
from lakemv.core.state.layout import Route
from lakemv.core.state.store import Store
from lakemv.core.state.walk import estimated_rows, gather
from lakemv.spark.views.together import Gathered

SAMPLED_KEYS = 64  # reached keys whose rows are read to size a batch's keys
SAMPLED_ROWS = 20_000  # (or fewer, once they read this many rows)


class Sized(NamedTuple):
    """What maintaining a batch's keys incrementally is sized by, the rows they read (estimated), and,
    when sizing read every key's rows (a small batch), the keys in the order gathered and their rows."""

    size: int
    rows: float
    gathered: tuple[list[Values], dict[int, list[Values]]] | None = None

    def rows_of(self, ordered: list[Values]) -> dict[int, list[Values]] | None:
        """The rows sizing gathered, when it gathered exactly `ordered`."""
        return self.gathered[1] if self.gathered is not None and self.gathered[0] == ordered else None


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

    def _size(self, keys: set[Values]) -> Sized:
        """What maintaining `keys` incrementally is sized by (`choice.sized`), and the rows they read,
        estimated: a view whose key may stand for many anchor rows counts them in the index and each joined
        table's from its parent's (`lakemv.core.state.walk.estimated_rows`); any other reads the rows of a
        sample of its keys (`_per_key`), which are all of them in a small batch."""
        if not self.by_rows:
            if len(keys) <= SAMPLED_KEYS:  # the sample is every key: their rows, gathered once, serve the batch
                ordered = sorted(keys, key=repr)
                found = gather(self.plan, self.route, self.store.mirrors, self.store, ordered)
                rows = float(sum(len(r) for r in found.values()))
                return Sized(cost_choice.sized(len(keys), rows), rows, (ordered, found))
            rows = self._per_key(keys) * len(keys)
            return Sized(cost_choice.sized(len(keys), rows), rows)
        anchors: dict[int, float] = {}
        for anchor_id, anchor in self.route.anchors.items():
            positions = [self.plan.key_names.index(n) for n in anchor.using]
            anchors[anchor_id] = self.store.count_lookup(anchor.table, anchor.columns, [tuple(k[i] for i in positions) for k in keys], anchor.null_safe)
        rows = estimated_rows(self.plan, self.route, anchors, self.store.fanout)
        return Sized(cost_choice.sized(0, rows), rows)

    def _per_key(self, keys: set[Values]) -> float:
        """The rows a key reads, on average over `SAMPLED_KEYS` of `keys` (picked by a hash of the key,
        whatever order the keys sort in; gathered a few at a time until `SAMPLED_ROWS` rows): the rows of the
        keys a batch reaches, which a sample of a table would not tell (the most active users' keys are
        reached most, and may sort first)."""
        picked = heapq.nsmallest(SAMPLED_KEYS, keys, key=lambda k: zlib.crc32(repr(k).encode()))
        read = done = 0
        for start in range(0, len(picked), 8):
            chunk = picked[start : start + 8]
            read += sum(len(rows) for rows in gather(self.plan, self.route, self.store.mirrors, self.store, chunk).values())
            done += len(chunk)
            if read >= SAMPLED_ROWS:
                break
        return read / done if done else 0.0

    def _rows_sized(self, gathered: Gathered) -> int:
        """The rows `gathered` read (or the signed rows it adds up), as `_size` counts them."""
        read = sum(len(rows) for rows in gathered.rows.values()) + len(gathered.signed or ())
        return cost_choice.sized(0 if self.by_rows else len(gathered.keys), read)

    def _choose(self, keys: set[Values], signed: int | None = None, sized: Sized | None = None) -> Choice:
        """Incremental or whole, by predicted cost (lakemv.core.batch.choice); by delta (`signed`: the
        changed rows it adds up), sized by those rows; `sized`: `_size(keys)`, when known."""
        refused = ("events are enriched as of processing time" if self.plan.as_of_processing
                   else "the state keeps the digests of unsettled rows only" if self.settle is not None else None)  # fmt: skip
        if signed is not None:
            size, rows = cost_choice.sized(0 if self.by_rows else len(keys), signed), None
        else:
            size, rows, _ = sized or self._size(keys)
        choice = self._costs().choose(size, lambda: self.store.view_count(self.plan.name), refused)
        if rows is not None and rows > ROWS_PER_KEY * len(keys):  # sized by rows, not keys: say so
            read = f"~{int(rows):,} rows its {len(keys):,} keys read (estimated)"
            return replace(choice, reason=f"{choice.reason} (incremental sized by the {read}, {ROW_SHARE} to a key beyond {ROWS_PER_KEY} a key)")
        return choice

    def _measured(self, way: str, size: Callable[[], int], seconds: float) -> None:
        """What this way cost this batch, kept for the next choices (a lost record costs nothing but calibration)."""
        observed = self._costs().observe(way, size, seconds)
        if observed is not None:
            self.store.measured(self.plan.name, way, observed)
