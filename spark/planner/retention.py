"""How long the local state keeps an event source's events: only while some view may read them again. Pure.

A view's need is a list of `(source, offset)`: keep the events whose time is at or after that
source's watermark plus the offset (the watermark: spark.events), or None - keep them all.
- a view windowing one event source and reading nothing else reads an event again until its window
  is final: `(itself, -longest window)`;
- a view enriching events as of processing never reads one again: `(itself, 0)`;
- a view of event pairs - keyed by one stream's event id, joined to the other's event by its id -
  within a time bound (`spark.planner.bounds`: first - second in [low, high]) reads a `first` event
  while a `second` one may still meet it: `(second, low)`, and a `second` event `(first, -high)`;
- any other view over the source (one that joins a table, whose change may reach any event) keeps all.
Every source also keeps what a redelivery may repeat: the events at or after its own watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spark.planner.model import ViewPlan

Need = tuple[str, int]


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
