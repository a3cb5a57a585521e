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

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

START_MICROS = 1_795_478_400_000_000  # 2026-11-24T00:00:00Z
SECOND = 1_000_000
QUERIES = ("iceberg merge", "spark window", "duckdb iceberg", "kafka connect", "debezium postgres", "delta cdf")
STREAMS = ("page_views", "profile_views", "searches", "clicks")
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
    """Generates the streams of an `EventConfig` (see the module docstring)."""

    def __init__(self, config: EventConfig):
        self.config = config
        self.rng = random.Random(config.seed)

    def _time(self, index: int, count: int) -> int:
        span = self.config.span_seconds * SECOND
        return START_MICROS + (index * span) // max(1, count) + self.rng.randrange(SECOND)

    def _user(self) -> str:
        # Zipf-like: a few users are most of the traffic
        return f"user{int(self.config.users ** self.rng.random())}"

    def events(self) -> list[tuple[str, int, dict[str, Any]]]:
        """(stream, event time, event) of every event, in event-time order per stream."""
        c, rng = self.config, self.rng
        made: list[tuple[str, int, dict[str, Any]]] = []
        for i in range(c.events):
            at = self._time(i, c.events)
            repo = int(c.repos ** rng.random())
            viewer = self._user() if rng.random() < 0.8 else None  # anonymous views
            made.append(("page_views", at, {"view_id": f"pv{i}", "repo_owner": f"user{repo % c.users}", "repo_name": f"repo{repo}",
                                            "viewer": viewer, "viewed_at": _iso(at)}))  # fmt: skip
        for i in range(c.events // 4):
            at = self._time(i, c.events // 4)
            made.append(("profile_views", at, {"view_id": f"fv{i}", "viewer": self._user(), "viewed_user": self._user(), "viewed_at": _iso(at)}))
        searches = c.events // 4
        for i in range(searches):
            at = self._time(i, searches)
            made.append(("searches", at, {"search_id": f"s{i}", "user": self._user(), "query": rng.choice(QUERIES), "searched_at": _iso(at)}))
            for j in range(rng.choice((0, 1, 1, 2))):  # some clicks come after the hour: no row
                clicked = at + rng.randrange(75 * 60) * SECOND
                made.append(("clicks", clicked, {"click_id": f"c{i}.{j}", "search_id": f"s{i}", "result": f"repo{rng.randrange(c.repos)}",
                                                 "clicked_at": _iso(clicked)}))  # fmt: skip
        return made

    def arrivals(self) -> list[Arrival]:
        """Every event as it arrives, in arrival order: jittered, some late, some twice."""
        c, rng = self.config, self.rng
        arrivals = []
        for stream, at, event in self.events():
            delay = rng.randrange(max(1, c.jitter_seconds * SECOND))
            if rng.random() < c.late_share:
                delay += c.late_by_seconds * SECOND
            arrivals.append(Arrival(stream, at + delay, event))
            if rng.random() < c.duplicate_share:
                arrivals.append(Arrival(stream, at + delay + rng.randrange(max(1, c.jitter_seconds * SECOND)), event))
        arrivals.sort(key=lambda a: a.at)
        return arrivals

    def rounds(self) -> Iterator[dict[str, list[str]]]:
        """The arrivals cut into `rounds` of equal arrival-time span: per stream, its JSON lines."""
        arrivals = self.arrivals()
        if not arrivals:
            return
        first, last = arrivals[0].at, arrivals[-1].at
        width = (last - first) // self.config.rounds + 1
        cut: list[dict[str, list[str]]] = [{} for _ in range(self.config.rounds)]
        for a in arrivals:
            cut[min(self.config.rounds - 1, (a.at - first) // width)].setdefault(a.stream, []).append(json.dumps(a.event, separators=(",", ":")))
        yield from cut


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
