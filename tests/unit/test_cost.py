"""The cost per key `lakemv explain` predicts, from counts DuckDB takes over (here: in-memory) tables."""

from __future__ import annotations

import math

import duckdb
import pytest

from lakemv.core.planner import plan_view
from lakemv.core.planner.cost import predict, statistics
from lakemv.core.planner.explain import explain
from lakemv.workload.shapes import shape_view


@pytest.fixture
def con(sources):
    """The five source tables as DuckDB tables: 2 repos, 4 stars (3 of ann/lake), 3 users."""
    con = duckdb.connect()
    con.execute("CREATE TABLE repos (owner VARCHAR, name VARCHAR, description VARCHAR)")
    con.execute("INSERT INTO repos VALUES ('ann', 'lake', 'a'), ('bob', 'pond', 'b')")
    con.execute("CREATE TABLE stars (username VARCHAR, repo_owner VARCHAR, repo_name VARCHAR)")
    con.execute("INSERT INTO stars VALUES ('ann', 'ann', 'lake'), ('bob', 'ann', 'lake'), ('zed', 'ann', 'lake'), ('ann', 'bob', 'pond')")
    con.execute("CREATE TABLE users (email VARCHAR, username VARCHAR)")
    con.execute("INSERT INTO users VALUES ('a@x', 'ann'), ('b@x', 'bob'), ('c@x', 'cy')")
    con.execute("CREATE TABLE pull_requests (repo_owner VARCHAR, repo VARCHAR, \"index\" INT, author VARCHAR)")
    con.execute("INSERT INTO pull_requests VALUES ('ann', 'lake', 1, 'bob'), ('ann', 'lake', 2, 'bob'), ('bob', 'pond', 1, 'ann')")
    return con


def test_rows_per_key_follow_the_link_tree_down_and_keys_per_change_up(con, sources):
    plan = plan_view(shape_view("repo_fans"), sources)  # repos r <- stars s (repo) <- users u (username)
    stats = statistics(con, plan, sources)
    assert stats.rows == {"repos": 2, "stars": 4, "users": 3} and stats.keys == 2
    cost = predict(plan, stats)
    by_table = {plan.occurrence(o.occurrence).table: o for o in cost.occurrences}
    # A repository reads itself, its 4/2 = 2 stars on average, and each star's user: 3 stars of 4 have one.
    assert by_table["repos"].rows_per_key == 1.0
    assert by_table["stars"].rows_per_key == 2.0
    assert by_table["users"].rows_per_key == pytest.approx(2 * 3 / 4)
    assert cost.rows_per_key == pytest.approx(1 + 2 + 1.5)
    # A changed star reaches its one repository; a changed user its stars' repositories (3 stars / 3 users).
    assert (by_table["repos"].keys_per_change, by_table["stars"].keys_per_change) == (1.0, 1.0)
    assert by_table["users"].keys_per_change == pytest.approx(1.0)
    # A key a changed star reaches is a repository picked by its stars: (3*3 + 1*1) / 4 = 2.5 stars, whose
    # users count with their plain mean (3/4 per star); through a changed user both links are size-biased.
    assert by_table["repos"].rows_per_reached_key == pytest.approx(4.5)
    assert by_table["stars"].rows_per_reached_key == pytest.approx(1 + 2.5 + 2.5 * 3 / 4)
    assert by_table["users"].rows_per_reached_key == pytest.approx(1 + 2.5 + 2.5)


def test_a_grouped_key_reads_its_whole_group_and_explain_says_so(con, sources):
    plan = plan_view(shape_view("latest_prs"), sources)  # keyed by author, a window per author in a CTE
    stats = statistics(con, plan, sources)
    cost = predict(plan, stats)
    assert (stats.keys, cost.anchor_rows_per_key, cost.rows_per_key) == (2, 1.5, 1.5)
    assert cost.occurrences[0].rows_per_reached_key == pytest.approx((2 * 2 + 1 * 1) / 3)  # bob's 2 or ann's 1
    lines = explain(plan, stats=stats).splitlines()
    at = lines.index("cost per key - averages over the live rows now (pull_requests 3 rows; 2 keys):")
    assert lines[at + 1].split() == ["pull_requests", "p", "reads", "1.5", "rows", "per", "key;", "a", "changed", "row",
                                     "reaches", "1.0", "keys", "of", "~1.7", "rows"]  # fmt: skip
    assert lines[at + 3] == ("  a batch of 1,000 changed pull_requests rows reaches ~2.0 keys of ~1.5 rows"
                             " (each key once, however many of its rows change)")  # both authors, surely
    assert "recomputed whole when any of them changes: the cost is bounded by the group" in lines[at + 4]
    assert "cost per key: not estimated: no rows ingested yet for pull_requests: run lakemv ingest first" in explain(
        plan, stats="no rows ingested yet for pull_requests: run lakemv ingest first"
    ).splitlines()


def test_a_view_of_one_row_is_one_group_of_the_whole_table(con, sources):
    plan = plan_view(shape_view("user_totals"), sources)  # keyed by the constant 'all'
    stats = statistics(con, plan, sources)
    cost = predict(plan, stats)
    assert (stats.keys, cost.anchor_rows_per_key, cost.occurrences[0].keys_per_change) == (1, 3.0, 1.0)
    assert "  each key is a group of ~3.0 users rows, recomputed whole when any of them changes: the cost is bounded by the group" \
        in explain(plan, stats=stats).splitlines()


def test_a_batch_reaches_each_key_once_however_many_of_its_rows_change(con, sources):
    from lakemv.core.planner.cost import PROFILE, batch_estimate, key_profile

    plan = plan_view(shape_view("repo_fans"), sources)
    key_profile(con, plan)
    # per repository: its stars, their users, itself (ann/lake: 3 stars, 2 of them with a user; bob/pond: 1 and 1)
    assert sorted(con.execute(f"SELECT * FROM {PROFILE}").fetchall()) == [("ann", "lake", 3, 2, 1), ("bob", "pond", 1, 1, 1)]
    stats = statistics(con, plan, sources)
    assert batch_estimate(con, plan, stats.rows, {}) == (0.0, 0.0)
    # One changed star: ann/lake with chance 3/4 (Poisson: 1 - e^-0.75), bob/pond with 1/4.
    keys, rows = batch_estimate(con, plan, stats.rows, {"stars": 1})
    lake, pond = 1 - math.exp(-0.75), 1 - math.exp(-0.25)
    assert keys == pytest.approx(lake + pond)
    assert rows == pytest.approx((lake * 6 + pond * 3) / (lake + pond))
    # A hundred changed stars reach both repositories, each once.
    assert batch_estimate(con, plan, stats.rows, {"stars": 100})[0] == pytest.approx(2.0)


def test_a_union_all_is_costed_branch_by_branch(con, sources):
    from lakemv.core.planner.cost import trees

    plan = plan_view(shape_view("people_counts"), sources)  # stars per person UNION ALL pull requests per person
    branches = trees(plan)
    assert [[plan.occurrence(o.id).table for o in t.occurrences] for t in branches] == [["stars"], ["pull_requests", "repos"]]
    counted = [(tree, statistics(con, tree, sources)) for tree in branches]
    assert [s.keys for _, s in counted] == [3, 2]  # ann, bob, zed star; bob and ann author
    lines = explain(plan, stats=counted).splitlines()
    at = lines.index("UNION ALL branch kind = 'prs':")
    assert lines[at + 1] == "cost per key - averages over the live rows now (pull_requests 3, repos 2 rows; 2 keys):"
    assert lines[at + 2].split()[:6] == ["pull_requests", "p", "reads", "1.5", "rows", "per"]
    assert "UNION ALL branch kind = 'stars':" in lines
