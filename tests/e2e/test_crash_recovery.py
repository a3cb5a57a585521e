"""Exactly-once under crashes: ingest SIGKILLed at every step of a batch ends equal to a crash-free run,
with the local state ahead of Iceberg, behind it, and deleted between runs.

The harness (tests/e2e/crash_harness.py) does the work; `python -m tests.e2e.crash_harness --seeds ...`
runs more inputs than the suite does.
"""

from __future__ import annotations

import pytest

from tests.e2e.crash_harness import POINTS, run_trial


@pytest.mark.slow(600)
def test_every_kill_point_recovers_to_the_crash_free_result(tmp_path, sources):
    trial = run_trial(tmp_path, seed=2, users=80, rounds=5, sources=sources)
    assert not trial.not_reached, f"crash points never reached (the schedule proves nothing there): {trial.not_reached}"
    assert sorted(k.split("@")[0] for k in trial.kills) == sorted(POINTS)
    assert trial.compared["views.user_profile__changes"] > 0 and trial.compared["dead_letters"] > 0
    assert trial.states_lost > 0  # and deleting the local state between runs changed no result


# A unit Spark parses (lakemv.spark.bulk) replays through the same steps; a kill at each kind of step.
SET_WISE_POINTS = ("journaled", "mirror:stars", "state:mirrors", "view:user_profile", "state:repo_summary", "ledger")


@pytest.mark.slow(200)
def test_set_wise_units_recover_to_the_crash_free_result(tmp_path, sources):
    trial = run_trial(tmp_path, seed=5, users=60, rounds=4, sources=sources, points=SET_WISE_POINTS, set_wise=True)
    assert not trial.not_reached, trial.not_reached
    assert sorted(k.split("@")[0] for k in trial.kills) == sorted(SET_WISE_POINTS)
    assert trial.compared["views.user_profile__changes"] > 0 and trial.compared["dead_letters"] > 0


# Event views (windows with lateness, enrichment as of processing, a join within a time bound): a
# kill at each kind of step. `python -m tests.e2e.crash_harness --events 300` kills at every one.
EVENT_POINTS = ("journaled", "mirror:page_views", "state:mirrors", "keys:page_views_hourly", "view:profile_viewers", "state:search_clicks", "ledger")


@pytest.mark.slow(240)
def test_event_views_recover_to_the_crash_free_result(tmp_path):
    trial = run_trial(tmp_path, seed=3, rounds=4, events=200, points=EVENT_POINTS)
    assert not trial.not_reached, trial.not_reached
    assert sorted(k.split("@")[0] for k in trial.kills) == sorted(EVENT_POINTS)
    assert trial.compared["views.search_clicks__changes"] > 0 and trial.compared["views.page_views_hourly"] > 0
    assert trial.compared["dead_letters"] > 0  # bad lines and late events
