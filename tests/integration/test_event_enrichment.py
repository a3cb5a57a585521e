"""Events enriched with CDC tables, both semantics side by side, on real Spark + Iceberg + DuckDB.

The shipped example `profile_viewers` (views/events: profile views joined with the viewer's user row
and payment verification, `-- @enrich: as_of_processing`) and its table-table twin are maintained
from rounds of landing files: profile view events and Debezium changes to `users` and
`payment_info`. As of processing, a row says what the viewer's account was in the batch that
ingested the view, and no later change touches it; table-table, every past view follows the change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakemv.catalog.declarations import load_sources
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views, parse_view
from lakemv.duck.verify import verify_view
from lakemv.spark.stream.files import run_ingest
from tests.cdc import dbz, user

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    name: source
    for name, source in load_sources([ROOT / "catalog/sources", ROOT / "catalog/sources/events"]).items()
    if name in ("users", "payment_info", "profile_views")
}
AS_OF = load_views([ROOT / "views/events"])["profile_viewers"]
TEXT = (ROOT / "views/events/profile_viewers.sql").read_text()
TABLE_TABLE = parse_view(TEXT.replace("-- @enrich: as_of_processing", "-- @enrich: table_table"), "profile_viewers_now")


def viewed(view_id: str, viewer: str, hh_mm: str) -> str:
    return json.dumps({"view_id": view_id, "viewer": viewer, "viewed_user": "zoe", "viewed_at": f"2026-11-24T{hh_mm}:00Z"})


def payment(id: int, user_id: int, verified: bool) -> dict:  # noqa: A002
    return {"id": id, "user_id": user_id, "verified": verified}


ANN, BOB = user("ann@a.example", "ann", 1), user("bob@b.example", "bob", 2)
ANN_NEW = user("ann@new.example", "ann", 1)
CARL = user("carl@c.example", "carl", 3)

# Each round: lines per table, then (view_id -> (email, verified)) as of processing and table-table.
ROUNDS = [
    (
        {"users": [dbz("c", 1, ANN), dbz("c", 2, BOB)], "payment_info": [dbz("c", 3, payment(10, 2, False))],
         "profile_views": [viewed("p1", "ann", "10:00"), viewed("p2", "bob", "10:01")]},
        {"p1": ("ann@a.example", False), "p2": ("bob@b.example", False)},
        {"p1": ("ann@a.example", False), "p2": ("bob@b.example", False)},
    ),
    (  # ann changes her email (a primary-key change: delete + create); carl views before he exists
        {"users": [dbz("d", 4, None, {"email": "ann@a.example"}), dbz("c", 5, ANN_NEW)],
         "profile_views": [viewed("p3", "ann", "10:05"), viewed("p4", "carl", "10:06")]},
        {"p1": ("ann@a.example", False), "p2": ("bob@b.example", False), "p3": ("ann@new.example", False), "p4": (None, False)},
        {"p1": ("ann@new.example", False), "p2": ("bob@b.example", False), "p3": ("ann@new.example", False), "p4": (None, False)},
    ),
    (  # bob's payment is verified, carl signs up; only the new views see it as of processing
        {"users": [dbz("c", 6, CARL)], "payment_info": [dbz("u", 7, payment(10, 2, True))],
         "profile_views": [viewed("p5", "bob", "10:10"), viewed("p2", "bob", "10:01")]},  # p2 again: a redelivery
        {"p1": ("ann@a.example", False), "p2": ("bob@b.example", False), "p3": ("ann@new.example", False), "p4": (None, False),
         "p5": ("bob@b.example", True)},
        {"p1": ("ann@new.example", False), "p2": ("bob@b.example", True), "p3": ("ann@new.example", False),
         "p4": ("carl@c.example", False), "p5": ("bob@b.example", True)},
    ),
]  # fmt: skip

MODES = {"scan": {"local_state": False, "direct_writes": False}, "state": {"local_state": True, "direct_writes": True}}


@pytest.mark.parametrize("mode", list(MODES))
def test_as_of_processing_enriches_once_and_table_table_follows_the_tables(lake, tmp_path, mode):
    plans = [plan_view(AS_OF, SOURCES), plan_view(TABLE_TABLE, SOURCES)]
    assert plans[0].as_of_processing and not plans[1].as_of_processing
    landing = tmp_path / "landing"
    settings = lake.settings.model_copy(update=MODES[mode])
    for number, (lines, as_of, now) in enumerate(ROUNDS):
        for table, rows in lines.items():
            (landing / table).mkdir(parents=True, exist_ok=True)
            (landing / table / f"round-{number}.json").write_text("".join(r + "\n" for r in rows))
        (batch,) = run_ingest(lake.spark, settings, SOURCES, landing, once=True, views=plans).batches
        assert batch.dead_letters == 0, batch
        for view, expected in (("profile_viewers", as_of), ("profile_viewers_now", now)):
            rows = lake.spark.sql(f"SELECT view_id, viewer_email, viewer_verified FROM {lake.names.view(view)}").collect()
            assert {r.view_id: (r.viewer_email, r.viewer_verified) for r in rows} == expected, (view, number)
        # a change of users or payment_info alone reaches no row of the as-of view
        if number:
            new_events = {json.loads(line)["view_id"] for line in lines["profile_views"]} - {"p2"}
            assert batch.views["profile_viewers"].keys == len(new_events), batch.views
    now_plan = plans[1]
    assert verify_view(settings, SOURCES, now_plan.name, now_plan.definition.sql, now_plan.key_names).ok
    checked = verify_view(settings, SOURCES, plans[0].name, plans[0].definition.sql, plans[0].key_names, compare=plans[0].event_columns)
    assert checked.ok and checked.not_compared == ("viewer_email", "viewer_verified"), checked.summary()
    # the full recompute today differs in exactly the enriched columns of the views that came before a change
    full = verify_view(settings, SOURCES, plans[0].name, plans[0].definition.sql, plans[0].key_names)
    assert (full.mismatching, full.missing, full.extra) == (3, 0, 0), full.summary()
