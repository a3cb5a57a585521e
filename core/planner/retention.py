"""How long the local state keeps an event source's events: only while some view may read them again. Pure.

A view's need is a list of `(source, offset)`: keep the events whose time is at or after that
source's watermark plus the offset (the watermark: lakemv.core.cdc.events), or None - keep them all.
- a view windowing one event source and reading nothing else reads an event again until its window
  is final: `(itself, -longest window)`;
- a view enriching events as of processing never reads one again: `(itself, 0)`;
- a view of event pairs - keyed by one stream's event id, joined to the other's event by its id -
  within a time bound (`lakemv.core.planner.bounds`: first - second in [low, high]) reads a `first` event
  while a `second` one may still meet it: `(second, low)`, and a `second` event `(first, -high)`;
- any other view over the source (one that joins a table, whose change may reach any event) keeps all.
Every source also keeps what a redelivery may repeat: the events at or after its own watermark.

The same rules say when a view row is settled - no admitted event can reach it again - and the
state drops its digest (`settles`): a row made of one anchor event (enriched as of processing, or
an event pair) once that event is dropped, and a window's row once every event it could hold is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lakemv.core.planner.model import ViewPlan

Need = tuple[str, int]
Settle = tuple[str, str, int]  # (view column, event source, offset): rows whose column < horizon + offset are settled


def needs(plan: ViewPlan, source: str) -> list[Need] | None:
    """What `plan` needs kept of event source `source` (which it reads); None: every event."""
    reads = [o for o in plan.occurrences if o.table == source]
    if plan.as_of_processing and plan.occurrence(plan.anchor).table == source and len(reads) == 1:
        return [(source, 0)]  # read once, as the event being enriched
    final = plan.finality
    if final is not None and final.source == source and plan.tables == (source,) and not plan.links:
        return [(source, -final.size)]  # every read is a window's (a hopping window's branches)
    bound = plan.bound
    if bound is not None and source == bound.first:
        return [(bound.second, bound.low)]
    if bound is not None and source == bound.second:
        return [(bound.first, -bound.high)]
    return None


def source_needs(source: str, plans: Iterable[ViewPlan]) -> list[Need] | None:
    """Every view's need of `source`, and a redelivery's; None when some view keeps every event."""
    found: list[Need] = [(source, 0)]
    for plan in plans:
        if source in plan.tables:
            need = needs(plan, source)
            if need is None:
                return None
            found += need
    return found


def horizon(wanted: list[Need] | None, watermarks: Mapping[str, int | None]) -> int | None:
    """The event time before which a source's events can go, or None while all must stay (a view
    keeps them all, or a watermark it depends on is not known yet)."""
    if wanted is None:
        return None
    marks = [watermarks.get(s) for s, _ in wanted]
    if any(m is None for m in marks):
        return None
    return min(m + offset for m, (_, offset) in zip(marks, wanted, strict=True))  # type: ignore[operator]


def settles(plan: ViewPlan) -> Settle | None:
    """When `plan`'s rows are settled, or None when a row may change at any time (a table's change
    reaches it, or its events are all kept). A window's row holds events in [start, start + size):
    once its start is more than a window before its source's horizon, every event of it is gone and
    any new one is late. A row of one anchor event (its event time passed through as a column) is
    settled once that event is before its source's horizon: its redelivery is late, and the other
    stream of a pair keeps no event that could still meet it (its need of the anchor's source)."""
    final = plan.finality
    if final is not None:
        return (final.column, final.source, -final.size) if needs(plan, final.source) is not None else None
    anchor = plan.occurrence(plan.anchor).table
    if plan.anchor_time is None or plan.branches:
        return None
    if plan.bound is not None or (plan.as_of_processing and needs(plan, anchor) is not None):
        return (plan.anchor_time, anchor, 0)
    return None
