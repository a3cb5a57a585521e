"""Incremental or whole by predicted cost (lakemv.core.batch.choice): priors, calibration, the reason."""

from __future__ import annotations

import pytest

from lakemv.core.batch import choice
from lakemv.core.batch.choice import ALWAYS_WHOLE, INCREMENTAL, KEPT, PRIORS, WHOLE, Costs, Line, by_delta, choose, fit, kept

PRIOR = Line(0.25, 0.3e-3)


def test_a_line_without_observations_is_its_prior():
    assert fit(PRIOR, []) == PRIOR
    assert PRIOR.at(1_000) == pytest.approx(0.55)


def test_observations_scale_the_prior_the_newest_weighing_most():
    assert fit(PRIOR, [(1_000, 5.5)]).scale == pytest.approx((1 + 10) / 2)  # the prior (ratio 1) and one 10x batch
    older_slow = fit(PRIOR, [(1_000, 5.5), (1_000, 0.55)]).scale
    newer_slow = fit(PRIOR, [(1_000, 0.55), (1_000, 5.5)]).scale
    assert 1 < older_slow < newer_slow
    many = fit(PRIOR, [(1_000, 5.5)] * KEPT).scale
    assert 8 < many < 10  # the prior still counts, as one observation


def test_only_the_last_observations_are_kept():
    observed = []
    for n in range(KEPT + 3):
        observed = kept(observed, (n, n))
    assert observed == [(n, n) for n in range(3, KEPT + 3)]


def test_a_few_keys_stay_incremental_without_counting_the_view():
    costs = Costs(PRIORS["indexed"])

    def rows() -> int:
        raise AssertionError("the incremental prediction is below any whole recompute: no need to count")

    choice = costs.choose(100, rows)
    assert choice.plan == INCREMENTAL and choice.whole is None
    assert choice.reason == "incremental ~0.28s < any whole recompute"


def test_many_keys_of_a_small_view_are_recomputed_whole_with_both_predictions_in_the_reason():
    choice = Costs(PRIORS["indexed"]).choose(20_000, lambda: 30_000)
    assert choice.plan == WHOLE
    assert choice.reason == "whole ~2.60s for 30,000 rows < incremental ~6.25s"
    assert Costs(PRIORS["indexed"]).choose(20_000, lambda: 1_000_000).plan == INCREMENTAL  # 60.8 s whole


def test_a_view_whose_keys_cost_more_than_the_prior_turns_whole_once_measured():
    """The TPC-H case: a key reads large groups, so incremental batches cost many times the prior and a
    whole recompute is cheaper; after a few such batches the choice flips, and says it was measured."""
    costs = Costs(PRIORS["indexed"])
    assert costs.choose(2_000, lambda: 20_000).plan == INCREMENTAL  # 0.85 s < 2.0 s, by the priors
    assert costs.observe(INCREMENTAL, lambda: 2_000, 60.0) is None  # the process's first: the JVM's warm-up too, not kept
    for _ in range(3):
        costs.observe(INCREMENTAL, lambda: 2_000, 20.0)  # 23x the prior
    choice = costs.choose(2_000, lambda: 20_000)
    assert choice.plan == WHOLE and choice.incremental > 10
    assert choice.reason.endswith("; incremental calibrated x17 over 3 batches")


def test_a_refused_whole_recompute_is_never_chosen():
    choice = choose(ALWAYS_WHOLE["indexed"], 10, 1, {}, refused="events are enriched as of processing time")
    assert choice.plan == INCREMENTAL and choice.reason == "incremental: never whole, events are enriched as of processing time"


def test_the_always_whole_priors_choose_whole_for_any_batch():
    for way in ("indexed", "scan"):
        costs = Costs(ALWAYS_WHOLE[way])
        assert costs.choose(1, lambda: 10**9).plan == WHOLE
        costs.observe(WHOLE, lambda: 10, 3.0)
        assert costs.observe(WHOLE, lambda: 10, 3.0) == [(10, 3.0)]  # a prediction of 0 s is not scaled
        assert costs.choose(1, lambda: 10**9).plan == WHOLE


def test_explain_states_the_break_even_its_priors_give():
    from lakemv.core.planner.cost import break_even

    # 100k view rows: whole ~6.8 s; incremental 0.25 s + 0.3 ms per key reaches that at ~21,833 keys
    assert break_even(100_000).startswith("a batch reaching more than ~21,833 keys recomputes the view whole")
    assert Costs(PRIORS["indexed"]).choose(21_900, lambda: 100_000).plan == WHOLE
    assert Costs(PRIORS["indexed"]).choose(21_700, lambda: 100_000).plan == INCREMENTAL


def test_aggregates_follow_deltas_only_when_they_read_fewer_rows_than_their_groups():
    assert by_delta(12, 600_000)  # a changed line item against Q1's groups of 150k
    assert not by_delta(44_000, 600)  # a supplier's ~600 line items' joined rows, before and after, against small groups


def test_rows_beyond_what_a_key_reads_count_as_a_share_of_a_key():
    assert choice.sized(100, 800) == 100  # ~8 rows a key: the priors' keys
    assert choice.sized(882, 1_870_000) == 882 + (1_870_000 - 8 * 882) // choice.ROW_SHARE  # TPC-H Q21's keys
    assert choice.sized(0, 640) == 20  # a key standing for many rows: its rows alone


def test_the_engine_recomputes_whole_a_view_whose_keys_stand_for_its_tables():
    tables = {"totals": ["stars"], "profile": ["users", "stars"]}
    ways = choice.Ways.seeded(tables, view_rows={"totals": 1, "profile": 100_000}, table_rows={"stars": 190_000, "users": 100_000})
    chosen = ways.choose({"totals": 1, "profile": 1_000})
    assert chosen["totals"].plan == WHOLE  # one key reads every star
    assert chosen["profile"].plan == INCREMENTAL  # ~3 rows a key
    assert "190,000 rows" in chosen["totals"].reason


def test_the_engine_learns_a_views_rows_per_key_from_what_its_batches_gather():
    ways = choice.Ways({"v": 3.0}, {"v": 1_000_000})
    assert ways.choose({"v": 10_000})["v"].plan == INCREMENTAL
    for _ in range(6):  # its keys turn out to read ~200 rows each
        ways.observe({"v": 10_000}, {"v": 2_000_000})
    assert 190 < ways.per_key["v"] <= 200
    assert ways.choose({"v": 10_000})["v"].plan == WHOLE
    ways.observe({}, {"v": 5})  # no keys reached: nothing learnt
    assert ways.per_key["v"] > 190


def test_a_view_refused_whole_stays_incremental_whatever_it_costs():
    ways = choice.Ways({"v": 1e6}, {"v": 10}, refused={"v": "its rows settle"})
    assert ways.choose({"v": 5})["v"].plan == INCREMENTAL


def test_a_batch_that_changes_much_of_a_views_tables_recomputes_it_whole_without_reaching_keys():
    tables = {"profile": ["users", "stars", "stars"], "totals": ["stars"], "names": ["users"]}
    ways = choice.Ways.seeded(tables, view_rows={"profile": 100_000, "totals": 1, "names": 100_000}, table_rows={"stars": 190_000, "users": 100_000})
    small = ways.ahead({"stars": 500, "users": 100})
    assert {view: c.plan for view, c in small.items()} == {"profile": INCREMENTAL, "totals": INCREMENTAL, "names": INCREMENTAL}
    backlog = ways.ahead({"stars": 95_000})  # half the stars changed: gathering would read half the tables
    assert {view: c.plan for view, c in backlog.items()} == {"profile": WHOLE, "totals": WHOLE}  # names read nothing that changed
    assert "480,000 rows" in backlog["profile"].reason  # its tables' rows, a table read twice counted twice (its SQL reads it twice)
    refused = choice.Ways.seeded({"v": ["stars"]}, {"v": 10}, {"stars": 190_000}, refused={"v": "its rows settle"})
    assert refused.ahead({"stars": 190_000})["v"].plan == INCREMENTAL


def test_a_backlog_reaches_no_keys_when_every_view_recomputed_whole_costs_less_than_the_rounds():
    tables = {"profile": ["users", "stars"], "totals": ["stars"]}
    ways = choice.Ways.seeded(tables, view_rows={"profile": 100_000, "totals": 1}, table_rows={"stars": 190_000, "users": 100_000})
    entries = 1_000_000
    assert ways.batch({"stars": 500, "users": 100}, entries).plan == INCREMENTAL  # the rounds cost less than a scan and two recomputes
    backlog = ways.batch({"stars": 150_000, "users": 80_000}, entries)
    assert backlog.plan == WHOLE, backlog.reason
    assert "2 views" in backlog.reason
    assert ways.batch({}, entries).plan == INCREMENTAL  # nothing reached
    refused = choice.Ways.seeded(
        tables, {"profile": 100_000, "totals": 1}, {"stars": 190_000, "users": 100_000}, refused={"totals": "its rows settle"}
    )
    assert refused.batch({"stars": 150_000, "users": 80_000}, entries).reason == "incremental: never whole: totals"
