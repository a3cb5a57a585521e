"""Event streams for the event-time views: page views, profile views, searches and their clicks.

Events are generated in event-time order over a span, then *arrive* in another order, as real
producers deliver them: each a little after it happened (`jitter`: out of order within minutes), a
share of them much later (`late_share`, `late_by`: past any sensible lateness), and a share twice
(`duplicate_share`: a redelivery, same event id). Arrivals are cut into rounds by arrival time; a
round is one landing file per stream (or one Kafka produce), so an ingest per round sees the
stream as a consumer would. Usernames are the GitHub workload's (`user<n>`), so profile views
enrich against its users. Deterministic for a seed.
"""

from __future__ import annotations

import heapq
import json
import os
import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

START_MICROS = 1_795_478_400_000_000  # 2026-11-24T00:00:00Z
SECOND = 1_000_000
QUERIES = ("iceberg merge", "spark window", "duckdb iceberg", "kafka connect", "debezium postgres", "delta cdf")
STREAMS = ("page_views", "profile_views", "searches", "clicks")
CLICK_WITHIN_SECONDS = 75 * 60  # a click follows its search by up to this: some after the hour, no row
TIME = {"page_views": "viewed_at", "profile_views": "viewed_at", "searches": "searched_at", "clicks": "clicked_at"}


@dataclass(frozen=True)
class EventConfig:
    """Size and shape of generated event streams."""

    events: int = 10_000  # page views; profile views and searches are a quarter of that each
    rounds: int = 5
    seed: int = 7
    users: int = 200
    repos: int = 50
    span_seconds: int = 4 * 3600  # event time covered, from START_MICROS
    jitter_seconds: int = 120  # how far after it happened an event usually arrives
    late_share: float = 0.01
    late_by_seconds: int = 3600
    duplicate_share: float = 0.01


@dataclass(frozen=True)
class Arrival:
    """One event as delivered: its stream, when it arrives (micros), its JSON object."""

    stream: str
    at: int
    event: dict[str, Any]


def _iso(micros: int) -> str:
    seconds, fraction = divmod(micros, SECOND)
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=fraction).isoformat().replace("+00:00", "Z")


class EventWorkload:
    """Generates the streams of an `EventConfig` (see the module docstring), lazily: a stream of
    millions of events is never held whole (each stream has a random generator of its own)."""

    def __init__(self, config: EventConfig):
        self.config = config

    def _rng(self, stream: str) -> random.Random:
        return random.Random(f"{self.config.seed}:{stream}")

    def _time(self, rng: random.Random, index: int, count: int) -> int:
        span = self.config.span_seconds * SECOND
        return START_MICROS + (index * span) // max(1, count) + rng.randrange(SECOND)

    def _user(self, rng: random.Random) -> str:
        # Zipf-like: a few users are most of the traffic
        return f"user{int(self.config.users ** rng.random())}"

    def _page_views(self) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        c, rng = self.config, self._rng("page_views")
        for i in range(c.events):
            at = self._time(rng, i, c.events)
            repo = int(c.repos ** rng.random())
            viewer = self._user(rng) if rng.random() < 0.8 else None  # anonymous views
            yield at, "page_views", at, {"view_id": f"pv{i}", "repo_owner": f"user{repo % c.users}", "repo_name": f"repo{repo}",
                                         "viewer": viewer, "viewed_at": _iso(at)}  # fmt: skip

    def _profile_views(self) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        c, rng = self.config, self._rng("profile_views")
        for i in range(c.events // 4):
            at = self._time(rng, i, c.events // 4)
            yield at, "profile_views", at, {"view_id": f"fv{i}", "viewer": self._user(rng), "viewed_user": self._user(rng), "viewed_at": _iso(at)}

    def _searches(self) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        """Searches, each followed by its clicks (keyed by the search's time: a click is never before it)."""
        c, rng = self.config, self._rng("searches")
        searches = c.events // 4
        for i in range(searches):
            at = self._time(rng, i, searches)
            yield at, "searches", at, {"search_id": f"s{i}", "user": self._user(rng), "query": rng.choice(QUERIES), "searched_at": _iso(at)}
            for j in range(rng.choice((0, 1, 1, 2))):  # some clicks come after the hour: no row
                clicked = at + rng.randrange(CLICK_WITHIN_SECONDS) * SECOND
                yield at, "clicks", clicked, {"click_id": f"c{i}.{j}", "search_id": f"s{i}", "result": f"repo{rng.randrange(c.repos)}",
                                              "clicked_at": _iso(clicked)}  # fmt: skip

    def events(self, streams: Collection[str] = STREAMS) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """(stream, event time, event) of the events of `streams`, by event time (a click after its search)."""
        for _key, stream, at, event in self._merged(streams):
            yield stream, at, event

    def _merged(self, streams: Collection[str]) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        made = []
        if "page_views" in streams:
            made.append(self._page_views())
        if "profile_views" in streams:
            made.append(self._profile_views())
        if "searches" in streams or "clicks" in streams:
            made.append(self._searches())
        for item in heapq.merge(*made, key=lambda item: item[0]):
            if item[1] in streams:
                yield item

    def arrivals(self, streams: Collection[str] = STREAMS) -> Iterator[Arrival]:
        """The events of `streams` as they arrive, in arrival order: jittered, some late, some twice.
        An event arrives at or after its time, which is at or after its key in the merge: an arrival
        no later than the next key is final in the order."""
        c, rng = self.config, self._rng("arrivals")
        jitter = max(1, c.jitter_seconds * SECOND)
        pending: list[tuple[int, int, Arrival]] = []
        count = 0
        for key, stream, at, event in self._merged(streams):
            while pending and pending[0][0] <= key:
                yield heapq.heappop(pending)[2]
            delay = rng.randrange(jitter)
            if rng.random() < c.late_share:
                delay += c.late_by_seconds * SECOND
            heapq.heappush(pending, (at + delay, count, Arrival(stream, at + delay, event)))
            count += 1
            if rng.random() < c.duplicate_share:
                again = at + delay + rng.randrange(jitter)
                heapq.heappush(pending, (again, count, Arrival(stream, again, event)))
                count += 1
        while pending:
            yield heapq.heappop(pending)[2]

    def rounds(self, streams: Collection[str] = STREAMS) -> Iterator[dict[str, list[str]]]:
        """The arrivals cut into `rounds` of equal arrival-time span (from the stream's start to its
        latest possible arrival): per stream, its JSON lines. Exactly `rounds` of them, some maybe empty."""
        c = self.config
        last = START_MICROS + (c.span_seconds + 1 + CLICK_WITHIN_SECONDS + 2 * c.jitter_seconds + c.late_by_seconds) * SECOND
        width = (last - START_MICROS) // c.rounds + 1
        number, current = 0, {}
        for a in self.arrivals(streams):
            while number < c.rounds - 1 and a.at >= START_MICROS + (number + 1) * width:
                yield current
                number, current = number + 1, {}
            current.setdefault(a.stream, []).append(json.dumps(a.event, separators=(",", ":")))
        yield current
        for _ in range(number + 1, c.rounds):
            yield {}


def write_round(out: Path, number: int, lines: dict[str, list[str]]) -> int:
    """One round's lines as `out/<stream>/events-<number>.json`, each file written under a hidden
    name and renamed (a running ingest never sees half a file); returns the lines written."""
    written = 0
    for stream, rows in sorted(lines.items()):
        folder = out / stream
        folder.mkdir(parents=True, exist_ok=True)
        hidden = folder / f".events-{number:05d}.json.tmp"
        hidden.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
        os.replace(hidden, folder / f"events-{number:05d}.json")
        written += len(rows)
    return written


def produce_round(bootstrap: str, lines: dict[str, list[str]], topics: dict[str, str] | None = None) -> int:
    """One round's lines to Kafka, a topic per stream (its name, unless `topics` says otherwise)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    sent = 0
    for stream, rows in sorted(lines.items()):
        for row in rows:
            while True:
                try:
                    producer.produce((topics or {}).get(stream, stream), value=row.encode())
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.5)
            producer.poll(0)
            sent += 1
    if producer.flush(60):
        raise RuntimeError("Kafka did not take every event within 60 s")
    return sent
