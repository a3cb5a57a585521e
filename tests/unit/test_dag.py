"""Views over views: dependency order, cycles refused with their path, an upstream view seen as a
table by the planner, levels, and what follows from reading a view (scans, fingerprints, SQL)."""

from __future__ import annotations

import pytest

from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner.aggregates import delta_plan
from lakemv.core.planner.dag import dependency_order, downstream, levels, plan_views, views_read
from lakemv.core.planner.definitions import parse_view
from lakemv.core.sql.viewsql import affected_keys_sql
from lakemv.core.state.layout import route
from lakemv.spark.views.upstream import images_sql

PER_USER = """-- @key: author
SELECT author, count(*) AS prs, sum(CASE WHEN status = 'merged' THEN 1 ELSE 0 END) AS merged
FROM pull_requests GROUP BY author"""
HISTOGRAM = """-- @key: prs
SELECT prs, count(*) AS users FROM user_prs GROUP BY prs"""
TOTAL = """-- @key: k
SELECT 'all' AS k, count(*) AS buckets, sum(users) AS users FROM pr_histogram"""
ENRICHED = """-- @key: email
SELECT u.email, u.username, p.prs FROM users u LEFT JOIN user_prs p ON p.author = u.username"""


def definitions(**texts: str) -> dict:
    return {name: parse_view(text, name) for name, text in texts.items()}


def test_views_are_planned_after_the_views_they_read(sources):
    views = definitions(total=TOTAL, pr_histogram=HISTOGRAM, user_prs=PER_USER, enriched=ENRICHED)
    assert dependency_order(views, sources) == ["user_prs", "enriched", "pr_histogram", "total"]
    plans = plan_views(views, sources)
    assert list(plans) == ["user_prs", "enriched", "pr_histogram", "total"]
    assert levels(plans) == [["user_prs"], ["enriched", "pr_histogram"], ["total"]]
    assert downstream(plans, "user_prs") == ["enriched", "pr_histogram", "total"]
    assert downstream(plans, "pr_histogram") == ["total"] and downstream(plans, "total") == []


def test_an_upstream_view_is_a_table_keyed_by_its_key(sources):
    plans = plan_views(definitions(user_prs=PER_USER, pr_histogram=HISTOGRAM, enriched=ENRICHED), sources)
    histogram, enriched = plans["pr_histogram"], plans["enriched"]
    assert histogram.upstream == ("user_prs",) and histogram.tables == ("user_prs",)
    (upstream,) = histogram.inputs
    assert upstream.primary_key == ("author",) and upstream.column_names == ("author", "prs", "merged")
    assert upstream.fingerprint == plans["user_prs"].fingerprint
    # a change of user_prs reaches the histogram's keys by the changed rows' own prs (old and new)
    keys = affected_keys_sql(histogram, {"user_prs": "LIVE_user_prs"}, {"user_prs": "changed"})
    assert "FROM changed AS x0" in keys and "prs" in keys
    # joined on the upstream's key: at most one row per user, so the email alone keys the view
    assert enriched.tables == ("users", "user_prs") and enriched.occurrence(enriched.anchor).table == "users"


def test_a_view_that_reads_a_view_is_rebuilt_with_it(sources):
    first = plan_views(definitions(user_prs=PER_USER, pr_histogram=HISTOGRAM), sources)
    changed = PER_USER.replace("count(*) AS prs", "count(DISTINCT repo) AS prs")
    second = plan_views(definitions(user_prs=changed, pr_histogram=HISTOGRAM), sources)
    assert first["user_prs"].fingerprint != second["user_prs"].fingerprint
    assert first["pr_histogram"].definition.fingerprint == second["pr_histogram"].definition.fingerprint
    assert first["pr_histogram"].fingerprint != second["pr_histogram"].fingerprint  # its input's rows change


def test_cycles_are_refused_with_their_path(sources):
    views = definitions(
        a="-- @key: author\nSELECT author, prs FROM b",
        b="-- @key: author\nSELECT author, prs FROM c",
        c="-- @key: author\nSELECT p.author, count(*) AS prs FROM pull_requests p JOIN a ON a.author = p.author GROUP BY p.author",
    )
    with pytest.raises(ViewDefinitionError, match=r"views read each other in a cycle: a -> b -> c -> a"):
        plan_views(views, sources)
    with pytest.raises(ViewDefinitionError, match=r"cycle: me -> me"):
        plan_views(definitions(me="-- @key: author\nSELECT author, prs FROM me"), sources)


def test_a_cte_or_a_source_of_the_same_name_is_not_a_view(sources):
    views = definitions(user_prs=PER_USER, x=(
        "-- @key: email\nWITH user_prs AS (SELECT author, count(*) AS n FROM pull_requests GROUP BY author)\n"
        "SELECT u.email, c.n FROM users u LEFT JOIN user_prs c ON c.author = u.username"
    ))
    assert views_read(views["x"], views, sources) == ()
    assert plan_views(views, sources)["x"].inputs == ()


def test_a_view_over_views_is_maintained_by_scans_and_reads_the_view_table(sources):
    plans = plan_views(definitions(user_prs=PER_USER, pr_histogram=HISTOGRAM), sources)
    found = route(plans["pr_histogram"])
    assert not found.indexed and "reads the view user_prs" in (found.reason or "")
    assert route(plans["user_prs"]).indexed
    names = TableNames("lake")
    (upstream,) = plans["pr_histogram"].inputs
    assert live_rows_sql(names, upstream) == "SELECT `author`, `prs`, `merged` FROM lake.views.user_prs WHERE TRUE"
    assert "VERSION AS OF 7" in live_rows_sql(names, upstream, 7)
    found = delta_plan(plans["pr_histogram"])  # its aggregates follow the rows of user_prs that change
    assert not isinstance(found, str) and found.keys == (("prs", "_lmv_self.prs"),), found
    signed = images_sql(names, upstream, (3, 5), "k")
    assert "SELECT v.*, 1 AS _lmv_sign FROM (SELECT `author`, `prs`, `merged` FROM lake.views.user_prs VERSION AS OF 5 WHERE" in signed
    assert "SELECT v.*, -1 AS _lmv_sign FROM (SELECT `author`, `prs`, `merged` FROM lake.views.user_prs VERSION AS OF 3 WHERE" in signed
    assert "-1 AS" not in images_sql(names, upstream, (None, 5), "k")  # the upstream's first commit: no old rows


def test_not_in_over_a_view_key_is_refused_a_view_key_may_be_null(sources):
    views = definitions(
        user_prs=PER_USER,
        quiet="-- @key: email\nSELECT u.email FROM users u WHERE u.username NOT IN (SELECT author FROM user_prs)",
    )
    with pytest.raises(ViewDefinitionError, match="NOT EXISTS"):
        plan_views(views, sources)


def test_a_view_of_one_row_is_read_by_every_key_without_an_equality(sources):
    views = definitions(
        user_prs=PER_USER,
        mean="-- @key: k\nSELECT 'all' AS k, avg(prs) AS prs FROM user_prs",
        busy="-- @key: author\nSELECT p.author, p.prs FROM user_prs p WHERE p.prs > (SELECT prs FROM mean)",
        above="-- @key: author\nSELECT p.author, p.prs - m.prs AS above FROM user_prs p CROSS JOIN mean m",
    )
    plans = plan_views(views, sources)
    inputs = {v.name: v for v in plans["busy"].inputs}
    assert inputs["mean"].single_row and inputs["mean"].unique == ((),) and not inputs["user_prs"].single_row
    for name in ("busy", "above"):
        (link,) = plans[name].links
        assert link.pairs == (("TRUE", "TRUE", "="),) and plans[name].occurrence(link.child).table == "mean"
        keys = affected_keys_sql(plans[name], {t: f"LIVE_{t}" for t in plans[name].tables}, {"mean": "changed"})
        assert "JOIN LIVE_user_prs AS x1 ON TRUE = TRUE" in keys  # a new mean reaches every author
    # a view of many rows read without an equality is still refused
    views["bad"] = parse_view("-- @key: author\nSELECT p.author FROM user_prs p WHERE p.prs > (SELECT max(prs) FROM user_prs)", "bad")
    with pytest.raises(ViewDefinitionError, match="not linked to the view key"):
        plan_views(views, sources)
