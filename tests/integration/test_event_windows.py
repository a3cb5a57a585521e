"""Append-only event sources and windowed views on event time, on real Spark + Iceberg + DuckDB.

`page_views` is an event source (plain JSON events, deduplicated by `view_id`, 10 minutes of allowed
lateness). Rounds of landing files go through the real streaming ingest (`lakemv.spark.stream.files.run_ingest`),
with the local state and by scans. A Python model of the semantics (lakemv.core.cdc.events) says, round by
round, which events are admitted, late (a dead letter naming the watermark) or duplicates, and
what each windowed view must hold - its counts and whether each window is final. DuckDB's
independent recompute (`lakemv verify`'s) must agree, `window_final` included.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from datetime import UTC, datetime

import pytest

from lakemv.catalog.declarations import parse_source
from lakemv.catalog.streams import checkpoint_dir, state_path
from lakemv.core.batch import choice
from lakemv.core.cdc.events import DUPLICATE, STORED_DUPLICATE
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.finality import checked_sql
from lakemv.duck.query import lake_connection, run_query
from lakemv.duck.status import lake_status
from lakemv.duck.verify import verify_view
from lakemv.spark.stream.files import run_ingest

PAGE_VIEWS = parse_source(
    """
name = "page_views"
kind = "events"
event_id = "view_id"
event_time = "viewed_at"
lateness = "10 minutes"
partition = "hour"
columns = [
  { name = "view_id", type = "string" },
  { name = "repo", type = "string" },
  { name = "viewer", type = "string" },
  { name = "viewed_at", type = "timestamp" },
]
""",
    "tests/integration/test_event_windows.py",
)
SOURCES = {"page_views": PAGE_VIEWS}
LATENESS = 10 * 60_000_000
HOUR, QUARTER = 3_600_000_000, 900_000_000

VIEWS = {
    # tumbling hours with date_trunc
    "hourly": """-- @key: repo, hour
SELECT repo, date_trunc('hour', viewed_at) AS hour, count(*) AS views, count(DISTINCT viewer) AS viewers
FROM page_views GROUP BY repo, date_trunc('hour', viewed_at)""",
    # hopping: hours that start every 20 minutes (an event is in three of them)
    "sliding": """-- @key: repo, window_start
SELECT repo, window.start AS window_start, count(*) AS views, max(viewed_at) AS last_view
FROM page_views GROUP BY repo, window(viewed_at, '1 hour', '20 minutes')""",
    # tumbling quarter hours with Spark's window()
    "quarterly": """-- @key: repo, window_start
SELECT repo, window.start AS window_start, window.end AS window_end, count(*) AS views
FROM page_views GROUP BY repo, window(viewed_at, '15 minutes')""",
}


def at(hh_mm: str) -> str:
    return f"2026-11-24T{hh_mm}:00Z"


def micros(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // datetime.resolution


def event(view_id: str, repo: str, viewer: str, hh_mm: str) -> dict:
    return {"view_id": view_id, "repo": repo, "viewer": viewer, "viewed_at": at(hh_mm)}


ROUNDS: list[list[dict | str]] = [
    # out of order within the round; the clock ends at 10:50, the watermark at 10:40
    [event("v1", "a", "ann", "10:05"), event("v2", "a", "bob", "10:50"), event("v3", "b", "ann", "10:20"),
     event("v4", "a", "ann", "10:14")],  # fmt: skip
    # 10:45 is on time (watermark 10:40), 10:35 is late; v2 again (stored), v6 twice in the round;
    # 11:20 moves the watermark to 11:10: the 10:00 hour and the quarters up to 11:00 turn final
    [event("v5", "a", "cy", "10:45"), event("v9", "b", "dee", "10:35"), event("v2", "a", "bob", "10:50"),
     event("v6", "b", "bob", "11:05"), event("v6", "b", "bob", "11:05"), event("v7", "a", "ann", "11:20")],  # fmt: skip
    # exactly at the watermark is on time, a minute before is late; a line that is no event, one
    # without an event time; 12:30 closes the 11:00 hour
    [event("v8", "a", "eve", "11:10"), "not json", {"view_id": "v10", "repo": "a", "viewer": "x"},
     event("v11", "b", "ann", "12:30"), event("v12", "b", "bob", "11:09")],  # fmt: skip
    # 12:25 is on time (watermark 12:20); 14:40 moves it to 14:30: no event can reach the windows
    # before 12:30 again, and the store drops their rows' digests
    [event("v13", "a", "ann", "14:40"), event("v14", "a", "cy", "12:25")],
]


class Model:
    """The semantics lakemv.core.cdc.events promises, written out plainly."""

    def __init__(self) -> None:
        self.events: dict[str, dict] = {}
        self.clock: int | None = None

    @property
    def watermark(self) -> int | None:
        return None if self.clock is None else self.clock - LATENESS

    def round(self, lines: list[dict | str]) -> tuple[list[str], dict[str, int]]:
        """Apply one round: (reasons of its dead letters, skip counts)."""
        mark, reasons, skips, seen = self.watermark, [], defaultdict(int), set()
        admitted = []
        for line in lines:
            if isinstance(line, str):
                reasons.append("malformed JSON")
                continue
            if "viewed_at" not in line:
                reasons.append("missing event time field 'viewed_at'")
                continue
            t = micros(line["viewed_at"])
            if mark is not None and t < mark:
                reasons.append("late event: viewed_at")
                continue
            if line["view_id"] in seen:
                skips[DUPLICATE] += 1
                continue
            seen.add(line["view_id"])
            if line["view_id"] in self.events:
                skips[STORED_DUPLICATE] += 1
                continue
            admitted.append(line)
        for line in admitted:
            self.events[line["view_id"]] = line
            t = micros(line["viewed_at"])
            self.clock = t if self.clock is None else max(self.clock, t)
        return reasons, dict(skips)

    def windows(self, size: int, slide: int | None = None) -> dict[tuple[str, int], tuple[int, set[str], bool]]:
        """Per (repo, window start): views, viewers, final; windows of `size` starting every `slide`."""
        slide = slide or size
        groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
        for line in self.events.values():
            t = micros(line["viewed_at"])
            for start in range(t - t % slide, t - size, -slide):
                groups[(line["repo"], start)].append(line)
        mark = self.watermark
        return {
            key: (len(rows), {r["viewer"] for r in rows}, mark is not None and key[1] + size <= mark)
            for key, rows in groups.items()
        }


def line_of(item: dict | str) -> str:
    return item if isinstance(item, str) else json.dumps(item)


MODES = {
    "scan": {"local_state": False, "direct_writes": False},
    "state": {"local_state": True, "direct_writes": True},
}


@pytest.mark.slow(90)
@pytest.mark.parametrize("mode", list(MODES))
def test_event_windows_from_files_with_lateness_and_final_windows(lake, tmp_path, mode, monkeypatch):
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)  # the path under test, however cold batches measure
    plans = [plan_view(parse_view(sql, name), SOURCES) for name, sql in VIEWS.items()]
    assert all(p.finality is not None for p in plans)
    assert [p.name for p in plans if p.branches] == ["sliding"]  # a hopping window: tumbling ones at three offsets
    landing = tmp_path / "landing"
    (landing / "page_views").mkdir(parents=True)
    model = Model()
    settings = lake.settings.model_copy(update=MODES[mode])
    for number, lines in enumerate(ROUNDS):
        (landing / "page_views" / f"round-{number}.json").write_text("".join(line_of(i) + "\n" for i in lines))
        result = run_ingest(lake.spark, settings, SOURCES, landing, once=True, views=plans)
        reasons, skips = model.round(lines)
        (batch,) = result.batches
        assert batch.dead_letters == len(reasons), batch
        assert batch.late == ({"page_views": n} if (n := sum("late event" in r for r in reasons)) else {}), batch
        assert {k: v for k, v in batch.skip_reasons.items() if "duplicate" in k} == skips
        letters = lake.spark.sql(
            f"SELECT reason FROM {lake.names.dead_letters} WHERE batch_id = {number} ORDER BY reason"
        ).collect()
        for expected in reasons:
            assert any(expected in r.reason for r in letters), (expected, letters)
        for view in batch.views.values():
            assert "recomputed in full" not in (view.note or ""), view
        assert_views(lake, model)
        if mode == "state":  # the store keeps the events of windows not yet final, and no more
            assert_retained(state_path(settings, checkpoint_dir(settings, landing)), model)
        for plan in plans:
            verified = verify_view(settings, SOURCES, plan.name, checked_sql(plan.definition.sql, plan.finality, SOURCES), plan.key_names)
            assert verified.ok, verified.summary()
    late = lake.spark.sql(f"SELECT reason FROM {lake.names.dead_letters} WHERE reason LIKE 'late event%' ORDER BY batch_id").collect()
    assert [r.reason for r in late] == [
        f"late event: viewed_at 2026-11-24T{seen}:00Z is older than the watermark 2026-11-24T{mark}:00Z "
        "(newest event time seen minus the allowed lateness of 10 minutes)"
        for seen, mark in (("10:35", "10:40"), ("11:09", "11:10"))
    ]
    # lakemv's own tables by plain name (and in the schema `lakemv`), the late events per source in status
    late_events = run_query(settings, SOURCES, "SELECT source, sum(events)::INT AS events FROM late_events GROUP BY 1")
    assert late_events.to_pylist() == [{"source": "page_views", "events": 2}]
    letters = run_query(settings, SOURCES, "SELECT reason FROM dead_letters WHERE reason LIKE 'late event%' ORDER BY batch_id")
    assert letters.column("reason").to_pylist() == [r.reason for r in late]
    assert run_query(settings, SOURCES, "SELECT count(*) AS n FROM lakemv.batches").column("n").to_pylist() == [len(ROUNDS)]
    (source,) = lake_status(settings, SOURCES, {}).sources
    assert (source.table, source.late_events) == ("page_views", 2)
    partitions = lake.spark.table(f"{lake.names.mirror('page_views')}.partitions").schema["partition"].dataType.fieldNames()
    assert partitions == ["viewed_at_hour"]
    since = micros(at("11:00"))
    recent = len([e for e in model.events.values() if micros(e["viewed_at"]) >= since])
    with lake_connection(settings, SOURCES) as con:  # DuckDB reads the events table as any mirror
        assert con.execute("SELECT count(*) FROM page_views").fetchone()[0] == len(model.events)
        # a filter on event time prunes partitions: each file must sit in its hour's partition
        assert con.execute(f"SELECT count(*) FROM page_views WHERE viewed_at >= make_timestamp({since})::TIMESTAMPTZ").fetchone()[0] == recent
    pruned = lake.spark.sql(f"SELECT count(*) FROM {lake.names.mirror('page_views')} WHERE viewed_at >= timestamp_micros({since})")
    assert pruned.first()[0] == recent


def assert_retained(path, model: Model) -> None:
    """The store keeps the events a window not yet final may read, and the digests of the windows'
    rows that an event may still reach: those starting no more than a window before that horizon."""
    horizon = model.watermark - HOUR  # the longest window of the views reading page_views
    con = sqlite3.connect(path)
    try:
        kept = sorted(r[0] for r in con.execute("SELECT view_id FROM m_page_views"))
        served = [r[0][2:] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'v\\_%' ESCAPE '\\'")]
        digests = {name: con.execute(f"SELECT count(*) FROM v_{name}").fetchone()[0] for name in served}
    finally:
        con.close()
    assert kept == sorted(k for k, e in model.events.items() if micros(e["viewed_at"]) >= horizon)
    windows = {"hourly": model.windows(HOUR), "quarterly": model.windows(QUARTER), "sliding": model.windows(HOUR, 20 * 60_000_000)}
    sizes = {"hourly": HOUR, "quarterly": QUARTER, "sliding": HOUR}
    assert sorted(digests) == ["hourly", "quarterly", "sliding"]  # a hopping window (a UNION ALL) too, a lookup per branch
    assert digests == {name: len([k for k in windows[name] if k[1] >= horizon - sizes[name]]) for name in digests}


def assert_views(lake, model: Model) -> None:
    hourly = {
        (r.repo, r.start): (r.views, r.viewers, r.window_final)
        for r in lake.spark.sql(
            f"SELECT repo, unix_micros(hour) AS start, views, viewers, window_final FROM {lake.names.view('hourly')}"
        ).collect()
    }
    assert hourly == {k: (n, len(v), f) for k, (n, v, f) in model.windows(HOUR).items()}
    quarterly = {
        (r.repo, r.start): (r.views, r.length, r.window_final)
        for r in lake.spark.sql(
            f"SELECT repo, unix_micros(window_start) AS start, unix_micros(window_end) - unix_micros(window_start) AS length, "
            f"views, window_final FROM {lake.names.view('quarterly')}"
        ).collect()
    }
    assert quarterly == {k: (n, QUARTER, f) for k, (n, _, f) in model.windows(QUARTER).items()}
    sliding = {
        (r.repo, r.start): (r.views, r.window_final)
        for r in lake.spark.sql(f"SELECT repo, unix_micros(window_start) AS start, views, window_final FROM {lake.names.view('sliding')}").collect()
    }
    assert sliding == {k: (n, f) for k, (n, _, f) in model.windows(HOUR, 20 * 60_000_000).items()}


def test_a_redelivery_in_a_later_unit_of_the_batch_finds_the_event_it_repeats(lake, tmp_path):
    """Every unit of a batch is judged by the watermarks its first unit started with. After the first
    unit the watermark has moved on, but the store must still hold what the rest of the batch may
    repeat: here v1, which the first unit's 12:00 event put an hour behind the watermark."""
    from lakemv.core.batch.journal import BatchRef
    from lakemv.spark.stream.loop import new_processor

    plans = [plan_view(parse_view(VIEWS["hourly"], "hourly"), SOURCES)]
    settings = lake.settings.model_copy(update=MODES["state"])
    processor = new_processor(lake.spark, settings, SOURCES, plans, tmp_path / "checkpoint")
    first = [event("v1", "a", "ann", "10:05"), event("v2", "a", "bob", "12:00")]
    processor.process(BatchRef("t", 0, 0), [(line_of(e), "file:///landing/page_views/1.json") for e in first], last=False)
    again = processor.process(BatchRef("t", 0, 1), [(line_of(first[0]), "file:///landing/page_views/2.json")])
    assert again.skip_reasons == {STORED_DUPLICATE: 1} and again.dead_letters == 0, again
    assert lake.spark.table(lake.names.mirror("page_views")).count() == 2
    rows = lake.spark.sql(f"SELECT unix_micros(hour) AS start, views FROM {lake.names.view('hourly')}").collect()
    assert sorted((r.start, r.views) for r in rows) == [(micros(at("10:00")), 1), (micros(at("12:00")), 1)]
    # the batch is over: the next one is judged by the watermark 11:50, and the store lets v1 go
    processor.process(BatchRef("t", 1, 0), [(line_of(event("v3", "b", "cy", "12:10")), "file:///landing/page_views/3.json")])
    con = sqlite3.connect(state_path(settings, tmp_path / "checkpoint"))
    try:
        assert sorted(r[0] for r in con.execute("SELECT view_id FROM m_page_views")) == ["v2", "v3"]
    finally:
        con.close()
