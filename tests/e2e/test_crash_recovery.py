"""Exactly-once under crashes: ingest SIGKILLed at every step of a batch ends equal to a crash-free run,
with the local state ahead of Iceberg, behind it, and deleted between runs.

The harness (tests/e2e/crash_harness.py) does the work; `python -m tests.e2e.crash_harness --seeds ...`
runs more inputs than the suite does.
"""

from __future__ import annotations

import pytest

from tests.e2e.crash_harness import BACKLOG_DEFERRED, BACKLOG_ROUNDS, BACKLOG_SCHEDULE, ENGINE_POINTS, POINTS, run_trial

# A kill at steps of each part of a batch: its parse, a mirror's commit, the views' keys and the
# ledger's row (`python -m tests.e2e.crash_harness` kills at every one of POINTS, for every table and
# view, the dead letters, the state of the mirrors, the feeds and the batch's end among them). The
# trials below kill at the rest: once the batch is journaled, in a view's commit and before its
# digests are in the state.
KIND_POINTS = (
    "parsed",
    "mirror:stars",
    "keys:user_profile",
    "ledger",
)
assert set(KIND_POINTS) <= set(POINTS)


@pytest.mark.slow(160)
def test_a_kill_at_each_kind_of_step_recovers_to_the_crash_free_result(tmp_path, sources):
    trial = run_trial(tmp_path, seed=2, users=80, rounds=5, sources=sources, points=KIND_POINTS)
    assert not trial.not_reached, f"crash points never reached (the schedule proves nothing there): {trial.not_reached}"
    assert sorted(k.split("@")[0] for k in trial.kills) == sorted(KIND_POINTS)
    assert trial.compared["views.user_profile__changes"] > 0 and trial.compared["dead_letters"] > 0
    assert trial.states_lost > 0  # and deleting the local state between runs changed no result


# A backlog: every run drains the landing files as one, its views holding their keys until its last
# batch (lakemv.core.batch.deferral). A kill once a held batch added a view's keys to its pending keys,
# and in the last batch before a view's digests are in the state; the local state is lost after the
# second, so the last run rebuilds it. Meanwhile repo_summary waits for a freshness budget as
# well; the last run, without the budget, catches it up. The driver parses the units here: a set-wise
# unit is journaled as the same change set (tests/integration/test_bulk_parse.py), and parsing these
# small ones in Spark cost two minutes of this test's four. The harness's `--backlog` parses them
# set-wise and kills at more steps (BACKLOG_SCHEDULE).
BACKLOG_KILLS = (("deferred:user_profile", 1), ("state:user_profile", 3))
assert set(BACKLOG_KILLS) <= set(BACKLOG_SCHEDULE)


@pytest.mark.slow(110)
def test_a_backlog_and_a_waiting_view_recover_to_the_crash_free_result(tmp_path, sources):
    trial = run_trial(
        tmp_path, seed=5, users=60, rounds=BACKLOG_ROUNDS, sources=sources, deferred=BACKLOG_DEFERRED, backlog=True,
        schedule=BACKLOG_KILLS, lose_state_every=len(BACKLOG_KILLS),
    )  # fmt: skip
    assert not trial.not_reached, trial.not_reached
    assert sorted(trial.kills) == sorted(f"{point}@{batch}" for point, batch in BACKLOG_KILLS)
    assert trial.compared["views.user_profile__changes"] > 0 and trial.compared["dead_letters"] > 0
    assert trial.compared["views.repo_summary__changes"] > 0  # the latest entry per key, equal to the view's rows
    assert trial.states_lost


# Event views (windows with lateness, enrichment as of processing, a join within a time bound): a kill
# once a batch's watermarks are journaled, and before a joined view's digests are in the state, which
# is then lost. `python -m tests.e2e.crash_harness --events 300`
# kills at every step.
EVENT_KILLS = (("journaled", 1), ("state:search_clicks", 2))


@pytest.mark.slow(120)
def test_event_views_recover_to_the_crash_free_result(tmp_path):
    trial = run_trial(tmp_path, seed=3, rounds=4, events=200, schedule=EVENT_KILLS, lose_state_every=len(EVENT_KILLS))
    assert not trial.not_reached, trial.not_reached
    assert sorted(trial.kills) == sorted(f"{point}@{batch}" for point, batch in EVENT_KILLS)
    assert trial.compared["views.search_clicks__changes"] > 0 and trial.compared["views.page_views_hourly"] > 0
    assert trial.compared["dead_letters"] > 0  # bad lines and late events
    assert trial.states_lost


# The engine state (LAKEMV_ENGINE_STATE): a kill once the views' tables are committed (their rows' places
# not yet in the state: the replay takes the commits back), the state then lost (the next run builds it
# from the mirrors, and its first unit checks what its write id committed). `python -m
# tests.e2e.crash_harness --engine` kills at every one of ENGINE_POINTS, a unit's rows in the state among them.
ENGINE_KILLS = ("views",)
assert set(ENGINE_KILLS) <= set(ENGINE_POINTS)


@pytest.mark.slow(170)
def test_the_engine_state_recovers_to_the_crash_free_result(tmp_path, sources):
    trial = run_trial(tmp_path, seed=4, users=40, rounds=3, sources=sources, points=ENGINE_KILLS, engine=True, lose_state_every=1)
    assert not trial.not_reached, f"crash points never reached (the schedule proves nothing there): {trial.not_reached}"
    assert sorted(k.split("@")[0] for k in trial.kills) == sorted(ENGINE_KILLS)
    assert trial.compared["views.user_profile"] > 0 and trial.compared["dead_letters"] > 0
    assert trial.states_lost > 0
