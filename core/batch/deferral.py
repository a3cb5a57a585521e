"""Views maintained once per freshness budget instead of every batch: which ones may wait, and when. Pure.

A view declared with `-- @freshness: 30 seconds` (lakemv.core.planner.definitions) that the local state
serves defers its maintenance: each batch adds the view keys it reaches to the view's pending keys in
the state (`lakemv.core.state.store.Store.defer`, with the time the oldest of them started waiting),
and the view is maintained - its pending keys and the batch's recomputed, the diff committed - in the
first batch after which the next one would come too late for the budget (`due`). The pending keys
leave the state in the transaction that records the view's new digests, so a crash anywhere in
between leaves them pending: they are recomputed again and the content diff writes nothing twice.
When the state does not know what is pending (it was rebuilt, or the view is new to it), the view is
due at once and diffed whole.

A backlog waits the same way, whatever the budget: while more of it follows (a later unit of the same
batch, lakemv.core.batch.units; in a once run from landing files, files no batch has taken yet),
every view that can wait only adds the keys it reaches to its pending keys, and the unit that takes
the last of it maintains it once over all of them - or recomputes it whole, when that is cheaper
(lakemv.core.batch.choice). A running stream's view is then fresh at the end of each batch, as
before, and a backlog of N units costs it one maintenance instead of N. Once a view's pending keys are
so many that maintaining them would cost more than recomputing it whole, the state forgets them (it
no longer knows what is pending: the view is diffed whole when due), and the units after that one do
not look for the keys they reach: that walk was most of a held view's cost per unit.

Freshness here is processing time: the budget bounds how long a change that reached the view waits
in the state before the view shows it, provided batches keep coming (an idle stream waits with it).
"""

from __future__ import annotations

from collections.abc import Sequence

from lakemv.core.durations import format_duration
from lakemv.core.planner.model import ViewPlan
from lakemv.core.state.book import Pending
from lakemv.core.state.layout import route

# How a batch line says why a unit left a view's keys pending.
HELD = "pending until the batch's last unit"
WHOLE_DUE = "recomputed whole at the batch's last unit: its keys are not looked for"


def refusal(plan: ViewPlan, indexed: bool) -> str | None:
    """Why `plan`, which declares a budget, is maintained in every batch anyway (None: it may wait)."""
    if not indexed:
        return "the local state does not serve it (its keys cannot wait there)"
    if plan.finality is not None or plan.bound is not None or plan.as_of_processing:
        return "it reads events the state drops once the watermark passes them (windows, time bounds, as-of enrichment)"
    return None


def deferrable(plan: ViewPlan, indexed: bool) -> bool:
    """Whether `plan` waits for its budget: it declares one and nothing refuses it."""
    return plan.definition.freshness is not None and refusal(plan, indexed) is None


def budget(plan: ViewPlan, local_state: bool) -> int | None:
    """The budget (micros) `plan` waits for when ingest keeps a local state (`local_state`), else None."""
    return plan.definition.freshness if local_state and deferrable(plan, route(plan).indexed) else None


def period(starts: Sequence[int]) -> int:
    """How long, in microseconds, until the next batch is expected: the last gap between batch starts
    (`starts`, epoch micros, oldest first), 0 before there are two."""
    return max(0, starts[-1] - starts[-2]) if len(starts) >= 2 else 0


def due(since: int | None, now: int, budget: int, gap: int) -> bool:
    """Whether a view whose oldest pending key waits since `since` (epoch micros; None: the state does
    not know what is pending) is maintained in the batch starting at `now`: the next batch, expected
    `gap` micros later, would show that key past the `budget`."""
    return since is None or now + gap >= since + budget


def is_due(pending: Pending, now: int, budget: int, gap: int) -> bool:
    """`due` for a view's `pending` keys at a batch starting at `now`: with none waiting yet, the
    batch's own keys would start waiting `now`; a state that does not know what waits: at once."""
    return not pending.known or due(waiting_since(pending, now), now, budget, gap)


def waiting_since(pending: Pending, now: int) -> int:
    """Since when the view's oldest key waits, `now` when none does yet."""
    return pending.since if pending.since is not None else now


def waiting(since: int | None, now: int, budget: int) -> str:
    """How a batch line says a deferred view's wait: its pending keys' age against the budget."""
    age = 0 if since is None else max(0, now - since)
    return f"oldest pending {format_duration(age // 1_000_000 * 1_000_000)} of {format_duration(budget)}"
