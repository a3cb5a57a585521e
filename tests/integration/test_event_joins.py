"""Two event streams joined within a time bound, on real Spark + Iceberg + DuckDB.

The shipped example `search_clicks` (views/events: each click with the search it followed within
the hour) is maintained from rounds of landing files in which searches and clicks arrive in either
order, late, or redelivered. A Python model of the semantics says which events are admitted (each
stream has its own watermark) and which click meets which search. With the local state, each
stream is kept only while the other may still meet it: the store must hold exactly those events.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.streams import checkpoint_dir, state_path
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.duck.verify import verify_view
from lakemv.spark.stream.files import run_ingest
from tests.integration.test_event_windows import micros

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {n: s for n, s in load_sources([ROOT / "catalog/sources/events"]).items() if n in ("searches", "clicks")}
VIEW = load_views([ROOT / "views/events"])["search_clicks"]
LATENESS, HOUR = 5 * 60_000_000, 3_600_000_000


def search(search_id: str, hh_mm: str, query: str = "iceberg") -> tuple[str, dict]:
    return "searches", {"search_id": search_id, "user": "ann", "query": f"{query} {search_id}", "searched_at": f"2026-11-24T{hh_mm}:00Z"}


def click(click_id: str, search_id: str, hh_mm: str) -> tuple[str, dict]:
    return "clicks", {"click_id": click_id, "search_id": search_id, "result": f"r-{click_id}", "clicked_at": f"2026-11-24T{hh_mm}:00Z"}


ROUNDS = [
    # c2's search comes a round later; c3 is 80 minutes after its search: no row
    [search("s1", "10:00"), search("s2", "10:10"), click("c1", "s1", "10:20"), click("c2", "s3", "10:25"), click("c3", "s2", "11:30")],
    # s3 arrives after its click (on time: the searches' watermark is 10:05); s0 is late; c4 and a
    # redelivery of c1 are late for the clicks (their watermark is 11:25) though their search is there
    [search("s3", "10:15"), search("s0", "09:50"), click("c4", "s1", "10:50"), click("c1", "s1", "10:20"), click("c5", "s2", "11:26")],
    # both clocks move on: searches before 11:25 and clicks before 11:55 can meet nothing new
    [search("s5", "12:00"), click("c6", "s5", "12:30"), click("c7", "s3", "11:28")],
    # a click an hour after its search meets it (the bound is inclusive); s5's second click
    [search("s6", "12:05"), click("c8", "s6", "13:05"), click("c9", "s5", "12:40")],
]


class Model:
    def __init__(self) -> None:
        self.events: dict[str, dict[str, dict]] = {"searches": {}, "clicks": {}}
        self.clocks: dict[str, int | None] = {"searches": None, "clicks": None}
        self.time = {"searches": "searched_at", "clicks": "clicked_at"}
        self.key = {"searches": "search_id", "clicks": "click_id"}

    def watermark(self, table: str) -> int | None:
        clock = self.clocks[table]
        return None if clock is None else clock - LATENESS

    def round(self, events: list[tuple[str, dict]]) -> int:
        """Admit a round's events; returns how many were late."""
        marks = {t: self.watermark(t) for t in self.events}
        late = 0
        for table, event in events:
            t = micros(event[self.time[table]])
            if marks[table] is not None and t < marks[table]:
                late += 1
                continue
            self.events[table].setdefault(event[self.key[table]], event)
        for table, events_ in self.events.items():
            times = [micros(e[self.time[table]]) for e in events_.values()]
            self.clocks[table] = max(times) if times else None
        return late

    def rows(self) -> dict[str, tuple[str, str]]:
        found = {}
        for c in self.events["clicks"].values():
            s = self.events["searches"].get(c["search_id"])
            if s is not None and 0 <= micros(c["clicked_at"]) - micros(s["searched_at"]) <= HOUR:
                found[c["click_id"]] = (s["query"], c["result"])
        return found

    def retained(self) -> dict[str, list[str]]:
        """The events the store must keep: those the other stream may still meet, and redeliveries."""
        ws, wc = self.watermark("searches"), self.watermark("clicks")
        horizons = {"searches": min(ws, wc - HOUR), "clicks": min(wc, ws)}
        return {
            table: sorted(k for k, e in self.events[table].items() if micros(e[self.time[table]]) >= horizons[table])
            for table in self.events
        }


MODES = {"scan": {"local_state": False, "direct_writes": False}, "state": {"local_state": True, "direct_writes": True}}


@pytest.mark.parametrize("mode", list(MODES))
def test_searches_joined_with_their_clicks_within_the_hour(lake, tmp_path, mode):
    plan = plan_view(VIEW, SOURCES)
    assert plan.bound is not None and (plan.bound.low, plan.bound.high) == (0, HOUR)
    landing = tmp_path / "landing"
    settings = lake.settings.model_copy(update=MODES[mode])
    model = Model()
    for number, events in enumerate(ROUNDS):
        for table in ("searches", "clicks"):
            (landing / table).mkdir(parents=True, exist_ok=True)
            lines = [json.dumps(e) for t, e in events if t == table]
            (landing / table / f"round-{number}.json").write_text("".join(line + "\n" for line in lines))
        (batch,) = run_ingest(lake.spark, settings, SOURCES, landing, once=True, views=[plan]).batches
        assert batch.dead_letters == model.round(events), batch
        rows = lake.spark.sql(f"SELECT click_id, query, result FROM {lake.names.view('search_clicks')}").collect()
        assert {r.click_id: (r.query, r.result) for r in rows} == model.rows(), number
        if mode == "state" and number:
            con = sqlite3.connect(state_path(settings, checkpoint_dir(settings, landing)))
            try:
                kept = {t: sorted(r[0] for r in con.execute(f"SELECT {k} FROM m_{t}")) for t, k in (("searches", "search_id"), ("clicks", "click_id"))}
                digests = con.execute("SELECT count(*) FROM v_search_clicks").fetchone()[0]
            finally:
                con.close()
            assert kept == model.retained(), number
            # a row whose click the store dropped is settled: no search can meet that click any more
            assert digests == len(model.rows().keys() & set(model.retained()["clicks"])), number
    # c3, c5, c7 came more than an hour after their search; c4 and the redelivered c1 were late
    assert model.rows().keys() == {"c1", "c2", "c6", "c8", "c9"}
    verified = verify_view(settings, SOURCES, plan.name, plan.definition.sql, plan.key_names)
    assert verified.ok, verified.summary()
