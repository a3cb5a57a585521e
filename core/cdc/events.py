"""Append-only event sources: one plain JSON object per line in, one immutable Change out. Pure Python.

An event is never updated or deleted: it is a `c` change keyed by its event id, at position 0, so a
redelivered event (the same id) never replaces the stored one (a change applies only when its
position is newer). Within a batch the first line of an id wins.

Event time drives the rest. The *clock* of a source is the newest event time it has admitted; its
*watermark* is the clock minus the declared lateness. An event older than the watermark a batch
starts with is late: a dead letter with its reason, or counted, as the source declares. A window
whose end is at or before the watermark can take no more events: it is final.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lakemv.catalog.declarations import SourceTable
from lakemv.core.cdc.coerce import coerce
from lakemv.core.cdc.envelope import Change, Skip, json_line
from lakemv.core.errors import EnvelopeError

LATE_COUNTED = "late event (older than the watermark; counted, as declared)"
DUPLICATE = "duplicate event id in the batch (the first line is kept)"
STORED_DUPLICATE = "duplicate event id (already stored)"


def timestamp_text(micros: int) -> str:
    """Epoch micros as an ISO-8601 UTC timestamp, for messages."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)).isoformat().replace("+00:00", "Z")


def parse_event(text: str | None, source: SourceTable) -> Change | Skip:
    """Parse one line of an event source (a landing line or a Kafka value; None is a tombstone)."""
    event = json_line(text)
    if isinstance(event, Skip):
        return event
    if not isinstance(event, dict):
        raise EnvelopeError(f"not an event: expected a JSON object, found {type(event).__name__}")
    assert source.event_id is not None and source.event_time is not None
    for name, what in ((source.event_id, "event id"), (source.event_time, "event time")):
        if event.get(name) is None:
            raise EnvelopeError(f"missing {what} field {name!r}")
    row = tuple(coerce(column, event.get(column.name)) for column in source.columns)
    names = source.column_names
    unknown: tuple[tuple[str, Any], ...] = ()
    absent: tuple[str, ...] = ()
    if len(event) != len(names) or not all(name in event for name in names):
        unknown = tuple((k, v) for k, v in event.items() if k not in names)
        absent = tuple(n for n in names if n not in event)
    event_time = row[names.index(source.event_time)]
    key = (row[names.index(source.event_id)],)
    return Change(source.name, "c", key, 0, event_time // 1000, row, unknown, absent)


def event_time(change: Change, source: SourceTable) -> int:
    """The event time of an event's change, in epoch micros."""
    assert change.row is not None and source.event_time is not None
    return change.row[source.column_names.index(source.event_time)]


def watermark(clock: int | None, source: SourceTable) -> int | None:
    """The watermark of a source whose newest admitted event time is `clock` (None: no event yet)."""
    return None if clock is None else clock - source.lateness_micros


def watermarks(clocks: Mapping[str, int | None], sources: Mapping[str, SourceTable]) -> dict[str, int | None]:
    """Each event source's watermark, from its clock in `clocks`."""
    return {t: watermark(c, sources[t]) for t, c in clocks.items()}


def lowest(a: int | None, b: int | None) -> int | None:
    """The lower of two watermarks, where None (no watermark yet: every event is on time) is lowest."""
    return None if a is None or b is None else min(a, b)


def late_reason(change: Change, source: SourceTable, mark: int | None) -> str | None:
    """Why `change` is late against watermark `mark`, or None when it is on time."""
    if mark is None:
        return None
    at = event_time(change, source)
    if at >= mark:
        return None
    return (
        f"late event: {source.event_time} {timestamp_text(at)} is older than the watermark {timestamp_text(mark)} "
        f"(newest event time seen minus the allowed lateness of {source.describe_lateness()})"
    )


def first_per_key(changes: Iterable[Change]) -> tuple[list[Change], int]:
    """Per event id the first change, and how many repeats were dropped."""
    kept: dict[tuple[Any, ...], Change] = {}
    repeats = 0
    for change in changes:
        if change.key in kept:
            repeats += 1
        else:
            kept[change.key] = change
    return list(kept.values()), repeats
