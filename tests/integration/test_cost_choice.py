"""Each batch maintains a view incrementally or whole, whichever its calibrated cost model predicts is
cheaper (lakemv.core.batch.choice); the choice and its reason are in the batch line and the ledger."""

from __future__ import annotations

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.core.batch import choice
from lakemv.core.batch.choice import INCREMENTAL, WHOLE
from lakemv.core.batch.records import VIEW_STRUCT
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.store import Store
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.batch.sync import StoreSync, digest_sql
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.tables import ensure_ledger
from tests.cdc import at, dbz, user
from tests.integration.test_view_properties import assert_views_are_fresh


def star(username: str, repo: str) -> dict:
    return {"username": username, "repo_owner": "cy", "repo_name": repo, "created_at": 1_709_294_400_000_000}


def ledger_views(lake, batch_id: int) -> dict[str, tuple]:
    rows = lake.spark.sql(
        f"SELECT v.name, v.plan, v.reason, v.seconds FROM (SELECT explode(views) AS v FROM {lake.names.ledger} WHERE batch_id = {batch_id})"
    ).collect()
    return {r.name: (r.plan, r.reason, r.seconds) for r in rows}


@pytest.mark.slow(40)
def test_a_view_measured_dearer_than_its_prior_is_recomputed_whole_and_stays_exact(lake, tmp_path):
    plans = [plan_view(v, lake.sources) for v in load_views(LakeSettings().view_dirs).values()]
    store = Store(tmp_path / "state.sqlite")
    p = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=store)
    first = p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann")), at("users")), (dbz("c", 2, user("b@x.io", "bob")), at("users")),
                                (dbz("c", 3, star("ann", "pond")), at("stars"))])  # fmt: skip
    profile = first.views["user_profile"]
    assert profile.plan == INCREMENTAL and profile.reason.startswith("incremental ~"), profile
    assert f"user_profile 2 keys -> 2 upserts, 0 deletes ({profile.reason})" in first.describe()
    plan, reason, seconds = ledger_views(lake, 0)["user_profile"]
    assert (plan, reason) == (INCREMENTAL, profile.reason) and seconds > 0
    assert store.costs("user_profile") == {}  # a process's first maintenance of a view also warms the JVM up: not a measure
    p.process_lines(1, [(dbz("c", 4, star("bob", "pond")), at("stars"))])
    measured = store.costs("user_profile")[INCREMENTAL]
    assert len(measured) == 1 and measured[0][0] == 1  # (keys, seconds) of that batch, kept for the next choices

    # Say its keys had cost far more than the prior (a view of large groups): the next choice is a whole recompute.
    store.measured("user_profile", INCREMENTAL, [(2, 100.0)] * 3)
    p = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=store)  # a new process reads the state
    second = p.process_lines(2, [(dbz("c", 5, star("ann", "lake")), at("stars")), (dbz("c", 6, star("bob", "lake")), at("stars"))])
    profile = second.views["user_profile"]
    assert profile.plan == WHOLE and profile.note.startswith("recomputed in full: whole ~"), profile
    assert "incremental calibrated x" in profile.reason and "over 3 batches" in profile.reason
    assert (profile.upserts, profile.deletes) == (2, 0)
    assert ledger_views(lake, 2)["user_profile"][:2] == (WHOLE, profile.reason)
    third = p.process_lines(3, [(dbz("d", 7, None, before=star("bob", "lake")), at("stars"))])
    assert third.views["user_profile"].plan == WHOLE and third.views["user_profile"].upserts == 1
    assert store.costs("user_profile")[WHOLE] == [(2, pytest.approx(third.views["user_profile"].seconds, abs=1))]  # the view's rows
    assert_views_are_fresh(lake, p)

    # A new definition costs anew: its measurements are forgotten with its digests.
    store.attach_view(store.views["user_profile"].model_copy(update={"definition": "another definition"}))
    assert store.costs("user_profile") == {}


def test_a_ledger_made_before_the_plan_and_late_events_were_recorded_gains_their_fields(lake):
    old = ", ".join(f"{f.name}: {f.type}".replace("int64", "bigint") for f in VIEW_STRUCT if f.name in ("name", "keys", "upserts", "deletes"))
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake.names.ledger.rsplit('.', 1)[0]}")
    lake.spark.sql(f"CREATE TABLE {lake.names.ledger} (batch_id bigint, views array<struct<{old}>>) USING iceberg")
    lake.spark.sql(f"INSERT INTO {lake.names.ledger} VALUES (0, array(named_struct('name', 'v', 'keys', 1L, 'upserts', 1L, 'deletes', 0L)))")
    ensure_ledger(lake.spark, lake.names)
    ensure_ledger(lake.spark, lake.names)  # idempotent
    fields = lake.spark.table(lake.names.ledger).schema["views"].dataType.elementType.fieldNames()
    assert fields == [f.name for f in VIEW_STRUCT]
    assert lake.spark.table(lake.names.ledger).columns[-1] == "late"  # where a new ledger has it (lakemv.core.batch.records.LEDGER)
    (row,) = lake.spark.sql(f"SELECT views[0].name AS name, views[0].plan AS plan, late FROM {lake.names.ledger}").collect()
    assert (row.name, row.plan, row.late) == ("v", None, None)


@pytest.mark.slow(30)
def test_a_whole_recompute_writes_only_what_changed_and_leaves_the_state_in_step(lake, tmp_path, monkeypatch):
    """A whole recompute is diffed against the state's digests (lakemv.spark.views.whole): a changed row,
    a new key and a gone one reach the feed and the view, by a direct commit of them alone; the state
    holds the view's digests after it without reloading them."""
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_WHOLE)
    plans = [plan_view(load_views(LakeSettings().view_dirs)["user_profile"], lake.sources)]
    store = Store(tmp_path / "state.sqlite")
    p = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=store, direct=DirectWriter(lake.spark, lake.settings))
    users = {i: user(f"u{i}@x.io", f"u{i}", id=i) for i in range(1, 13)}
    assert p.process_lines(0, [(dbz("c", i, u), at("users")) for i, u in users.items()]).views["user_profile"].upserts == 12
    reloaded: list[str] = []
    reload = StoreSync.reload
    monkeypatch.setattr(StoreSync, "reload", lambda sync, name: reloaded.append(name) or reload(sync, name))
    result = p.process_lines(1, [
        (dbz("u", 20, {**users[3], "username": "tri"}, before=users[3]), at("users")),  # a changed row
        (dbz("d", 21, None, before=users[5]), at("users")),  # a gone key
        (dbz("c", 22, user("new@x.io", "new", id=99)), at("users")),  # a new key
        (dbz("c", 23, star("u7", "pond")), at("stars")),  # a changed row through a join
    ])  # fmt: skip
    profile = result.views["user_profile"]
    assert profile.plan == WHOLE and (profile.upserts, profile.deletes) == (3, 1), profile
    assert "view:user_profile" not in reloaded
    feed = lake.spark.table(lake.names.view_changes("user_profile")).where("batch_id = 1").collect()
    assert sorted((r.email, r.op) for r in feed) == [("new@x.io", "upsert"), ("u3@x.io", "upsert"), ("u5@x.io", "delete"), ("u7@x.io", "upsert")]
    table = lake.names.view("user_profile")
    (summary,) = [r.summary for r in lake.spark.sql(f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()]
    assert (summary["added-records"], summary["added-position-deletes"]) == ("3", "3"), summary  # u3, u7 replaced, u5 gone
    columns = [f.name for f in lake.spark.table(table).schema.fields]
    digests = sorted(r[0] for r in lake.spark.sql(f"SELECT {digest_sql(columns, 'v')} FROM {table} AS v").collect())
    assert sorted(store.stored_keys("user_profile")[1]) == digests and len(digests) == 12
    assert store.record("view:user_profile").snapshot == lake.spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    assert_views_are_fresh(lake, p)
    assert p.process_lines(2, [(dbz("c", 30, star("u7", "lake")), at("stars"))]).views["user_profile"].upserts == 1  # and on from there
    assert_views_are_fresh(lake, p)
