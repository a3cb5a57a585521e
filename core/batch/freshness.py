"""How fresh each view has been: how long the changes its tables received waited before the view
showed them, read off the ledger's rows. Pure.

A ledger row (`lakemv.core.batch.records`) says which tables a unit changed, the source time of the
newest change it applied to each, and which views it maintained. A view shows a unit's changes when
a unit maintains it: at once for a view maintained every batch, at its due batch for a view with a
freshness budget (`lakemv.core.batch.deferral`). So at each unit that maintains a view after changes
reached its tables, the view's lag is the unit's end minus the source time of the oldest unit's
changes still waiting (each unit counted by its newest change: a unit's own spread is not in the
ledger). Between such units nothing waits, whatever the clock says: an idle source is not a stale view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LedgerRow:
    """What freshness needs of one ledger row: when it finished, the newest source time it applied per
    table it changed (epoch seconds; None when the table's changes carried none), the views it maintained."""

    finished_at: float
    tables: Mapping[str, float | None]
    views: frozenset[str]


@dataclass(frozen=True)
class Freshness:
    """One view's lag: at each unit that showed changes (epoch seconds, seconds waited), and now."""

    view: str
    budget: float | None  # its declared budget, seconds (None: maintained every batch)
    points: tuple[tuple[float, float], ...]
    lag: float  # now: how long the oldest change it does not show yet has waited (0: it shows every change)

    @property
    def behind(self) -> bool:
        """Whether it missed its budget now or at a unit of the window (no budget: never)."""
        if self.budget is None:
            return False
        return self.lag > self.budget or any(lag > self.budget for _, lag in self.points)

    @property
    def worst(self) -> float:
        return max([self.lag, *(lag for _, lag in self.points)])


def view_freshness(
    rows: Iterable[LedgerRow],
    reads: Mapping[str, Sequence[str]],
    budgets: Mapping[str, float | None],
    now: float,
    since: float,
) -> dict[str, Freshness]:
    """Per view (name -> the tables it reads), its lag at each unit since `since` that showed it
    changes, and now. `rows` may start before `since` (changes still waiting then count)."""
    ordered = sorted(rows, key=lambda r: r.finished_at)
    found = {}
    for view, tables in reads.items():
        budget = budgets.get(view)
        waiting: float | None = None  # source time of the oldest unit's changes the view does not show yet
        points = []
        for row in ordered:
            touched = [ts for t, ts in row.tables.items() if t in tables and ts is not None]
            if touched and waiting is None:
                waiting = max(touched)
            if waiting is not None and (budget is None or view in row.views):
                if row.finished_at >= since:
                    points.append((row.finished_at, max(0.0, row.finished_at - waiting)))
                waiting = None
        found[view] = Freshness(view, budget, tuple(points), max(0.0, now - waiting) if waiting is not None else 0.0)
    return found
