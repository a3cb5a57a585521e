"""Property: however the generated event streams arrive (out of order, late, twice) and however they
are cut into rounds, the event-time views equal the Python model of their semantics after every
round, and the local state keeps exactly the events the views may still read.

Hypothesis draws the workload's shape (seed, size, rounds, jitter, late and duplicate shares) for
`lakemv.workload.eventstreams`; each round is one ingest with the local state (the default), of the shipped
sources and views in catalog/sources/events and views/events plus a hopping twin of the hourly view and
an hourly aggregate over the stream-stream join of searches and clicks: its windows turn final only
once the clicks' watermark is an hour past their end too (a click may follow its search by an hour).
"""

from __future__ import annotations

import os
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.streams import checkpoint_dir, state_path
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views, parse_view
from lakemv.core.planner.finality import checked_sql
from lakemv.duck.verify import verify_view
from lakemv.spark.stream.files import run_ingest
from lakemv.workload.eventstreams import EventConfig, EventWorkload, write_round
from tests.eventmodel import HOUR, EventModel
from tests.integration.test_view_properties import examples

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {n: s for n, s in load_sources([ROOT / "catalog/sources/events"]).items() if n in ("page_views", "searches", "clicks")}
SHIPPED = load_views([ROOT / "views/events"])
HOPPING = parse_view(
    """-- @key: repo_owner, repo_name, window_start
SELECT repo_owner, repo_name, window.start AS window_start, count(*) AS views
FROM page_views GROUP BY repo_owner, repo_name, window(viewed_at, '1 hour', '20 minutes')""",
    "page_views_sliding",
)
CLICKS_HOURLY = parse_view(
    """-- @key: query, hour
SELECT s.query, date_trunc('hour', s.searched_at) AS hour, count(*) AS clicks, count(DISTINCT s.search_id) AS searches
FROM searches s JOIN clicks c ON c.search_id = s.search_id AND c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR
GROUP BY s.query, date_trunc('hour', s.searched_at)""",
    "search_clicks_hourly",
)
PLANS = [
    plan_view(SHIPPED["page_views_hourly"], SOURCES), plan_view(HOPPING, SOURCES), plan_view(SHIPPED["search_clicks"], SOURCES),
    plan_view(CLICKS_HOURLY, SOURCES),
]  # fmt: skip
STREAMS = ("page_views", "searches", "clicks")

shapes = st.builds(
    EventConfig,
    events=st.integers(40, 160),
    rounds=st.integers(2, 4),
    seed=st.integers(0, 10_000),
    users=st.just(12),
    repos=st.just(4),
    span_seconds=st.sampled_from([2 * 3600, 3 * 3600]),
    jitter_seconds=st.sampled_from([30, 300, 900]),  # within the lateness, and well past it
    late_share=st.sampled_from([0.0, 0.05]),
    duplicate_share=st.sampled_from([0.0, 0.1]),
)


@pytest.mark.slow(120)
@examples(int(os.environ.get("LAKEMV_EVENT_EXAMPLES", "3")))
@given(config=shapes)
def test_event_views_equal_the_model_after_every_round(lake, tmp_path_factory, config):
    landing = tmp_path_factory.mktemp("landing")
    model = EventModel(SOURCES)
    for number, lines in enumerate(EventWorkload(config).rounds()):
        lines = {s: rows for s, rows in lines.items() if s in STREAMS}
        write_round(landing, number, lines)
        batches = run_ingest(lake.spark, lake.settings, SOURCES, landing, once=True, views=PLANS).batches
        late = model.round(lines)
        assert sum(b.dead_letters for b in batches) == late, batches
        assert_views(lake, model)
        assert_state(state_path(lake.settings, checkpoint_dir(lake.settings, landing)), model)
    for plan in PLANS:
        verified = verify_view(lake.settings, SOURCES, plan.name, checked_sql(plan.definition.sql, plan.finality, SOURCES), plan.key_names)
        assert verified.ok, verified.summary()
    for plan in PLANS:  # the next example starts from empty views
        lake.spark.sql(f"DELETE FROM {lake.names.view(plan.name)}")
    for source in SOURCES:
        lake.spark.sql(f"DELETE FROM {lake.names.mirror(source)}")


def rows(lake, view: str, columns: str) -> set[tuple]:
    return {tuple(r) for r in lake.spark.sql(f"SELECT {columns} FROM {lake.names.view(view)}").collect()}


def assert_views(lake, model: EventModel) -> None:
    hourly = model.windows("page_views", ("repo_owner", "repo_name"), HOUR)
    assert rows(lake, "page_views_hourly", "repo_owner, repo_name, unix_micros(hour), views, viewers, window_final") == {
        (*k, len(v), len({e["viewer"] for e in v} - {None}), model.final("page_views", k[-1], HOUR)) for k, v in hourly.items()
    }
    sliding = model.windows("page_views", ("repo_owner", "repo_name"), HOUR, 20 * 60_000_000)
    assert rows(lake, "page_views_sliding", "repo_owner, repo_name, unix_micros(window_start), views, window_final") == {
        (*k, len(v), model.final("page_views", k[-1], HOUR)) for k, v in sliding.items()
    }
    pairs = model.joined("clicks", "searches", "search_id", 0, HOUR)
    assert rows(lake, "search_clicks", "click_id, search_id, query, result") == {
        (c["click_id"], c["search_id"], s["query"], c["result"]) for c, s in pairs
    }
    hours: dict[tuple, list[dict]] = defaultdict(list)
    for _click, search in pairs:
        t = model.time("searches", search)
        hours[(search["query"], t - t % HOUR)].append(search)
    clicks_mark = model.watermark("clicks")
    assert rows(lake, "search_clicks_hourly", "query, unix_micros(hour), clicks, searches, window_final") == {
        (*k, len(v), len({s["search_id"] for s in v}),
         model.final("searches", k[-1], HOUR) and clicks_mark is not None and k[-1] + 2 * HOUR <= clicks_mark)
        for k, v in hours.items()
    }  # fmt: skip


def assert_state(path: Path, model: EventModel) -> None:
    """The store keeps the page views of windows not yet final and every search and click (the
    hourly clicks may read any again; tests/integration/test_event_joins.py checks the pairs' own
    retention), and every source what a redelivery may repeat."""
    marks = {s: model.watermark(s) for s in SOURCES}
    if any(m is None for m in marks.values()):
        return  # a stream with no event yet: the other keeps everything
    horizons = {  # the hourly clicks read any search and click again (their retention is not derived): all are kept
        "page_views": marks["page_views"] - HOUR,
        "searches": -(2**62),
        "clicks": -(2**62),
    }
    con = sqlite3.connect(path)
    try:
        for source, horizon in horizons.items():
            key = SOURCES[source].event_id
            assert sorted(r[0] for r in con.execute(f"SELECT {key} FROM m_{source}")) == model.kept_since(source, horizon), source
    finally:
        con.close()
