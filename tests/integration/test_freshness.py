"""A view with a freshness budget (`-- @freshness: ...`, lakemv.core.batch.deferral) waits in the local
state and then catches up exactly: its keys are pending while it is not due, the view table stays
as it was and the ledger does not list it; once due, one maintenance leaves it equal to its
recompute. A crash after its pending keys were recorded, or after its commit, loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.core.batch import deferral
from lakemv.core.batch.journal import BatchRef, Journal
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.store import Store
from lakemv.duck.status import lake_status
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz, user
from tests.crashes import crashing_at
from tests.integration.test_view_properties import assert_views_are_fresh

HOUR = 3_600_000_000
PROFILE = (PROJECT_ROOT / "views" / "user_profile.sql").read_text().replace("-- @key: email", "-- @key: email\n-- @freshness: 1 hour")
COUNTS = "-- @key: username\nSELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username"


def star(username: str, repo: str) -> dict:
    return {"username": username, "repo_owner": "o", "repo_name": repo, "created_at": 1_709_294_400_000_000}


def processor(lake, folder) -> BatchProcessor:
    plans = [plan_view(parse_view(PROFILE, "user_profile"), lake.sources), plan_view(parse_view(COUNTS, "star_counts"), lake.sources)]
    store, journal = Store(folder / "state.sqlite"), Journal(folder / "journal")
    return BatchProcessor(lake.spark, lake.names, lake.sources, plans, journal=journal, store=store, view_workers=1)


def view_rows(lake, name: str) -> list:
    return sorted(map(tuple, lake.spark.table(lake.names.view(name)).collect()), key=repr)


def views(p: BatchProcessor) -> dict[str, tuple[str, ...]]:
    return {m.plan.name: m.plan.tables for m in p.maintainers}


def ledger_views(lake, batch: int) -> set[str]:
    rows = lake.spark.sql(f"SELECT explode(views) AS v FROM {lake.names.ledger} WHERE batch_id = {batch}").collect()
    return {r["v"]["name"] for r in rows}


@pytest.mark.slow(60)
def test_a_view_waits_for_its_budget_then_catches_up(lake, tmp_path):
    processor(lake, tmp_path).close()  # builds the views: nothing of them is pending
    for file in tmp_path.glob("state.sqlite*"):
        file.unlink()
    p = processor(lake, tmp_path)  # a rebuilt state cannot tell what was pending, for any view
    waiting = p.indexed["user_profile"]
    assert waiting.budget == HOUR and p.indexed["star_counts"].budget == 0  # (until it catches up once)
    first = p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann", 1)), at("users")), (dbz("c", 2, user("b@x.io", "bob", 2)), at("users"))])
    # due at once, diffed whole; and so is the view without a budget, once
    assert not first.views["user_profile"].deferred and "not known" in (first.views["user_profile"].note or "")
    assert "not known" in (first.views["star_counts"].note or "") and p.indexed["star_counts"].budget is None
    assert_views_are_fresh(lake, p)
    before = view_rows(lake, "user_profile")

    second = p.process_lines(1, [(dbz("c", 3, star("ann", "r1")), at("stars")), (dbz("c", 4, user("c@x.io", "cy", 3)), at("users"))])
    profile = second.views["user_profile"]
    assert profile.deferred and profile.keys == 2 and profile.upserts == 0, profile
    assert "user_profile 2 keys deferred" in second.describe()
    assert view_rows(lake, "user_profile") == before  # it waits; the view beside it does not
    assert ("ann", 1) in view_rows(lake, "star_counts")
    assert ledger_views(lake, 1) == {"star_counts"}  # the ledger lists the views a unit maintained
    pending = p.store.pending("user_profile")
    assert pending.known and sorted(pending.keys) == [("a@x.io",), ("c@x.io",)] and pending.since is not None

    status = {v.view: v for v in lake_status(lake.settings, lake.sources, views(p), budgets={"user_profile": HOUR}).views}
    assert status["user_profile"].budget_seconds == 3600 and status["star_counts"].budget_seconds is None
    # lag counts from what the view shows: the changes up to its last maintenance (lsn 2), not lsn 3 and 4
    assert status["user_profile"].newest_change_ts == datetime.fromtimestamp(1_700_000_000.002, UTC)
    assert status["star_counts"].newest_change_ts == datetime.fromtimestamp(1_700_000_000.003, UTC)  # (it reads stars only)

    third = p.process_lines(2, [(dbz("c", 5, star("bob", "r2")), at("stars"))])  # still not due: one more key waits
    assert third.views["user_profile"].deferred and len(p.store.pending("user_profile").keys) == 3
    assert p.store.pending("user_profile").since == pending.since  # the oldest key's wait goes on

    assert p.flush("local") is None  # between batches: not due yet

    waiting.budget = 1  # due now: the pending keys and the batch's are maintained together
    fourth = p.process_lines(3, [(dbz("u", 6, user("a@x.io", "ann", 1) | {"username": "anne"}, user("a@x.io", "ann", 1)), at("users"))])
    profile = fourth.views["user_profile"]
    assert not profile.deferred and profile.keys == 3 and profile.upserts == 3, profile
    assert_views_are_fresh(lake, p)
    assert p.store.pending("user_profile").keys == [] and "user_profile" in ledger_views(lake, 3)

    # its budget runs out while no batch comes: the stream's idle check maintains it, as a unit of its own
    waiting.budget = HOUR
    assert p.process_lines(4, [(dbz("c", 7, star("cy", "r3")), at("stars"))]).views["user_profile"].deferred
    waiting.budget = 1
    flushed = p.flush("local")
    assert flushed is not None and flushed.idle and set(flushed.views) == {"user_profile"}, flushed
    assert flushed.views["user_profile"].upserts == 1 and flushed.describe().startswith("between batches, due: user_profile: 1 keys")
    assert_views_are_fresh(lake, p)
    ledger = lake.spark.sql(f"SELECT stream_id, explode(views) AS v FROM {lake.names.ledger} WHERE batch_id = {flushed.batch_id}").collect()
    assert [(r["stream_id"], r["v"]["name"]) for r in ledger] == [("local~idle", "user_profile")]
    assert p.flush("local") is None  # nothing waits any more


@pytest.mark.slow(60)
def test_crashes_while_a_view_waits_lose_no_key(lake, tmp_path):
    p = processor(lake, tmp_path)
    p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann", 1)), at("users"))])
    # crash right after the batch's keys were recorded as pending (before its ledger row): a replay
    # reaches the same keys; they are pending once
    crashing_at(p, "deferred:user_profile", 1, [(dbz("c", 2, star("ann", "r1")), at("stars"))])
    p = processor(lake, tmp_path)
    assert p.store.pending("user_profile").keys == [("a@x.io",)]
    again = p.process_lines(1, [(dbz("c", 2, star("ann", "r1")), at("stars"))])
    assert again.replayed and again.views["user_profile"].deferred and p.store.pending("user_profile").keys == [("a@x.io",)]
    # crash after the due view's commit, before its pending keys left the state: they stay pending,
    # and the replay finds nothing left to write
    p.indexed["user_profile"].budget = 1
    crashing_at(p, "view:user_profile", 2, [(dbz("c", 3, star("ann", "r2")), at("stars"))])
    p = processor(lake, tmp_path)
    assert p.store.pending("user_profile").keys == [("a@x.io",)]
    p.indexed["user_profile"].budget = 1
    replayed = p.process_lines(2, [(dbz("c", 3, star("ann", "r2")), at("stars"))])
    assert replayed.replayed and not replayed.views["user_profile"].deferred, replayed
    assert_views_are_fresh(lake, p)
    assert p.store.pending("user_profile").keys == []


@pytest.mark.slow(30)
def test_keys_left_pending_by_a_budget_since_removed_are_caught_up_at_once(lake, tmp_path):
    """The budget is not part of a view's fingerprint (removing it rebuilds nothing): the keys it left
    waiting are maintained by the first unit after, or between batches when none comes."""
    p = processor(lake, tmp_path)
    assert p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann")), at("users"))]).views["user_profile"].deferred  # just built: known
    p.close()
    plans = [plan_view(parse_view(PROFILE.replace("-- @freshness: 1 hour\n", ""), "user_profile"), lake.sources)]
    again = BatchProcessor(lake.spark, lake.names, lake.sources, plans, journal=Journal(tmp_path / "journal"),
                           store=Store(tmp_path / "state.sqlite"), view_workers=1)  # fmt: skip
    flushed = again.flush("s")  # nothing new arrives: `ingest --once` ends with this check
    assert flushed is not None and flushed.views["user_profile"].upserts == 1, flushed
    assert again.store.pending("user_profile").keys == [] and again.flush("s") is None
    assert_views_are_fresh(lake, again)


@pytest.mark.slow(40)
def test_the_units_of_one_batch_leave_their_views_to_its_last_unit(lake, tmp_path):
    """A backlog cut into units: while more units of the batch follow, every view that can wait only
    records the keys it reaches (whatever its budget); the last unit maintains it once over all of
    them. A crash while keys are held loses none: the replayed batch holds them again."""
    p = processor(lake, tmp_path)
    p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann", 1)), at("users")), (dbz("c", 2, user("b@x.io", "bob", 2)), at("users"))])
    before = view_rows(lake, "star_counts")
    held = p.process(BatchRef("local", 1, 0), [(dbz("c", 3, star("ann", "r1")), at("stars"))], last=False)
    counts = held.views["star_counts"]
    assert counts.deferred and counts.note == deferral.HELD and counts.keys == 1, counts
    assert view_rows(lake, "star_counts") == before and ledger_views(lake, 1) == set()
    assert p.flush("local") is None  # between two units of a batch: nothing is due, the batch goes on
    # a crash once the second unit's keys are recorded: the replay holds them again, nothing is lost
    crashing_at(p, "deferred:star_counts", BatchRef("local", 1, 1), [(dbz("c", 4, star("bob", "r1")), at("stars"))], last=False)
    p = processor(lake, tmp_path)
    assert sorted(p.store.pending("star_counts").keys) == [("ann",), ("bob",)]
    assert p.process(BatchRef("local", 1, 0), [(dbz("c", 3, star("ann", "r1")), at("stars"))], last=False).already_committed
    again = p.process(BatchRef("local", 1, 1), [(dbz("c", 4, star("bob", "r1")), at("stars"))], last=False)
    assert again.views["star_counts"].deferred and again.views["user_profile"].deferred
    p.indexed["user_profile"].budget = 1  # due at the last unit too (it held its keys however short its budget)
    last = p.process(BatchRef("local", 1, 2), [(dbz("c", 5, star("ann", "r2")), at("stars"))], last=True)
    counts = last.views["star_counts"]
    assert not counts.deferred and counts.keys == 2 and counts.upserts == 2, counts
    assert_views_are_fresh(lake, p)
    assert p.store.pending("star_counts").keys == [] and p.indexed["star_counts"].budget is None
    assert p.store.pending("user_profile").keys == [] and p.indexed["user_profile"].budget == 1  # its own budget stays
    # a batch after which more of a backlog follows holds too; the idle check leaves it alone until the
    # run ends (`ingest --once` releases what still holds at its end)
    more = p.process(BatchRef("local", 2, 0), [(dbz("c", 6, star("bob", "r2")), at("stars"))], more=True)
    assert more.views["star_counts"].deferred and p.flush("local") is None
    released = p.flush("local", release=True)
    assert released is not None and released.views["star_counts"].upserts == 1, released
    assert_views_are_fresh(lake, p)
