"""The pure steps of a batch (lakemv.core.batch.plan): which rows apply, event clocks, drift notes, the
ledger row."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.catalog.tables import DELETED, POSITION, SOURCE_TS
from lakemv.core.batch.journal import BatchRef, TablePlan
from lakemv.core.batch.plan import absent_notes, advance_clocks, highest, ledger_entry, table_plan
from lakemv.core.batch.records import ViewEntry
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.cdc.changeset import ChangeSet
from lakemv.core.cdc.effects import CHANGED, effect_of
from lakemv.core.cdc.events import STORED_DUPLICATE

SOURCES = load_sources([PROJECT_ROOT / "catalog" / "sources", PROJECT_ROOT / "catalog" / "sources" / "events"])


def _users(*rows: tuple[str, str, int, bool]) -> pa.Table:
    return pa.table({"email": [r[0] for r in rows], "username": [r[1] for r in rows], POSITION: [r[2] for r in rows], DELETED: [r[3] for r in rows]})


def test_a_table_plan_keeps_the_winning_rows_and_the_images_views_see():
    changes = _users(("a@x", "alice2", 20, False), ("b@x", "bobby", 40, False), ("c@x", "cy", 7, False))
    incoming = [{"email": e, "username": u, POSITION: p, DELETED: d} for e, u, p, d in zip(*(changes.column(c).to_pylist() for c in changes.column_names))]
    stored = [{"email": "a@x", "username": "alice", POSITION: 10, DELETED: False}, {"email": "b@x", "username": "bob", POSITION: 50, DELETED: False}]
    effect = effect_of(("email",), ("email", "username"), incoming, stored)
    seen = []
    plan = table_plan(changes, effect, lambda images: seen.append(images) or pa.table({"n": range(len(images))}))
    assert plan.rows.column("email").to_pylist() == ["a@x", "c@x"]  # b@x is older than what the mirror holds
    assert [i[1] for i in seen[0]] == ["alice", "alice2", "cy"]
    assert plan.images.column("n").to_pylist() == [0, 1, 2]
    # an update's two images carry the columns it changed; a new row's, none (it changes every column)
    assert plan.images.column(CHANGED).to_pylist() == [["username"], ["username"], None]


def test_event_clocks_advance_to_the_newest_applied_event_and_stored_duplicates_are_counted():
    views = SOURCES["page_views"]
    micros = [1_000_000, 5_000_000]
    rows = pa.table({views.event_time: pa.array(micros, pa.timestamp("us", tz="UTC")), POSITION: [1, 2]})
    changeset = ChangeSet(changes={"page_views": [object()] * 3})  # three parsed, two applied: one was already stored
    clocks = advance_clocks(changeset, {"page_views": TablePlan(rows, None)}, {"page_views": 2_000_000}, SOURCES)
    assert clocks == {"page_views": 5_000_000}
    assert changeset.skipped == Counter({STORED_DUPLICATE: 1})
    assert advance_clocks(ChangeSet(), {"page_views": TablePlan(rows.slice(0, 1), None)}, {"page_views": 9_000_000}, SOURCES) == {
        "page_views": 9_000_000}  # fmt: skip


def test_a_column_the_source_stopped_sending_is_an_error_only_where_a_view_reads_it():
    notes = absent_notes({"users": Counter({"email": 2, "nickname": 1})}, lambda t, c: ["user_profile"] if c == "email" else [])
    assert notes[0].startswith("users: column `email` missing from 2 after-images (stored as NULL); error: view user_profile reads")
    assert notes[1] == "users: column `nickname` missing from 1 after-images (stored as NULL)"


def test_the_ledger_row_sums_up_the_unit():
    rows = pa.table({POSITION: [3, 9], SOURCE_TS: pa.array([1_000, 2_000], pa.timestamp("us", tz="UTC"))})
    plans = {"users": TablePlan(rows, None), "stars": TablePlan(rows.slice(0, 0), None)}
    result = BatchResult(4, lines=5, events=4, views={"v": ViewResult("v", 2, upserts=1, deletes=1)}, replayed=True, late={"page_views": 3})
    entry = ledger_entry(BatchRef("s", 4, 1), result, plans, conflicts_retried=2, started_at=10, finished_at=2_000_010)
    assert (entry.stream_id, entry.batch_id, entry.chunk, entry.replayed, entry.conflicts_retried) == ("s", 4, 1, True, 2)
    assert entry.tables["users"].max_position == 9 and entry.tables["stars"].max_position is None
    assert entry.views == {"v": ViewEntry(2, 1, 1, "incremental")}
    row = entry.to_arrow()
    assert row.column("seconds").to_pylist() == [2.0]
    assert row.column("late").to_pylist() == [[{"name": "page_views", "events": 3}]]
    assert row.schema.names[-1] == "late"  # where ALTER TABLE ADD COLUMN puts it in a ledger made before it
    assert highest(plans, POSITION) == 9


def test_an_update_of_columns_a_view_does_not_read_does_not_reach_it():
    from lakemv.catalog.settings import LakeSettings
    from lakemv.core.planner import plan_view
    from lakemv.core.planner.definitions import load_views

    plans = {n: plan_view(v, SOURCES) for n, v in load_views(LakeSettings().view_dirs).items()}
    profile = plans["user_profile"]  # reads repos' description (the starred repos list it), not their star counts
    assert profile.reads_known
    assert not profile.reached_by_change("repos", ["star_count", "updated_at"])
    assert profile.reached_by_change("repos", ["description", "star_count"])
    assert profile.reached_by_change("repos", None)  # a row that appears or goes
    loose = plans["repo_summary"].model_copy(update={"body": "SELECT owner, name FROM _lmv_occ_3"})  # (the planner qualifies every column)
    assert not loose.reads_known and loose.reached_by_change("repos", ["star_count"])  # an unqualified column: every change counts
