"""The semantics of event sources and event-time views, written out plainly in Python (the oracle of
the event property tests; `tests/viewmodel.py` is the one of the CDC views).

Per source: a round's events are judged against the watermark the round starts with (newest event
time admitted so far minus the source's lateness): older ones are late; of the rest, the first line
of an event id is kept, later ones and ids already kept are duplicates. Views: tumbling and hopping
windows with `window_final` (the window's end at or before the watermark), a join of two streams
within a time bound, and the events the local state must keep.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lakemv.catalog.declarations import SourceTable

HOUR = 3_600_000_000


def micros(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // datetime.resolution


class EventModel:
    """Admitted events per source and each source's clock."""

    def __init__(self, sources: Mapping[str, SourceTable]):
        self.sources = dict(sources)
        self.events: dict[str, dict[Any, dict]] = {name: {} for name in sources}
        self.clocks: dict[str, int | None] = dict.fromkeys(sources)

    def time(self, source: str, event: dict) -> int:
        return micros(event[self.sources[source].event_time or ""])

    def watermark(self, source: str) -> int | None:
        clock = self.clocks[source]
        return None if clock is None else clock - self.sources[source].lateness_micros

    def round(self, lines: Mapping[str, list[str]]) -> int:
        """Apply one round of JSON lines per source; returns how many events were late."""
        marks = {s: self.watermark(s) for s in self.sources}
        late = 0
        for source, rows in lines.items():
            declared = self.sources[source]
            for line in rows:
                event = json.loads(line)
                if marks[source] is not None and self.time(source, event) < marks[source]:
                    late += 1
                    continue
                self.events[source].setdefault(event[declared.event_id or ""], event)
        for source, kept in self.events.items():
            if kept:
                self.clocks[source] = max(self.time(source, e) for e in kept.values())
        return late

    def windows(self, source: str, group: tuple[str, ...], size: int, slide: int | None = None) -> dict[tuple, list[dict]]:
        """Per (group values..., window start): the events in that window (hopping when `slide` < `size`)."""
        slide = slide or size
        found: dict[tuple, list[dict]] = defaultdict(list)
        for event in self.events[source].values():
            t = self.time(source, event)
            for start in range(t - t % slide, t - size, -slide):
                found[(*(event[g] for g in group), start)].append(event)
        return found

    def final(self, source: str, start: int, size: int) -> bool:
        mark = self.watermark(source)
        return mark is not None and start + size <= mark

    def joined(self, left: str, right: str, on: str, low: int, high: int) -> list[tuple[dict, dict]]:
        """Pairs (left event, right event) with equal `on` and left time - right time in [low, high]."""
        by_id = defaultdict(list)
        for event in self.events[right].values():
            by_id[event[on]].append(event)
        return [
            (l, r)
            for l in self.events[left].values()
            for r in by_id.get(l[on], ())
            if low <= self.time(left, l) - self.time(right, r) <= high
        ]

    def kept_since(self, source: str, horizon: int) -> list[Any]:
        """Event ids of `source` at or after `horizon` (what the local state keeps)."""
        key = self.sources[source].event_id or ""
        return sorted(e[key] for e in self.events[source].values() if self.time(source, e) >= horizon)
