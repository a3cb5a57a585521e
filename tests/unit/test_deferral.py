"""Freshness budgets without a JVM: the `@freshness` directive, which views may wait, when one is due,
the store's pending keys, and what `explain` and a batch line say (lakemv.core.batch.deferral)."""

from __future__ import annotations

import pytest

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.core.batch import deferral
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.plan import ledger_entry
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.explain import explain
from lakemv.core.state.layout import ViewPart
from lakemv.core.state.store import Store

PROFILE = (PROJECT_ROOT / "views" / "user_profile.sql").read_text()
SECOND = 1_000_000


def budgeted(text: str, budget: str = "30 seconds") -> str:
    return text.replace("-- @key:", f"-- @freshness: {budget}\n-- @key:", 1)


def test_the_directive_reads_a_duration_and_leaves_the_fingerprint_alone():
    plain = parse_view(PROFILE, "user_profile")
    waiting = parse_view(budgeted(PROFILE, "1 hour 30 minutes"), "user_profile")
    assert plain.freshness is None and waiting.freshness == 5_400 * SECOND
    assert waiting.fingerprint == plain.fingerprint  # a new budget does not rebuild the view
    with pytest.raises(ViewDefinitionError, match="@freshness: 'soon' is not a duration"):
        parse_view(budgeted(PROFILE, "soon"), "user_profile")
    with pytest.raises(ViewDefinitionError, match="longer than zero"):
        parse_view(budgeted(PROFILE, "0 seconds"), "user_profile")


def test_views_the_state_cannot_hold_back_are_maintained_every_batch(sources):
    profile = plan_view(parse_view(budgeted(PROFILE), "user_profile"), sources)
    assert deferral.deferrable(profile, indexed=True) and deferral.budget(profile, local_state=True) == 30 * SECOND
    assert deferral.budget(profile, local_state=False) is None
    assert "local state does not serve it" in (deferral.refusal(profile, indexed=False) or "")
    assert not deferral.deferrable(plan_view(parse_view(PROFILE, "user_profile"), sources), indexed=True)  # no budget


def test_a_view_is_due_when_the_next_batch_would_come_too_late():
    budget = 30 * SECOND
    assert deferral.due(None, 0, budget, 0)  # the state does not know what waits: at once
    assert not deferral.due(since=0, now=20 * SECOND, budget=budget, gap=5 * SECOND)
    assert deferral.due(since=0, now=26 * SECOND, budget=budget, gap=5 * SECOND)  # the next batch, at 31 s, is late
    assert deferral.due(since=0, now=30 * SECOND, budget=budget, gap=0)
    assert deferral.period([]) == deferral.period([7]) == 0
    assert deferral.period([1, 4 * SECOND, 9 * SECOND]) == 5 * SECOND
    assert deferral.waiting(0, 12 * SECOND + 400, budget) == "oldest pending 12 seconds of 30 seconds"


def test_the_store_keeps_pending_keys_until_the_view_catches_up(tmp_path):
    store = Store(tmp_path / "state.sqlite")
    part = ViewPart(view="v", key=("k",), definition="f1", located=False)
    store.attach_view(part)
    store.set_record("view:v", part.fingerprint, None, None)  # its digests loaded
    assert not store.pending("v").known and not store.knows_pending("v")  # a view new to the state: what waits is not known
    store.caught_up("v")
    assert store.knows_pending("v")
    assert store.pending("v") == deferral_pending(True, None, [])
    store.defer("v", [("b",), ("a",)], now=100)
    store.defer("v", [("a",), ("c",)], now=200)  # each key once; the oldest wait goes on
    assert store.pending("v") == deferral_pending(True, 100, [("a",), ("b",), ("c",)])
    store.close()
    store = Store(tmp_path / "state.sqlite")  # durable across a restart
    store.attach_view(part)
    assert store.pending("v").keys == [("a",), ("b",), ("c",)]
    store.caught_up("v")
    assert store.pending("v") == deferral_pending(True, None, [])
    store.defer("v", [("a",)], now=300)
    store.attach_view(part.model_copy(update={"definition": "f2"}))  # a new definition: rebuilt, nothing known
    assert not store.pending("v").known
    store.close()


def deferral_pending(known: bool, since: int | None, keys: list[tuple]):
    from lakemv.core.state.book import Pending

    return Pending(known, since, keys)


def test_explain_and_the_batch_line_say_what_waits(sources):
    profile = plan_view(parse_view(budgeted(PROFILE), "user_profile"), sources)
    assert "freshness budget 30 seconds: each batch adds the keys it reaches" in explain(profile)
    deferred = ViewResult("user_profile", 3, deferred=True, note="oldest pending 4 seconds of 30 seconds")
    maintained = ViewResult("repo_summary", 2, upserts=1)
    result = BatchResult(7, 10, 10, views={"user_profile": deferred, "repo_summary": maintained})
    assert "; user_profile 3 keys deferred (oldest pending 4 seconds of 30 seconds)" in result.describe()
    assert deferred.describe() == "user_profile: 3 keys deferred (oldest pending 4 seconds of 30 seconds)"
    entry = ledger_entry(BatchRef("s", 7), result, {}, 0, 1, 2)
    assert set(entry.views) == {"repo_summary"}  # the ledger lists what a unit maintained
