"""The planner: which views it accepts, the chains it derives, the SQL it emits, and what it refuses."""

from __future__ import annotations

import re

import pytest

from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner import SELF, ViewPlan, over, plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.explain import explain
from lakemv.core.sql.viewsql import affected_key_queries, affected_keys_sql, chain_sql, diff_sql, recompute_sql


def plan_of(sources, key: str, sql: str, name: str = "v") -> ViewPlan:
    return plan_view(parse_view(f"-- @key: {key}\n{sql}", name), sources)


def chains(plan: ViewPlan) -> dict[str, list[str]]:
    """table alias -> the equalities from it up to the anchor, rendered with aliases."""
    out = {}
    for occ in plan.occurrences:
        steps = []
        for link in plan.chain(occ.id):
            child, parent = plan.occurrence(link.child).alias, plan.occurrence(link.parent).alias
            steps += [f"{over(c, child)} {op} {over(p, parent)}" for c, p, op in link.pairs]
        out[f"{occ.table} {occ.alias}"] = steps
    return out


def live(plan: ViewPlan) -> dict[str, str]:
    return {t: f"LIVE_{t}" for t in plan.tables}


def test_user_profile_chains_reach_the_email_through_non_key_joins_and_the_link_table(plans):
    plan = plans["user_profile"]
    assert plan.key_names == ("email",) and plan.occurrence(plan.anchor).table == "users"
    assert plan.columns == ("email", "username", "starred_repos", "pull_requests", "payment_verified")
    assert chains(plan) == {
        "users u": [],
        "stars s": ["s.username = u.username"],
        "repos r": ["r.owner = s.repo_owner", "r.name = s.repo_name", "s.username = u.username"],
        "pull_requests pull_requests": ["pull_requests.author = u.username"],
        "payment_info p": ["p.user_id = u.id"],
    }


def test_repo_summary_chains_include_the_correlated_owner_lookup(plans):
    plan = plans["repo_summary"]
    assert plan.key_names == ("owner", "name") and plan.occurrence(plan.anchor).table == "repos"
    assert chains(plan) == {
        "repos r": [],
        "stars stars": ["stars.repo_owner = r.owner", "stars.repo_name = r.name"],
        "pull_requests pull_requests": ["pull_requests.repo_owner = r.owner", "pull_requests.repo = r.name"],
        "users u": ["u.username = r.owner"],
    }


def test_affected_keys_sql_joins_changed_rows_up_through_live_tables(plans):
    plan = plans["user_profile"]
    repos = next(o for o in plan.occurrences if o.table == "repos")
    sql = chain_sql(plan, repos.id, "DELTA_repos", live(plan))
    # a changed repo -> the stars that point at it -> the users who starred it -> their emails
    assert sql == (
        "SELECT x2.email AS `email` FROM DELTA_repos AS x0 "
        "JOIN LIVE_stars AS x1 ON x0.owner = x1.repo_owner AND x0.name = x1.repo_name "
        "JOIN LIVE_users AS x2 ON x1.username = x2.username"
    )
    users = plan.occurrence(plan.anchor)
    assert chain_sql(plan, users.id, "DELTA_users", live(plan)) == (
        "SELECT x0.email AS `email` FROM DELTA_users AS x0"
    )
    both = affected_keys_sql(plan, live(plan), {"repos": "DELTA_repos", "users": "DELTA_users"})
    assert both.count(" UNION ") == 1 and "UNION ALL" not in both  # UNION: distinct keys
    one = affected_keys_sql(plan, live(plan), {"payment_info": "DELTA_payment_info"})
    assert one.startswith("SELECT DISTINCT `email` FROM (SELECT ") and "UNION" not in one  # old and new image, one key
    assert affected_keys_sql(plan, live(plan), {"dead_letters": "X"}) is None


def test_a_link_that_carries_the_key_skips_the_lookup_of_the_anchor(plans):
    plan = plans["repo_summary"]
    stars = next(o for o in plan.occurrences if o.table == "stars")
    assert chain_sql(plan, stars.id, "D", live(plan)) == (
        "SELECT x0.repo_owner AS `owner`, x0.repo_name AS `name` FROM D AS x0 "
        "WHERE NOT x0.repo_owner IS NULL AND NOT x0.repo_name IS NULL"
    )


def test_recompute_prefilters_every_table_by_its_parent_and_backfill_reads_everything(plans):
    plan = plans["user_profile"]
    restricted = recompute_sql(plan, live(plan), "KEYS")
    assert "FROM LIVE_users AS a LEFT SEMI JOIN KEYS AS k ON k.`email` IS NOT DISTINCT FROM a.email" in restricted
    assert re.search(r"FROM LIVE_repos AS c LEFT SEMI JOIN _lmv_occ_\d+ AS p ON c.owner = p.repo_owner", restricted)
    full = recompute_sql(plan, live(plan))
    assert "SEMI JOIN" not in full and "KEYS" not in full
    diff = diff_sql(plan, live(plan), "lake.views.user_profile", "KEYS")
    assert "FULL OUTER JOIN" in diff and "n.`starred_repos` IS NOT DISTINCT FROM o.`starred_repos`" in diff


def test_live_rows_hide_tombstones(sources):
    assert live_rows_sql(TableNames("lake"), sources["users"]) == (
        "SELECT `id`, `email`, `username`, `registered_at` FROM lake.mirror.users WHERE NOT `_lmv_deleted`"
    )


@pytest.mark.parametrize(
    ("key", "sql", "expected"),
    [
        (
            "author",
            "SELECT p.author, count(*) AS prs FROM pull_requests p GROUP BY p.author",
            {"pull_requests p": []},
        ),
        (  # GROUP BY columns of tables joined by their keys (TPC-H Q3): repos by its primary key, then users by username
            "repo_owner, repo",
            "SELECT p.repo_owner, p.repo, r.description, u.email, count(*) AS prs FROM pull_requests p JOIN repos r "
            "ON r.owner = p.repo_owner AND r.name = p.repo LEFT JOIN users u ON u.username = r.owner "
            "GROUP BY p.repo_owner, p.repo, r.description, u.email",
            {"pull_requests p": [], "repos r": ["r.owner = p.repo_owner", "r.name = p.repo"], "users u": ["u.username = r.owner", "r.owner = p.repo_owner", "r.name = p.repo"]},
        ),
        (  # a windowed aggregate keyed by (entity, window): the key is an expression over the row
            "author, day",
            "SELECT p.author, date_trunc('DAY', p.created_at) AS day, count(*) AS prs FROM pull_requests p "
            "GROUP BY p.author, date_trunc('DAY', p.created_at)",
            {"pull_requests p": []},
        ),
        (
            "email",
            "SELECT u.email FROM users u WHERE EXISTS (SELECT 1 FROM stars s WHERE s.username = u.username)",
            {"users u": [], "stars s": ["s.username = u.username"]},
        ),
        (
            "email",
            "SELECT u.email FROM users u WHERE u.username IN (SELECT author FROM pull_requests WHERE status = 'open')",
            {"users u": [], "pull_requests pull_requests": ["pull_requests.author = u.username"]},
        ),
        (  # many-to-many inside a correlated subquery, joined on the primary key of the lookup
            "owner, name",
            "SELECT r.owner, r.name, (SELECT count(*) FROM stars s JOIN users u ON u.username = s.username "
            "WHERE s.repo_owner = r.owner AND s.repo_name = r.name) AS fans FROM repos r",
            {
                "repos r": [],
                "stars s": ["s.repo_owner = r.owner", "s.repo_name = r.name"],
                "users u": ["u.username = s.username", "s.repo_owner = r.owner", "s.repo_name = r.name"],
            },
        ),
        (  # a join on the joined table's full primary key keeps one row per key
            "repo_owner, repo, index",
            "SELECT p.repo_owner, p.repo, p.`index`, r.description FROM pull_requests p "
            "LEFT JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo",
            {"pull_requests p": [], "repos r": ["r.owner = p.repo_owner", "r.name = p.repo"]},
        ),
        (  # GROUP BY beyond the key: columns of the anchor row, whose primary key the key holds
            "owner, name",
            "SELECT r.owner, r.name, r.star_count, count(s.username) AS stars FROM repos r "
            "LEFT JOIN stars s ON s.repo_owner = r.owner AND s.repo_name = r.name "
            "GROUP BY r.owner, r.name, r.star_count HAVING count(s.username) > 0",
            {"repos r": [], "stars s": ["s.repo_owner = r.owner", "s.repo_name = r.name"]},
        ),
        (  # ... or expressions over the key columns
            "author",
            "SELECT p.author, upper(p.author) AS shout, count(*) AS n FROM pull_requests p GROUP BY p.author, upper(p.author)",
            {"pull_requests p": []},
        ),
        (  # SELECT DISTINCT is a GROUP BY of its outputs
            "username",
            "SELECT DISTINCT s.username FROM stars s",
            {"stars s": []},
        ),
        (
            "owner, name",
            "SELECT DISTINCT r.owner, r.name, r.description FROM repos r JOIN stars s ON s.repo_owner = r.owner AND s.repo_name = r.name",
            {"repos r": [], "stars s": ["s.repo_owner = r.owner", "s.repo_name = r.name"]},
        ),
        (  # a join on a declared unique key (users.username) matches one row; a missing middle row
            # of the LEFT JOIN chain leaves the last one unmatched
            "username, repo_owner, repo_name",
            "SELECT s.username, s.repo_owner, s.repo_name, r.description, u.email FROM stars s "
            "LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name LEFT JOIN users u ON u.username = r.owner",
            {"stars s": [], "repos r": ["r.owner = s.repo_owner", "r.name = s.repo_name"], "users u": ["u.username = r.owner", "r.owner = s.repo_owner", "r.name = s.repo_name"]},
        ),
        (  # a window partitioned by the key, in a CTE: the latest two pull requests per author
            "author",
            "WITH ranked AS (SELECT p.author, p.title, row_number() OVER (PARTITION BY p.author ORDER BY p.created_at DESC) AS rn "
            "FROM pull_requests p) SELECT author, collect_list(title) AS latest FROM ranked WHERE rn <= 2 GROUP BY author",
            {"pull_requests p": []},
        ),
        (  # ... and in a correlated subquery, partitioned by the column it is correlated on
            "email",
            "SELECT u.email, (SELECT max(t.title) FROM (SELECT p.title, p.author, rank() OVER (PARTITION BY p.author "
            "ORDER BY p.created_at DESC) AS r FROM pull_requests p) t WHERE t.author = u.username AND t.r = 1) AS last FROM users u",
            {"users u": [], "pull_requests p": ["p.author = u.username"]},
        ),
        (  # nested CTEs: a derived table passing on the GROUP BY columns of the one it selects from
            "email",
            "WITH a AS (WITH b AS (SELECT username, count(*) AS n FROM stars GROUP BY username) SELECT username, n FROM b) "
            "SELECT u.email, coalesce(a.n, 0) AS n FROM users u LEFT JOIN a ON a.username = u.username",
            {"users u": [], "stars stars": ["stars.username = u.username"]},
        ),
        (  # global totals: one row keyed by a constant, anchored at the FROM table, joins linked to it
            "scope",
            "SELECT 'stars' AS scope, count(*) AS stars, count(r.name) AS known FROM stars s "
            "LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name",
            {"stars s": [], "repos r": ["r.owner = s.repo_owner", "r.name = s.repo_name"]},
        ),
        (  # UNION ALL: a link tree per branch, the branches told apart by a constant in the key
            "kind, who",
            "SELECT 'stars' AS kind, s.username AS who, count(*) AS n FROM stars s GROUP BY s.username UNION ALL "
            "SELECT 'prs', p.author, count(*) FROM pull_requests p JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo "
            "GROUP BY p.author",
            {"stars s": [], "pull_requests p": [], "repos r": ["r.owner = p.repo_owner", "r.name = p.repo"]},
        ),
    ],
)
def test_supported_shapes(sources, key, sql, expected):
    assert chains(plan_of(sources, key, sql)) == expected


@pytest.mark.parametrize(
    ("key", "sql", "fragment", "reason"),
    [
        (
            "email",
            "SELECT u.email, count(p.title) AS n FROM users u LEFT JOIN pull_requests p "
            "ON p.created_at > u.registered_at GROUP BY u.email",
            None,
            "pull_requests p (main query) is not linked to the view key (email): `p.created_at > "
            "u.registered_at` relates tables without an equality",
        ),
        (
            "email",
            "SELECT u.email, (SELECT count(*) FROM stars) AS total FROM users u",
            None,
            "stars stars (subquery for column total) is not linked to the view key (email): nothing relates it",
        ),
        (
            "email",
            "SELECT u.email, rank() OVER (ORDER BY u.registered_at) AS r FROM users u",
            "RANK() OVER (ORDER BY u.registered_at)",
            "a window function without PARTITION BY makes every row depend on the whole table; partition the window by the view key's columns",
        ),
        (  # one change renumbers the author's other pull requests, which are other keys
            "repo_owner, repo, index",
            "SELECT p.repo_owner, p.repo, p.`index`, row_number() OVER (PARTITION BY p.author ORDER BY p.created_at) AS n "
            "FROM pull_requests p",
            "ROW_NUMBER() OVER (PARTITION BY p.author ORDER BY p.created_at)",
            "PARTITION BY must include the columns of the view key (repo_owner, repo, index), missing repo_owner, repo, index",
        ),
        (
            "email",
            "SELECT u.email, (SELECT max(t.n) FROM (SELECT s.username, row_number() OVER (PARTITION BY s.repo_name ORDER BY s.created_at) AS n "
            "FROM stars s) t WHERE t.username = u.username) AS n FROM users u",
            None,
            "PARTITION BY must include the columns of its link to the key (t.username = u.username), missing username",
        ),
        (
            "author",
            "WITH w AS (SELECT p.author, r.description, row_number() OVER (PARTITION BY p.author ORDER BY r.description) AS n "
            "FROM pull_requests p JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo) "
            "SELECT author, max(description) AS d FROM w WHERE n = 1 GROUP BY author",
            None,
            "a window function is supported over one table's rows, not a join",
        ),
        (
            "email",
            "SELECT u.email, p.title FROM users u LEFT JOIN pull_requests p ON p.author = u.username",
            "LEFT JOIN pull_requests AS p ON p.author = u.username",
            "this join can match several rows per key (email): it must equate the primary key of pull_requests",
        ),
        (
            "email",
            "WITH c AS (SELECT author, count(*) AS n FROM pull_requests GROUP BY author) "
            "SELECT u.email, max(c.author) AS a FROM users u JOIN c ON c.n = u.id GROUP BY u.email",
            None,
            "`c.n = u.id` cannot be followed: c.n is computed by an aggregate of c, not one of its GROUP BY columns",
        ),
        (
            "email",
            "WITH c AS (SELECT author, count(*) AS n FROM pull_requests GROUP BY author) "
            "SELECT u.email, c.n FROM users u LEFT JOIN c ON c.n = u.id",
            "LEFT JOIN c ON c.n = u.id",
            "this join can match several rows per key (email): it must equate its GROUP BY columns (author)",
        ),
        (
            "username, repo_owner, repo_name",
            "SELECT s.username, s.repo_owner, s.repo_name, u.email FROM stars s JOIN users u ON u.username <=> s.username",
            None,
            "it must equate the primary key of users (email) or its unique key (username) with =",  # NULLs may repeat
        ),
        (
            "owner, name",
            "SELECT r.owner, r.name, p.title FROM repos r JOIN pull_requests p ON p.repo_owner = r.owner AND p.repo = r.name",
            None,
            'If the source keeps (repo, repo_owner) unique, declare it in the source file of pull_requests: '
            'unique = [["repo", "repo_owner"]]',
        ),
        ("email", "SELECT u.email FROM users u LIMIT 10", "LIMIT 10", "LIMIT/OFFSET over a whole relation"),
        ("email", "SELECT email FROM users UNION SELECT username AS email FROM users", None,
         "UNION (without ALL) removes rows repeated across branches"),
        ("email", "SELECT email FROM users UNION ALL SELECT username AS email FROM users", None,
         "the branches of a UNION ALL could produce the same key: give every branch a constant of its own in a key column"),
        ("email", "SELECT u.email FROM users u WHERE u.email IN (SELECT email FROM users UNION ALL SELECT username FROM users)",
         None, "UNION ALL is supported as the whole view"),
        ("kind, email", "SELECT 'a' AS kind, u.email FROM users u UNION ALL SELECT 'b', p.author FROM pull_requests p", None,
         "UNION ALL branch 2: the key (email) does not include the primary key of pull_requests"),
        ("kind, email", "SELECT 'a' AS kind, u.email FROM users u UNION ALL SELECT 'b', u.email FROM users u ORDER BY email",
         None, "ORDER over a whole UNION ALL view is not supported"),
        ("email", "SELECT u.email FROM users u INTERSECT SELECT s.username FROM stars s", None,
         "INTERSECT / EXCEPT compare whole rows across tables"),
        ("email", "SELECT u.email, rand() AS r FROM users u", "RAND()", "rand() is not deterministic"),
        ("username", "SELECT u.username, u.email FROM users u", None, "does not include the primary key of users (email)"),
        ("email", "SELECT u.email FROM customers u", "customers AS u", "reads 'customers', which is not a declared source"),
        ("email", "SELECT u.email FROM users u RIGHT JOIN stars s ON s.username = u.username", None, "RIGHT OUTER JOIN"),
        ("email", "SELECT * FROM users", "*", "list the view's columns instead of *"),
        ("email", "SELECT email, upper(username) FROM users", "UPPER(username)", "output column 2 needs a name"),
        ("author", "SELECT author, status, count(*) AS n FROM pull_requests GROUP BY author, status", "pull_requests.status",
         "GROUP BY pull_requests.status is not determined by the key (author): the key does not hold the primary key of "
         "pull_requests (repo, repo_owner, index), so the rows of one key can differ in it"),
        ("author", "SELECT p.author, count(*) AS n FROM pull_requests p GROUP BY p.status", None,
         "with GROUP BY the key (author) must be among the GROUP BY columns"),
        ("owner, name", "SELECT r.owner, r.name, s.username FROM repos r JOIN stars s ON s.repo_owner = r.owner "
         "GROUP BY r.owner, r.name, s.username", "s.username",
         "GROUP BY s.username is not determined by the key (owner, name): it comes from stars s, the key from repos r, and the "
         "main query does not join s by its primary key (or a unique key) to columns the key determines"),
        ("author", "SELECT p.author, u.email, count(*) AS n FROM pull_requests p JOIN users u ON u.username <=> p.author "
         "GROUP BY p.author, u.email", "u.email", "the main query does not join u by its primary key"),
        ("author", "SELECT DISTINCT p.author, p.status FROM pull_requests p", "p.status",
         "GROUP BY p.status is not determined by the key (author)"),
        ("author", "SELECT DISTINCT ON (p.author) p.author FROM pull_requests p", None, "DISTINCT ON"),
        ("users", "SELECT count(*) AS users FROM users u", "COUNT(*) AS users",
         "an aggregate with no GROUP BY is one row, keyed by a constant: add e.g. `'all' AS scope` to its SELECT "
         "and declare `-- @key: scope` (key column 'users' is `COUNT(*)`)"),
        ("scope", "WITH c AS (SELECT u.email FROM users u) SELECT 'all' AS scope, count(*) AS n FROM c", None,
         "a view of one row (scope) reads FROM a source table directly"),
        ("email", "SELECT u.email FROM users u WHERE u.id NOT IN (SELECT p.user_id FROM payment_info p)", None,
         "depends on every row of the subquery (one NULL p.user_id makes it NULL for every key); "
         "write `NOT EXISTS (SELECT 1 FROM ... WHERE p.user_id = u.id)`"),
        ("email", "SELECT u.email, u.nope FROM users u", None, "Unknown column: nope"),
        ("id", "SELECT u.email FROM users u", None, "key column 'id' is not an output column (outputs: email)"),
    ],
)
def test_views_outside_the_class_are_refused_naming_the_fragment_and_why(sources, key, sql, fragment, reason):
    with pytest.raises(ViewDefinitionError) as info:
        plan_of(sources, key, sql)
    message = str(info.value)
    assert reason in message, message
    if fragment is not None:
        assert info.value.fragment == fragment and f"in `{fragment}`" in message


def test_a_view_may_not_shadow_a_source(sources):
    with pytest.raises(ViewDefinitionError, match="cannot have the name of a source"):
        plan_of(sources, "email", "SELECT email FROM users", name="users")


def test_explain_prints_every_chain_and_the_recompute_plan(plans):
    text = explain(plans["user_profile"], {t: f"LIVE_{t}" for t in plans["user_profile"].tables})
    lines = text.splitlines()
    assert lines[0].startswith("view user_profile")
    assert "key: email  (from users u, main query)" in lines
    assert any(
        line.strip().startswith("repos r") and "[CTE starred (as st)]" in line
        and "r.owner = s.repo_owner AND r.name = s.repo_name -> s.username = u.username -> key (u.email AS email)" in line
        for line in lines
    ), text
    assert any("payment_info p" in line and "semi-join users u ON p.user_id = u.id" in line for line in lines), text
    assert "recompute SQL (keys in relation `_lmv_keys`):" in lines
    assert "LEFT SEMI JOIN _lmv_keys AS k" in text


def test_explain_names_the_windows_a_key_recomputes_whole(sources):
    plan = plan_of(
        sources,
        "author",
        "WITH ranked AS (SELECT p.author, p.title, row_number() OVER (PARTITION BY p.author ORDER BY p.created_at DESC) AS rn "
        "FROM pull_requests p) SELECT author, collect_list(title) AS latest FROM ranked WHERE rn <= 2 GROUP BY author",
    )
    lines = explain(plan).splitlines()
    at = lines.index("windows - each partition is whole in a key's rows, so a change recomputes its partition with its key:")
    assert lines[at + 1] == "  ROW_NUMBER() OVER (PARTITION BY p.author ORDER BY p.created_at DESC)"
    assert not any(line.startswith("windows") for line in explain(plan_of(sources, "email", "SELECT u.email FROM users u")).splitlines())


def test_a_union_all_recomputes_each_key_in_its_own_branch(sources):
    plan = plan_of(
        sources, "kind, who",
        "SELECT 'stars' AS kind, s.username AS who, count(*) AS n FROM stars s GROUP BY s.username UNION ALL "
        "SELECT 'prs' AS kind, p.author AS who, count(*) AS n FROM pull_requests p GROUP BY p.author",
    )  # fmt: skip
    assert [(plan.occurrence(b.anchor).table, [k.expr for k in b.keys]) for b in plan.branches] == [
        ("stars", ["'stars'", f"{SELF}.username"]),
        ("pull_requests", ["'prs'", f"{SELF}.author"]),
    ]
    live = {t: f"LIVE_{t}" for t in plan.tables}
    sql = recompute_sql(plan, live, "_keys")
    assert "LEFT SEMI JOIN _keys AS k ON k.`kind` IS NOT DISTINCT FROM 'stars' AND k.`who` IS NOT DISTINCT FROM a.username" in sql
    assert "LEFT SEMI JOIN _keys AS k ON k.`kind` IS NOT DISTINCT FROM 'prs' AND k.`who` IS NOT DISTINCT FROM a.author" in sql
    assert " UNION ALL " in sql
    assert [q.split(" FROM ")[0] for q in affected_key_queries(plan, live, {"pull_requests": "D"})] == [
        "SELECT 'prs' AS `kind`, x0.author AS `who`"
    ]
    text = explain(plan)
    assert "key: kind, who  (from stars s, branch 1, main query; pull_requests p, branch 2, main query)" in text
    assert "  rows for the keys (pull_requests p's branch): pull_requests by (author <=> .who) (a superset, filtered by the view's SQL)" in text
    assert "  pull_requests p  up: key from ('prs', author)" in text  # the constant, read off in the driver


@pytest.mark.parametrize(
    ("condition", "factored"),
    [
        ("(a = 1 AND b = 2) OR (b = 2 AND c = 3)", "(b = 2 AND (a = 1 OR c = 3))"),
        ("(a = 1 AND b = 2) OR (a = 1 AND b = 3) OR (a = 1 AND c = 4)", "(a = 1 AND (b = 2 OR b = 3 OR c = 4))"),
        ("a = 1 OR (a = 1 AND b = 2)", "(a = 1)"),  # absorbed
        ("a = 1 OR b = 2", "a = 1 OR b = 2"),  # nothing in common
        ("x = 0 AND ((a = 1 AND (b = 2 OR c = 3)) OR (a = 1 AND d = 4))", "x = 0 AND (a = 1 AND ((b = 2 OR c = 3) OR d = 4))"),
    ],
)
def test_conjuncts_every_branch_of_an_or_repeats_are_factored_out(condition, factored):
    from sqlglot import parse_one

    from lakemv.core.planner.sqltools import factor_ors

    assert factor_ors(parse_one(condition, read="spark")).sql(dialect="spark") == factored


def test_a_join_repeated_in_every_or_branch_links_its_table(sources):
    plan = plan_of(sources, "email", "SELECT u.email, (SELECT count(*) FROM stars s WHERE (s.username = u.username AND s.repo_owner = 'a') "
                   "OR (s.username = u.username AND s.repo_name = 'b')) AS n FROM users u")  # fmt: skip
    assert chains(plan)["stars s"] == ["s.username = u.username"]


def test_not_in_over_primary_key_columns_links_like_not_exists(sources):
    """Neither side of `r.owner NOT IN (SELECT s.username ...)` can be NULL (both are primary-key
    columns), so it is NOT EXISTS (... WHERE s.username = r.owner) and links stars to the key."""
    plan = plan_of(sources, "owner, name", "SELECT r.owner, r.name FROM repos r WHERE r.owner NOT IN (SELECT s.username FROM stars s)")
    assert sorted(chains(plan)) == ["repos r", "stars s"]
    with pytest.raises(ViewDefinitionError, match="depends on every row of the subquery"):  # r.description may be NULL
        plan_of(sources, "owner, name", "SELECT r.owner, r.name FROM repos r WHERE r.description NOT IN (SELECT s.username FROM stars s)")
