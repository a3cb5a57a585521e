"""A grouped view whose group key's columns come from several tables, kept through a view of its rows at
their grain (lakemv.core.planner.grain): the shapes split, the grain found, and what stays refused."""

from __future__ import annotations

import pytest

from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner.dag import levels, plan_views
from lakemv.core.planner.definitions import ViewDefinition, parse_view
from lakemv.core.planner.explain import explain
from lakemv.workload.tpch import tpch_sources

STAR_ORIGINS = """-- @key: signup_year, owner
SELECT year(u.registered_at) AS signup_year, r.owner, count(*) AS stars
FROM stars s JOIN users u ON u.username = s.username JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
WHERE s.repo_name <> 'skip'
GROUP BY year(u.registered_at), r.owner
HAVING count(*) > 1"""

Q7 = """SELECT supp_nation, cust_nation, l_year, sum(volume) AS revenue
FROM (SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation, extract(YEAR FROM l_shipdate) AS l_year,
             l_extendedprice * (1 - l_discount) AS volume
      FROM supplier, lineitem, orders, customer, nation n1, nation n2
      WHERE s_suppkey = l_suppkey AND o_orderkey = l_orderkey AND c_custkey = o_custkey
        AND s_nationkey = n1.n_nationkey AND c_nationkey = n2.n_nationkey
        AND l_shipdate BETWEEN date '1995-01-01' AND date '1996-12-31') AS shipping
GROUP BY supp_nation, cust_nation, l_year"""


def planned(sources, **texts: str) -> dict:
    return plan_views({name: parse_view(text, name) for name, text in texts.items()}, sources)


def test_a_group_over_a_subquery_of_joined_rows_keeps_them_at_the_grain_its_joins_allow():
    plans = plan_views({"q07": ViewDefinition(name="q07", key=("supp_nation", "cust_nation", "l_year"), sql=Q7)}, tpch_sources())
    assert list(plans) == ["q07__rows", "q07"] and levels(plans) == [["q07__rows"], ["q07"]]
    rows, q07 = plans["q07__rows"], plans["q07"]
    # the line item is the one table whose rows join at most one row of every other: the supplier (first
    # in FROM) joins many line items, so it is tried and passed over
    assert rows.key_names == ("l_orderkey", "l_linenumber") and rows.occurrence(rows.anchor).table == "lineitem"
    assert rows.columns == ("supp_nation", "cust_nation", "l_year", "volume", "l_orderkey", "l_linenumber")
    assert q07.upstream == ("q07__rows",) and q07.tables == ("q07__rows",) and q07.key_names == ("supp_nation", "cust_nation", "l_year")
    assert "FROM q07__rows AS shipping" in q07.definition.sql and "SUM(shipping.volume)" in q07.definition.sql
    assert "one a row of lineitem" in (rows.definition.description or "")
    assert "level 0: q07__rows <- lineitem" in explain(q07, plans=plans)


def test_a_group_over_joins_keeps_the_columns_it_reads_at_the_grain(sources):
    plans = planned(sources, star_origins=STAR_ORIGINS)
    rows, view = plans["star_origins__rows"], plans["star_origins"]
    assert rows.key_names == ("username", "repo_name", "repo_owner") and rows.occurrence(rows.anchor).table == "stars"
    assert set(rows.columns) == {"registered_at", "owner", "username", "repo_name", "repo_owner"}
    assert "s.repo_name <> 'skip'" in rows.definition.sql  # the WHERE filters the rows; HAVING stays with the groups
    sql = view.definition.sql
    assert "FROM star_origins__rows GROUP BY YEAR(registered_at), owner HAVING COUNT(*) > 1" in sql, sql
    assert view.key_names == ("signup_year", "owner")


def test_columns_of_the_same_name_from_two_tables_are_told_apart(sources):
    text = """-- @key: name, owner
SELECT r.name, u.username AS owner, count(*) AS stars
FROM stars s JOIN users u ON u.username = s.username JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
GROUP BY r.name, u.username"""
    plans = planned(sources, fans=text)
    rows = plans["fans__rows"]  # the user's username is read as `username`; the star's, in the grain's key, is told apart
    assert set(rows.columns) == {"name", "username", "s_username", "repo_name", "repo_owner"}
    assert rows.key_names == ("s_username", "repo_name", "repo_owner")
    assert "SELECT name AS name, username AS owner, COUNT(*) AS stars FROM fans__rows" in plans["fans"].definition.sql


def test_an_inner_join_is_reordered_to_its_grain_an_outer_join_is_not(sources):
    inner = """-- @key: owner, signup_year
SELECT r.owner, year(u.registered_at) AS signup_year, count(*) AS stars
FROM users u JOIN stars s ON s.username = u.username JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
GROUP BY r.owner, year(u.registered_at)"""
    rows = planned(sources, by_owner=inner)["by_owner__rows"]
    assert rows.occurrence(rows.anchor).table == "stars"  # users first in FROM: the stars are the grain
    outer = inner.replace("JOIN stars s", "LEFT JOIN stars s")
    with pytest.raises(ViewDefinitionError, match="nor can it be kept through its rows at their grain: no table of its rows joins at most one row"):
        planned(sources, by_owner=outer)  # only users may be the grain of a LEFT JOIN's rows, and it joins many stars


def test_rows_without_a_grain_stay_refused_with_the_reason(sources):
    text = """-- @key: repo_owner, status
SELECT s.repo_owner, p.status, count(*) AS n FROM stars s JOIN pull_requests p ON p.author = s.username GROUP BY s.repo_owner, p.status"""
    with pytest.raises(ViewDefinitionError) as refused:
        planned(sources, mixed=text)
    reason = refused.value.reason
    assert reason.startswith("the key columns come from several tables (s, p)"), reason
    assert "s: this join can match several rows per key" in reason and "p: this join can match several rows per key" in reason


def test_a_taken_name_or_a_subquery_in_the_grouping_keeps_the_refusal(sources):
    with pytest.raises(ViewDefinitionError, match="a table or view is already named star_origins__rows"):
        planned(sources, star_origins=STAR_ORIGINS, star_origins__rows="-- @key: username\nSELECT username FROM users")
    text = STAR_ORIGINS.replace("count(*) AS stars", "count(*) AS stars, (SELECT count(*) FROM users) AS everyone")
    with pytest.raises(ViewDefinitionError, match="its SELECT, GROUP BY or HAVING holds a subquery"):
        planned(sources, star_origins=text)
